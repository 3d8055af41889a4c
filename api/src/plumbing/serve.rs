//! Serving the router over TCP: HTTP/1.1 connections, `TCP_NODELAY`, the
//! request header limits, and a graceful stop. Each request carries the
//! address of its connection's peer (`ConnectInfo<SocketAddr>`), which the
//! invoke proxy tells functions (`proxy::edge`).
//!
//! A request with more header fields than `MAX_REQUEST_HEADERS` gets a 431
//! problem document from `limit_headers`, like every other refusal. The
//! HTTP parser must therefore accept more fields than that limit: it is
//! configured for `HEADER_PARSE_LIMIT`. Past that many fields the parser
//! itself answers 431, without a body, before any of our code runs. On the
//! functions' origin the parser stops at `FN_HEADER_PARSE_LIMIT`, which the
//! proxy's own, lower limit answers with its problem document first.
//!
//! A request's `Host` must say one thing (RFC 9112 §3.2): an HTTP/1.1
//! request without one, with two, with one that is not a host and port, or
//! whose absolute-form target names another authority, gets a 400 problem
//! document (`one_host`) before any route. Errors in a request's head that
//! the parser refuses itself (a malformed request line or header, two
//! different `Content-Length`s) get its bare 400, without a body and
//! without our words or its own.
//!
//! A stop drains (`serve_then_drain`): the listener is closed at once, so a
//! new connection is refused; every open connection is told to close
//! (hyper's graceful shutdown: an idle one is closed, one on a call
//! answers it with `Connection: close` and is closed after); the calls in
//! flight finish, up to a drain time, past which their connections are
//! closed under them and counted (`Drained`). Before that, the process
//! says it is stopping (`Draining`), so that `/readyz` fails while the
//! listener still serves and a load balancer moves away first.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use axum::Router;
use axum::extract::{ConnectInfo, Request};
use axum::http::{StatusCode, Version, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::TcpListener;
use tokio::task::JoinSet;
use tower::ServiceExt as _;

use crate::plumbing::error::ApiError;
use crate::plumbing::request_id::X_REQUEST_ID;

/// Header fields a request may carry (each value of a repeated field
/// counted). The invoke proxy has a lower limit of its own
/// (`proxy::ProxyLimits::max_headers`).
pub const MAX_REQUEST_HEADERS: usize = 100;

/// Header fields the HTTP parser reads before it gives up with a bare 431,
/// on the API's origin.
pub const HEADER_PARSE_LIMIT: usize = 1024;

/// The same on the functions' origin. The proxy's own limit
/// (`proxy::ProxyLimits::max_headers`) is at most this, so every request
/// the parser refuses is one the proxy would refuse too; and at 100 fields
/// (hyper's default) the parser's buffers are on the stack, where 1,024
/// would cost each call two heap buffers of them.
pub const FN_HEADER_PARSE_LIMIT: usize = 100;

/// How long a client has to send a request's head once it started.
const HEADER_READ_TIMEOUT: Duration = Duration::from_secs(30);

/// Middleware: 431 with a problem document for a request over
/// `MAX_REQUEST_HEADERS` header fields.
pub async fn limit_headers(req: Request, next: Next) -> Response {
    if req.headers().len() <= MAX_REQUEST_HEADERS {
        return next.run(req).await;
    }
    // `X-Request-Id` is bounded on its own and may have been added by the API.
    let count = req
        .headers()
        .iter()
        .filter(|(name, _)| *name != X_REQUEST_ID)
        .count();
    if count > MAX_REQUEST_HEADERS {
        return ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            "Request headers too large",
            format!("the request has {count} header fields; the limit is {MAX_REQUEST_HEADERS}"),
        )
        .into_response();
    }
    next.run(req).await
}

/// The problem kind of a request that is not well-formed HTTP/1.1.
pub const MALFORMED_REQUEST: &str = "malformed-request";

/// Middleware: 400 for a request whose `Host` is missing, repeated,
/// invalid, or in conflict with its target.
pub async fn one_host(req: Request, next: Next) -> Response {
    match host_problem(&req) {
        None => next.run(req).await,
        Some(detail) => ApiError::new(
            StatusCode::BAD_REQUEST,
            MALFORMED_REQUEST,
            "Malformed request",
            detail,
        )
        .with_field("host")
        .into_response(),
    }
}

fn host_problem(req: &Request) -> Option<String> {
    let mut hosts = req.headers().get_all(header::HOST).iter();
    let host = hosts.next();
    let more = hosts.count();
    if more > 0 {
        return Some(format!(
            "the request has {} Host header fields; it must have one",
            more + 1
        ));
    }
    let Some(host) = host else {
        return (req.version() == Version::HTTP_11)
            .then(|| "an HTTP/1.1 request must have a Host header field".to_owned());
    };
    let authority = host
        .to_str()
        .ok()
        .and_then(|h| h.parse::<axum::http::uri::Authority>().ok())
        .filter(|a| !a.host().is_empty() && !a.as_str().contains('@'));
    let Some(authority) = authority else {
        return Some("the Host header field is not a host and port".to_owned());
    };
    match req.uri().authority() {
        Some(target) if !target.as_str().eq_ignore_ascii_case(authority.as_str()) => Some(format!(
            "the request's target names {target} and its Host header field {authority}"
        )),
        _ => None,
    }
}

