//! Invocation records: what every call through the invoke proxy did, kept
//! off the request path, and `GET .../invocations` to page through them.
//! Also the request id every answer carries (`X-Request-Id`).
//!
//! The proxy hands each record to `Recorder::record`, which puts it on a
//! bounded in-memory channel and never waits: when the channel is full the
//! record is dropped and counted (`Recorder::dropped`, and a warning with
//! the count). A writer task takes records off the channel and writes them
//! in batches, one statement per batch, when `batch_max` records have
//! gathered or `batch_wait` has passed since the first of them. The same
//! task enforces retention (`Retention`) every `Retention::every`, with
//! bounded deletes. `Recorder::shutdown` makes it write what it holds and
//! stop; dropping every `Recorder` does the same.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, Request, State};
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use chrono::Utc;
use serde_json::{Value, json};
use sless_domain::{FunctionKey, FunctionName};
use sless_store::PgPool;
use sless_store::invocations::{self as records, Cursor, Invocation};
use sless_store::{eventlog, readmodel};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use crate::AppState;
use crate::auth::Caller;
use crate::error::{ApiError, ApiResult};
use crate::path::PathParams;

/// The header that carries a request's id.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id kept from a client.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The request's id: the client's `X-Request-Id` when it sent exactly one
/// that is sane (1–128 visible ASCII characters), else a new UUIDv7. It is
/// written back into `headers`, so what runs later (event metadata, the
/// function behind the proxy) sees the same id.
pub fn request_id(headers: &mut HeaderMap) -> HeaderValue {
    let mut given = headers.get_all(&X_REQUEST_ID).iter();
    if let (Some(v), None) = (given.next(), given.next())
        && (1..=MAX_REQUEST_ID_LEN).contains(&v.len())
        && v.as_bytes().iter().all(|b| b.is_ascii_graphic())
    {
        return v.clone();
    }
    let id = HeaderValue::try_from(new_request_id()).expect("a uuid is a header value");
    headers.insert(X_REQUEST_ID, id.clone());
    id
}

/// A new request id: a UUIDv7 (time-ordered) whose random bits come from
/// the thread's generator in user space, not a `getrandom` call per request.
pub fn new_request_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    uuid::Builder::from_unix_timestamp_millis(ms, &rand::random())
        .into_uuid()
        .to_string()
}

/// Middleware: gives every request an id (`request_id`) and every answer
/// the `X-Request-Id` header with it.
pub async fn with_request_id(mut req: Request, next: Next) -> Response {
    use tracing::Instrument;
    let id = request_id(req.headers_mut());
    // What is logged while the request runs says which request, and whose.
    let namespace = namespace_of(req.uri().path());
    let span = tracing::info_span!(
        "request",
        request_id = id.to_str().unwrap_or_default(),
        namespace,
        otel.name = tracing::field::Empty,
        otel.kind = "server",
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        faas.name = tracing::field::Empty,
        faas.version = tracing::field::Empty,
        faas.coldstart = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    // With traces on, the request continues its caller's trace.
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    sless_telemetry::trace::continue_from(&span, traceparent);
    let mut res = next.run(req).instrument(span.clone()).await;
    if sless_telemetry::trace::enabled() {
        span.record("http.response.status_code", res.status().as_u16());
    }
    res.headers_mut().insert(X_REQUEST_ID, id);
    res
}

/// The namespace a path names: `/v1/namespaces/{ns}/...`, `/fn/{ns}/...`.
fn namespace_of(path: &str) -> &str {
    let rest = path
        .strip_prefix("/v1/namespaces/")
        .or_else(|| path.strip_prefix("/fn/"))
        .unwrap_or_default();
    rest.split('/').next().unwrap_or_default()
}

/// How the recorder batches and how long records are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecorderConfig {
    /// Records waiting for the writer; past it, new ones are dropped.
    pub capacity: usize,
    /// The most records one statement writes.
    pub batch_max: usize,
    /// How long the first record of a batch waits for others.
    pub batch_wait: Duration,
    pub retention: Retention,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            capacity: 10_000,
            batch_max: 1000,
            batch_wait: Duration::from_millis(100),
            retention: Retention::default(),
        }
    }
}

/// How long invocation records are kept: a record goes when it is older
/// than `max_age`, or when its function has `per_function` newer ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// `SLESS_INVOCATION_RETENTION_DAYS` (default 7 days).
    pub max_age: Duration,
    /// `SLESS_INVOCATION_RETENTION_PER_FUNCTION` (default 10,000).
    pub per_function: u32,
    /// How often the writer deletes what is past retention.
    pub every: Duration,
    /// The most rows one delete statement removes; a pass repeats a
    /// statement that hit it a few times, and leaves the rest to the next.
    pub delete_limit: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_age: Duration::from_secs(7 * 86_400),
            per_function: 10_000,
            every: Duration::from_secs(60),
            delete_limit: 10_000,
        }
    }
}

