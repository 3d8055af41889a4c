//! Tenant namespaces: what `ensure` applies.

use k8s_openapi::api::core::v1::{LimitRange, Namespace as K8sNamespace, ResourceQuota, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::{RoleBinding, RoleRef, Subject};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::api::Api;
use sless_domain::Namespace;

use super::Inner;
use super::api::{apply, infra};
use super::render::namespace::{tenant_labels, tenant_objects};
use crate::driver::DriverError;

pub use super::rbac::{SERVICE_ACCOUNT, TENANT_CLUSTER_ROLE};

/// How long a process trusts that a namespace it ensured is still as it
/// left it (someone may delete it, or change its policies).
const ENSURE_AGAIN_AFTER: std::time::Duration = std::time::Duration::from_secs(600);

/// Applies the tenant namespace `ns` and its objects; with `again` false,
/// only when this process has not done so in the last
/// [`ENSURE_AGAIN_AFTER`].
pub(super) async fn ensure(inner: &Inner, ns: &Namespace, again: bool) -> Result<(), DriverError> {
    let fresh = inner
        .ensured
        .lock()
        .unwrap()
        .get(ns.as_str())
        .is_some_and(|at| at.elapsed() < ENSURE_AGAIN_AFTER);
    if !again && fresh {
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
        .insert(ns.as_str().to_owned(), std::time::Instant::now());
    Ok(())
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
