//! A function's life on the node after its first deploy: scaled to zero
//! when idle and started again by its next call, a second version rolled
//! back to the first (which runs the image built for it), and a delete
//! that leaves nothing on the cluster.

use std::time::Instant;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::kube::Platform;
use crate::support::{zip_dir, zip_files};
use crate::{cluster_tier, deploy, platform};

/// The idle window of the scale-to-zero test, in seconds: long enough for
/// the test to see the function serve first, short enough to wait for.
const IDLE_SEC: u32 = 5;

/// The example's directory.
fn example(name: &str) -> std::path::PathBuf {
    std::path::Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name)
}

/// The function `name` once `check` holds of it; panics when it fails.
async fn function_when(
    p: &Platform,
    name: &str,
    what: &str,
    check: impl Fn(&Value) -> bool,
) -> Value {
    p.wait(what, || async {
        let f = p.client.function(name).await;
        if f["phase"] == "Failed" {
            panic!("{name} failed: {f}\n{}", p.logs());
        }
        if check(&f) { Ok(f) } else { Err(f.to_string()) }
    })
    .await
}

/// A call of the function through `/fn`: its status and body.
async fn call(url: &str) -> (u16, String) {
    let res = reqwest::get(url).await.unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

/// The function's Deployment: its replicas and its container's image.
async fn deployment_of(p: &Platform, name: &str) -> Option<(i32, String)> {
    let d = p.api::<Deployment>(&p.ns).get_opt(name).await.unwrap()?;
    let spec = d.spec?;
    let image = spec.template.spec?.containers.first()?.image.clone()?;
    Some((spec.replicas.unwrap_or(1), image))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_function_scales_to_zero_and_its_next_call_starts_it() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-scale").await;
    let (status, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({
                "name": "hello", "runtime": "python3.11", "entrypoint": "handler.handle",
                "scale_to_zero_after_sec": IDLE_SEC,
            })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let started = Instant::now();
    let res = p
        .client
        .upload("hello", zip_dir(&example("hello-python")))
        .await;
    assert_eq!(res.status(), 202);
    let f = function_when(&p, "hello", "hello to be Ready", |f| f["phase"] == "Ready").await;
    eprintln!("upload to Ready: {:?}", started.elapsed());
    let url = f["url"].as_str().expect("the function's url").to_owned();

    // No call for its window: the Deployment goes to 0 and its pod away.
    let ns = p.ns.clone();
    let f = function_when(&p, "hello", "hello to be at zero", |f| f["instances"] == 0).await;
    assert_eq!(f["phase"], "Ready", "{f}");
    p.wait("no pod of hello", || async {
        let replicas = deployment_of(&p, "hello").await.map(|(r, _)| r);
        let pods = p.names::<Pod>(&ns, "sless.dev/function=hello").await;
        if replicas == Some(0) && pods.is_empty() {
            Ok(())
        } else {
            Err(format!("replicas {replicas:?}, pods {pods:?}"))
        }
    })
    .await;
    let (_, page) = p
        .call(
            Method::GET,
            "/events?function=hello&type=FunctionScaledToZero",
            None,
        )
        .await;
    assert_eq!(
        page["items"].as_array().map(Vec::len),
        Some(1),
        "scaled down once: {page}"
    );

    // The next call starts a pod and is answered by it.
    let called = Instant::now();
    let (status, body) = call(&format!("{url}?name=again")).await;
    let activation = called.elapsed();
    eprintln!("a call from zero answered in: {activation:?}");
    assert_eq!(status, 200, "{body}\n{}", p.logs());
    assert!(body.contains("hello, again"), "{body}");
    let (replicas, _) = deployment_of(&p, "hello").await.expect("the deployment");
    assert_eq!(replicas, 1);
    let record = p
        .wait("the call's record", || async {
            let all = p.client.invocations("hello").await.unwrap_or_default();
            all.into_iter()
                .find(|i| i["origin"] == "http")
                .ok_or_else(|| "no record yet".to_owned())
        })
        .await;
    assert_eq!(record["cold"], true, "{record}");
    assert_eq!(record["status"], 200, "{record}");
    eprintln!(
        "its record: held {} ms, the instance started in {} ms",
        record["activation_ms"], record["instance_start_ms"]
    );
    let (_, page) = p
        .call(
            Method::GET,
            "/events?function=hello&type=FunctionScaledUp",
            None,
        )
        .await;
    assert_eq!(page["items"].as_array().map(Vec::len), Some(1), "{page}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rollback_serves_the_first_versions_code_from_its_own_image() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-rollback").await;
    let f = deploy(&p, "hello", "python3.11", "handler.handle", "hello-python").await;
    let url = f["url"].as_str().expect("the function's url").to_owned();
    let (_, first_image) = deployment_of(&p, "hello").await.expect("the deployment");
    assert!(first_image.contains("@sha256:"), "{first_image}");

    let started = Instant::now();
    let v2 = zip_files(&[(
        "handler.py",
        "def handle(event):\n    return {\"message\": \"v2\"}\n",
    )]);
    assert_eq!(p.client.upload("hello", v2).await.status(), 202);
    function_when(&p, "hello", "version 2 to serve", |f| {
        f["phase"] == "Ready" && f["deployed_version"] == 2
    })
    .await;
    eprintln!("second upload to Ready: {:?}", started.elapsed());
    let (status, body) = call(&url).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("v2"), "{body}");
    let (_, second_image) = deployment_of(&p, "hello").await.expect("the deployment");
    assert_ne!(second_image, first_image);

    let started = Instant::now();
    let (status, body) = p
        .call(
            Method::POST,
            "/functions/hello/rollback",
            Some(json!({"version": 1})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    function_when(&p, "hello", "version 1 to serve again", |f| {
        f["phase"] == "Ready" && f["deployed_version"] == 1
    })
    .await;
    eprintln!("rollback to Ready: {:?}", started.elapsed());
    let (status, body) = call(&format!("{url}?name=back")).await;
    assert_eq!(status, 200, "{body}");
    assert!(body.contains("hello, back"), "{body}");
    // Not built again: the image kaniko pushed for version 1, by digest.
    let (_, image) = deployment_of(&p, "hello").await.expect("the deployment");
    assert_eq!(image, first_image);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_function_leaves_nothing_on_the_cluster() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-delete").await;
    let f = deploy(&p, "hello", "python3.11", "handler.handle", "hello-python").await;
    let url = f["url"].as_str().expect("the function's url").to_owned();
    // A CronJob and a finished job's Job besides the Deployment and Service.
    let (status, body) = p
        .call(
            Method::POST,
            "/triggers",
            Some(json!({"name": "nightly", "function": "hello", "type": "cron", "schedule": "0 3 * * *"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = p
        .call(
            Method::POST,
            "/jobs",
            Some(json!({"name": "once", "function": "hello"})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    p.wait("the job to succeed", || async {
        let (_, j) = p.call(Method::GET, "/jobs/once", None).await;
        if j["status"] == "Succeeded" {
            Ok(())
        } else {
            assert_ne!(j["status"], "Failed", "{j}");
            Err(j.to_string())
        }
    })
    .await;
    p.wait("the CronJob", || async {
        let left = p.left_of("hello").await;
        if left.iter().any(|l| l.starts_with("cronjob ")) {
            Ok(left)
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;

    let started = Instant::now();
    let (status, body) = p.call(Method::DELETE, "/functions/hello", None).await;
    assert_eq!(status, 202, "{body}");
    p.wait("nothing of hello on the cluster", || async {
        let left = p.left_of("hello").await;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    eprintln!("delete to nothing left: {:?}", started.elapsed());
    let (status, body) = call(&url).await;
    assert_eq!(status, 404, "{body}");
}
