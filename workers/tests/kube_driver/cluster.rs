#![allow(dead_code)]
//! The cluster as installing `deploy/` leaves it, on the real control plane
//! of this test process (`sless_testkit::kube`), and a Kubernetes driver
//! that reaches it as sless's ServiceAccount through a recording proxy: the
//! API server's RBAC authorizer and `deploy/`'s admission policy judge
//! every request the driver makes, and Pod Security every pod it asks for.
//!
//! The tests of a binary share the control plane, its node and
//! `sless-builds`: each works in a tenant namespace of its own and says
//! what the node does with the pods of that namespace only.

use std::collections::BTreeMap;
use std::fmt::Debug;

use std::time::Duration;

use k8s_openapi::NamespaceResourceScope;
use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{
    LimitRange, Namespace as K8sNamespace, Pod, ResourceQuota, Secret, Service,
};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use kube::Resource;
use kube::api::{Api, DeleteParams, ListParams};
use serde::Serialize;
use serde::de::DeserializeOwned;
use serde_json::Value;
use sless_domain::archive::sha256_hex;
use sless_domain::{FunctionKey, FunctionName, Namespace};
use sless_store::blobs::BlobStore;
use sless_testkit::TestS3;
use sless_testkit::eventually;
use sless_testkit::kube::{ControlPlane, KubeProxy, Outcome, PodView, TestNode};
use sless_workers::kube::{KubeDriver, KubeSettings};

pub const REGISTRY: &str = "registry.test/sless";
/// The build namespace `deploy/` makes.
pub const BUILD_NS: &str = "sless-builds";
/// How long the cluster may take to do what a test waits for.
pub const DEADLINE: Duration = Duration::from_secs(60);

/// One test's view of the cluster: its tenant namespace, the driver (as
/// sless's ServiceAccount, through `proxy`), and an administrator to look.
pub struct Cluster {
    /// The test's own tenant namespace (not created: `ensure` does that).
    pub ns: Namespace,
    pub driver: KubeDriver,
    pub proxy: KubeProxy,
    pub admin: kube::Client,
    pub node: &'static TestNode,
    /// Where build contexts are.
    pub blobs: BlobStore,
    _s3: Option<TestS3>,
}

impl Cluster {
    /// A driver with default settings and registry [`REGISTRY`], and an S3
    /// server of its own for build contexts.
    pub async fn start() -> Cluster {
        Cluster::start_with(KubeSettings::new(REGISTRY)).await
    }

    /// A driver with `settings`, and an S3 server of its own.
    pub async fn start_with(settings: KubeSettings) -> Cluster {
        let s3 = TestS3::new().await;
        let mut c = Cluster::with(s3.blobs(), settings).await;
        c._s3 = Some(s3);
        c
    }

    /// A driver with `settings`, reading build contexts from `blobs`.
    pub async fn with(blobs: BlobStore, settings: KubeSettings) -> Cluster {
        let node = TestNode::shared();
        let token = &sless_testkit::kube::installed().await.token;
        let plane = ControlPlane::shared();
        let upstream = kube::Client::try_from(plane.token_config(token)).unwrap();
        let proxy = KubeProxy::start(upstream).await;
        let driver = KubeDriver::new(proxy.client(), settings, blobs.clone());
        let ns = Namespace::parse(&format!("sless-{:016x}", rand::random::<u64>())).unwrap();
        Cluster {
            ns,
            driver,
            proxy,
            admin: plane.admin(),
            node,
            blobs,
            _s3: None,
        }
    }

    pub fn key(&self, name: &str) -> FunctionKey {
        FunctionKey::new(self.ns.clone(), FunctionName::parse(name).unwrap())
    }

    /// A selector of this test's objects (in its namespace, and its builds
    /// in the build namespace), with `more` (`k=v,...`) when not empty.
    pub fn mine(&self, more: &str) -> String {
        let ns = format!("sless.dev/namespace={}", self.ns);
        if more.is_empty() {
            ns
        } else {
            format!("{ns},{more}")
        }
    }

