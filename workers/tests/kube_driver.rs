//! The Kubernetes driver against a real API server, controllers and
//! scheduler (`sless_testkit::kube`), as sless's ServiceAccount with what
//! `deploy/` grants it, and a real S3 server for build contexts. The test
//! node plays the kubelet and kaniko (see `kube_driver/cluster.rs`).

#[path = "kube_driver/admission.rs"]
mod admission;
#[path = "kube_driver/air_gapped.rs"]
mod air_gapped;
#[path = "kube_driver/cluster.rs"]
mod cluster;
#[path = "kube_driver/crashes.rs"]
mod crashes;
#[path = "kube_driver/digests.rs"]
mod digests;
#[path = "kube_driver/faults.rs"]
mod faults;
#[path = "kube_driver/life.rs"]
mod life;
#[path = "kube_driver/ownership.rs"]
mod ownership;
#[path = "kube_driver/rollouts.rs"]
mod rollouts;
#[path = "kube_driver/runs.rs"]
mod runs;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{LimitRange, ResourceQuota, Secret, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use k8s_openapi::api::rbac::v1::RoleBinding;
use sless_domain::{FunctionKey, Runtime};
use sless_testkit::kube::Outcome;
use sless_workers::driver::{Artifact, BuildRequest, DeployRequest, Driver, DriverError};

pub use cluster::{BUILD_NS, Cluster, REGISTRY, digest_of, kaniko_push};

pub fn sha(n: u8) -> String {
    format!("{n:02x}").repeat(32)
}

pub async fn build_req(c: &Cluster, k: &FunctionKey, version: u32, n: u8) -> BuildRequest {
    let context = format!("context {n}").into_bytes();
    let context_key = format!("contexts/{}.tar.gz", sha(n));
    c.blobs
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
        instances: 1,
    }
}

/// The tag a build of context `n` as `version` of `hello` pushes.
fn tag_of(c: &Cluster, n: u8, version: u32) -> String {
    format!("{REGISTRY}/{}-hello:v{version}-{}", c.ns, &sha(n)[..8])
}

/// What such a build's artifact is: its repository pinned by the digest
/// the push reported.
fn image_of(c: &Cluster, n: u8, version: u32) -> String {
    format!(
        "{REGISTRY}/{}-hello@{}",
        c.ns,
        digest_of(&tag_of(c, n, version))
    )
}

#[tokio::test]
async fn a_build_runs_kaniko_with_the_context_behind_a_presigned_url_and_is_not_repeated() {
    let c = Cluster::start().await;
    c.kaniko();
    let k = c.key("hello");
    let req = build_req(&c, &k, 1, 1).await;
    let artifact = c.driver.build(req.clone()).await.unwrap();
    assert_eq!(artifact.reference, image_of(&c, 1, 1));
    // kaniko's log is the build's log.
    let log = req.log.text();
    assert!(
        log.contains(&format!("Pushed {}", tag_of(&c, 1, 1))),
        "{log:?}"
    );

    let jobs = c.builds().await;
    assert_eq!(jobs.len(), 1, "{jobs:#?}");
    let spec = serde_json::to_string(&jobs[0]["spec"]).unwrap();
    assert!(
        !spec.contains("X-Amz-Signature"),
        "no URL in the Job: {spec}"
    );
    assert!(
        spec.contains(&format!("--destination={}", tag_of(&c, 1, 1))),
        "{spec}"
    );
    // Only create and delete touched Secrets (all the build Role allows).
    let secret_writes: Vec<_> = c
        .proxy
        .requests()
        .into_iter()
        .filter(|r| r.path.contains("/secrets") && r.is_write())
        .map(|r| r.method)
        .collect();
    assert_eq!(secret_writes, ["DELETE", "POST", "DELETE"]);
    // The context Secret is gone once the build ended.
    let secrets = c
        .list::<Secret>(BUILD_NS, &c.mine("sless.dev/component=build"))
        .await;
    assert!(secrets.is_empty(), "{secrets:#?}");

    // What the Secret held fetches the context, with no credentials.
    let url = c
        .blobs
        .presigned_get(&req.context_key, Duration::from_secs(60))
        .await
        .unwrap();
    let fetched = reqwest::get(&url).await.unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(
        fetched.bytes().await.unwrap().as_ref(),
        req.context.as_slice()
    );
    c.assert_writes_are_ours();

    // A rollback names the image the log recorded and starts nothing.
    c.proxy.clear_requests();
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
    assert!(c.proxy.requests().is_empty(), "{:#?}", c.proxy.requests());
}

