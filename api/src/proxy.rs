//! `/fn/{ns}/{name}[/...]`: the public invoke proxy. Forwards the request
//! to the function's running endpoint and streams both bodies. It is served
//! on the functions' origin (`crate::fn_router`), never on the API's: there
//! `/fn/...` only redirects (`elsewhere`).
//!
//! Where a function runs comes from the read model, remembered for
//! `Endpoints::ttl` so a busy function costs no query per request. A
//! remembered endpoint can go stale when a new version replaces the
//! process: a request that cannot connect forgets it, and when it has no
//! body to replay it is sent again to the endpoint the read model now names.
//! A function deleted or replaced is seen within that ttl.
//!
//! What is refused, and how (every refusal is a problem document):
//! - a method other than those of `METHODS` (TRACE, CONNECT, others): 405;
//! - a `{ns}` that cannot be a user's namespace (`sless-` and 16 hex
//!   digits), a `{name}` that cannot be a function's, or a path under the
//!   wrapper's reserved `/__sless`: 404, without a lookup;
//! - a path suffix with a dot-segment (`.` or `..`, also percent-encoded):
//!   400; the suffix is otherwise forwarded exactly as it came, percent-
//!   encoding and query included, and only ever to the function;
//! - more headers than `ProxyLimits::max_headers`, or more header bytes than
//!   `max_header_bytes`: 431; a declared `Content-Length` over
//!   `max_body_bytes`: 413; all before any lookup;
//! - an unknown or deleted function: 404, without an upstream connection;
//!   one with nothing deployed: 503;
//! - a body that streams past `max_body_bytes`: 413, the moment it does,
//!   without holding the body;
//! - a request body that cannot be read (a bad chunk size, say): 400
//!   `malformed-request`, without the parser's words;
//! - an upstream that cannot be reached: 502; one that has not answered
//!   within the function's `timeout_sec`: 504; one whose answer is not
//!   HTTP (it cannot be parsed, its status is past 599, or it is a 1xx
//!   such as an unasked 101): 502 `bad-upstream-response`;
//! - an answer whose body passes the function's `timeout_sec`, counted from
//!   the call's start, or pauses longer than `ProxyLimits::idle_timeout`:
//!   cut short (`call`: the caller's connection is closed, the record says
//!   so).
//!
//! (Duplicate or conflicting `Host` fields get a 400 problem document in
//! `serve`, before any route.)
//!
//! (A request with more than `serve::MAX_REQUEST_HEADERS` header fields
//! gets the API's own 431 problem document before it reaches the proxy; one
//! past the HTTP parser's limits, `serve::HEADER_PARSE_LIMIT` fields or a
//! head larger than its read buffer, is refused by the parser: 431 without
//! a body.)
//!
//! What crosses, each way, is `edge`'s: hop-by-hop headers are stripped
//! both ways, the platform's credentials (its tokens, its cookies) never
//! reach a function, and a function's cookies stay under its own path. The
//! request's `X-Request-Id` (see `invocations::request_id`) goes to the
//! function and back.
//!
//! Every call that reaches the lookup of an existing function is recorded
//! (`invocations::Recorder`) when its answer has been sent, or abandoned:
//! the version that answered, start time, duration to the last byte, the
//! status the client got, body bytes in and out as they streamed (in: as
//! read from the client, so a body refused past the limit counts what was
//! read of it), cold or warm, and the error, if any. A call is *cold* when it is the first this
//! API process sent to a deployed version's endpoint: the first request to
//! reach a freshly started function process, since drivers only ever send
//! it health checks before. Several API processes each count their own
//! first call as cold.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody};
use axum::extract::{Request, State};
use axum::http::{HeaderMap, HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use sless_domain::FunctionName;
use sless_store::readmodel::{self, FunctionRow};

use crate::AppState;
use crate::error::{ApiError, ApiResult};
use crate::invocations::{self, X_REQUEST_ID};

/// The limits a request must stay within to be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Request body bytes (default 6 MiB).
    pub max_body_bytes: u64,
    /// Request header fields, each value of a repeated one counted, but not
    /// `X-Request-Id` (default 64; at most the API's own limit,
    /// `serve::MAX_REQUEST_HEADERS`).
    pub max_headers: usize,
    /// Request header bytes, names and values, but not `X-Request-Id`
    /// (default 16 KiB).
    pub max_header_bytes: usize,
    /// The longest gap between two pieces of a function's answer body
    /// (default 10 s); the whole call is bounded by the function's
    /// `timeout_sec` besides.
    pub idle_timeout: Duration,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            max_body_bytes: 6 * 1024 * 1024,
            max_headers: 64,
            max_header_bytes: 16 * 1024,
            idle_timeout: Duration::from_secs(10),
        }
    }
}

