//! The hardening of a tenant's pods, seen from inside them: a function
//! that reports who it runs as and what it may write, a job and a function
//! that pass their memory limit, and a function of one tenant trying to
//! reach another's.
//!
//! One function does all three (`PROBE`): called with no query it reports
//! what it sees; with `?url=` it fetches that URL (2 s timeout) and says
//! what happened; called or run as a job with `{"allocate_mb": n}` it holds
//! `n` MiB.

use std::time::Instant;

use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::api::ListParams;
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::kube::Platform;
use crate::support::zip_files;
use crate::{cluster_tier, platform};

/// The probe's handler (runtime python3.11, entrypoint `probe.handle`).
const PROBE: &str = r#"
import errno
import os
import urllib.error
import urllib.request


def _write(directory):
    """None when a file can be made in `directory`, else the errno."""
    path = os.path.join(directory, ".sless-probe")
    try:
        with open(path, "w") as f:
            f.write("x")
    except OSError as e:
        return e.errno
    os.remove(path)
    return None


def _fetch(url):
    try:
        with urllib.request.urlopen(url, timeout=2) as r:
            return {"reached": True, "status": r.status}
    except urllib.error.HTTPError as e:
        return {"reached": True, "status": e.code}
    except Exception as e:
        return {"reached": False, "error": "%s: %s" % (type(e).__name__, e)}


