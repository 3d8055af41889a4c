//! The server driven by a real kube-rs client: reads, writes, patches,
//! subresources, deletion, logs, errors, reactors and faults.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{ConfigMap, Namespace, Pod};
use kube::api::{Api, DeleteParams, ListParams, LogParams, Patch, PatchParams, PostParams};
use kube::{Client, ResourceExt};
use serde_json::{Value, json};

use super::{FakeKube, Outcome, Verb};

pub(super) async fn client(kube: &FakeKube) -> Client {
    let config = kube::Config::new(kube.url().parse().expect("a URL"));
    Client::try_from(config).expect("a client")
}

pub(super) async fn namespace(client: &Client, name: &str) {
    let ns: Namespace = serde_json::from_value(json!({"metadata": {"name": name}})).unwrap();
    Api::<Namespace>::all(client.clone())
        .create(&PostParams::default(), &ns)
        .await
        .unwrap();
}

pub(super) fn config_map(name: &str, labels: Value) -> ConfigMap {
    serde_json::from_value(
        json!({"metadata": {"name": name, "labels": labels}, "data": {"k": "v"}}),
    )
    .unwrap()
}

fn deployment(name: &str, replicas: i32, image: &str) -> Value {
    json!({
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": {"sless.dev/function": name}},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": {"sless.dev/function": name}},
            "template": {
                "metadata": {"labels": {"sless.dev/function": name}},
                "spec": {"containers": [{"name": "fn", "image": image}]},
            },
        },
    })
}

fn job(name: &str) -> Job {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": {"sless.dev/job": name}},
        "spec": {"template": {
            "metadata": {"labels": {"sless.dev/job": name}},
            "spec": {"restartPolicy": "Never", "containers": [{"name": "job", "image": "img"}]},
        }},
    }))
    .unwrap()
}

fn api_error(e: kube::Error) -> (u16, String) {
    match e {
        kube::Error::Api(s) => (s.code, s.reason),
        other => panic!("not an API error: {other:?}"),
    }
}

fn names<K: ResourceExt>(items: impl IntoIterator<Item = K>) -> Vec<String> {
    items.into_iter().map(|o| o.name_any()).collect()
}

fn apply(manager: &str) -> PatchParams {
    PatchParams::apply(manager).force()
}

#[tokio::test]
async fn created_objects_get_server_fields_and_list_by_selector() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "one").await;
    namespace(&client, "two").await;
    let one = Api::<ConfigMap>::namespaced(client.clone(), "one");
    let a = one
        .create(
            &PostParams::default(),
            &config_map("a", json!({"app": "web", "tier": "front"})),
        )
        .await
        .unwrap();
    one.create(
        &PostParams::default(),
        &config_map("b", json!({"app": "db"})),
    )
    .await
    .unwrap();
    one.create(&PostParams::default(), &config_map("c", json!({})))
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "two")
        .create(
            &PostParams::default(),
            &config_map("d", json!({"app": "web"})),
        )
        .await
        .unwrap();

    assert!(!a.uid().unwrap().is_empty());
    assert_eq!(a.metadata.generation, Some(1));
    assert!(a.metadata.creation_timestamp.is_some());
    assert_eq!(a.namespace().as_deref(), Some("one"));
    let rv: u64 = a.resource_version().unwrap().parse().unwrap();
    let b = one.get("b").await.unwrap();
    assert!(
        b.resource_version().unwrap().parse::<u64>().unwrap() > rv,
        "one counter, going up"
    );

    let list = |lp: ListParams| {
        let one = one.clone();
        async move { names(one.list(&lp).await.unwrap()) }
    };
    assert_eq!(list(ListParams::default()).await, ["a", "b", "c"]);
    assert_eq!(list(ListParams::default().labels("app=web")).await, ["a"]);
    assert_eq!(
        list(ListParams::default().labels("app in (web,db)")).await,
        ["a", "b"]
    );
    assert_eq!(
        list(ListParams::default().labels("app!=web")).await,
        ["b", "c"]
    );
    assert_eq!(list(ListParams::default().labels("app,!tier")).await, ["b"]);
    assert_eq!(
        list(ListParams::default().fields("metadata.name=c")).await,
        ["c"]
    );
    let all = Api::<ConfigMap>::all(client.clone());
    let everywhere = all
        .list(&ListParams::default().labels("app=web"))
        .await
        .unwrap();
    assert_eq!(names(everywhere), ["a", "d"]);

    let page = one.list(&ListParams::default().limit(2)).await.unwrap();
    assert_eq!(names(page.items), ["a", "b"]);
    let token = page.metadata.continue_.expect("a continue token");
    let rest = one
        .list(&ListParams::default().limit(2).continue_token(&token))
        .await
        .unwrap();
    assert_eq!(names(rest.items), ["c"]);
    assert!(rest.metadata.continue_.is_none_or(|c| c.is_empty()));

    let generated: ConfigMap =
        serde_json::from_value(json!({"metadata": {"generateName": "run-"}})).unwrap();
    let made = one
        .create(&PostParams::default(), &generated)
        .await
        .unwrap();
    assert!(
        made.name_any().starts_with("run-") && made.name_any().len() == 9,
        "{}",
        made.name_any()
    );
}

