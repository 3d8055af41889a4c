//! The routes about the API itself: health, its OpenAPI document, the
//! namespace, and the admin routes.

use reqwest::Method;
use sless_api_types::{Ensured, Health, Readiness};

use crate::Client;
use crate::error::Result;
use crate::http::{Body, Call};

impl Client {
    /// `GET /healthz`: the process is up.
    pub async fn healthz(&self) -> Result<Health> {
        self.json(Call::get("/healthz")).await
    }

    /// `GET /readyz`: the database answers, its migrations are current and
    /// the process is not stopping (a 503 when not: an error).
    pub async fn readyz(&self) -> Result<Readiness> {
        self.json(Call::get("/readyz")).await
    }

    /// `GET /openapi.json`.
    pub async fn openapi(&self) -> Result<serde_json::Value> {
        self.json(Call::get("/openapi.json")).await
    }

    /// `POST /namespaces/{ns}/ensure`: creates the namespace if it does
    /// not exist.
    pub async fn ensure_namespace(&self) -> Result<Ensured> {
        let path = self.in_namespace("/ensure");
        self.json(Call::new(Method::POST, &path)).await
    }

    /// `POST /v1/admin/replay`: rebuilds the read models from the log
    /// (admin tokens only); `verify` compares them with the current ones.
    pub async fn start_replay(&self, verify: bool) -> Result<serde_json::Value> {
        let body = Body::json(&serde_json::json!({ "verify": verify }))?;
        self.json(Call::new(Method::POST, "/v1/admin/replay").body(body))
            .await
    }

    /// `GET /v1/admin/replay`: the last replay (admin tokens only).
    pub async fn last_replay(&self) -> Result<serde_json::Value> {
        self.json(Call::get("/v1/admin/replay")).await
    }

    /// `POST /v1/admin/reconcile`: a reconcile of every function (admin
    /// tokens only).
    pub async fn reconcile_all(&self) -> Result<serde_json::Value> {
        self.json(Call::new(Method::POST, "/v1/admin/reconcile"))
            .await
    }
}
