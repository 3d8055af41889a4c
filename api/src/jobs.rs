//! `/v1/namespaces/{ns}/jobs`: one-shot runs of a function.
//!
//! Routed, authenticated, scoped to the caller's namespace and validated
//! like every other route; a valid request answers 501 `not-implemented`
//! until the job runner lands (issue 6), and nothing is written either way.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use sless_domain::JobName;
use sless_domain::job::JobSpec;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::functions::parse_json;
use crate::path::PathParams;

/// The body of `POST /v1/namespaces/{ns}/jobs`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateJob {
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub name: String,
    /// The function it runs.
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub function: String,
    /// What the handler receives as `json` (and as JSON text in `body`).
    #[serde(default)]
    pub input: serde_json::Value,
    /// How long the run may take, in seconds (default: the function's `timeout_sec`).
    pub timeout_sec: Option<u32>,
}

fn not_yet() -> ApiError {
    ApiError::not_implemented(
        "jobs are not implemented yet: they come with issue 6 (triggers, cron schedules and one-shot jobs); nothing was written",
    )
}

/// A job named in the path: a name that cannot be a job's is not found.
fn path_name(name: &str) -> ApiResult<JobName> {
    JobName::parse(name).map_err(|_| ApiError::not_found(format!("job {name:?} not found")))
}

#[utoipa::path(post, path = "/namespaces/{ns}/jobs", tag = "jobs", summary = "Create a one-shot job", params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)")), request_body = CreateJob, responses((status = 501, description = "Valid, but not implemented yet; nothing was written", body = crate::openapi::Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(_state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    caller.namespace(&ns)?;
    let req: CreateJob = parse_json(&body?)?;
    JobSpec::parse(&req.name, &req.function, req.input, req.timeout_sec)?;
    Err(not_yet())
}

#[utoipa::path(get, path = "/namespaces/{ns}/jobs/{name}", tag = "jobs", summary = "Get a job (status, output)", params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The job")), responses((status = 501, description = "Valid, but not implemented yet; nothing was written", body = crate::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(_state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    caller.namespace(&ns)?;
    path_name(&name)?;
    Err(not_yet())
}

#[utoipa::path(delete, path = "/namespaces/{ns}/jobs/{name}", tag = "jobs", summary = "Delete a job", params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The job")), responses((status = 501, description = "Valid, but not implemented yet; nothing was written", body = crate::openapi::Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(_state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    caller.namespace(&ns)?;
    path_name(&name)?;
    Err(not_yet())
}
