//! Metrics: counting each request by its route's template, and `/metrics`,
//! the registry of this process written for Prometheus. On the API's
//! origin `/metrics` is for admin tokens (its labels name every tenant's
//! functions); `SLESS_METRICS_LISTEN` serves it on a listener of its own
//! instead, for a scraper on a private network (the binary's).

use std::sync::Arc;
use std::time::Instant;

use axum::extract::{MatchedPath, OriginalUri, Request, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use sless_store::PgPool;
use sless_telemetry::{
    ConnectionLabels, HttpLabels, Metrics, ProjectionLabels, QueueLabels, RouteLabels,
};

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::ApiResult;

/// What a process reports of the database beside its own counts: the
/// projector's lag (a process that runs the projector) and the queue (one
/// that runs a worker).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Scope {
    pub projector: bool,
    pub queue: bool,
}

/// Counts a request and how long its answer took to start, under its
/// route's template (`(none)` when no route matched).
pub async fn count_requests(
    State(metrics): State<Arc<Metrics>>,
    req: Request,
    next: Next,
) -> Response {
    if sless_telemetry::trace::enabled() {
        // The request's span is named after its route, as the metrics are.
        let route = req
            .extensions()
            .get::<MatchedPath>()
            .map(MatchedPath::as_str);
        let span = tracing::Span::current();
        span.record(
            "otel.name",
            format!("{} {}", req.method(), route.unwrap_or("")).trim_end(),
        );
        if let Some(route) = route {
            span.record("http.route", route);
        }
        sless_telemetry::trace::record_ids(&span);
    }
    if !metrics.is_on() {
        return next.run(req).await;
    }
    let started = Instant::now();
    let route = req
        .extensions()
        .get::<MatchedPath>()
        .map_or("(none)", MatchedPath::as_str)
        .to_owned();
    let method = req.method().as_str().to_owned();
    let res = next.run(req).await;
    metrics
        .http_requests
        .get_or_create(&HttpLabels {
            route: route.clone(),
            method: method.clone(),
            status: res.status().as_u16(),
        })
        .inc();
    metrics
        .http_duration
        .get_or_create(&RouteLabels { route, method })
        .observe(started.elapsed().as_secs_f64());
    res
}

/// Reads what `scope` reports from the database into the gauges. A
/// failure leaves them as they were (the scrape still answers).
pub async fn refresh(pool: &PgPool, metrics: &Metrics, scope: Scope) {
    let idle = i64::try_from(pool.num_idle()).unwrap_or(i64::MAX);
    let size = i64::from(pool.size());
    for (state, n) in [("idle", idle), ("in_use", (size - idle).max(0))] {
        metrics
            .db_connections
            .get_or_create(&ConnectionLabels {
                state: state.to_owned(),
            })
            .set(n);
    }
    // sqlx keeps the tasks waiting for a connection to itself: a pool with
    // every connection in use (in_use = max) is where they wait.
    metrics
        .db_max_connections
        .set(i64::from(pool.options().get_max_connections()));
    if scope.projector {
        match sless_store::gauges::projections(pool).await {
            Ok(projections) => {
                for p in projections {
                    let labels = ProjectionLabels { projection: p.name };
                    metrics
                        .projector_position
                        .get_or_create(&labels)
                        .set(p.position);
                    metrics
                        .projector_lag_events
                        .get_or_create(&labels)
                        .set(p.behind);
                    metrics
                        .projector_lag_seconds
                        .get_or_create(&labels)
                        .set(p.behind_secs);
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading the projector's lag for /metrics"),
        }
        match sless_store::gauges::functions(pool).await {
            Ok(functions) => {
                // A function back at zero reads nothing, not its last count.
                metrics.function_instances.clear();
                metrics.function_in_flight.clear();
                for (ns, name, instances, in_flight) in functions {
                    let labels = metrics.function(&ns, &name);
                    metrics
                        .function_instances
                        .get_or_create(&labels)
                        .set(instances);
                    metrics
                        .function_in_flight
                        .get_or_create(&labels)
                        .set(in_flight);
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading the functions' instances for /metrics"),
        }
    }
    if scope.queue {
        match sless_store::gauges::queue(pool).await {
            Ok(items) => {
                // A kind and state with no items left reads 0, not its last count.
                metrics.queue_items.clear();
                for (kind, state, n) in items {
                    metrics
                        .queue_items
                        .get_or_create(&QueueLabels { kind, state })
                        .set(n);
                }
            }
            Err(e) => tracing::warn!(error = %e, "reading the queue for /metrics"),
        }
    }
}

/// The registry, refreshed, in the format `headers` ask for.
pub async fn scrape(
    pool: &PgPool,
    metrics: &Metrics,
    scope: Scope,
    headers: &HeaderMap,
) -> Response {
    refresh(pool, metrics, scope).await;
    let openmetrics = headers
        .get(header::ACCEPT)
        .and_then(|v| v.to_str().ok())
        .is_some_and(Metrics::wants_openmetrics);
    let (body, content_type) = metrics.encode(openmetrics);
    (
        [(header::CONTENT_TYPE, HeaderValue::from_static(content_type))],
        body,
    )
        .into_response()
}

/// `/metrics` on the API's origin. Prometheus's text, not an operation of
/// the API's JSON: it is not in the OpenAPI document (as the console's
/// pages are not).
pub fn routes() -> axum::Router<AppState> {
    axum::Router::new().route("/metrics", axum::routing::get(serve))
}

/// `GET /metrics` on the API's origin: admin tokens only.
pub async fn serve(
    State(state): State<AppState>,
    caller: Caller,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
) -> ApiResult<Response> {
    caller.admin_only(&uri)?;
    if !state.metrics.is_on() {
        return Err(crate::plumbing::error::ApiError::not_found(
            "metrics are off in this process (SLESS_METRICS=off)",
        ));
    }
    Ok(scrape(&state.pool, &state.metrics, state.metrics_scope, &headers).await)
}
