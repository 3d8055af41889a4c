//! The Kubernetes driver against an in-memory API server
//! (`sless_testkit::kube_api`) that plays the cluster's controllers, and a
//! real S3 server for build contexts.

#[path = "kube_driver/cluster.rs"]
mod cluster;
#[path = "kube_driver/digests.rs"]
mod digests;
#[path = "kube_driver/rollouts.rs"]
mod rollouts;
#[path = "kube_driver/runs.rs"]
mod runs;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use serde_json::Value;
use sless_domain::{FunctionKey, FunctionName, Namespace, Runtime};
use sless_testkit::TestS3;
use sless_testkit::kube_api::{FakeKube, Outcome};
use sless_workers::driver::{Artifact, BuildRequest, DeployRequest, Driver, DriverError};
use sless_workers::kube::KubeDriver;

pub use cluster::{NS, REGISTRY, digest_of, kaniko, kaniko_push};

pub struct Cluster {
    pub fake: FakeKube,
    pub driver: KubeDriver,
    pub s3: TestS3,
}

impl Cluster {
    pub async fn start() -> Cluster {
        let fake = cluster::fake_cluster().await;
        let s3 = TestS3::new().await;
        let driver = cluster::driver(&fake, s3.blobs());
        Cluster { fake, driver, s3 }
    }

    pub fn path(&self, group: &str, plural: &str, ns: &str, name: &str) -> String {
        let base = if group.is_empty() {
            "/api/v1".to_owned()
        } else {
            format!("/apis/{group}")
        };
        format!("{base}/namespaces/{ns}/{plural}/{name}")
    }

    pub fn objects(&self, group: &str, plural: &str, ns: &str, selector: &str) -> Vec<Value> {
        let base = if group.is_empty() {
            "/api/v1".to_owned()
        } else {
            format!("/apis/{group}")
        };
        self.fake
            .list(&format!("{base}/namespaces/{ns}/{plural}"), selector)
    }

    /// Every write the driver made was a server-side apply by `sless`, or a
    /// create, delete or status-free patch.
    pub fn assert_writes_are_ours(&self) {
        cluster::assert_rbac_allows_every_request(&self.fake);
        for r in self.fake.requests() {
            let apply = r.content_type.as_deref() == Some("application/apply-patch+yaml");
            if apply {
                assert_eq!(r.field_manager.as_deref(), Some("sless"), "{r:?}");
            }
        }
    }
}

pub fn key(name: &str) -> FunctionKey {
    FunctionKey::new(
        Namespace::parse(NS).unwrap(),
        FunctionName::parse(name).unwrap(),
    )
}

