//! `/v1/namespaces/{ns}/triggers`: what makes a function run (an HTTP
//! route, a cron schedule).
//!
//! Routed, authenticated, scoped to the caller's namespace and validated
//! like every other route; a valid request answers 501 `not-implemented`
//! until the scheduler lands (issue 6), and nothing is written either way.

use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::StatusCode;
use serde::Deserialize;
use sless_domain::TriggerName;
use sless_domain::trigger::{TriggerFields, TriggerSpec};

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::functions::parse_json;
use crate::path::PathParams;

/// The body of `POST /v1/namespaces/{ns}/triggers`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTrigger {
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub name: String,
    /// The function it runs.
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub function: String,
    /// `http` or `cron`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A cron trigger's schedule (five fields), required for `cron`.
    pub schedule: Option<String>,
    /// The IANA time zone a cron schedule is read in (default UTC).
    pub timezone: Option<String>,
    /// Default true.
    pub enabled: Option<bool>,
}

/// The body of `PATCH /v1/namespaces/{ns}/triggers/{name}`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchTrigger {
    pub enabled: bool,
}

fn not_yet() -> ApiError {
    ApiError::not_implemented(
        "triggers are not implemented yet: they come with issue 6 (triggers, cron schedules and one-shot jobs); nothing was written",
    )
}

/// A trigger named in the path: a name that cannot be a trigger's is not found.
fn path_name(name: &str) -> ApiResult<TriggerName> {
    TriggerName::parse(name).map_err(|_| ApiError::not_found(format!("trigger {name:?} not found")))
}

#[utoipa::path(get, path = "/namespaces/{ns}/triggers", tag = "triggers", summary = "List triggers", params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)")), responses((status = 501, description = "Valid, but not implemented yet; nothing was written", body = crate::openapi::Problem, content_type = "application/problem+json")))]
pub async fn list(
    State(_state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<StatusCode> {
    caller.namespace(&ns)?;
    Err(not_yet())
}

#[utoipa::path(post, path = "/namespaces/{ns}/triggers", tag = "triggers", summary = "Create a trigger", params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)")), request_body = CreateTrigger, responses((status = 501, description = "Valid, but not implemented yet; nothing was written", body = crate::openapi::Problem, content_type = "application/problem+json")))]
pub async fn create(
    State(_state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    caller.namespace(&ns)?;
    let req: CreateTrigger = parse_json(&body?)?;
    TriggerSpec::parse(TriggerFields {
        name: &req.name,
        function: &req.function,
        kind: &req.kind,
        schedule: req.schedule.as_deref(),
        timezone: req.timezone.as_deref(),
        enabled: req.enabled,
    })?;
    Err(not_yet())
}

#[utoipa::path(get, path = "/namespaces/{ns}/triggers/{name}", tag = "triggers", summary = "Get a trigger", params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The trigger")), responses((status = 501, description = "Valid, but not implemented yet; nothing was written", body = crate::openapi::Problem, content_type = "application/problem+json")))]
pub async fn get(
    State(_state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    caller.namespace(&ns)?;
    path_name(&name)?;
    Err(not_yet())
}

#[utoipa::path(patch, path = "/namespaces/{ns}/triggers/{name}", tag = "triggers", summary = "Enable or disable a trigger", params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The trigger")), request_body = PatchTrigger, responses((status = 501, description = "Valid, but not implemented yet; nothing was written", body = crate::openapi::Problem, content_type = "application/problem+json")))]
pub async fn patch(
    State(_state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<StatusCode> {
    caller.namespace(&ns)?;
    path_name(&name)?;
    let _: PatchTrigger = parse_json(&body?)?;
    Err(not_yet())
}

#[utoipa::path(delete, path = "/namespaces/{ns}/triggers/{name}", tag = "triggers", summary = "Delete a trigger", params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The trigger")), responses((status = 501, description = "Valid, but not implemented yet; nothing was written", body = crate::openapi::Problem, content_type = "application/problem+json")))]
pub async fn delete(
    State(_state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<StatusCode> {
    caller.namespace(&ns)?;
    path_name(&name)?;
    Err(not_yet())
}
