//! The HTTP surface of sless: the REST API under `/v1`, bearer-token auth
//! and health endpoints on the API's origin (`router`), and the public
//! invoke proxy under `/fn` on an origin of its own (`fn_router`).
//!
//! Handlers validate a request against the current state of one aggregate
//! (read from its stream), decide, and append the resulting events together
//! with the work they cause, in one transaction. Queries read the read
//! models the projector keeps; the audit log (`events`) reads the event log.
//!
//! Every request of the JSON API is answered within a deadline (`Deadlines`),
//! counted from when its body has arrived: a database or blob store that
//! stops answering turns into a 503, never into a request that hangs. While
//! the database is unavailable, a breaker (`Breaker`) answers 503 at once
//! instead of letting requests queue for the connection pool.
//!
//! Architecture Invariant: the API depends on store and domain only; it
//! never imports the projector or the workers, and it never talks to a
//! driver. Errors become HTTP answers in exactly one place (`error`).

pub mod admin;
pub mod auth;
pub mod command;
pub mod crashes;
pub mod error;
pub mod events;
pub mod faults;
pub mod function;
pub mod functions;
pub mod health;
pub mod invocations;
pub mod jobs;
pub mod json;
pub mod namespaces;
pub mod openapi;
pub mod path;
pub mod proxy;
pub mod quota;
pub mod serve;
pub mod source;
pub mod triggers;
pub mod upload;
pub mod versions;

use std::pin::Pin;
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{DefaultBodyLimit, Request, State};
use axum::http::StatusCode;
use axum::http::Uri;
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Response};
use axum::routing::on;
use axum::{Extension, Router};
use hyper::body::{Frame, SizeHint};
use sless_domain::archive::ArchiveLimits;
use sless_store::PgPool;
use sless_store::blobs::BlobStore;
use tokio::sync::oneshot;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use crate::error::{ApiError, DATABASE_UNAVAILABLE, DatabaseUnavailable};

pub use auth::{Auth, issue_hs256};

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub blobs: BlobStore,
    pub auth: Auth,
    pub limits: ArchiveLimits,
    pub http: proxy::HttpClient,
    pub deadlines: Deadlines,
    pub breaker: Arc<Breaker>,
    /// Where functions run, remembered briefly by the invoke proxy.
    pub endpoints: Arc<proxy::Endpoints>,
    /// Invocation records, written off the request path.
    pub invocations: invocations::Recorder,
    /// How many uploads are checked at once.
    pub uploads: upload::UploadGate,
    /// Versions kept per function besides the live one.
    pub keep_versions: usize,
    /// What each namespace may create or hold (`quota`). `AppState::new`
    /// sets none; the binary sets the configured ones.
    pub quotas: quota::Quotas,
    /// The audit log's live tails, ended together at shutdown.
    pub tails: events::Tails,
    /// Replays for the admin routes, filled by the binary (`admin`); `None`
    /// answers them 501.
    pub maintenance: Option<Arc<dyn admin::Maintenance>>,
    /// The functions' origin as callers reach it (`http://127.0.0.1:8081`,
    /// `https://fn.example.com`): what a function's `url` starts with, and
    /// where `/fn/...` on the API's origin redirects. `None`: the API
    /// does not know it; `url` is a path and `/fn/...` answers 404 here.
    pub fn_url: Option<Arc<str>>,
    /// The one namespace whose tokens are accepted, when the instance runs
    /// functions without a sandbox (`--unsafe-no-sandbox`): another user's
    /// code would run with the platform's privileges. `None`: every user's.
    pub only_namespace: Option<sless_domain::Namespace>,
}

/// Versions of a function kept besides the live one, by default.
pub const DEFAULT_KEEP_VERSIONS: usize = 50;

