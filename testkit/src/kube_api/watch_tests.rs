//! Watches driven by a real kube-rs client: raw watches, kube-runtime's
//! `watcher`, and `await_condition`.

use std::time::Duration;

use futures_util::{StreamExt, TryStreamExt};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::ConfigMap;
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, WatchEvent, WatchParams};
use kube::runtime::wait::{await_condition, conditions};
use kube::runtime::watcher;
use kube::{Client, ResourceExt};
use serde_json::json;

use super::FakeKube;
use super::tests::{client, config_map, namespace};

const DEADLINE: Duration = Duration::from_secs(10);

/// What a watch event says, bookmarks left out.
fn describe(ev: WatchEvent<ConfigMap>) -> Option<String> {
    match ev {
        WatchEvent::Added(o) => Some(format!("ADDED {}", o.name_any())),
        WatchEvent::Modified(o) => Some(format!("MODIFIED {}", o.name_any())),
        WatchEvent::Deleted(o) => Some(format!("DELETED {}", o.name_any())),
        WatchEvent::Bookmark(_) => None,
        WatchEvent::Error(s) => Some(format!("ERROR {} {}", s.code, s.reason)),
    }
}

async fn next_events(
    stream: &mut (impl futures_util::Stream<Item = kube::Result<WatchEvent<ConfigMap>>> + Unpin),
    n: usize,
) -> Vec<String> {
    // One deadline for all of them: bookmarks keep arriving meanwhile.
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut out = Vec::new();
    while out.len() < n {
        let ev = tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .unwrap_or_else(|_| panic!("no event after {out:?}"))
            .unwrap()
            .unwrap_or_else(|| panic!("the watch ended after {out:?}"));
        out.extend(describe(ev));
    }
    out
}

async fn setup() -> (FakeKube, Client, Api<ConfigMap>) {
    let kube = FakeKube::start().await;
    let client = client(&kube).await;
    namespace(&client, "ns").await;
    let cms = Api::<ConfigMap>::namespaced(client.clone(), "ns");
    (kube, client, cms)
}

#[tokio::test]
async fn watch_replays_changes_after_a_resource_version_then_follows() {
    let (_kube, client, cms) = setup().await;
    let a = cms
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap();
    let from = a.resource_version().unwrap();
    cms.create(&PostParams::default(), &config_map("b", json!({})))
        .await
        .unwrap();
    cms.patch(
        "b",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    // Another namespace is not this watch's business.
    namespace(&client, "elsewhere").await;
    Api::<ConfigMap>::namespaced(client.clone(), "elsewhere")
        .create(&PostParams::default(), &config_map("x", json!({})))
        .await
        .unwrap();

    let mut stream = cms
        .watch(&WatchParams::default(), &from)
        .await
        .unwrap()
        .boxed();
    assert_eq!(
        next_events(&mut stream, 3).await,
        ["ADDED b", "MODIFIED b", "DELETED a"]
    );

    cms.create(&PostParams::default(), &config_map("c", json!({})))
        .await
        .unwrap();
    cms.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(next_events(&mut stream, 2).await, ["ADDED c", "DELETED b"]);
}

#[tokio::test]
async fn watch_events_carry_increasing_resource_versions() {
    let (_kube, _client, cms) = setup().await;
    let mut stream = cms
        .watch(&WatchParams::default(), "0")
        .await
        .unwrap()
        .boxed();
    cms.create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    cms.delete("a", &DeleteParams::default()).await.unwrap();
    let deadline = tokio::time::Instant::now() + DEADLINE;
    let mut versions = Vec::new();
    while versions.len() < 3 {
        match tokio::time::timeout_at(deadline, stream.try_next())
            .await
            .unwrap()
            .unwrap()
            .unwrap()
        {
            WatchEvent::Added(o) | WatchEvent::Modified(o) | WatchEvent::Deleted(o) => {
                versions.push(o.resource_version().unwrap().parse::<u64>().unwrap());
            }
            _ => {}
        }
    }
    assert!(versions.windows(2).all(|w| w[0] < w[1]), "{versions:?}");
}

#[tokio::test]
async fn watch_with_a_selector_sees_objects_enter_and_leave_it() {
    let (_kube, _client, cms) = setup().await;
    cms.create(
        &PostParams::default(),
        &config_map("a", json!({"app": "web"})),
    )
    .await
    .unwrap();
    let wp = WatchParams::default().labels("app=web");
    let mut stream = cms.watch(&wp, "0").await.unwrap().boxed();
    assert_eq!(
        next_events(&mut stream, 1).await,
        ["ADDED a"],
        "a watch from 0 starts with the current state"
    );
    let relabel = |app: &str| Patch::Merge(json!({"metadata": {"labels": {"app": app}}}));
    cms.patch("a", &PatchParams::default(), &relabel("db"))
        .await
        .unwrap();
    cms.patch("a", &PatchParams::default(), &relabel("web"))
        .await
        .unwrap();
    cms.create(
        &PostParams::default(),
        &config_map("b", json!({"app": "db"})),
    )
    .await
    .unwrap();
    cms.patch(
        "a",
        &PatchParams::default(),
        &Patch::Merge(json!({"data": {"k": "2"}})),
    )
    .await
    .unwrap();
    assert_eq!(
        next_events(&mut stream, 3).await,
        ["DELETED a", "ADDED a", "MODIFIED a"]
    );
}

#[tokio::test]
async fn a_too_old_resource_version_is_gone() {
    let (kube, _client, cms) = setup().await;
    let a = cms
        .create(&PostParams::default(), &config_map("a", json!({})))
        .await
        .unwrap();
    cms.create(&PostParams::default(), &config_map("b", json!({})))
        .await
        .unwrap();
    kube.compact();
    let mut stream = cms
        .watch(&WatchParams::default(), &a.resource_version().unwrap())
        .await
        .unwrap()
        .boxed();
    assert_eq!(next_events(&mut stream, 1).await, ["ERROR 410 Expired"]);
    // From the current version it works.
    let now = kube.resource_version().to_string();
    let mut stream = cms
        .watch(&WatchParams::default(), &now)
        .await
        .unwrap()
        .boxed();
    cms.delete("b", &DeleteParams::default()).await.unwrap();
    assert_eq!(next_events(&mut stream, 1).await, ["DELETED b"]);
}

#[tokio::test]
async fn a_watch_ends_at_its_timeout_with_bookmarks_on_the_way() {
    let (_kube, _client, cms) = setup().await;
    let wp = WatchParams::default().timeout(3);
    let started = std::time::Instant::now();
    let events: Vec<_> = tokio::time::timeout(
        DEADLINE,
        cms.watch(&wp, "1").await.unwrap().collect::<Vec<_>>(),
    )
    .await
    .expect("the watch ends by itself");
    assert!(started.elapsed() >= Duration::from_secs(3));
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Ok(WatchEvent::Bookmark(_)))),
        "a bookmark every 2 seconds"
    );
}

