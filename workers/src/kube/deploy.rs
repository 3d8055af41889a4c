//! Serving a function: a Deployment and a Service applied server-side; a
//! deploy is done when the rollout is available, and failed when a pod of
//! the new version cannot pull its image or keeps crashing, or the
//! rollout passes its deadline. A failed deploy puts the Deployment back
//! to what served before it (`rollback`).

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Service;
use kube::api::{Api, Patch, PatchParams};

use sless_domain::FunctionKey;

use super::Inner;
use super::api::{self, apply, infra, selector};
use super::render::function::{deployment, service};
use super::render::{
    ANNOTATION_IMAGE, ANNOTATION_TEMPLATE, COMPONENT_FUNCTION, LABEL_VERSION, function_labels,
    names,
};
use super::rollout::{Rollout, apply_deployment, endpoint, rollout, rollout_of};
use super::{rollback, tenant};
use crate::driver::{Artifact, DeployRequest, Deployment, DriverError};

pub(super) async fn deploy(inner: &Inner, req: DeployRequest) -> Result<Deployment, DriverError> {
    let settings = &inner.settings;
    let ns = req.key.namespace.as_str();
    let name = names::function_name(&req.key);
    let image = req.artifact.reference.clone();
    let applied = apply(
        &Api::<Service>::namespaced(inner.client.clone(), ns),
        &service(settings, &req.key),
    )
    .await
    .map_err(infra(format_args!("service {ns}/{name}")))?;
    // Before anything rolls out: a Service the proxy could not reach
    // would make a version Ready that no call gets to.
    let endpoint = endpoint(inner, &req.key, Some(&applied)).await?;
    let replicas = req.instances.max(1) as i32;
    let wanted = deployment(settings, &req, &image, replicas);
    let generation = match scale_only(inner, &req.key, &wanted, replicas).await? {
        Some(generation) => generation,
        None => apply_deployment(inner, &req.key, &wanted).await?,
    };
    match rollout_of(inner, &req.key, req.version, generation, replicas).await {
        Ok(()) => Ok(Deployment {
            version: req.version,
            endpoint,
            artifact: Artifact { reference: image },
            node: None,
            ready: replicas as u32,
            instances: Vec::new(),
        }),
        // What served before serves again, when something did.
        Err(DriverError::Deploy { message, log_tail }) => {
            Err(rollback::roll_back(inner, &req, message, log_tail).await)
        }
        Err(e) => Err(e),
    }
}

