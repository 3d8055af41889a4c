//! A collector that takes OTLP/HTTP exports and keeps only their count and
//! size: what a benchmark with traces on sends its spans to, on loopback.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

use http_body_util::BodyExt;
use hyper::service::service_fn;
use hyper_util::rt::{TokioExecutor, TokioIo};

/// The sink, serving until dropped.
pub struct Sink {
    /// Its base address, for `OTEL_EXPORTER_OTLP_ENDPOINT`.
    pub endpoint: String,
    exports: Arc<AtomicU64>,
    bytes: Arc<AtomicU64>,
    task: tokio::task::JoinHandle<()>,
}

impl Sink {
    pub async fn start() -> anyhow::Result<Sink> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let exports = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let (e, b) = (exports.clone(), bytes.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (e, b) = (e.clone(), b.clone());
                tokio::spawn(async move {
                    let serve = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (e, b) = (e.clone(), b.clone());
                        async move {
                            let body = req.into_body().collect().await?.to_bytes();
                            e.fetch_add(1, Ordering::Relaxed);
                            b.fetch_add(body.len() as u64, Ordering::Relaxed);
                            // An empty ExportTraceServiceResponse: all taken.
                            Ok::<_, hyper::Error>(hyper::Response::new(http_body_util::Full::new(
                                bytes::Bytes::new(),
                            )))
                        }
                    });
                    let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                        .serve_connection(TokioIo::new(stream), serve)
                        .await;
                });
            }
        });
        Ok(Sink {
            endpoint: format!("http://{addr}"),
            exports,
            bytes,
            task,
        })
    }

    /// What it has received: exports and bytes.
    pub fn received(&self) -> (u64, u64) {
        (
            self.exports.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
        )
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}
