//! Where the local driver's functions run, with two workers on one
//! database, each with its own local driver, driven step by step: a
//! function runs on the worker the log names, never a second copy beside
//! it while that worker is alive; once it is gone another worker deploys
//! it, and a worker stops a copy the log no longer places on it. (That the
//! sweeps find a gone worker's functions through the read model, and that
//! a worker that leaves has them placed at once, the fault suite shows with
//! real worker processes: F1 and F9.)

mod support;

use std::sync::Arc;
use std::time::Duration;

use sless_domain::Phase;
use sless_store::queue;
use sless_testkit::scratch_dir;
use sless_workers::driver::Node;
use sless_workers::local::{LocalDriver, LocalDriverConfig};
use sless_workers::{Driver, Reconciler, Worker, placement};
use support::{Harness, handler};

/// A local driver that says it runs on worker `id`.
fn driver_of(id: &str) -> Arc<LocalDriver> {
    let mut cfg = LocalDriverConfig::new(scratch_dir(id));
    cfg.env = std::env::vars().collect();
    cfg.placement = Some(Node {
        id: id.to_owned(),
        dead_after: Duration::from_secs(30),
    });
    Arc::new(LocalDriver::new(cfg).unwrap())
}

/// A second worker on the harness's database and S3, with its own driver.
fn second_worker(h: &Harness, driver: Arc<LocalDriver>) -> Worker<LocalDriver> {
    Worker {
        pool: h.db.pool.clone(),
        reconciler: Reconciler {
            pool: h.db.pool.clone(),
            blobs: h.blobs.clone(),
            driver,
        },
        config: h.worker.config.clone(),
        on_start: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_function_runs_where_the_log_says_and_moves_when_its_worker_is_gone() {
    let s3 = sless_testkit::TestS3::new().await;
    let a = driver_of("worker-a");
    let h = Harness::with_driver(s3, a.clone()).await;
    let b = driver_of("worker-b");
    let wb = second_worker(&h, b.clone());
    let pool = h.db.pool.clone();
    sless_store::workers::beat(&pool, "worker-a").await.unwrap();
    sless_store::workers::beat(&pool, "worker-b").await.unwrap();

    let key = Harness::key("placed");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("one"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let s = h.state(&key).await;
    assert_eq!(s.phase, Phase::Ready, "{:?}", s.last_error);
    assert_eq!(s.deployed_node.as_deref(), Some("worker-a"));
    assert!(a.status(&key).await.is_some());

    // Another worker reconciling it while worker-a is alive starts nothing.
    queue::enqueue_reconcile(&pool, &key.queue_key())
        .await
        .unwrap();
    let before = h.events(&key).await.len();
    assert_eq!(wb.run_once(10).await.unwrap(), 1);
    assert!(b.status(&key).await.is_none(), "a second copy on worker-b");
    assert_eq!(h.events(&key).await.len(), before, "nothing was recorded");

    // worker-a goes silent: worker-b deploys it when asked (the sweep asks).
    sqlx::query("update workers set seen_at = now() - interval '1 hour' where id = 'worker-a'")
        .execute(&pool)
        .await
        .unwrap();
    queue::enqueue_reconcile(&pool, &key.queue_key())
        .await
        .unwrap();
    assert_eq!(wb.run_once(10).await.unwrap(), 1);
    let s = h.state(&key).await;
    assert_eq!(s.deployed_node.as_deref(), Some("worker-b"));
    let moved = b.status(&key).await.expect("it runs on worker-b now");
    assert_eq!(s.endpoint.as_deref(), Some(moved.endpoint.as_str()));
    let answer: serde_json::Value = reqwest::get(format!("{}/", moved.endpoint))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(answer["reply"], "one");

    // worker-a was only slow: its sweep stops the copy the log no longer
    // places on it (once the copy has settled).
    assert!(a.status(&key).await.is_some());
    sless_store::workers::beat(&pool, "worker-a").await.unwrap();
    sless_testkit::eventually(
        "worker-a's copy to be stopped",
        Duration::from_secs(60),
        || async {
            placement::sweep(&pool, &*a).await.unwrap();
            a.status(&key).await.is_none().then_some(())
        },
    )
    .await;
    assert!(b.status(&key).await.is_some(), "worker-b's copy stays");
    a.shutdown().await;
    b.shutdown().await;
}
