//! The server's limits, the kubelet's start of a pod and the Deployment
//! controller's ReplicaSets, driven by a real kube-rs client.

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, ListParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::deployments::{POD_TEMPLATE_HASH, REVISION};
use super::limits::{MAX_ANNOTATION_BYTES, MAX_DATA_BYTES, MAX_REQUEST_BODY_BYTES};
use super::tests::{client, namespace};
use super::{FakeKube, Outcome};

fn secret(name: &str, data: Value) -> Secret {
    serde_json::from_value(json!({"metadata": {"name": name}, "data": data})).unwrap()
}

fn status(e: kube::Error) -> (u16, String, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason, s.message),
        other => panic!("not an API error: {other:?}"),
    }
}

fn b64(bytes: &[u8]) -> String {
    use base64::Engine as _;
    base64::engine::general_purpose::STANDARD.encode(bytes)
}

#[tokio::test]
async fn secrets_take_string_data_and_at_most_a_mebibyte() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let secrets = Api::<Secret>::namespaced(client.clone(), "ns");

    let s: Secret = serde_json::from_value(
        json!({"metadata": {"name": "s"}, "data": {"a": b64(b"x")}, "stringData": {"a": "one", "b": "two"}}),
    )
    .unwrap();
    let created = secrets.create(&PostParams::default(), &s).await.unwrap();
    assert!(created.string_data.is_none(), "stringData is write-only");
    let data = created.data.unwrap();
    assert_eq!(data["a"].0, b"one", "stringData wins over data");
    assert_eq!(data["b"].0, b"two");

    // The limit counts the decoded bytes: exactly 1 MiB is fine, one more is not.
    let whole = vec![b'x'; MAX_DATA_BYTES - 1];
    secrets
        .create(
            &PostParams::default(),
            &secret("full", json!({"k": b64(&whole), "j": b64(b"y")})),
        )
        .await
        .unwrap();
    let over = vec![b'x'; MAX_DATA_BYTES + 1];
    let (code, reason, message) = status(
        secrets
            .create(
                &PostParams::default(),
                &secret("over", json!({"k": b64(&over)})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!((code, reason.as_str()), (422, "Invalid"), "{message}");
    assert!(
        message.contains("must have at most 1048576 bytes"),
        "{message}"
    );

    let bad_key = status(
        secrets
            .create(
                &PostParams::default(),
                &secret("key", json!({"a/b": b64(b"x")})),
            )
            .await
            .unwrap_err(),
    );
    assert_eq!(bad_key.0, 422, "{bad_key:?}");
    assert!(secrets.get_opt("over").await.unwrap().is_none());
    assert!(secrets.get_opt("key").await.unwrap().is_none());
}

#[tokio::test]
async fn immutable_data_and_oversized_objects_are_refused() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let secrets = Api::<Secret>::namespaced(client.clone(), "ns");
    let mut s = secret("frozen", json!({"k": b64(b"v1")}));
    s.immutable = Some(true);
    secrets.create(&PostParams::default(), &s).await.unwrap();
    let change = json!({"data": {"k": b64(b"v2")}});
    let (code, _, message) = status(
        secrets
            .patch("frozen", &PatchParams::default(), &Patch::Merge(&change))
            .await
            .unwrap_err(),
    );
    assert_eq!(code, 422);
    assert!(message.contains("immutable"), "{message}");
    let labels = json!({"metadata": {"labels": {"seen": "yes"}}});
    secrets
        .patch("frozen", &PatchParams::default(), &Patch::Merge(&labels))
        .await
        .expect("metadata of an immutable Secret may change");

    let cms = Api::<ConfigMap>::namespaced(client.clone(), "ns");
    let big: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "noted", "annotations": {"a": "x".repeat(MAX_ANNOTATION_BYTES)}},
    }))
    .unwrap();
    let (code, _, message) = status(cms.create(&PostParams::default(), &big).await.unwrap_err());
    assert_eq!(code, 422);
    assert!(
        message.contains("metadata.annotations: Too long"),
        "{message}"
    );

    // A body past the API server's limit is refused before it is read as JSON.
    let huge: ConfigMap = serde_json::from_value(json!({
        "metadata": {"name": "huge"},
        "data": {"a": "x".repeat(MAX_REQUEST_BODY_BYTES)},
    }))
    .unwrap();
    let (code, reason, _) = status(cms.create(&PostParams::default(), &huge).await.unwrap_err());
    assert_eq!((code, reason.as_str()), (413, "RequestEntityTooLarge"));
}

