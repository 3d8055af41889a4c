//! The public invoke proxy: refusals, what reaches the function and what
//! comes back, limits, and upstreams that fail. Functions are pointed at
//! small servers on loopback (a running function is covered by the
//! end-to-end tests).

use std::convert::Infallible;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::{Body, Bytes, HttpBody};
use axum::extract::Request;
use axum::http::{HeaderName, HeaderValue, Method, StatusCode, header};
use axum::response::{IntoResponse, Response};
use axum::serve::ListenerExt;
use hyper::body::Frame;
use serde_json::{Value, json};
use sless_api::proxy::Endpoints;
use sless_api::{AppState, Auth};

use super::support::*;

const SUB: &str = "heidi@example.com";
const MIB: usize = 1024 * 1024;

/// A router over `env`'s database and bucket with its state changed by `change`.
pub fn app_with(env: &Env, change: impl FnOnce(&mut AppState)) -> Router {
    let mut state = AppState::new(
        env.db.pool.clone(),
        env.s3.blobs(),
        Auth::hs256(SECRET, None, None),
    );
    change(&mut state);
    both_origins(state)
}

/// A server on loopback that serves `app` and counts the connections it
/// accepts; stops (closing its port) when dropped.
pub struct Upstream {
    pub url: String,
    connections: Arc<AtomicUsize>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl Upstream {
    pub async fn start(app: Router) -> Upstream {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let listener = listener.tap_io(move |_| {
            counted.fetch_add(1, Ordering::SeqCst);
        });
        let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
        tokio::spawn(async move {
            axum::serve(listener, app)
                .with_graceful_shutdown(async move {
                    let _ = stop.await;
                })
                .await
                .unwrap();
        });
        Upstream {
            url,
            connections,
            _stop: stop_tx,
        }
    }

    /// Answers every request with what it received, as JSON: method, raw
    /// path and query, headers, body length. Its answer carries hop-by-hop
    /// headers of its own.
    pub async fn echo() -> Upstream {
        Upstream::start(Router::new().fallback(echo)).await
    }

    pub fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

async fn echo(req: Request) -> Response {
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(body, usize::MAX).await;
    let headers: serde_json::Map<String, Value> = parts
        .headers
        .iter()
        .map(|(n, v)| (n.to_string(), json!(String::from_utf8_lossy(v.as_bytes()))))
        .collect();
    let seen = json!({
        "method": parts.method.as_str(),
        "path": parts.uri.path(),
        "query": parts.uri.query(),
        "headers": headers,
        "body_len": body.as_ref().map(|b| b.len()).ok(),
    });
    let mut res = axum::Json(seen).into_response();
    for (n, v) in [
        ("connection", "x-up-secret"),
        ("x-up-secret", "1"),
        ("keep-alive", "timeout=5"),
        ("proxy-authenticate", "Basic"),
        ("trailer", "x-sum"),
        ("upgrade", "h2c"),
        ("x-up-kept", "1"),
    ] {
        res.headers_mut()
            .insert(HeaderName::from_static(n), HeaderValue::from_static(v));
    }
    res
}

/// Points the function `name` at `endpoint`, as a deploy would.
pub async fn point_at(env: &Env, name: &str, endpoint: &str) {
    sqlx::query("update functions set endpoint = $1, deployed_version = 1 where name = $2")
        .bind(endpoint)
        .bind(name)
        .execute(&env.db.pool)
        .await
        .unwrap();
}

/// Creates `name` in the namespace of `sub` (with `timeout_sec`),
/// projects it, and points it at `endpoint`.
pub async fn deployed(env: &Env, sub: &str, name: &str, timeout_sec: u32, endpoint: &str) {
    let mut body = spec(name);
    body["timeout_sec"] = json!(timeout_sec);
    let created = env
        .send(post_json(
            &functions_uri(&ns(sub)),
            Some(&token(sub)),
            &body.to_string(),
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    env.catch_up().await;
    point_at(env, name, endpoint).await;
}

/// Invocation records stored, of any function.
pub async fn records(env: &Env) -> i64 {
    sqlx::query_scalar("select count(*) from invocations")
        .fetch_one(&env.db.pool)
        .await
        .unwrap()
}

/// A request body of the chunks sent on the channel; ends when the sender
/// is dropped, and waits forever while it is held.
struct Chunks(tokio::sync::mpsc::Receiver<Bytes>);

impl HttpBody for Chunks {
    type Data = Bytes;
    type Error = Infallible;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, Infallible>>> {
        self.0
            .poll_recv(cx)
            .map(|chunk| chunk.map(|c| Ok(Frame::data(c))))
    }
}

/// A body of `mib` 1-MiB chunks, left open (never ending) when `open`.
async fn chunked_body(mib: usize, open: bool) -> (Body, tokio::sync::mpsc::Sender<Bytes>) {
    let (tx, rx) = tokio::sync::mpsc::channel(mib + 1);
    for _ in 0..mib {
        tx.send(Bytes::from(vec![b'x'; MIB])).await.unwrap();
    }
    let body = Body::new(Chunks(rx));
    if open {
        (body, tx)
    } else {
        let (idle, _) = tokio::sync::mpsc::channel(1);
        drop(tx);
        (body, idle)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_answers_404_for_missing_and_503_for_not_deployed_functions() {
    let env = Env::new().await;
    let ns = ns(SUB);

    let missing = env.send(get(&format!("/fn/{ns}/nope"), None)).await;
    missing.assert_problem("missing function", StatusCode::NOT_FOUND, "not-found");
    let missing_ns = env
        .send(get("/fn/sless-0000000000000000/nope/some/path", None))
        .await;
    missing_ns.assert_problem("missing namespace", StatusCode::NOT_FOUND, "not-found");

    assert_eq!(env.create(SUB, "hello").await.status, StatusCode::CREATED);
    assert_eq!(
        env.upload(SUB, "hello", &handler_zip("hi")).await.status,
        StatusCode::ACCEPTED
    );
    env.catch_up().await;
    // No token needed: the proxy is public. Nothing runs yet, for any path or method.
    for (method, path) in [
        (Method::GET, format!("/fn/{ns}/hello")),
        (Method::GET, format!("/fn/{ns}/hello/")),
        (Method::POST, format!("/fn/{ns}/hello/some/path?x=1")),
        (Method::DELETE, format!("/fn/{ns}/hello/item/7")),
    ] {
        let what = format!("{method} {path}");
        let answer = env
            .send(request(method, &path, None).body(Body::empty()).unwrap())
            .await;
        answer.assert_problem(&what, StatusCode::SERVICE_UNAVAILABLE, "function-not-ready");
    }

    for path in [
        format!("/fn/{ns}/hello/__sless"),
        format!("/fn/{ns}/hello/__sless/health"),
        format!("/fn/{ns}/hello/%5F%5Fsless/health"),
        format!("/fn/{ns}/hello/%5f_sless"),
    ] {
        let answer = env.send(get(&path, None)).await;
        answer.assert_problem(&path, StatusCode::NOT_FOUND, "not-found");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_that_cannot_be_a_users_function_are_404_without_a_lookup() {
    let env = Env::new().await;
    // A database that cannot be reached: any lookup would answer 503.
    let nowhere = sqlx::postgres::PgPoolOptions::new()
        .acquire_timeout(Duration::from_secs(2))
        .connect_lazy("postgres://sless@127.0.0.1:1/none")
        .unwrap();
    let app = sless_api::fn_router(AppState::new(
        nowhere,
        env.s3.blobs(),
        Auth::hs256(SECRET, None, None),
    ));
    let ns = ns(SUB);
    for path in [
        "/fn/sless-ffd1f598c169b0a/f".to_owned(),
        "/fn/sless-ffd1f598c169b0ae0/f".to_owned(),
        "/fn/sless-FFD1F598C169B0AE/f".to_owned(),
        "/fn/sless-ffd1f598c169b0ag/f".to_owned(),
        "/fn/sless-%66fd1f598c169b0ae/f".to_owned(),
        "/fn/default/f".to_owned(),
        "/fn/kube-system/f/x".to_owned(),
        "/fn/../v1/namespaces".to_owned(),
        format!("/fn/{ns}/Hello"),
        format!("/fn/{ns}/a_b"),
        format!("/fn/{ns}/a.b/x"),
        format!("/fn/{ns}/%68ello"),
        format!("/fn/{ns}/..%2F..%2Fv1"),
        format!("/fn/{ns}/{}", "a".repeat(41)),
        format!("/fn/{ns}/%FF"),
    ] {
        let answer = send(&app, get(&path, None)).await;
        answer.assert_problem(&path, StatusCode::NOT_FOUND, "not-found");
        assert!(answer.headers.contains_key("x-request-id"), "{path}");
    }
    // The control: a name that could exist is looked up.
    send(&app, get(&format!("/fn/{ns}/hello"), None))
        .await
        .assert_problem(
            "a lookup",
            StatusCode::SERVICE_UNAVAILABLE,
            "database-unavailable",
        );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_or_too_large_headers_are_431_a_declared_body_over_the_limit_413_and_trace_405() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    let path = format!("/fn/{}/echo/x", ns(SUB));
    let with_headers = |n: usize, value_len: usize| {
        let mut req = request(Method::GET, &path, None);
        for i in 0..n {
            req = req.header(format!("x-h{i}"), "v".repeat(value_len));
        }
        req.body(Body::empty()).unwrap()
    };
    let repeated = |n: usize| {
        let mut req = request(Method::GET, &path, None);
        for _ in 0..n {
            req = req.header("x-same", "1");
        }
        req.body(Body::empty()).unwrap()
    };
    let before = env.counts().await;
    let cases: Vec<(&str, Request<Body>, StatusCode, &str)> = vec![
        (
            "65 headers",
            with_headers(65, 1),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
        ),
        (
            "65 values of one header",
            repeated(65),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
        ),
        (
            "one header of 17 KiB",
            with_headers(1, 17 * 1024),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
        ),
        (
            "20 headers of 1 KiB",
            with_headers(20, 1024),
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
        ),
        (
            "a declared body of 6 MiB + 1",
            request(Method::POST, &path, None)
                .header(header::CONTENT_LENGTH, (6 * MIB + 1).to_string())
                .body(Body::empty())
                .unwrap(),
            StatusCode::PAYLOAD_TOO_LARGE,
            "payload-too-large",
        ),
        (
            "TRACE",
            request(Method::TRACE, &path, None)
                .body(Body::empty())
                .unwrap(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
        ),
        (
            "a method of no standard",
            request(Method::from_bytes(b"QUERY").unwrap(), &path, None)
                .body(Body::empty())
                .unwrap(),
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
        ),
    ];
    for (what, req, status, kind) in cases {
        send(&env.app, req).await.assert_problem(what, status, kind);
    }
    assert_eq!(up.connections(), 0, "nothing reached the function");
    assert_eq!(env.counts().await, before, "nothing written");
    // The controls: at the limits, the request goes through.
    for (what, req) in [
        ("64 headers", with_headers(64, 1)),
        ("10 headers of 1 KiB", with_headers(10, 1024)),
    ] {
        let answer = send(&env.app, req).await;
        assert_eq!(answer.status, StatusCode::OK, "{what}: {}", answer.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_body_past_the_limit_is_refused_while_it_streams() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "sink", 30, &up.url).await;
    let path = format!("/fn/{}/sink", ns(SUB));

    // 7 MiB and never an end: only a proxy that does not wait for the
    // whole body can answer.
    let (body, _open) = chunked_body(7, true).await;
    let started = Instant::now();
    let answer = tokio::time::timeout(
        Duration::from_secs(20),
        send(
            &env.app,
            request(Method::POST, &path, None).body(body).unwrap(),
        ),
    )
    .await
    .expect("answered before the body ended");
    answer.assert_problem(
        "7 MiB streamed",
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
    );
    assert!(started.elapsed() < Duration::from_secs(20));

    // The control: exactly the limit goes through, streamed.
    let (body, _) = chunked_body(6, false).await;
    let answer = send(
        &env.app,
        request(Method::POST, &path, None).body(body).unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["body_len"], 6 * MIB);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hop_by_hop_headers_are_stripped_both_ways_and_the_request_id_goes_through() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    let mut req = request(Method::POST, &format!("/fn/{}/echo/h", ns(SUB)), None);
    for (n, v) in [
        ("connection", "x-secret, keep-alive"),
        ("connection", "X-Other"),
        ("keep-alive", "timeout=5"),
        ("te", "trailers"),
        ("trailer", "x-sum"),
        ("transfer-encoding", "chunked"),
        ("upgrade", "websocket"),
        ("proxy-authorization", "Basic dXNlcjpwYXNz"),
        ("proxy-authenticate", "Basic"),
        ("x-secret", "1"),
        ("x-other", "2"),
        ("x-kept", "3"),
        ("x-request-id", "trace-me-42"),
    ] {
        req = req.header(n, v);
    }
    let answer = send(&env.app, req.body(Body::from("abc")).unwrap()).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let seen = answer.body["headers"].as_object().unwrap();
    for gone in [
        "connection",
        "keep-alive",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "proxy-authorization",
        "proxy-authenticate",
        "x-secret",
        "x-other",
    ] {
        assert!(
            !seen.contains_key(gone),
            "{gone} reached the function: {seen:?}"
        );
    }
    assert_eq!(seen["x-kept"], "3");
    assert_eq!(seen["x-request-id"], "trace-me-42");
    assert_eq!(answer.body["body_len"], 3);

    for gone in [
        "connection",
        "x-up-secret",
        "keep-alive",
        "proxy-authenticate",
        "trailer",
        "upgrade",
        "transfer-encoding",
    ] {
        assert!(
            !answer.headers.contains_key(gone),
            "{gone} came back: {:?}",
            answer.headers
        );
    }
    assert_eq!(answer.headers["x-up-kept"], "1");
    assert_eq!(answer.headers["x-request-id"], "trace-me-42");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_path_suffix_and_query_reach_the_function_exactly_as_sent() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    let base = format!("/fn/{}/echo", ns(SUB));
    for (suffix, path, query) in [
        ("", "/", None),
        ("/", "/", None),
        ("?a=1", "/", Some("a=1")),
        ("/a%2Fb/c", "/a%2Fb/c", None),
        (
            "/%7Euser/%20x?q=%2F%3F&r",
            "/%7Euser/%20x",
            Some("q=%2F%3F&r"),
        ),
        ("//double//slash", "//double//slash", None),
        ("/v1/namespaces", "/v1/namespaces", None),
        ("/a..b/.hidden/...", "/a..b/.hidden/...", None),
        ("/%E2%82%AC", "/%E2%82%AC", None),
    ] {
        let answer = send(&env.app, get(&format!("{base}{suffix}"), None)).await;
        assert_eq!(answer.status, StatusCode::OK, "{suffix}: {}", answer.body);
        assert_eq!(answer.body["path"], path, "{suffix}");
        assert_eq!(answer.body["query"], json!(query), "{suffix}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dot_segments_never_reach_the_function_or_the_api() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    let ns = ns(SUB);
    let tok = token(SUB);
    let before = env.counts().await;
    for suffix in [
        format!("/../../v1/namespaces/{ns}/functions"),
        format!("/x/../../../v1/namespaces/{ns}/functions"),
        "/./x".to_owned(),
        "/..".to_owned(),
        "/%2e%2e/%2E%2E/v1".to_owned(),
        "/.%2e/x".to_owned(),
        "/x/%2e".to_owned(),
    ] {
        let path = format!("/fn/{ns}/echo{suffix}");
        let answer = send(&env.app, get(&path, Some(&tok))).await;
        answer.assert_problem(&path, StatusCode::BAD_REQUEST, "invalid-path");
        assert_eq!(answer.field(), Some("path"), "{path}");
    }
    assert_eq!(up.connections(), 0, "nothing reached the function");
    assert_eq!(env.counts().await, before, "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_and_deleted_functions_are_404_without_an_upstream_connection() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "gone", 30, &up.url).await;
    // No memory of endpoints: every request reads the read model.
    let app = app_with(&env, |s| {
        s.endpoints = Arc::new(Endpoints::new(Duration::ZERO))
    });
    let path = format!("/fn/{}/gone/x", ns(SUB));
    assert_eq!(send(&app, get(&path, None)).await.status, StatusCode::OK);
    // A cold call's probe of the port, then the call's own connection.
    let served = up.connections();
    assert!((1..=2).contains(&served), "{served}");

    // The projector marks it deleted; its process may still be running.
    sqlx::query("update functions set phase = 'Deleted' where name = 'gone'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    send(&app, get(&path, None)).await.assert_problem(
        "deleted",
        StatusCode::NOT_FOUND,
        "not-found",
    );
    sqlx::query("delete from functions where name = 'gone'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    send(&app, get(&path, None)).await.assert_problem(
        "unknown",
        StatusCode::NOT_FOUND,
        "not-found",
    );
    send(&app, get(&format!("/fn/{}/never", ns(SUB)), None))
        .await
        .assert_problem("never created", StatusCode::NOT_FOUND, "not-found");
    assert_eq!(up.connections(), served, "no connection after the delete");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_that_refuses_is_502_and_one_slower_than_the_timeout_504() {
    let env = Env::new().await;
    let closed = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    // A timeout of 2 s bounds how long its cold first call waits for the
    // port to open (see the next test).
    deployed(&env, SUB, "refused", 2, &closed).await;
    let slow = Upstream::start(Router::new().fallback(|| async {
        // The fault: an answer later than the function's timeout of 1 s.
        tokio::time::sleep(Duration::from_secs(30)).await;
        "late"
    }))
    .await;
    deployed(&env, SUB, "slow", 1, &slow.url).await;
    let ns = ns(SUB);

    let answer = send(
        &env.app,
        request(Method::POST, &format!("/fn/{ns}/refused"), None)
            .body(Body::from("x"))
            .unwrap(),
    )
    .await;
    answer.assert_problem("refused", StatusCode::BAD_GATEWAY, "function-unreachable");

    let started = Instant::now();
    let answer = send(&env.app, get(&format!("/fn/{ns}/slow"), None)).await;
    answer.assert_problem("slow", StatusCode::GATEWAY_TIMEOUT, "function-timeout");
    let took = started.elapsed();
    assert!(
        took >= Duration::from_secs(1) && took < Duration::from_secs(5),
        "{took:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cold_call_waits_for_its_new_endpoint_to_accept_connections() {
    // An instance Ready before it is reachable: on Kubernetes, a Service's
    // cluster IP refuses until kube-proxy has written the new pod's rules.
    let env = Env::new().await;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    drop(listener);
    deployed(&env, SUB, "late", 30, &format!("http://{addr}")).await;
    let opened = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        let listener = tokio::net::TcpListener::bind(addr).await.unwrap();
        let app = Router::new().fallback(|body: Bytes| async move { body });
        axum::serve(listener, app).await.unwrap();
    });

    let answer = send(
        &env.app,
        request(Method::POST, &format!("/fn/{}/late", ns(SUB)), None)
            .body(Body::from("a body, which cannot be sent twice"))
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{:?}", answer.body);
    opened.abort();
}

/// A server on loopback that answers every request with `reply`; stops
/// (closing its port) when the returned sender is dropped.
async fn upstream(reply: &'static str) -> (String, tokio::sync::oneshot::Sender<()>) {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let (stop_tx, stop) = tokio::sync::oneshot::channel::<()>();
    let app = axum::Router::new().fallback(move || async move { reply });
    tokio::spawn(async move {
        axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stop.await;
            })
            .await
            .unwrap();
    });
    (url, stop_tx)
}

/// Points the function at a new server answering `reply` and stops the old
/// one, as a new version replacing the process does; returns the new
/// server's stopper once the old port is closed.
async fn replace_upstream(
    env: &Env,
    name: &str,
    (old_url, old): (String, tokio::sync::oneshot::Sender<()>),
    reply: &'static str,
) -> tokio::sync::oneshot::Sender<()> {
    let (new_url, new) = upstream(reply).await;
    point_at(env, name, &new_url).await;
    stop_upstream(&old_url, old).await;
    new
}

/// Stops the server at `url` and waits until its port is closed.
async fn stop_upstream(url: &str, stop: tokio::sync::oneshot::Sender<()>) {
    drop(stop);
    let addr = url.trim_start_matches("http://").to_owned();
    sless_testkit::eventually(
        "the old server to close",
        std::time::Duration::from_secs(5),
        || {
            let addr = addr.clone();
            async move {
                tokio::net::TcpStream::connect(addr)
                    .await
                    .is_err()
                    .then_some(())
            }
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_whose_remembered_endpoint_is_gone_follows_the_read_model_to_the_new_one() {
    let env = Env::new().await;
    let ns = ns(SUB);
    assert_eq!(env.create(SUB, "moving").await.status, StatusCode::CREATED);
    env.catch_up().await;
    let (old_url, old) = upstream("old").await;
    point_at(&env, "moving", &old_url).await;
    let path = format!("/fn/{ns}/moving/x");
    let answer = env.send(get(&path, None)).await;
    assert_eq!(
        (answer.status, answer.body),
        (StatusCode::OK, serde_json::json!("old"))
    );

    // A new version replaces the process: the read model moves on and the
    // old port closes, while the proxy still remembers the old endpoint.
    let _new = replace_upstream(&env, "moving", (old_url, old), "new").await;
    let answer = env.send(get(&path, None)).await;
    assert_eq!(
        (answer.status, answer.body),
        (StatusCode::OK, serde_json::json!("new"))
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_body_whose_instance_is_gone_goes_whole_to_the_one_that_serves() {
    let env = Env::new().await;
    let ns = ns(SUB);
    assert_eq!(env.create(SUB, "moving").await.status, StatusCode::CREATED);
    env.catch_up().await;
    let (old_url, old) = upstream("old").await;
    point_at(&env, "moving", &old_url).await;
    let path = format!("/fn/{ns}/moving");
    assert_eq!(env.send(get(&path, None)).await.status, StatusCode::OK);

    // The old instance's port closes while the proxy remembers it; the
    // new one echoes what it gets.
    let new = Upstream::echo().await;
    point_at(&env, "moving", &new.url).await;
    stop_upstream(&old_url, old).await;
    let payload = vec![7u8; 200_000];
    let post = request(Method::POST, &path, None)
        .body(Body::from(payload.clone()))
        .unwrap();
    let answer = env.send(post).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(
        (&answer.body["method"], &answer.body["body_len"]),
        (&json!("POST"), &json!(payload.len())),
        "the refused request arrived whole: {}",
        answer.body
    );
}
