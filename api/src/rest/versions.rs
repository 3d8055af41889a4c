//! Version history: `GET .../versions`, a version's files and zip, the
//! diff of two versions, and `POST .../rollback`.
//!
//! Versions are looked up in the function's stream (the source of truth,
//! and read-your-writes right after an upload); the list comes from the
//! `function_versions` read model, which also knows who uploaded each one
//! and when.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sless_api_types::Rollback;
use sless_domain::source::read_context;
use sless_domain::{Function, FunctionCommand, FunctionKey, Retention, SourceVersion};
use sless_store::eventlog::Appended;
use sless_store::readmodel;

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::command::{
    self, Answered, Current, Decided, Handler, Opened, Plan, RequestContext,
};
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::json::parse_json;
use crate::plumbing::paging::{PageQuery, PageRequest, Paged, VersionPages};
use crate::plumbing::path::{FunctionPath, PathParams};
use crate::plumbing::quota::Demand;
use crate::rest::function::{accepted, function_not_found, load, path_key, target, unchanged};
use crate::rest::openapi::IdempotencyKey;

/// Bytes of diff text one answer holds at most; files past it are listed
/// without their diff.
pub const DIFF_LIMIT: u64 = 1024 * 1024;

/// How many versions each function keeps, as this API was configured.
pub(crate) fn retention(state: &AppState) -> Retention {
    Retention {
        keep: state.keep_versions,
    }
}

/// What a new version of `size` bytes adds to its namespace's usage, for
/// the quotas: the versions retention prunes with it in the same append
/// (`pruned`) free theirs. `upload` when an upload makes it.
pub(crate) fn version_demand(
    key: &FunctionKey,
    size: u64,
    pruned: &[SourceVersion],
    upload: bool,
) -> Demand {
    let freed: Vec<u64> = pruned.iter().map(|v| v.size).collect();
    Demand::version(key.namespace.clone(), size, &freed, upload)
}

/// A function that exists, read from its stream.
pub(crate) async fn existing(state: &AppState, key: &FunctionKey) -> ApiResult<Function> {
    let f = load(state, key).await?;
    if !f.exists() {
        return Err(function_not_found(key));
    }
    Ok(f)
}

/// Version `v` (a path segment) of `f`: 404 when it is not a number, never
/// existed, or was pruned.
pub(crate) fn version_of<'f>(
    f: &'f Function,
    key: &FunctionKey,
    v: &str,
) -> ApiResult<&'f SourceVersion> {
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

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/versions", operation_id = "listFunctionVersions", tag = "versions",
    summary = "The kept versions of the function's source, newest first, a page at a time",
    description = "One page of the versions, newest first. When more follow, `next_cursor` is set \
        and a `Link: <…>; rel=\"next\"` header gives the next page's URL.",
    params(FunctionPath, VersionPages),
    responses((status = 200, description = "The versions; `live` marks the one users want running", body = crate::rest::openapi::VersionList)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    asked: PageRequest,
) -> ApiResult<Paged> {
    let key = path_key(&caller, &ns, &name)?;
    let asked = asked.read()?;
    let Json(page) = page(&state, &key, &asked.query).await?;
    asked.json(&page, page["next_cursor"].as_str())
}

/// One page of a function's versions (read with `query`) as the list shows
/// it, with `next_cursor`.
pub(crate) async fn page(
    state: &AppState,
    key: &FunctionKey,
    query: &PageQuery,
) -> ApiResult<Json<serde_json::Value>> {
    let mut function = None;
    let (rows, next) = query
        .read(
            &format!("versions/{}/{}", key.namespace, key.name),
            |k| k.parse::<u32>().is_ok_and(|v| v > 0),
            async |after, fetch| {
                // After the cursor is checked, before any row: a function
                // that is not there is 404.
                function = Some(existing(state, key).await?);
                let before = after.map(|v| v.parse::<u32>().expect("checked by read"));
                let (ns, name) = (key.namespace.as_str(), key.name.as_str());
                Ok(readmodel::version_rows(&state.pool, ns, name, before, fetch).await?)
            },
            |r| r.version.to_string(),
        )
        .await?;
    let f = function.expect("read reads the rows");
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
        "next_cursor": next,
    })))
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/versions/{version}/source", operation_id = "getFunctionVersionSource", tag = "versions",
    summary = "One version's source files",
    params(FunctionPath, ("version" = u32, Path, description = "The version number")),
    responses((status = 200, description = "The files, text inlined up to a limit", body = crate::rest::openapi::SourceView)))]
