//! The test control plane is a real one: the controllers, the scheduler and
//! admission act on what the test node reports, and the proxy records and
//! breaks what passes through it.

use std::time::Duration;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, LogParams, PostParams};
use serde_json::json;
use sless_testkit::eventually;
use sless_testkit::kube::{ControlPlane, KubeProxy, Outcome, TestNode};

const DEADLINE: Duration = Duration::from_secs(60);

/// A container spec Pod Security `restricted` admits.
fn container(name: &str, image: &str) -> serde_json::Value {
    json!({
        "name": name, "image": image,
        "securityContext": {
            "runAsNonRoot": true, "runAsUser": 10001, "allowPrivilegeEscalation": false,
            "capabilities": {"drop": ["ALL"]}, "seccompProfile": {"type": "RuntimeDefault"},
        },
    })
}

#[tokio::test]
async fn a_deployment_rolls_out_and_a_job_completes_with_its_log() {
    let plane = ControlPlane::shared();
    let node = TestNode::shared();
    eprintln!("control plane started in {:?}", plane.started_in);
    let ns = plane.namespace("smoke");
    node.play_all(&format!("smoke={ns},role=server"), Outcome::serves());
    node.play_all(
        &format!("smoke={ns},role=job"),
        Outcome::succeeds("hello from the job\n").with_termination_message("sha256:00"),
    );
    let client = plane.admin();

    let deployments: Api<Deployment> = Api::namespaced(client.clone(), &ns);
    let labels = json!({"smoke": ns, "role": "server"});
    let d: Deployment = serde_json::from_value(json!({
        "metadata": {"name": "web"},
        "spec": {"replicas": 2, "selector": {"matchLabels": labels},
            "template": {"metadata": {"labels": labels},
                "spec": {"containers": [container("web", "example.test/web:1")]}}},
    }))
    .unwrap();
    deployments
        .create(&PostParams::default(), &d)
        .await
        .unwrap();
    eventually("the Deployment to be available", DEADLINE, || async {
        let d = deployments.get("web").await.ok()?;
        (d.status?.available_replicas == Some(2)).then_some(())
    })
    .await;

    let jobs: Api<Job> = Api::namespaced(client.clone(), &ns);
    let labels = json!({"smoke": ns, "role": "job"});
    let j: Job = serde_json::from_value(json!({
        "metadata": {"name": "once"},
        "spec": {"backoffLimit": 0, "template": {"metadata": {"labels": labels},
            "spec": {"restartPolicy": "Never",
                "containers": [container("main", "example.test/job:1")]}}},
    }))
    .unwrap();
    jobs.create(&PostParams::default(), &j).await.unwrap();
    eventually("the Job to succeed", DEADLINE, || async {
        let j = jobs.get("once").await.ok()?;
        (j.status?.succeeded == Some(1)).then_some(())
    })
    .await;
    let pods: Api<Pod> = Api::namespaced(client.clone(), &ns);
    let pod = pods
        .list(&ListParams::default().labels("role=job"))
        .await
        .unwrap()
        .items
        .remove(0);
    let name = pod.metadata.name.clone().unwrap();
    let log = pods.logs(&name, &LogParams::default()).await.unwrap();
    assert_eq!(log, "hello from the job\n");
    let terminated = pod.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(terminated.message.as_deref(), Some("sha256:00"));
}

#[tokio::test]
async fn admission_refuses_a_pod_running_as_root_in_a_restricted_namespace() {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("smoke");
    let pods: Api<Pod> = Api::namespaced(plane.admin(), &ns);
    let pod: Pod = serde_json::from_value(json!({
        "metadata": {"name": "root"},
        "spec": {"containers": [{"name": "c", "image": "example.test/x:1",
            "securityContext": {"runAsUser": 0}}]},
    }))
    .unwrap();
    let err = pods.create(&PostParams::default(), &pod).await.unwrap_err();
    let kube::Error::Api(status) = err else {
        panic!("{err:?}")
    };
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status.message.contains("violates PodSecurity"),
        "{status:?}"
    );
}

#[tokio::test]
async fn the_proxy_records_requests_and_injects_faults() {
    let plane = ControlPlane::shared();
    let ns = plane.namespace("smoke");
    let proxy = KubeProxy::start(plane.admin()).await;
    let pods: Api<Pod> = Api::namespaced(proxy.client(), &ns);
    pods.list(&ListParams::default()).await.unwrap();
    let path = format!("/api/v1/namespaces/{ns}/pods");
    proxy.fail_next(Some("GET"), &path, 1, 409);
    let err = pods.list(&ListParams::default()).await.unwrap_err();
    assert!(
        matches!(&err, kube::Error::Api(s) if s.code == 409 && s.reason == "Conflict"),
        "{err:?}"
    );
    pods.list(&ListParams::default()).await.unwrap();
    let seen: Vec<String> = proxy
        .requests()
        .iter()
        .map(|r| format!("{} {}", r.method, r.path))
        .collect();
    assert_eq!(seen, vec![format!("GET {path}"); 3]);
}
