//! The Kubernetes driver against a real cluster, when there is one:
//! `SLESS_TEST_KUBECONFIG` names its kubeconfig (kind or k3d will do; see
//! docs/kubernetes.md). Without it the test has nothing to run against and
//! says so, unless `SLESS_TEST_REQUIRE_KUBERNETES=1`, which makes a missing
//! cluster a failure (for a CI job that is meant to have one).
//!
//! It ensures a tenant namespace (twice), runs a Job to completion (its pod
//! starts only once the event's Secret is mounted, under Pod Security
//! `restricted`) and reads its log, deploys and serves nothing of its own
//! (that needs a registry with the runtime images: set
//! `SLESS_TEST_KUBE_FUNCTION_IMAGE` to a built function image to also roll
//! one out, run it as a job with an input near the API's limit, and see a
//! rollout of an image that cannot be pulled put back to it), and removes
//! what it made.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::{Namespace as K8sNamespace, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::{Api, ListParams};
use sless_domain::{FunctionKey, FunctionName, Namespace, Runtime};
use sless_testkit::TestS3;
use sless_workers::driver::{Artifact, DeployRequest, Driver, DriverError, JobRequest};
use sless_workers::kube::{KubeDriver, KubeSettings};

async fn cluster() -> Option<kube::Client> {
    let Some(path) = std::env::var_os("SLESS_TEST_KUBECONFIG") else {
        assert!(
            std::env::var("SLESS_TEST_REQUIRE_KUBERNETES").as_deref() != Ok("1"),
            "SLESS_TEST_REQUIRE_KUBERNETES=1 but SLESS_TEST_KUBECONFIG is not set"
        );
        eprintln!("no cluster: set SLESS_TEST_KUBECONFIG to run this test against one");
        return None;
    };
    let kubeconfig = kube::config::Kubeconfig::read_from(&path).expect("reading the kubeconfig");
    let config = kube::Config::from_custom_kubeconfig(kubeconfig, &Default::default())
        .await
        .expect("a usable kubeconfig");
    Some(kube::Client::try_from(config).expect("a client"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_real_cluster_a_namespace_is_ensured_and_a_job_runs() {
    let Some(client) = cluster().await else {
        return;
    };
    let registry = std::env::var("SLESS_TEST_KUBE_REGISTRY")
        .unwrap_or_else(|_| "registry.invalid/sless".into());
    let s3 = TestS3::new().await;
    let driver = KubeDriver::new(client.clone(), KubeSettings::new(registry), s3.blobs());
    let suffix = format!("{:016x}", rand_u64());
    let ns = Namespace::parse(&format!("sless-{suffix}")).unwrap();
    let key = FunctionKey::new(ns.clone(), FunctionName::parse("probe").unwrap());

    driver.ensure_namespace(&ns).await.unwrap();
    driver.ensure_namespace(&ns).await.unwrap();
    let namespace = Api::<K8sNamespace>::all(client.clone())
        .get(ns.as_str())
        .await
        .unwrap();
    let labels = namespace.metadata.labels.unwrap_or_default();
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted")
    );
    let policies = Api::<NetworkPolicy>::namespaced(client.clone(), ns.as_str())
        .list(&Default::default())
        .await
        .unwrap();
    assert!(policies.items.len() >= 3, "{:?}", policies.items);

    // busybox's own command is a shell: with no input it exits 0. The pod
    // must be admitted under Pod Security `restricted` to get that far.
    let image =
        std::env::var("SLESS_TEST_KUBE_JOB_IMAGE").unwrap_or_else(|_| "busybox:1.36".into());
    let out = driver
        .run_job(JobRequest {
            key: key.clone(),
            run: format!("job/{ns}/probe"),
            version: 1,
            runtime: Runtime::Python311,
            entrypoint: "handler.handle".into(),
            env_vars: BTreeMap::new(),
            memory_mb: 64,
            timeout: Duration::from_secs(120),
            artifact: Artifact { reference: image },
            event: serde_json::json!({"method": "JOB"}),
        })
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    // Its event was a Secret owned by the Job.
    let secrets = Api::<Secret>::namespaced(client.clone(), ns.as_str())
        .list(&ListParams::default().labels("sless.dev/job=probe"))
        .await
        .unwrap();
    assert_eq!(secrets.items.len(), 1, "{:?}", secrets.items);
    let owner = &secrets.items[0].metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str()),
        ("Job", "job-probe")
    );

    if let Ok(image) = std::env::var("SLESS_TEST_KUBE_FUNCTION_IMAGE") {
        let entrypoint =
            std::env::var("SLESS_TEST_KUBE_ENTRYPOINT").unwrap_or_else(|_| "handler.handle".into());
        let deploy = |version: u32, image: &str| DeployRequest {
            key: key.clone(),
            version,
            runtime: Runtime::Python311,
            entrypoint: entrypoint.clone(),
            memory_mb: 128,
            timeout_sec: 30,
            env_vars: BTreeMap::new(),
            artifact: Artifact {
                reference: image.to_owned(),
            },
        };
        let d = driver.deploy(deploy(1, &image)).await.unwrap();
        assert_eq!(driver.status(&key).await, Some(d.clone()));

        // A job of it whose input is near the API's limit: the wrapper
        // reads the whole event from its file and prints a JSON result.
        let input = serde_json::json!({"pad": "\"".repeat(30_000)});
        let event = serde_json::json!({"method": "JOB", "path": "/", "query": {}, "headers": {},
                                       "body": input.to_string(), "json": input});
        let out = driver
            .run_job(JobRequest {
                key: key.clone(),
                run: format!("job/{ns}/big"),
                version: 1,
                runtime: Runtime::Python311,
                entrypoint: entrypoint.clone(),
                env_vars: BTreeMap::new(),
                memory_mb: 128,
                timeout: Duration::from_secs(120),
                artifact: Artifact {
                    reference: image.clone(),
                },
                event,
            })
            .await
            .unwrap();
        assert_eq!(out.exit_code, Some(0), "{out:?}");
        let last = out
            .stdout
            .text
            .trim_end()
            .lines()
            .last()
            .unwrap_or_default();
        assert!(
            serde_json::from_str::<serde_json::Value>(last).is_ok(),
            "{out:?}"
        );

        // A version whose image cannot be pulled: the Deployment goes back
        // to version 1, which still serves.
        let missing = format!("registry.invalid/sless/none@sha256:{}", "0".repeat(64));
        let err = driver.deploy(deploy(2, &missing)).await.unwrap_err();
        assert!(matches!(err, DriverError::Deploy { .. }), "{err:?}");
        assert!(
            !err.to_string().contains("nothing to roll back to"),
            "{err}"
        );
        assert_eq!(driver.status(&key).await, Some(d));
        let back = Api::<K8sDeployment>::namespaced(client.clone(), ns.as_str())
            .get("probe")
            .await
            .unwrap();
        let template = back.spec.unwrap().template.spec.unwrap();
        assert_eq!(
            template.containers[0].image.as_deref(),
            Some(image.as_str())
        );

        driver.stop(&key).await.unwrap();
        assert_eq!(driver.status(&key).await, None);
    }
    driver.remove(&key).await.unwrap();
    Api::<K8sNamespace>::all(client)
        .delete(ns.as_str(), &Default::default())
        .await
        .unwrap();
}

fn rand_u64() -> u64 {
    use std::hash::{BuildHasher, Hasher};
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos(),
    );
    h.finish()
}
