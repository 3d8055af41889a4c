//! The real node of the cluster tier (testkit's `Cluster`): its start (the
//! registry's filling apart), the compressed size of each image made here,
//! a pod's start from zero — a Deployment of `sless-runtime-python3.11`
//! scaled from 0 to 1 until its Service answers from this machine, what a
//! call to a function at zero waits for on Kubernetes — `--rounds` times,
//! and the memory of the control plane, the node's programs and its pods.
//! Needs root, as the node does.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sless_testkit::kube::Cluster;

use crate::{percentile, wait_for};

#[derive(clap::Args)]
pub struct NodeArgs {
    /// Starts from zero to measure.
    #[arg(long, default_value_t = 10)]
    rounds: usize,
}

/// Compressed bytes of each image of the layout (its layers and config).
fn image_sizes(layout: &Path) -> anyhow::Result<BTreeMap<String, u64>> {
    let read = |digest: &str| -> anyhow::Result<Value> {
        let hex = digest.trim_start_matches("sha256:");
        Ok(serde_json::from_slice(&std::fs::read(
            layout.join("blobs/sha256").join(hex),
        )?)?)
    };
    let index: Value = serde_json::from_slice(&std::fs::read(layout.join("index.json"))?)?;
    let mut sizes = BTreeMap::new();
    for m in index["manifests"].as_array().into_iter().flatten() {
        let Some(name) = m["annotations"]["org.opencontainers.image.ref.name"].as_str() else {
            continue;
        };
        let manifest = read(m["digest"].as_str().unwrap_or_default())?;
        let layers: u64 = manifest["layers"]
            .as_array()
            .into_iter()
            .flatten()
            .filter_map(|l| l["size"].as_u64())
            .sum();
        sizes.insert(
            name.to_owned(),
            layers + manifest["config"]["size"].as_u64().unwrap_or(0),
        );
    }
    Ok(sizes)
}

/// Resident memory (MiB) of the processes whose command line names one of
/// `dirs`, by program.
fn programs_rss(dirs: &[&Path]) -> BTreeMap<String, f64> {
    let mut rss = BTreeMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let proc_dir = entry.path();
        let Ok(cmdline) = std::fs::read(proc_dir.join("cmdline")) else {
            continue;
        };
        let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
        if !dirs.iter().any(|d| text.contains(&*d.to_string_lossy())) {
            continue;
        }
        let program = text
            .split(' ')
            .next()
            .and_then(|p| p.rsplit('/').next())
            .unwrap_or_default()
            .to_owned();
        let status = std::fs::read_to_string(proc_dir.join("status")).unwrap_or_default();
        let kib: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.split_whitespace().next())
            .and_then(|v| v.parse().ok())
            .unwrap_or(0.0);
        *rss.entry(program).or_insert(0.0) += kib / 1024.0;
    }
    rss
}

/// The resident memory (MiB) of every pod of the node: the `rss` of its
/// cgroup (cgroup v1).
fn pods_rss() -> f64 {
    let stat =
        std::fs::read_to_string("/sys/fs/cgroup/memory/sless-node/memory.stat").unwrap_or_default();
    stat.lines()
        .find_map(|l| l.strip_prefix("total_rss "))
        .and_then(|v| v.trim().parse::<f64>().ok())
        .unwrap_or(0.0)
        / (1024.0 * 1024.0)
}

pub async fn run(args: NodeArgs) -> anyhow::Result<Value> {
    let started = Instant::now();
    let cluster = tokio::task::spawn_blocking(Cluster::shared).await?;
    let first_use = started.elapsed();
    let plane = cluster.plane();
    let kubectl = |args: &[&str], stdin: Option<&str>| plane.kubectl_ok(args, stdin);

    let ns = plane.namespace("bench");
    let image = cluster.image("sless-runtime-python3.11");
    kubectl(
        &["apply", "-n", &ns, "-f", "-"],
        Some(&format!(
            r#"{{"apiVersion": "apps/v1", "kind": "Deployment",
 "metadata": {{"name": "web"}},
 "spec": {{"replicas": 0, "selector": {{"matchLabels": {{"app": "web"}}}},
  "template": {{"metadata": {{"labels": {{"app": "web"}}}}, "spec": {{
   "automountServiceAccountToken": false, "terminationGracePeriodSeconds": 1,
   "containers": [{{"name": "web", "image": "{image}",
    "command": ["python3", "-m", "http.server", "--directory", "/opt/sless", "8080"],
    "readinessProbe": {{"tcpSocket": {{"port": 8080}}, "periodSeconds": 1}},
    "securityContext": {{"runAsNonRoot": true, "runAsUser": 10001,
     "allowPrivilegeEscalation": false, "readOnlyRootFilesystem": true,
     "capabilities": {{"drop": ["ALL"]}}, "seccompProfile": {{"type": "RuntimeDefault"}}}}}}]}}}}}}}}
---
{{"apiVersion": "v1", "kind": "Service", "metadata": {{"name": "web"}},
 "spec": {{"selector": {{"app": "web"}}, "ports": [{{"port": 80, "targetPort": 8080}}]}}}}"#
        )),
    );
    let ip = kubectl(
        &[
            "get",
            "service",
            "web",
            "-n",
            &ns,
            "-o",
            "jsonpath={.spec.clusterIP}",
        ],
        None,
    );
    let url = format!("http://{}/sless_runtime.py", ip.trim());
    // A connection of its own each time: one made while no pod served went
    // elsewhere and would stay there.
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(2))
        .pool_max_idle_per_host(0)
        .build()?;

    let mut starts = Vec::new();
    let mut memory = None;
    for round in 0..args.rounds.max(1) {
        let asked = Instant::now();
        kubectl(
            &["scale", "deployment", "web", "-n", &ns, "--replicas=1"],
            None,
        );
        wait_for(
            "the pod to answer",
            Duration::from_secs(120),
            Duration::from_millis(20),
            || async {
                let ok = match http.get(&url).send().await {
                    Ok(r) => r.status() == 200,
                    Err(_) => false,
                };
                Ok(ok.then_some(()))
            },
        )
        .await?;
        starts.push(asked.elapsed().as_secs_f64() * 1000.0);
        if round == 0 {
            memory = Some(json!({
                "programs_mib": programs_rss(&[cluster.dir(), plane.dir()]),
                "pods_mib": pods_rss(),
            }));
        }
        kubectl(
            &["scale", "deployment", "web", "-n", &ns, "--replicas=0"],
            None,
        );
        wait_for(
            "the pod to be gone",
            Duration::from_secs(120),
            Duration::from_millis(100),
            || async {
                let pods = kubectl(&["get", "pods", "-n", &ns, "-o", "name"], None);
                Ok(pods.trim().is_empty().then_some(()))
            },
        )
        .await?;
    }
    let first = starts[0];
    starts.sort_by(f64::total_cmp);
    Ok(json!({
        "node_start_ms": cluster.started_in.as_secs_f64() * 1000.0,
        "of_it_registry_fill_ms": cluster.registry_filled_in.as_secs_f64() * 1000.0,
        "first_use_with_control_plane_ms": first_use.as_secs_f64() * 1000.0,
        "image_compressed_bytes": image_sizes(cluster.layout())?,
        "pod_start_to_answer_first_ms": first,
        "pod_start_to_answer_p50_ms": percentile(&starts, 50.0),
        "pod_start_to_answer_max_ms": starts.last(),
        "rounds": starts.len(),
        "memory_with_one_pod": memory,
    }))
}
