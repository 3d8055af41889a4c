//! Putting a Deployment back after a failed rollout.
//!
//! A rollout that fails (a new pod cannot pull its image, keeps crashing,
//! or the deadline passes) leaves the old pods serving (`maxUnavailable:
//! 0`), but the Deployment's template says the failed version: the next
//! restart of an old pod would start the failed one. So the driver puts the
//! template back to the last one that was serving, as `kubectl rollout
//! undo` does: the newest ReplicaSet of the Deployment, other than the one
//! of the failed template, that still has available pods. Its template
//! (without `pod-template-hash`) is applied again; the Deployment
//! controller finds that ReplicaSet again and scales the failed one down.
//! The driver waits until it is available.
//!
//! The ReplicaSets are the cluster's own record, so this works as well for
//! a deploy retried after a crash of the worker as for one that just
//! failed. When no ReplicaSet serves (a first deploy, or a function scaled
//! to zero), there is nothing to go back to, and the error says so.

use k8s_openapi::api::apps::v1::{Deployment as K8sDeployment, ReplicaSet};
use k8s_openapi::api::core::v1::PodTemplateSpec;
use kube::ResourceExt;
use kube::api::{Api, ListParams};

use super::Inner;
use super::api::selector;
use super::render::function::deployment;
use super::render::{ANNOTATION_IMAGE, LABEL_VERSION, names, serving_selector};
use super::rollout::{apply_deployment, rollout_of};
use crate::driver::{DeployRequest, DriverError};

/// The label the Deployment controller adds to a ReplicaSet's template.
const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The annotation of a ReplicaSet's revision.
const REVISION: &str = "deployment.kubernetes.io/revision";

/// After the rollout of `req` failed with `message`: the Deployment put
/// back to the template that served before, once that is available again.
/// Returns the deploy's error, saying what happened to the Deployment when
/// it could not be put back.
pub(super) async fn roll_back(
    inner: &Inner,
    req: &DeployRequest,
    message: String,
    log_tail: String,
) -> DriverError {
    let failed = |why: String| DriverError::Deploy {
        message: format!("{message}; {why}"),
        log_tail: log_tail.clone(),
    };
    let previous = match serving_template(inner, req).await {
        Ok(Some(t)) => t,
        Ok(None) => {
            return failed(
                "nothing to roll back to: no earlier version of the function was serving".into(),
            );
        }
        Err(e) => return failed(format!("could not look for a version to roll back to: {e}")),
    };
    let meta = previous.metadata.clone().unwrap_or_default();
    let version: Option<u32> = meta
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_VERSION))
        .and_then(|v| v.parse().ok());
    let image = meta
        .annotations
        .as_ref()
        .and_then(|a| a.get(ANNOTATION_IMAGE).cloned())
        .or_else(|| {
            let spec = previous.spec.as_ref()?;
            spec.containers.first()?.image.clone()
        })
        .unwrap_or_default();
    let Some(version) = version else {
        return failed("the template that served before has no sless.dev/version label".into());
    };
    let settings = &inner.settings;
    let replicas = req.instances.max(1) as i32;
    let mut back = deployment(settings, req, &image, replicas);
    if let Some(labels) = back.metadata.labels.as_mut() {
        labels.insert(LABEL_VERSION.to_owned(), version.to_string());
    }
    if let Some(annotations) = back.metadata.annotations.as_mut() {
        annotations.insert(ANNOTATION_IMAGE.to_owned(), image.clone());
    }
    if let Some(spec) = back.spec.as_mut() {
        spec.template = previous;
    }
    let generation = match apply_deployment(inner, &req.key, &back).await {
        Ok(g) => g,
        Err(e) => {
            return failed(format!(
                "putting the Deployment back to version {version} failed: {e}"
            ));
        }
    };
    match rollout_of(inner, &req.key, version, generation, replicas).await {
        Ok(()) => {
            tracing::info!(function = %req.key, failed = req.version, restored = version, "rolled back");
            DriverError::Deploy { message, log_tail }
        }
        Err(e) => failed(format!(
            "the Deployment was put back to version {version}, which did not become available either: {e}"
        )),
    }
}

/// The template of the newest ReplicaSet of the function's Deployment that
/// still has available pods, other than the one of its current template.
async fn serving_template(
    inner: &Inner,
    req: &DeployRequest,
) -> Result<Option<PodTemplateSpec>, kube::Error> {
    let ns = req.key.namespace.as_str();
    let name = names::function_name(&req.key);
    let Some(d) = Api::<K8sDeployment>::namespaced(inner.client.clone(), ns)
        .get_opt(&name)
        .await?
    else {
        return Ok(None);
    };
    let current = d.spec.as_ref().map(|s| without_hash(&s.template));
    let uid = d.uid().unwrap_or_default();
    let sets = Api::<ReplicaSet>::namespaced(inner.client.clone(), ns)
        .list(&ListParams::default().labels(&selector(&serving_selector(&req.key))))
        .await?;
    let revision = |rs: &ReplicaSet| -> u64 {
        rs.annotations()
            .get(REVISION)
            .and_then(|r| r.parse().ok())
            .unwrap_or(0)
    };
    Ok(sets
        .items
        .into_iter()
        .filter(|rs| rs.owner_references().iter().any(|o| o.uid == uid))
        .filter(|rs| {
            rs.status
                .as_ref()
                .and_then(|s| s.available_replicas)
                .unwrap_or(0)
                > 0
        })
        .filter_map(|rs| {
            let template = without_hash(rs.spec.as_ref()?.template.as_ref()?);
            (Some(&template) != current.as_ref()).then_some((revision(&rs), template))
        })
        .max_by_key(|(r, _)| *r)
        .map(|(_, t)| t))
}

/// The template without the label the Deployment controller adds.
fn without_hash(template: &PodTemplateSpec) -> PodTemplateSpec {
    let mut t = template.clone();
    if let Some(labels) = t.metadata.as_mut().and_then(|m| m.labels.as_mut()) {
        labels.remove(POD_TEMPLATE_HASH);
    }
    t
}
