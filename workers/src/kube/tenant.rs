//! Tenant namespaces: what `ensure` applies.

use std::time::{Duration, Instant};

use k8s_openapi::api::authorization::v1::{
    ResourceAttributes, SelfSubjectAccessReview, SelfSubjectAccessReviewSpec,
};
use k8s_openapi::api::core::v1::{LimitRange, Namespace as K8sNamespace, ResourceQuota, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::{Api, PostParams};
use sless_domain::Namespace;

use super::Inner;
use super::api::{apply, infra};
use super::render::namespace::{tenant_labels, tenant_objects};
use crate::driver::DriverError;

pub use super::rbac::{SERVICE_ACCOUNT, TENANT_CLUSTER_ROLE};

/// How long a process trusts that a namespace it ensured is still as it
/// left it (someone may delete it, or change its policies).
const ENSURE_AGAIN_AFTER: Duration = Duration::from_secs(600);

/// Applies the tenant namespace `ns` and its objects; with `again` false,
/// only when this process has not done so in the last
/// [`ENSURE_AGAIN_AFTER`].
pub(super) async fn ensure(inner: &Inner, ns: &Namespace, again: bool) -> Result<(), DriverError> {
    if !again && fresh(inner, ns) {
        return Ok(());
    }
    let objects = tenant_objects(&inner.settings, ns);
    let client = inner.client.clone();
    apply(
        &Api::<K8sNamespace>::all(client.clone()),
        &objects.namespace,
    )
    .await
    .map_err(infra(format_args!("namespace {ns}")))?;
    // The binding first: the rest is written with what it grants.
    let bindings = Api::<RoleBinding>::namespaced(client.clone(), ns.as_str());
    apply(&bindings, &role_binding(inner, ns))
        .await
        .map_err(infra(format_args!("role binding in {ns}")))?;
    honoured(inner, ns).await?;
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), ns.as_str());
    for policy in &objects.network_policies {
        apply(&policies, policy)
            .await
            .map_err(infra(format_args!("network policy in {ns}")))?;
    }
    apply(
        &Api::<ResourceQuota>::namespaced(client.clone(), ns.as_str()),
        &objects.resource_quota,
    )
    .await
    .map_err(infra(format_args!("resource quota in {ns}")))?;
    apply(
        &Api::<LimitRange>::namespaced(client.clone(), ns.as_str()),
        &objects.limit_range,
    )
    .await
    .map_err(infra(format_args!("limit range in {ns}")))?;
    if let (Some(source), Some(copy)) = (
        inner.settings.registry_pull_secret.as_deref(),
        objects.pull_secret_name.as_deref(),
    ) {
        copy_pull_secret(inner, source, ns, copy).await?;
    }
    inner
        .ensured
        .lock()
        .unwrap()
        .insert(ns.as_str().to_owned(), Instant::now());
    Ok(())
}

/// How long a new RoleBinding may take to be honoured.
const BINDING_TAKES: Duration = Duration::from_secs(10);

/// Waits until the API server honours the RoleBinding just applied in
/// `ns`. Its authorizer learns of a binding from a watch, a moment after
/// the binding was written: a write sent at once may be refused (403).
/// It asks the authorizer itself (a SelfSubjectAccessReview, which every
/// authenticated user may make) until it says yes, or for
/// [`BINDING_TAKES`]; then the writes go on, and say it if refused.
async fn honoured(inner: &Inner, ns: &Namespace) -> Result<(), DriverError> {
    let reviews = Api::<SelfSubjectAccessReview>::all(inner.client.clone());
    let review = SelfSubjectAccessReview {
        spec: SelfSubjectAccessReviewSpec {
            resource_attributes: Some(ResourceAttributes {
                namespace: Some(ns.as_str().to_owned()),
                verb: Some("patch".to_owned()),
                group: Some("networking.k8s.io".to_owned()),
                resource: Some("networkpolicies".to_owned()),
                ..ResourceAttributes::default()
            }),
            ..SelfSubjectAccessReviewSpec::default()
        },
        ..SelfSubjectAccessReview::default()
    };
    let started = Instant::now();
    let mut pause = Duration::from_millis(10);
    loop {
        let answer = reviews
            .create(&PostParams::default(), &review)
            .await
            .map_err(infra(format_args!(
                "asking whether the binding in {ns} is honoured"
            )))?;
        let allowed = answer.status.is_some_and(|s| s.allowed);
        if allowed || started.elapsed() > BINDING_TAKES {
            return Ok(());
        }
        tokio::time::sleep(pause).await;
        pause = (pause * 2).min(Duration::from_millis(500));
    }
}