/// The methods a function is invoked with. TRACE (which would echo the
/// request, credentials included, back to a script), CONNECT and methods
/// of no standard get 405 without reaching the function.
pub const METHODS: axum::routing::MethodFilter = axum::routing::MethodFilter::GET
    .or(axum::routing::MethodFilter::HEAD)
    .or(axum::routing::MethodFilter::POST)
    .or(axum::routing::MethodFilter::PUT)
    .or(axum::routing::MethodFilter::PATCH)
    .or(axum::routing::MethodFilter::DELETE)
    .or(axum::routing::MethodFilter::OPTIONS);

type Pool =
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Body>;

/// The proxy's side towards functions: its connection pool, and the limits
/// a request must stay within to be forwarded there.
#[derive(Clone)]
pub struct HttpClient {
    pool: Pool,
    pub limits: ProxyLimits,
}

impl HttpClient {
    pub fn new(limits: ProxyLimits) -> HttpClient {
        let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
        connector.set_nodelay(true);
        connector.set_connect_timeout(Some(Duration::from_secs(5)));
        let pool =
            hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
                .pool_idle_timeout(Duration::from_secs(30))
                .build(connector);
        HttpClient { pool, limits }
    }
}

/// A client with the default limits.
pub fn client() -> HttpClient {
    HttpClient::new(ProxyLimits::default())
}

#[utoipa::path(method(get, post, put, delete, patch, head, options), path = "/fn/{ns}/{name}", tag = "invoke", summary = "Invoke a function (no auth)",
    params(("ns" = String, Path, description = "The function's namespace"), ("name" = String, Path, description = "The function")),
    request_body(content = crate::openapi::AnyBody, content_type = "*/*", description = "Passed to the function as is"),
    responses((status = "default", description = "The function's answer, as it gave it")))]
pub async fn invoke_root(State(state): State<AppState>, req: Request) -> Response {
    invoke(state, req).await
}

#[utoipa::path(method(get, post, put, delete, patch, head, options), path = "/fn/{ns}/{name}/", tag = "invoke", summary = "Invoke a function (no auth)",
    params(("ns" = String, Path, description = "The function's namespace"), ("name" = String, Path, description = "The function")),
    request_body(content = crate::openapi::AnyBody, content_type = "*/*", description = "Passed to the function as is"),
    responses((status = "default", description = "The function's answer, as it gave it")))]
pub async fn invoke_root_slash(State(state): State<AppState>, req: Request) -> Response {
    invoke(state, req).await
}

#[utoipa::path(method(get, post, put, delete, patch, head, options), path = "/fn/{ns}/{name}/{*rest}", tag = "invoke", summary = "Invoke a function at a sub-path (no auth)",
    params(("ns" = String, Path, description = "The function's namespace"), ("name" = String, Path, description = "The function"), ("rest" = String, Path, description = "The path the function sees, after its prefix")),
    request_body(content = crate::openapi::AnyBody, content_type = "*/*", description = "Passed to the function as is"),
    responses((status = "default", description = "The function's answer, as it gave it")))]
