//! What the ServiceAccount `sless` may do, as data, and the RBAC objects and
//! the admission policies rendered from it.
//!
//! Least privilege: no wildcard, no cluster-admin, no Secret readable
//! cluster-wide. Cluster-wide, sless may only create and label namespaces
//! and create RoleBindings to the ClusterRole `sless-tenant`; the
//! ValidatingAdmissionPolicies `sless-tenant-namespaces` and
//! `sless-tenant-role-bindings` keep those writes to namespaces named
//! `sless-*` (but the build namespace), held to Pod Security `restricted`,
//! and to bindings of `sless-tenant` to sless itself; `sless-build-secrets`
//! keeps its deletes in the build namespace to the build context Secrets
//! (tests/kube_deploy.rs holds them against a real API server).
//! Everything it does inside a tenant namespace it may do only through that
//! RoleBinding, which the driver creates on `ensure`. The rules themselves
//! are `sless_workers::kube::rbac`, where the driver's tests hold every
//! request the driver makes against them.

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

/// One ValidatingAdmissionPolicy, for the requests of sless's
/// ServiceAccount on one kind, and its binding (`Deny`). One kind per
/// policy: the API server type-checks each expression against every kind
/// its policy matches, and `object.roleRef` is no field of a Namespace.
fn policy(
    labels: &Value,
    name: &str,
    group: &str,
    resource: &str,
    operations: &[&str],
    validations: Value,
) -> [Value; 2] {
    let user = format!("system:serviceaccount:{SYSTEM_NAMESPACE}:{SERVICE_ACCOUNT}");
    [
        json!({
            "apiVersion": "admissionregistration.k8s.io/v1",
            "kind": "ValidatingAdmissionPolicy",
            "metadata": {"name": name, "labels": labels},
            "spec": {
                "failurePolicy": "Fail",
                // What the API server defaults written out: `matchConstraints`
                // is atomic, so an apply without them would own (and write)
                // the whole of it again every time.
                "matchConstraints": {
                    "matchPolicy": "Equivalent",
                    "namespaceSelector": {},
                    "objectSelector": {},
                    "resourceRules": [{
                        "apiGroups": [group], "apiVersions": ["v1"],
                        "resources": [resource], "operations": operations, "scope": "*",
                    }],
                },
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

fn validation(expression: String, message: String) -> Value {
    json!({"expression": expression, "message": message, "reason": "Forbidden"})
}

/// The admission policies that keep the ServiceAccount's cluster-wide
/// writes to `sless-*` namespaces, and its deletes in the build namespace
/// to the build context Secrets.
pub fn admission_policies(labels: &Value) -> Vec<Value> {
    let p = NAMESPACE_PREFIX;
    let b = BUILD_NAMESPACE;
    let sa = format!(
        "s.kind == 'ServiceAccount' && s.name == '{SERVICE_ACCOUNT}' && \
         has(s.namespace) && s.namespace == '{SYSTEM_NAMESPACE}'"
    );
    let pod_security = "pod-security.kubernetes.io/enforce";
    let namespaces = json!([
        validation(
            format!("request.name.startsWith('{p}')"),
            format!("sless may only create or change namespaces named {p}*"),
        ),
        // The build namespace is named sless-* too; its labels are the
        // operator's (kaniko needs `baseline`).
        validation(
            format!("request.name != '{b}'"),
            format!("sless may not change its build namespace {b}"),
        ),
        // Else sless could run privileged pods in a namespace of its own.
        validation(
            format!(
                "has(object.metadata.labels) && \
                 '{pod_security}' in object.metadata.labels && \
                 object.metadata.labels['{pod_security}'] == 'restricted' && \
                 (!('{pod_security}-version' in object.metadata.labels) || \
                  object.metadata.labels['{pod_security}-version'] == 'latest')"
            ),
            "sless may only create or change namespaces that enforce Pod Security \
             restricted, latest"
                .into(),
        ),
    ]);
    let role_bindings = json!([
        validation(
            format!("request.namespace.startsWith('{p}')"),
            format!("sless may only bind roles in namespaces named {p}*"),
        ),
        // Its Jobs read the registry push Secret there: the tenant role
        // (Deployments, pods' logs) would let sless read it too.
        validation(
            format!("request.namespace != '{b}'"),
            format!("sless may not bind roles in its build namespace {b}"),
        ),
        validation(
            format!(
                "object.roleRef.kind == 'ClusterRole' && object.roleRef.name == '{TENANT_CLUSTER_ROLE}'"
            ),
            format!("sless may only bind the ClusterRole {TENANT_CLUSTER_ROLE}"),
        ),
        validation(
            format!("!has(object.subjects) || object.subjects.all(s, {sa})"),
            format!(
                "sless may only bind roles to its own ServiceAccount {SYSTEM_NAMESPACE}/{SERVICE_ACCOUNT}"
            ),
        ),
    ]);
    let build_secrets = json!([validation(
        format!(
            "request.namespace != '{BUILD_NAMESPACE}' || \
             (has(oldObject.metadata.labels) && \
              'sless.dev/component' in oldObject.metadata.labels && \
              oldObject.metadata.labels['sless.dev/component'] == 'build')"
        ),
        format!("sless may only delete the build context Secrets in {BUILD_NAMESPACE}"),
    )]);
    let mut objects = Vec::new();
    objects.extend(policy(
        labels,
        "sless-tenant-namespaces",
        "",
        "namespaces",
        &["CREATE", "UPDATE"],
        namespaces,
    ));
    objects.extend(policy(
        labels,
        "sless-tenant-role-bindings",
        "rbac.authorization.k8s.io",
        "rolebindings",
        &["CREATE", "UPDATE"],
        role_bindings,
    ));
    objects.extend(policy(
        labels,
        "sless-build-secrets",
        "",
        "secrets",
        &["DELETE"],
        build_secrets,
    ));
    objects
}
