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

pub mod console;
pub mod plumbing;
pub mod proxy;
pub mod rest;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::DefaultBodyLimit;
use axum::middleware;
use axum::routing::on;
use axum::{Extension, Router};
use sless_domain::archive::ArchiveLimits;
use sless_store::PgPool;
use sless_store::blobs::BlobStore;
use utoipa_axum::router::{OpenApiRouter, UtoipaMethodRouterExt};
use utoipa_axum::routes;

use crate::plumbing::breaker::shed_while_unavailable;
use crate::plumbing::deadlines::{RouteDeadline, while_progressing, within_deadline};
use crate::plumbing::metrics;
use crate::rest::fallback::{api_fallback, method_not_allowed, no_such_route};

pub use plumbing::auth::{Auth, issue_hs256};
pub use plumbing::breaker::Breaker;
pub use plumbing::deadlines::Deadlines;

/// What every handler can reach: one `Shared`, behind an `Arc`, so that
/// handing it to each request and middleware copies one pointer. It reads
/// as the `Shared` it holds; changing a field (while the state is set up,
/// before it is shared) changes its own copy.
#[derive(Clone)]
pub struct AppState(Arc<Shared>);

impl std::ops::Deref for AppState {
    type Target = Shared;
    fn deref(&self) -> &Shared {
        &self.0
    }
}

impl std::ops::DerefMut for AppState {
    fn deref_mut(&mut self) -> &mut Shared {
        Arc::make_mut(&mut self.0)
    }
}

/// The parts of the state.
#[derive(Clone)]
pub struct Shared {
    pub pool: PgPool,
    /// Wakes the workers once a command's work has committed.
    pub work: sless_store::queue::Ringer,
    pub blobs: BlobStore,
    pub auth: Auth,
    pub limits: ArchiveLimits,
    pub http: proxy::HttpClient,
    pub deadlines: Deadlines,
    pub breaker: Arc<Breaker>,
    /// Where functions run, remembered briefly by the invoke proxy.
    pub endpoints: Arc<proxy::Endpoints>,
    /// Calls held by the invoke proxy for functions scaled to zero.
    pub activations: Arc<proxy::Activations>,
    /// The calls in flight through the invoke proxy, reported for the
    /// autoscaler and the idle sweep.
    pub load: Arc<proxy::Load>,
    /// Which instance takes each call, and the calls that wait for one.
    pub spread: Arc<proxy::Spread>,
    /// Invocation records, written off the request path.
    pub invocations: plumbing::recorder::Recorder,
    /// How many uploads are checked at once.
    pub uploads: rest::upload::UploadGate,
    /// Versions kept per function besides the live one.
    pub keep_versions: usize,
    /// What each namespace may create or hold (`quota`). `AppState::new`
    /// sets none; the binary sets the configured ones.
    pub quotas: plumbing::quota::Quotas,
    /// The audit log's live tails, ended together at shutdown.
    pub tails: rest::events::Tails,
    /// The LISTEN that wakes followers of build logs.
    pub build_logs: plumbing::watch::Watch,
    /// The LISTEN that wakes followers of functions' logs.
    pub function_logs: plumbing::watch::Watch,
    /// Replays for the admin routes, filled by the binary (`admin`); `None`
    /// answers them 501.
    pub maintenance: Option<Arc<dyn rest::admin::Maintenance>>,
    /// The functions' origin as callers reach it (`http://127.0.0.1:8081`,
    /// `https://fn.example.com`): what a function's `url` starts with, and
    /// where `/fn/...` on the API's origin redirects. `None`: the API
    /// does not know it; `url` is a path and `/fn/...` answers 404 here.
    pub fn_url: Option<Arc<str>>,
    /// The one namespace whose tokens are accepted, when the instance runs
    /// functions without a sandbox (`--unsafe-no-sandbox`): another user's
    /// code would run with the platform's privileges. `None`: every user's.
    pub only_namespace: Option<sless_domain::Namespace>,
    /// This process's metrics (`/metrics`).
    pub metrics: Arc<sless_telemetry::Metrics>,
    /// What of the database `/metrics` reports besides (the binary sets it
    /// for the roles the process runs).
    pub metrics_scope: metrics::Scope,
    /// Pages of the functions list, kept while the read models stand still.
    pub pages: Arc<rest::page_cache::PageCache>,
    /// Set by the binary when it starts to stop: `/readyz` answers 503.
    pub draining: plumbing::serve::Draining,
}

/// Versions of a function kept besides the live one, by default.
pub const DEFAULT_KEEP_VERSIONS: usize = 50;