    /// The node does `f` with this test's pods that `selector` matches.
    pub fn play(&self, selector: &str, f: impl Fn(&PodView) -> Outcome + Send + Sync + 'static) {
        self.node.play(&self.mine(selector), f);
    }

    pub fn play_all(&self, selector: &str, outcome: Outcome) {
        self.node.play_all(&self.mine(selector), outcome);
    }

    /// Builds of this test push as kaniko does ([`kaniko_push`]).
    pub fn kaniko(&self) {
        self.play("sless.dev/component=build", kaniko_push);
    }

    /// Served functions of this test start and become ready.
    pub fn serve_functions(&self) {
        self.play_all("sless.dev/component=function", Outcome::serves());
    }

    /// An object as the administrator reads it.
    pub async fn get<K>(&self, ns: &str, name: &str) -> Option<Value>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        let found = Api::<K>::namespaced(self.admin.clone(), ns)
            .get_opt(name)
            .await
            .unwrap();
        found.map(|o| serde_json::to_value(o).unwrap())
    }

    /// The objects of a kind in `ns` that `selector` matches.
    pub async fn list<K>(&self, ns: &str, selector: &str) -> Vec<Value>
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + Serialize
            + DeserializeOwned,
    {
        Api::<K>::namespaced(self.admin.clone(), ns)
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
            .into_iter()
            .map(|o| serde_json::to_value(o).unwrap())
            .collect()
    }

    /// The tenant namespace as the administrator reads it.
    pub async fn namespace(&self) -> Option<Value> {
        let found = Api::<K8sNamespace>::all(self.admin.clone())
            .get_opt(self.ns.as_str())
            .await
            .unwrap();
        found.map(|o| serde_json::to_value(o).unwrap())
    }

    /// Deletes an object as an operator (or a Job's TTL) would, leaving
    /// what it owns to the garbage collector.
    pub async fn delete<K>(&self, ns: &str, name: &str)
    where
        K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
            + Clone
            + Debug
            + DeserializeOwned,
    {
        Api::<K>::namespaced(self.admin.clone(), ns)
            .delete(name, &DeleteParams::background())
            .await
            .unwrap();
    }

    /// This test's build Jobs.
    pub async fn builds(&self) -> Vec<Value> {
        self.list::<Job>(BUILD_NS, &self.mine("sless.dev/component=build"))
            .await
    }

    /// The `resourceVersion` of every object of this test: its namespace,
    /// what is in it, and its builds. Equal before and after a step: the
    /// step changed nothing on the cluster.
    pub async fn versions(&self) -> BTreeMap<String, String> {
        let ns = self.ns.as_str();
        let mut all = BTreeMap::new();
        let mut add = |kind: &str, objects: Vec<Value>| {
            for o in objects {
                all.insert(
                    format!("{kind} {}", o["metadata"]["name"].as_str().unwrap()),
                    o["metadata"]["resourceVersion"]
                        .as_str()
                        .unwrap()
                        .to_owned(),
                );
            }
        };
        add("Namespace", self.namespace().await.into_iter().collect());
        add("Deployment", self.list::<Deployment>(ns, "").await);
        add("ReplicaSet", self.list::<ReplicaSet>(ns, "").await);
        add("Service", self.list::<Service>(ns, "").await);
        add("Pod", self.list::<Pod>(ns, "").await);
        add("Job", self.list::<Job>(ns, "").await);
        add("CronJob", self.list::<CronJob>(ns, "").await);
        add("Secret", self.list::<Secret>(ns, &self.mine("")).await);
        add("NetworkPolicy", self.list::<NetworkPolicy>(ns, "").await);
        add("ResourceQuota", self.list::<ResourceQuota>(ns, "").await);
        add("LimitRange", self.list::<LimitRange>(ns, "").await);
        add("RoleBinding", self.list::<RoleBinding>(ns, "").await);
        add("Build", self.builds().await);
        add(
            "BuildPod",
            self.list::<Pod>(BUILD_NS, &self.mine("sless.dev/component=build"))
                .await,
        );
        all
    }

    /// Waits until the quota controller has counted what the tenant
    /// namespace holds: it writes the quota's status once after `ensure`.
    pub async fn quota_counted(&self) {
        eventually("the quota's status", DEADLINE, || async {
            let quota = self
                .get::<ResourceQuota>(self.ns.as_str(), "sless-quota")
                .await?;
            quota["status"].get("used").map(|_| ())
        })
        .await;
    }

    /// The requests that changed the count of Deployment `name` through
    /// its scale subresource.
    pub fn scaled(&self, name: &str) -> usize {
        self.proxy
            .requests()
            .iter()
            .filter(|r| {
                r.method == "PATCH" && r.path.ends_with(&format!("/deployments/{name}/scale"))
            })
            .count()
    }

    /// What the API server answered the driver's requests allows no doubt:
    /// nothing was refused (RBAC or admission: a 403 is the test's failure,
    /// whatever the driver made of it), and every server-side apply was by
    /// the field manager `sless`.
    pub fn assert_writes_are_ours(&self) {
        let requests = self.proxy.requests();
        let refused: Vec<_> = requests.iter().filter(|r| r.is_forbidden()).collect();
        assert!(
            refused.is_empty(),
            "the cluster refused sless's ServiceAccount: {refused:#?}"
        );
        for r in requests.iter().filter(|r| r.is_apply()) {
            assert_eq!(r.field_manager.as_deref(), Some("sless"), "{r:?}");
        }
    }
}

