//! `sless_api::plumbing::serve`: the router over a real socket, as the binary runs it.

use std::time::Duration;

use axum::Router;
use axum::routing::get;
use serde_json::Value;
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::{Notify, oneshot};

use super::support::*;

/// Serves `app` on a loopback port; the sender stops it, the handle ends
/// when serving has.
async fn serving(app: Router) -> (String, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    serving_with(app, sless_api::plumbing::serve::HEADER_PARSE_LIMIT).await
}

/// The same, with the parser reading at most `parse_limit` header fields.
async fn serving_with(
    app: Router,
    parse_limit: usize,
) -> (String, oneshot::Sender<()>, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop_tx, stop) = oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        sless_api::plumbing::serve::serve(listener, app, parse_limit, async move {
            let _ = stop.await;
        })
        .await
        .unwrap();
    });
    (addr, stop_tx, task)
}

/// Sends a GET of `path` with `extra` header fields (`X-Extra-N: v`) on a
/// fresh connection and reads the whole answer (the request asks to close).
async fn get_with_headers(addr: &str, path: &str, extra: usize) -> (u16, String, String) {
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: sless\r\nConnection: close\r\n");
    for i in 0..extra {
        head.push_str(&format!("X-Extra-{i}: v\r\n"));
    }
    head.push_str("\r\n");
    let raw = raw_exchange(addr, &head).await;
    let (head, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .expect("a status line");
    (status, head.to_ascii_lowercase(), body.to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn too_many_header_fields_get_a_problem_document_up_to_the_parser_limit() {
    let env = Env::new().await;
    let (addr, _stop, _task) = serving(env.app.clone()).await;
    let limit = sless_api::plumbing::serve::MAX_REQUEST_HEADERS;
    // Host and Connection are two of the fields.
    let (status, _, _) = get_with_headers(&addr, "/healthz", limit - 2).await;
    assert_eq!(status, 200, "exactly {limit} fields are allowed");

    for extra in [
        limit - 1,
        300,
        sless_api::plumbing::serve::HEADER_PARSE_LIMIT - 2,
    ] {
        let (status, head, body) = get_with_headers(&addr, "/healthz", extra).await;
        assert_eq!(status, 431, "{} fields", extra + 2);
        assert!(head.contains(PROBLEM_JSON), "{head}");
        assert!(head.contains("x-request-id:"), "{head}");
        let problem: Value = serde_json::from_str(&body).unwrap();
        assert!(
            problem["type"]
                .as_str()
                .unwrap()
                .ends_with("headers-too-large"),
            "{problem}"
        );
        assert!(
            problem["detail"]
                .as_str()
                .unwrap()
                .contains(&format!("{} header fields", extra + 2)),
            "{problem}"
        );
    }

    // Past what the parser reads, it refuses on its own, without a body.
    let (status, _, body) = get_with_headers(
        &addr,
        "/healthz",
        sless_api::plumbing::serve::HEADER_PARSE_LIMIT,
    )
    .await;
    assert_eq!(status, 431);
    assert_eq!(body, "");
}

/// The functions' origin parses at most `FN_HEADER_PARSE_LIMIT` fields: the
/// highest limit the proxy may be configured with still gets its problem
/// document, and one field more is the parser's bare 431.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_functions_origin_parses_as_many_fields_as_the_proxy_may_allow() {
    let app = Router::new().route("/fn/ns/f", get(|| async { "reached" }));
    let limit = sless_api::plumbing::serve::FN_HEADER_PARSE_LIMIT;
    let (addr, _stop, _task) = serving_with(app, limit).await;
    // Host and Connection are two of the fields.
    let (status, _, body) = get_with_headers(&addr, "/fn/ns/f", limit - 2).await;
    assert_eq!((status, body.as_str()), (200, "reached"), "{limit} fields");
    let (status, _, body) = get_with_headers(&addr, "/fn/ns/f", limit - 1).await;
    assert_eq!((status, body.as_str()), (431, ""), "{} fields", limit + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_lets_the_request_in_flight_finish_and_accepts_no_more() {
    let entered = std::sync::Arc::new(Notify::new());
    let release = std::sync::Arc::new(Notify::new());
    let (e, r) = (entered.clone(), release.clone());
    let app = Router::new().route(
        "/slow",
        get(move || {
            let (e, r) = (e.clone(), r.clone());
            async move {
                e.notify_one();
                r.notified().await;
                "done"
            }
        }),
    );
    let (addr, stop, task) = serving(app).await;
    let in_flight = tokio::spawn({
        let addr = addr.clone();
        async move { get_with_headers(&addr, "/slow", 0).await }
    });
    entered.notified().await;
    stop.send(()).unwrap();

    // Serving waits for the request in flight.
    sless_testkit::eventually("the listener to close", Duration::from_secs(5), || {
        let addr = addr.clone();
        async move { TcpStream::connect(&addr).await.err() }
    })
    .await;
    assert!(!task.is_finished(), "serving ended before its request did");

    release.notify_one();
    let (status, _, body) = in_flight.await.unwrap();
    assert_eq!((status, body.as_str()), (200, "done"));
    tokio::time::timeout(Duration::from_secs(5), task)
        .await
        .expect("serving ends once its requests have")
        .unwrap();
}
