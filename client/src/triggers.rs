//! Triggers: http and cron.

use reqwest::Method;
use sless_api_types::{CreateTrigger, PatchTrigger, Removed, TriggerList, TriggerView};

use crate::error::Result;
use crate::http::{Body, Call};
use crate::{Client, Tagged};

impl Client {
    /// `POST /triggers`.
    pub async fn create_trigger(&self, req: &CreateTrigger) -> Result<Tagged<TriggerView>> {
        let path = self.in_namespace("/triggers");
        self.tagged(Call::new(Method::POST, &path).body(Body::json(req)?))
            .await
    }

    /// `GET /triggers`.
    pub async fn list_triggers(&self) -> Result<TriggerList> {
        self.json(Call::get(&self.in_namespace("/triggers"))).await
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