/// How long the API gives a request before it answers 503 itself.
///
/// The answer deadline counts from when the request body has fully arrived,
/// so a large upload over a slow link is not cut short by it; the body has
/// `body` to arrive. It bounds what the API waits on: the database (a
/// connection from the pool, which would wait up to
/// `sless_store::ACQUIRE_TIMEOUT`; a connection that stopped answering
/// mid-query, which sqlx would wait on forever) and the blob store. The
/// invoke proxy (`/fn`) is not bound by it: a function runs for its own
/// `timeout_sec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// To answer a request of the JSON API, `/readyz` or an upload.
    pub request: Duration,
    /// More time for an upload, per MiB of its body: checking, packing and
    /// storing an archive take time in proportion to its size (a 50 MiB
    /// upload gets 4 s + 50 s).
    pub upload_per_mib: Duration,
    /// For a request body to arrive (408 after that).
    pub body: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            request: Duration::from_secs(4),
            upload_per_mib: Duration::from_secs(1),
            body: Duration::from_secs(60),
        }
    }
}

impl AppState {
    pub fn new(pool: PgPool, blobs: BlobStore, auth: Auth) -> AppState {
        let invocations = invocations::Recorder::new(pool.clone());
        AppState {
            pool,
            blobs,
            auth,
            limits: ArchiveLimits::default(),
            http: proxy::client(),
            deadlines: Deadlines::default(),
            breaker: Arc::default(),
            endpoints: Arc::new(proxy::Endpoints::new(Duration::from_secs(1))),
            invocations,
            uploads: upload::UploadGate::default(),
            keep_versions: DEFAULT_KEEP_VERSIONS,
            quotas: quota::Quotas::UNLIMITED,
            tails: events::Tails::default(),
            maintenance: None,
            fn_url: None,
            only_namespace: None,
        }
    }
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    let upload_limit = state.limits.max_zip_bytes as usize;
    let d = state.deadlines;
    // `database_only`: the route waits on nothing but the database, so a
    // missed deadline says the database did not answer (for the breaker).
    let answer_within = |per_mib, database_only| {
        middleware::from_fn_with_state(
            RouteDeadline {
                answer: d.request,
                per_mib,
                body: d.body,
                database_only,
            },
            within_deadline,
        )
    };
    let v1 = OpenApiRouter::new()
        .routes(routes!(namespaces::ensure))
        .routes(routes!(functions::list, functions::create))
        .routes(routes!(functions::get, functions::delete))
        .routes(routes!(invocations::list))
        .routes(routes!(versions::list))
        .routes(routes!(versions::rollback))
        .routes(routes!(triggers::list, triggers::create))
        .routes(routes!(triggers::get, triggers::patch, triggers::delete))
        .routes(routes!(jobs::create))
        .routes(routes!(jobs::get, jobs::delete))
        .routes(routes!(events::list))
        .routes(routes!(events::list_all))
        // Answers once the tail has its start; the events follow in the body.
        .routes(routes!(events::tail))
        .routes(routes!(admin::start_replay, admin::last_replay))
        .routes(routes!(admin::reconcile))
        .route_layer(answer_within(Duration::ZERO, true))
        // These also wait on the blob store.
        .routes(routes!(functions::update).layer(answer_within(Duration::ZERO, false)))
        .routes(routes!(source::get).layer(answer_within(Duration::ZERO, false)))
        .routes(routes!(versions::source).layer(answer_within(Duration::ZERO, false)))
        .routes(routes!(versions::archive).layer(answer_within(Duration::ZERO, false)))
        .routes(routes!(versions::diff).layer(answer_within(Duration::ZERO, false)))
        .routes(
            routes!(upload::upload)
                .layer(DefaultBodyLimit::max(upload_limit))
                .layer(answer_within(d.upload_per_mib, false)),
        );
    // The functions' routes are documented with the API's (their paths
    // are on the functions' origin: `openapi::finish` says so).
    let functions_doc = function_routes(&state).into_openapi();
    let (router, mut doc) = OpenApiRouter::new()
        .nest("/v1", v1)
        .routes(routes!(health::readyz).layer(answer_within(Duration::ZERO, true)))
        // Everything above needs the database.
        .route_layer(middleware::from_fn_with_state(
            state.breaker.clone(),
            shed_while_unavailable,
        ))
        .routes(routes!(health::healthz))
        .routes(routes!(openapi::document))
        .split_for_parts();
    utoipa::openapi::OpenApi::merge(&mut doc, functions_doc);
    let doc: Arc<str> = serde_json::to_string(&openapi::finish(doc))
        .expect("the OpenAPI document serializes")
        .into();
    // On this origin `/fn/...` only points at the functions' origin.
    let router = router.layer(Extension(doc)).fallback(api_fallback);
    finish(router, state)
}

