//! `POST /v1/namespaces/{ns}/functions/{name}/upload`: a new version of a
//! function's source.
//!
//! The zip is checked (`archive::validate_zip`) and packed into a build
//! context before anything is stored; the namespace's quotas are checked
//! before the blobs are stored (and again, under their lock, when the event
//! is appended: see `quota`), and the blobs are stored before the event
//! that names them is appended. An upload holds its body, its files and the
//! build context in memory at once, so at most `UploadGate`'s number of
//! uploads are read and checked at a time; the others wait for a turn, and
//! one that waits too long gets 503 with `Retry-After`, its body unread.

use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, Method, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sless_domain::archive::{self, ValidArchive};
use sless_domain::{Function, FunctionCommand, FunctionEvent, UploadedSource, decide};
use sless_store::{blobs, orphans};
use tokio::sync::Semaphore;

use crate::AppState;
use crate::auth::Caller;
use crate::command::{self, Command, RequestContext};
use crate::error::{ApiError, ApiResult, QUOTA_EXCEEDED, VERSION_CONFLICT};
use crate::function::{function_not_found, function_path, load, path_key};
use crate::json::Answer;
use crate::path::PathParams;

/// How many uploads are read and checked at once, and how long one waits
/// for its turn.
#[derive(Clone)]
pub struct UploadGate {
    permits: Arc<Semaphore>,
    wait: Duration,
}

impl UploadGate {
    /// Uploads at once by default: each may hold up to about 50 MiB of zip,
    /// 250 MiB of files and their build context.
    pub const DEFAULT_CONCURRENCY: usize = 4;
    /// How long an upload waits for its turn by default.
    pub const DEFAULT_WAIT: Duration = Duration::from_secs(30);

    pub fn new(concurrency: usize, wait: Duration) -> UploadGate {
        UploadGate {
            permits: Arc::new(Semaphore::new(concurrency.max(1))),
            wait,
        }
    }

    /// The semaphore itself: a test holds its permits to fill the gate.
    pub fn permits(&self) -> &Arc<Semaphore> {
        &self.permits
    }
}

impl Default for UploadGate {
    fn default() -> Self {
        UploadGate::new(Self::DEFAULT_CONCURRENCY, Self::DEFAULT_WAIT)
    }
}

/// 503 for an upload that found no turn: it may be sent again.
fn busy(wait: Duration) -> Response {
    let retry_after = wait.as_secs().clamp(1, 60);
    let mut res = ApiError::unavailable(
        "uploads-busy",
        "Too many uploads at once",
        format!(
            "other uploads held every turn for {wait:?}; nothing was stored: send it again \
             in {retry_after} s"
        ),
    )
    .into_response();
    res.headers_mut()
        .insert(header::RETRY_AFTER, HeaderValue::from(retry_after));
    res
}

fn check_zip_content_type(headers: &HeaderMap) -> ApiResult<()> {
    let ct = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("");
    let mime = ct
        .split(';')
        .next()
        .unwrap_or("")
        .trim()
        .to_ascii_lowercase();
    if matches!(
        mime.as_str(),
        "application/zip" | "application/x-zip-compressed" | "application/octet-stream"
    ) {
        Ok(())
    } else {
        Err(ApiError::new(
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
            "Unsupported media type",
            format!(
                "upload the zip as the raw body with Content-Type: application/zip (got {ct:?})"
            ),
        )
        .with_field("Content-Type"))
    }
}

#[utoipa::path(post, path = "/namespaces/{ns}/functions/{name}/upload", tag = "functions",
    summary = "Upload the function's source as a zip; a build follows",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The function"), ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, description = "Makes a retry of the same request safe: answered as the first time")),
    request_body(content = crate::openapi::ZipArchive, content_type = "application/zip", description = "The source directory, zipped"),
    responses(
        (status = 200, description = "The same zip as the current version: nothing changed", body = crate::openapi::Uploaded),
        (status = 202, description = "Accepted: a new version, built next", body = crate::openapi::Uploaded)))]
pub async fn upload(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    req: Request,
) -> Result<Answer, Response> {
    let key = path_key(&caller, &ns, &name).map_err(IntoResponse::into_response)?;
    // The turn comes before the body is read: a waiting upload holds nothing.
    let permits = state.uploads.permits.clone();
    let Ok(Ok(_turn)) = tokio::time::timeout(state.uploads.wait, permits.acquire_owned()).await
    else {
        return Err(busy(state.uploads.wait));
    };
    accept(state, caller, key, method, uri, headers, req)
        .await
        .map_err(IntoResponse::into_response)
}

