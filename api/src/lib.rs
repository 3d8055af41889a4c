//! The HTTP surface of sless: the REST API under `/v1`, bearer-token auth,
//! the public invoke proxy under `/fn`, and health endpoints.
//!
//! Handlers validate a request against the current state of one aggregate
//! (read from its stream), decide, and append the resulting events together
//! with the work they cause, in one transaction. Queries read the read
//! models the projector keeps.
//!
//! Architecture Invariant: the API depends on store and domain only; it
//! never imports the projector or the workers, and it never talks to a
//! driver. Errors become HTTP answers in exactly one place (`error`).

pub mod auth;
pub mod command;
pub mod error;
pub mod functions;
pub mod health;
pub mod proxy;

use axum::Router;
use axum::extract::DefaultBodyLimit;
use axum::routing::{any, get, post};
use sless_domain::archive::ArchiveLimits;
use sless_store::PgPool;
use sless_store::blobs::BlobStore;

pub use auth::{Auth, issue_hs256};

/// What every handler can reach.
#[derive(Clone)]
pub struct AppState {
    pub pool: PgPool,
    pub blobs: BlobStore,
    pub auth: Auth,
    pub limits: ArchiveLimits,
    pub http: proxy::HttpClient,
}

impl AppState {
    pub fn new(pool: PgPool, blobs: BlobStore, auth: Auth) -> AppState {
        AppState {
            pool,
            blobs,
            auth,
            limits: ArchiveLimits::default(),
            http: proxy::client(),
        }
    }
}

/// The whole HTTP surface.
pub fn router(state: AppState) -> Router {
    let upload_limit = state.limits.max_zip_bytes as usize;
    let v1 = Router::new()
        .route(
            "/namespaces/{ns}/functions",
            get(functions::list).post(functions::create),
        )
        .route("/namespaces/{ns}/functions/{name}", get(functions::get))
        .route(
            "/namespaces/{ns}/functions/{name}/upload",
            post(functions::upload).layer(DefaultBodyLimit::max(upload_limit)),
        );
    Router::new()
        .nest("/v1", v1)
        .route("/fn/{ns}/{name}", any(proxy::invoke_root))
        .route("/fn/{ns}/{name}/", any(proxy::invoke_root))
        .route("/fn/{ns}/{name}/{*rest}", any(proxy::invoke_path))
        .route("/healthz", get(health::healthz))
        .route("/readyz", get(health::readyz))
        .layer(DefaultBodyLimit::max(1024 * 1024))
        .with_state(state)
}