/// Sets the count of a Deployment whose pod template is `wanted`'s already
/// (the same `ANNOTATION_TEMPLATE`) through its scale subresource, as an
/// autoscaler does; its generation after. `None` when it runs another
/// template, or none: the whole Deployment is applied.
async fn scale_only(
    inner: &Inner,
    key: &FunctionKey,
    wanted: &K8sDeployment,
    replicas: i32,
) -> Result<Option<i64>, DriverError> {
    let ns = key.namespace.as_str();
    let name = names::function_name(key);
    let deployments = Api::<K8sDeployment>::namespaced(inner.client.clone(), ns);
    let template = |d: &K8sDeployment| {
        d.metadata
            .annotations
            .as_ref()
            .and_then(|a| a.get(ANNOTATION_TEMPLATE).cloned())
    };
    let Some(existing) = deployments
        .get_opt(&name)
        .await
        .map_err(infra(format_args!("deployment {ns}/{name}")))?
    else {
        return Ok(None);
    };
    // Only a count that changed; a deploy at the same count applies the
    // whole Deployment, taking back what another hand changed in it.
    let count = |d: &K8sDeployment| d.spec.as_ref().and_then(|s| s.replicas);
    if template(&existing).is_none()
        || template(&existing) != template(wanted)
        || count(&existing) == Some(replicas)
    {
        return Ok(None);
    }
    let patch = serde_json::json!({"spec": {"replicas": replicas}});
    deployments
        .patch_scale(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .map_err(infra(format_args!("scaling {ns}/{name} to {replicas}")))?;
    let scaled = deployments
        .get(&name)
        .await
        .map_err(infra(format_args!("deployment {ns}/{name}")))?;
    Ok(Some(scaled.metadata.generation.unwrap_or(0)))
}

/// What serves the function, when its rollout is complete and available.
pub(super) async fn status(inner: &Inner, key: &FunctionKey) -> Option<Deployment> {
    if !tenant::exists(inner, &key.namespace).await.ok()? {
        return None;
    }
    let ns = key.namespace.as_str();
    let d = Api::<K8sDeployment>::namespaced(inner.client.clone(), ns)
        .get_opt(&names::function_name(key))
        .await
        .ok()??;
    let replicas = d.spec.as_ref()?.replicas.unwrap_or(1);
    if replicas == 0 {
        return None;
    }
    if !matches!(
        rollout(&d, d.metadata.generation.unwrap_or(0), replicas),
        Rollout::Done
    ) {
        return None;
    }
    let template = d.spec.as_ref()?.template.metadata.as_ref()?;
    let version = template.labels.as_ref()?.get(LABEL_VERSION)?.parse().ok()?;
    let image = template
        .annotations
        .as_ref()?
        .get(ANNOTATION_IMAGE)?
        .clone();
    let endpoint = endpoint(inner, key, None)
        .await
        .inspect_err(|e| tracing::warn!("{e}"))
        .ok()?;
    Some(Deployment {
        version,
        endpoint,
        artifact: Artifact { reference: image },
        node: None,
        ready: replicas as u32,
        instances: Vec::new(),
    })
}

/// Scales the Deployment to zero pods; a later deploy scales it back.
pub(super) async fn scale_to_zero(
    inner: &Inner,
    key: &sless_domain::FunctionKey,
) -> Result<(), DriverError> {
    if !tenant::exists(inner, &key.namespace).await? {
        return Ok(());
    }
    let ns = key.namespace.as_str();
    let name = names::function_name(key);
    let deployments = Api::<K8sDeployment>::namespaced(inner.client.clone(), ns);
    let patch = serde_json::json!({"spec": {"replicas": 0}});
    match deployments
        .patch_scale(&name, &PatchParams::default(), &Patch::Merge(&patch))
        .await
    {
        Ok(_) => Ok(()),
        Err(e) if api::is_status(&e, 404) => Ok(()),
        Err(e) => Err(infra(format_args!("scaling {ns}/{name} to zero"))(e)),
    }
}

/// Deletes everything of the function: Deployment, Service, CronJobs, the
/// Jobs of its runs (none of which there is when its namespace is not), and
/// its builds.
pub(super) async fn remove(
    inner: &Inner,
    key: &sless_domain::FunctionKey,
) -> Result<(), DriverError> {
    let ns = key.namespace.as_str();
    let name = names::function_name(key);
    let client = inner.client.clone();
    let what = |kind: &str| format!("deleting the {kind} of {ns}/{name}");
    let mut of_function: BTreeMap<String, String> = function_labels(key, COMPONENT_FUNCTION);
    of_function.remove(super::render::LABEL_COMPONENT);
    let all = selector(&of_function);
    if tenant::exists(inner, &key.namespace).await? {
        let deployments = Api::<K8sDeployment>::namespaced(client.clone(), ns);
        let services = Api::<Service>::namespaced(client.clone(), ns);
        let cron_jobs = Api::<CronJob>::namespaced(client.clone(), ns);
        let jobs = Api::<Job>::namespaced(client.clone(), ns);
        let deployment = api::delete(&deployments, &name).await;
        deployment.map_err(infra(what("deployment")))?;
        let service = api::delete(&services, &name).await;
        service.map_err(infra(what("service")))?;
        let cron = api::delete_matching(&cron_jobs, &all).await;
        cron.map_err(infra(what("cron jobs")))?;
        let runs = api::delete_matching(&jobs, &all).await;
        runs.map_err(infra(what("jobs")))?;
    }
    api::delete_matching(
        &Api::<Job>::namespaced(client, &inner.settings.build_namespace),
        &all,
    )
    .await
    .map_err(infra(what("builds")))?;
    Ok(())
}