pub async fn invoke_path(State(state): State<AppState>, req: Request) -> Response {
    invoke(state, req).await
}

/// `/fn/...` on the API's origin: functions are not served there. A 308
/// to the same path and query on the functions' origin when the API knows
/// it (`AppState::fn_url`), else a 404 that says where they are.
pub async fn elsewhere(State(state): State<AppState>, uri: Uri) -> Response {
    let path_and_query = uri.path_and_query().map_or(uri.path(), |p| p.as_str());
    let Some(base) = state.fn_url.as_deref() else {
        return ApiError::not_found(format!(
            "functions are served on an origin of their own, not the API's: ask {path_and_query} there (SLESS_FN_LISTEN)"
        ))
        .into_response();
    };
    let location = format!("{base}{path_and_query}");
    match HeaderValue::from_str(&location) {
        Ok(v) => (
            StatusCode::PERMANENT_REDIRECT,
            [(header::LOCATION, v)],
            format!("functions are served on an origin of their own: {location}\n"),
        )
            .into_response(),
        Err(_) => ApiError::not_found(format!("no function at {:?}", uri.path())).into_response(),
    }
}

/// Where each function runs, as the read model said a moment ago.
pub struct Endpoints {
    ttl: Duration,
    known: RwLock<HashMap<String, Remembered>>,
}

/// What was read of a function, and when (None: to be read again).
struct Remembered {
    read_at: Option<Instant>,
    /// None: no such function.
    target: Option<Arc<Target>>,
}

/// What the proxy needs of a function's row.
struct Target {
    /// `Ok(url)` once a version is deployed; else the phase it is in.
    endpoint: Result<String, &'static str>,
    version: Option<u32>,
    timeout: Duration,
    /// Set by the first call sent to this endpoint of this version.
    warm: Arc<AtomicBool>,
    /// Its http triggers, when it has some and none is enabled: it is
    /// not served.
    disabled: Option<Vec<String>>,
}

impl Target {
    /// None for a function that does not exist (deleted).
    fn of(row: &FunctionRow) -> Option<Target> {
        if !row.state().exists() {
            return None;
        }
        Some(Target {
            endpoint: match (&row.endpoint, row.deployed_version) {
                (Some(e), Some(_)) => Ok(e.trim_end_matches('/').to_owned()),
                _ => Err(row.phase.as_str()),
            },
            version: row.deployed_version,
            timeout: Duration::from_secs(row.spec.timeout_sec as u64),
            warm: Arc::default(),
            disabled: None,
        })
    }

    /// True for the first call sent to this endpoint (a cold one).
    fn first_call(&self) -> bool {
        !self.warm.load(Ordering::Relaxed) && !self.warm.swap(true, Ordering::Relaxed)
    }
}

impl Endpoints {
    pub fn new(ttl: Duration) -> Endpoints {
        Endpoints {
            ttl,
            known: RwLock::new(HashMap::new()),
        }
    }