/// A path no route of the API has; `/fn/...` is on the functions' origin.
async fn api_fallback(state: State<AppState>, uri: Uri) -> Response {
    if uri.path().starts_with("/fn/") {
        return proxy::elsewhere(state, uri).await;
    }
    no_such_route(uri).await.into_response()
}

/// The functions' origin: the invoke proxy under `/fn`, and `/healthz`.
/// It shares nothing with the API's origin but its state, so that no
/// function's answer (its scripts, cookies, CORS headers) ever comes from
/// the origin of the API and the console (docs/security.md).
pub fn fn_router(state: AppState) -> Router {
    let (router, _) = function_routes(&state)
        .routes(routes!(health::healthz))
        .split_for_parts();
    finish(router.fallback(no_such_route), state)
}

/// The proxy's routes; it passes on the methods of `proxy::METHODS`, others
/// get 405.
fn function_routes(state: &AppState) -> OpenApiRouter<AppState> {
    OpenApiRouter::new()
        .routes(routes!(proxy::invoke_root).map(|_| on(proxy::METHODS, proxy::invoke_root)))
        .routes(
            routes!(proxy::invoke_root_slash).map(|_| on(proxy::METHODS, proxy::invoke_root_slash)),
        )
        .routes(routes!(proxy::invoke_path).map(|_| on(proxy::METHODS, proxy::invoke_path)))
        .route_layer(middleware::from_fn_with_state(
            state.breaker.clone(),
            shed_while_unavailable,
        ))
}

/// What both origins do around their routes: a problem document for a
/// method a route does not take, the body limit, the header limit and the
/// request id.
fn finish(router: Router<AppState>, state: AppState) -> Router {
    router
        .method_not_allowed_fallback(method_not_allowed)
        .layer(DefaultBodyLimit::max(1024 * 1024))
        .with_state(state)
        .layer(middleware::from_fn(serve::limit_headers))
        // Outermost, so every answer carries it, refusals included.
        .layer(middleware::from_fn(invocations::with_request_id))
}

/// A path no route has: a problem document like every other 404.
async fn no_such_route(uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}

/// A route that exists, asked with a method it does not take.
async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(format!("{} does not take {method}", uri.path()))
}

/// Sheds load while the database is unavailable.
///
/// Without it, every request that arrives during an outage waits for a pool
/// connection until its deadline, and when the database comes back the
/// queue of waiters is so long that each one gets a connection slot with too
/// little of its own time left to open a connection: the pool does not
/// recover while the load lasts. So once `TRIP_AFTER` answers in a row found
/// the database unavailable (a database error that says so, or a missed
/// deadline on a route that waits on nothing else), the breaker opens:
/// requests are answered 503 at once, except one let through every
/// `PROBE_EVERY` to find out whether the database is back (with the pool
/// nearly to itself, it has its whole deadline to connect). The first answer
/// from the database closes it.
#[derive(Debug, Default)]
pub struct Breaker {
    state: Mutex<BreakerState>,
}

#[derive(Debug, Default)]
struct BreakerState {
    /// "Database unavailable" answers since the last other answer.
    failures: u32,
    /// `None` while closed.
    open: Option<Open>,
}

#[derive(Debug, Clone, Copy)]
struct Open {
    since: Instant,
    last_probe: Instant,
}

impl Breaker {
    /// How often a request is let through while the breaker is open.
    pub const PROBE_EVERY: Duration = Duration::from_millis(500);
    /// "Database unavailable" answers in a row that open the breaker.
    pub const TRIP_AFTER: u32 = 3;

    fn state(&self) -> std::sync::MutexGuard<'_, BreakerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a request may go on now.
    fn admit(&self) -> bool {
        match self.state().open.as_mut() {
            None => true,
            Some(o) if o.last_probe.elapsed() >= Self::PROBE_EVERY => {
                o.last_probe = Instant::now();
                true
            }
            Some(_) => false,
        }
    }

