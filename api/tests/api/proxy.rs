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

async fn point_at(env: &Env, name: &str, endpoint: &str) {
    sqlx::query("update functions set endpoint = $1, deployed_version = 1 where name = $2")
        .bind(endpoint)
        .bind(name)
        .execute(&env.db.pool)
        .await
        .unwrap();
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
    drop(old);
    let addr = old_url.trim_start_matches("http://").to_owned();
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
    new
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
async fn a_request_with_a_body_is_not_replayed_but_the_next_one_finds_the_new_endpoint() {
    let env = Env::new().await;
    let ns = ns(SUB);
    assert_eq!(env.create(SUB, "moving").await.status, StatusCode::CREATED);
    env.catch_up().await;
    let (old_url, old) = upstream("old").await;
    point_at(&env, "moving", &old_url).await;
    let path = format!("/fn/{ns}/moving");
    assert_eq!(env.send(get(&path, None)).await.status, StatusCode::OK);

    let _new = replace_upstream(&env, "moving", (old_url, old), "new").await;
    let post = request(Method::POST, &path, None)
        .body(Body::from("payload"))
        .unwrap();
    env.send(post).await.assert_problem(
        "a body sent to a closed port",
        StatusCode::BAD_GATEWAY,
        "function-unreachable",
    );
    let answer = env.send(get(&path, None)).await;
    assert_eq!(
        (answer.status, answer.body),
        (StatusCode::OK, serde_json::json!("new"))
    );
}