#[tokio::test]
async fn await_condition_resolves_when_the_status_is_patched() {
    let (kube, client, _cms) = setup().await;
    let jobs = Api::<Job>::namespaced(client.clone(), "ns");
    let job: Job = serde_json::from_value(
        json!({"metadata": {"name": "j"}, "spec": {"template": {"spec": {
        "restartPolicy": "Never", "containers": [{"name": "c", "image": "i"}]}}}}),
    )
    .unwrap();
    jobs.create(&PostParams::default(), &job).await.unwrap();
    let waiting = tokio::spawn(await_condition(
        jobs.clone(),
        "j",
        conditions::is_job_completed(),
    ));
    // The waiter is watching (not polling) before the job completes.
    crate::eventually("the waiter to watch", DEADLINE, || {
        let kube = kube.clone();
        async move { kube.requests().iter().any(|r| r.is_watch()).then_some(()) }
    })
    .await;
    assert!(!waiting.is_finished());
    kube.patch_status(
        "/apis/batch/v1/namespaces/ns/jobs/j",
        json!({"succeeded": 1, "conditions": [{"type": "Complete", "status": "True"}]}),
    );
    let done = tokio::time::timeout(DEADLINE, waiting)
        .await
        .expect("the condition holds")
        .unwrap()
        .unwrap();
    assert_eq!(done.unwrap().status.unwrap().succeeded, Some(1));
    let gets = kube
        .requests()
        .iter()
        .filter(|r| r.method == "GET" && !r.is_watch())
        .count();
    assert!(gets <= 2, "one list, no polling: {gets} GETs");
}

#[tokio::test]
async fn the_runtime_watcher_lists_then_watches() {
    let (kube, _client, cms) = setup().await;
    cms.create(&PostParams::default(), &config_map("before", json!({})))
        .await
        .unwrap();
    let mut events = watcher(cms.clone(), watcher::Config::default()).boxed();
    let mut seen = Vec::new();
    let mut next = async || {
        let ev = tokio::time::timeout(DEADLINE, events.try_next())
            .await
            .expect("an event")
            .unwrap()
            .unwrap();
        match ev {
            watcher::Event::Init => "init".to_owned(),
            watcher::Event::InitApply(o) => format!("init {}", o.name_any()),
            watcher::Event::InitDone => "init done".to_owned(),
            watcher::Event::Apply(o) => format!("apply {}", o.name_any()),
            watcher::Event::Delete(o) => format!("delete {}", o.name_any()),
        }
    };
    for _ in 0..3 {
        seen.push(next().await);
    }
    assert_eq!(seen, ["init", "init before", "init done"]);
    // Changes made by a controller through the control API are seen too.
    kube.put_object(
        "/api/v1/namespaces/ns/configmaps/after",
        json!({"metadata": {"name": "after"}}),
    );
    cms.delete("before", &DeleteParams::default())
        .await
        .unwrap();
    assert_eq!(next().await, "apply after");
    assert_eq!(next().await, "delete before");
}

#[tokio::test]
async fn a_delayed_rollout_is_awaited_through_the_watch() {
    let (kube, client, _cms) = setup().await;
    kube.roll_out_deployments_after(
        "app=web",
        Duration::from_millis(300),
        super::Outcome::succeeded(""),
    );
    let deps = Api::<k8s_openapi::api::apps::v1::Deployment>::namespaced(client.clone(), "ns");
    let d = json!({
        "apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web", "labels": {"app": "web"}},
        "spec": {"selector": {"matchLabels": {"app": "web"}}, "template": {"metadata": {"labels": {"app": "web"}},
            "spec": {"containers": [{"name": "c", "image": "i"}]}}},
    });
    deps.patch(
        "web",
        &PatchParams::apply("sless").force(),
        &Patch::Apply(&d),
    )
    .await
    .unwrap();
    assert!(
        deps.get("web").await.unwrap().status.is_none(),
        "not rolled out yet"
    );
    let done = tokio::time::timeout(
        DEADLINE,
        await_condition(deps.clone(), "web", conditions::is_deployment_completed()),
    )
    .await
    .expect("the rollout completes")
    .unwrap()
    .unwrap();
    assert_eq!(done.status.unwrap().available_replicas, Some(1));
}
