//! F10: a session left idle in a transaction that holds a transaction id
//! for 60 s, under queue load (no-op items enqueued and drained all along)
//! and a stream of appended events. The held id stops vacuum from removing
//! the queue's dead rows and holds back the projector's watermark: the
//! projector lags for the whole minute, then catches up and has lost
//! nothing.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sless_domain::{
    FunctionEvent, FunctionKey, FunctionName, FunctionSpec, Namespace, Runtime, SourceVersion,
};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::queue;
use sless_testkit::{TestDb, TestS3, scratch_dir};
use sless_workers::local::{LocalDriver, LocalDriverConfig};
use sless_workers::worker::StartObserver;
use sless_workers::{Reconciler, Worker, WorkerConfig};
use sqlx::{Connection, Row};
use tokio::sync::watch;

use crate::harness::{checkpoint, projector_lag, read_model_matches_log, report, secs, within};

const BEFORE: Duration = Duration::from_secs(8);
const HOLD: Duration = Duration::from_secs(60);
const AFTER: Duration = Duration::from_secs(8);
/// The enqueuer keeps about this many items waiting, so the workers never idle.
const BACKLOG: i64 = 500;
const STREAMS: usize = 20;
/// One append every 5 ms.
const APPEND_EVERY: Duration = Duration::from_millis(5);

/// What one phase of the run measured.
struct Phase {
    jobs_per_s: f64,
    /// Dead rows of `work_items` as the statistics show them at the end.
    dead: i64,
    /// Dead rows a VACUUM at the end of the phase could not remove.
    unremovable: i64,
    /// Size of `work_items` with its indexes, in kB.
    size_kb: i64,
}

async fn dead_rows(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select n_dead_tup from pg_stat_user_tables where relname = 'work_items'")
        .fetch_one(pool)
        .await
        .unwrap()
}

/// Measures a phase that began with `started` items started at `since`.
async fn measure(pool: &PgPool, started: &AtomicU64, from: u64, since: Instant) -> Phase {
    let jobs = started.load(Ordering::Relaxed) - from;
    let jobs_per_s = jobs as f64 / since.elapsed().as_secs_f64();
    let dead = dead_rows(pool).await;
    sqlx::query("vacuum work_items")
        .execute(pool)
        .await
        .unwrap();
    let unremovable = dead_rows(pool).await;
    let size_kb = sqlx::query_scalar("select pg_total_relation_size('work_items') / 1024")
        .fetch_one(pool)
        .await
        .unwrap();
    Phase {
        jobs_per_s,
        dead,
        unremovable,
        size_kb,
    }
}

/// Events up to `position` that the projector has not applied yet.
async fn unapplied_up_to(pool: &PgPool, position: i64) -> i64 {
    let at = checkpoint(pool).await;
    sqlx::query_scalar(
        "select count(*) from events where position <= $3 and (xid, position) > ($1, $2)",
    )
    .bind(at.xid)
    .bind(at.position)
    .bind(position)
    .fetch_one(pool)
    .await
    .unwrap()
}

fn spec() -> FunctionSpec {
    FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        scaling: Default::default(),
    }
}

fn uploaded(version: u32) -> FunctionEvent {
    let sha = format!("{version:064x}");
    FunctionEvent::FunctionUploaded(SourceVersion {
        version,
        sha256: sha.clone(),
        size: 1,
        files: 1,
        zip_key: sless_store::blobs::zip_key(&sha),
        context_sha256: sha.clone(),
        context_key: sless_store::blobs::context_key(&sha),
        runtime: None,
    })
}

