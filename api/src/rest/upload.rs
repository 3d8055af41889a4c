//! `POST /v1/namespaces/{ns}/functions/{name}/upload`: a new version of a
//! function's source.
//!
//! The zip is checked and packed into a build context in one pass
//! (`archive::pack_zip`: every entry inflated once, straight into the
//! context) before anything is stored; the namespace's quotas are checked
//! before the blobs are stored (and again, under their lock, when the event
//! is appended: see `quota`), and the blobs are stored before the event
//! that names them is appended. An upload holds its body and its build
//! context in memory at once (never its files unpacked), so at most
//! `UploadGate`'s number of
//! uploads are read and checked at a time; the others wait for a turn, and
//! one that waits too long gets 503 with `Retry-After`, its body unread.
//! Its deadline moves on while it progresses (`deadlines::while_progressing`):
//! the body while bytes keep coming, the check while entries inflate, the
//! store in proportion to the bytes stored.

use std::sync::Arc;
use std::time::Duration;

use axum::body::Bytes;
use axum::extract::{FromRequest, Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::json;
use sless_domain::archive::{self, PackedArchive};
use sless_domain::{
    Function, FunctionCommand, FunctionEvent, FunctionKey, Runtime, SourceVersion, UploadedSource,
};
use sless_store::eventlog::Appended;
use sless_store::{blobs, orphans};
use tokio::sync::Semaphore;

use crate::AppState;
use crate::plumbing::command::{
    self, Answered, Current, Decided, Handler, Plan, RequestContext, opening,
};
use crate::plumbing::deadlines::Progress;
use crate::plumbing::error::{ApiError, ApiResult, VERSION_CONFLICT};
use crate::plumbing::path::{FunctionPath, PathParams};
use crate::rest::function::{function_not_found, function_path, load, path_key, target};
use crate::rest::openapi::IdempotencyKey;

/// How many uploads are read and checked at once, and how long one waits
/// for its turn.
#[derive(Clone)]
pub struct UploadGate {
    permits: Arc<Semaphore>,
    wait: Duration,
}

impl UploadGate {
    /// Uploads at once by default: each may hold up to 50 MiB of zip and
    /// its build context (about as large for files that do not compress,
    /// far smaller for those that inflate far), and keeps a core busy while
    /// it is checked and packed.
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

/// The body is a zip sent as `application/zip` (or Windows'
/// `application/x-zip-compressed`), or as `application/octet-stream`, what
/// generated clients and most tools send bytes as; the same checks follow
/// either way. Anything else is 415.
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
                "upload the zip as the raw body with Content-Type: application/zip or \
                 application/octet-stream (got {ct:?})"
            ),
        )
        .with_field("Content-Type"))
    }
}

#[utoipa::path(post, path = "/namespaces/{ns}/functions/{name}/upload", operation_id = "uploadFunctionSource", tag = "functions",
    summary = "Upload the function's source as a zip; a build follows",
    params(FunctionPath, IdempotencyKey),
    request_body(content((crate::rest::openapi::ZipArchive = "application/zip"), (crate::rest::openapi::ZipArchive = "application/octet-stream")), description = "The source directory, zipped, as the raw body: `application/zip` or `application/octet-stream`, checked alike"),
    responses(
        (status = 200, description = "The same zip as the current version: nothing changed", body = crate::rest::openapi::Uploaded),
        (status = 202, description = "Accepted: a new version, built next", body = crate::rest::openapi::Uploaded)))]
pub async fn upload(
    State(state): State<AppState>,
    PathParams((ns, name)): PathParams<(String, String)>,
    req: Request,
) -> Result<Answered, Response> {
    let (mut head, body) = req.into_parts();
    let caller = opening::caller_of(&mut head, &state).await?;
    let key = path_key(&caller, &ns, &name).map_err(IntoResponse::into_response)?;
    // The turn comes before the body is read: a waiting upload holds nothing.
    let permits = state.uploads.permits.clone();
    let Ok(Ok(_turn)) = tokio::time::timeout(state.uploads.wait, permits.acquire_owned()).await
    else {
        return Err(busy(state.uploads.wait));
    };
    let request = Request::from_parts(head.clone(), body);
    let body = Bytes::from_request(request, &state)
        .await
        .map_err(|r| too_large(ApiError::from(r), &state).into_response())?;
    let progress = head.extensions.get::<Progress>().cloned();
    let opened = opening::open(&state, caller, &head, body).await?;
    accept(
        &state,
        key,
        &head.headers,
        &opened.ctx,
        opened.body,
        progress,
    )
    .await
    .map_err(IntoResponse::into_response)
}