/// Whether this process ensured `ns` in the last [`ENSURE_AGAIN_AFTER`].
fn fresh(inner: &Inner, ns: &Namespace) -> bool {
    inner
        .ensured
        .lock()
        .unwrap()
        .get(ns.as_str())
        .is_some_and(|at| at.elapsed() < ENSURE_AGAIN_AFTER)
}

/// Whether the tenant namespace `ns` is there: ensured by this process
/// lately, or found on the cluster. What reads or deletes a function's
/// objects asks first: sless's ServiceAccount holds no permission in a
/// namespace until `ensure` has bound its role there, so a look into one
/// that is not there is refused (403), never answered "not found", and a
/// namespace that is not there holds nothing of sless.
pub(super) async fn exists(inner: &Inner, ns: &Namespace) -> Result<bool, DriverError> {
    if fresh(inner, ns) {
        return Ok(true);
    }
    Api::<K8sNamespace>::all(inner.client.clone())
        .get_opt(ns.as_str())
        .await
        .map(|found| found.is_some())
        .map_err(infra(format_args!("namespace {ns}")))
}

/// Binds [`TENANT_CLUSTER_ROLE`] to sless's ServiceAccount in `ns`.
fn role_binding(inner: &Inner, ns: &Namespace) -> RoleBinding {
    RoleBinding {
        metadata: ObjectMeta {
            name: Some(TENANT_CLUSTER_ROLE.to_owned()),
            namespace: Some(ns.as_str().to_owned()),
            labels: Some(tenant_labels(ns)),
            ..ObjectMeta::default()
        },
        role_ref: RoleRef {
            api_group: "rbac.authorization.k8s.io".to_owned(),
            kind: "ClusterRole".to_owned(),
            name: TENANT_CLUSTER_ROLE.to_owned(),
        },
        subjects: Some(vec![Subject {
            kind: "ServiceAccount".to_owned(),
            name: SERVICE_ACCOUNT.to_owned(),
            namespace: Some(inner.settings.system_namespace.clone()),
            ..Subject::default()
        }]),
    }
}

/// Copies the registry pull Secret `source` of the system namespace into
/// `ns` as `copy`, so the tenant's pods can pull their images.
async fn copy_pull_secret(
    inner: &Inner,
    source: &str,
    ns: &Namespace,
    copy: &str,
) -> Result<(), DriverError> {
    let system = &inner.settings.system_namespace;
    let from = Api::<Secret>::namespaced(inner.client.clone(), system)
        .get(source)
        .await
        .map_err(infra(format_args!("the pull secret {system}/{source}")))?;
    let secret = Secret {
        metadata: ObjectMeta {
            name: Some(copy.to_owned()),
            namespace: Some(ns.as_str().to_owned()),
            labels: Some(tenant_labels(ns)),
            ..ObjectMeta::default()
        },
        type_: from.type_,
        data: from.data,
        ..Secret::default()
    };
    apply(
        &Api::<Secret>::namespaced(inner.client.clone(), ns.as_str()),
        &secret,
    )
    .await
    .map_err(infra(format_args!("the pull secret in {ns}")))?;
    Ok(())
}