    /// Records how a request admitted at `admitted` ended: the database was
    /// unavailable, it answered (an answer below 500 other than 401/403,
    /// which come before any query), or neither can be told.
    fn record(&self, admitted: Instant, res: &Response) {
        let unavailable = res.extensions().get::<DatabaseUnavailable>().is_some();
        let answered = !res.status().is_server_error()
            && !matches!(
                res.status(),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
            );
        if !unavailable && !answered {
            return;
        }
        let mut state = self.state();
        if unavailable {
            state.failures += 1;
            if state.open.is_none() && state.failures >= Self::TRIP_AFTER {
                tracing::warn!("the database is unavailable; shedding requests until it answers");
                let now = Instant::now();
                state.open = Some(Open {
                    since: now,
                    last_probe: now,
                });
            }
            return;
        }
        match state.open {
            // Only a request admitted since the outage began tells that it ended.
            Some(o) if admitted < o.since => {}
            Some(o) => {
                tracing::info!(after = ?o.since.elapsed(), "the database answers again");
                *state = BreakerState::default();
            }
            None => state.failures = 0,
        }
    }

    /// True while requests are being shed.
    pub fn is_open(&self) -> bool {
        self.state().open.is_some()
    }
}

async fn shed_while_unavailable(
    State(breaker): State<Arc<Breaker>>,
    req: Request,
    next: Next,
) -> Response {
    if !breaker.admit() {
        return ApiError::unavailable(
            DATABASE_UNAVAILABLE,
            "Database unavailable",
            "the database is unavailable; requests are refused until it answers again: retry later",
        )
        .into_response();
    }
    let admitted = Instant::now();
    let res = next.run(req).await;
    breaker.record(admitted, &res);
    res
}

/// The deadlines of one route.
#[derive(Debug, Clone, Copy)]
struct RouteDeadline {
    answer: Duration,
    /// Added to `answer` per MiB of body.
    per_mib: Duration,
    body: Duration,
    database_only: bool,
}

/// Answers 503 when the route has not answered within its deadline after
/// the body arrived (408 when the body itself is late). The handler is
/// dropped: what it was waiting on is abandoned. A command it had already
/// committed stays committed, which is why a 503 means "unknown", and a
/// retry with the same `Idempotency-Key` tells.
async fn within_deadline(State(d): State<RouteDeadline>, req: Request, next: Next) -> Response {
    let (parts, body) = req.into_parts();
    let (arrived_tx, arrived) = oneshot::channel::<u64>();
    let body = if body.is_end_stream() {
        body // no body: the clock starts now (`arrived` sees the sender dropped)
    } else {
        Body::new(Arrival {
            inner: body,
            received: 0,
            arrived: Some(arrived_tx),
        })
    };
    let answer = next.run(Request::from_parts(parts, body));
    let clock = async {
        // Arrived, failed, or dropped unread by the handler: all start the clock.
        let Ok(received) = tokio::time::timeout(d.body, arrived).await else {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body-timeout",
                "Request body too slow",
                format!("the request body did not arrive within {:?}", d.body),
            );
        };
        let mib = received.unwrap_or(0) as f64 / (1024.0 * 1024.0);
        let deadline = d.answer + d.per_mib.mul_f64(mib);
        tokio::time::sleep(deadline).await;
        ApiError::unavailable(
            "deadline-exceeded",
            "Deadline exceeded",
            format!(
                "no answer within {deadline:?}; whether a command took effect is unknown: \
                 retry with the same Idempotency-Key to find out"
            ),
        )
    };
    tokio::select! {
        res = answer => res,
        late = clock => {
            let mut res = late.into_response();
            if d.database_only && res.status() == StatusCode::SERVICE_UNAVAILABLE {
                res.extensions_mut().insert(DatabaseUnavailable);
            }
            res
        }
    }
}

/// A request body that reports when it has been read to the end (or
/// failed), and how many bytes it had.
struct Arrival {
    inner: Body,
    received: u64,
    arrived: Option<oneshot::Sender<u64>>,
}