fn job_mounting(name: &str, secret: &str) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"run": name}},
        "spec": {"template": {
            "metadata": {"labels": {"run": name}, "annotations": {"note": "from the template"}},
            "spec": {
                "restartPolicy": "Never",
                "containers": [{
                    "name": "job", "image": "img", "args": ["--flag=on"],
                    "terminationMessagePolicy": "FallbackToLogsOnError",
                    "env": [
                        {"name": "HOME", "value": "/tmp"},
                        {"name": "SAID", "value": "$(HOME) and $$(HOME)"},
                        {"name": "TOKEN", "valueFrom": {"secretKeyRef": {"name": secret, "key": "token"}}},
                    ],
                    "volumeMounts": [
                        {"name": "input", "mountPath": "/var/run/input", "readOnly": true},
                        {"name": "info", "mountPath": "/etc/info"},
                    ],
                }],
                "volumes": [
                    {"name": "input", "secret": {"secretName": secret, "items": [{"key": "event", "path": "event.json"}]}},
                    {"name": "info", "downwardAPI": {"items": [
                        {"path": "note", "fieldRef": {"fieldPath": "metadata.annotations['note']"}}]}},
                ],
            },
        }},
    }))
    .unwrap()
}

fn container_state(pod: &Pod) -> k8s_openapi::api::core::v1::ContainerState {
    pod.status.clone().unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
}

async fn pod_of(client: &Client, job: &str) -> Option<Pod> {
    Api::<Pod>::namespaced(client.clone(), "ns")
        .list(&ListParams::default().labels(&format!("job-name={job}")))
        .await
        .unwrap()
        .items
        .into_iter()
        .next()
}

#[tokio::test]
async fn a_jobs_pod_starts_once_its_secret_exists_and_sees_what_it_mounts() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    kube.complete_jobs_with("run", |c| {
        let seen = json!({
            "said": c.env("SAID"),
            "token": c.env("TOKEN"),
            "event": String::from_utf8_lossy(c.file("/var/run/input/event.json").unwrap_or_default()),
            "note": String::from_utf8_lossy(c.file("/etc/info/note").unwrap_or_default()),
            "flag": c.flag("flag"),
        });
        Outcome::succeeded(&seen.to_string()).with_termination_message("sha256:feed")
    });
    let jobs = Api::<Job>::namespaced(client.clone(), "ns");
    jobs.create(&PostParams::default(), &job_mounting("waits", "input"))
        .await
        .unwrap();
    let pod = pod_of(&client, "waits").await.expect("the Job's pod");
    let waiting = container_state(&pod)
        .waiting
        .expect("waiting for its Secret");
    assert_eq!(waiting.reason.as_deref(), Some("ContainerCreating"));
    assert!(
        jobs.get("waits").await.unwrap().status.is_none(),
        "it runs on"
    );

    let input = secret(
        "input",
        json!({"event": b64(b"{\"n\": 1}"), "token": b64(b"t0k")}),
    );
    Api::<Secret>::namespaced(client.clone(), "ns")
        .create(&PostParams::default(), &input)
        .await
        .unwrap();
    crate::eventually(
        "the Job to complete",
        std::time::Duration::from_secs(10),
        || async {
            jobs.get("waits")
                .await
                .unwrap()
                .status
                .and_then(|s| s.succeeded)
                .filter(|n| *n == 1)
        },
    )
    .await;
    let pod = pod_of(&client, "waits").await.unwrap();
    let log = Api::<Pod>::namespaced(client.clone(), "ns")
        .logs(&pod.name_any(), &Default::default())
        .await
        .unwrap();
    let seen: Value = serde_json::from_str(&log).unwrap();
    assert_eq!(
        seen,
        json!({"said": "/tmp and $(HOME)", "token": "t0k", "event": "{\"n\": 1}",
               "note": "from the template", "flag": "on"})
    );
    let terminated = container_state(&pod).terminated.unwrap();
    assert_eq!(terminated.message.as_deref(), Some("sha256:feed"));
}

#[tokio::test]
async fn a_failed_container_without_a_message_reports_its_log_tail() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let long: String = (0..200).map(|i| format!("line {i}\n")).collect();
    kube.complete_jobs("run=fails", Outcome::failed("BackoffLimitExceeded", &long));
    Api::<Secret>::namespaced(client.clone(), "ns")
        .create(
            &PostParams::default(),
            &secret("input", json!({"event": b64(b"{}"), "token": b64(b"t")})),
        )
        .await
        .unwrap();
    Api::<Job>::namespaced(client.clone(), "ns")
        .create(&PostParams::default(), &job_mounting("fails", "input"))
        .await
        .unwrap();
    let pod = pod_of(&client, "fails").await.unwrap();
    let message = container_state(&pod).terminated.unwrap().message.unwrap();
    assert!(message.ends_with("line 199\n"), "{message}");
    assert!(
        !message.contains("line 119\n"),
        "at most 80 lines: {message}"
    );
}

fn deployment(image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {
            "replicas": 2,
            "revisionHistoryLimit": 1,
            "selector": {"matchLabels": {"app": "web"}},
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": {
                "metadata": {"labels": {"app": "web"}},
                "spec": {"containers": [{"name": "fn", "image": image}]},
            },
        },
    })
}

