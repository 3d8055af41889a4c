//! F8: everything delivered twice. Every work item reaches the reconciler
//! twice (its first attempt runs to the end but is never acknowledged, so
//! the queue hands it out again once the lease expires), and every event
//! reaches the projector three times (each batch applied twice, then the
//! whole log again from a checkpoint moved back to zero). The log, what
//! runs and the read models come out identical to a clean run.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

use sless_domain::{FunctionEvent, FunctionKey};
use sless_store::PgPool;
use sless_store::eventlog::Checkpoint;
use sless_store::queue;
use sless_testkit::{TestDb, scratch_dir};
use sless_workers::local::{LocalDriver, LocalDriverConfig};
use sless_workers::{Driver, Worker, WorkerConfig};
use sqlx::Row;
use tokio::task::JoinSet;

use crate::harness::{
    Acked, BROKEN, Stack, fast, queue_empty, read_model_matches_log, report, stream_events, tally,
};
use crate::processes_mentioning;

const FUNCTIONS: usize = 5;
const LEASE: Duration = Duration::from_secs(30);

/// One run: a stack and the driver its worker uses.
struct Run {
    stack: Stack,
    driver: Arc<LocalDriver>,
    acked: Acked,
}

impl Run {
    async fn start() -> Run {
        let stack = Stack::start("f8", false).await;
        let driver =
            Arc::new(LocalDriver::new(LocalDriverConfig::new(scratch_dir("f8-driver"))).unwrap());
        Run {
            stack,
            driver,
            acked: Acked::default(),
        }
    }

    fn names(&self) -> Vec<String> {
        self.acked.last().into_keys().collect()
    }

    fn keys(&self) -> Vec<FunctionKey> {
        self.names().iter().map(|n| self.stack.key(n)).collect()
    }

    /// Uploads round 1 (every function, one of them broken) or round 2 (a
    /// new version of the first three).
    async fn upload_round(&mut self, round: u32) {
        for i in 0..FUNCTIONS {
            let name = format!("fn-{i}");
            if round == 1 {
                self.stack.create(&name).await;
            } else if i >= 3 {
                continue;
            }
            let v = self
                .stack
                .upload(&name, &fast(&format!("{name}-v{round}")))
                .await;
            self.acked.upload(&name, v);
        }
        if round == 1 {
            self.stack.create("broken").await;
            let v = self.stack.upload("broken", BROKEN).await;
            self.acked.upload("broken", v);
            self.acked.failing.insert("broken".into());
        }
    }

    /// Drains the queue with the worker's own loop, each item once.
    async fn drain_once(&self) {
        let worker = Worker {
            pool: self.stack.pool().clone(),
            reconciler: self.stack.reconciler(self.driver.clone()),
            config: WorkerConfig {
                id: "f8-once".into(),
                lease: LEASE,
                ..WorkerConfig::default()
            },
            on_start: None,
        };
        sless_testkit::eventually("the queue to drain", Duration::from_secs(90), || async {
            worker.run_once(16).await.unwrap();
            queue_empty(self.stack.pool()).await.then_some(())
        })
        .await;
    }

    /// Drains the queue delivering every item twice: the first attempt
    /// runs to the end and is not acknowledged; its lease runs out, the
    /// sweep returns it and the second attempt acknowledges it. Returns the
    /// deliveries.
    async fn drain_twice(&self) -> usize {
        let pool = self.stack.pool().clone();
        let reconciler = self.stack.reconciler(self.driver.clone());
        let mut deliveries = 0;
        let deadline = Instant::now() + Duration::from_secs(90);
        loop {
            let items = queue::claim(&pool, "f8-twice", 16, LEASE).await.unwrap();
            deliveries += items.len();
            let mut set = JoinSet::new();
            for item in items {
                let (pool, reconciler) = (pool.clone(), reconciler.clone());
                set.spawn(async move {
                    reconciler.reconcile(&item).await.unwrap();
                    if item.attempt == 1 {
                        // The acknowledgement is lost: the lease runs out.
                        sqlx::query(
                            "update work_items set lease_until = now() - interval '1 second' where id = $1",
                        )
                        .bind(item.id)
                        .execute(&pool)
                        .await
                        .unwrap();
                    } else {
                        assert!(queue::complete(&pool, &item).await.unwrap());
                    }
                });
            }
            while let Some(done) = set.join_next().await {
                done.unwrap();
            }
            queue::release_expired(&pool).await.unwrap();
            if queue_empty(&pool).await {
                break;
            }
            assert!(Instant::now() < deadline, "the queue did not drain");
        }
        deliveries
    }

    /// Each function's events as (type, version): what a clean run and a
    /// doubled one must agree on (artifact paths and ports differ).
    async fn history(&self) -> BTreeMap<String, Vec<String>> {
        let mut all = BTreeMap::new();
        for name in self.names() {
            let events = stream_events(self.stack.pool(), &self.stack.key(&name)).await;
            all.insert(name, events.iter().map(summary).collect());
        }
        all
    }

