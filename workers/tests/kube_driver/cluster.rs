#![allow(dead_code)]
//! An in-memory cluster as installing `deploy/` leaves it, and a
//! Kubernetes driver pointed at it.

use sless_store::blobs::BlobStore;
use sless_testkit::kube_api::FakeKube;
use sless_workers::kube::{KubeDriver, KubeSettings};

pub const NS: &str = "sless-00000000000000aa";
pub const REGISTRY: &str = "registry.test/sless";

/// The API server, with the namespaces `deploy/` creates (`sless`, and
/// `sless-builds` for builds).
pub async fn fake_cluster() -> FakeKube {
    let fake = FakeKube::start().await;
    for ns in ["sless", "sless-builds"] {
        fake.put_object(
            &format!("/api/v1/namespaces/{ns}"),
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    fake
}

/// The driver, with default settings and registry [`REGISTRY`], reading
/// build contexts from `blobs`.
pub fn driver(fake: &FakeKube, blobs: BlobStore) -> KubeDriver {
    let config = kube::Config::new(fake.url().parse().unwrap());
    let client = kube::Client::try_from(config).unwrap();
    KubeDriver::new(client, KubeSettings::new(REGISTRY), blobs)
}

/// Every request the driver made is one the ServiceAccount's RBAC rules
/// (`sless_workers::kube::rbac`, what `deploy/` grants) allow.
pub fn assert_rbac_allows_every_request(fake: &FakeKube) {
    use sless_workers::kube::rbac::{Scope, allows};
    let mut refused = Vec::new();
    for r in fake.requests() {
        let parts: Vec<&str> = r.path.trim_start_matches('/').split('/').collect();
        // /api/v1/... or /apis/{group}/{version}/...
        let (group, rest) = match parts.as_slice() {
            ["api", _, rest @ ..] => ("", rest),
            ["apis", group, _, rest @ ..] => (*group, rest),
            _ => panic!("not an API path: {r:?}"),
        };
        let (ns, rest) = match rest {
            ["namespaces", ns, rest @ ..] if !rest.is_empty() => (Some(*ns), rest),
            _ => (None, rest),
        };
        let (resource, name) = match rest {
            [plural] => (plural.to_string(), None),
            [plural, name] => (plural.to_string(), Some(*name)),
            [plural, name, sub] => (format!("{plural}/{sub}"), Some(*name)),
            _ => panic!("unexpected path: {r:?}"),
        };
        let verb = match (r.method.as_str(), name) {
            ("GET", _) if r.is_watch() => "watch",
            ("GET", Some(_)) => "get",
            ("GET", None) => "list",
            ("POST", _) => "create",
            ("PUT", _) => "update",
            ("PATCH", _) => "patch",
            ("DELETE", Some(_)) => "delete",
            ("DELETE", None) => "deletecollection",
            _ => panic!("unexpected method: {r:?}"),
        };
        let scope = match ns {
            None => Scope::Cluster,
            Some("sless") => Scope::System,
            Some("sless-builds") => Scope::Build,
            Some(_) => Scope::Tenant,
        };
        let ok = allows(Scope::Cluster, group, &resource, verb, name)
            || allows(scope, group, &resource, verb, name);
        if !ok {
            refused.push(format!("{verb} {group}/{resource} {name:?} in {ns:?}"));
        }
    }
    assert!(
        refused.is_empty(),
        "not allowed by deploy/'s RBAC: {refused:#?}"
    );
}
