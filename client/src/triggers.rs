//! Triggers: http and cron.

use reqwest::Method;
use sless_api_types::{CreateTrigger, PatchTrigger, Removed, TriggerList, TriggerView};

use crate::error::Result;
use crate::http::{Body, Call};
use crate::pages::{PageQuery, every_page};
use crate::{Client, Tagged};

impl Client {
    /// `POST /triggers`.
    pub async fn create_trigger(&self, req: &CreateTrigger) -> Result<Tagged<TriggerView>> {
        let path = self.in_namespace("/triggers");
        self.tagged(Call::new(Method::POST, &path).body(Body::json(req)?))
            .await
    }

    /// `GET /triggers`: every trigger, by name (every page, followed).
    pub async fn list_triggers(&self) -> Result<TriggerList> {
        every_page(|q| async move { self.list_triggers_page(&q).await }).await
    }

    /// `GET /triggers`: one page, by name.
    pub async fn list_triggers_page(&self, query: &PageQuery) -> Result<TriggerList> {
        let path = self.in_namespace("/triggers");
        self.json(query.on(Call::get(&path))).await
    }

    /// `GET /triggers/{name}`: a cron trigger with its next tick and last runs.
    pub async fn get_trigger(&self, name: &str) -> Result<Tagged<TriggerView>> {
        self.tagged(Call::get(&self.in_namespace(&format!("/triggers/{name}"))))
            .await
    }

    /// `PATCH /triggers/{name}`: enables or disables it.
    pub async fn set_trigger_enabled(
        &self,
        name: &str,
        enabled: bool,
    ) -> Result<Tagged<TriggerView>> {
        let path = self.in_namespace(&format!("/triggers/{name}"));
        let body = Body::json(&PatchTrigger { enabled })?;
        self.tagged(Call::new(Method::PATCH, &path).body(body))
            .await
    }

    /// `DELETE /triggers/{name}`.
    pub async fn delete_trigger(&self, name: &str) -> Result<Removed> {
        let path = self.in_namespace(&format!("/triggers/{name}"));
        self.json(Call::new(Method::DELETE, &path)).await
    }
}
