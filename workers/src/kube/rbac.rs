//! What sless's ServiceAccount may do on a cluster, as data: the
//! manifests in `deploy/` render their RBAC objects from [`RULES`]; the
//! driver's tests run as that ServiceAccount on a real API server with
//! those objects applied, so its authorizer judges every request the
//! driver makes.
//!
//! Least privilege: no wildcard, no cluster-admin, no Secret readable
//! cluster-wide. Cluster-wide, sless may only create and label namespaces
//! and bind the ClusterRole `sless-tenant` (an admission policy in
//! `deploy/` keeps both to namespaces named `sless-*`); inside a tenant
//! namespace it acts only through that RoleBinding, which `ensure` creates.

use serde::Serialize;

/// The ServiceAccount sless runs as, in the system namespace.
pub const SERVICE_ACCOUNT: &str = "sless";
/// The image pull Secret (in the system namespace) the driver copies into
/// tenant namespaces, when `SLESS_KUBE_REGISTRY_PULL_SECRET` names it.
pub const REGISTRY_PULL_SECRET: &str = "sless-registry-pull";

/// The ClusterRole the driver binds in each tenant namespace.
pub const TENANT_CLUSTER_ROLE: &str = "sless-tenant";
/// The name of the copy of the image pull Secret in a tenant namespace.
pub const TENANT_PULL_SECRET: &str = "sless-pull";
/// Tenant (and build) namespaces are named with this prefix.
pub const NAMESPACE_PREFIX: &str = "sless-";

/// Where a rule applies.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Scope {
    /// Cluster-wide (ClusterRole `sless` + ClusterRoleBinding).
    Cluster,
    /// In each tenant namespace, through the RoleBinding to `sless-tenant`.
    Tenant,
    /// In the build namespace (Role `sless-build`).
    Build,
    /// In the system namespace (Role `sless`).
    System,
}

/// One permission: these verbs on this resource (`pods/log` for a
/// subresource), only on the named objects when `names` is not empty.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Rule {
    pub scope: Scope,
    pub api_group: &'static str,
    pub resource: &'static str,
    pub verbs: &'static [&'static str],
    pub names: &'static [&'static str],
}

const READ: &[&str] = &["get", "list", "watch"];
/// Server-side apply needs `patch`, and `create` for an object not there yet.
const APPLY: &[&str] = &["get", "list", "watch", "create", "patch"];
const APPLY_DELETE: &[&str] = &["get", "list", "watch", "create", "patch", "delete"];

macro_rules! rule {
    ($scope:ident, $group:literal, $resource:literal, $verbs:expr) => {
        rule!($scope, $group, $resource, $verbs, &[])
    };
    ($scope:ident, $group:literal, $resource:literal, $verbs:expr, $names:expr) => {
        Rule {
            scope: Scope::$scope,
            api_group: $group,
            resource: $resource,
            verbs: $verbs,
            names: $names,
        }
    };
}