/// A failed build pod fails its Job at once (`backoffLimit: 0`): the real
/// Job controller does not run it again.
#[tokio::test]
async fn a_failed_build_reports_the_reason_and_the_log_tail() {
    let c = Cluster::start().await;
    let broken = Arc::new(AtomicBool::new(true));
    let still_broken = broken.clone();
    c.play("sless.dev/component=build", move |pod| {
        if still_broken.load(Ordering::SeqCst) {
            Outcome::fails("step 3/4\nERROR: No matching distribution found for nosuchpkg")
        } else {
            kaniko_push(pod)
        }
    });
    let k = c.key("hello");
    let req = build_req(&c, &k, 1, 2).await;
    let log = req.log.clone();
    let failing = std::time::Instant::now();
    let err = c.driver.build(req).await.unwrap_err();
    let failed_in = failing.elapsed();
    let DriverError::Build { message, log_tail } = err else {
        panic!("{err:?}");
    };
    assert!(message.contains("failed"), "{message}");
    assert!(log_tail.contains("No matching distribution"), "{log_tail}");
    let log = log.text();
    assert!(log.starts_with("step 3/4\n"), "the whole log: {log:?}");
    assert!(log.contains("No matching distribution"), "{log:?}");
    let build_pods = c
        .list::<k8s_openapi::api::core::v1::Pod>(
            "sless-builds",
            &c.mine("sless.dev/component=build"),
        )
        .await;
    assert_eq!(
        build_pods.len(),
        1,
        "one pod ran the failing build, in {failed_in:?}"
    );

    // Asked again (a job of that version, a rollback to it), it builds
    // again rather than answering with the old failure.
    broken.store(false, Ordering::SeqCst);
    let again = c.driver.build(build_req(&c, &k, 1, 2).await).await;
    assert!(again.is_ok(), "{again:?}");
    assert_eq!(c.builds().await.len(), 1);
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_deploy_applies_a_deployment_and_service_and_waits_for_the_rollout() {
    let c = Cluster::start().await;
    c.serve_functions();
    let k = c.key("hello");
    let ns = c.ns.as_str();
    assert_eq!(c.driver.status(&k).await, None);
    let image = image_of(&c, 1, 1);
    let d = c.driver.deploy(deploy_req(&k, 1, &image)).await.unwrap();
    assert_eq!(
        d.endpoint,
        format!("http://hello.{ns}.svc.cluster.local:8080")
    );
    assert_eq!(c.driver.status(&k).await, Some(d.clone()));

    // The namespace was ensured on the way.
    let namespace = c.namespace().await.unwrap();
    assert_eq!(
        namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"],
        "restricted"
    );
    let deployment = c.get::<K8sDeployment>(ns, "hello").await.unwrap();
    let env =
        serde_json::to_string(&deployment["spec"]["template"]["spec"]["containers"][0]["env"])
            .unwrap();
    assert!(env.contains("costs $$(HOME)"), "{env}");
    assert!(c.get::<Service>(ns, "hello").await.is_some());
    // A watch, not a polling loop: a handful of GETs at most.
    let gets = c
        .proxy
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && !r.is_watch())
        .count();
    assert!(gets < 12, "{gets} GETs: {:#?}", c.proxy.requests());

    // Disabled trigger: scaled to zero, kept; deploying again scales back.
    c.driver.stop(&k).await.unwrap();
    let deployment = c.get::<K8sDeployment>(ns, "hello").await.unwrap();
    assert_eq!(deployment["spec"]["replicas"], 0);
    assert_eq!(c.driver.status(&k).await, None);
    assert_eq!(c.driver.deploy(deploy_req(&k, 1, &image)).await.unwrap(), d);
    let deployment = c.get::<K8sDeployment>(ns, "hello").await.unwrap();
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
        c.play_all("sless.dev/component=function", Outcome::waits(reason, log));
        let k = c.key("hello");
        let err = c
            .driver
            .deploy(deploy_req(&k, 2, &image_of(&c, 1, 2)))
            .await
            .unwrap_err();
        let DriverError::Deploy { message, log_tail } = err else {
            panic!("{reason}: {err:?}");
        };
        assert!(message.contains(reason), "{message}");
        assert!(message.contains("nothing to roll back to"), "{message}");
        assert!(log_tail.contains(log), "{reason}: {log_tail}");
        assert_eq!(c.driver.status(&k).await, None);
        c.assert_writes_are_ours();
    }
}

#[tokio::test]
async fn ensuring_a_namespace_twice_changes_nothing_the_second_time() {
    let c = Cluster::start().await;
    let ns = c.ns.as_str();
    c.driver.ensure_namespace(&c.ns).await.unwrap();
    // The quota controller writes the quota's status once; what is measured
    // is what the driver does.
    c.quota_counted().await;
    let before = c.versions().await;
    let objects = || async {
        [
            c.list::<NetworkPolicy>(ns, "").await,
            c.list::<ResourceQuota>(ns, "").await,
            c.list::<LimitRange>(ns, "").await,
            c.list::<RoleBinding>(ns, "").await,
        ]
    };
    let first = objects().await;
    assert!(first.iter().all(|o| !o.is_empty()), "{first:#?}");
    c.driver.ensure_namespace(&c.ns).await.unwrap();
    assert_eq!(objects().await, first);
    assert_eq!(
        c.versions().await,
        before,
        "a second ensure changed something"
    );
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn removing_a_function_deletes_everything_it_owned() {
    let c = Cluster::start().await;
    c.serve_functions();
    c.kaniko();
    let k = c.key("hello");
    let other = c.key("other");
    let ns = c.ns.as_str();
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
    let of_hello = "sless.dev/function=hello";
    let left = [
        c.list::<K8sDeployment>(ns, of_hello).await,
        c.list::<Service>(ns, of_hello).await,
        c.list::<CronJob>(ns, of_hello).await,
        c.list::<Job>(ns, of_hello).await,
        c.list::<Job>(BUILD_NS, &c.mine(of_hello)).await,
    ];
    for objects in left {
        assert!(objects.is_empty(), "left: {objects:#?}");
    }
    assert!(
        c.driver.status(&other).await.is_some(),
        "another function was touched"
    );
    c.assert_writes_are_ours();
}

/// A reconcile and a job of the same version may build it at once (they
/// are different work items): one kaniko Job runs, and both get its image.
#[tokio::test]
async fn two_builds_of_one_version_at_once_share_one_kaniko_job() {
    let c = Cluster::start().await;
    c.kaniko();
    let k = c.key("hello");
    let (a, b) = (build_req(&c, &k, 1, 4).await, build_req(&c, &k, 1, 4).await);
    let (a, b) = tokio::join!(c.driver.build(a), c.driver.build(b));
    assert_eq!(a.unwrap().reference, image_of(&c, 4, 1));
    assert_eq!(b.unwrap().reference, image_of(&c, 4, 1));
    assert_eq!(c.builds().await.len(), 1);
    c.assert_writes_are_ours();
}
