//! One function as the routes see it: named by a request's path (another
//! user's, or a name that cannot be one, is not found), read from its
//! stream, and shown as its one document, `sless_api_types::FunctionView`
//! (a list, a get and every command's answer alike). The routes of `functions`, `upload`,
//! `versions`, `source`, `jobs` and `triggers` share it; it imports none
//! of them.

use axum::http::StatusCode;
use chrono::{DateTime, SecondsFormat, Utc};
use sless_api_types::FunctionView;
use sless_domain::{Function, FunctionKey, FunctionName};
use sless_store::eventlog::{self, Appended};
use sless_store::readmodel::{self, FunctionRow};

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::command::{Answered, Target};
use crate::plumbing::error::{ApiError, ApiResult};

/// Reads a function's state from its stream (the source of truth for commands).
pub async fn load(state: &AppState, key: &FunctionKey) -> ApiResult<Function> {
    Ok(eventlog::load::<Function>(&state.pool, &key.stream())
        .await?
        .0)
}

/// The stream a command on function `key` changes.
pub(crate) fn target(key: &FunctionKey) -> Target {
    Target::of::<Function>(&key.namespace, key, key.name.as_str())
}

pub(crate) fn function_path(key: &FunctionKey) -> String {
    format!("/v1/namespaces/{}/functions/{}", key.namespace, key.name)
}

/// Where a function is invoked: on the functions' origin when the API
/// knows it (`AppState::fn_url`), else the path there.
pub(crate) fn function_url(fn_url: Option<&str>, ns: &str, name: &str) -> String {
    let origin = fn_url.unwrap_or_default();
    format!("{origin}/fn/{ns}/{name}")
}

/// A function as the API shows it: its one document, `FunctionView`, made
/// from its state (folded from its stream, or as a read-model row
/// summarises it), without the timestamps only a row knows.
fn view(fn_url: Option<&str>, ns: &str, name: &str, f: &Function) -> FunctionView {
    let spec = f.spec.as_ref();
    FunctionView {
        namespace: ns.to_owned(),
        name: name.to_owned(),
        runtime: spec.map(|s| s.runtime.to_string()),
        entrypoint: spec.map(|s| s.entrypoint.clone()),
        memory_mb: spec.map(|s| s.memory_mb),
        timeout_sec: spec.map(|s| s.timeout_sec),
        env_vars: spec.map(|s| s.env_vars.clone()),
        scale_to_zero_after_sec: spec.and_then(|s| s.scale_to_zero_after_sec),
        phase: f.phase.as_str().to_owned(),
        instances: Some(if f.endpoint.is_some() {
            f.instances()
        } else {
            0
        }),
        min_instances: spec.map(|s| s.min_instances()),
        max_instances: spec.map(|s| s.max_instances()),
        concurrency: spec.map(|s| s.concurrency()),
        in_flight: None,
        version: f.current_version,
        deployed_version: f.deployed_version,
        last_error: f.last_error.clone(),
        url: function_url(fn_url, ns, name),
        created_at: None,
        updated_at: None,
        position: None,
        unchanged: None,
        status_url: None,
    }
}

/// A function as its read-model row shows it, with when it was created
/// and last changed (RFC 3339, as they serialise).
pub(crate) fn view_of_row(fn_url: Option<&str>, r: &FunctionRow) -> FunctionView {
    let time = |t: &DateTime<Utc>| Some(t.to_rfc3339_opts(SecondsFormat::AutoSi, true));
    FunctionView {
        created_at: time(&r.created_at),
        updated_at: time(&r.updated_at),
        ..view(fn_url, &r.namespace, &r.name, &r.state())
    }
}

/// A function as its stream shows it (`f`, folded from it).
pub(crate) fn view_of_state(fn_url: Option<&str>, key: &FunctionKey, f: &Function) -> FunctionView {
    view(fn_url, key.namespace.as_str(), key.name.as_str(), f)
}

/// An answer whose body is the function `view`.
pub(crate) fn answer(status: StatusCode, view: &FunctionView) -> Answered {
    let body = serde_json::to_value(view).expect("a function's view is JSON");
    Answered::new(status, body)
}

/// A command's answer that changes what runs: 202 with the function as it
/// will be, the event's position and where to poll.
pub(crate) fn accepted(
    fn_url: Option<&str>,
    key: &FunctionKey,
    after: &Function,
    appended: Appended,
) -> Answered {
    let view = FunctionView {
        position: Some(appended.position),
        status_url: Some(function_path(key)),
        ..view_of_state(fn_url, key, after)
    };
    answer(StatusCode::ACCEPTED, &view)
}

/// A command's answer that changed nothing: 200 with the function, `unchanged`.
pub(crate) fn unchanged(fn_url: Option<&str>, key: &FunctionKey, f: &Function) -> Answered {
    let view = FunctionView {
        unchanged: Some(true),
        ..view_of_state(fn_url, key, f)
    };
    answer(StatusCode::OK, &view)
}

/// The function a path names: a name that cannot be a function's is not
/// found (a 404 never echoes the naming rules), like one that does not exist.
pub(crate) fn path_key(caller: &Caller, ns: &str, name: &str) -> ApiResult<FunctionKey> {
    let namespace = caller.namespace(ns)?;
    let name = FunctionName::parse(name)
        .map_err(|_| ApiError::not_found(format!("function {name:?} not found")))?;
    Ok(FunctionKey::new(namespace, name))
}

pub(crate) fn function_not_found(key: &FunctionKey) -> ApiError {
    ApiError::not_found(format!(
        "function {:?} not found in {}",
        key.name.as_str(),
        key.namespace
    ))
}

/// The function the caller names, when it exists (or once did, for what
/// it left behind: records, lines); 404 otherwise, and for another
/// tenant's.
pub(crate) async fn known_function(
    state: &AppState,
    caller: &Caller,
    ns: &str,
    name: &str,
) -> ApiResult<FunctionKey> {
    let namespace = caller.namespace(ns)?;
    let missing = || ApiError::not_found(format!("function {name:?} not found in {ns}"));
    let function = FunctionName::parse(name).map_err(|_| missing())?;
    let row = readmodel::function_row(&state.pool, namespace.as_str(), function.as_str()).await?;
    let key = FunctionKey::new(namespace, function);
    let exists = match row {
        Some(row) if row.state().exists() => true,
        // Not projected yet, or deleted: the log says.
        _ => eventlog::load::<sless_domain::Function>(&state.pool, &key.stream())
            .await?
            .0
            .exists(),
    };
    if exists { Ok(key) } else { Err(missing()) }
}
