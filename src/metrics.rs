//! Each process's metrics: one registry for what it runs (`sless dev` runs
//! every role in one process, so one registry), and, with
//! `SLESS_METRICS_LISTEN`, `/metrics` on a listener of its own.

use std::net::SocketAddr;
use std::sync::Arc;

use axum::Router;
use axum::extract::State;
use axum::http::HeaderMap;
use axum::response::Response;
use axum::routing::get;
use sless_api::plumbing::metrics::Scope;
use sless_store::PgPool;
use sless_telemetry::Metrics;
use tokio::sync::watch;
use tokio::task::JoinHandle;

use crate::config;

/// Makes the process's registry one with `cfg`'s labels: call it before
/// anything counts.
pub fn registry(cfg: &config::Metrics) -> Arc<Metrics> {
    let metrics = if cfg.on {
        Metrics::new(cfg.labels)
    } else {
        Metrics::off()
    };
    if !sless_telemetry::install(metrics) {
        tracing::warn!("the metrics registry was in use before its settings were read");
    }
    sless_telemetry::global().clone()
}

#[derive(Clone)]
struct Scraped {
    pool: PgPool,
    metrics: Arc<Metrics>,
    scope: Scope,
}

async fn scrape(State(s): State<Scraped>, headers: HeaderMap) -> Response {
    sless_api::plumbing::metrics::scrape(&s.pool, &s.metrics, s.scope, &headers).await
}

/// Serves `/metrics` (no token asked) on `cfg.listen`, when set, until
/// `stop`.
pub async fn listen(
    cfg: &config::Metrics,
    pool: &PgPool,
    metrics: &Arc<Metrics>,
    scope: Scope,
    stop: &watch::Receiver<bool>,
) -> anyhow::Result<Option<JoinHandle<()>>> {
    let Some(addr) = cfg.listen.filter(|_| cfg.on) else {
        return Ok(None);
    };
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| anyhow::anyhow!("SLESS_METRICS_LISTEN={addr}: {e}"))?;
    let bound: SocketAddr = listener.local_addr()?;
    eprintln!("metrics at http://{bound}/metrics");
    let app = Router::new()
        .route("/metrics", get(scrape))
        .with_state(Scraped {
            pool: pool.clone(),
            metrics: metrics.clone(),
            scope,
        });
    let mut stop = stop.clone();
    Ok(Some(tokio::spawn(async move {
        let stopped = async move {
            let _ = stop.wait_for(|s| *s).await;
        };
        if let Err(e) = axum::serve(listener, app)
            .with_graceful_shutdown(stopped)
            .await
        {
            tracing::warn!(error = %e, "the metrics listener stopped");
        }
    })))
}