impl AppState {
    pub fn new(pool: PgPool, blobs: BlobStore, auth: Auth) -> AppState {
        let invocations = plumbing::recorder::Recorder::new(pool.clone());
        let load = proxy::Load::new(pool.clone());
        AppState(Arc::new(Shared {
            work: sless_store::queue::Ringer::new(pool.clone()),
            pool,
            blobs,
            auth,
            limits: ArchiveLimits::default(),
            http: proxy::client(),
            deadlines: Deadlines::default(),
            breaker: Arc::default(),
            endpoints: Arc::new(proxy::Endpoints::new(Duration::from_secs(1))),
            activations: Arc::default(),
            load,
            spread: Arc::default(),
            invocations,
            uploads: rest::upload::UploadGate::default(),
            keep_versions: DEFAULT_KEEP_VERSIONS,
            quotas: plumbing::quota::Quotas::UNLIMITED,
            tails: rest::events::Tails::default(),
            build_logs: plumbing::watch::Watch::new(sless_store::build_logs::CHANNEL),
            function_logs: plumbing::watch::Watch::new(sless_store::function_logs::CHANNEL),
            maintenance: None,
            fn_url: None,
            only_namespace: None,
            metrics: sless_telemetry::global().clone(),
            metrics_scope: metrics::Scope::default(),
            pages: Arc::default(),
            draining: plumbing::serve::Draining::default(),
        }))
    }
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    let upload_limit = state.limits.max_zip_bytes as usize;
    let d = state.deadlines;
    // `database_only`: the route waits on nothing but the database, so a
    // missed deadline says the database did not answer (for the breaker).
    let route_deadline = |database_only| RouteDeadline {
        answer: d.request,
        body: d.body,
        database_only,
    };
    let answer_within = |database_only| {
        middleware::from_fn_with_state(route_deadline(database_only), within_deadline)
    };
    let v1 = OpenApiRouter::new()
        .routes(routes!(rest::namespaces::ensure))
        .routes(routes!(rest::functions::list, rest::functions::create))
        .routes(routes!(rest::functions::get, rest::functions::delete))
        .routes(routes!(rest::invocations::list))
        .routes(routes!(rest::invocations::get))
        // Answers once the tail has its start; the lines follow in the body.
        .routes(routes!(rest::logs::get))
        .routes(routes!(rest::versions::list))
        .routes(routes!(rest::versions::rollback))
        .routes(routes!(rest::triggers::list, rest::triggers::create))
        .routes(routes!(
            rest::triggers::get,
            rest::triggers::patch,
            rest::triggers::delete
        ))
        .routes(routes!(rest::jobs::list, rest::jobs::create))
        .routes(routes!(rest::jobs::get, rest::jobs::delete))
        .routes(routes!(rest::events::list))
        .routes(routes!(rest::events::list_all))
        // Answers once the tail has its start; the events follow in the body.
        .routes(routes!(rest::events::tail))
        .routes(routes!(rest::admin::start_replay, rest::admin::last_replay))
        .routes(routes!(rest::admin::reconcile))
        .route_layer(answer_within(true))
        // These also wait on the blob store.
        .routes(routes!(rest::functions::update).layer(answer_within(false)))
        .routes(routes!(rest::source::get).layer(answer_within(false)))
        .routes(routes!(rest::versions::source).layer(answer_within(false)))
        .routes(routes!(rest::versions::archive).layer(answer_within(false)))
        .routes(routes!(rest::versions::diff).layer(answer_within(false)))
        // A followed log answers once it starts; the lines follow in the body.
        .routes(routes!(rest::build_log::get).layer(answer_within(false)))
        .routes(
            routes!(rest::upload::upload)
                .layer(DefaultBodyLimit::max(upload_limit))
                // Bound by its progress, not by a fixed time.
                .layer(middleware::from_fn_with_state(
                    (route_deadline(false), d.upload_idle),
                    while_progressing,
                )),
        );
    // The functions' routes are documented with the API's (their paths
    // are on the functions' origin: `rest::openapi::finish` says so).
    let functions_doc = function_routes(&state).into_openapi();
    let (router, mut doc) = OpenApiRouter::new()
        .nest("/v1", v1)
        .routes(routes!(rest::health::readyz).layer(answer_within(true)))
        // Everything above needs the database.
        .route_layer(middleware::from_fn_with_state(
            state.breaker.clone(),
            shed_while_unavailable,
        ))
        .routes(routes!(rest::health::healthz))
        .routes(routes!(rest::openapi::document))
        .split_for_parts();
    utoipa::openapi::OpenApi::merge(&mut doc, functions_doc);
    let doc: Arc<str> = serde_json::to_string(&rest::openapi::finish(doc))
        .expect("the OpenAPI document serializes")
        .into();
    // On this origin `/fn/...` only points at the functions' origin.
    let router = router
        .merge(console::routes())
        .merge(metrics::routes())
        .layer(Extension(doc))
        .fallback(api_fallback);
    finish(router, state)
}

/// The functions' origin: the invoke proxy under `/fn`, and `/healthz`.
/// It shares nothing with the API's origin but its state, so that no
/// function's answer (its scripts, cookies, CORS headers) ever comes from
/// the origin of the API and the console (docs/security.md).
pub fn fn_router(state: AppState) -> Router {
    let (router, _) = function_routes(&state)
        .routes(routes!(rest::health::healthz))
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
    let counted = state.metrics.clone();
    router
        .method_not_allowed_fallback(method_not_allowed)
        // On every route, so each request is counted under its template.
        .layer(middleware::from_fn_with_state(
            counted,
            metrics::count_requests,
        ))
        .layer(DefaultBodyLimit::max(1024 * 1024))
        .with_state(state)
        .layer(middleware::from_fn(plumbing::serve::limit_headers))
        // Outermost, so every answer carries it, refusals included.
        .layer(middleware::from_fn(plumbing::request_id::with_request_id))
}
