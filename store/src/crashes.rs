//! The crashes the log recorded (`FunctionCrashed`), for the invoke proxy:
//! why a call to a function whose process just ended failed.

use chrono::{DateTime, Utc};
use sless_domain::{FunctionEvent, FunctionKey};
use sqlx::PgExecutor;

use crate::Result;

/// The newest `FunctionCrashed` of the function recorded at or after
/// `since`, if any.
pub async fn since<'e>(
    exec: impl PgExecutor<'e>,
    key: &FunctionKey,
    since: DateTime<Utc>,
) -> Result<Option<FunctionEvent>> {
    let data: Option<serde_json::Value> = sqlx::query_scalar(
        "select data from events
         where stream = $1 and type = 'FunctionCrashed' and recorded_at >= $2
         order by version desc limit 1",
    )
    .bind(key.stream())
    .bind(since)
    .fetch_optional(exec)
    .await?;
    data.map(|d| FunctionEvent::from_stored("FunctionCrashed", &d))
        .transpose()
        .map_err(|e| {
            crate::Error::Internal(format!("a FunctionCrashed event does not decode: {e}"))
        })
}
