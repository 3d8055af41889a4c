//! `POST /v1/namespaces/{ns}/ensure`: idempotent, 200 either way; the first
//! call records `NamespaceEnsured` on the namespace's stream, later ones
//! append nothing.

use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::json;
use sqlx::Row;

use super::requests::*;
use super::support::*;

const SUB: &str = "liz@example.com";

fn ensure(ns: &str, token: Option<&str>) -> axum::http::Request<Body> {
    request(Method::POST, &format!("/v1/namespaces/{ns}/ensure"), token)
        .body(Body::empty())
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ensure_records_the_namespace_once_and_answers_200_every_time() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);

    let first = env.send(ensure(&ns, Some(&tok))).await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    assert_eq!(first.body["namespace"], ns.as_str());
    assert_eq!(first.body["created"], true);
    let rows = sqlx::query(
        "select position, version, type, namespace, data, metadata from events where stream = $1",
    )
    .bind(format!("namespace/{ns}"))
    .fetch_all(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(rows.len(), 1);
    let row = &rows[0];
    assert_eq!(row.get::<String, _>("type"), "NamespaceEnsured");
    assert_eq!(row.get::<i32, _>("version"), 1);
    assert_eq!(row.get::<String, _>("namespace"), ns);
    assert_eq!(row.get::<serde_json::Value, _>("data"), json!({}));
    assert_eq!(row.get::<serde_json::Value, _>("metadata")["actor"], SUB);
    assert_eq!(first.body["position"], row.get::<i64, _>("position"));
    assert_eq!(env.work_items().await, vec![], "nothing for a worker yet");

    let before = env.counts().await;
    for _ in 0..2 {
        let again = env.send(ensure(&ns, Some(&tok))).await;
        assert_eq!(again.status, StatusCode::OK, "{}", again.body);
        assert_eq!(again.body, json!({ "namespace": ns, "created": false }));
    }
    assert_eq!(env.counts().await, before, "ensured once, never again");

    // The projector passes over a namespace's events.
    env.catch_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_the_callers_own_namespace_can_be_ensured() {
    let env = Env::new().await;
    let other = ns("someone-else@example.com");
    assert_refused(
        &env,
        "another namespace",
        ensure(&other, Some(&token(SUB))),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
    assert_refused(
        &env,
        "not a namespace",
        ensure("Not_A_Namespace", Some(&token(SUB))),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
    assert_refused(
        &env,
        "no token",
        ensure(&ns(SUB), None),
        StatusCode::UNAUTHORIZED,
        "unauthorized",
        None,
    )
    .await;
    // An admin may ensure any.
    let admin = sign(
        &json!({ "sub": "ops@example.com", "exp": now() + 600, "sless_admin": true }),
        SECRET,
    );
    let ok = env.send(ensure(&other, Some(&admin))).await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    assert_eq!(ok.body["created"], true);
}