#[tokio::test]
async fn errors_are_kubernetes_status_objects() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "ns");
    cms.create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap();

    let again = cms
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_error(again), (409, "AlreadyExists".into()));
    assert_eq!(
        api_error(cms.get("nope").await.unwrap_err()),
        (404, "NotFound".into())
    );
    assert!(cms.get_opt("nope").await.unwrap().is_none());

    let elsewhere = Api::<ConfigMap>::namespaced(client.clone(), "missing");
    let err = elsewhere
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_error(err), (404, "NotFound".into()));

    let bad = cms
        .create(&PostParams::default(), &config_map("Not_A_Name", json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_error(bad), (422, "Invalid".into()));
    let long_label = cms
        .create(
            &PostParams::default(),
            &config_map("b", json!({"x": "y".repeat(64)})),
        )
        .await
        .unwrap_err();
    assert_eq!(api_error(long_label), (422, "Invalid".into()));

    let unknown = axum::http::Request::get("/apis/example.com/v1/namespaces/ns/widgets")
        .body(vec![])
        .unwrap();
    let err = client.request::<Value>(unknown).await.unwrap_err();
    assert_eq!(api_error(err), (404, "NotFound".into()));

    let apply_without_manager = axum::http::Request::patch("/api/v1/namespaces/ns/configmaps/a")
        .header("content-type", "application/apply-patch+yaml")
        .body(
            serde_json::to_vec(
                &json!({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "a"}}),
            )
            .unwrap(),
        )
        .unwrap();
    let err = client
        .request::<Value>(apply_without_manager)
        .await
        .unwrap_err();
    assert_eq!(api_error(err), (422, "Invalid".into()));
}

#[tokio::test]
async fn replace_with_a_stale_resource_version_conflicts() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "ns");
    let first = cms
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap();
    let mut changed = first.clone();
    changed.data = Some(BTreeMap::from([("k".to_owned(), "new".to_owned())]));
    let second = cms
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap();
    assert_ne!(second.resource_version(), first.resource_version());
    assert_eq!(second.metadata.generation, Some(2));

    let err = cms
        .replace("a", &PostParams::default(), &changed)
        .await
        .unwrap_err();
    assert_eq!(api_error(err), (409, "Conflict".into()));
    assert_eq!(cms.get("a").await.unwrap().data.unwrap()["k"], "new");
}