/// Statements of one kind per retention pass, at most.
const RETENTION_ROUNDS: usize = 4;
/// Functions trimmed per statement, and per retention pass. Trimming one
/// costs an index range scan of `Retention::per_function` entries.
const TRIM_CHUNK: usize = 100;
const TRIM_PER_PASS: usize = 1000;
/// Functions remembered for the next trim; functions written to beyond it
/// wait until they are written to again (their age bound still holds).
const MAX_TOUCHED: usize = 100_000;
/// Drops are reported at most this often (and once more at shutdown).
const DROP_REPORT_EVERY: Duration = Duration::from_secs(1);

/// Hands invocation records to the database off the request path.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Invocation>,
    shared: Arc<Shared>,
}

struct Shared {
    /// Records lost since start: dropped on a full channel, or in a batch
    /// the database refused.
    dropped: AtomicU64,
    /// Of those, not yet reported in a warning.
    unreported: AtomicU64,
    stop: watch::Sender<bool>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl Recorder {
    /// A recorder with the default configuration and its writer running.
    /// Must be called within a Tokio runtime.
    pub fn new(pool: PgPool) -> Recorder {
        Recorder::start(pool, RecorderConfig::default())
    }

    /// A recorder with its writer running on a task of its own.
    pub fn start(pool: PgPool, config: RecorderConfig) -> Recorder {
        let (recorder, writer) = Recorder::detached(pool, config);
        let task = tokio::spawn(writer.run());
        *recorder.shared.writer.lock().unwrap() = Some(task);
        recorder
    }

    /// A recorder and its writer, not yet running: records wait on the
    /// channel until `Writer::run` is polled.
    pub fn detached(pool: PgPool, config: RecorderConfig) -> (Recorder, Writer) {
        let (tx, rx) = mpsc::channel(config.capacity.max(1));
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            dropped: AtomicU64::new(0),
            unreported: AtomicU64::new(0),
            stop,
            writer: Mutex::new(None),
        });
        let writer = Writer {
            pool,
            rx,
            stop: stop_rx,
            shared: shared.clone(),
            config,
            touched: HashSet::new(),
            last_report: None,
        };
        (Recorder { tx, shared }, writer)
    }

    /// Queues a record for writing; never waits. A full channel drops it.
    pub fn record(&self, record: Invocation) {
        if self.tx.try_send(record).is_err() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            self.shared.unreported.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records lost since start.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Makes the writer write what it holds and stop, and waits for it
    /// (when it was started by `start`). Records handed over afterwards are
    /// dropped.
    pub async fn shutdown(&self) {
        self.shared.stop.send_replace(true);
        let task = self.shared.writer.lock().unwrap().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// The task that writes records and enforces retention.
pub struct Writer {
    pool: PgPool,
    rx: mpsc::Receiver<Invocation>,
    stop: watch::Receiver<bool>,
    shared: Arc<Shared>,
    config: RecorderConfig,
    /// Functions written to since their last trim.
    touched: HashSet<(String, String)>,
    last_report: Option<Instant>,
}

/// Resolves once a stop is asked for.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl Writer {
    /// Runs until `Recorder::shutdown` or until every `Recorder` is gone;
    /// writes what it holds before it returns.
    pub async fn run(mut self) {
        let max = self.config.batch_max.max(1);
        let mut batch = Vec::with_capacity(max);
        let mut next_retention = Instant::now() + self.config.retention.every;
        loop {
            tokio::select! {
                biased;
                _ = stopped(&mut self.stop) => break,
                n = self.rx.recv_many(&mut batch, max) => if n == 0 { break },
                _ = tokio::time::sleep_until(next_retention) => {
                    self.retain().await;
                    next_retention = Instant::now() + self.config.retention.every;
                    continue;
                }
            }
            // The first records are in: gather more until the batch is full
            // or its first record has waited `batch_wait`.
            let deadline = Instant::now() + self.config.batch_wait;
            let mut last = false;
            while batch.len() < max {
                let room = max - batch.len();
                tokio::select! {
                    biased;
                    n = self.rx.recv_many(&mut batch, room) => if n == 0 { last = true; break },
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = stopped(&mut self.stop) => { last = true; break }
                }
            }
            self.write(&mut batch).await;
            self.report_drops(false);
            if last {
                break;
            }
        }
        self.rx.close();
        while self.rx.recv_many(&mut batch, max).await > 0 {
            self.write(&mut batch).await;
        }
        self.report_drops(true);
    }

    async fn write(&mut self, batch: &mut Vec<Invocation>) {
        if batch.is_empty() {
            return;
        }
        let mut previous: Option<&Invocation> = None;
        for r in batch.iter() {
            // Records of one function mostly come in runs: one lookup per run.
            let same =
                previous.is_some_and(|p| p.function == r.function && p.namespace == r.namespace);
            previous = Some(r);
            if !same && self.touched.len() < MAX_TOUCHED {
                self.touched
                    .insert((r.namespace.clone(), r.function.clone()));
            }
        }
        if let Err(e) = records::insert(&self.pool, batch).await {
            let lost = batch.len() as u64;
            self.shared.dropped.fetch_add(lost, Ordering::Relaxed);
            tracing::warn!(lost, error = %e, "invocation records could not be written");
        }
        batch.clear();
    }

    fn report_drops(&mut self, always: bool) {
        if !always
            && self
                .last_report
                .is_some_and(|t| t.elapsed() < DROP_REPORT_EVERY)
        {
            return;
        }
        let dropped = self.shared.unreported.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            self.last_report = Some(Instant::now());
            tracing::warn!(
                dropped,
                capacity = self.config.capacity,
                "invocation records dropped: the writer's queue was full"
            );
        }
    }

    /// One retention pass: records past the age bound, then the records of
    /// functions written to since their last trim beyond the newest
    /// `per_function`. Every statement is bounded by `delete_limit`.
    async fn retain(&mut self) {
        let r = self.config.retention;
        let cutoff = chrono::Duration::from_std(r.max_age)
            .ok()
            .and_then(|age| Utc::now().checked_sub_signed(age));
        for _ in 0..RETENTION_ROUNDS {
            let Some(cutoff) = cutoff else { break };
            match records::delete_started_before(&self.pool, cutoff, r.delete_limit).await {
                Ok(n) if n >= u64::from(r.delete_limit) => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "deleting old invocation records failed");
                    break;
                }
            }
        }
        // At most `TRIM_PER_PASS` functions; the rest wait for the next pass.
        let functions: Vec<(String, String)> =
            self.touched.iter().take(TRIM_PER_PASS).cloned().collect();
        for f in &functions {
            self.touched.remove(f);
        }
        for chunk in functions.chunks(TRIM_CHUNK) {
            match records::trim_functions(&self.pool, chunk, r.per_function, r.delete_limit).await {
                Ok(trimmed) => {
                    // One that lost as many as a statement may delete may
                    // have more to lose: next pass.
                    for (ns, f, n) in trimmed {
                        if n >= u64::from(r.delete_limit) {
                            self.touched.insert((ns, f));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "trimming invocation records failed");
                    self.touched.extend(chunk.iter().cloned());
                }
            }
        }
    }
}