/// Appends one event every `APPEND_EVERY`, round-robin over the streams,
/// until `stop`; returns how many appends committed.
async fn append_events(pool: PgPool, keys: Vec<FunctionKey>, stop: Arc<AtomicBool>) -> usize {
    let mut at = vec![0u64; keys.len()];
    let mut tick = tokio::time::interval(APPEND_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let mut committed = 0;
    while !stop.load(Ordering::Relaxed) {
        tick.tick().await;
        let i = committed % keys.len();
        let event = match at[i] {
            0 => FunctionEvent::FunctionCreated { spec: spec() },
            n => uploaded(n as u32),
        };
        let metadata = Metadata {
            actor: "f10".into(),
            ..Default::default()
        };
        let new = NewEvent::function(&keys[i], &event, metadata);
        let mut tx = pool.begin().await.unwrap();
        eventlog::append(&mut tx, &keys[i].stream(), at[i], &[new])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        at[i] += 1;
        committed += 1;
    }
    committed
}

/// Keeps about `BACKLOG` no-op items waiting until `stop`; returns how many
/// it enqueued.
async fn enqueue_noops(pool: PgPool, stop: Arc<AtomicBool>) -> u64 {
    let mut enqueued = 0u64;
    while !stop.load(Ordering::Relaxed) {
        if queue::counts(&pool).await.unwrap().0 >= BACKLOG {
            // The backlog is full: the pace of the load, not a wait for a result.
            tokio::time::sleep(Duration::from_millis(2)).await;
            continue;
        }
        let mut tx = pool.begin().await.unwrap();
        for _ in 0..200 {
            let key = format!("noop-{enqueued}");
            queue::enqueue(&mut *tx, queue::NOOP, &key, &serde_json::json!({}))
                .await
                .unwrap();
            enqueued += 1;
        }
        tx.commit().await.unwrap();
    }
    enqueued
}

fn triple(
    a: impl std::fmt::Display,
    b: impl std::fmt::Display,
    c: impl std::fmt::Display,
) -> String {
    format!("{a}/{b}/{c}")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f10_a_held_xid_bloats_the_queue_and_stalls_the_projector_but_loses_nothing() {
    let _alone = crate::exclusive().await;
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let pool = db.pool.clone();
    // No-op items never reach the driver; the worker needs one all the same.
    let driver =
        Arc::new(LocalDriver::new(LocalDriverConfig::new(scratch_dir("f10-driver"))).unwrap());
    let started = Arc::new(AtomicU64::new(0));
    let seen = Arc::new(Mutex::new(HashSet::new()));
    let observer: StartObserver = {
        let (started, seen) = (started.clone(), seen.clone());
        Arc::new(move |item| {
            started.fetch_add(1, Ordering::Relaxed);
            seen.lock().unwrap().insert(item.id);
        })
    };
    let (stop_workers, workers_stopped) = watch::channel(false);
    let mut workers = Vec::new();
    for id in ["f10-a", "f10-b"] {
        let worker = Worker {
            pool: pool.clone(),
            reconciler: Reconciler {
                pool: pool.clone(),
                blobs: s3.blobs(),
                driver: driver.clone(),
            },
            config: WorkerConfig {
                id: id.into(),
                concurrency: 8,
                lease: Duration::from_secs(30),
                poll: Duration::from_millis(100),
                sweep: Duration::from_secs(5),
                ..WorkerConfig::default()
            },
            on_start: Some(observer.clone()),
        };
        workers.push(tokio::spawn(worker.run(workers_stopped.clone())));
    }
    let projector = tokio::spawn(sless_projector::run(
        pool.clone(),
        Duration::from_millis(200),
        workers_stopped.clone(),
    ));
    let ns = Namespace::parse("f10").unwrap();
    let keys: Vec<FunctionKey> = (0..STREAMS)
        .map(|i| FunctionKey::new(ns.clone(), FunctionName::parse(&format!("s-{i}")).unwrap()))
        .collect();
    let stop_load = Arc::new(AtomicBool::new(false));
    let enqueuer = tokio::spawn(enqueue_noops(pool.clone(), stop_load.clone()));
    let appender = tokio::spawn(append_events(pool.clone(), keys.clone(), stop_load.clone()));

    // Before: the load alone.
    let since = Instant::now();
    tokio::time::sleep(BEFORE).await;
    let before = measure(&pool, &started, 0, since).await;

    // During: a session (not one of sless's, which time out idle
    // transactions) takes a snapshot and a transaction id, and idles.
    let mut held = sqlx::PgConnection::connect(&db.url).await.unwrap();
    // The embedded cluster ends sessions idle in a transaction for 60 s
    // server-wide; any client may turn that off for its own session, as
    // this one does, so that the hold lasts the whole minute.
    sqlx::query("set idle_in_transaction_session_timeout = 0")
        .execute(&mut held)
        .await
        .unwrap();
    sqlx::query("begin isolation level repeatable read")
        .execute(&mut held)
        .await
        .unwrap();
    sqlx::query("select count(*) from work_items")
        .execute(&mut held)
        .await
        .unwrap();
    let held_xid: i64 = sqlx::query_scalar("select pg_current_xact_id()::text::bigint")
        .fetch_one(&mut held)
        .await
        .unwrap();
    let from = started.load(Ordering::Relaxed);
    let since = Instant::now();
    let mut max_lag = 0;
    let mut max_lag_secs = 0f64;
    let mut projected_past_hold = false;
    while since.elapsed() < HOLD {
        // Holding the transaction open is the fault; look at the projector once a second.
        tokio::time::sleep(Duration::from_secs(1)).await;
        let (events, age) = projector_lag(&pool).await;
        max_lag = max_lag.max(events);
        max_lag_secs = max_lag_secs.max(age);
        projected_past_hold |= checkpoint(&pool).await.xid > held_xid;
    }
    let during = measure(&pool, &started, from, since).await;
    let appended_by_release: i64 = sqlx::query_scalar("select max(position) from events")
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query("rollback").execute(&mut held).await.unwrap();
    held.close().await.unwrap();
    let caught_up_in = within(Duration::from_secs(30), || async {
        unapplied_up_to(&pool, appended_by_release).await == 0
    })
    .await;

    // After: the load alone again.
    let from = started.load(Ordering::Relaxed);
    let since = Instant::now();
    tokio::time::sleep(AFTER).await;
    let after = measure(&pool, &started, from, since).await;

    stop_load.store(true, Ordering::Relaxed);
    let enqueued = enqueuer.await.unwrap();
    let appended = appender.await.unwrap();
    let drained = within(Duration::from_secs(60), || async {
        queue::counts(&pool).await.unwrap() == (0, 0)
    })
    .await;
    let _ = stop_workers.send(true);
    for w in workers {
        w.await.unwrap().unwrap();
    }
    projector.await.unwrap().unwrap();
    sless_projector::catch_up(&pool).await.unwrap();
    driver.shutdown().await;

    // Nothing lost: every enqueued item ran, every appended event is in the
    // log and applied to the read model.
    let ran = seen.lock().unwrap().len() as u64;
    let starts = started.load(Ordering::Relaxed);
    let in_log: i64 = sqlx::query_scalar("select count(*) from events where namespace = 'f10'")
        .fetch_one(&pool)
        .await
        .unwrap();
    let applied: i64 = sqlx::query_scalar(
        "select coalesce(sum(stream_version), 0)::bigint from functions where namespace = 'f10'",
    )
    .fetch_one(&pool)
    .await
    .unwrap();
    let last =
        sqlx::query("select xid, position from events order by xid desc, position desc limit 1")
            .fetch_one(&pool)
            .await
            .unwrap();
    let at = checkpoint(&pool).await;
    let checkpoint_at_end = (at.xid, at.position) == (last.get("xid"), last.get("position"));
    let matches_log = read_model_matches_log(&pool, &keys).await;
    let lost = enqueued.saturating_sub(ran)
        + (appended as u64).saturating_sub(in_log as u64)
        + (in_log as u64).saturating_sub(applied as u64);
    let duplicated = (starts - ran) + (in_log as u64).saturating_sub(appended as u64);
    report(
        "F10",
        &[
            (
                "load",
                format!(
                    "noop_queue(2_workers_x8,backlog_{BACKLOG})+{}_appends/s_over_{STREAMS}_streams+projector",
                    1000 / APPEND_EVERY.as_millis()
                ),
            ),
            (
                "faults",
                format!("xid_held_idle_in_transaction_{}", secs(HOLD)),
            ),
            ("acked", format!("{}", enqueued + appended as u64)),
            ("lost", lost.to_string()),
            ("duplicated", duplicated.to_string()),
            (
                "jobs_per_s(before/during/after)",
                triple(
                    before.jobs_per_s.round(),
                    during.jobs_per_s.round(),
                    after.jobs_per_s.round(),
                ),
            ),
            ("n_dead_tup", triple(before.dead, during.dead, after.dead)),
            (
                "unremovable_by_vacuum",
                triple(before.unremovable, during.unremovable, after.unremovable),
            ),
            (
                "work_items_kB",
                triple(before.size_kb, during.size_kb, after.size_kb),
            ),
            ("projector_max_lag_events", max_lag.to_string()),
            ("projector_max_lag", format!("{max_lag_secs:.1}s")),
            ("caught_up_in", caught_up_in.map_or("never".into(), secs)),
        ],
    );
    assert_eq!(lost, 0);
    assert_eq!(duplicated, 0);
    assert!(drained.is_some(), "the queue did not drain");
    assert!(
        caught_up_in.is_some(),
        "the projector did not catch up after the release"
    );
    assert!(
        !projected_past_hold,
        "the projector applied an event the held transaction could precede"
    );
    assert!(
        max_lag > 0,
        "the projector never lagged: the hold did not hold"
    );
    assert!(
        during.unremovable > before.unremovable && during.unremovable > after.unremovable,
        "the held snapshot did not keep dead rows from vacuum"
    );
    assert!(
        checkpoint_at_end,
        "the projector's checkpoint is not at the last event"
    );
    assert!(
        matches_log,
        "the read models do not match a fold of the log"
    );
}
