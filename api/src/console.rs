//! The web console: server-rendered pages under `/console` on the API's
//! origin (never the functions'), for a signed-in browser (`session`), and
//! the seed's plain-text routes under `/funcs` (`plain`).
//!
//! The console reads and changes through the API's own handlers
//! (`calls`): it sees what the REST API answers, with the same tenancy
//! (another tenant's namespace is a 404 page), and its forms are the same
//! commands (the same events, actor and request id in the audit log).
//! Every answer carries a strict Content-Security-Policy (no inline
//! script: the one script is `assets/console.js`, and every page works
//! without it), `X-Content-Type-Options: nosniff`, `Referrer-Policy:
//! same-origin` and `frame-ancestors 'none'`; every value on a page is
//! escaped (maud), its invisible characters made visible (`text`). A
//! request that changes something must come from the console's own origin
//! (`session::same_origin`).

// A refusal here is the page to answer with (a `Response`), returned once
// per request: its size does not matter.
#![allow(clippy::result_large_err)]

mod activity;
mod assets;
mod calls;
mod function;
mod highlight;
mod logs;
mod namespace;
mod page;
mod plain;
mod runs;
pub mod session;
mod text;
mod versions;

use axum::Router;
use axum::extract::{Query, Request};
use axum::http::{HeaderValue, header};
use axum::middleware::{self, Next};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::{get, post};
use serde::Deserialize;

use crate::AppState;

pub use session::issue_code;

/// The Content-Security-Policy of every console answer.
pub const CSP: &str = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; \
                       connect-src 'self'; form-action 'self'; base-uri 'none'; frame-ancestors 'none'";

/// The console's routes (`/console/...`, `/funcs/...`).
pub fn routes() -> Router<AppState> {
    Router::new()
        .route("/console", get(home))
        .route("/console/", get(home))
        .route("/console/assets/{file}", get(assets::serve))
        .route(
            "/console/sign-in",
            get(session::sign_in_page).post(session::sign_in),
        )
        .route("/console/sign-out", post(session::sign_out))
        .route("/console/switch", get(switch))
        .route("/console/ns/{ns}", get(namespace::show))
        .route("/console/ns/{ns}/functions/{name}", get(function::show))
        .route(
            "/console/ns/{ns}/functions/{name}/try",
            post(function::try_it),
        )
        .route(
            "/console/ns/{ns}/functions/{name}/versions",
            get(versions::show),
        )
        .route(
            "/console/ns/{ns}/functions/{name}/versions/{v}/archive",
            get(versions::archive),
        )
        .route(
            "/console/ns/{ns}/functions/{name}/rollback",
            get(versions::confirm_rollback).post(versions::rollback),
        )
        .route(
            "/console/ns/{ns}/functions/{name}/invocations",
            get(activity::invocations),
        )
        .route(
            "/console/ns/{ns}/functions/{name}/invocations/{id}",
            get(logs::invocation),
        )
        .route("/console/ns/{ns}/functions/{name}/logs", get(logs::show))
        .route(
            "/console/ns/{ns}/functions/{name}/logs/stream",
            get(logs::stream),
        )
        .route(
            "/console/ns/{ns}/triggers/{name}",
            get(runs::trigger).post(namespace::toggle),
        )
        .route("/console/ns/{ns}/jobs", post(runs::run_job))
        .route("/console/ns/{ns}/jobs/{name}", get(runs::job))
        .route("/console/ns/{ns}/events", get(activity::events))
        .route("/console/ns/{ns}/events/stream", get(activity::stream))
        .route("/funcs/{ns}", get(plain::list))
        .route("/funcs/{ns}/source/{name}", get(plain::source))
        .layer(middleware::from_fn(session::forms_from_this_origin))
        .layer(middleware::from_fn(security_headers))
}

/// `GET /console`: the signed-in namespace, or the sign-in page.
async fn home(session: Result<session::Session, Response>) -> Response {
    match session {
        Ok(s) => Redirect::to(&format!("/console/ns/{}", s.caller.namespace)).into_response(),
        // A cookie sent twice is refused here too, not sent on to sign in.
        Err(two) if two.status() == axum::http::StatusCode::BAD_REQUEST => two,
        Err(_) => Redirect::to("/console/sign-in").into_response(),
    }
}

#[derive(Deserialize)]
struct Switch {
    ns: String,
}

/// `GET /console/switch?ns=`: an admin's namespace field.
async fn switch(_: session::Session, Query(to): Query<Switch>) -> Response {
    let ns = to.ns.trim();
    match sless_domain::Namespace::parse(ns) {
        Ok(ns) => Redirect::to(&format!("/console/ns/{ns}")).into_response(),
        Err(_) => page::refused(
            axum::http::StatusCode::NOT_FOUND,
            "Not found",
            "That is not a namespace (\"sless-\" and 16 hex digits).",
        ),
    }
}

async fn security_headers(req: Request, next: Next) -> Response {
    let mut res = next.run(req).await;
    let h = res.headers_mut();
    h.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(CSP),
    );
    h.insert(
        header::X_CONTENT_TYPE_OPTIONS,
        HeaderValue::from_static("nosniff"),
    );
    h.insert(
        header::REFERRER_POLICY,
        HeaderValue::from_static("same-origin"),
    );
    h.insert(header::X_FRAME_OPTIONS, HeaderValue::from_static("DENY"));
    h.entry(header::CACHE_CONTROL)
        .or_insert(HeaderValue::from_static("no-store"));
    res
}
