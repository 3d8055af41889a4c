//! F7: the driver fails 5% of the time on every call for a whole run. The
//! real local driver is wrapped in `FaultyDriver`, which refuses calls,
//! loses their answers, times out or slows down, from a seeded random
//! stream per function. Every function still reaches its final state, and
//! only an error that retrying cannot fix ends in the dead letters.

use std::collections::{HashMap, HashSet};
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sless_domain::{FunctionEvent, FunctionKey, Phase, SourceVersion};
use sless_store::blobs;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::queue::{self, Backoff};
use sless_testkit::scratch_dir;
use sless_workers::driver::{
    Artifact, BuildRequest, DeployRequest, Deployment, DriverError, JobOutput, JobRequest,
};
use sless_workers::local::{LocalDriver, LocalDriverConfig};
use sless_workers::worker::StartObserver;
use sless_workers::{Driver, Worker, WorkerConfig};
use tokio::sync::watch;

use crate::harness::{
    Acked, BROKEN, Stack, all_settled, dead_letters, fast, fold, queue_empty,
    read_model_matches_log, report, secs, tally, within,
};

/// The share of driver calls that fail.
const RATE: f64 = 0.05;
/// How long a call that times out hangs before it gives up.
const TIMEOUT: Duration = Duration::from_millis(1500);
const FUNCTIONS: usize = 20;

