//! What the ServiceAccount `sless` may do, as data, and the RBAC objects and
//! the admission policy rendered from it.
//!
//! Least privilege: no wildcard, no cluster-admin, no Secret readable
//! cluster-wide. Cluster-wide, sless may only create and label namespaces
//! and create RoleBindings to the ClusterRole `sless-tenant`; the
//! ValidatingAdmissionPolicy `sless-tenant-namespaces` keeps those writes to
//! namespaces named `sless-*`. Everything it does inside a tenant namespace
//! it may do only through that RoleBinding, which the driver creates on
//! `ensure`. This module depends on nothing else of the binary, so the
//! driver's tests can hold every request they see against [`RULES`].

use serde::Serialize;
use serde_json::{Value, json};

use super::{BUILD_NAMESPACE, REGISTRY_PULL_SECRET, SERVICE_ACCOUNT, SYSTEM_NAMESPACE};

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
    rule!(
        Tenant,
        "apps",
        "deployments/scale",
        &["get", "patch", "update"]
    ),
    rule!(Tenant, "", "services", APPLY_DELETE),
    rule!(Tenant, "", "pods", READ),
    rule!(Tenant, "", "pods/log", &["get"]),
    rule!(
        Tenant,
        "batch",
        "jobs",
        &[
            "get",
            "list",
            "watch",
            "create",
            "patch",
            "delete",
            "deletecollection"
        ]
    ),
    rule!(Tenant, "batch", "cronjobs", APPLY_DELETE),
    rule!(Tenant, "networking.k8s.io", "networkpolicies", APPLY_DELETE),
    rule!(Tenant, "", "resourcequotas", APPLY),
    rule!(Tenant, "", "limitranges", APPLY),
    // The copy of the image pull Secret: `create` cannot be limited to a
    // name, the rest is.
    rule!(Tenant, "", "secrets", &["create"]),
    rule!(
        Tenant,
        "",
        "secrets",
        &["get", "patch", "delete"],
        &[TENANT_PULL_SECRET]
    ),
    // Builds: kaniko Jobs and their per-build context Secret, which is only
    // ever created and deleted (never read: the push Secret lives here too;
    // the admission policy refuses deleting a Secret not labelled as a build's).
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
#[allow(dead_code, reason = "for the tests, here and of the driver")]
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

fn policy_rules(scope: Scope) -> Vec<Value> {
    RULES
        .iter()
        .filter(|r| r.scope == scope)
        .map(|r| {
            let mut rule = json!({
                "apiGroups": [r.api_group],
                "resources": [r.resource],
                "verbs": r.verbs,
            });
            if !r.names.is_empty() {
                rule["resourceNames"] = json!(r.names);
            }
            rule
        })
        .collect()
}

fn subjects() -> Value {
    json!([{"kind": "ServiceAccount", "name": SERVICE_ACCOUNT, "namespace": SYSTEM_NAMESPACE}])
}

/// The ClusterRoles, Roles and bindings.
pub fn objects(labels: &Value) -> Vec<Value> {
    let meta = |name: &str, namespace: Option<&str>| {
        let mut m = json!({"name": name, "labels": labels});
        if let Some(ns) = namespace {
            m["namespace"] = json!(ns);
        }
        m
    };
    let rbac = "rbac.authorization.k8s.io/v1";
    vec![
        json!({"apiVersion": rbac, "kind": "ClusterRole", "metadata": meta(SERVICE_ACCOUNT, None),
               "rules": policy_rules(Scope::Cluster)}),
        json!({"apiVersion": rbac, "kind": "ClusterRoleBinding", "metadata": meta(SERVICE_ACCOUNT, None),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "ClusterRole", "name": SERVICE_ACCOUNT},
               "subjects": subjects()}),
        // Bound by the driver, per tenant namespace, never cluster-wide.
        json!({"apiVersion": rbac, "kind": "ClusterRole", "metadata": meta(TENANT_CLUSTER_ROLE, None),
               "rules": policy_rules(Scope::Tenant)}),
        json!({"apiVersion": rbac, "kind": "Role", "metadata": meta("sless-build", Some(BUILD_NAMESPACE)),
               "rules": policy_rules(Scope::Build)}),
        json!({"apiVersion": rbac, "kind": "RoleBinding", "metadata": meta("sless-build", Some(BUILD_NAMESPACE)),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "sless-build"},
               "subjects": subjects()}),
        json!({"apiVersion": rbac, "kind": "Role", "metadata": meta(SERVICE_ACCOUNT, Some(SYSTEM_NAMESPACE)),
               "rules": policy_rules(Scope::System)}),
        json!({"apiVersion": rbac, "kind": "RoleBinding", "metadata": meta(SERVICE_ACCOUNT, Some(SYSTEM_NAMESPACE)),
               "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": SERVICE_ACCOUNT},
               "subjects": subjects()}),
    ]
}

/// The ValidatingAdmissionPolicy (and its binding) that keeps the
/// ServiceAccount's cluster-wide writes to `sless-*` namespaces.
pub fn admission_policy(labels: &Value) -> Vec<Value> {
    let user = format!("system:serviceaccount:{SYSTEM_NAMESPACE}:{SERVICE_ACCOUNT}");
    let p = NAMESPACE_PREFIX;
    let validations = json!([
        {
            "expression": format!("request.resource.resource != 'namespaces' || request.name.startsWith('{p}')"),
            "message": format!("sless may only create or change namespaces named {p}*"),
            "reason": "Forbidden",
        },
        {
            "expression": format!("request.resource.resource != 'rolebindings' || request.namespace.startsWith('{p}')"),
            "message": format!("sless may only bind roles in namespaces named {p}*"),
            "reason": "Forbidden",
        },
        {
            "expression": format!(
                "request.resource.resource != 'rolebindings' || \
                 (object.roleRef.kind == 'ClusterRole' && object.roleRef.name == '{TENANT_CLUSTER_ROLE}')"),
            "message": format!("sless may only bind the ClusterRole {TENANT_CLUSTER_ROLE}"),
            "reason": "Forbidden",
        },
        {
            "expression": format!(
                "request.resource.resource != 'secrets' || request.namespace != '{BUILD_NAMESPACE}' || \
                 (has(oldObject.metadata.labels) && \
                  'sless.dev/component' in oldObject.metadata.labels && \
                  oldObject.metadata.labels['sless.dev/component'] == 'build')"),
            "message": format!("sless may only delete the build context Secrets in {BUILD_NAMESPACE}"),
            "reason": "Forbidden",
        },
    ]);
    let name = "sless-tenant-namespaces";
    vec![
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                "matchConstraints": {"resourceRules": [
                    {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["namespaces"],
                     "operations": ["CREATE", "UPDATE"]},
                    {"apiGroups": ["rbac.authorization.k8s.io"], "apiVersions": ["v1"],
                     "resources": ["rolebindings"], "operations": ["CREATE", "UPDATE"]},
                    {"apiGroups": [""], "apiVersions": ["v1"], "resources": ["secrets"],
                     "operations": ["DELETE"]},
                ]},
                "matchConditions": [{
                    "name": "the-sless-service-account",
                    "expression": format!("request.userInfo.username == '{user}'"),
                }],
                "validations": validations,
            },
        }),
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicyBinding",
            "metadata": {"name": name, "labels": labels},
            "spec": {"policyName": name, "validationActions": ["Deny"]},
        }),
    ]
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

    const REGISTRY_PUSH_SECRET_NAME: &str = super::super::REGISTRY_PUSH_SECRET;
}