#[tokio::test]
async fn a_failed_rollout_leaves_the_old_replica_set_serving_and_going_back_reuses_it() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    kube.roll_out_deployments_with(
        "app=web",
        |d| match d["spec"]["template"]["spec"]["containers"][0]["image"].as_str() {
            Some("bad") => Outcome::failed("ImagePullBackOff", ""),
            _ => Outcome::succeeded(""),
        },
    );
    let deps = Api::<Deployment>::namespaced(client.clone(), "ns");
    let sets = Api::<ReplicaSet>::namespaced(client.clone(), "ns");
    let pods = Api::<Pod>::namespaced(client.clone(), "ns");
    let apply = |image: &'static str| {
        let deps = deps.clone();
        async move {
            deps.patch(
                "web",
                &PatchParams::apply("t").force(),
                &Patch::Apply(deployment(image)),
            )
            .await
            .unwrap()
        }
    };
    let images_of_pods = || async {
        let mut v: Vec<(String, bool)> = pods
            .list(&ListParams::default().labels("app=web"))
            .await
            .unwrap()
            .items
            .iter()
            .map(|p| {
                let ready = p
                    .status
                    .as_ref()
                    .unwrap()
                    .container_statuses
                    .as_ref()
                    .unwrap()[0]
                    .ready;
                (
                    p.spec.as_ref().unwrap().containers[0]
                        .image
                        .clone()
                        .unwrap(),
                    ready,
                )
            })
            .collect();
        v.sort();
        v
    };

    apply("good").await;
    let first = sets.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(first.len(), 1);
    let good_rs = first[0].name_any();
    assert_eq!(first[0].annotations()[REVISION], "1");
    assert_eq!(first[0].owner_references()[0].name, "web");
    assert_eq!(
        images_of_pods().await,
        [("good".into(), true), ("good".into(), true)]
    );

    apply("bad").await;
    let d = deps.get("web").await.unwrap();
    let s = d.status.unwrap();
    assert_eq!(
        (s.replicas, s.updated_replicas, s.available_replicas),
        (Some(3), Some(1), Some(2))
    );
    assert_eq!(d.metadata.annotations.unwrap()[REVISION], "2");
    // maxUnavailable 0: both old pods still serve, one new pod beside them.
    assert_eq!(
        images_of_pods().await,
        [
            ("bad".into(), false),
            ("good".into(), true),
            ("good".into(), true)
        ]
    );

    // The old template again: its ReplicaSet, at the newest revision, and
    // the failed one scaled to zero.
    apply("good").await;
    let good = sets.get(&good_rs).await.unwrap();
    assert_eq!(good.annotations()[REVISION], "3");
    assert_eq!(good.status.unwrap().available_replicas, Some(2));
    assert_eq!(
        images_of_pods().await,
        [("good".into(), true), ("good".into(), true)]
    );
    let all = sets.list(&ListParams::default()).await.unwrap().items;
    assert_eq!(all.len(), 2, "the history keeps one idle ReplicaSet");
    let bad = all.iter().find(|rs| rs.name_any() != good_rs).unwrap();
    assert_eq!(bad.spec.as_ref().unwrap().replicas, Some(0));
    assert!(bad.labels().contains_key(POD_TEMPLATE_HASH));

    // A third template pushes the oldest idle ReplicaSet out of the history.
    apply("other").await;
    let names: Vec<String> = sets
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .iter()
        .map(|r| r.name_any())
        .collect();
    assert_eq!(names.len(), 2, "{names:?}");
    assert!(names.contains(&good_rs), "{names:?}");
}

#[tokio::test]
async fn a_container_whose_environment_linux_refuses_never_starts() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    kube.complete_jobs("run", Outcome::succeeded("ran\n"));
    let jobs = Api::<Job>::namespaced(client.clone(), "ns");
    let job = |name: &str, value: String| -> Job {
        serde_json::from_value(json!({
            "metadata": {"name": name, "labels": {"run": name}},
            "spec": {"template": {"metadata": {"labels": {"run": name}}, "spec": {
                "restartPolicy": "Never",
                "containers": [{"name": "job", "image": "img", "env": [{"name": "BIG", "value": value}]}],
            }}},
        }))
        .unwrap()
    };
    // `BIG=` and the value, and the NUL that ends it: one byte too many.
    let limit = super::kubelet::MAX_ARG_STRLEN;
    jobs.create(&PostParams::default(), &job("fits", "x".repeat(limit - 5)))
        .await
        .unwrap();
    jobs.create(&PostParams::default(), &job("over", "x".repeat(limit - 4)))
        .await
        .unwrap();
    let fits = pod_of(&client, "fits").await.unwrap();
    assert_eq!(container_state(&fits).terminated.unwrap().exit_code, 0);
    let over = pod_of(&client, "over").await.unwrap();
    let end = container_state(&over).terminated.unwrap();
    assert_eq!(
        (end.exit_code, end.reason.as_deref()),
        (128, Some("StartError"))
    );
    assert!(end.message.unwrap().contains("argument list too long"));
    let failed = jobs.get("over").await.unwrap().status.unwrap().failed;
    assert_eq!(failed, Some(1));
}