/// Every permission of the ServiceAccount `sless`.
pub const RULES: &[Rule] = &[
    // `ensure` creates and labels tenant namespaces (never deletes one).
    rule!(Cluster, "", "namespaces", APPLY),
    // ... and binds `sless-tenant` in them: `bind` on that ClusterRole only,
    // so no other role can be handed out.
    rule!(
        Cluster,
        "rbac.authorization.k8s.io",
        "rolebindings",
        &["get", "create", "patch"]
    ),
    rule!(
        Cluster,
        "rbac.authorization.k8s.io",
        "clusterroles",
        &["bind"],
        &[TENANT_CLUSTER_ROLE]
    ),
    // A tenant namespace: functions, cron triggers, jobs, and what `ensure` puts there.
    rule!(Tenant, "apps", "deployments", APPLY_DELETE),
    // Scale to zero and back: a merge patch of the scale subresource.
    rule!(Tenant, "apps", "deployments/scale", &["patch"]),
    // A failed rollout is put back to the template of the ReplicaSet that
    // still serves (`kube::rollback`).
    rule!(Tenant, "apps", "replicasets", &["list"]),
    rule!(Tenant, "", "services", APPLY_DELETE),
    rule!(Tenant, "", "pods", READ),
    rule!(Tenant, "", "pods/log", &["get"]),
    // A deploy is done once its Service routes to its pods.
    rule!(
        Tenant,
        "discovery.k8s.io",
        "endpointslices",
        &["list", "watch"]
    ),
    rule!(Tenant, "batch", "jobs", APPLY_DELETE),
    rule!(Tenant, "batch", "cronjobs", APPLY_DELETE),
    rule!(Tenant, "networking.k8s.io", "networkpolicies", APPLY_DELETE),
    rule!(Tenant, "", "resourcequotas", APPLY),
    rule!(Tenant, "", "limitranges", APPLY),
    // The copy of the image pull Secret, and each run's event (a Secret
    // owned by its Job, which the cluster deletes with it): `create` cannot
    // be limited to a name, the rest is.
    rule!(Tenant, "", "secrets", &["create"]),
    rule!(
        Tenant,
        "",
        "secrets",
        &["get", "patch", "delete"],
        &[TENANT_PULL_SECRET]
    ),
    // Builds: kaniko Jobs and their per-build context Secret, which is only
    // ever created and deleted (never read: the push Secret lives here too,
    // and the operator's CA Secret, which the Jobs only name for the kubelet
    // to mount; the admission policy refuses deleting a Secret not labelled
    // as a build's).
    rule!(Build, "batch", "jobs", APPLY_DELETE),
    rule!(Build, "", "pods", READ),
    rule!(Build, "", "pods/log", &["get"]),
    rule!(Build, "", "secrets", &["create", "delete"]),
    // The image pull Secret the driver copies into tenant namespaces.
    rule!(System, "", "secrets", &["get"], &[REGISTRY_PULL_SECRET]),
];

/// Whether the rules let the ServiceAccount do `verb` on `resource` of
/// `api_group` (the name `name`, when known) in `scope`. Admission is not
/// modelled: see [`admission_policy`].
pub fn allows(
    scope: Scope,
    api_group: &str,
    resource: &str,
    verb: &str,
    name: Option<&str>,
) -> bool {
    RULES.iter().any(|r| {
        r.scope == scope
            && r.api_group == api_group
            && r.resource == resource
            && r.verbs.contains(&verb)
            && (r.names.is_empty() || name.is_some_and(|n| r.names.contains(&n)))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn allows_reads_the_rules_by_scope_verb_and_name() {
        assert!(allows(
            Scope::Tenant,
            "apps",
            "deployments",
            "patch",
            Some("hello")
        ));
        assert!(!allows(
            Scope::Cluster,
            "apps",
            "deployments",
            "patch",
            Some("hello")
        ));
        assert!(!allows(
            Scope::Tenant,
            "apps",
            "deployments",
            "deletecollection",
            None
        ));
        assert!(allows(
            Scope::Tenant,
            "",
            "secrets",
            "create",
            Some("anything")
        ));
        assert!(allows(
            Scope::Tenant,
            "",
            "secrets",
            "get",
            Some(TENANT_PULL_SECRET)
        ));
        assert!(!allows(Scope::Tenant, "", "secrets", "get", Some("other")));
        assert!(!allows(Scope::Tenant, "", "secrets", "list", None));
        assert!(!allows(
            Scope::Build,
            "",
            "secrets",
            "get",
            Some(REGISTRY_PUSH_SECRET_NAME)
        ));
        assert!(allows(
            Scope::Cluster,
            "rbac.authorization.k8s.io",
            "clusterroles",
            "bind",
            Some(TENANT_CLUSTER_ROLE)
        ));
        assert!(!allows(
            Scope::Cluster,
            "rbac.authorization.k8s.io",
            "clusterroles",
            "bind",
            Some("cluster-admin")
        ));
    }

    /// The push Secret of the build namespace (settings.rs's default).
    const REGISTRY_PUSH_SECRET_NAME: &str = "sless-registry-push";
}
