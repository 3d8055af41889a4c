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
pub mod build_log;
pub mod command;
pub mod console;
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
pub mod metrics;
pub mod namespaces;
pub mod openapi;
pub mod page_cache;
pub mod paging;
pub mod path;
pub mod proxy;
pub mod quota;
pub mod recorder;
pub mod request_id;
pub mod serve;
pub mod source;
pub mod triggers;
pub mod upload;
pub mod versions;

mod breaker;
mod catch_up;
mod deadlines;
mod fallback;

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

use crate::breaker::shed_while_unavailable;
use crate::deadlines::{RouteDeadline, while_progressing, within_deadline};
use crate::fallback::{api_fallback, method_not_allowed, no_such_route};

pub use auth::{Auth, issue_hs256};
pub use breaker::Breaker;
pub use deadlines::Deadlines;

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
    /// Invocation records, written off the request path.
    pub invocations: recorder::Recorder,
    /// How many uploads are checked at once.
    pub uploads: upload::UploadGate,
    /// Versions kept per function besides the live one.
    pub keep_versions: usize,
    /// What each namespace may create or hold (`quota`). `AppState::new`
    /// sets none; the binary sets the configured ones.
    pub quotas: quota::Quotas,
    /// The audit log's live tails, ended together at shutdown.
    pub tails: events::Tails,
    /// The LISTEN that wakes followers of build logs.
    pub build_logs: build_log::Watch,
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
    /// This process's metrics (`/metrics`).
    pub metrics: Arc<sless_telemetry::Metrics>,
    /// What of the database `/metrics` reports besides (the binary sets it
    /// for the roles the process runs).
    pub metrics_scope: metrics::Scope,
    /// Pages of the functions list, kept while the read models stand still.
    pub pages: Arc<page_cache::PageCache>,
}

/// Versions of a function kept besides the live one, by default.
pub const DEFAULT_KEEP_VERSIONS: usize = 50;

impl AppState {
    pub fn new(pool: PgPool, blobs: BlobStore, auth: Auth) -> AppState {
        let invocations = recorder::Recorder::new(pool.clone());
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
            invocations,
            uploads: upload::UploadGate::default(),
            keep_versions: DEFAULT_KEEP_VERSIONS,
            quotas: quota::Quotas::UNLIMITED,
            tails: events::Tails::default(),
            build_logs: build_log::Watch::default(),
            maintenance: None,
            fn_url: None,
            only_namespace: None,
            metrics: sless_telemetry::global().clone(),
            metrics_scope: metrics::Scope::default(),
            pages: Arc::default(),
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
        .routes(routes!(namespaces::ensure))
        .routes(routes!(functions::list, functions::create))
        .routes(routes!(functions::get, functions::delete))
        .routes(routes!(invocations::list))
        .routes(routes!(versions::list))
        .routes(routes!(versions::rollback))
        .routes(routes!(triggers::list, triggers::create))
        .routes(routes!(triggers::get, triggers::patch, triggers::delete))
        .routes(routes!(jobs::list, jobs::create))
        .routes(routes!(jobs::get, jobs::delete))
        .routes(routes!(events::list))
        .routes(routes!(events::list_all))
        // Answers once the tail has its start; the events follow in the body.
        .routes(routes!(events::tail))
        .routes(routes!(admin::start_replay, admin::last_replay))
        .routes(routes!(admin::reconcile))
        .route_layer(answer_within(true))
        // These also wait on the blob store.
        .routes(routes!(functions::update).layer(answer_within(false)))
        .routes(routes!(source::get).layer(answer_within(false)))
        .routes(routes!(versions::source).layer(answer_within(false)))
        .routes(routes!(versions::archive).layer(answer_within(false)))
        .routes(routes!(versions::diff).layer(answer_within(false)))
        // A followed log answers once it starts; the lines follow in the body.
        .routes(routes!(build_log::get).layer(answer_within(false)))
        .routes(
            routes!(upload::upload)
                .layer(DefaultBodyLimit::max(upload_limit))
                // Bound by its progress, not by a fixed time.
                .layer(middleware::from_fn_with_state(
                    (route_deadline(false), d.upload_idle),
                    while_progressing,
                )),
        );
    // The functions' routes are documented with the API's (their paths
    // are on the functions' origin: `openapi::finish` says so).
    let functions_doc = function_routes(&state).into_openapi();
    let (router, mut doc) = OpenApiRouter::new()
        .nest("/v1", v1)
        .routes(routes!(health::readyz).layer(answer_within(true)))
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
        .layer(middleware::from_fn(serve::limit_headers))
        // Outermost, so every answer carries it, refusals included.
        .layer(middleware::from_fn(request_id::with_request_id))
}