    /// What runs: each function's deployed version, and the number of
    /// function processes.
    async fn runtime(&self) -> (BTreeMap<String, Option<u32>>, usize) {
        let mut versions = BTreeMap::new();
        for name in self.names() {
            let d = self.driver.status(&self.stack.key(&name)).await;
            versions.insert(name, d.map(|d| d.version));
        }
        let processes = processes_mentioning(self.driver.data_dir().to_str().unwrap()).len();
        (versions, processes)
    }
}

fn summary(e: &FunctionEvent) -> String {
    let version = match e {
        FunctionEvent::FunctionCreated { .. }
        | FunctionEvent::FunctionSpecChanged { .. }
        | FunctionEvent::FunctionDeleted {}
        | FunctionEvent::ReconcileAbandoned { .. }
        | FunctionEvent::FunctionScaledUp { .. }
        | FunctionEvent::FunctionScaled { .. }
        | FunctionEvent::VersionsPruned { .. } => None,
        FunctionEvent::FunctionUploaded(v) => Some(v.version),
        FunctionEvent::FunctionRolledBack { version } => Some(*version),
        FunctionEvent::BuildStarted { version }
        | FunctionEvent::BuildSucceeded { version, .. }
        | FunctionEvent::BuildFailed { version, .. }
        | FunctionEvent::FunctionDeployed { version, .. }
        | FunctionEvent::DeployFailed { version, .. }
        | FunctionEvent::FunctionStopped { version, .. }
        | FunctionEvent::FunctionScaledToZero { version, .. }
        | FunctionEvent::FunctionCrashed { version, .. } => Some(*version),
        FunctionEvent::DeployRolledBack { failed_version, .. } => Some(*failed_version),
    };
    match version {
        Some(v) => format!("{}@{v}", e.type_name()),
        None => e.type_name().to_owned(),
    }
}

/// How many entries of `a` are missing from `b` (as multisets).
fn missing<T: Ord + Clone>(a: &[T], b: &[T]) -> usize {
    let mut count: BTreeMap<T, i64> = BTreeMap::new();
    for x in a {
        *count.entry(x.clone()).or_default() += 1;
    }
    for x in b {
        *count.entry(x.clone()).or_default() -= 1;
    }
    count
        .values()
        .filter(|n| **n > 0)
        .map(|n| *n as usize)
        .sum()
}

async fn set_checkpoint(pool: &PgPool, at: Checkpoint) {
    sqlx::query(
        "insert into projector_checkpoints (name, xid, position) values ($1, $2, $3)
         on conflict (name) do update set xid = excluded.xid, position = excluded.position",
    )
    .bind(sless_projector::NAME)
    .bind(at.xid)
    .bind(at.position)
    .execute(pool)
    .await
    .unwrap();
}

/// Projects the log delivering every event three times: each batch is
/// applied, the checkpoint moved back and the batch applied again; then
/// the checkpoint goes back to zero and the whole log is applied once
/// more. Returns the deliveries.
async fn project_thrice(pool: &PgPool) -> usize {
    let mut deliveries = 0;
    loop {
        let before = crate::harness::checkpoint(pool).await;
        let first = sless_projector::step(pool, 4).await.unwrap();
        if first.applied == 0 {
            if first.held_back {
                // Another scenario's transaction holds the watermark back; look again.
                tokio::time::sleep(Duration::from_millis(5)).await;
                continue;
            }
            break;
        }
        set_checkpoint(pool, before).await;
        let again = sless_projector::step(pool, 4).await.unwrap();
        assert_eq!(
            again.applied, first.applied,
            "a batch delivered again differed"
        );
        deliveries += first.applied + again.applied;
    }
    set_checkpoint(pool, Checkpoint::default()).await;
    deliveries + sless_projector::catch_up(pool).await.unwrap()
}

/// Copies the log of `from` into the empty database `to`, positions and
/// transaction ids included.
async fn copy_log(from: &PgPool, to: &PgPool) -> usize {
    let rows = sqlx::query("select position, xid, stream, version, type, namespace, data, metadata, recorded_at from events order by position")
        .fetch_all(from)
        .await
        .unwrap();
    let col =
        |name: &str| -> Vec<String> { rows.iter().map(|r| r.get::<String, _>(name)).collect() };
    let int = |name: &str| -> Vec<i64> { rows.iter().map(|r| r.get::<i64, _>(name)).collect() };
    let json =
        |name: &str| -> Vec<serde_json::Value> { rows.iter().map(|r| r.get(name)).collect() };
    let versions: Vec<i32> = rows.iter().map(|r| r.get("version")).collect();
    let at: Vec<chrono::DateTime<chrono::Utc>> =
        rows.iter().map(|r| r.get("recorded_at")).collect();
    sqlx::query(
        "insert into events (position, xid, stream, version, type, namespace, data, metadata, recorded_at)
         overriding system value
         select * from unnest($1::bigint[], $2::bigint[], $3::text[], $4::int[], $5::text[], $6::text[],
                              $7::jsonb[], $8::jsonb[], $9::timestamptz[])",
    )
    .bind(int("position"))
    .bind(int("xid"))
    .bind(col("stream"))
    .bind(versions)
    .bind(col("type"))
    .bind(col("namespace"))
    .bind(json("data"))
    .bind(json("metadata"))
    .bind(at)
    .execute(to)
    .await
    .unwrap();
    rows.len()
}