pub async fn source(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name, v)): PathParams<(String, String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let key = path_key(&caller, &ns, &name)?;
    let f = existing(&state, &key).await?;
    let version = version_of(&f, &key, &v)?;
    Ok(Json(
        crate::rest::source::files_of(&state, &key, version).await?,
    ))
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/versions/{version}/archive", operation_id = "getFunctionVersionArchive", tag = "versions",
    summary = "One version's zip, byte for byte as it was uploaded",
    params(FunctionPath, ("version" = u32, Path, description = "The version number")),
    responses((status = 200, description = "The zip: `application/zip`, or `application/octet-stream` when `Accept` asks for that and not for a zip", content(
        (crate::rest::openapi::ZipArchive = "application/zip"),
        (crate::rest::openapi::ZipArchive = "application/octet-stream")))))]
pub async fn archive(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name, v)): PathParams<(String, String, String)>,
    headers: HeaderMap,
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
        HeaderValue::from_static(archive_media_type(&headers)),
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

/// The media type a version's zip is answered as: `application/zip`,
/// unless `Accept` names `application/octet-stream` and no zip type (what a
/// client that takes bytes of any kind asks for).
fn archive_media_type(headers: &HeaderMap) -> &'static str {
    const ZIP: &str = "application/zip";
    const BYTES: &str = "application/octet-stream";
    let ranges = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .map(|r| {
            r.split(';')
                .next()
                .unwrap_or("")
                .trim()
                .to_ascii_lowercase()
        });
    let (mut zip, mut bytes) = (false, false);
    for range in ranges {
        zip |= range == ZIP || range == "application/x-zip-compressed";
        bytes |= range == BYTES;
    }
    if bytes && !zip { BYTES } else { ZIP }
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/versions/{from}/diff/{to}", operation_id = "diffFunctionVersions", tag = "versions",
    summary = "What changed from one version to another: files added, removed and modified, with unified diffs",
    params(FunctionPath, ("from" = u32, Path, description = "The version compared from"), ("to" = u32, Path, description = "The version compared to")),
    responses((status = 200, description = "The files that differ, by path", body = crate::rest::openapi::VersionDiff)))]
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

/// `POST .../rollback`: appends `FunctionRolledBack`; a worker builds (or
/// reuses the build of) that version and deploys it. Rolling back to the
/// live version answers 200 and appends nothing.
#[utoipa::path(post, path = "/namespaces/{ns}/functions/{name}/rollback", operation_id = "rollbackFunction", tag = "versions",
    summary = "Make an earlier version live again",
    params(FunctionPath, IdempotencyKey),
    request_body = Rollback,
    responses(
        (status = 200, description = "That version is live already (`unchanged`)", body = crate::rest::openapi::FunctionView),
        (status = 202, description = "Accepted: that version is deployed next", body = crate::rest::openapi::FunctionView)))]
pub async fn rollback(
    State(state): State<AppState>,
    PathParams((ns, name)): PathParams<(String, String)>,
    opened: Opened,
) -> ApiResult<Answered> {
    let key = path_key(opened.caller(), &ns, &name)?;
    let req: Rollback = parse_json(&opened.body)?;
    let mut rollback = RollBack {
        fn_url: state.fn_url.clone(),
        target: key,
        version: req.version,
    };
    command::execute(
        &state,
        &opened.ctx,
        &target(&rollback.target),
        &mut rollback,
    )
    .await
}

/// `rollback`'s command.
struct RollBack {
    fn_url: Option<std::sync::Arc<str>>,
    target: FunctionKey,
    version: u32,
}

impl Handler<Function> for RollBack {
    async fn decide(
        &mut self,
        _: &AppState,
        _: &RequestContext,
        current: Current<'_, Function>,
    ) -> ApiResult<Decided<Function>> {
        let current = current.state;
        if !current.exists() {
            return Err(function_not_found(&self.target));
        }
        let version = self.version;
        let events = current
            .decide(FunctionCommand::Rollback { version })?
            .events;
        if events.is_empty() {
            let answer = unchanged(self.fn_url.as_deref(), &self.target, current);
            return Ok(Decided::Unchanged(answer));
        }
        Ok(Decided::Append(
            Plan::new(events).reconcile(self.target.queue_key()),
        ))
    }

    fn answer(&self, after: &Function, appended: Appended) -> Answered {
        accepted(self.fn_url.as_deref(), &self.target, after, appended)
    }

    /// Whatever landed in between, the version asked for is decided on
    /// again: it names its target, not a change to what it read.
    fn depends_on(&self, _: &Function, _: &Function) -> bool {
        false
    }
}
