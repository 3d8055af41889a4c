//! F5: a worker is cut off from PostgreSQL (a blackhole between its pool
//! and the server) while it deploys a function, for longer than its lease.
//! The other worker takes the item once the lease expires and finishes it;
//! when the link heals, every write of the cut-off worker about that item is
//! refused: its attempt number no longer holds the lease.

use std::path::Path;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sless_api::AppState;
use sless_domain::{FunctionEvent, FunctionKey};
use sless_store::PgPool;
use sless_store::blobs::BlobStore;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::queue::{self, WorkItem};
use sless_testkit::{TestDb, TestS3, eventually, scratch_dir};
use sless_workers::local::{LocalDriver, LocalDriverConfig};
use sless_workers::{Driver, Reconciler, Worker, WorkerConfig};
use tokio::sync::watch;

use crate::harness::{self, pg_addr, pg_url_via};
use crate::processes_mentioning;
use crate::proxy::{FaultProxy, Mode};
use crate::zip_files;

const LEASE: Duration = Duration::from_secs(2);

fn worker(
    id: &str,
    pool: PgPool,
    blobs: BlobStore,
    driver: Arc<LocalDriver>,
    seen: Arc<Mutex<Vec<WorkItem>>>,
) -> Worker<LocalDriver> {
    Worker {
        pool: pool.clone(),
        reconciler: Reconciler {
            pool,
            blobs,
            driver,
        },
        config: WorkerConfig {
            id: id.to_owned(),
            concurrency: 1,
            lease: LEASE,
            sweep: Duration::from_millis(500),
            poll: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
        on_start: Some(Arc::new(move |item: &WorkItem| {
            seen.lock().unwrap().push(item.clone())
        })),
    }
}

fn driver(dir: &Path) -> Arc<LocalDriver> {
    Arc::new(LocalDriver::new(LocalDriverConfig::new(dir)).unwrap())
}

async fn count(pool: &PgPool, event_type: &str) -> i64 {
    sqlx::query_scalar("select count(*) from events where type = $1")
        .bind(event_type)
        .fetch_one(pool)
        .await
        .unwrap()
}

async fn running_owner(pool: &PgPool) -> Option<String> {
    sqlx::query_scalar("select lease_owner from work_items where state = 'running'")
        .fetch_optional(pool)
        .await
        .unwrap()
        .flatten()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f5_worker_cut_off_past_its_lease_loses_the_item_and_its_late_writes_are_refused() {
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let _projector = harness::projector(db.pool.clone());
    let (api, functions) =
        crate::serve_origins(AppState::new(db.pool.clone(), s3.blobs(), harness::auth())).await;
    let c = harness::checker(&api, "f5-user");
    assert!(c.send(c.create("slow")).await.first.is_acked());
    // Importing the module takes 5 s: the deploy is in flight when the link goes.
    let handler = "import time\ntime.sleep(5)\n\ndef handle(event):\n    return 'finished'\n";
    let upload = c
        .send(c.upload("slow", zip_files(&[("handler.py", handler)])))
        .await;
    assert!(upload.first.is_acked(), "{:?}", upload.first);

    let root = scratch_dir("f5");
    let (dir_a, dir_b) = (root.join("a"), root.join("b"));
    let (link_a, link_b) = (
        FaultProxy::start(pg_addr(&db.url)).await,
        FaultProxy::start(pg_addr(&db.url)).await,
    );
    let pool_a = sless_store::connect(&pg_url_via(&db.url, link_a.addr()), 10)
        .await
        .unwrap();
    let pool_b = sless_store::connect(&pg_url_via(&db.url, link_b.addr()), 10)
        .await
        .unwrap();
    let (driver_a, driver_b) = (driver(&dir_a), driver(&dir_b));
    let (seen_a, seen_b) = (Arc::default(), Arc::default());
    let (stop_a_tx, stop_a) = watch::channel(false);
    let (_stop_b_tx, stop_b) = watch::channel(false);
    let a = worker(
        "f5-a",
        pool_a.clone(),
        s3.blobs(),
        driver_a.clone(),
        Arc::clone(&seen_a),
    );
    let run_a = tokio::spawn(a.run(stop_a));

    eventually(
        "worker A to be deploying",
        Duration::from_secs(60),
        || async {
            let deploying = running_owner(&db.pool).await.as_deref() == Some("f5-a")
                && count(&db.pool, "BuildSucceeded").await == 1
                && !processes_mentioning(dir_a.to_str().unwrap()).is_empty();
            deploying.then_some(())
        },
    )
    .await;
    link_a.set(Mode::Blackhole);
    let cut = Instant::now();
    eprintln!("F5: worker A is cut off from PostgreSQL mid-deploy");
    let b = worker(
        "f5-b",
        pool_b,
        s3.blobs(),
        driver_b.clone(),
        Arc::clone(&seen_b),
    );
    let _run_b = tokio::spawn(b.run(stop_b));

    eventually(
        "worker B to take the item",
        Duration::from_secs(30),
        || async { (running_owner(&db.pool).await.as_deref() == Some("f5-b")).then_some(()) },
    )
    .await;
    let takeover = cut.elapsed();
    eventually(
        "worker B to deploy and complete the item",
        Duration::from_secs(60),
        || async {
            let done = count(&db.pool, "FunctionDeployed").await >= 1
                && queue::counts(&db.pool).await.unwrap() == (0, 0);
            done.then_some(())
        },
    )
    .await;
    let finished_by_b = cut.elapsed();
    let events_when_b_finished = harness::event_count(&db.pool).await;
    let zombie_processes = processes_mentioning(dir_a.to_str().unwrap()).len();

    // Heal; give A a whole lease to act on what it still believes, then stop it.
    link_a.set(Mode::Pass);
    let cut_for = cut.elapsed();
    eprintln!("F5: healed after {cut_for:?}");
    tokio::time::sleep(LEASE).await;
    let _ = stop_a_tx.send(true);
    tokio::time::timeout(Duration::from_secs(20), run_a)
        .await
        .expect("worker A stops")
        .unwrap()
        .unwrap();

    // Nothing A did after losing the lease reached the log or the queue.
    assert_eq!(harness::event_count(&db.pool).await, events_when_b_finished);
    assert_eq!(queue::counts(&db.pool).await.unwrap(), (0, 0));
    let dead: i64 = sqlx::query_scalar("select count(*) from work_dead")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(dead, 0);

    // A's late writes, each fenced by its attempt number, change nothing.
    let stale = seen_a
        .lock()
        .unwrap()
        .first()
        .cloned()
        .expect("A started the item");
    let taken = seen_b
        .lock()
        .unwrap()
        .first()
        .cloned()
        .expect("B started the item");
    assert_eq!(stale.id, taken.id);
    assert!(taken.attempt > stale.attempt, "{taken:?} after {stale:?}");
    let mut refused = 0;
    assert!(!queue::heartbeat(&pool_a, &stale, LEASE).await.unwrap());
    refused += 1;
    assert!(!queue::complete(&pool_a, &stale).await.unwrap());
    refused += 1;
    let key = FunctionKey::from_queue_key(&stale.key).unwrap();
    let mut tx = pool_a.begin().await.unwrap();
    let at = eventlog::read_stream(&mut *tx, &key.stream())
        .await
        .unwrap()
        .len() as u64;
    let late = FunctionEvent::FunctionDeployed {
        version: 1,
        endpoint: "http://127.0.0.1:9/zombie".into(),
        node: None,
        instances: vec![],
    };
    let late = NewEvent::function(&key, &late, Metadata::system("worker", stale.id));
    eventlog::append(&mut tx, &key.stream(), at, &[late])
        .await
        .unwrap();
    // The reconciler's fence: the append commits only while the lease is held.
    assert!(!queue::holds_lease(&mut tx, &stale).await.unwrap());
    drop(tx);
    refused += 1;
    assert_eq!(harness::event_count(&db.pool).await, events_when_b_finished);

    // One deploy in the log, B's; the function answers through the API.
    let deployed: Vec<(String,)> = sqlx::query_as(
        "select data->>'endpoint' from events where type = 'FunctionDeployed' and data->>'version' = '1'",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    let b_runs = driver_b.status(&key).await.expect("B runs the function");
    assert!(
        deployed.iter().all(|(e,)| *e == b_runs.endpoint),
        "{deployed:?} vs B's {}",
        b_runs.endpoint
    );
    crate::checker::wait_projected(&db.pool).await;
    let answer = reqwest::get(format!("{functions}/fn/{}/slow", c.namespace))
        .await
        .unwrap();
    assert_eq!(answer.text().await.unwrap(), "finished");

    let mut counts = c.check(&db.pool).await;
    counts.expect_once("FunctionDeployed of version 1", deployed.len() as i64);
    driver_a.shutdown().await;
    driver_b.shutdown().await;
    counts.report(
        "F5",
        "1_deploy(5s_import)_on_2_workers_lease_2s",
        &format!(
            "worker_a_to_postgres_blackhole_{}ms_mid_deploy",
            cut_for.as_millis()
        ),
        &format!(
            "takeover_ms={} finished_by_b_ms={} zombie_writes_refused={refused} zombie_function_processes={zombie_processes}",
            takeover.as_millis(),
            finished_by_b.as_millis()
        ),
    );
}
