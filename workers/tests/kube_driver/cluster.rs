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
