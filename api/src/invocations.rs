//! Invocation records: what every call through the invoke proxy did.
//!
//! Not yet recorded: `Recorder` accepts nothing and the route answers 501.

use axum::extract::{Path, State};
use axum::http::StatusCode;
use sless_store::PgPool;

use crate::AppState;
use crate::error::ApiError;

/// Hands invocation records to the database off the request path.
#[derive(Clone)]
pub struct Recorder {}

impl Recorder {
    pub fn new(_pool: PgPool) -> Recorder {
        Recorder {}
    }
}

/// `GET /v1/namespaces/{ns}/functions/{name}/invocations`.
pub async fn list(
    State(_state): State<AppState>,
    Path((_ns, _name)): Path<(String, String)>,
) -> Result<StatusCode, ApiError> {
    Err(ApiError::new(
        StatusCode::NOT_IMPLEMENTED,
        "not-implemented",
        "Not implemented",
        "invocation records are not kept yet",
    ))
}