#[tokio::test]
async fn server_side_apply_creates_then_bumps_generation_only_on_spec_change() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let deps = Api::<Deployment>::namespaced(client.clone(), "ns");

    let created = deps
        .patch(
            "web",
            &apply("sless"),
            &Patch::Apply(deployment("web", 1, "img:1")),
        )
        .await
        .unwrap();
    assert_eq!(created.metadata.generation, Some(1));
    let managed = created.metadata.managed_fields.clone().unwrap();
    assert_eq!(managed.len(), 1);
    assert_eq!(managed[0].manager.as_deref(), Some("sless"));
    assert_eq!(managed[0].operation.as_deref(), Some("Apply"));

    let same = deps
        .patch(
            "web",
            &apply("sless"),
            &Patch::Apply(deployment("web", 1, "img:1")),
        )
        .await
        .unwrap();
    assert_eq!(
        same.resource_version(),
        created.resource_version(),
        "a no-op apply writes nothing"
    );

    let mut relabelled = deployment("web", 1, "img:1");
    relabelled["metadata"]["labels"]["extra"] = json!("x");
    let labels_only = deps
        .patch("web", &apply("sless"), &Patch::Apply(&relabelled))
        .await
        .unwrap();
    assert_ne!(labels_only.resource_version(), created.resource_version());
    assert_eq!(labels_only.metadata.generation, Some(1));
    assert_eq!(labels_only.labels()["extra"], "x");

    let new_image = deps
        .patch(
            "web",
            &apply("sless"),
            &Patch::Apply(deployment("web", 1, "img:2")),
        )
        .await
        .unwrap();
    assert_eq!(new_image.metadata.generation, Some(2));
    assert!(
        !new_image.labels().contains_key("extra"),
        "a field the manager stopped applying is removed"
    );
    let image = new_image.spec.unwrap().template.spec.unwrap().containers[0]
        .image
        .clone();
    assert_eq!(image.as_deref(), Some("img:2"));

    let other = PatchParams::apply("someone-else");
    let err = deps
        .patch("web", &other, &Patch::Apply(deployment("web", 3, "img:2")))
        .await
        .unwrap_err();
    assert_eq!(api_error(err), (409, "Conflict".into()));
    let taken = deps
        .patch(
            "web",
            &other.force(),
            &Patch::Apply(deployment("web", 3, "img:2")),
        )
        .await
        .unwrap();
    assert_eq!(taken.spec.unwrap().replicas, Some(3));
}

#[tokio::test]
async fn merge_and_json_patches_change_fields() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "ns");
    cms.create(
        &PostParams::default(),
        &config_map("a", json!({"keep": "1", "drop": "1"})),
    )
    .await
    .unwrap();

    let merged = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Merge(json!({"metadata": {"labels": {"drop": null, "new": "2"}}})),
        )
        .await
        .unwrap();
    let labels = merged.labels();
    assert_eq!(
        (labels.get("keep"), labels.get("drop"), labels.get("new")),
        (Some(&"1".into()), None, Some(&"2".into()))
    );

    let strategic = cms
        .patch(
            "a",
            &PatchParams::default(),
            &Patch::Strategic(json!({"data": {"k": "s"}})),
        )
        .await
        .unwrap();
    assert_eq!(strategic.data.unwrap()["k"], "s");

    let ops = json!([{"op": "replace", "path": "/data/k", "value": "j"}]);
    let json_patch = axum::http::Request::patch("/api/v1/namespaces/ns/configmaps/a")
        .header("content-type", "application/json-patch+json")
        .body(serde_json::to_vec(&ops).unwrap())
        .unwrap();
    let patched: ConfigMap = client.request(json_patch).await.unwrap();
    assert_eq!(patched.data.unwrap()["k"], "j");

    let stale = json!({"metadata": {"resourceVersion": "1"}, "data": {"k": "x"}});
    let err = cms
        .patch("a", &PatchParams::default(), &Patch::Merge(stale))
        .await
        .unwrap_err();
    assert_eq!(api_error(err), (409, "Conflict".into()));
    let missing = cms
        .patch("zz", &PatchParams::default(), &Patch::Merge(json!({})))
        .await
        .unwrap_err();
    assert_eq!(api_error(missing), (404, "NotFound".into()));
}

