//! The test node's kubelet port: HTTPS on loopback, answering the API
//! server's `GET /containerLogs/{namespace}/{pod}/{container}` (what
//! `pods/log` becomes) with what the node's plays printed. `tailLines` and
//! `limitBytes` are honoured; `previous` gets the same text (a crashed
//! container's log is the one it printed before each crash).

use std::collections::HashMap;
use std::convert::Infallible;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use http_body_util::Full;
use hyper::service::service_fn;
use hyper::{Request, Response, StatusCode};
use hyper_util::rt::TokioIo;
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

type Key = (String, String, String);

pub(crate) struct LogServer {
    port: u16,
    logs: Mutex<HashMap<Key, String>>,
}

impl LogServer {
    /// Starts serving on a thread of its own (its own runtime: it outlives
    /// every test's).
    pub fn start() -> Arc<LogServer> {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("a port for the kubelet");
        listener
            .set_nonblocking(true)
            .expect("a non-blocking listener");
        let server = Arc::new(LogServer {
            port: listener.local_addr().expect("the kubelet's port").port(),
            logs: Mutex::new(HashMap::new()),
        });
        let acceptor = acceptor();
        let serving = server.clone();
        std::thread::Builder::new()
            .name("kube-test-kubelet".into())
            .spawn(move || {
                let rt = tokio::runtime::Builder::new_current_thread()
                    .enable_all()
                    .build()
                    .expect("a runtime for the kubelet port");
                rt.block_on(serving.serve(listener, acceptor));
            })
            .expect("a thread for the kubelet port");
        server
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn put(&self, ns: &str, pod: &str, container: &str, log: &str) {
        self.logs.lock().unwrap().insert(
            (ns.to_owned(), pod.to_owned(), container.to_owned()),
            log.to_owned(),
        );
    }

    async fn serve(self: Arc<Self>, listener: std::net::TcpListener, acceptor: TlsAcceptor) {
        let listener = tokio::net::TcpListener::from_std(listener).expect("a tokio listener");
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                continue;
            };
            let acceptor = acceptor.clone();
            let me = self.clone();
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = service_fn(move |req| {
                    let me = me.clone();
                    async move { Ok::<_, Infallible>(me.answer(&req)) }
                });
                let _ = hyper::server::conn::http1::Builder::new()
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    }

    fn answer<B>(&self, req: &Request<B>) -> Response<Full<Bytes>> {
        let reply = |status: StatusCode, text: String| {
            Response::builder()
                .status(status)
                .header("content-type", "text/plain")
                .body(Full::new(Bytes::from(text)))
                .expect("a response")
        };
        let parts: Vec<&str> = req
            .uri()
            .path()
            .trim_start_matches('/')
            .split('/')
            .collect();
        let ["containerLogs", ns, pod, container] = parts.as_slice() else {
            return reply(
                StatusCode::NOT_FOUND,
                format!("the test node serves no {}", req.uri()),
            );
        };
        let key = (ns.to_string(), pod.to_string(), container.to_string());
        let Some(log) = self.logs.lock().unwrap().get(&key).cloned() else {
            return reply(
                StatusCode::NOT_FOUND,
                format!("no container {ns}/{pod}/{container}"),
            );
        };
        let query: HashMap<&str, &str> = req
            .uri()
            .query()
            .unwrap_or_default()
            .split('&')
            .filter_map(|p| p.split_once('='))
            .collect();
        let mut text = log;
        if let Some(n) = query.get("tailLines").and_then(|n| n.parse::<usize>().ok()) {
            let lines: Vec<&str> = text.split_inclusive('\n').collect();
            text = lines[lines.len().saturating_sub(n)..].concat();
        }
        if let Some(n) = query
            .get("limitBytes")
            .and_then(|n| n.parse::<usize>().ok())
            && text.len() > n
        {
            let mut end = n;
            while !text.is_char_boundary(end) {
                end -= 1;
            }
            text.truncate(end);
        }
        reply(StatusCode::OK, text)
    }
}

/// TLS with a certificate made here: the API server does not check a
/// kubelet's certificate unless told which CA signs them.
fn acceptor() -> TlsAcceptor {
    let key = rcgen::KeyPair::generate().expect("a key for the kubelet port");
    let cert = rcgen::CertificateParams::new(vec!["127.0.0.1".to_owned()])
        .and_then(|p| p.self_signed(&key))
        .expect("a certificate for the kubelet port");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .and_then(|b| {
            b.with_no_client_auth().with_single_cert(
                vec![cert.der().clone()],
                rustls::pki_types::PrivateKeyDer::Pkcs8(key.serialize_der().into()),
            )
        })
        .expect("a TLS configuration for the kubelet port");
    TlsAcceptor::from(Arc::new(config))
}
