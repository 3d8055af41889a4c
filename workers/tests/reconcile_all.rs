//! `sless reconcile` after an outage: a reconcile enqueued for every
//! function the log knows makes what runs converge with the log, for every
//! way they drifted apart while work was lost: a function the log says is
//! deleted still runs, a process that should run is missing, and an older
//! version runs than the log says.

mod support;

use sless_domain::{FunctionEvent, Phase};
use sless_store::queue;
use sless_workers::Driver;
use support::{Harness, handler, pending};

async fn reply(endpoint: &str) -> String {
    let body: serde_json::Value = reqwest::get(format!("{endpoint}/x"))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    body["reply"].as_str().unwrap().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn reconcile_all_removes_the_deleted_starts_the_missing_and_replaces_stale_versions() {
    let h = Harness::new().await;
    let gone = Harness::key("gone");
    let missing = Harness::key("missing");
    let stale = Harness::key("stale");
    for key in [&gone, &missing, &stale] {
        h.create(key).await;
        h.upload(key, 1, &[("handler.py", &handler("v1"))], true)
            .await;
    }
    h.worker.run_once(10).await.unwrap();
    for key in [&gone, &missing, &stale] {
        let state = h.state(key).await;
        assert_eq!(
            (state.phase, state.deployed_version),
            (Phase::Ready, Some(1)),
            "{key}: {:?}",
            state.last_error
        );
    }

    // The outage: events land but their work is lost (no reconcile is
    // enqueued), and a process dies with nobody to notice.
    h.append(&gone, &[FunctionEvent::FunctionDeleted {}], false)
        .await;
    h.upload(&stale, 2, &[("handler.py", &handler("v2"))], true)
        .await;
    sqlx::query("delete from work_items")
        .execute(&h.db.pool)
        .await
        .unwrap();
    h.driver.remove(&missing).await.unwrap();
    assert_eq!(pending(&h.db.pool).await, 0);
    assert!(
        h.driver.status(&gone).await.is_some(),
        "deleted, still running"
    );
    assert_eq!(
        h.driver.status(&missing).await,
        None,
        "should run, does not"
    );
    assert_eq!(
        h.driver.status(&stale).await.map(|d| d.version),
        Some(1),
        "version 2 is current, version 1 runs"
    );

    let enqueued = queue::enqueue_reconcile_all(&h.db.pool).await.unwrap();
    assert_eq!(enqueued, 3);
    assert_eq!(h.worker.run_once(10).await.unwrap(), 3);

    assert_eq!(
        h.driver.status(&gone).await,
        None,
        "the deleted one is removed"
    );
    assert_eq!(h.state(&gone).await.phase, Phase::Deleted);

    let state = h.state(&missing).await;
    let running = h.driver.status(&missing).await.expect("started again");
    assert_eq!(running.version, 1);
    assert_eq!(state.endpoint.as_deref(), Some(running.endpoint.as_str()));
    assert_eq!(reply(&running.endpoint).await, "v1");

    let state = h.state(&stale).await;
    let running = h.driver.status(&stale).await.expect("runs");
    assert_eq!(running.version, 2, "the stale version is replaced");
    assert_eq!(
        (state.phase, state.deployed_version),
        (Phase::Ready, Some(2))
    );
    assert_eq!(reply(&running.endpoint).await, "v2");

    // Converged: another round changes nothing and records nothing.
    let events = [
        h.events(&gone).await.len(),
        h.events(&missing).await.len(),
        h.events(&stale).await.len(),
    ];
    queue::enqueue_reconcile_all(&h.db.pool).await.unwrap();
    h.worker.run_once(10).await.unwrap();
    assert_eq!(
        [
            h.events(&gone).await.len(),
            h.events(&missing).await.len(),
            h.events(&stale).await.len(),
        ],
        events
    );
    h.driver.shutdown().await;
}