#[tokio::test]
async fn status_and_scale_subresources_change_only_their_part() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let deps = Api::<Deployment>::namespaced(client.clone(), "ns");
    let mut with_status = deployment("web", 2, "img");
    with_status["status"] = json!({"replicas": 9});
    let created = deps
        .patch("web", &apply("sless"), &Patch::Apply(&with_status))
        .await
        .unwrap();
    assert!(
        created.status.is_none(),
        "the main resource does not write status"
    );

    let patch = json!({"spec": {"replicas": 7}, "status": {"readyReplicas": 2}});
    let after = deps
        .patch_status("web", &PatchParams::default(), &Patch::Merge(&patch))
        .await
        .unwrap();
    assert_eq!(after.status.unwrap().ready_replicas, Some(2));
    assert_eq!(
        after.spec.unwrap().replicas,
        Some(2),
        "status writes leave the spec alone"
    );
    assert_eq!(after.metadata.generation, Some(1));

    let scale = deps.get_scale("web").await.unwrap();
    assert_eq!(scale.spec.unwrap().replicas, Some(2));
    assert_eq!(
        scale.status.unwrap().selector.as_deref(),
        Some("sless.dev/function=web")
    );
    let scaled = deps
        .patch_scale(
            "web",
            &PatchParams::default(),
            &Patch::Merge(json!({"spec": {"replicas": 0}})),
        )
        .await
        .unwrap();
    assert_eq!(scaled.spec.unwrap().replicas, Some(0));
    let d = deps.get("web").await.unwrap();
    assert_eq!(d.spec.unwrap().replicas, Some(0));
    assert_eq!(d.metadata.generation, Some(2));
    assert_eq!(
        d.status.unwrap().ready_replicas,
        Some(2),
        "scale leaves the status alone"
    );
}

#[tokio::test]
async fn deletion_cascades_to_owned_objects_and_namespace_contents() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    namespace(&client, "other").await;
    let jobs = Api::<Job>::namespaced(client.clone(), "ns");
    let pods = Api::<Pod>::namespaced(client.clone(), "ns");
    let j = jobs
        .create(&PostParams::default(), &job("run"))
        .await
        .unwrap();
    let pod = |name: &str, owner: Option<&Job>| -> Pod {
        let refs: Vec<Value> = owner
            .map(|o| vec![json!({"apiVersion": "batch/v1", "kind": "Job", "name": o.name_any(), "uid": o.uid().unwrap()})])
            .unwrap_or_default();
        serde_json::from_value(
            json!({"metadata": {"name": name, "ownerReferences": refs, "labels": {"x": "1"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}),
        )
        .unwrap()
    };
    pods.create(&PostParams::default(), &pod("owned", Some(&j)))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("free", None))
        .await
        .unwrap();

    let answer = jobs
        .delete("run", &DeleteParams::background())
        .await
        .unwrap();
    assert!(
        answer.is_right(),
        "an immediate deletion answers with a Status"
    );
    assert!(jobs.get_opt("run").await.unwrap().is_none());
    assert_eq!(
        names(pods.list(&ListParams::default()).await.unwrap()),
        ["free"]
    );

    let j = jobs
        .create(&PostParams::default(), &job("kept"))
        .await
        .unwrap();
    pods.create(&PostParams::default(), &pod("orphan", Some(&j)))
        .await
        .unwrap();
    jobs.delete("kept", &DeleteParams::orphan()).await.unwrap();
    assert!(
        pods.get_opt("orphan").await.unwrap().is_some(),
        "Orphan leaves owned objects"
    );

    let gone = pods
        .delete_collection(
            &DeleteParams::default(),
            &ListParams::default().labels("x=1"),
        )
        .await
        .unwrap();
    assert_eq!(
        names(gone.left().expect("the deleted list")),
        ["free", "orphan"]
    );

    Api::<ConfigMap>::namespaced(client.clone(), "ns")
        .create(&PostParams::default(), &config_map("cm", json!({})))
        .await
        .unwrap();
    Api::<ConfigMap>::namespaced(client.clone(), "other")
        .create(&PostParams::default(), &config_map("cm", json!({})))
        .await
        .unwrap();
    Api::<Namespace>::all(client.clone())
        .delete("ns", &DeleteParams::default())
        .await
        .unwrap();
    let left = Api::<ConfigMap>::all(client.clone())
        .list(&ListParams::default())
        .await
        .unwrap();
    assert_eq!(
        left.items
            .iter()
            .map(|c| c.namespace().unwrap())
            .collect::<Vec<_>>(),
        ["other"]
    );
}

