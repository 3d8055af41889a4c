#![allow(dead_code)]
//! An in-memory cluster as installing `deploy/` leaves it, and a
//! Kubernetes driver pointed at it.

use sless_domain::archive::sha256_hex;
use sless_store::blobs::BlobStore;
use sless_testkit::kube_api::{ContainerView, FakeKube, Outcome};
use sless_workers::kube::{KubeDriver, KubeSettings};

pub const NS: &str = "sless-00000000000000aa";
pub const REGISTRY: &str = "registry.test/sless";

/// The API server, with the namespaces `deploy/` creates (`sless`, and
/// `sless-builds` for builds) and the registry push Secret an operator
/// puts in the build namespace (docs/kubernetes.md).
pub async fn fake_cluster() -> FakeKube {
    let fake = FakeKube::start().await;
    for ns in ["sless", "sless-builds"] {
        fake.put_object(
            &format!("/api/v1/namespaces/{ns}"),
            serde_json::json!({"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": ns}}),
        );
    }
    fake.put_object(
        "/api/v1/namespaces/sless-builds/secrets/sless-registry-push",
        serde_json::json!({"apiVersion": "v1", "kind": "Secret",
            "type": "kubernetes.io/dockerconfigjson",
            "stringData": {".dockerconfigjson": "{\"auths\": {}}"}}),
    );
    fake
}

/// The digest the fake registry gives a push to `destination`.
pub fn digest_of(destination: &str) -> String {
    format!("sha256:{}", sha256_hex(destination.as_bytes()))
}

/// Plays kaniko for every build: it reads its context's address from its
/// Secret (the pod starts only once that exists), pushes to its
/// `--destination`, and writes the digest to its termination message
/// (`--digest-file`), as kaniko does.
pub fn kaniko(fake: &FakeKube) {
    fake.complete_jobs_with("sless.dev/component=build", kaniko_push);
}

/// What a kaniko container that pushes makes of what it sees.
pub fn kaniko_push(c: &ContainerView) -> Outcome {
    let context = c.env("SLESS_CONTEXT_URL").unwrap_or_default();
    let Some(destination) = c
        .flag("destination")
        .filter(|_| context.starts_with("http"))
    else {
        return Outcome::failed(
            "BackoffLimitExceeded",
            &format!("kaniko: no context or destination: {c:?}"),
        );
    };
    Outcome::succeeded(&format!("Pushed {destination}\n"))
        .with_termination_message(&digest_of(destination))
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
