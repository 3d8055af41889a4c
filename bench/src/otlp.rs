//! A collector that takes OTLP/HTTP exports and keeps only their count, size
//! and the spans they held: what a benchmark with traces on sends its spans to, on loopback.

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
    bodies: Arc<std::sync::Mutex<Vec<bytes::Bytes>>>,
    task: tokio::task::JoinHandle<()>,
}

impl Sink {
    pub async fn start() -> anyhow::Result<Sink> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr: SocketAddr = listener.local_addr()?;
        let exports = Arc::new(AtomicU64::new(0));
        let bytes = Arc::new(AtomicU64::new(0));
        let bodies = Arc::new(std::sync::Mutex::new(Vec::new()));
        let (e, b, n) = (exports.clone(), bytes.clone(), bodies.clone());
        let task = tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let (e, b, n) = (e.clone(), b.clone(), n.clone());
                tokio::spawn(async move {
                    let serve = service_fn(move |req: hyper::Request<hyper::body::Incoming>| {
                        let (e, b, n) = (e.clone(), b.clone(), n.clone());
                        async move {
                            let body = req.into_body().collect().await?.to_bytes();
                            e.fetch_add(1, Ordering::Relaxed);
                            b.fetch_add(body.len() as u64, Ordering::Relaxed);
                            // Decoded when asked, not while the load runs.
                            n.lock().unwrap().push(body);
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
            bodies,
            task,
        })
    }

    /// What it has received: exports, bytes and spans.
    pub fn received(&self) -> (u64, u64, u64) {
        (
            self.exports.load(Ordering::Relaxed),
            self.bytes.load(Ordering::Relaxed),
            self.bodies
                .lock()
                .unwrap()
                .iter()
                .map(|b| count_spans(b))
                .sum(),
        )
    }
}

impl Drop for Sink {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The spans of one export (0 when it does not decode).
fn count_spans(body: &[u8]) -> u64 {
    use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
    use prost::Message;
    ExportTraceServiceRequest::decode(body).map_or(0, |r| {
        r.resource_spans
            .iter()
            .flat_map(|rs| &rs.scope_spans)
            .map(|ss| ss.spans.len() as u64)
            .sum()
    })
}