#[tokio::test]
async fn pod_log_honours_tail_lines_and_limit_bytes() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let pods = Api::<Pod>::namespaced(client.clone(), "ns");
    let p: Pod = serde_json::from_value(
        json!({"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}),
    )
    .unwrap();
    pods.create(&PostParams::default(), &p).await.unwrap();
    kube.set_pod_log("ns", "p", "one\ntwo\nthree\n");

    assert_eq!(
        pods.logs("p", &LogParams::default()).await.unwrap(),
        "one\ntwo\nthree\n"
    );
    let tail = LogParams {
        tail_lines: Some(2),
        ..LogParams::default()
    };
    assert_eq!(pods.logs("p", &tail).await.unwrap(), "two\nthree\n");
    let limited = LogParams {
        limit_bytes: Some(5),
        container: Some("c".into()),
        ..LogParams::default()
    };
    assert_eq!(pods.logs("p", &limited).await.unwrap(), "one\nt");
    assert_eq!(
        api_error(pods.logs("nope", &LogParams::default()).await.unwrap_err()).0,
        404
    );
}

#[tokio::test]
async fn complete_jobs_plays_the_job_controller() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    kube.complete_jobs("sless.dev/job=good", Outcome::succeeded("done\n"));
    kube.complete_jobs(
        "sless.dev/job=bad",
        Outcome::failed("BackoffLimitExceeded", "boom\n"),
    );
    let jobs = Api::<Job>::namespaced(client.clone(), "ns");
    let pods = Api::<Pod>::namespaced(client.clone(), "ns");

    let good = jobs
        .create(&PostParams::default(), &job("good"))
        .await
        .unwrap();
    let status = jobs.get("good").await.unwrap().status.unwrap();
    assert_eq!(status.succeeded, Some(1));
    let complete = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Complete")
        .unwrap();
    assert_eq!(complete.status, "True");
    let pod = pods
        .list(&ListParams::default().labels("batch.kubernetes.io/job-name=good"))
        .await
        .unwrap();
    let pod = pod.items.into_iter().next().expect("the job's pod");
    assert_eq!(pod.owner_references()[0].uid, good.uid().unwrap());
    let terminated = pod.status.clone().unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .terminated
        .unwrap();
    assert_eq!(terminated.exit_code, 0);
    assert_eq!(
        pods.logs(&pod.name_any(), &LogParams::default())
            .await
            .unwrap(),
        "done\n"
    );

    jobs.create(&PostParams::default(), &job("bad"))
        .await
        .unwrap();
    let status = jobs.get("bad").await.unwrap().status.unwrap();
    let failed = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Failed")
        .unwrap();
    assert_eq!(
        (failed.status.as_str(), failed.reason.as_deref()),
        ("True", Some("BackoffLimitExceeded"))
    );
    let pod = pods
        .list(&ListParams::default().labels("job-name=bad"))
        .await
        .unwrap()
        .items
        .remove(0);
    assert_eq!(
        pods.logs(&pod.name_any(), &LogParams::default())
            .await
            .unwrap(),
        "boom\n"
    );

    jobs.create(&PostParams::default(), &job("ignored"))
        .await
        .unwrap();
    assert!(
        jobs.get("ignored").await.unwrap().status.is_none(),
        "only matching jobs run"
    );
}

