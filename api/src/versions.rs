//! Version history: `GET .../versions`, a version's files and zip, the
//! diff of two versions, and `POST .../rollback`.
//!
//! Versions are looked up in the function's stream (the source of truth,
//! and read-your-writes right after an upload); the list comes from the
//! `function_versions` read model, which also knows who uploaded each one
//! and when.

use axum::Json;
use axum::body::{Body, Bytes};
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde::Deserialize;
use serde_json::json;
use sless_domain::source::read_context;
use sless_domain::{
    Function, FunctionCommand, FunctionEvent, FunctionKey, SourceVersion, decide, prune_versions,
};
use sless_store::queue;
use sless_store::readmodel;

use crate::AppState;
use crate::auth::Caller;
use crate::command::{self, Command, RequestContext};
use crate::error::{ApiError, ApiResult};
use crate::function::{function_not_found, function_path, load, path_key, view_of_state};
use crate::json::{Answer, parse_json};
use crate::path::PathParams;
use crate::quota::Demand;

/// Bytes of diff text one answer holds at most; files past it are listed
/// without their diff.
pub const DIFF_LIMIT: u64 = 1024 * 1024;

/// Versions retention drops once `events` are applied to `current`: adds
/// `VersionsPruned` to `events` when some go, and returns the pruned
/// numbers and the blobs to collect after the commit.
pub(crate) fn retain(
    state: &AppState,
    current: &Function,
    events: &mut Vec<FunctionEvent>,
) -> (Vec<u32>, Vec<String>) {
    let after = events.iter().fold(current.clone(), Function::evolve);
    let Some(event) = prune_versions(&after, state.keep_versions) else {
        return (Vec::new(), Vec::new());
    };
    let mut collect = Vec::new();
    let mut pruned = Vec::new();
    if let FunctionEvent::VersionsPruned { versions } = &event {
        for v in versions.iter().filter_map(|v| after.version(*v)) {
            collect.extend([v.zip_key.clone(), v.context_key.clone()]);
        }
        pruned.clone_from(versions);
    }
    events.push(event);
    (pruned, collect)
}

/// What a new version of `size` bytes adds to its namespace's usage, for
/// the quotas: retention's pruning of `pruned` (versions of `current`) in
/// the same append frees theirs. `upload` when an upload makes it.
pub(crate) fn version_demand(
    key: &FunctionKey,
    current: &Function,
    size: u64,
    pruned: &[u32],
    upload: bool,
) -> Demand {
    let freed: Vec<u64> = pruned
        .iter()
        .filter_map(|v| current.version(*v))
        .map(|v| v.size)
        .collect();
    Demand::version(key.namespace.clone(), size, &freed, upload)
}

/// A function that exists, read from its stream.
async fn existing(state: &AppState, key: &FunctionKey) -> ApiResult<Function> {
    let f = load(state, key).await?;
    if !f.exists() {
        return Err(function_not_found(key));
    }
    Ok(f)
}

/// Version `v` (a path segment) of `f`: 404 when it is not a number, never
/// existed, or was pruned.
fn version_of<'f>(f: &'f Function, key: &FunctionKey, v: &str) -> ApiResult<&'f SourceVersion> {
    let number = v.parse::<u32>().ok().filter(|n| *n >= 1);
    if let Some(found) = number.and_then(|n| f.version(n)) {
        return Ok(found);
    }
    let detail = match number {
        Some(n) if n <= f.last_version => {
            format!(
                "version {n} of function {:?} was pruned by retention",
                key.name.as_str()
            )
        }
        _ => format!(
            "function {:?} has no version {v:?} (its versions are numbered 1 to {})",
            key.name.as_str(),
            f.last_version
        ),
    };
    Err(ApiError::not_found(detail))
}

fn item(v: &readmodel::VersionRow, f: &Function) -> serde_json::Value {
    json!({
        "version": v.version,
        "sha256": v.sha256,
        "size": v.size,
        "files": v.files,
        "runtime": v.runtime,
        "uploaded_by": v.uploaded_by,
        "uploaded_at": v.uploaded_at,
        "live": f.current_version == Some(v.version),
        "deployed": f.deployed_version == Some(v.version),
    })
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/versions", tag = "versions",
    summary = "Every kept version of the function's source, newest first",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The function")),
    responses((status = 200, description = "The versions; `live` marks the one users want running", body = crate::openapi::VersionList)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let key = path_key(&caller, &ns, &name)?;
    let f = existing(&state, &key).await?;
    let rows =
        readmodel::version_rows(&state.pool, key.namespace.as_str(), key.name.as_str()).await?;
    // The read model may lag the stream by a moment: list what both know,
    // so that a pruned version never shows and a new one shows once the
    // projector has it.
    let items: Vec<_> = rows
        .iter()
        .filter(|r| f.version(r.version).is_some())
        .map(|r| item(r, &f))
        .collect();
    Ok(Json(json!({
        "namespace": key.namespace,
        "name": key.name,
        "live_version": f.current_version,
        "deployed_version": f.deployed_version,
        "retention": state.keep_versions,
        "items": items,
    })))
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/versions/{version}/source", tag = "versions",
    summary = "One version's source files",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The function"), ("version" = u32, Path, description = "The version number")),
    responses((status = 200, description = "The files, text inlined up to a limit", body = crate::openapi::SourceView)))]
pub async fn source(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name, v)): PathParams<(String, String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let key = path_key(&caller, &ns, &name)?;
    let f = existing(&state, &key).await?;
    let version = version_of(&f, &key, &v)?;
    Ok(Json(crate::source::files_of(&state, &key, version).await?))
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/versions/{version}/archive", tag = "versions",
    summary = "One version's zip, byte for byte as it was uploaded",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The function"), ("version" = u32, Path, description = "The version number")),
    responses((status = 200, description = "The zip", content_type = "application/zip", body = crate::openapi::ZipArchive)))]
