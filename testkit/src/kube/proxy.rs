//! A proxy in front of the real API server: plain HTTP on loopback for the
//! client under test, forwarded with another client's identity (a
//! ServiceAccount's token, say), every request recorded with the status of
//! its answer, and the faults a real server makes only when it wants to: an
//! error answer to the next requests of a path, and the end of every open
//! watch.

use std::sync::{Arc, Mutex};

use axum::body::Body;
use axum::extract::{Request as AxumRequest, State};
use axum::response::Response;
use futures_util::StreamExt;
use http_body_util::BodyExt;
use tokio::sync::watch;

/// One request the proxy received.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Request {
    pub method: String,
    pub path: String,
    /// The raw query string ("" when there is none).
    pub query: String,
    pub content_type: Option<String>,
    /// The `fieldManager` query parameter.
    pub field_manager: Option<String>,
    /// The status of the answer (an injected fault's, or the API server's);
    /// `None` while none came.
    pub status: Option<u16>,
}

impl Request {
    /// Whether the answer was `403 Forbidden`: refused by the authorizer,
    /// or by admission (Pod Security, an admission policy).
    pub fn is_forbidden(&self) -> bool {
        self.status == Some(403)
    }
}

impl Request {
    /// POST, PUT, PATCH or DELETE.
    pub fn is_write(&self) -> bool {
        matches!(self.method.as_str(), "POST" | "PUT" | "PATCH" | "DELETE")
    }

    /// A GET with `watch=true` (or `watch=1`).
    pub fn is_watch(&self) -> bool {
        self.method == "GET"
            && self
                .query
                .split('&')
                .any(|p| p == "watch=true" || p == "watch=1")
    }

    /// A server-side apply.
    pub fn is_apply(&self) -> bool {
        self.method == "PATCH"
            && self.content_type.as_deref() == Some("application/apply-patch+yaml")
    }
}

struct Fault {
    method: Option<String>,
    path_prefix: String,
    remaining: usize,
    code: u16,
}

#[derive(Default)]
struct Shared {
    /// Each request with its number, counted from the proxy's start.
    requests: Mutex<Vec<(u64, Request)>>,
    received: std::sync::atomic::AtomicU64,
    faults: Mutex<Vec<Fault>>,
}

#[derive(Clone)]
struct Proxy {
    upstream: kube::Client,
    shared: Arc<Shared>,
    /// Bumped to end every open response body (watches).
    cut: watch::Sender<u64>,
}

/// The proxy; it stops when dropped.
pub struct KubeProxy {
    url: String,
    shared: Arc<Shared>,
    cut: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl Drop for KubeProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl KubeProxy {
    /// Serves on a free port of loopback, forwarding to `upstream`.
    pub async fn start(upstream: kube::Client) -> KubeProxy {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0")
            .await
            .expect("a port for the proxy");
        let url = format!("http://{}", listener.local_addr().expect("its address"));
        let shared = Arc::new(Shared::default());
        let (cut, _) = watch::channel(0);
        let proxy = Proxy {
            upstream,
            shared: shared.clone(),
            cut: cut.clone(),
        };
        let app = axum::Router::new().fallback(forward).with_state(proxy);
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        KubeProxy {
            url,
            shared,
            cut,
            task,
        }
    }

    /// `http://127.0.0.1:{port}`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// A client of the proxy (with the upstream's identity).
    pub fn client(&self) -> kube::Client {
        let config = kube::Config::new(self.url.parse().expect("the proxy's URL"));
        kube::Client::try_from(config).expect("a client of the proxy")
    }

    /// What was asked so far, in order.
    pub fn requests(&self) -> Vec<Request> {
        let requests = self.shared.requests.lock().unwrap();
        requests.iter().map(|(_, r)| r.clone()).collect()
    }

    pub fn clear_requests(&self) {
        self.shared.requests.lock().unwrap().clear();
    }

    /// The next `n` requests (of `method`, when given) whose path starts
    /// with `path_prefix` are answered `code` with a `Status`, as the API
    /// server answers (409 `Conflict`, 500, 503, ...), without reaching it.
    pub fn fail_next(&self, method: Option<&str>, path_prefix: &str, n: usize, code: u16) {
        self.shared.faults.lock().unwrap().push(Fault {
            method: method.map(str::to_owned),
            path_prefix: path_prefix.to_owned(),
            remaining: n,
            code,
        });
    }

    /// Ends every watch (and every other response still streaming) now, as
    /// an API server does when it restarts or a load balancer times out:
    /// every request received so far whose answer is still coming, or has
    /// not started yet, gets its body ended.
    pub fn end_watches(&self) {
        self.cut.send_modify(|n| *n += 1);
    }
}

fn reason_of(code: u16) -> &'static str {
    match code {
        400 => "BadRequest",
        403 => "Forbidden",
        404 => "NotFound",
        409 => "Conflict",
        410 => "Expired",
        422 => "Invalid",
        429 => "TooManyRequests",
        503 => "ServiceUnavailable",
        504 => "Timeout",
        _ => "InternalError",
    }
}