#[tokio::test]
async fn roll_out_deployments_reports_available_or_stuck_rollouts() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    kube.roll_out_deployments("sless.dev/function=ok", Outcome::succeeded(""));
    kube.roll_out_deployments(
        "sless.dev/function=stuck",
        Outcome::failed("ImagePullBackOff", ""),
    );
    let deps = Api::<Deployment>::namespaced(client.clone(), "ns");
    let pods = Api::<Pod>::namespaced(client.clone(), "ns");

    deps.patch(
        "ok",
        &apply("sless"),
        &Patch::Apply(deployment("ok", 2, "img")),
    )
    .await
    .unwrap();
    let status = deps.get("ok").await.unwrap().status.unwrap();
    assert_eq!(
        (
            status.observed_generation,
            status.available_replicas,
            status.ready_replicas
        ),
        (Some(1), Some(2), Some(2))
    );
    let available = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Available")
        .unwrap();
    assert_eq!(available.status, "True");
    assert_eq!(
        pods.list(&ListParams::default().labels("sless.dev/function=ok"))
            .await
            .unwrap()
            .items
            .len(),
        2
    );

    deps.patch(
        "stuck",
        &apply("sless"),
        &Patch::Apply(deployment("stuck", 1, "img")),
    )
    .await
    .unwrap();
    let status = deps.get("stuck").await.unwrap().status.unwrap();
    let progressing = status
        .conditions
        .unwrap()
        .into_iter()
        .find(|c| c.type_ == "Progressing")
        .unwrap();
    assert_eq!(
        (progressing.status.as_str(), progressing.reason.as_deref()),
        ("False", Some("ProgressDeadlineExceeded"))
    );
    let pod = pods
        .list(&ListParams::default().labels("sless.dev/function=stuck"))
        .await
        .unwrap()
        .items
        .remove(0);
    let waiting = pod.status.unwrap().container_statuses.unwrap()[0]
        .state
        .clone()
        .unwrap()
        .waiting
        .unwrap();
    assert_eq!(waiting.reason.as_deref(), Some("ImagePullBackOff"));
}

#[tokio::test]
async fn requests_are_recorded_and_faults_injected() {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let deps = Api::<Deployment>::namespaced(client.clone(), "ns");
    kube.clear_requests();
    deps.patch(
        "web",
        &apply("sless"),
        &Patch::Apply(deployment("web", 1, "img")),
    )
    .await
    .unwrap();
    deps.get("web").await.unwrap();
    let seen = kube.requests();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].method, "PATCH");
    assert_eq!(seen[0].path, "/apis/apps/v1/namespaces/ns/deployments/web");
    assert_eq!(
        seen[0].content_type.as_deref(),
        Some("application/apply-patch+yaml")
    );
    assert_eq!(seen[0].field_manager.as_deref(), Some("sless"));
    assert!(seen[0].is_write() && !seen[1].is_write());

    kube.fail_next(1, 500);
    assert_eq!(
        api_error(deps.get("web").await.unwrap_err()),
        (500, "InternalError".into())
    );
    // kube-rs retries a 503 by itself: the failure is seen, then served.
    kube.clear_requests();
    kube.fail_next(1, 503);
    deps.get("web").await.unwrap();
    assert_eq!(kube.requests().len(), 2);
    deps.get("web").await.unwrap();
    kube.fail_next_on("/api/v1/", 2, 500);
    deps.get("web").await.expect("another path is not failed");
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "ns");
    assert_eq!(api_error(cms.get_opt("x").await.unwrap_err()).0, 500);
    assert_eq!(api_error(cms.get_opt("x").await.unwrap_err()).0, 500);
    assert!(cms.get_opt("x").await.unwrap().is_none());

    let deleted = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
    let seen = deleted.clone();
    kube.on(Verb::Delete, "deployments", move |_, obj| {
        seen.lock()
            .unwrap()
            .push(obj["metadata"]["name"].as_str().unwrap().to_owned());
    });
    deps.delete("web", &DeleteParams::default()).await.unwrap();
    assert_eq!(*deleted.lock().unwrap(), ["web"]);
}
