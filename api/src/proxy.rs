//! `ANY /fn/{ns}/{name}[/...]`: the public invoke proxy. Forwards the request
//! to the function's running endpoint and streams both bodies.
//!
//! Where a function runs comes from the read model, remembered for
//! `Endpoints::ttl` so a busy function costs no query per request. A
//! remembered endpoint can go stale when a new version replaces the
//! process: a request that cannot connect forgets it, and when it has no
//! body to replay it is sent again to the endpoint the read model now names.

use std::collections::HashMap;
use std::sync::RwLock;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::extract::{Path, Request, State};
use axum::http::{HeaderName, StatusCode, Uri, header};
use axum::response::{IntoResponse, Response};
use sless_store::readmodel::{self, FunctionRow};

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

/// Where each function runs, as the read model said a moment ago.
pub struct Endpoints {
    ttl: Duration,
    known: RwLock<HashMap<(String, String), Remembered>>,
}

/// When a function's target was read, and what it was (None: no such function).
type Remembered = (Instant, Option<Target>);

/// What the proxy needs of a function's row.
#[derive(Clone)]
struct Target {
    /// `Some(url)` once a version is deployed; else the phase it is in.
    endpoint: Result<String, &'static str>,
    timeout: Duration,
}

impl Target {
    fn of(row: &FunctionRow) -> Target {
        Target {
            endpoint: match (&row.endpoint, row.deployed_version) {
                (Some(e), Some(_)) => Ok(e.clone()),
                _ => Err(row.phase.as_str()),
            },
            timeout: Duration::from_secs(row.spec.timeout_sec as u64),
        }
    }
}

impl Endpoints {
    pub fn new(ttl: Duration) -> Endpoints {
        Endpoints {
            ttl,
            known: RwLock::new(HashMap::new()),
        }
    }

    /// The function's target (None: no such function), from memory when
    /// fresh, else from the read model.
    async fn get(
        &self,
        pool: &sless_store::PgPool,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<Target>> {
        let key = (ns.to_owned(), name.to_owned());
        if let Some((at, target)) = self.known.read().unwrap().get(&key)
            && at.elapsed() < self.ttl
        {
            return Ok(target.clone());
        }
        let target = readmodel::function_row(pool, ns, name)
            .await?
            .as_ref()
            .map(Target::of);
        let mut known = self.known.write().unwrap();
        if known.len() > 100_000 {
            known.clear(); // a crude bound; entries are cheap to fetch again
        }
        known.insert(key, (Instant::now(), target.clone()));
        Ok(target)
    }

    fn forget(&self, ns: &str, name: &str) {
        self.known
            .write()
            .unwrap()
            .remove(&(ns.to_owned(), name.to_owned()));
    }
}

async fn forward(
    state: AppState,
    ns: String,
    name: String,
    rest: String,
    req: Request,
) -> ApiResult<Response> {
    if rest.starts_with("__sless") {
        return Err(ApiError::not_found("paths under /__sless are reserved"));
    }
    let (mut parts, body) = req.into_parts();
    for h in &HOP_BY_HOP {
        parts.headers.remove(h);
    }
    parts.headers.remove(header::HOST);
    let path_and_query = match parts.uri.query() {
        Some(q) => format!("/{rest}?{q}"),
        None => format!("/{rest}"),
    };
    // A request without a body can be sent again if its endpoint went away.
    let replayable = hyper::body::Body::size_hint(&body).exact() == Some(0);
    let mut body = Some(body);
    let mut parts = Some(parts);
    for fresh in [false, true] {
        if fresh {
            state.endpoints.forget(&ns, &name);
        }
        let target = state
            .endpoints
            .get(&state.pool, &ns, &name)
            .await?
            .ok_or_else(|| {
                ApiError::not_found(format!("function {name:?} not found in namespace {ns:?}"))
            })?;
        let endpoint = target.endpoint.map_err(|phase| {
            ApiError::new(
                StatusCode::SERVICE_UNAVAILABLE,
                "function-not-ready",
                "Function not ready",
                format!("function {name:?} has nothing running yet (phase {phase})"),
            )
        })?;
        let mut req_parts = match (replayable && !fresh, &mut parts) {
            (true, Some(p)) => p.clone(),
            (_, p) => p
                .take()
                .expect("a request is sent twice only when replayable"),
        };
        req_parts.uri = format!("{endpoint}{path_and_query}")
            .parse::<Uri>()
            .map_err(|e| ApiError::internal(format!("bad function endpoint {endpoint}: {e}")))?;
        let upstream = hyper::Request::from_parts(req_parts, body.take().unwrap_or_default());
        let res = match tokio::time::timeout(target.timeout, state.http.request(upstream)).await {
            Err(_) => {
                return Err(ApiError::new(
                    StatusCode::GATEWAY_TIMEOUT,
                    "function-timeout",
                    "Function timed out",
                    format!(
                        "function {name:?} did not answer within its timeout of {}s",
                        target.timeout.as_secs()
                    ),
                ));
            }
            Ok(Err(e)) if e.is_connect() && replayable && !fresh => continue,
            Ok(Err(e)) => {
                state.endpoints.forget(&ns, &name);
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
        return Ok(Response::from_parts(parts, Body::new(body)));
    }
    unreachable!("the second pass always returns")
}
