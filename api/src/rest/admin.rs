//! Operations for administrators: replaying the log into the read models
//! and reconciling every function (the same as `sless replay` and `sless
//! reconcile`; see docs/operations.md).
//!
//! - `POST /v1/admin/replay` with `{"verify": bool}` (the body may be left
//!   out: a replay) starts a replay and answers 202 at once with its record;
//!   409 `conflict` while one runs.
//! - `GET /v1/admin/replay`: the last replay, running or ended: its state,
//!   progress, and at the end the checksums of each read model.
//! - `POST /v1/admin/reconcile`: enqueues a reconcile of every function,
//!   202 with how many.
//!
//! Admin tokens only: any other token gets 403 `forbidden`. (Not 404 as
//! for another user's namespace: these routes are in the OpenAPI document
//! for everyone to see, and an operator with the wrong token should be told
//! so.)
//!
//! The API does not replay itself: replay is the projector's (the API never
//! depends on it). The binary puts a `Maintenance` in `AppState` that runs
//! the projector's replay in the API's process; without one the replay
//! routes answer 501.

use std::future::Future;
use std::pin::Pin;

use axum::Json;
use axum::body::Bytes;
use axum::extract::rejection::BytesRejection;
use axum::extract::{OriginalUri, State};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::json::parse_json;

/// A boxed future, for the object-safe `Maintenance`.
pub type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// What the API asks of whoever can replay the log (the binary fills it
/// with the projector's replay).
pub trait Maintenance: Send + Sync {
    /// Starts a replay (`verify`: only compare) and returns its record as
    /// it begins, without waiting for it to end.
    fn start_replay(
        &self,
        verify: bool,
        requested_by: String,
    ) -> BoxFuture<'_, Result<ReplayView, MaintenanceError>>;

    /// The last replay, if there was one.
    fn last_replay(&self) -> BoxFuture<'_, Result<Option<ReplayView>, MaintenanceError>>;
}

/// Why a maintenance call failed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaintenanceError {
    /// A replay is running already.
    Running(String),
    /// The database could not be reached.
    Unavailable(String),
    Failed(String),
}

impl From<MaintenanceError> for ApiError {
    fn from(e: MaintenanceError) -> ApiError {
        match e {
            MaintenanceError::Running(detail) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", "Conflict", detail)
            }
            MaintenanceError::Unavailable(detail) => ApiError::unavailable(
                crate::plumbing::error::DATABASE_UNAVAILABLE,
                "Database unavailable",
                detail,
            ),
            MaintenanceError::Failed(detail) => ApiError::internal(detail),
        }
    }
}

/// A replay: what it does or did.
#[derive(Debug, Clone, PartialEq, Serialize, ToSchema)]
pub struct ReplayView {
    pub id: i64,
    /// `replay` (rebuild and swap) or `verify` (rebuild and compare).
    pub mode: String,
    /// `running`, `equal`, `differs`, `failed` or `abandoned` (its process died).
    pub state: String,
    pub requested_by: String,
    pub started_at: String,
    pub finished_at: Option<String>,
    /// Events applied to the rebuilt read models so far.
    pub applied: i64,
    /// Events up to the projector's checkpoint when it began.
    pub total: i64,
    /// The log position the rebuilt read models were brought to.
    pub position: Option<i64>,
    /// Per read model: `rebuilt` and `live` checksums and row counts, `equal`.
    #[schema(value_type = Option<Object>)]
    pub checksums: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// The body of `POST /v1/admin/replay`.
#[derive(Debug, Default, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct ReplayRequest {
    /// Only rebuild and compare checksums; change nothing.
    #[serde(default)]
    pub verify: bool,
}

/// The answer to `POST /v1/admin/reconcile`.
#[derive(Debug, Serialize, ToSchema)]
pub struct Reconciling {
    /// Functions a reconcile was enqueued for.
    pub enqueued: u64,
}

fn maintenance(state: &AppState) -> ApiResult<&dyn Maintenance> {
    state.maintenance.as_deref().ok_or_else(|| {
        ApiError::not_implemented("this process cannot replay; run `sless replay` instead")
    })
}

#[utoipa::path(post, path = "/admin/replay", operation_id = "startReplay", tag = "admin",
    summary = "Rebuild the read models from the log (admin tokens only)",
    request_body(content = Option<ReplayRequest>, description = "`{\"verify\": true}` only compares; left out, a replay"),
    responses((status = 202, description = "Started; follow it at `GET /v1/admin/replay`", body = ReplayView)))]
pub async fn start_replay(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Response> {
    caller.admin_only(&uri)?;
    let body = body?;
    let req: ReplayRequest = if body.iter().all(u8::is_ascii_whitespace) {
        ReplayRequest::default()
    } else {
        parse_json(&body)?
    };
    let view = maintenance(&state)?
        .start_replay(req.verify, caller.sub.clone())
        .await?;
    Ok((
        StatusCode::ACCEPTED,
        [(header::LOCATION, "/v1/admin/replay")],
        Json(view),
    )
        .into_response())
}

#[utoipa::path(get, path = "/admin/replay", operation_id = "getLastReplay", tag = "admin",
    summary = "The last replay: its state, progress and checksums (admin tokens only)",
    responses((status = 200, description = "The last replay", body = ReplayView)))]
pub async fn last_replay(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
) -> ApiResult<Json<ReplayView>> {
    caller.admin_only(&uri)?;
    match maintenance(&state)?.last_replay().await? {
        Some(view) => Ok(Json(view)),
        None => Err(ApiError::not_found("no replay has run")),
    }
}

#[utoipa::path(post, path = "/admin/reconcile", operation_id = "reconcileAllFunctions", tag = "admin",
    summary = "Enqueue a reconcile of every function (admin tokens only)",
    responses((status = 202, description = "Enqueued", body = Reconciling)))]
pub async fn reconcile(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
) -> ApiResult<(StatusCode, Json<Reconciling>)> {
    caller.admin_only(&uri)?;
    let enqueued = sless_store::queue::enqueue_reconcile_all(&state.pool).await?;
    Ok((StatusCode::ACCEPTED, Json(Reconciling { enqueued })))
}