async fn forward(State(proxy): State<Proxy>, req: AxumRequest) -> Response {
    // From its arrival: a watch asked for before `end_watches` is ended by
    // it, even when the API server's answer comes after.
    let mut cut = proxy.cut.subscribe();
    let (parts, body) = req.into_parts();
    let query = parts.uri.query().unwrap_or_default().to_owned();
    let recorded = Request {
        method: parts.method.to_string(),
        path: parts.uri.path().to_owned(),
        query: query.clone(),
        content_type: parts
            .headers
            .get(http::header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .map(str::to_owned),
        field_manager: query
            .split('&')
            .find_map(|p| p.strip_prefix("fieldManager="))
            .map(str::to_owned),
        status: None,
    };
    let number = proxy
        .shared
        .received
        .fetch_add(1, std::sync::atomic::Ordering::SeqCst);
    proxy
        .shared
        .requests
        .lock()
        .unwrap()
        .push((number, recorded.clone()));
    let answered = |code: u16| {
        let mut requests = proxy.shared.requests.lock().unwrap();
        // Gone when the requests were cleared in the meantime.
        if let Some((_, r)) = requests.iter_mut().find(|(n, _)| *n == number) {
            r.status = Some(code);
        }
    };

    let fault = {
        let mut faults = proxy.shared.faults.lock().unwrap();
        faults
            .iter_mut()
            .find(|f| {
                f.remaining > 0
                    && recorded.path.starts_with(&f.path_prefix)
                    && f.method.as_deref().is_none_or(|m| m == recorded.method)
            })
            .map(|f| {
                f.remaining -= 1;
                f.code
            })
    };
    if let Some(code) = fault {
        answered(code);
        let status = serde_json::json!({
            "kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
            "message": format!("injected by the test proxy: {code} on {} {}", recorded.method, recorded.path),
            "reason": reason_of(code), "code": code,
        });
        return Response::builder()
            .status(code)
            .header(http::header::CONTENT_TYPE, "application/json")
            .body(Body::from(status.to_string()))
            .expect("a response");
    }

    let bytes = match body.collect().await {
        Ok(b) => b.to_bytes(),
        Err(e) => {
            answered(502);
            return error(format!("reading the request: {e}"));
        }
    };
    let mut upstream = http::Request::builder().method(parts.method.clone()).uri(
        parts
            .uri
            .path_and_query()
            .map(|p| p.as_str())
            .unwrap_or("/"),
    );
    for (name, value) in &parts.headers {
        if name != http::header::AUTHORIZATION && name != http::header::HOST {
            upstream = upstream.header(name, value);
        }
    }
    let upstream = match upstream.body(kube::client::Body::from(bytes.to_vec())) {
        Ok(r) => r,
        Err(e) => {
            answered(502);
            return error(format!("forwarding: {e}"));
        }
    };
    let answer = match proxy.upstream.send(upstream).await {
        Ok(a) => a,
        Err(e) => {
            answered(502);
            return error(format!("the API server: {e}"));
        }
    };
    let (head, body) = answer.into_parts();
    answered(head.status.as_u16());
    let ended = async move {
        let _ = cut.changed().await;
    };
    let stream = body.into_data_stream().take_until(ended);
    let mut response = Response::builder().status(head.status);
    for (name, value) in &head.headers {
        let hop = [http::header::CONNECTION, http::header::TRANSFER_ENCODING];
        if !hop.contains(name) {
            response = response.header(name, value);
        }
    }
    response
        .body(Body::from_stream(stream))
        .expect("a response")
}

fn error(message: String) -> Response {
    Response::builder()
        .status(502)
        .body(Body::from(message))
        .expect("a response")
}