def handle(event):
    body = event.get("json")
    if isinstance(body, dict) and body.get("allocate_mb"):
        held = [b"x" * (16 << 20) for _ in range(int(body["allocate_mb"]) // 16)]
        return {"held_mb": 16 * len(held)}
    url = (event.get("query") or {}).get("url")
    if url:
        return _fetch(url)
    return {
        "uid": os.getuid(),
        "gid": os.getgid(),
        "euid": os.geteuid(),
        "write_app": _write("/app"),
        "write_root": _write("/"),
        "write_tmp": _write("/tmp"),
        "service_account": os.path.exists("/var/run/secrets/kubernetes.io/serviceaccount"),
        "erofs": errno.EROFS,
    }
"#;

/// Creates `name` (python3.11, `probe.handle`, `memory_mb`) from the probe,
/// uploads it and waits until it is Ready.
async fn deploy_probe(p: &Platform, name: &str, memory_mb: u32) -> Value {
    let (status, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({
                "name": name,
                "runtime": "python3.11",
                "entrypoint": "probe.handle",
                "memory_mb": memory_mb,
            })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let res = p
        .client
        .upload(name, zip_files(&[("probe.py", PROBE)]))
        .await;
    assert_eq!(res.status(), 202);
    p.wait(&format!("{name} to be Ready"), || async {
        let f = p.client.function(name).await;
        if f["phase"] == "Failed" {
            let (_, log) = p
                .call(Method::GET, &format!("/functions/{name}/build-log"), None)
                .await;
            panic!("{name} failed: {f}\nbuild log: {log}\n{}", p.logs());
        }
        if f["phase"] == "Ready" {
            Ok(f)
        } else {
            Err(f.to_string())
        }
    })
    .await
}

/// Calls the function at `url` through `/fn` with `query`: its status and
/// answer.
async fn get(url: &str, query: &[(&str, &str)]) -> (u16, String) {
    let res = reqwest::Client::new()
        .get(url)
        .query(query)
        .send()
        .await
        .unwrap();
    (res.status().as_u16(), res.text().await.unwrap())
}

/// Calls the function at `url` through `/fn` with `query`: its JSON answer,
/// which must be a 200.
async fn call(p: &Platform, url: &str, query: &[(&str, &str)]) -> Value {
    let (status, text) = get(url, query).await;
    assert_eq!(status, 200, "{url} {query:?}: {text}\n{}", p.logs());
    serde_json::from_str(&text).unwrap_or_else(|_| panic!("not JSON: {text}"))
}

/// The first answer of a function just deployed. Its pod is ready when
/// sless says Ready, but the node's rules that lead to it (kube-proxy's for
/// its Service, the enforcer's for its pod) may lag: on this node the first
/// calls were seen to get 502, refused, for a moment. Waits for a 200 and
/// says how many calls failed before it.
async fn first_call(p: &Platform, url: &str) -> Value {
    let refused = std::sync::atomic::AtomicU32::new(0);
    let answer = p
        .wait(&format!("{url} to answer"), || async {
            match get(url, &[]).await {
                (200, text) => Ok(text),
                (status, text) => {
                    refused.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    Err(format!("{status} {text}"))
                }
            }
        })
        .await;
    eprintln!(
        "{url} answered after {} failed calls",
        refused.load(std::sync::atomic::Ordering::Relaxed)
    );
    serde_json::from_str(&answer).unwrap_or_else(|_| panic!("not JSON: {answer}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_pod_runs_as_non_root_on_a_read_only_root_without_a_service_account_token() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-hardening").await;
    let f = deploy_probe(&p, "probe", 128).await;
    let seen = first_call(&p, f["url"].as_str().expect("the url")).await;
    eprintln!("the probe sees: {seen}");
    let erofs = &seen["erofs"];
    assert_ne!(seen["uid"], 0, "runs as root: {seen}");
    assert_ne!(seen["euid"], 0, "runs as root: {seen}");
    assert_ne!(seen["gid"], 0, "runs in group root: {seen}");
    // EROFS, not EACCES: the root filesystem is mounted read-only, which
    // holds whoever the process is.
    assert_eq!(&seen["write_app"], erofs, "{seen}");
    assert_eq!(&seen["write_root"], erofs, "{seen}");
    assert_eq!(
        seen["write_tmp"],
        Value::Null,
        "/tmp is not writable: {seen}"
    );
    assert_eq!(
        seen["service_account"], false,
        "a ServiceAccount token is mounted: {seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_or_a_function_over_its_memory_is_killed_and_reported_as_out_of_memory() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-oom").await;
    let hog = deploy_probe(&p, "hog", 128).await;
    let started = Instant::now();
    let (status, body) = p
        .call(
            Method::POST,
            "/jobs",
            Some(json!({"name": "greedy", "function": "hog", "input": {"allocate_mb": 1024}})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let job = p
        .wait("the greedy job to end", || async {
            let (_, job) = p.call(Method::GET, "/jobs/greedy", None).await;
            match job["status"].as_str() {
                Some("Succeeded" | "Failed") => Ok(job),
                _ => Err(job.to_string()),
            }
        })
        .await;
    eprintln!("the job ended in {:?}: {job}", started.elapsed());
    assert_eq!(job["status"], "Failed", "{job}");
    assert_eq!(
        job["error"], "killed for using more memory than its memory_mb of 128",
        "{job}"
    );
    assert_eq!(job["exit_code"], 137, "{job}");
    assert_eq!(job["timed_out"], false, "{job}");

    // The function's own pod, called with the same: the kernel kills its
    // container, the kubelet starts it again, and the caller and the
    // function's last error say why.
    let url = hog["url"].as_str().expect("the function's url");
    first_call(&p, url).await;
    let res = reqwest::Client::new()
        .post(url)
        .json(&json!({"allocate_mb": 1024}))
        .send()
        .await
        .unwrap();
    let answered = Instant::now();
    let status = res.status().as_u16();
    let problem: Value = res.json().await.unwrap_or_default();
    assert_eq!(status, 502, "{problem}\n{}", p.logs());
    // The crash is recorded (the caller's answer waited for it, a few
    // seconds at most).
    let oom = "version 1 crashed: killed for using more memory than its memory_mb of 128; the kubelet starts it again";
    p.wait("the crash to be the function's last error", || async {
        let f = p.client.function("hog").await;
        if f["last_error"] == oom {
            Ok(())
        } else {
            Err(f.to_string())
        }
    })
    .await;
    let recorded = answered.elapsed();
    assert_eq!(
        problem["type"],
        "https://sless.dev/problems/function-out-of-memory",
        "{problem} (the crash was seen {recorded:?} after that answer)\n{}",
        p.logs()
    );
    assert_eq!(problem["memory_mb"], 128, "{problem}");
    // Started again, it answers.
    first_call(&p, url).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_cannot_reach_another_tenants_pod_or_service() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let ((_, a), (_, b)) = tokio::join!(platform("cluster-netpol-a"), platform("cluster-netpol-b"));
    let (fa, fb) = tokio::join!(
        deploy_probe(&a, "prober", 128),
        deploy_probe(&b, "target", 128)
    );
    let prober = fa["url"].as_str().expect("the prober's url");
    let target = fb["url"].as_str().expect("the target's url");

    // The policies sless wrote for B select its function pods and let in
    // only the API's pods of the system namespace.
    let policies = b
        .api::<NetworkPolicy>(&b.ns)
        .list(&ListParams::default())
        .await
        .unwrap();
    let proxy = policies
        .items
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("sless-allow-proxy"))
        .unwrap_or_else(|| panic!("no sless-allow-proxy in {}", b.ns));
    let spec = serde_json::to_value(proxy.spec.as_ref().unwrap()).unwrap();
    assert_eq!(
        spec["podSelector"],
        json!({"matchLabels": {"sless.dev/component": "function"}}),
        "{spec}"
    );
    assert_eq!(
        spec["ingress"],
        json!([{
            "from": [{
                "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "sless"}},
                "podSelector": {"matchLabels": {
                    "app.kubernetes.io/component": "api",
                    "app.kubernetes.io/name": "sless",
                }},
            }],
            "ports": [{"port": 8080, "protocol": "TCP"}],
        }]),
        "{spec}"
    );
    let deny = policies
        .items
        .iter()
        .find(|p| p.metadata.name.as_deref() == Some("sless-deny-all"))
        .unwrap_or_else(|| panic!("no sless-deny-all in {}", b.ns));
    let deny = serde_json::to_value(deny.spec.as_ref().unwrap()).unwrap();
    assert_eq!(deny["podSelector"], json!({}), "{deny}");
    assert_eq!(deny["policyTypes"], json!(["Ingress", "Egress"]), "{deny}");

    // B's pod and Service, where another tenant's code would find them.
    let pods = b
        .api::<Pod>(&b.ns)
        .list(&ListParams::default().labels("sless.dev/function=target"))
        .await
        .unwrap();
    let pod = pods
        .items
        .iter()
        .find(|p| p.metadata.labels.as_ref().unwrap()["sless.dev/component"] == "function")
        .expect("the target's pod");
    let pod_ip = pod
        .status
        .as_ref()
        .and_then(|s| s.pod_ip.clone())
        .expect("the target's pod IP");
    let service = b.api::<Service>(&b.ns).get("target").await.unwrap();
    let cluster_ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.clone())
        .expect("the target's cluster IP");

    // Both answer through the proxy (so B's Service routes to its pod);
    // the prober fetches itself (its fetching works), then B's pod and
    // Service, which must not answer.
    first_call(&a, prober).await;
    first_call(&b, target).await;
    let own = call(&a, prober, &[("url", "http://127.0.0.1:8080/")]).await;
    assert_eq!(own, json!({"reached": true, "status": 200}), "{own}");
    for address in [&pod_ip, &cluster_ip] {
        let url = format!("http://{address}:8080/");
        let seen = call(&a, prober, &[("url", url.as_str())]).await;
        eprintln!("tenant A's function fetching tenant B's {url}: {seen}");
        assert_eq!(
            seen["reached"], false,
            "tenant A's function reached tenant B's {url}: {seen}"
        );
    }
    let through_proxy = call(&b, target, &[]).await;
    assert!(through_proxy["uid"].is_number(), "{through_proxy}");
}