/// The upload's own words for a body over the limit.
fn too_large(e: ApiError, state: &AppState) -> ApiError {
    if e.status != StatusCode::PAYLOAD_TOO_LARGE {
        return e;
    }
    ApiError::new(
        e.status,
        "archive-too-large",
        "Archive too large",
        format!(
            "the upload is larger than the limit of {} bytes",
            state.limits.max_zip_bytes
        ),
    )
}

async fn accept(
    state: &AppState,
    key: FunctionKey,
    headers: &HeaderMap,
    ctx: &RequestContext,
    body: Bytes,
    progress: Option<Progress>,
) -> ApiResult<Answered> {
    check_zip_content_type(headers)?;
    let current = load(state, &key).await?;
    // A deleted function keeps its last spec in the fold: not found all the same.
    let spec = current
        .spec
        .clone()
        .filter(|_| current.exists())
        .ok_or_else(|| function_not_found(&key))?;
    // Checked before the zip is: a stale If-Match stores nothing.
    ctx.precondition
        .check(&target(&key).what, true, current.stream_version)?;
    let limits = state.limits;
    let runtime = spec.runtime;
    let ticks = progress.clone();
    let (packed, zip) =
        tokio::task::spawn_blocking(move || -> ApiResult<(PackedArchive, Bytes)> {
            // Every chunk inflated moves the deadline on.
            let mut advanced = |_: u64| {
                if let Some(p) = &ticks {
                    p.advanced();
                }
            };
            let packed = archive::pack_zip(&body, &limits, runtime, &mut advanced)?;
            Ok((packed, body))
        })
        .await
        .map_err(|e| ApiError::internal(format!("archive check: {e}")))??;
    if let Some(p) = &progress {
        p.advanced();
    }
    let source = UploadedSource {
        sha256: packed.sha256.clone(),
        size: packed.size,
        files: packed.files as u32,
        zip_key: blobs::zip_key(&packed.sha256),
        context_key: blobs::context_key(&packed.context_sha256),
        context_sha256: packed.context_sha256,
    };
    let mut upload = Upload {
        target: key,
        runtime,
        source,
        zip,
        context: Bytes::from(packed.context),
        progress,
        stored: false,
        written: Vec::new(),
        made: None,
    };
    command::execute(state, ctx, &target(&upload.target), &mut upload).await
}

/// `upload`'s command: its archive, checked and packed for `runtime`.
struct Upload {
    target: FunctionKey,
    runtime: Runtime,
    source: UploadedSource,
    zip: Bytes,
    context: Bytes,
    /// The request's deadline, told of storing's progress.
    progress: Option<Progress>,
    /// True once the blobs are in the store.
    stored: bool,
    /// The blobs this request put in the store (not there before it).
    written: Vec<String>,
    /// The version the events make, whether it is a kept one made live
    /// again, and the versions retention prunes with it.
    made: Option<(SourceVersion, bool, Vec<u32>)>,
}

impl Upload {
    /// Stores the zip and the build context, recorded first: should the
    /// event never come, the workers' orphan sweep finds the blobs by it
    /// (`sless_store::orphans`).
    /// Both are put at once; storing has the time of a step plus
    /// `upload_per_mib` per MiB stored.
    async fn store(&mut self, state: &AppState) -> ApiResult<()> {
        let (zip_key, context_key) = (&self.source.zip_key, &self.source.context_key);
        orphans::record_in_flight(&state.pool, &[zip_key, context_key]).await?;
        if let Some(p) = &self.progress {
            let mib = (self.zip.len() + self.context.len()) as f64 / (1024.0 * 1024.0);
            p.allow(state.deadlines.upload_per_mib.mul_f64(mib));
        }
        let put = |blob: &String, bytes: &Bytes, content_type: &'static str| {
            let (blob, bytes) = (blob.clone(), bytes.clone());
            async move {
                let stored = state
                    .blobs
                    .put_if_absent(&blob, bytes, content_type)
                    .await?;
                ApiResult::Ok(stored.then_some(blob))
            }
        };
        let (zip, context) = tokio::join!(
            put(zip_key, &self.zip, "application/zip"),
            put(context_key, &self.context, "application/gzip"),
        );
        // What one of them stored is recorded even when the other failed.
        for stored in [&zip, &context] {
            if let Ok(Some(blob)) = stored {
                self.written.push(blob.clone());
            }
        }
        zip?;
        context?;
        if let Some(p) = &self.progress {
            p.advanced();
        }
        self.stored = true;
        Ok(())
    }
}

