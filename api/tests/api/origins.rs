//! The two origins: the API's router serves no function (`/fn/...` there
//! points at the functions' origin), and the functions' router serves
//! nothing of the API. Each router is driven on its own here, not through
//! `both_origins`.

use axum::http::{Method, StatusCode, header};
use serde_json::json;
use sless_api::{AppState, Auth};

use super::proxy::{Upstream, deployed};
use super::support::*;

const SUB: &str = "olga@example.com";
const FN_URL: &str = "http://fn.test:8081";

fn state(env: &Env, fn_url: Option<&str>) -> AppState {
    let mut state = AppState::new(
        env.db.pool.clone(),
        env.s3.blobs(),
        Auth::hs256(SECRET, None, None),
    );
    state.fn_url = fn_url.map(Into::into);
    state
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_api_origin_serves_no_function_and_points_at_their_origin() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "hello", 30, &up.url).await;
    let api = sless_api::router(state(&env, Some(FN_URL)));
    let path = format!("/fn/{}/hello/x?y=1", ns(SUB));
    for method in [Method::GET, Method::POST, Method::DELETE, Method::OPTIONS] {
        let answer = send(
            &api,
            request(method.clone(), &path, Some(&token(SUB)))
                .body(axum::body::Body::from("payload"))
                .unwrap(),
        )
        .await;
        assert_eq!(answer.status, StatusCode::PERMANENT_REDIRECT, "{method}");
        assert_eq!(
            answer.headers[header::LOCATION],
            format!("{FN_URL}{path}").as_str(),
            "{method}"
        );
        assert!(answer.headers.get(header::SET_COOKIE).is_none());
    }
    assert_eq!(up.connections(), 0, "the function was never called");

    // Without the functions' origin known: 404, saying where to look.
    let api = sless_api::router(state(&env, None));
    let answer = send(&api, get(&path, None)).await;
    answer.assert_problem("no fn_url", StatusCode::NOT_FOUND, "not-found");
    assert!(
        answer.body["detail"]
            .as_str()
            .unwrap()
            .contains("an origin of their own"),
        "{}",
        answer.body
    );
    assert_eq!(up.connections(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_functions_origin_serves_nothing_of_the_api() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "hello", 30, &up.url).await;
    let functions = sless_api::fn_router(state(&env, Some(FN_URL)));
    let tok = token(SUB);
    for path in [
        functions_uri(&ns(SUB)),
        format!("{}/hello", functions_uri(&ns(SUB))),
        "/openapi.json".to_owned(),
        "/readyz".to_owned(),
        "/v1/events".to_owned(),
    ] {
        send(&functions, get(&path, Some(&tok)))
            .await
            .assert_problem(&path, StatusCode::NOT_FOUND, "not-found");
    }
    let health = send(&functions, get("/healthz", None)).await;
    assert_eq!(health.status, StatusCode::OK);
    let called = send(&functions, get(&format!("/fn/{}/hello", ns(SUB)), None)).await;
    assert_eq!(called.status, StatusCode::OK, "{}", called.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_s_url_is_on_the_functions_origin() {
    let env = Env::new().await;
    let api = sless_api::router(state(&env, Some(FN_URL)));
    let created = send(
        &api,
        post_json(
            &functions_uri(&ns(SUB)),
            Some(&token(SUB)),
            &spec("hello").to_string(),
        ),
    )
    .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let want = json!(format!("{FN_URL}/fn/{}/hello", ns(SUB)));
    assert_eq!(created.body["url"], want);
    env.catch_up().await;
    let listed = send(&api, get(&functions_uri(&ns(SUB)), Some(&token(SUB)))).await;
    assert_eq!(listed.body["items"][0]["url"], want);
}
