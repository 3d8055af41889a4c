//! One function as the routes see it: named by a request's path (another
//! user's, or a name that cannot be one, is not found), read from its
//! stream, and shown as JSON. The routes of `functions`, `upload`,
//! `versions`, `source`, `jobs` and `triggers` share it; it imports none
//! of them.

use std::collections::BTreeMap;
use std::fmt;

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use serde::Serialize;
use serde_json::json;
use sless_domain::{Function, FunctionKey, FunctionName, Phase, Runtime};
use sless_store::eventlog::{self, Appended};
use sless_store::readmodel::FunctionRow;

use crate::AppState;
use crate::auth::Caller;
use crate::command::{Answered, Target};
use crate::error::{ApiError, ApiResult};

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
    FunctionUrl { fn_url, ns, name }.to_string()
}

/// A function's read-model row as the API shows it, serialised straight
/// from the row (a list writes a page of these without building a
/// `serde_json::Value` per row).
#[derive(Serialize)]
pub(crate) struct RowView<'a> {
    namespace: &'a str,
    name: &'a str,
    runtime: Runtime,
    entrypoint: &'a str,
    memory_mb: u32,
    timeout_sec: u32,
    env_vars: &'a BTreeMap<String, String>,
    scale_to_zero_after_sec: Option<u32>,
    phase: Phase,
    instances: u32,
    version: Option<u32>,
    deployed_version: Option<u32>,
    last_error: Option<&'a str>,
    url: FunctionUrl<'a>,
    created_at: &'a DateTime<Utc>,
    updated_at: &'a DateTime<Utc>,
}

impl<'a> RowView<'a> {
    pub(crate) fn of(fn_url: Option<&'a str>, r: &'a FunctionRow) -> RowView<'a> {
        RowView {
            namespace: &r.namespace,
            name: &r.name,
            runtime: r.spec.runtime,
            entrypoint: &r.spec.entrypoint,
            memory_mb: r.spec.memory_mb,
            timeout_sec: r.spec.timeout_sec,
            env_vars: &r.spec.env_vars,
            scale_to_zero_after_sec: r.spec.scale_to_zero_after_sec,
            phase: r.phase,
            instances: u32::from(r.endpoint.is_some()),
            version: r.current_version,
            deployed_version: r.deployed_version,
            last_error: r.last_error.as_deref(),
            url: FunctionUrl {
                fn_url,
                ns: &r.namespace,
                name: &r.name,
            },
            created_at: &r.created_at,
            updated_at: &r.updated_at,
        }
    }
}

/// `function_url`, written where it is serialised.
struct FunctionUrl<'a> {
    fn_url: Option<&'a str>,
    ns: &'a str,
    name: &'a str,
}

impl fmt::Display for FunctionUrl<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let origin = self.fn_url.unwrap_or_default();
        write!(f, "{origin}/fn/{}/{}", self.ns, self.name)
    }
}

impl Serialize for FunctionUrl<'_> {
    fn serialize<S: serde::Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        s.collect_str(self)
    }
}

pub(crate) fn view_of_row(fn_url: Option<&str>, r: &FunctionRow) -> serde_json::Value {
    serde_json::to_value(RowView::of(fn_url, r)).expect("a row's view is JSON")
}

pub(crate) fn view_of_state(
    fn_url: Option<&str>,
    key: &FunctionKey,
    f: &Function,
) -> serde_json::Value {
    let spec = f.spec.as_ref();
    json!({
        "namespace": key.namespace,
        "name": key.name,
        "runtime": spec.map(|s| s.runtime),
        "entrypoint": spec.map(|s| &s.entrypoint),
        "memory_mb": spec.map(|s| s.memory_mb),
        "timeout_sec": spec.map(|s| s.timeout_sec),
        "env_vars": spec.map(|s| &s.env_vars),
        "scale_to_zero_after_sec": spec.and_then(|s| s.scale_to_zero_after_sec),
        "phase": f.phase,
        "instances": u32::from(f.endpoint.is_some()),
        "version": f.current_version,
        "deployed_version": f.deployed_version,
        "last_error": f.last_error,
        "url": function_url(fn_url, key.namespace.as_str(), key.name.as_str()),
    })
}

/// A command's answer that changes what runs: 202 with the function as it
/// will be, the event's position and where to poll.
pub(crate) fn accepted(
    fn_url: Option<&str>,
    key: &FunctionKey,
    after: &Function,
    appended: Appended,
) -> Answered {
    let mut view = view_of_state(fn_url, key, after);
    view["position"] = json!(appended.position);
    view["status_url"] = json!(function_path(key));
    Answered::new(StatusCode::ACCEPTED, view)
}

/// A command's answer that changed nothing: 200 with the function, `unchanged`.
pub(crate) fn unchanged(fn_url: Option<&str>, key: &FunctionKey, f: &Function) -> Answered {
    let mut view = view_of_state(fn_url, key, f);
    view["unchanged"] = json!(true);
    Answered::new(StatusCode::OK, view)
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
