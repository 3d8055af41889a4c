//! Cron triggers as CronJobs: one per enabled trigger of the function,
//! and none for any other.

use std::collections::BTreeSet;

use k8s_openapi::api::batch::v1::CronJob;
use kube::ResourceExt;
use kube::api::Api;
use sless_domain::FunctionKey;

use super::api::{self, apply, infra, selector};
use super::render::cron::{CronSpec, cron_job};
use super::render::{COMPONENT_CRON, function_labels};
use super::{Inner, tenant};
use crate::driver::{CronRequest, DriverError};

pub(super) async fn sync(
    inner: &Inner,
    key: &FunctionKey,
    triggers: Vec<CronRequest>,
) -> Result<(), DriverError> {
    // No namespace, no CronJob to delete (and none to look for: sless may
    // not look into a namespace it has not ensured).
    if triggers.is_empty() && !tenant::exists(inner, &key.namespace).await? {
        return Ok(());
    }
    let ns = key.namespace.as_str();
    let cronjobs = Api::<CronJob>::namespaced(inner.client.clone(), ns);
    let mut wanted = BTreeSet::new();
    for t in triggers {
        let spec = CronSpec {
            trigger: t.trigger,
            key: key.clone(),
            schedule: t.schedule,
            timezone: t.timezone,
            version: t.version,
            runtime: t.runtime,
            entrypoint: t.entrypoint,
            env_vars: t.env_vars,
            memory_mb: t.memory_mb,
            timeout_sec: u32::try_from(t.timeout.as_secs().max(1)).unwrap_or(u32::MAX),
            image: t.artifact.reference,
        };
        let cj = cron_job(&inner.settings, &spec);
        wanted.insert(cj.name_any());
        apply(&cronjobs, &cj)
            .await
            .map_err(infra(format_args!("cron job of trigger {}", spec.trigger)))?;
    }
    let mine = selector(&function_labels(key, COMPONENT_CRON));
    let existing = match cronjobs
        .list(&kube::api::ListParams::default().labels(&mine))
        .await
    {
        Ok(list) => list.items,
        Err(e) if api::is_status(&e, 404) => Vec::new(),
        Err(e) => return Err(infra("listing cron jobs")(e)),
    };
    for cj in existing {
        let name = cj.name_any();
        if !wanted.contains(&name) {
            api::delete(&cronjobs, &name)
                .await
                .map_err(infra(format_args!("deleting cron job {name}")))?;
        }
    }
    Ok(())
}