/// The seed of the fault streams: `SLESS_FAULT_SEED`, else a fixed one, so
/// that a run can be repeated.
fn seed() -> u64 {
    std::env::var("SLESS_FAULT_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20_261_129)
}

/// FNV-1a: a hash that stays the same across Rust versions, to seed each
/// function's fault stream.
fn fnv1a(s: &str) -> u64 {
    s.bytes().fold(0xcbf2_9ce4_8422_2325, |h, b| {
        (h ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

enum Fault {
    /// Refused before anything happened.
    Refused,
    /// Done, but the answer never came back.
    AnswerLost,
    /// Hung, then gave up without doing anything.
    TimedOut,
    /// Done, late.
    Slow(Duration),
}

/// How many calls the driver saw and how many of each fault it injected.
#[derive(Default)]
pub struct Injected {
    calls: AtomicU64,
    refused: AtomicU64,
    answer_lost: AtomicU64,
    timed_out: AtomicU64,
    slow: AtomicU64,
}

impl Injected {
    fn faults(&self) -> u64 {
        [
            &self.refused,
            &self.answer_lost,
            &self.timed_out,
            &self.slow,
        ]
        .iter()
        .map(|c| c.load(Ordering::Relaxed))
        .sum()
    }

    /// Faults that made a call fail (not just slow).
    fn failures(&self) -> u64 {
        self.faults() - self.slow.load(Ordering::Relaxed)
    }

    fn summary(&self) -> String {
        format!(
            "{:.0}%_of_{}_driver_calls({}:refused={},answer_lost={},timed_out={},slow={})",
            RATE * 100.0,
            self.calls.load(Ordering::Relaxed),
            self.faults(),
            self.refused.load(Ordering::Relaxed),
            self.answer_lost.load(Ordering::Relaxed),
            self.timed_out.load(Ordering::Relaxed),
            self.slow.load(Ordering::Relaxed),
        )
    }
}

/// A driver that fails `rate` of its calls. Each function has its own
/// random stream (calls for one function are serialised by the queue), so
/// a seed gives each function the same faults on every run.
pub struct FaultyDriver<D> {
    pub inner: D,
    rate: f64,
    seed: u64,
    streams: Mutex<HashMap<FunctionKey, StdRng>>,
    pub injected: Injected,
}

impl<D: Driver> FaultyDriver<D> {
    pub fn new(inner: D, rate: f64, seed: u64) -> FaultyDriver<D> {
        FaultyDriver {
            inner,
            rate,
            seed,
            streams: Mutex::new(HashMap::new()),
            injected: Injected::default(),
        }
    }

    /// The fault for the next call about `key`, if any. Calls that cannot
    /// report an error (`status`) are only ever slowed down.
    fn draw(&self, key: &FunctionKey, can_fail: bool) -> Option<Fault> {
        let mut streams = self.streams.lock().unwrap();
        let rng = streams
            .entry(key.clone())
            .or_insert_with(|| StdRng::seed_from_u64(self.seed ^ fnv1a(&key.to_string())));
        self.injected.calls.fetch_add(1, Ordering::Relaxed);
        if !rng.random_bool(self.rate) {
            return None;
        }
        let delay = Duration::from_millis(rng.random_range(200..1500));
        let (fault, count) = match rng.random_range(0..4) {
            0 if can_fail => (Fault::Refused, &self.injected.refused),
            1 if can_fail => (Fault::AnswerLost, &self.injected.answer_lost),
            2 if can_fail => (Fault::TimedOut, &self.injected.timed_out),
            _ => (Fault::Slow(delay), &self.injected.slow),
        };
        count.fetch_add(1, Ordering::Relaxed);
        Some(fault)
    }

    async fn call<T>(
        &self,
        key: &FunctionKey,
        op: &str,
        work: impl Future<Output = Result<T, DriverError>>,
    ) -> Result<T, DriverError> {
        match self.draw(key, true) {
            None => work.await,
            Some(Fault::Refused) => Err(DriverError::Infra(format!("{op} refused (injected)"))),
            Some(Fault::AnswerLost) => {
                let _ = work.await;
                Err(DriverError::Infra(format!(
                    "{op}: connection reset before the answer (injected)"
                )))
            }
            Some(Fault::TimedOut) => {
                tokio::time::sleep(TIMEOUT).await;
                Err(DriverError::Infra(format!(
                    "{op} timed out after {TIMEOUT:?} (injected)"
                )))
            }
            Some(Fault::Slow(delay)) => {
                tokio::time::sleep(delay).await;
                work.await
            }
        }
    }
}

impl<D: Driver> Driver for FaultyDriver<D> {
    async fn build(&self, req: BuildRequest) -> Result<Artifact, DriverError> {
        let key = req.key.clone();
        self.call(&key, "build", self.inner.build(req)).await
    }

    async fn deploy(&self, req: DeployRequest) -> Result<Deployment, DriverError> {
        let key = req.key.clone();
        self.call(&key, "deploy", self.inner.deploy(req)).await
    }

    async fn remove(&self, key: &FunctionKey) -> Result<(), DriverError> {
        self.call(key, "remove", self.inner.remove(key)).await
    }

    async fn status(&self, key: &FunctionKey) -> Option<Deployment> {
        if let Some(Fault::Slow(delay)) = self.draw(key, false) {
            tokio::time::sleep(delay).await;
        }
        self.inner.status(key).await
    }

    /// Jobs are not part of F7: they pass through untouched.
    async fn run_job(&self, req: JobRequest) -> Result<JobOutput, DriverError> {
        self.inner.run_job(req).await
    }
}

/// Appends an upload whose build context is not in S3 (a reference to a
/// lost blob): no retry can build it.
async fn upload_without_context(stack: &Stack, key: &FunctionKey) {
    let sha = format!("{:064x}", 0xdead_u32);
    let event = FunctionEvent::FunctionUploaded(SourceVersion {
        version: 1,
        sha256: sha.clone(),
        size: 1,
        files: 1,
        zip_key: blobs::zip_key(&sha),
        context_sha256: sha.clone(),
        context_key: blobs::context_key(&sha),
        runtime: None,
    });
    let metadata = Metadata {
        actor: "f7".into(),
        ..Default::default()
    };
    let mut tx = stack.pool().begin().await.unwrap();
    eventlog::append(
        &mut tx,
        &key.stream(),
        1,
        &[NewEvent::function(key, &event, metadata)],
    )
    .await
    .unwrap();
    queue::enqueue_reconcile(&mut *tx, &key.queue_key())
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn f7_a_driver_failing_five_percent_of_calls_delays_functions_but_every_one_settles() {
    let _cluster = crate::shared().await;
    let stack = Stack::start("f7", true).await;
    let pool = stack.pool().clone();
    let local = LocalDriver::new(LocalDriverConfig::new(scratch_dir("f7-driver"))).unwrap();
    let driver = Arc::new(FaultyDriver::new(local, RATE, seed()));
    let starts = Arc::new(Mutex::new(Vec::new()));
    let observer: StartObserver = {
        let starts = starts.clone();
        Arc::new(move |item| starts.lock().unwrap().push((item.id, item.key.clone())))
    };
    let (stop, stopped) = watch::channel(false);
    let mut workers = Vec::new();
    for id in ["f7-a", "f7-b"] {
        let worker = Worker {
            pool: pool.clone(),
            reconciler: stack.reconciler(driver.clone()),
            config: WorkerConfig {
                id: id.into(),
                concurrency: 3,
                lease: Duration::from_secs(10),
                poll: Duration::from_millis(100),
                sweep: Duration::from_secs(1),
                backoff: Backoff {
                    base: Duration::from_millis(50),
                    max: Duration::from_secs(1),
                },
                ..WorkerConfig::default()
            },
            on_start: Some(observer.clone()),
        };
        workers.push(tokio::spawn(worker.run(stopped.clone())));
    }

    let started = Instant::now();
    let mut acked = Acked::default();
    let names: Vec<String> = (0..FUNCTIONS).map(|i| format!("fn-{i}")).collect();
    for name in &names {
        stack.create(name).await;
        acked.upload(name, stack.upload(name, &fast(&format!("{name}-v1"))).await);
    }
    stack.create("broken").await;
    acked.upload("broken", stack.upload("broken", BROKEN).await);
    acked.failing.insert("broken".into());
    let lost_context = stack.key("lost-context");
    stack.create("lost-context").await;
    upload_without_context(&stack, &lost_context).await;
    // A second version of every function while the first versions are
    // still going, then a third of half of them.
    sless_testkit::eventually(
        "some first versions to deploy",
        Duration::from_secs(60),
        || async {
            let n: i64 =
                sqlx::query_scalar("select count(*) from events where type = 'FunctionDeployed'")
                    .fetch_one(&pool)
                    .await
                    .unwrap();
            (n >= 3).then_some(())
        },
    )
    .await;
    for name in &names {
        acked.upload(name, stack.upload(name, &fast(&format!("{name}-v2"))).await);
    }
    for name in names.iter().take(FUNCTIONS / 2) {
        acked.upload(name, stack.upload(name, &fast(&format!("{name}-v3"))).await);
    }

    let settled = within(Duration::from_secs(150), || async {
        let abandoned = fold(&pool, &lost_context).await.phase == Phase::Failed;
        abandoned && all_settled(&stack, &acked).await && queue_empty(&pool).await
    })
    .await;
    let settled_in = started.elapsed();
    let mut keys: Vec<FunctionKey> = acked.last().keys().map(|n| stack.key(n)).collect();
    keys.push(lost_context.clone());
    let projected = within(Duration::from_secs(30), || {
        read_model_matches_log(&pool, &keys)
    })
    .await;
    let _ = stop.send(true);
    for w in workers {
        w.await.unwrap().unwrap();
    }

    // Every function that is Ready answers with its last version.
    let mut wrong_answers = Vec::new();
    for (name, last) in acked.last() {
        if acked.failing.contains(&name) {
            continue;
        }
        let state = fold(&pool, &stack.key(&name)).await;
        let endpoint = state.endpoint.unwrap_or_default();
        let answer = stack.answer(&endpoint).await;
        if answer != format!("{name}-v{last}") {
            wrong_answers.push(format!("{name}: {answer}"));
        }
    }
    let dead = dead_letters(&pool).await;
    let abandoned: i64 =
        sqlx::query_scalar("select count(*) from events where type = 'ReconcileAbandoned'")
            .fetch_one(&pool)
            .await
            .unwrap();
    // Retries of items that met only injected (transient) faults.
    let starts: Vec<i64> = starts
        .lock()
        .unwrap()
        .iter()
        .filter(|(_, key)| *key != lost_context.queue_key())
        .map(|(id, _)| *id)
        .collect();
    let items: HashSet<i64> = starts.iter().copied().collect();
    let t = tally(&stack, &acked).await;
    driver.inner.shutdown().await;
    report(
        "F7",
        &[
            (
                "load",
                format!(
                    "{}_uploads_of_{}_functions_on_2_workers_x3",
                    acked.uploads.len() + 1,
                    FUNCTIONS + 2
                ),
            ),
            ("faults", driver.injected.summary()),
            ("seed", seed().to_string()),
            ("acked", t.acked.to_string()),
            ("lost", t.lost.to_string()),
            ("duplicated", t.duplicated.to_string()),
            ("items", items.len().to_string()),
            ("retried", (starts.len() - items.len()).to_string()),
            (
                "dead_letters",
                format!(
                    "{}({})",
                    dead.len(),
                    dead.iter()
                        .map(|k| k.rsplit('/').next().unwrap_or(k))
                        .collect::<Vec<_>>()
                        .join("+")
                ),
            ),
            ("settled_in", secs(settled_in)),
            ("api_retries", stack.retried_commands()),
        ],
    );
    assert_eq!(t.lost, 0, "{:?}", t.findings);
    assert_eq!(t.duplicated, 0, "{:?}", t.findings);
    assert!(
        settled.is_some(),
        "not every function settled: {:?}",
        t.findings
    );
    assert!(driver.injected.failures() > 0, "no call failed");
    assert!(
        starts.len() > items.len(),
        "no item was retried: the faults did not reach the worker"
    );
    assert!(wrong_answers.is_empty(), "{wrong_answers:?}");
    // Transient faults are retried away; the user's broken code fails its
    // function without a dead letter; only the lost build context, which
    // no retry can bring back, is dead-lettered.
    assert_eq!(dead, vec![lost_context.queue_key()]);
    assert_eq!(
        abandoned, 1,
        "a function was abandoned for a transient fault"
    );
    assert!(projected.is_some(), "the read models do not match the log");
    stack.stop();
}
