//! The real node runs what the control plane schedules: a pod of an image
//! made on this machine, pulled from the registry on the node's gateway,
//! networked by the CNI bridge, reached from this machine through its
//! Service's cluster IP (kube-proxy's rules), its log read through the API.
//!
//! The cluster tier: runs with `SLESS_TEST_CLUSTER=1` (scripts/test-cluster).

use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, LogParams, PostParams};
use serde_json::json;
use sless_testkit::eventually;
use sless_testkit::kube::{Cluster, GATEWAY};

const DEADLINE: Duration = Duration::from_secs(120);

fn cluster_tier() -> bool {
    let on = std::env::var("SLESS_TEST_CLUSTER").is_ok_and(|v| v == "1");
    if !on {
        eprintln!("the cluster tier runs with SLESS_TEST_CLUSTER=1 (scripts/test-cluster)");
    }
    on
}

#[tokio::test]
async fn a_pod_runs_is_reached_through_its_service_and_its_log_is_read() {
    if !cluster_tier() {
        return;
    }
    let cluster = Cluster::shared();
    eprintln!(
        "node started in {:?} (registry filled in {:?})",
        cluster.started_in, cluster.registry_filled_in
    );
    let plane = cluster.plane();
    let ns = plane.namespace("node");
    let client = plane.admin();
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let services: Api<Service> = Api::namespaced(client.clone(), &ns);

    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "automountServiceAccountToken": false,
            "containers": [{
                "name": "web",
                "image": cluster.image("sless-runtime-python3.11"),
                "command": [
                    "python3", "-m", "http.server", "--directory", "/opt/sless", "8080",
                ],
                "securityContext": {
                    "runAsNonRoot": true, "runAsUser": 10001, "allowPrivilegeEscalation": false,
                    "readOnlyRootFilesystem": true,
                    "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
                },
            }],
        },
    }))
    .unwrap();
    pods.create(&PostParams::default(), &pod).await.unwrap();
    let service: Service = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"selector": {"app": "web"}, "ports": [{"port": 80, "targetPort": 8080}]},
    }))
    .unwrap();
    let service = services
        .create(&PostParams::default(), &service)
        .await
        .unwrap();
    let cluster_ip = service.spec.unwrap().cluster_ip.unwrap();

    let pod_ip = eventually("the pod to run", DEADLINE, || async {
        let pod = pods.get("web").await.ok()?;
        let status = pod.status?;
        let ready = status
            .conditions?
            .iter()
            .any(|c| c.type_ == "Ready" && c.status == "True");
        ready.then_some(status.pod_ip?)
    })
    .await;
    let ip: std::net::Ipv4Addr = pod_ip.parse().unwrap();
    assert_eq!(
        ip.octets()[..3],
        GATEWAY.octets()[..3],
        "the pod's address {ip} is on the node's bridge"
    );

    // What kube-proxy has no rule for is refused, as on a real network
    // (here the default route leads to a proxy that accepts everything).
    let unserved = format!("{cluster_ip}:81");
    let refused = tokio::net::TcpStream::connect(&unserved).await;
    assert_eq!(
        refused.as_ref().map_err(std::io::Error::kind).err(),
        Some(std::io::ErrorKind::ConnectionRefused),
        "{unserved}: {refused:?}"
    );

    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap();
    let url = format!("http://{cluster_ip}/sless_runtime.py");
    // Until kube-proxy has written the Service's rules, the cluster IP
    // refuses.
    let body = eventually("the Service to route to the pod", DEADLINE, || async {
        let res = http.get(&url).send().await.ok()?;
        if res.status() != 200 {
            return None;
        }
        res.text().await.ok()
    })
    .await;
    assert!(body.contains("def "), "{url} answered: {body}");

    let log = eventually("the request in the pod's log", DEADLINE, || async {
        let log = pods.logs("web", &LogParams::default()).await.ok()?;
        log.contains("\"GET /sless_runtime.py HTTP/1.1\" 200")
            .then_some(log)
    })
    .await;
    eprintln!("the pod's log: {log}");
}