/// The image a Deployment's template runs.
pub fn template_image(d: &Value) -> &str {
    d["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap_or_default()
}

/// The name of an object.
pub fn name_of(o: &Value) -> &str {
    o["metadata"]["name"].as_str().unwrap_or_default()
}

/// The digest the registry gives a push to `destination`.
pub fn digest_of(destination: &str) -> String {
    format!("sha256:{}", sha256_hex(destination.as_bytes()))
}

/// What a kaniko container that pushes does with what it sees: it reads
/// its context's address from its Secret (the node starts it only once
/// that exists), pushes to its `--destination`, and writes the digest to
/// its termination message (`--digest-file`).
pub fn kaniko_push(pod: &PodView) -> Outcome {
    let context = pod.env("SLESS_CONTEXT_URL").unwrap_or_default();
    let Some(destination) = pod
        .flag("destination")
        .filter(|_| context.starts_with("http"))
    else {
        return Outcome::fails(&format!(
            "kaniko: no context ({context:?}) or destination in {}",
            pod.name()
        ));
    };
    Outcome::succeeds(&format!("Pushed {destination}\n"))
        .with_termination_message(&digest_of(destination))
}

/// Waits until the object `ns/name` is gone (deleted, or collected).
pub async fn gone<K>(c: &Cluster, ns: &str, name: &str)
where
    K: Resource<Scope = NamespaceResourceScope, DynamicType = ()>
        + Clone
        + Debug
        + Serialize
        + DeserializeOwned,
{
    eventually(&format!("{ns}/{name} to go"), DEADLINE, || async {
        c.get::<K>(ns, name).await.is_none().then_some(())
    })
    .await;
}

/// The names of objects.
pub fn names(objects: &[Value]) -> Vec<String> {
    let mut names: Vec<String> = objects.iter().map(|o| name_of(o).to_owned()).collect();
    names.sort();
    names
}

/// `obj` is owned by `owner` (its uid).
pub fn owned_by(obj: &Value, owner: &Value) -> bool {
    obj["metadata"]["ownerReferences"]
        .as_array()
        .is_some_and(|refs| refs.iter().any(|r| r["uid"] == owner["metadata"]["uid"]))
}

/// A typed object from JSON.
pub fn typed<K: DeserializeOwned>(v: &Value) -> K {
    serde_json::from_value(v.clone()).unwrap()
}
