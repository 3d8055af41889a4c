//! The crashes of function pods, into the log once: however many workers
//! watch a pod, and however often a watch lists it again.

use chrono::Utc;
use k8s_openapi::api::core::v1::Pod;
use serde_json::json;
use sless_testkit::TestDb;
use sless_workers::kube::PodCrashRecorder;

/// A pod of `demo` whose function container was OOM-killed at `finished`
/// and restarted.
fn oom_killed_pod(finished: chrono::DateTime<Utc>) -> Pod {
    serde_json::from_value(json!({
        "metadata": {
            "name": "demo-5c9f-abcde",
            "namespace": "sless-0123456789abcdef",
            "labels": {
                "sless.dev/component": "function",
                "sless.dev/function": "demo",
                "sless.dev/version": "1",
            },
        },
        "spec": {"containers": [{
            "name": "function",
            "resources": {"limits": {"memory": "128Mi"}},
        }]},
        "status": {"containerStatuses": [{
            "name": "function", "image": "x", "imageID": "", "ready": false,
            "restartCount": 1,
            "lastState": {"terminated": {
                "exitCode": 137, "reason": "OOMKilled",
                "finishedAt": finished.to_rfc3339_opts(chrono::SecondsFormat::Secs, true),
            }},
        }]},
    }))
    .unwrap()
}

/// Two workers' recorders; neither talks to a cluster to record.
fn recorders(db: &TestDb) -> [PodCrashRecorder; 2] {
    let client = || {
        let config = kube::Config::new("http://127.0.0.1:1".parse().unwrap());
        kube::Client::try_from(config).unwrap()
    };
    [
        PodCrashRecorder::new(db.pool.clone(), client()),
        PodCrashRecorder::new(db.pool.clone(), client()),
    ]
}

async fn crashes_recorded(db: &TestDb) -> i64 {
    sqlx::query_scalar(
        "select count(*) from events where stream = 'function/sless-0123456789abcdef/demo' and type = 'FunctionCrashed'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pods_crash_is_recorded_once_however_many_workers_see_it() {
    let db = TestDb::new().await;
    let [a, b] = recorders(&db);
    let pod = oom_killed_pod(Utc::now() - chrono::TimeDelta::seconds(1));
    let (first, second) = tokio::join!(a.record(&pod), b.record(&pod));
    let appended = [first.unwrap(), second.unwrap()];
    assert_eq!(appended.iter().filter(|a| **a).count(), 1, "{appended:?}");
    // The watch starts again and lists the pod: nothing new.
    assert!(!a.record(&pod).await.unwrap());
    assert_eq!(crashes_recorded(&db).await, 1);

    // Its next crash is news.
    let again = oom_killed_pod(Utc::now() + chrono::TimeDelta::seconds(5));
    assert!(b.record(&again).await.unwrap());
    assert_eq!(crashes_recorded(&db).await, 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_crash_from_before_the_watch_is_history_and_not_recorded() {
    let db = TestDb::new().await;
    let [a, _] = recorders(&db);
    let pod = oom_killed_pod(Utc::now() - chrono::TimeDelta::hours(1));
    assert!(!a.record(&pod).await.unwrap());
    assert_eq!(crashes_recorded(&db).await, 0);
}
