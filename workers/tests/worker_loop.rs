//! The running worker loop (`Worker::run`): batched claims and
//! acknowledgements, leases taken from a worker, and shutdown.

mod support;

use std::time::{Duration, Instant};

use serde_json::json;
use sless_domain::FunctionEvent;
use sless_store::queue;
use sless_testkit::eventually;
use support::{Harness, handler};
use tokio::sync::watch;

/// A handler whose import takes `secs`, so its deploy is slow.
fn slow_handler(secs: u32) -> String {
    format!("import time\ntime.sleep({secs})\n\n{}", handler("slow"))
}

async fn item_row(h: &Harness, key: &str) -> Option<(String, i32, Option<String>)> {
    sqlx::query_as("select state, attempts, last_error from work_items where key = $1")
        .bind(key)
        .fetch_optional(&h.db.pool)
        .await
        .unwrap()
}

async fn wait_running(h: &Harness, key: &str, deadline: Duration) {
    eventually(&format!("{key} to be running"), deadline, || async {
        item_row(h, key)
            .await
            .filter(|(state, ..)| state == "running")
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_drains_many_items_with_batched_acknowledgements() {
    let mut h = Harness::new().await;
    h.worker.config.concurrency = 4;
    h.worker.config.prefetch = 32;
    h.worker.config.ack_batch = 16;
    sqlx::query(
        "insert into work_items (kind, key) select $1, 'noop/' || g from generate_series(1, 500) g",
    )
    .bind(queue::NOOP)
    .execute(&h.db.pool)
    .await
    .unwrap();
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(h.worker.clone().run(stop));
    eventually(
        "every item to be acknowledged",
        Duration::from_secs(60),
        || async { (queue::counts(&h.db.pool).await.unwrap() == (0, 0)).then_some(()) },
    )
    .await;
    stop_tx.send(true).unwrap();
    task.await.unwrap().unwrap();
    let dead: i64 = sqlx::query_scalar("select count(*) from work_dead")
        .fetch_one(&h.db.pool)
        .await
        .unwrap();
    assert_eq!(dead, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_whose_lease_was_taken_stops_that_work_and_its_completion_changes_nothing() {
    let mut h = Harness::new().await;
    // Heartbeats every 0.5 s.
    h.worker.config.lease = Duration::from_millis(1500);
    h.worker.config.concurrency = 1;
    let key = Harness::key("taken");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &slow_handler(30))], true)
        .await;
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(h.worker.clone().run(stop));
    let qk = key.queue_key();
    // Built and recorded: the deploy now waits on the slow import, talking
    // to no database, so only the heartbeat can tell it the item is gone.
    eventually(
        "the build to be recorded",
        Duration::from_secs(60),
        || async {
            h.events(&key)
                .await
                .iter()
                .any(|e| matches!(e, FunctionEvent::BuildSucceeded { .. }))
                .then_some(())
        },
    )
    .await;
    // Another worker takes it, as after an expired lease and a sweep.
    sqlx::query(
        "update work_items set lease_owner = 'thief', attempts = attempts + 1, lease_until = now() + interval '1 hour' where key = $1",
    )
    .bind(&qk)
    .execute(&h.db.pool)
    .await
    .unwrap();
    // With one slot and no prefetch, the worker can only take this item
    // once it has given up the slow one, which it does at its next
    // heartbeat (the import alone would take 30 s).
    queue::enqueue(&h.db.pool, queue::NOOP, "noop/next", &json!({}))
        .await
        .unwrap();
    eventually(
        "the worker to give the slow item up and run the next",
        Duration::from_secs(10),
        || async { item_row(&h, "noop/next").await.is_none().then_some(()) },
    )
    .await;
    stop_tx.send(true).unwrap();
    task.await.unwrap().unwrap();
    // The thief's item is untouched: still running, its attempt, its owner.
    let (state, attempts, _) = item_row(&h, &qk).await.unwrap();
    assert_eq!((state.as_str(), attempts), ("running", 2));
    let owner: String = sqlx::query_scalar("select lease_owner from work_items where key = $1")
        .bind(&qk)
        .fetch_one(&h.db.pool)
        .await
        .unwrap();
    assert_eq!(owner, "thief");
    // A late acknowledgement under the old attempt is refused.
    let id: i64 = sqlx::query_scalar("select id from work_items where key = $1")
        .bind(&qk)
        .fetch_one(&h.db.pool)
        .await
        .unwrap();
    let done = queue::complete_many(&h.db.pool, &h.worker.config.id, &[(id, 1)])
        .await
        .unwrap();
    assert!(done.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopping_worker_hands_back_what_it_holds_and_leaves_nothing_to_the_sweep() {
    let mut h = Harness::new().await;
    h.worker.config.concurrency = 1;
    h.worker.config.prefetch = 4;
    h.worker.config.shutdown_grace = Duration::from_millis(500);
    let key = Harness::key("slow");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &slow_handler(30))], true)
        .await;
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(h.worker.clone().run(stop));
    let qk = key.queue_key();
    wait_running(&h, &qk, Duration::from_secs(30)).await;
    // Claimed while the only slot is busy: held in the worker, never started.
    queue::enqueue(&h.db.pool, queue::NOOP, "noop/waiting", &json!({}))
        .await
        .unwrap();
    wait_running(&h, "noop/waiting", Duration::from_secs(10)).await;

    let asked = Instant::now();
    stop_tx.send(true).unwrap();
    task.await.unwrap().unwrap();
    let took = asked.elapsed();
    assert!(took < Duration::from_secs(5), "stopping took {took:?}");

    // Both are pending again and due now; the started one keeps its attempt
    // and says why it stopped, the unstarted one gets its attempt back.
    let (state, attempts, error) = item_row(&h, &qk).await.unwrap();
    assert_eq!((state.as_str(), attempts), ("pending", 1));
    assert!(error.unwrap().contains("shutting down"));
    let (state, attempts, _) = item_row(&h, "noop/waiting").await.unwrap();
    assert_eq!((state.as_str(), attempts), ("pending", 0));
    assert_eq!(queue::release_expired(&h.db.pool).await.unwrap(), 0);
    let due: bool = sqlx::query_scalar("select bool_and(run_at <= now()) from work_items")
        .fetch_one(&h.db.pool)
        .await
        .unwrap();
    assert!(due);
}