    /// The function's target (None: no such function), from memory when
    /// fresh, else from the read model.
    async fn get(
        &self,
        pool: &sless_store::PgPool,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<Arc<Target>>> {
        let key = format!("{ns}/{name}");
        if let Some(r) = self.known.read().unwrap().get(&key)
            && r.read_at.is_some_and(|at| at.elapsed() < self.ttl)
        {
            return Ok(r.target.clone());
        }
        let row = readmodel::function_row(pool, ns, name).await?;
        let mut target = row.as_ref().and_then(Target::of);
        if let Some(t) = target.as_mut() {
            t.disabled = sless_store::triggers::http_gate(pool, ns, name).await?;
        }
        let mut known = self.known.write().unwrap();
        if known.len() > 100_000 {
            known.clear(); // a crude bound; entries are cheap to fetch again
        }
        // The same endpoint of the same version stays warm.
        if let (
            Some(new),
            Some(Remembered {
                target: Some(old), ..
            }),
        ) = (target.as_mut(), known.get(&key))
            && new.endpoint == old.endpoint
            && new.version == old.version
        {
            new.warm = old.warm.clone();
        }
        let target = target.map(Arc::new);
        known.insert(
            key,
            Remembered {
                read_at: Some(Instant::now()),
                target: target.clone(),
            },
        );
        Ok(target)
    }

    /// Makes the next request read the function again.
    fn forget(&self, ns: &str, name: &str) {
        if let Some(r) = self.known.write().unwrap().get_mut(&format!("{ns}/{name}")) {
            r.read_at = None;
        }
    }
}

/// True for a user's namespace: `sless-` and 16 lowercase hex digits.
fn is_user_namespace(ns: &str) -> bool {
    ns.strip_prefix("sless-").is_some_and(|hex| {
        hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// `/fn/{ns}/{name}{suffix}` of the raw path: the suffix is `""` or starts
/// with `/`, exactly as it came (percent-encoding untouched).
fn split_path(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/fn/")?;
    let (ns, rest) = rest.split_once('/')?;
    let (name, suffix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    Some((ns, name, suffix))
}

/// Percent-decodes for checking, not forwarding (`%zz` stays as it is).
fn percent_decoded(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Refuses suffixes that are not for the function: the wrapper's own paths
/// and dot-segments, percent-encoded or not.
fn check_suffix(suffix: &str) -> ApiResult<()> {
    if !suffix.contains(['.', '%', '_']) {
        return Ok(()); // the usual case, and nothing to decode
    }
    if percent_decoded(suffix).starts_with(b"/__sless") {
        return Err(ApiError::not_found("paths under /__sless are reserved"));
    }
    for segment in suffix.split('/') {
        if matches!(percent_decoded(segment).as_slice(), b"." | b"..") {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid-path",
                "Invalid path",
                format!("the path {suffix:?} has a dot-segment ({segment:?}); send it resolved"),
            )
            .with_field("path"));
        }
    }
    Ok(())
}

/// Checks the request's header fields against the limits. `X-Request-Id`
/// is not counted: it is bounded on its own (`invocations::request_id`),
/// and may have been added by the API itself.
fn check_headers(headers: &HeaderMap, limits: &ProxyLimits) -> ApiResult<()> {
    let too_large = |detail: String| {
        ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            "Request headers too large",
            detail,
        )
    };
    let (mut count, mut bytes) = (0, 0);
    for (name, value) in headers {
        if name != X_REQUEST_ID {
            count += 1;
            bytes += name.as_str().len() + value.len();
        }
    }
    if count > limits.max_headers {
        return Err(too_large(format!(
            "the request has {count} header fields; the limit is {}",
            limits.max_headers
        )));
    }
    if bytes > limits.max_header_bytes {
        return Err(too_large(format!(
            "the request's header fields have {bytes} bytes; the limit is {}",
            limits.max_header_bytes
        )));
    }
    Ok(())
}

fn body_too_large(limit: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        "Request body too large",
        format!("the request body is larger than the limit of {limit} bytes"),
    )
}

async fn invoke(state: AppState, mut req: Request) -> Response {
    let started = Instant::now();
    let started_at = Utc::now();
    let request_id = invocations::request_id(req.headers_mut());
    let mut res = forward(&state, started, started_at, &request_id, req)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    res.headers_mut().insert(X_REQUEST_ID, request_id);
    res
}

/// Refusals on the request's shape and an unknown function are answered
/// here, unrecorded; everything after the lookup is recorded.
async fn forward(
    state: &AppState,
    started: Instant,
    started_at: DateTime<Utc>,
    request_id: &HeaderValue,
    req: Request,
) -> ApiResult<Response> {
    let limits = state.http.limits;
    let (mut parts, body) = req.into_parts();
    let path = parts.uri.path();
    let (ns, name, suffix) = split_path(path)
        .filter(|(ns, name, _)| is_user_namespace(ns) && FunctionName::parse(name).is_ok())
        .ok_or_else(|| ApiError::not_found(format!("no function at {path:?}")))?;
    check_suffix(suffix)?;
    check_headers(&parts.headers, &limits)?;
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok()?.parse::<u64>().ok());
    if declared.is_some_and(|n| n > limits.max_body_bytes) {
        return Err(body_too_large(limits.max_body_bytes));
    }
    let (ns, name) = (ns.to_owned(), name.to_owned());
    let path_and_query = match (suffix, parts.uri.query()) {
        ("", None) => "/".to_owned(),
        ("", Some(q)) => format!("/?{q}"),
        (s, None) => s.to_owned(),
        (s, Some(q)) => format!("{s}?{q}"),
    };
    let target = state
        .endpoints
        .get(&state.pool, &ns, &name)
        .await?
        .ok_or_else(|| {
            ApiError::not_found(format!("function {name:?} not found in namespace {ns:?}"))
        })?;

    edge::request_headers(&mut parts.headers, &state.auth);
    parts.headers.insert(X_REQUEST_ID, request_id.clone());
    let meter = Arc::new(Meter::default());
    let mut call = Call {
        recorder: state.invocations.clone(),
        meter: meter.clone(),
        started,
        started_at,
        namespace: ns,
        function: name,
        version: None,
        timeout: Duration::ZERO,
        cold: false,
        request_id: request_id.to_str().unwrap_or_default().to_owned(),
    };
    // A request without a body can be sent again if its endpoint went away.
    let replayable = body.size_hint().exact() == Some(0);
    let body = Body::new(Inbound {
        inner: body,
        limit: limits.max_body_bytes,
        meter,
    });
    let sent = send(
        state,
        &mut call,
        target,
        parts,
        body,
        &path_and_query,
        replayable,
    )
    .await;
    Ok(
        match sent.and_then(|res| well_formed(&call.function, res)) {
            Ok(mut res) => {
                edge::response_headers(res.headers_mut(), &call.namespace, &call.function);
                call.answer(res, limits.idle_timeout)
            }
            Err(e) => call.refuse(e),
        },
    )
}

/// A function's answer the proxy passes on: a final status of HTTP's
/// range (100–599). A 1xx that hyper hands on as final (a 101 Switching
/// Protocols, which the proxy never asks for: it forwards no `Upgrade`) or
/// a status past 599 is the function's fault: 502.
fn well_formed(
    name: &str,
    res: hyper::Response<hyper::body::Incoming>,
) -> ApiResult<hyper::Response<hyper::body::Incoming>> {
    let status = res.status().as_u16();
    if (200..=599).contains(&status) {
        return Ok(res);
    }
    let why = if status < 200 {
        format!("an interim status {status} as its answer, which was not asked for")
    } else {
        format!("the status {status}, which is outside HTTP's 100-599")
    };
    Err(bad_upstream(name, &why))
}

/// 502 `bad-upstream-response`: the function answered, but not with HTTP.
fn bad_upstream(name: &str, why: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        BAD_UPSTREAM_RESPONSE,
        "Bad response from the function",
        format!("function {name:?} sent {why}"),
    )
}