pub fn sha(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

pub async fn build_req(c: &Cluster, k: &FunctionKey, version: u32, n: u8) -> BuildRequest {
    let context = format!("context {n}").into_bytes();
    let context_key = format!("contexts/{}.tar.gz", sha(n));
    c.s3.blobs()
        .put(&context_key, context.clone(), "application/gzip")
        .await
        .unwrap();
    BuildRequest {
        key: k.clone(),
        version,
        runtime: Runtime::Python311,
        context_sha256: sha(n),
        context_key,
        context,
        built: None,
        log: Default::default(),
    }
}

pub fn deploy_req(k: &FunctionKey, version: u32, image: &str) -> DeployRequest {
    DeployRequest {
        key: k.clone(),
        version,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 256,
        timeout_sec: 30,
        env_vars: BTreeMap::from([("GREETING".into(), "costs $(HOME)".into())]),
        artifact: Artifact {
            reference: image.into(),
        },
    }
}

/// The tag a build of context `n` as `version` pushes.
fn tag_of(n: u8, version: u32) -> String {
    format!("{REGISTRY}/{NS}-hello:v{version}-{}", &sha(n)[..8])
}

/// What such a build's artifact is: its repository pinned by the digest
/// the push reported.
fn image_of(n: u8, version: u32) -> String {
    format!("{REGISTRY}/{NS}-hello@{}", digest_of(&tag_of(n, version)))
}

#[tokio::test]
async fn a_build_runs_kaniko_with_the_context_behind_a_presigned_url_and_is_not_repeated() {
    let c = Cluster::start().await;
    kaniko(&c.fake);
    let k = key("hello");
    let req = build_req(&c, &k, 1, 1).await;
    let artifact = c.driver.build(req.clone()).await.unwrap();
    assert_eq!(artifact.reference, image_of(1, 1));
    // kaniko's log is the build's log.
    let log = req.log.text();
    assert!(log.contains(&format!("Pushed {}", tag_of(1, 1))), "{log:?}");

    let jobs = c.objects(
        "batch/v1",
        "jobs",
        "sless-builds",
        "sless.dev/component=build",
    );
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    let spec = serde_json::to_string(&jobs[0]["spec"]).unwrap();
    assert!(
        !spec.contains("X-Amz-Signature"),
        "no URL in the Job: {spec}"
    );
    assert!(
        spec.contains(&format!("--destination={}", tag_of(1, 1))),
        "{spec}"
    );
    // Only create and delete touched Secrets (all the build Role allows).
    let secret_writes: Vec<_> = c
        .fake
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/secrets") && r.is_write())
        .map(|r| r.method)
        .collect();
    assert_eq!(secret_writes, ["DELETE", "POST", "DELETE"]);
    // The context Secret is gone once the build ended.
    let secrets = c.objects("", "secrets", "sless-builds", "sless.dev/component=build");
    assert!(secrets.is_empty(), "{secrets:#?}");

    // What the Secret held fetches the context, with no credentials.
    let url =
        c.s3.blobs()
            .presigned_get(&req.context_key, Duration::from_secs(60))
            .await
            .unwrap();
    let fetched = reqwest::get(&url).await.unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(
        fetched.bytes().await.unwrap().as_ref(),
        req.context.as_slice()
    );

    // A rollback names the image the log recorded and starts nothing.
    c.fake.clear_requests();
    let again = c
        .driver
        .build(BuildRequest {
            built: Some(artifact.clone()),
            log: Default::default(),
            ..req.clone()
        })
        .await
        .unwrap();
    assert_eq!(again, artifact);
    assert!(c.fake.requests().is_empty(), "{:#?}", c.fake.requests());
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_failed_build_reports_the_reason_and_the_log_tail() {
    let c = Cluster::start().await;
    let broken = Arc::new(AtomicBool::new(true));
    let still_broken = broken.clone();
    c.fake
        .complete_jobs_with("sless.dev/component=build", move |container| {
            if still_broken.load(Ordering::SeqCst) {
                Outcome::failed(
                    "BackoffLimitExceeded",
                    "step 3/4\nERROR: No matching distribution found for nosuchpkg",
                )
            } else {
                kaniko_push(container)
            }
        });
    let k = key("hello");
    let req = build_req(&c, &k, 1, 2).await;
    let log = req.log.clone();
    let err = c.driver.build(req).await.unwrap_err();
    let DriverError::Build { message, log_tail } = err else {
        panic!("{err:?}");
    };
    assert!(message.contains("failed"), "{message}");
    assert!(log_tail.contains("No matching distribution"), "{log_tail}");
    let log = log.text();
    assert!(log.starts_with("step 3/4\n"), "the whole log: {log:?}");
    assert!(log.contains("No matching distribution"), "{log:?}");

    // Asked again (a job of that version, a rollback to it), it builds
    // again rather than answering with the old failure.
    broken.store(false, Ordering::SeqCst);
    let again = c.driver.build(build_req(&c, &k, 1, 2).await).await;
    assert!(again.is_ok(), "{again:?}");
    assert_eq!(
        c.objects(
            "batch/v1",
            "jobs",
            "sless-builds",
            "sless.dev/component=build"
        )
        .len(),
        1
    );
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_deploy_applies_a_deployment_and_service_and_waits_for_the_rollout() {
    let c = Cluster::start().await;
    c.fake.roll_out_deployments_after(
        "sless.dev/component=function",
        Duration::from_millis(300),
        Outcome::succeeded(""),
    );
    let k = key("hello");
    assert_eq!(c.driver.status(&k).await, None);
    let image = image_of(1, 1);
    let d = c.driver.deploy(deploy_req(&k, 1, &image)).await.unwrap();
    assert_eq!(
        d.endpoint,
        format!("http://hello.{NS}.svc.cluster.local:8080")
    );
    assert_eq!(c.driver.status(&k).await, Some(d.clone()));

    // The namespace was ensured on the way.
    let ns = c.fake.get(&format!("/api/v1/namespaces/{NS}")).unwrap();
    assert_eq!(
        ns["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let deployment = c
        .fake
        .get(&c.path("apps/v1", "deployments", NS, "hello"))
        .unwrap();
    let env =
        serde_json::to_string(&deployment["spec"]["template"]["spec"]["containers"][0]["env"])
            .unwrap();
    assert!(env.contains("costs $$(HOME)"), "{env}");
    assert!(c.fake.get(&c.path("", "services", NS, "hello")).is_some());
    // A watch, not a polling loop: a handful of GETs at most.
    let gets = c
        .fake
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && !r.is_watch())
        .count();
    assert!(gets < 12, "{gets} GETs: {:#?}", c.fake.requests());

    // Disabled trigger: scaled to zero, kept; deploying again scales back.
    c.driver.stop(&k).await.unwrap();
    let deployment = c
        .fake
        .get(&c.path("apps/v1", "deployments", NS, "hello"))
        .unwrap();
    assert_eq!(deployment["spec"]["replicas"], 0);
    assert_eq!(c.driver.status(&k).await, None);
    assert_eq!(c.driver.deploy(deploy_req(&k, 1, &image)).await.unwrap(), d);
    let deployment = c
        .fake
        .get(&c.path("apps/v1", "deployments", NS, "hello"))
        .unwrap();
    assert_eq!(deployment["spec"]["replicas"], 1);
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_rollout_that_cannot_pull_or_keeps_crashing_fails_the_deploy() {
    for (reason, log) in [
        ("ImagePullBackOff", ""),
        ("CrashLoopBackOff", "Traceback: boom"),
    ] {
        let c = Cluster::start().await;
        c.fake
            .roll_out_deployments("sless.dev/component=function", Outcome::failed(reason, log));
        let k = key("hello");
        let err = c
            .driver
            .deploy(deploy_req(&k, 2, &image_of(1, 2)))
            .await
            .unwrap_err();
        let DriverError::Deploy { message, log_tail } = err else {
            panic!("{reason}: {err:?}");
        };
        assert!(message.contains(reason), "{message}");
        assert!(message.contains("nothing to roll back to"), "{message}");
        assert!(log_tail.contains(log), "{reason}: {log_tail}");
        assert_eq!(c.driver.status(&k).await, None);
    }
}

#[tokio::test]
async fn ensuring_a_namespace_twice_changes_nothing_the_second_time() {
    let c = Cluster::start().await;
    let ns = Namespace::parse(NS).unwrap();
    c.driver.ensure_namespace(&ns).await.unwrap();
    let before = c.fake.resource_version();
    let objects = |c: &Cluster| {
        [
            c.objects("networking.k8s.io/v1", "networkpolicies", NS, ""),
            c.objects("", "resourcequotas", NS, ""),
            c.objects("", "limitranges", NS, ""),
            c.objects("rbac.authorization.k8s.io/v1", "rolebindings", NS, ""),
        ]
    };
    let first = objects(&c);
    assert!(first.iter().all(|o| !o.is_empty()), "{first:#?}");
    c.driver.ensure_namespace(&ns).await.unwrap();
    assert_eq!(objects(&c), first);
    assert_eq!(
        c.fake.resource_version(),
        before,
        "a second ensure changed something"
    );
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn removing_a_function_deletes_everything_it_owned() {
    let c = Cluster::start().await;
    c.fake
        .roll_out_deployments("sless.dev/component=function", Outcome::succeeded(""));
    kaniko(&c.fake);
    let k = key("hello");
    let other = key("other");
    let image = c.driver.build(build_req(&c, &k, 1, 3).await).await.unwrap();
    c.driver
        .deploy(deploy_req(&k, 1, &image.reference))
        .await
        .unwrap();
    c.driver
        .deploy(deploy_req(&other, 1, &image.reference))
        .await
        .unwrap();
    runs::sync_cron(&c, &k, &["nightly"], &image.reference).await;

    c.driver.remove(&k).await.unwrap();
    c.driver.remove(&k).await.unwrap();
    for (group, plural, ns) in [
        ("apps/v1", "deployments", NS),
        ("", "services", NS),
        ("batch/v1", "cronjobs", NS),
        ("batch/v1", "jobs", NS),
        ("batch/v1", "jobs", "sless-builds"),
    ] {
        let left = c.objects(group, plural, ns, "sless.dev/function=hello");
        assert!(left.is_empty(), "{plural} left: {left:#?}");
    }
    assert!(
        c.driver.status(&other).await.is_some(),
        "another function was touched"
    );
}