/// Every row of the read models, as text, in key order.
async fn read_model_rows(pool: &PgPool) -> Vec<String> {
    let mut rows: Vec<String> =
        sqlx::query_scalar("select f::text from functions f order by namespace, name")
            .fetch_all(pool)
            .await
            .unwrap();
    rows.extend(
        sqlx::query_scalar::<_, String>(
            "select v::text from function_versions v order by namespace, name, version",
        )
        .fetch_all(pool)
        .await
        .unwrap(),
    );
    rows
}

async fn checksum(pool: &PgPool) -> String {
    sqlx::query_scalar(
        "select md5((select coalesce(string_agg(f::text, E'\\n' order by namespace, name), '') from functions f)
                 || (select coalesce(string_agg(v::text, E'\\n' order by namespace, name, version), '') from function_versions v))",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f8_double_delivery_leaves_the_log_runtime_and_read_models_of_a_clean_run() {
    let _cluster = crate::shared().await;
    let mut clean = Run::start().await;
    let mut doubled = Run::start().await;
    let mut item_deliveries = 0;
    for round in 1..=2 {
        clean.upload_round(round).await;
        clean.drain_once().await;
        doubled.upload_round(round).await;
        item_deliveries += doubled.drain_twice().await;
    }

    // The log and what runs.
    let (clean_history, doubled_history) = (clean.history().await, doubled.history().await);
    let flat = |h: &BTreeMap<String, Vec<String>>| -> Vec<String> {
        h.iter()
            .flat_map(|(n, es)| es.iter().map(move |e| format!("{n}:{e}")))
            .collect()
    };
    let (clean_events, doubled_events) = (flat(&clean_history), flat(&doubled_history));
    let (clean_runtime, doubled_runtime) = (clean.runtime().await, doubled.runtime().await);
    let mut wrong_answers = Vec::new();
    for (name, last) in doubled.acked.last() {
        if doubled.acked.failing.contains(&name) {
            continue;
        }
        let endpoint = doubled
            .driver
            .status(&doubled.stack.key(&name))
            .await
            .map(|d| d.endpoint);
        let answer = match endpoint {
            Some(e) => doubled.stack.answer(&e).await,
            None => "nothing runs".into(),
        };
        if answer != format!("{name}-v{last}") {
            wrong_answers.push(format!("{name}: {answer}"));
        }
    }

    // The read models: the doubled run's log projected with every event
    // delivered three times, against the same log projected once into a
    // database of its own.
    let pool = doubled.stack.pool();
    let event_deliveries = project_thrice(pool).await;
    let fresh = TestDb::new().await;
    let events = copy_log(pool, &fresh.pool).await;
    sless_projector::catch_up(&fresh.pool).await.unwrap();
    let (rows, clean_rows) = (
        read_model_rows(pool).await,
        read_model_rows(&fresh.pool).await,
    );
    let (sum, clean_sum) = (checksum(pool).await, checksum(&fresh.pool).await);
    let matches_log = read_model_matches_log(pool, &doubled.keys()).await;

    let t = tally(&doubled.stack, &doubled.acked).await;
    let lost = t.lost + missing(&clean_events, &doubled_events) + missing(&clean_rows, &rows);
    let duplicated =
        t.duplicated + missing(&doubled_events, &clean_events) + missing(&rows, &clean_rows);
    report(
        "F8",
        &[
            (
                "load",
                format!(
                    "{}_uploads_of_{}_functions_in_2_rounds",
                    t.acked,
                    FUNCTIONS + 1
                ),
            ),
            (
                "faults",
                format!(
                    "every_item_delivered_twice({item_deliveries}_deliveries),every_event_delivered_3x({event_deliveries}_deliveries_of_{events})"
                ),
            ),
            ("acked", t.acked.to_string()),
            ("lost", lost.to_string()),
            ("duplicated", duplicated.to_string()),
            ("log_equal", (clean_history == doubled_history).to_string()),
            (
                "runtime_equal",
                (clean_runtime == doubled_runtime).to_string(),
            ),
            ("read_model_checksum_equal", (sum == clean_sum).to_string()),
        ],
    );
    assert_eq!(lost, 0, "{:?}", t.findings);
    assert_eq!(duplicated, 0, "{:?}", t.findings);
    assert_eq!(clean_history, doubled_history);
    assert_eq!(clean_runtime, doubled_runtime);
    assert_eq!(
        doubled_runtime.1, FUNCTIONS,
        "one process per Ready function"
    );
    assert!(wrong_answers.is_empty(), "{wrong_answers:?}");
    // One item per function and round, each delivered twice.
    assert_eq!(item_deliveries, 2 * t.acked);
    assert_eq!(event_deliveries, 3 * events);
    assert_eq!(
        sum, clean_sum,
        "read models differ:\n{rows:#?}\n{clean_rows:#?}"
    );
    assert!(
        matches_log,
        "the read models do not match a fold of the log"
    );
    clean.driver.shutdown().await;
    doubled.driver.shutdown().await;
}