impl Handler<Function> for Upload {
    async fn decide(
        &mut self,
        state: &AppState,
        _: &RequestContext,
        current: Current<'_, Function>,
    ) -> ApiResult<Decided<Function>> {
        let current = current.state;
        match current.spec.as_ref().filter(|_| current.exists()) {
            None => return Err(function_not_found(&self.target)),
            // The build context was packed for the runtime the function had.
            Some(spec) if spec.runtime != self.runtime => {
                return Err(runtime_changed(spec.runtime));
            }
            Some(_) => {}
        }
        let source = self.source.clone();
        let retention = crate::rest::versions::retention(state);
        let decision = current.decide(FunctionCommand::Upload { source, retention })?;
        let (version, reused) = match decision.events.first() {
            Some(FunctionEvent::FunctionUploaded(v)) => (v.clone(), false),
            // The files of a kept version: it becomes live again.
            Some(FunctionEvent::FunctionRolledBack { version }) => {
                let v = current.version(*version).cloned();
                (v.expect("decide rolls back to a kept version"), true)
            }
            // Identical to the current version: nothing new to store or build.
            _ => {
                let v = current
                    .current()
                    .expect("an identical upload has a current version");
                let body = json!({
                    "version": v.version, "sha256": v.sha256, "size": v.size, "files": v.files,
                    "unchanged": true, "status_url": function_path(&self.target),
                });
                return Ok(Decided::Unchanged(Answered::new(StatusCode::OK, body)));
            }
        };
        // A kept version again adds nothing; a new one counts against the
        // namespace's quotas (less what retention prunes with it), checked
        // before its blobs are stored so that a refused upload stores
        // nothing (and again when it commits).
        let demand = (!reused).then(|| {
            crate::rest::versions::version_demand(
                &self.target,
                version.size,
                &decision.pruned,
                true,
            )
        });
        // The blobs go first: the event that references them must never exist without them.
        if !self.stored && !reused {
            if let Some(demand) = &demand {
                command::check_quota(state, demand).await?;
            }
            self.store(state).await?;
        }
        let (pruned, collect) = (decision.pruned_versions(), decision.pruned_blobs());
        let mut plan = Plan::new(decision.events).reconcile(self.target.queue_key());
        plan.blobs = vec![version.zip_key.clone(), version.context_key.clone()];
        plan.collect = collect;
        plan.quota = demand;
        self.made = Some((version, reused, pruned));
        Ok(Decided::Append(plan))
    }

    fn answer(&self, _: &Function, appended: Appended) -> Answered {
        let (version, reused, pruned) = self.made.as_ref().expect("decided before answered");
        let mut body = json!({
            "version": version.version,
            "sha256": version.sha256,
            "size": version.size,
            "files": version.files,
            "position": appended.position,
            "status_url": function_path(&self.target),
        });
        if *reused {
            body["reused"] = json!(true);
        }
        if !pruned.is_empty() {
            body["pruned"] = json!(pruned);
        }
        Answered::new(StatusCode::ACCEPTED, body)
    }

    /// Uploads do not depend on each other nor on a worker's events: one
    /// that lost a race is decided again and gets the next version number.
    /// Only a deleted function, or a runtime its context was not packed
    /// for, stops it.
    fn depends_on(&self, _: &Function, now: &Function) -> bool {
        !now.exists() || now.spec.as_ref().map(|s| s.runtime) != Some(self.runtime)
    }

    fn blobs_collected(&mut self) {
        self.stored = false;
    }

    fn stored(&self) -> &[String] {
        &self.written
    }
}

/// 409 for an upload packed for a runtime the function no longer has.
fn runtime_changed(now: Runtime) -> ApiError {
    ApiError::new(
        StatusCode::CONFLICT,
        VERSION_CONFLICT,
        "Concurrent change",
        format!(
            "the function's runtime changed to {now} while the upload was checked;              upload it again"
        ),
    )
}
