//! The walkthrough on a real node: sless outside the cluster (its three
//! roles as processes of the built binary), testkit's control plane with a
//! node that really runs pods (containerd, runc, the CNI bridge, the
//! kubelet, kube-proxy), and a registry on the node's gateway holding the
//! images made on this machine (`scripts/ensure-images`). kaniko builds each
//! upload from the context in S3 (fetched over HTTPS through a TLS front,
//! trusting the node's CA from the build CA Secret) and pushes it by
//! digest; the function's pod answers through `/fn`; sless reaches it at
//! its Service's cluster IP, which kube-proxy routes on this machine.
//!
//! A tier of its own (`scripts/test-cluster`): it needs root and the images,
//! and runs only with `SLESS_TEST_CLUSTER=1`.

mod cache;
mod hardening;
mod in_cluster;
mod jobs;
mod lifecycle;
mod logs;
mod python;
mod rolling;
mod runtimes;
#[path = "../support/mod.rs"]
mod support;

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};
use sless_testkit::kube::Cluster;
use support::kube::Platform;
use support::zip_dir;

/// How long any one step may take: a kaniko build on two cores is the
/// longest.
pub const DEADLINE: Duration = Duration::from_secs(600);
/// The Secret in the build namespace that holds the node's CA.
const BUILD_CA_SECRET: &str = "sless-build-ca";

/// Whether this tier runs (`SLESS_TEST_CLUSTER=1`, scripts/test-cluster):
/// when it does, the test's turn on the node, held until it ends. The
/// tests share one node on a machine of two cores: two at once (kaniko
/// builds beside the rolling restart of sless's own pods under load)
/// starved each other's rollouts and pods past their deadlines, so they
/// take turns.
pub async fn cluster_tier() -> Option<tokio::sync::MutexGuard<'static, ()>> {
    static TURN: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let on = std::env::var("SLESS_TEST_CLUSTER").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("the cluster tier runs with SLESS_TEST_CLUSTER=1 (scripts/test-cluster)");
        return None;
    }
    Some(TURN.lock().await)
}

/// The node, sless installed on its control plane, the build CA Secret,
/// and sless's processes configured for it.
pub async fn platform(sub: &str) -> (&'static Cluster, Platform) {
    let started = Instant::now();
    let cluster = Cluster::shared();
    eprintln!(
        "the node: {:?} (filling the registry: {:?}); its logs: {}",
        cluster.started_in,
        cluster.registry_filled_in,
        cluster.dir().display()
    );
    sless_testkit::kube::installed().await;
    let secret = cluster.plane().kubectl_ok(
        &[
            "create",
            "secret",
            "generic",
            BUILD_CA_SECRET,
            "--namespace=sless-builds",
            "--from-file=ca.crt=/dev/stdin",
            "--dry-run=client",
            "-o",
            "yaml",
        ],
        Some(cluster.ca_pem()),
    );
    cluster.plane().kubectl_ok(
        &[
            "apply",
            "--server-side",
            "--field-manager=sless-test",
            "-f",
            "-",
        ],
        Some(&secret),
    );
    let repository = cluster.repository();
    let kaniko = cluster.image("kaniko-executor");
    let p = Platform::start(sub, DEADLINE, |s3, worker| {
        let s3_addr = s3
            .config
            .endpoint
            .as_deref()
            .and_then(|e| e.strip_prefix("http://"))
            .and_then(|a| a.parse().ok())
            .expect("the S3 server's address");
        let front = cluster.tls_front(s3_addr);
        worker
            .env("SLESS_KUBE_REGISTRY", &repository)
            .env("SLESS_KUBE_KANIKO_IMAGE", &kaniko)
            .env(
                "SLESS_KUBE_RUNTIME_IMAGE_PREFIX",
                format!("{repository}/sless-runtime-"),
            )
            .env(
                "SLESS_KUBE_RUNTIME_IMAGE_TAG",
                sless_testkit::kube::IMAGE_TAG,
            )
            .env("SLESS_KUBE_BUILD_CA_SECRET", BUILD_CA_SECRET)
            .env("SLESS_KUBE_FUNCTION_ADDRESS", "cluster-ip")
            .env("S3_PRESIGN_ENDPOINT", format!("https://{front}"));
    })
    .await;
    eprintln!("the platform: {:?}", started.elapsed());
    (cluster, p)
}

/// Creates `name` from `examples/{example}` and uploads it; waits until it
/// is Ready (or fails with the build's log).
pub async fn deploy(
    p: &Platform,
    name: &str,
    runtime: &str,
    entrypoint: &str,
    example: &str,
) -> Value {
    let (status, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({"name": name, "runtime": runtime, "entrypoint": entrypoint})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let dir = std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(example);
    let res = p.client.upload(name, zip_dir(&dir)).await;
    assert_eq!(res.status(), 202);
    let uploaded: Value = res.json().await.unwrap();
    let version = uploaded["version"].as_u64().expect("the uploaded version");
    p.wait(&format!("{name} to be Ready"), || async {
        let f = p.client.function(name).await;
        if f["phase"] == "Failed" {
            let c = &p.client;
            let log = c
                .http
                .get(c.v1(&format!("/functions/{name}/versions/{version}/build-log")))
                .bearer_auth(&c.token)
                .send()
                .await
                .unwrap()
                .text()
                .await
                .unwrap();
            panic!("{name} failed: {f}\nbuild log:\n{log}\n{}", p.logs());
        }
        if f["phase"] == "Ready" {
            Ok(f)
        } else {
            Err(f.to_string())
        }
    })
    .await
}
