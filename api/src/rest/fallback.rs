//! What answers when no route does, on both origins: a path no route has
//! (on the API's origin, `/fn/...` points at the functions' origin), and a
//! method a route does not take; problem documents like every other
//! refusal.

use axum::extract::State;
use axum::http::Uri;
use axum::response::{IntoResponse, Response};

use crate::plumbing::error::ApiError;
use crate::{AppState, proxy};

/// A path no route of the API has; `/fn/...` is on the functions' origin.
pub(crate) async fn api_fallback(state: State<AppState>, uri: Uri) -> Response {
    if uri.path().starts_with("/fn/") {
        return proxy::elsewhere(state, uri).await;
    }
    no_such_route(uri).await.into_response()
}

/// A path no route has: a problem document like every other 404.
pub(crate) async fn no_such_route(uri: Uri) -> ApiError {
    ApiError::not_found(format!("no route for {}", uri.path()))
}

/// A route that exists, asked with a method it does not take.
pub(crate) async fn method_not_allowed(method: axum::http::Method, uri: Uri) -> ApiError {
    ApiError::method_not_allowed(format!("{} does not take {method}", uri.path()))
}
