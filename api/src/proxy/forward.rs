//! Forwarding: the proxy's connection pool towards functions
//! (`HttpClient`), the request built from the caller's and sent to the
//! function's endpoint (once more, to the endpoint the read model now
//! names, when a request without a body finds the remembered one gone;
//! a cold call first waits, bounded, for a new endpoint to accept
//! connections), and the head of the function's answer checked before it
//! is passed on.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::body::{Body, HttpBody};
use axum::extract::{ConnectInfo, Request};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::Response;
use chrono::{DateTime, Utc};
use sless_domain::FunctionName;

use super::admission::{
    ProxyLimits, body_too_large, check_headers, check_suffix, is_user_namespace, split_path,
};
use super::body::{Inbound, Meter, Unsent};
use super::call::Call;
use super::edge;
use super::endpoints::Target;
use crate::AppState;
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::request_id::X_REQUEST_ID;

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

/// Refusals on the request's shape and an unknown function are answered
/// here, unrecorded; everything after the lookup is recorded.
pub(super) async fn forward(
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

    let seen = edge::Seen {
        peer: parts
            .extensions
            .get::<ConnectInfo<SocketAddr>>()
            .map(|c| c.0.ip()),
        proto: edge::Proto::of(state.fn_url.as_deref()),
    };
    edge::request_headers(&mut parts.headers, &state.auth, seen);
    parts.headers.insert(X_REQUEST_ID, request_id.clone());
    let id = sless_store::invocations::id_for(started_at);
    if let Ok(v) = HeaderValue::from_str(&id.to_string()) {
        parts.headers.insert(super::call::INVOCATION_ID, v);
    }
    let meter = Arc::new(Meter::default());
    let calling = state.load.start(&ns, &name);
    let mut call = Call {
        id,
        recorder: state.invocations.clone(),
        metrics: state.metrics.clone(),
        meter: meter.clone(),
        started,
        started_at,
        namespace: ns,
        function: name,
        version: None,
        timeout: Duration::ZERO,
        cold: false,
        request_id: request_id.to_str().unwrap_or_default().to_owned(),
        method: parts.method.to_string(),
        path: if suffix.is_empty() {
            "/".to_owned()
        } else {
            suffix.to_owned()
        },
        activation: None,
        _calling: calling,
        slot: None,
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
///
/// A request that never reached the function (its connection was refused:
/// the instance is gone) goes to an instance that serves, or is held, as a
/// call to a function at zero is, until the log names one; never answered
/// 502 for it. One whose connection broke after it was sent goes again
/// only when it had no body and the read model no longer names where it
/// went.
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
    // Sent at least once, so the function is read again before the next;
    // sent again once after a connection broke.
    let (mut again, mut broke) = (false, false);
    // An instance it was sent to refused: what a held call's timeout says.
    let mut gone_before = false;
    loop {
        if again {
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
        if let Some((error, at)) = &target.start_failed {
            super::activation::after_failure(name, error, *at)?;
        }
        // Nothing serves (at zero, starting, or every instance it had
        // refused a call): held until an instance serves.
        let gone = target.endpoint.is_ok() && !state.spread.any_up(&target);
        gone_before |= gone;
        if (target.activating || target.start_failed.is_some() || gone) && target.disabled.is_none()
        {
            let activated =
                super::activation::activate(state, ns, name, &call.request_id, call.started)
                    .await
                    .map_err(|e| match e.kind {
                        super::activation::ACTIVATING if gone_before => ApiError {
                            detail: format!(
                                "function {name:?}: its instance refused the connection (what ran it stopped), and none served within {:.1} s; it is being started again, try again shortly",
                                state.http.limits.activation_timeout.as_secs_f64()
                            ),
                            ..e
                        },
                        _ => e,
                    })?;
            call.activation = Some((activated.held, activated.instance_start));
            target = activated.target;
        }
        if let Err(phase) = &target.endpoint {
            return Err(ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "function-not-ready",
                "Function not ready",
                format!("function {name:?} has nothing running yet (phase {phase})"),
            ));
        }
        // A call sent again gives its place back first.
        call.slot = None;
        let placed = state
            .spread
            .place(state, ns, name, target, call.started)
            .await?;
        target = placed.target;
        call.slot = Some(placed.slot);
        let endpoint = &placed.endpoint;
        call.version = target.version;
        call.timeout = target.timeout;
        // Every call held for an instance is cold, not only the first.
        call.cold = target.first_call() || call.activation.is_some();
        let mut req_parts = match (replayable, &mut parts) {
            (true, Some(p)) => p.clone(),
            (_, p) => p.take().ok_or_else(|| {
                ApiError::internal("a request with a body was sent twice".to_owned())
            })?,
        };
        if sless_telemetry::trace::enabled() {
            // The request's span is the call's: the function gets it as
            // its parent, with what it reached.
            let span = tracing::Span::current();
            span.record("faas.name", call.function.as_str());
            span.record("faas.version", call.version);
            span.record("faas.coldstart", call.cold);
            if let Some(tp) = sless_telemetry::trace::traceparent_of(&span)
                .and_then(|tp| axum::http::HeaderValue::try_from(tp).ok())
            {
                req_parts.headers.insert("traceparent", tp);
            }
        }
        req_parts.uri = format!("{endpoint}{path_and_query}")
            .parse::<Uri>()
            .map_err(|e| ApiError::internal(format!("bad function endpoint {endpoint}: {e}")))?;
        if call.cold {
            let window = READY_WINDOW.min(target.timeout.saturating_sub(call.started.elapsed()));
            until_accepting(&req_parts.uri, window).await;
        }
        let endpoint = endpoint.clone();
        let (unsent, reclaim) = Unsent::new(body.take().unwrap_or_default());
        let kept = req_parts.clone();
        let upstream = hyper::Request::from_parts(req_parts, Body::new(unsent));
        let left = target.timeout.saturating_sub(call.started.elapsed());
        let res = tokio::time::timeout(left, state.http.pool.request(upstream)).await;
        again = true;
        if call.meter.too_large.load(Ordering::Relaxed) {
            return Err(body_too_large(limit));
        }
        if call.meter.unreadable.load(Ordering::Relaxed) {
            return Err(unreadable_body());
        }
        let refused = matches!(&res, Ok(Err(e)) if e.is_connect());
        if refused {
            state.spread.down(&endpoint);
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
            // Refused: the instance is gone (a new version replaced it, it
            // was scaled in, or what ran it stopped). The request never
            // reached it: it goes, whole, to an instance that serves, or
            // waits for one with the calls held for a start.
            Ok(Err(_)) if refused && call.started.elapsed() < target.timeout => {
                match reclaim.take() {
                    Some(unread) => {
                        body = Some(unread);
                        parts = Some(kept);
                        continue;
                    }
                    None => Err(unreachable(name, "refused the connection")),
                }
            }
            // A kept-alive connection to a process that has since stopped
            // (scaled to zero, replaced) breaks on the first write; when the
            // read model no longer names that endpoint, the request never
            // reached a process that answers, and goes to the one it names.
            Ok(Err(e))
                if replayable
                    && !refused
                    && not_http(&e).is_none()
                    && !broke
                    && moved(state, ns, name, &endpoint).await =>
            {
                broke = true;
                continue;
            }
            Ok(Err(e)) => {
                state.endpoints.forget(ns, name);
                if let Some(why) = not_http(&e) {
                    return Err(bad_upstream(name, &why));
                }
                // The connection broke under the call: its process may have
                // ended (killed for memory, say), which the log then says.
                if !e.is_connect()
                    && let Some(crash) =
                        crate::proxy::crashes::explain(state, ns, name, call.started_at).await
                {
                    return Err(crash);
                }
                let what = if e.is_connect() {
                    "refused the connection"
                } else {
                    "failed"
                };
                Err(unreachable(name, &format!("{what}: {}", error_chain(&e))))
            }
            Ok(Ok(res)) => Ok(res),
        };
    }
}

/// 502 `function-unreachable`: the call could not be sent, or broke.
fn unreachable(name: &str, what: &str) -> ApiError {
    ApiError::new(
        StatusCode::BAD_GATEWAY,
        "function-unreachable",
        "Function unreachable",
        format!("function {name:?} {what}"),
    )
}

/// How long a cold call waits for its endpoint to accept a connection.
const READY_WINDOW: Duration = Duration::from_secs(10);

/// Waits, up to `window`, until `uri`'s host and port accept a TCP
/// connection. A cold call's endpoint can be Ready before it is reachable:
/// on Kubernetes kube-proxy rewrites a Service's rules a moment after its
/// EndpointSlices list the new pod, and until then the cluster IP refuses.
/// The probe's connection is closed unused: a request sent meanwhile would
/// be lost with its body, and this one never reached the function. After
/// the window the call is sent anyway, and its own error is the answer.
async fn until_accepting(uri: &Uri, window: Duration) {
    let Some(host) = uri.host() else { return };
    let host = host.trim_start_matches('[').trim_end_matches(']');
    let port = uri.port_u16().unwrap_or(80);
    let give_up = tokio::time::Instant::now() + window;
    let mut pause = Duration::from_millis(10);
    loop {
        let left = give_up.saturating_duration_since(tokio::time::Instant::now());
        if let Ok(Ok(_)) =
            tokio::time::timeout(left, tokio::net::TcpStream::connect((host, port))).await
        {
            return;
        }
        if tokio::time::Instant::now() + pause >= give_up {
            return;
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(200));
    }
}

/// True when the read model, read again, no longer sends calls of the
/// function to the instance at `used` (it has no endpoint now, or that
/// instance is not one of its instances). A rollout stops the instances it
/// replaced just before the log says where the new ones serve: the read
/// model is read again for up to `MOVED_WITHIN` until it does.
async fn moved(state: &AppState, ns: &str, name: &str, used: &str) -> bool {
    let give_up = Instant::now() + MOVED_WITHIN;
    loop {
        state.endpoints.forget(ns, name);
        let moved = match state.endpoints.get(&state.pool, ns, name).await {
            Ok(Some(now)) => !now.instances.iter().any(|(e, _)| e == used),
            Ok(None) => true,
            Err(_) => return false,
        };
        if moved || Instant::now() >= give_up {
            return moved;
        }
        tokio::time::sleep(LOOK_AGAIN).await;
    }
}

/// How long a call whose instance went away waits for the read model to
/// name where the function serves now, and how often it looks.
const MOVED_WITHIN: Duration = Duration::from_secs(2);
const LOOK_AGAIN: Duration = Duration::from_millis(20);

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
