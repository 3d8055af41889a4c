//! Idempotency keys: the first answer to a request, kept so that a retry with
//! the same `Idempotency-Key` gets the same answer and appends nothing.

use sqlx::{PgExecutor, Row};

use crate::Result;

/// The answer stored for a key.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredAnswer {
    /// A fingerprint of the request (method, path, body) that first used the key.
    pub request_hash: String,
    pub status: u16,
    pub body: serde_json::Value,
    /// Headers of the answer that a retry gets again (name → value).
    pub headers: serde_json::Map<String, serde_json::Value>,
}

pub async fn lookup<'e>(
    exec: impl PgExecutor<'e>,
    actor: &str,
    key: &str,
) -> Result<Option<StoredAnswer>> {
    let row = sqlx::query(
        "select request_hash, status, response, headers from idempotency_keys
         where actor = $1 and key = $2",
    )
    .bind(actor)
    .bind(key)
    .fetch_optional(exec)
    .await?;
    Ok(row.map(|r| StoredAnswer {
        request_hash: r.get("request_hash"),
        status: r.get::<i16, _>("status") as u16,
        body: r.get("response"),
        headers: match r.get::<serde_json::Value, _>("headers") {
            serde_json::Value::Object(map) => map,
            _ => Default::default(),
        },
    }))
}

/// Stores the answer; call in the transaction that appended the events. A
/// concurrent request with the same key makes this fail with a unique
/// violation (`Error::is_unique_violation`), and that request's answer stands.
pub async fn save<'e>(
    exec: impl PgExecutor<'e>,
    actor: &str,
    key: &str,
    answer: &StoredAnswer,
) -> Result<()> {
    sqlx::query(
        "insert into idempotency_keys (actor, key, request_hash, status, response, headers)
         values ($1, $2, $3, $4, $5, $6)",
    )
    .bind(actor)
    .bind(key)
    .bind(&answer.request_hash)
    .bind(answer.status as i16)
    .bind(&answer.body)
    .bind(serde_json::Value::Object(answer.headers.clone()))
    .execute(exec)
    .await?;
    Ok(())
}
