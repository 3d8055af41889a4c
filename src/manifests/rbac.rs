//! What the ServiceAccount `sless` may do, as data, and the RBAC objects and
//! the admission policy rendered from it.
//!
//! Least privilege: no wildcard, no cluster-admin, no Secret readable
//! cluster-wide. Cluster-wide, sless may only create and label namespaces
//! and create RoleBindings to the ClusterRole `sless-tenant`; the
//! ValidatingAdmissionPolicy `sless-tenant-namespaces` keeps those writes to
//! namespaces named `sless-*`. Everything it does inside a tenant namespace
//! it may do only through that RoleBinding, which the driver creates on
//! `ensure`. The rules themselves are
//! `sless_workers::kube::rbac`, where the driver's tests hold every request
//! the driver makes against them.

use serde_json::{Value, json};

use sless_workers::kube::rbac::NAMESPACE_PREFIX;
pub use sless_workers::kube::rbac::{RULES, Scope, TENANT_CLUSTER_ROLE};

use super::{BUILD_NAMESPACE, SERVICE_ACCOUNT, SYSTEM_NAMESPACE};

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
