//! `ANY /fn/{ns}/{name}[/...]`: the public invoke proxy. Forwards the request
//! to the function's running endpoint and streams both bodies.

use std::time::Duration;

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderName, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use sless_store::readmodel;

use crate::AppState;
use crate::error::{ApiError, ApiResult};

/// Headers that belong to one connection, not to the request (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

pub type HttpClient =
    hyper_util::client::legacy::Client<hyper_util::client::legacy::connect::HttpConnector, Body>;

pub fn client() -> HttpClient {
    let mut connector = hyper_util::client::legacy::connect::HttpConnector::new();
    connector.set_nodelay(true);
    connector.set_connect_timeout(Some(Duration::from_secs(5)));
    hyper_util::client::legacy::Client::builder(hyper_util::rt::TokioExecutor::new())
        .pool_idle_timeout(Duration::from_secs(30))
        .build(connector)
}

pub async fn invoke_root(
    State(state): State<AppState>,
    Path((ns, name)): Path<(String, String)>,
    req: Request,
) -> Response {
    forward(state, ns, name, String::new(), req)
        .await
        .into_response()
}

pub async fn invoke_path(
    State(state): State<AppState>,
    Path((ns, name, rest)): Path<(String, String, String)>,
    req: Request,
) -> Response {
    forward(state, ns, name, rest, req).await.into_response()
}

async fn forward(
    state: AppState,
    ns: String,
    name: String,
    rest: String,
    req: Request,
) -> ApiResult<Response> {
    let missing =
        || ApiError::not_found(format!("function {name:?} not found in namespace {ns:?}"));
    if rest.starts_with("__sless") {
        return Err(ApiError::not_found("paths under /__sless are reserved"));
    }
    let row = readmodel::function_row(&state.pool, &ns, &name)
        .await?
        .ok_or_else(missing)?;
    let endpoint = row
        .endpoint
        .as_deref()
        .filter(|_| row.deployed_version.is_some())
        .ok_or_else(|| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "function-not-ready",
                "Function not ready",
                format!(
                    "function {name:?} has nothing running yet (phase {})",
                    row.phase.as_str()
                ),
            )
        })?;
    let (mut parts, body) = req.into_parts();
    let query = parts
        .uri
        .query()
        .map(|q| format!("?{q}"))
        .unwrap_or_default();
    let target: Uri = format!("{endpoint}/{rest}{query}")
        .parse()
        .map_err(|e| ApiError::internal(format!("bad function endpoint {endpoint}: {e}")))?;
    parts.uri = target;
    for h in &HOP_BY_HOP {
        parts.headers.remove(h);
    }
    parts.headers.remove(header::HOST);
    let upstream = hyper::Request::from_parts(parts, body);
    let timeout = Duration::from_secs(row.spec.timeout_sec as u64);
    let res = match tokio::time::timeout(timeout, state.http.request(upstream)).await {
        Err(_) => {
            return Err(ApiError::new(
                StatusCode::GATEWAY_TIMEOUT,
                "function-timeout",
                "Function timed out",
                format!(
                    "function {name:?} did not answer within its timeout of {}s",
                    row.spec.timeout_sec
                ),
            ));
        }
        Ok(Err(e)) => {
            return Err(ApiError::new(
                StatusCode::BAD_GATEWAY,
                "function-unreachable",
                "Function unreachable",
                format!("function {name:?} could not be reached: {e}"),
            ));
        }
        Ok(Ok(res)) => res,
    };
    let (mut parts, body) = res.into_parts();
    for h in &HOP_BY_HOP {
        parts.headers.remove(h);
    }
    Ok(Response::from_parts(parts, Body::new(body)))
}
