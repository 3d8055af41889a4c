//! `/fn/{ns}/{name}[/...]`: the public invoke proxy. Forwards the request
//! to the function's running endpoint and streams both bodies. It is served
//! on the functions' origin (`crate::fn_router`), never on the API's: there
//! `/fn/...` only redirects (`elsewhere`).
//!
//! Where a function runs comes from the read model, remembered for
//! `Endpoints::ttl` so a busy function costs no query per request. A
//! remembered endpoint can go stale when a new version replaces the
//! process, or the function is scaled to zero: a request that cannot
//! connect, or whose kept-alive connection to the old process breaks,
//! forgets it, and when it has no body to replay it is sent again to the
//! endpoint the read model now names (or held, below). A function deleted
//! or replaced is seen within that ttl.
//!
//! A function scaled to zero (`activation`): the call is held while one
//! instance starts for all the calls held for it, then forwarded; 503
//! `function-activating` with `Retry-After` past the activation timeout or
//! when too many calls are held, 503 `function-activation-failed` when the
//! start failed.
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
//!   cut short (`body`: the caller's connection is closed, the record says
//!   so).
//!
//! (Duplicate or conflicting `Host` fields get a 400 problem document in
//! `serve`, before any route.)
//!
//! (A request past the HTTP parser's limits on the functions' origin,
//! `serve::FN_HEADER_PARSE_LIMIT` fields or a head larger than its read
//! buffer, is refused by the parser: 431 without a body. Below them the
//! proxy's own limits answer with a problem document.)
//!
//! What crosses, each way, is `edge`'s: hop-by-hop headers are stripped
//! both ways, the platform's credentials (its tokens, its cookies) never
//! reach a function, and a function's cookies stay under its own path. The
//! request's `X-Request-Id` (see `request_id::request_id`) goes to the
//! function and back.
//!
//! Every call that reaches the lookup of an existing function is recorded
//! (`recorder::Recorder`) when its answer has been sent, or abandoned:
//! the version that answered, start time, duration to the last byte, the
//! status the client got, body bytes in and out as they streamed (in: as
//! read from the client, so a body refused past the limit counts what was
//! read of it), cold or warm, and the error, if any. A call is *cold* when it is the first this
//! API process sent to a deployed version's endpoint: the first request to
//! reach a freshly started function process, since drivers only ever send
//! it health checks before. Several API processes each count their own
//! first call as cold.
//!
//! The parts: what a request must be before any lookup (`admission`), the
//! endpoint cache (`endpoints`), calls held for a function at zero
//! (`activation`), sending the request and checking the
//! answer's head (`forward`), both bodies as they stream (`body`), and
//! what a call records (`call`).

use std::time::Instant;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use chrono::Utc;

use crate::AppState;
use crate::plumbing::error::ApiError;
use crate::plumbing::request_id::{self, X_REQUEST_ID};

mod activation;
mod admission;
mod body;
mod call;
mod crashes;
pub mod edge;
mod endpoints;
mod forward;
mod load;
mod spread;

pub use activation::Activations;
pub use admission::ProxyLimits;
pub use endpoints::Endpoints;
pub use forward::{BAD_UPSTREAM_RESPONSE, HttpClient, client};
pub use load::Load;
pub use spread::{BUSY, Spread};

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

/// `/fn/{ns}/{name}`: the function at its root path. Each method is an
/// operation of its own in the document, its id this one's and the method's
/// (`invokeFunctionGet`: `openapi::finish`).
/// Any body, passed on to the function as it is.
#[derive(utoipa::ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct AnyBody(pub Vec<u8>);

#[utoipa::path(method(get, post, put, delete, patch, head, options), path = "/fn/{ns}/{name}", operation_id = "invokeFunction", tag = "invoke", summary = "Invoke a function (no auth)",
    params(("ns" = String, Path, description = "The function's namespace"), ("name" = String, Path, description = "The function")),
    request_body(content = AnyBody, content_type = "application/octet-stream", description = "Passed to the function as is, under the Content-Type it was sent with: any content type is passed through, not only this one"),
    responses((status = "default", description = "The function's answer, as it gave it")))]
pub async fn invoke_root(State(state): State<AppState>, req: Request) -> Response {
    invoke(state, req).await
}

/// `/fn/{ns}/{name}/`: the same, as a function that serves a directory sees it.
#[utoipa::path(method(get, post, put, delete, patch, head, options), path = "/fn/{ns}/{name}/", operation_id = "invokeFunctionSlash", tag = "invoke", summary = "Invoke a function at its root path, with a trailing slash (no auth)",
    params(("ns" = String, Path, description = "The function's namespace"), ("name" = String, Path, description = "The function")),
    request_body(content = AnyBody, content_type = "application/octet-stream", description = "Passed to the function as is, under the Content-Type it was sent with: any content type is passed through, not only this one"),
    responses((status = "default", description = "The function's answer, as it gave it")))]
pub async fn invoke_root_slash(State(state): State<AppState>, req: Request) -> Response {
    invoke(state, req).await
}

/// `/fn/{ns}/{name}/{*rest}`: the function at a path of its own.
#[utoipa::path(method(get, post, put, delete, patch, head, options), path = "/fn/{ns}/{name}/{*rest}", operation_id = "invokeFunctionPath", tag = "invoke", summary = "Invoke a function at a sub-path (no auth)",
    params(("ns" = String, Path, description = "The function's namespace"), ("name" = String, Path, description = "The function"), ("rest" = String, Path, description = "The path the function sees, after its prefix")),
    request_body(content = AnyBody, content_type = "application/octet-stream", description = "Passed to the function as is, under the Content-Type it was sent with: any content type is passed through, not only this one"),
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

async fn invoke(state: AppState, mut req: Request) -> Response {
    let started = Instant::now();
    let started_at = Utc::now();
    let request_id = request_id::request_id(req.headers_mut());
    let mut res = forward::forward(&state, started, started_at, &request_id, req)
        .await
        .unwrap_or_else(IntoResponse::into_response);
    res.headers_mut().insert(X_REQUEST_ID, request_id);
    res
}
