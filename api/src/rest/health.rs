//! `/healthz` (the process is up) and `/readyz` (the database answers and
//! its migrations are current, and the process is not stopping).

use axum::Json;
use axum::extract::State;
use axum::http::StatusCode;
use serde_json::json;

use crate::AppState;

#[utoipa::path(get, path = "/healthz", operation_id = "healthz", tag = "meta", summary = "The process is up",
    responses((status = 200, description = "Up", body = crate::rest::openapi::Health)))]
pub async fn healthz() -> Json<serde_json::Value> {
    Json(json!({ "status": "ok" }))
}

#[utoipa::path(get, path = "/readyz", operation_id = "readyz", tag = "meta", summary = "The database answers, its migrations are current and the process is not stopping",
    responses(
        (status = 200, description = "Ready", body = crate::rest::openapi::Readiness),
        (status = 503, description = "Not ready (`status` `stopping`: the process drains and is soon gone), or the database is unavailable", content(
            (crate::rest::openapi::Readiness = "application/json"),
            (crate::rest::openapi::Problem = "application/problem+json")))))]
pub async fn readyz(State(state): State<AppState>) -> (StatusCode, Json<serde_json::Value>) {
    let db = sqlx::query("select 1").execute(&state.pool).await;
    let migrations = match &db {
        Ok(_) => sless_store::migrations_current(&state.pool).await.ok(),
        Err(_) => None,
    };
    // A stopping process still serves what it gets, but should get nothing
    // new: a load balancer that polls this moves away before it closes.
    let stopping = state.draining.has_begun();
    let ok = db.is_ok() && migrations == Some(true) && !stopping;
    let mut body = json!({
        "status": if stopping { "stopping" } else if ok { "ready" } else { "not ready" },
        "database": match &db { Ok(_) => "ok".to_string(), Err(e) => e.to_string() },
        "migrations": match migrations { Some(true) => "current", Some(false) => "behind", None => "unknown" },
    });
    if stopping {
        body["reason"] = json!(
            "this process is stopping: it finishes the calls it has and soon takes no new connection"
        );
    }
    (
        if ok {
            StatusCode::OK
        } else {
            StatusCode::SERVICE_UNAVAILABLE
        },
        Json(body),
    )
}
