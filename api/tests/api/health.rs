//! `/healthz` and `/readyz` need no token.

use axum::http::StatusCode;
use serde_json::json;

use super::support::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn healthz_is_200_and_readyz_reports_current_migrations() {
    let env = Env::new().await;
    let health = env.send(get("/healthz", None)).await;
    assert_eq!(health.status, StatusCode::OK);
    assert_eq!(health.body, json!({ "status": "ok" }));

    let ready = env.send(get("/readyz", None)).await;
    assert_eq!(ready.status, StatusCode::OK, "{}", ready.body);
    assert_eq!(ready.body["migrations"], "current");
    assert_eq!(ready.body["database"], "ok");
    assert_eq!(ready.body["status"], "ready");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_is_503_when_a_migration_is_missing() {
    let env = Env::new().await;
    // Forget the newest migration, as a database behind this binary would be.
    sqlx::query(
        "delete from _sqlx_migrations where version = (select max(version) from _sqlx_migrations)",
    )
    .execute(&env.db.pool)
    .await
    .unwrap();
    let ready = env.send(get("/readyz", None)).await;
    assert_eq!(
        ready.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        ready.body
    );
    assert_eq!(ready.body["migrations"], "behind");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unknown_route_is_404() {
    let env = Env::new().await;
    let answer = env.send(get("/v1/nothing-here", Some(&token("x")))).await;
    assert_eq!(answer.status, StatusCode::NOT_FOUND);
}
