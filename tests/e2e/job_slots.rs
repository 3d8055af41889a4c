//! Jobs have worker slots of their own: four long jobs on a worker with
//! four job slots and four other slots leave an upload's build and deploy
//! free to run, and a fifth job waits in the queue, unclaimed, rather than
//! under this worker's lease.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use sless_testkit::eventually;
use sless_workers::WorkerConfig;

use crate::platform::Platform;
use crate::support::Beacon;
use crate::zip_files;

/// A job in mode `hold` says it started, then runs until it is released
/// (two minutes at most): through the test's beacon, since in its sandbox
/// it sees none of the test's files.
const HOLDER: &str = "\
import time, urllib.request
def handle(event):
    job = event['json']
    if job.get('mode') != 'hold':
        return 'quick'
    ask = lambda path: urllib.request.urlopen(job['beacon'] + path).read()
    ask('/hit/' + job['name'])
    deadline = time.time() + 120
    while time.time() < deadline:
        if ask('/released') == b'yes':
            return 'released'
        time.sleep(0.05)
    return 'gave up'
";

async fn status(p: &Platform, job: &str) -> Value {
    let (code, doc) = p.call(Method::GET, &format!("/jobs/{job}"), None).await;
    assert_eq!(code, 200, "{doc}");
    doc
}

async fn work_item_state(p: &Platform, job: &str) -> Option<String> {
    sqlx::query_scalar("select state from work_items where key like 'job/%/' || $1")
        .bind(job)
        .fetch_optional(&p.db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_turns_ready_while_four_long_jobs_hold_every_job_slot() {
    let config = WorkerConfig {
        concurrency: 4,
        job_concurrency: 4,
        ..WorkerConfig::default()
    };
    // Its functions call the test's beacon on loopback.
    let p = Platform::start_sharing_loopback(50, config).await;
    let beacon = Beacon::start().await;
    let (code, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(
                json!({"name": "holder", "runtime": "python3.11", "entrypoint": "handler.handle"}),
            ),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = p
        .upload("holder", zip_files(&[("handler.py", HOLDER)]))
        .await;
    assert_eq!(code, 202, "{body}");
    p.client.wait_ready("holder", Duration::from_secs(60)).await;

    let hold = |name: &str| {
        json!({
            "name": name, "function": "holder", "timeout_sec": 300,
            "input": {"mode": "hold", "name": name, "beacon": beacon.url},
        })
    };
    let holders = ["hold-1", "hold-2", "hold-3", "hold-4"];
    for name in holders {
        let (code, body) = p.call(Method::POST, "/jobs", Some(hold(name))).await;
        assert_eq!(code, 202, "{body}");
    }
    eventually(
        "all four jobs running their handler",
        Duration::from_secs(60),
        || async {
            let hits = beacon.hits();
            holders
                .iter()
                .all(|n| hits.iter().any(|h| h == n))
                .then_some(())
        },
    )
    .await;
    // A fifth job finds no job slot: it is left in the queue for any worker.
    let (code, body) = p.call(Method::POST, "/jobs", Some(hold("hold-5"))).await;
    assert_eq!(code, 202, "{body}");

    // An upload meanwhile is built and deployed on the other slots.
    let (code, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({"name": "hello", "runtime": "python3.11", "entrypoint": "handler.handle"})),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let (code, body) = p
        .upload(
            "hello",
            zip_files(&[("handler.py", "def handle(event):\n    return 'hello'\n")]),
        )
        .await;
    assert_eq!(code, 202, "{body}");
    p.client.wait_ready("hello", Duration::from_secs(60)).await;
    assert_eq!(p.invoke("hello").await, "hello");

    // ... while all four jobs still run, and the fifth was never claimed.
    for name in holders {
        let doc = status(&p, name).await;
        assert_eq!(doc["status"], "Running", "{name}: {doc}");
    }
    assert_eq!(status(&p, "hold-5").await["status"], "Pending");
    assert_eq!(
        work_item_state(&p, "hold-5").await.as_deref(),
        Some("pending"),
        "a job with no free job slot stays unclaimed"
    );

    beacon.release();
    for name in holders.iter().chain(&["hold-5"]) {
        let doc = eventually(
            &format!("{name} to finish"),
            Duration::from_secs(60),
            || async {
                let doc = status(&p, name).await;
                assert_ne!(doc["status"], "Failed", "{doc}");
                (doc["status"] == "Succeeded").then_some(doc)
            },
        )
        .await;
        assert!(
            doc["stdout"]["text"].as_str().unwrap().contains("released"),
            "{doc}"
        );
    }
    assert!(beacon.hits().iter().any(|h| h == "hold-5"));
    p.driver.shutdown().await;
}
