//! `GET .../invocations`: a function's invocation records (written by the
//! recorder, `crate::plumbing::recorder`), newest first, a page at a time;
//! `GET .../invocations/{id}`: one, with the lines its call printed.

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use serde_json::{Value, json};
use sless_store::function_logs::{self, Filter};
use sless_store::invocations::{self as records, Cursor, Invocation};
use uuid::Uuid;

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::path::PathParams;
use crate::rest::function::known_function;

/// `?limit=` and `?cursor=`, checked: the cursor is an invocation's.
fn page_query(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<(u32, Option<Cursor>)> {
    let q = crate::plumbing::paging::page_query(query)?;
    let cursor = q
        .cursor
        .map(|c| Cursor::decode(&c).ok_or_else(crate::plumbing::paging::bad_cursor))
        .transpose()?;
    Ok((q.limit, cursor))
}

fn view(r: &Invocation) -> Value {
    json!({
        "id": r.id,
        "namespace": r.namespace,
        "function": r.function,
        "version": r.version,
        "started_at": r.started_at,
        "duration_ms": r.duration.as_micros() as f64 / 1000.0,
        "status": r.status,
        "bytes_in": r.bytes_in,
        "bytes_out": r.bytes_out,
        "cold": r.cold,
        "error": r.error,
        "error_kind": r.error_kind,
        "request_id": r.request_id,
        "origin": r.origin,
        "run": r.run,
        "method": r.method,
        "path": r.path,
        "activation_ms": r.activation.map(|d| d.as_micros() as f64 / 1000.0),
        "instance_start_ms": r.instance_start.map(|d| d.as_micros() as f64 / 1000.0),
    })
}

/// `GET /v1/namespaces/{ns}/functions/{name}/invocations`: one page of a
/// function's records, newest first, and the cursor of the next page (null
/// on the last).
#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/invocations", operation_id = "listInvocations", tag = "functions",
    summary = "The function's invocation records, newest first",
    params(crate::plumbing::path::FunctionPath, crate::plumbing::paging::InvocationPages),
    responses((status = 200, description = "One page of records", body = crate::rest::openapi::InvocationPage)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    let (limit, after) = page_query(query)?;
    let key = known_function(&state, &caller, &ns, &name).await?;
    let mut items = records::page(
        &state.pool,
        key.namespace.as_str(),
        key.name.as_str(),
        after,
        limit + 1,
    )
    .await?;
    let next_cursor = crate::plumbing::paging::cut(&mut items, limit, |r| Cursor::of(r).encode());
    let items: Vec<Value> = items.iter().map(view).collect();
    Ok(Json(json!({ "items": items, "next_cursor": next_cursor })))
}

/// The most lines `GET …/invocations/{id}` holds.
const LINES_OF_ONE: u32 = 1000;

/// `GET /v1/namespaces/{ns}/functions/{name}/invocations/{id}`: one record
/// and what its call printed.
#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/invocations/{id}", operation_id = "getInvocation", tag = "functions",
    summary = "One invocation record and the lines its call printed",
    params(crate::plumbing::path::FunctionPath,
        ("id" = String, Path, description = "The invocation record's id")),
    responses((status = 200, description = "The record and its lines", body = sless_api_types::InvocationWithLines)))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name, id)): PathParams<(String, String, String)>,
) -> ApiResult<Json<Value>> {
    let key = known_function(&state, &caller, &ns, &name).await?;
    let missing = || ApiError::not_found(format!("no invocation {id:?} of function {name:?}"));
    let uuid = Uuid::try_parse(&id).map_err(|_| missing())?;
    let (n, f) = (key.namespace.as_str(), key.name.as_str());
    let record = records::one(&state.pool, n, f, uuid)
        .await?
        .ok_or_else(missing)?;
    let filter = Filter {
        namespace: n.to_owned(),
        function: f.to_owned(),
        invocation: Some(uuid),
        limit: LINES_OF_ONE + 1,
        ..Filter::default()
    };
    let mut lines = function_logs::page(&state.pool, &filter).await?;
    let more_lines = lines.len() > LINES_OF_ONE as usize;
    lines.truncate(LINES_OF_ONE as usize);
    let mut answer = view(&record);
    answer["lines"] = json!(
        lines
            .iter()
            .map(crate::rest::logs::view)
            .collect::<Vec<_>>()
    );
    answer["more_lines"] = json!(more_lines);
    Ok(Json(answer))
}