impl HttpBody for Arrival {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.received += data.len() as u64;
        }
        if matches!(polled, Poll::Ready(None | Some(Err(_))))
            && let Some(tx) = self.arrived.take()
        {
            let _ = tx.send(self.received);
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

#[cfg(test)]
mod tests {
    use std::future::Future;

    use axum::body::Body;
    use axum::http::Request;
    use axum::routing::post;
    use tower::ServiceExt;

    use super::*;

    fn answer(status: StatusCode, database_unavailable: bool) -> Response {
        let mut res = status.into_response();
        if database_unavailable {
            res.extensions_mut().insert(DatabaseUnavailable);
        }
        res
    }

    #[test]
    fn breaker_opens_after_unavailable_answers_in_a_row_and_closes_on_an_answer_from_the_database()
    {
        let b = Breaker::default();
        let down = answer(StatusCode::SERVICE_UNAVAILABLE, true);
        let before = Instant::now();
        for _ in 1..Breaker::TRIP_AFTER {
            b.record(Instant::now(), &down);
        }
        assert!(!b.is_open(), "one short of tripping");
        b.record(Instant::now(), &answer(StatusCode::CREATED, false));
        for _ in 1..Breaker::TRIP_AFTER {
            b.record(Instant::now(), &down);
        }
        assert!(!b.is_open(), "an answer in between starts the count again");
        b.record(Instant::now(), &down);
        assert!(b.is_open());
        assert!(!b.admit(), "shed at once");

        // Neither a 5xx of something else nor a 401 tells the database is back,
        // nor does an answer to a request admitted before the breaker opened.
        b.record(Instant::now(), &answer(StatusCode::BAD_GATEWAY, false));
        b.record(Instant::now(), &answer(StatusCode::UNAUTHORIZED, false));
        b.record(before, &answer(StatusCode::OK, false));
        assert!(b.is_open());

        b.record(Instant::now(), &answer(StatusCode::NOT_FOUND, false));
        assert!(!b.is_open());
        assert!(b.admit());
    }

    #[tokio::test]
    async fn an_open_breaker_lets_one_probe_through_per_interval() {
        let b = Breaker::default();
        for _ in 0..Breaker::TRIP_AFTER {
            b.record(
                Instant::now(),
                &answer(StatusCode::SERVICE_UNAVAILABLE, true),
            );
        }
        assert!(!b.admit());
        tokio::time::sleep(Breaker::PROBE_EVERY).await;
        assert!(b.admit(), "the probe");
        assert!(!b.admit(), "and only the probe");
    }

    /// A body of three 3-byte chunks, 200 ms apart.
    struct Trickle {
        left: u32,
        sleep: Pin<Box<tokio::time::Sleep>>,
    }

    impl HttpBody for Trickle {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            if self.left == 0 {
                return Poll::Ready(None);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.left -= 1;
            let next = tokio::time::Instant::now() + Duration::from_millis(200);
            self.sleep.as_mut().reset(next);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"abc")))))
        }
    }

    fn slow_route(answer: Duration, handler_takes: Duration) -> Router {
        Router::new()
            .route(
                "/",
                post(move |body: Bytes| async move {
                    tokio::time::sleep(handler_takes).await;
                    format!("{} bytes", body.len())
                }),
            )
            .route_layer(middleware::from_fn_with_state(
                RouteDeadline {
                    answer,
                    per_mib: Duration::ZERO,
                    body: Duration::from_secs(5),
                    database_only: true,
                },
                within_deadline,
            ))
    }

    #[tokio::test]
    async fn a_route_past_its_deadline_answers_503_and_says_the_database_did_not_answer() {
        let app = slow_route(Duration::from_millis(100), Duration::from_secs(30));
        let started = Instant::now();
        let res = app
            .oneshot(Request::post("/").body(Body::from("x")).unwrap())
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(res.headers().contains_key(axum::http::header::RETRY_AFTER));
        assert!(res.extensions().get::<DatabaseUnavailable>().is_some());
    }

    #[tokio::test]
    async fn the_deadline_counts_from_when_the_body_has_arrived() {
        // The body takes 600 ms to arrive; the route has 300 ms after that.
        let app = slow_route(Duration::from_millis(300), Duration::from_millis(50));
        let trickle = Trickle {
            left: 3,
            sleep: Box::pin(tokio::time::sleep(Duration::from_millis(200))),
        };
        let res = app
            .oneshot(Request::post("/").body(Body::new(trickle)).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let body = axum::body::to_bytes(res.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"9 bytes");
    }
}