/// Whether this process is stopping, shared by its listeners: once begun,
/// `/readyz` answers 503 while the listeners still serve (the binary's
/// shutdown delay), so a load balancer stops sending before they close.
#[derive(Debug, Clone, Default)]
pub struct Draining(Arc<AtomicBool>);

impl Draining {
    /// The process is stopping, from now on.
    pub fn begin(&self) {
        self.0.store(true, Ordering::SeqCst);
    }

    pub fn has_begun(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }
}

/// Middleware: once the process is stopping, every answer carries
/// `Connection: close`, so a client with a kept-alive connection opens a
/// new one for its next request, which a load balancer sends elsewhere
/// (an L4 balancer such as kube-proxy moves only new connections).
pub async fn close_while_draining(
    axum::extract::State(draining): axum::extract::State<Draining>,
    req: Request,
    next: Next,
) -> Response {
    let mut res = next.run(req).await;
    if draining.has_begun() {
        res.headers_mut().insert(
            header::CONNECTION,
            axum::http::HeaderValue::from_static("close"),
        );
    }
    res
}

/// How a drain ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Drained {
    /// Connections still on a call when the drain time ran out, closed
    /// under it.
    pub cut: usize,
}

/// Serves `app` on `listener`, whose parser reads at most `parse_limit`
/// header fields per request, until `stop` resolves, then stops accepting
/// and waits for the open connections to finish the request they are on.
pub async fn serve(
    listener: TcpListener,
    app: Router,
    parse_limit: usize,
    stop: impl Future<Output = ()> + Send,
) -> std::io::Result<()> {
    serve_then_drain(listener, app, parse_limit, stop, Duration::MAX)
        .await
        .map(drop)
}

/// [`serve`], whose wait for the open connections lasts at most `drain`:
/// those still open then are closed, their calls cut.
pub async fn serve_then_drain(
    listener: TcpListener,
    app: Router,
    parse_limit: usize,
    stop: impl Future<Output = ()> + Send,
    drain: Duration,
) -> std::io::Result<Drained> {
    let mut builder = hyper::server::conn::http1::Builder::new();
    builder
        .max_headers(parse_limit)
        .timer(TokioTimer::new())
        .header_read_timeout(HEADER_READ_TIMEOUT);
    let app = app.layer(axum::middleware::from_fn(one_host));
    let graceful = GracefulShutdown::new();
    // Every connection's task, so that those the drain time cuts end with it.
    let mut connections = JoinSet::new();
    let mut stop = std::pin::pin!(stop);
    loop {
        let (tcp, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(conn) => conn,
                Err(e) => {
                    // Out of file descriptors, or a connection reset before
                    // it was accepted: the listener itself is fine.
                    tracing::warn!(error = %e, "accepting a connection failed");
                    tokio::time::sleep(Duration::from_millis(50)).await;
                    continue;
                }
            },
            // Those that ended, forgotten.
            Some(_) = connections.join_next(), if !connections.is_empty() => continue,
            () = &mut stop => break,
        };
        // The invoke proxy streams a response: its head and its body go
        // out in separate writes. With Nagle's algorithm on, the body would
        // wait for the client to acknowledge the head, which a client
        // delays by up to 40 ms on a keep-alive connection.
        if let Err(e) = tcp.set_nodelay(true) {
            tracing::debug!(error = %e, "TCP_NODELAY could not be set");
        }
        // The peer's address, for whoever asks (`ConnectInfo`): the invoke
        // proxy tells a function what it saw (`proxy::edge`).
        let service = TowerToHyperService::new(app.clone().map_request(
            move |mut req: Request<hyper::body::Incoming>| {
                req.extensions_mut().insert(ConnectInfo(peer));
                req
            },
        ));
        let conn = builder.serve_connection(TokioIo::new(tcp), service);
        let conn = graceful.watch(conn);
        connections.spawn(async move {
            if let Err(e) = conn.await {
                tracing::trace!(error = %e, "connection ended with an error");
            }
        });
    }
    drop(listener);
    // hyper's graceful shutdown waits for as long as a call takes.
    if tokio::time::timeout(drain, graceful.shutdown())
        .await
        .is_ok()
    {
        return Ok(Drained { cut: 0 });
    }
    while connections.try_join_next().is_some() {}
    let cut = connections.len();
    connections.shutdown().await;
    Ok(Drained { cut })
}