pub async fn archive(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name, v)): PathParams<(String, String, String)>,
) -> ApiResult<Response> {
    let key = path_key(&caller, &ns, &name)?;
    let f = existing(&state, &key).await?;
    let version = version_of(&f, &key, &v)?;
    let zip = state.blobs.get(&version.zip_key).await?;
    let disposition = format!(
        "attachment; filename=\"{}-v{}.zip\"",
        key.name.as_str(),
        version.version
    );
    let mut res = Body::from(zip).into_response();
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/zip"),
    );
    h.insert(
        header::CONTENT_DISPOSITION,
        HeaderValue::from_str(&disposition).expect("names are DNS labels"),
    );
    h.insert(
        header::ETAG,
        HeaderValue::from_str(&format!("\"{}\"", version.sha256)).expect("hex"),
    );
    Ok(res)
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/versions/{from}/diff/{to}", tag = "versions",
    summary = "What changed from one version to another: files added, removed and modified, with unified diffs",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The function"), ("from" = u32, Path, description = "The version compared from"), ("to" = u32, Path, description = "The version compared to")),
    responses((status = 200, description = "The files that differ, by path", body = crate::openapi::VersionDiff)))]
pub async fn diff(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name, a, b)): PathParams<(String, String, String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let key = path_key(&caller, &ns, &name)?;
    let f = existing(&state, &key).await?;
    let (from, to) = (version_of(&f, &key, &a)?, version_of(&f, &key, &b)?);
    let (ca, cb) = tokio::try_join!(
        state.blobs.get(&from.context_key),
        state.blobs.get(&to.context_key)
    )?;
    let limits = state.limits;
    let diff = tokio::task::spawn_blocking(move || {
        let before = read_context(&ca, &limits)?;
        let after = read_context(&cb, &limits)?;
        Ok::<_, sless_domain::archive::ArchiveError>(sless_domain::diff::diff(
            &before.files,
            &after.files,
            DIFF_LIMIT,
        ))
    })
    .await
    .map_err(|e| ApiError::internal(format!("comparing the versions: {e}")))?
    .map_err(|e| ApiError::internal(format!("a stored build context cannot be read: {e}")))?;
    Ok(Json(json!({
        "namespace": key.namespace,
        "name": key.name,
        "from": from.version,
        "to": to.version,
        "files": diff.files,
        "truncated": diff.truncated,
        "diff_bytes": diff.diff_bytes,
        "diff_limit": DIFF_LIMIT,
    })))
}

/// The body of `POST .../rollback`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollback {
    /// The version to make live again.
    #[schema(minimum = 1)]
    pub version: u32,
}

/// `POST .../rollback`: appends `FunctionRolledBack`; a worker builds (or
/// reuses the build of) that version and deploys it. Rolling back to the
/// live version answers 200 and appends nothing.
#[utoipa::path(post, path = "/namespaces/{ns}/functions/{name}/rollback", tag = "versions",
    summary = "Make an earlier version live again",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The function"), ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, description = "Makes a retry of the same request safe: answered as the first time")),
    request_body = Rollback,
    responses(
        (status = 200, description = "That version is live already (`unchanged`)", body = crate::openapi::FunctionView),
        (status = 202, description = "Accepted: that version is deployed next", body = crate::openapi::FunctionView)))]
pub async fn rollback(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Answer> {
    let key = path_key(&caller, &ns, &name)?;
    let body = body?;
    let ctx = RequestContext::new(caller, &headers, method.as_str(), uri.path(), &body)?;
    if let Some((status, body)) = ctx.replay(&state).await? {
        return Ok((status, Json(body)));
    }
    let req: Rollback = parse_json(&body)?;
    let mut tries = 0;
    loop {
        let current = existing(&state, &key).await?;
        let command = FunctionCommand::Rollback {
            version: req.version,
        };
        let events = match decide(&current, command) {
            Ok(events) => events,
            Err(e) => {
                return command::settle(&state, &ctx, e.into())
                    .await
                    .map(|(s, b)| (s, Json(b)));
            }
        };
        if events.is_empty() {
            if let Some((status, body)) = ctx.replay(&state).await? {
                return Ok((status, Json(body)));
            }
            let mut view = view_of_state(state.fn_url.as_deref(), &key, &current);
            view["unchanged"] = json!(true);
            return Ok((StatusCode::OK, Json(view)));
        }
        let after = events.iter().fold(current.clone(), Function::evolve);
        let cmd = Command {
            stream: key.stream(),
            expected_version: current.stream_version,
            events: command::new_events(&ctx, &key, &events),
            work: Some((queue::RECONCILE_FUNCTION, key.queue_key())),
            blobs: Vec::new(),
            collect: Vec::new(),
            quota: None,
        };
        let committed = command::commit(&state, &ctx, cmd, |appended| {
            let mut view = view_of_state(state.fn_url.as_deref(), &key, &after);
            view["position"] = json!(appended.position);
            view["status_url"] = json!(function_path(&key));
            (StatusCode::ACCEPTED, view)
        })
        .await;
        match committed {
            // Whatever landed in between, the version asked for is decided
            // on again: it names its target, not a change to what it read.
            Err(e) if e.status == StatusCode::CONFLICT && tries < 4 => tries += 1,
            answer => {
                let (status, body) = answer?;
                return Ok((status, Json(body)));
            }
        }
    }
}
