//! `POST /v1/namespaces/{ns}/ensure`: makes sure a namespace exists.
//!
//! Idempotent, and 200 whether the namespace is new or not. The first call
//! appends `NamespaceEnsured` to the namespace's stream (`namespace/{ns}`);
//! every later one appends nothing. Recording it once gives the audit log
//! who asked for the namespace first and when, and gives a driver that
//! must create something per namespace (a Kubernetes Namespace) an event to
//! converge on, while a client that calls `ensure` before every apply costs
//! one read and writes nothing.
//!
//! A token may ensure its own namespace only (an admin token any); another
//! namespace is 404 like everywhere else.

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde_json::json;
use sless_domain::namespace::decide_ensure;
use sless_store::eventlog::{self, NewEvent};

use crate::AppState;
use crate::auth::Caller;
use crate::command::{self, Command, RequestContext};
use crate::error::ApiResult;
use crate::path::PathParams;

#[utoipa::path(post, path = "/namespaces/{ns}/ensure", tag = "namespaces",
    summary = "Create the namespace if it does not exist (idempotent)",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)")),
    responses((status = 200, description = "The namespace exists", body = crate::openapi::Ensured)))]
pub async fn ensure(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult<(StatusCode, Json<serde_json::Value>)> {
    let namespace = caller.namespace(&ns)?;
    let mut ctx = RequestContext::new(caller, &headers, method.as_str(), uri.path(), b"")?;
    // Idempotent by nature: an Idempotency-Key adds nothing to keep.
    ctx.idempotency = None;
    let stream = namespace.stream();
    let at = eventlog::read_stream(&state.pool, &stream).await?.len() as u64;
    let answer = |created: bool| {
        json!({
            "namespace": namespace,
            "created": created,
        })
    };
    let events = decide_ensure(at);
    if events.is_empty() {
        return Ok((StatusCode::OK, Json(answer(false))));
    }
    let events = events
        .iter()
        .map(|e| NewEvent {
            event_type: e.type_name().to_owned(),
            namespace: namespace.to_string(),
            data: e.data(),
            metadata: ctx.metadata(),
        })
        .collect();
    let cmd = Command::new(stream, at, events);
    let committed = command::commit(&state, &ctx, cmd, |appended| {
        let mut body = answer(true);
        body["position"] = json!(appended.position);
        (StatusCode::OK, body)
    })
    .await;
    match committed {
        // A concurrent call ensured it first: it exists, which is all we ask.
        Err(e) if e.status == StatusCode::CONFLICT => Ok((StatusCode::OK, Json(answer(false)))),
        answer => answer.map(|(status, body)| (status, Json(body))),
    }
}