/// The problem kind of an answer that is not valid HTTP.
pub const BAD_UPSTREAM_RESPONSE: &str = "bad-upstream-response";

/// 400 for a request body the proxy could not read.
fn unreadable_body() -> ApiError {
    ApiError::new(
        StatusCode::BAD_REQUEST,
        "malformed-request",
        "Malformed request",
        "the request body could not be read: its framing is not valid HTTP/1.1 (a bad chunk size, say), or it ended early",
    )
}

/// Sends the request to the function's endpoint; the answer's head.
async fn send(
    state: &AppState,
    call: &mut Call,
    mut target: Arc<Target>,
    parts: axum::http::request::Parts,
    body: Body,
    path_and_query: &str,
    replayable: bool,
) -> ApiResult<hyper::Response<hyper::body::Incoming>> {
    let (ns, name) = (call.namespace.as_str(), call.function.as_str());
    let limit = state.http.limits.max_body_bytes;
    let mut body = Some(body);
    let mut parts = Some(parts);
    for fresh in [false, true] {
        if fresh {
            state.endpoints.forget(ns, name);
            target = state
                .endpoints
                .get(&state.pool, ns, name)
                .await?
                .ok_or_else(|| {
                    ApiError::not_found(format!(
                        "function {name:?} was deleted in namespace {ns:?}"
                    ))
                })?;
        }
        if let Some(triggers) = &target.disabled {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "trigger-disabled",
                "Trigger disabled",
                format!(
                    "function {name:?} is served only while one of its http triggers is enabled, and none is ({}); enable one with PATCH /v1/namespaces/{ns}/triggers/{{name}} {{\"enabled\": true}}",
                    triggers.join(", ")
                ),
            ));
        }
        let endpoint = target.endpoint.as_ref().map_err(|phase| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "function-not-ready",
                "Function not ready",
                format!("function {name:?} has nothing running yet (phase {phase})"),
            )
        })?;
        call.version = target.version;
        call.timeout = target.timeout;
        call.cold = target.first_call();
        let mut req_parts = match (replayable && !fresh, &mut parts) {
            (true, Some(p)) => p.clone(),
            (_, p) => p
                .take()
                .expect("a request is sent twice only when replayable"),
        };
        req_parts.uri = format!("{endpoint}{path_and_query}")
            .parse::<Uri>()
            .map_err(|e| ApiError::internal(format!("bad function endpoint {endpoint}: {e}")))?;
        let upstream = hyper::Request::from_parts(req_parts, body.take().unwrap_or_default());
        let left = target.timeout.saturating_sub(call.started.elapsed());
        let res = tokio::time::timeout(left, state.http.pool.request(upstream)).await;
        if call.meter.too_large.load(Ordering::Relaxed) {
            return Err(body_too_large(limit));
        }
        if call.meter.unreadable.load(Ordering::Relaxed) {
            return Err(unreadable_body());
        }
        return match res {
            Err(_) => Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "function-timeout",
                "Function timed out",
                format!(
                    "function {name:?} did not answer within its timeout of {}s",
                    target.timeout.as_secs()
                ),
            )),
            Ok(Err(e)) if e.is_connect() && replayable && !fresh => continue,
            Ok(Err(e)) => {
                state.endpoints.forget(ns, name);
                if let Some(why) = not_http(&e) {
                    return Err(bad_upstream(name, &why));
                }
                // The connection broke under the call: its process may have
                // ended (killed for memory, say), which the log then says.
                if !e.is_connect()
                    && let Some(crash) =
                        crate::crashes::explain(state, ns, name, call.started_at).await
                {
                    return Err(crash);
                }
                let what = if e.is_connect() {
                    "refused the connection"
                } else {
                    "failed"
                };
                Err(ApiError::new(
                    StatusCode::BAD_GATEWAY,
                    "function-unreachable",
                    "Function unreachable",
                    format!("function {name:?} {what}: {}", error_chain(&e)),
                ))
            }
            Ok(Ok(res)) => Ok(res),
        };
    }
    unreachable!("the second pass always returns")
}

/// What was wrong with an answer that hyper could not parse as HTTP/1.1
/// (a bad status line, header or framing); None for other failures.
fn not_http(e: &hyper_util::client::legacy::Error) -> Option<String> {
    let mut source = std::error::Error::source(e);
    while let Some(inner) = source {
        if let Some(h) = inner.downcast_ref::<hyper::Error>()
            && h.is_parse()
        {
            return Some(format!("an answer that is not valid HTTP/1.1 ({h})"));
        }
        source = inner.source();
    }
    None
}

/// An error and its sources, for humans.
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

mod call;
pub mod edge;

use call::{Call, Inbound, Meter};
#[cfg(test)]
mod tests;
