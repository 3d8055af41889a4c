//! The public invoke proxy, for functions that are not running. (A running
//! function is covered by the end-to-end tests.)

use axum::body::Body;
use axum::http::{Method, StatusCode};

use super::support::*;

const SUB: &str = "heidi@example.com";

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
    ] {
        let answer = env.send(get(&path, None)).await;
        answer.assert_problem(&path, StatusCode::NOT_FOUND, "not-found");
    }
}