async fn accept(
    state: AppState,
    caller: Caller,
    key: sless_domain::FunctionKey,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    req: Request,
) -> ApiResult<Answer> {
    let body = Bytes::from_request(req, &state)
        .await
        .map_err(|r| match ApiError::from(r) {
            e if e.status == StatusCode::PAYLOAD_TOO_LARGE => ApiError::new(
                e.status,
                "archive-too-large",
                "Archive too large",
                format!(
                    "the upload is larger than the limit of {} bytes",
                    state.limits.max_zip_bytes
                ),
            ),
            e => e,
        })?;
    let ctx = RequestContext::new(caller, &headers, method.as_str(), uri.path(), &body)?;
    if let Some((status, body)) = ctx.replay(&state).await? {
        return Ok((status, Json(body)));
    }
    check_zip_content_type(&headers)?;
    let current = load(&state, &key).await?;
    // A deleted function keeps its last spec in the fold: not found all the same.
    let spec = current
        .spec
        .clone()
        .filter(|_| current.exists())
        .ok_or_else(|| function_not_found(&key))?;
    let limits = state.limits;
    let (archive, context, zip_bytes) =
        tokio::task::spawn_blocking(move || -> ApiResult<(ValidArchive, Bytes, Bytes)> {
            let archive = archive::validate_zip(&body, &limits)?;
            let context = archive.build_context(spec.runtime);
            Ok((archive, Bytes::from(context), body))
        })
        .await
        .map_err(|e| ApiError::internal(format!("archive check: {e}")))??;
    let context_sha256 = archive::sha256_hex(&context);
    let source = UploadedSource {
        sha256: archive.sha256.clone(),
        size: archive.size,
        files: archive.files.len() as u32,
        zip_key: blobs::zip_key(&archive.sha256),
        context_key: blobs::context_key(&context_sha256),
        context_sha256,
    };
    // The request names no version it expects. When only a worker's events (a
    // build starting, say) landed between our read and our append, decide
    // again on the newer state instead of answering 409; another upload in
    // between is a real conflict and stays one.
    let mut current = current;
    let mut stored = false;
    // The blobs this request put in the store (not there before it).
    let mut written: Vec<String> = Vec::new();
    let mut tries = 0;
    loop {
        let mut events = decide(
            &current,
            FunctionCommand::Upload {
                source: source.clone(),
            },
        )?;
        let (version, reused) = match events.first() {
            Some(FunctionEvent::FunctionUploaded(v)) => (v.clone(), false),
            // The files of a kept version: it becomes live again.
            Some(FunctionEvent::FunctionRolledBack { version }) => {
                let v = current.version(*version).cloned();
                (v.expect("decide rolls back to a kept version"), true)
            }
            _ => {
                // Identical to the current version: nothing new to store or
                // build, unless a concurrent retry of this very request made
                // that version.
                if let Some((status, body)) = ctx.replay(&state).await? {
                    return Ok((status, Json(body)));
                }
                let v = current
                    .current()
                    .expect("an identical upload has a current version");
                let body = json!({
                    "version": v.version, "sha256": v.sha256, "size": v.size, "files": v.files,
                    "unchanged": true, "status_url": function_path(&key),
                });
                return Ok((StatusCode::OK, Json(body)));
            }
        };
        let (pruned, collect) = crate::versions::retain(&state, &current, &mut events);
        // A kept version again adds nothing; a new one counts against the
        // namespace's quotas, checked before its blobs are stored so that a
        // refused upload stores nothing (and again when it commits).
        let demand = (!reused)
            .then(|| crate::versions::version_demand(&key, &current, version.size, &pruned, true));
        // The blobs go first: the event that references them must never exist without them.
        if !stored && !reused {
            if let Some(demand) = &demand
                && let Some((status, body)) = command::check_quota(&state, &ctx, demand).await?
            {
                return Ok((status, Json(body)));
            }
            // Recorded first: should the event never come, the workers'
            // orphan sweep finds the blobs by it (`sless_store::orphans`).
            orphans::record_in_flight(&state.pool, &[&source.zip_key, &source.context_key]).await?;
            for (blob, bytes, content_type) in [
                (&source.zip_key, &zip_bytes, "application/zip"),
                (&source.context_key, &context, "application/gzip"),
            ] {
                if state
                    .blobs
                    .put_if_absent(blob, bytes.clone(), content_type)
                    .await?
                {
                    written.push(blob.clone());
                }
            }
            stored = true;
        }
        let mut cmd = Command {
            blobs: vec![version.zip_key.clone(), version.context_key.clone()],
            collect,
            ..Command::new(
                key.stream(),
                current.stream_version,
                command::new_events(&ctx, &key, &events),
            )
            .reconcile(key.queue_key())
        };
        cmd.quota = demand;
        let committed = command::commit(&state, &ctx, cmd, |appended| {
            let mut body = json!({
                "version": version.version,
                "sha256": version.sha256,
                "size": version.size,
                "files": version.files,
                "position": appended.position,
                "status_url": function_path(&key),
            });
            if reused {
                body["reused"] = json!(true);
            }
            if !pruned.is_empty() {
                body["pruned"] = json!(pruned);
            }
            (StatusCode::ACCEPTED, body)
        })
        .await;

        match committed {
            Err(e) if e.kind == VERSION_CONFLICT && tries < 4 => {
                let newer = load(&state, &key).await?;
                let source_of = |f: &Function| f.current().map(|v| v.version);
                if source_of(&newer) != source_of(&current) || newer.spec != current.spec {
                    return Err(e);
                }
                tries += 1;
                current = newer;
            }
            // A pruned version's blob, the same bytes as ours, was deleted
            // between our store and our commit: store it again.
            Err(e) if e.kind == command::BLOB_COLLECTED && tries < 4 => {
                tries += 1;
                stored = false;
            }
            // Another upload took the quota's last place after our check:
            // what we stored for this one goes.
            Err(e) if e.kind == QUOTA_EXCEEDED => {
                command::collect_unused(&state, &written).await?;
                return Err(e);
            }
            answer => {
                let (status, body) = answer?;
                return Ok((status, Json(body)));
            }
        }
    }
}