/// `?limit=` and `?cursor=`, checked: the cursor is an invocation's.
fn page_query(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<(u32, Option<Cursor>)> {
    let q = crate::paging::page_query(query)?;
    let cursor = q
        .cursor
        .map(|c| Cursor::decode(&c).ok_or_else(crate::paging::bad_cursor))
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
    params(crate::path::FunctionPath, crate::paging::InvocationPages),
    responses((status = 200, description = "One page of records", body = crate::openapi::InvocationPage)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    let namespace = caller.namespace(&ns)?;
    let missing = || ApiError::not_found(format!("function {name:?} not found in {ns}"));
    let function = FunctionName::parse(&name).map_err(|_| missing())?;
    let (limit, after) = page_query(query)?;
    let row = readmodel::function_row(&state.pool, namespace.as_str(), function.as_str()).await?;
    let exists = match row {
        Some(row) if row.state().exists() => true,
        // Not projected yet, or deleted: the log says.
        _ => {
            let key = FunctionKey::new(namespace.clone(), function.clone());
            eventlog::load::<sless_domain::Function>(&state.pool, &key.stream())
                .await?
                .0
                .exists()
        }
    };
    if !exists {
        return Err(missing());
    }
    let mut items = records::page(
        &state.pool,
        namespace.as_str(),
        function.as_str(),
        after,
        limit + 1,
    )
    .await?;
    let next_cursor = crate::paging::cut(&mut items, limit, |r| Cursor::of(r).encode());
    let items: Vec<Value> = items.iter().map(view).collect();
    Ok(Json(json!({ "items": items, "next_cursor": next_cursor })))
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_are_time_ordered_v7_uuids_and_differ() {
        let ids: Vec<uuid::Uuid> = (0..1000)
            .map(|_| super::new_request_id().parse().expect("a uuid"))
            .collect();
        assert!(ids.iter().all(|id| id.get_version_num() == 7));
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        let (first, last) = (ids[0].get_timestamp(), ids[999].get_timestamp());
        let ms = |t: Option<uuid::Timestamp>| t.expect("a v7 timestamp").to_unix();
        assert!(ms(first) <= ms(last));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(now.abs_diff(ms(last).0) <= 5, "the id's time is now");
    }
}
