//! The invocation recorder: what every call through the invoke proxy did,
//! kept off the request path.
//!
//! The proxy hands each record to `Recorder::record`, which puts it on a
//! bounded in-memory channel and never waits: when the channel is full the
//! record is dropped and counted (`Recorder::dropped`, and a warning with
//! the count). A writer task takes records off the channel and writes them
//! in batches, one statement per batch, when `batch_max` records have
//! gathered or `batch_wait` has passed since the first of them. The same
//! task enforces retention (`Retention`) every `Retention::every`, with
//! bounded deletes. `Recorder::shutdown` makes it write what it holds and
//! stop; dropping every `Recorder` does the same.

use std::collections::HashSet;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use chrono::Utc;
use sless_store::PgPool;
use sless_store::invocations::{self as records, Invocation};
use tokio::sync::{mpsc, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

/// How the recorder batches and how long records are kept.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecorderConfig {
    /// Records waiting for the writer; past it, new ones are dropped.
    pub capacity: usize,
    /// The most records one statement writes.
    pub batch_max: usize,
    /// How long the first record of a batch waits for others.
    pub batch_wait: Duration,
    pub retention: Retention,
}

impl Default for RecorderConfig {
    fn default() -> Self {
        RecorderConfig {
            capacity: 10_000,
            batch_max: 1000,
            batch_wait: Duration::from_millis(100),
            retention: Retention::default(),
        }
    }
}

/// How long invocation records are kept: a record goes when it is older
/// than `max_age`, or when its function has `per_function` newer ones.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    /// `SLESS_INVOCATION_RETENTION_DAYS` (default 7 days).
    pub max_age: Duration,
    /// `SLESS_INVOCATION_RETENTION_PER_FUNCTION` (default 10,000).
    pub per_function: u32,
    /// How often the writer deletes what is past retention.
    pub every: Duration,
    /// The most rows one delete statement removes; a pass repeats a
    /// statement that hit it a few times, and leaves the rest to the next.
    pub delete_limit: u32,
}

impl Default for Retention {
    fn default() -> Self {
        Retention {
            max_age: Duration::from_secs(7 * 86_400),
            per_function: 10_000,
            every: Duration::from_secs(60),
            delete_limit: 10_000,
        }
    }
}

/// Statements of one kind per retention pass, at most.
const RETENTION_ROUNDS: usize = 4;
/// Functions trimmed per statement, and per retention pass. Trimming one
/// costs an index range scan of `Retention::per_function` entries.
const TRIM_CHUNK: usize = 100;
const TRIM_PER_PASS: usize = 1000;
/// Functions remembered for the next trim; functions written to beyond it
/// wait until they are written to again (their age bound still holds).
const MAX_TOUCHED: usize = 100_000;
/// Drops are reported at most this often (and once more at shutdown).
const DROP_REPORT_EVERY: Duration = Duration::from_secs(1);

/// Hands invocation records to the database off the request path.
#[derive(Clone)]
pub struct Recorder {
    tx: mpsc::Sender<Invocation>,
    shared: Arc<Shared>,
}

struct Shared {
    /// Records lost since start: dropped on a full channel, or in a batch
    /// the database refused.
    dropped: AtomicU64,
    /// Of those, not yet reported in a warning.
    unreported: AtomicU64,
    stop: watch::Sender<bool>,
    writer: Mutex<Option<JoinHandle<()>>>,
}

impl Recorder {
    /// A recorder with the default configuration and its writer running.
    /// Must be called within a Tokio runtime.
    pub fn new(pool: PgPool) -> Recorder {
        Recorder::start(pool, RecorderConfig::default())
    }

    /// A recorder with its writer running on a task of its own.
    pub fn start(pool: PgPool, config: RecorderConfig) -> Recorder {
        let (recorder, writer) = Recorder::detached(pool, config);
        let task = tokio::spawn(writer.run());
        *recorder.shared.writer.lock().unwrap() = Some(task);
        recorder
    }

    /// A recorder and its writer, not yet running: records wait on the
    /// channel until `Writer::run` is polled.
    pub fn detached(pool: PgPool, config: RecorderConfig) -> (Recorder, Writer) {
        let (tx, rx) = mpsc::channel(config.capacity.max(1));
        let (stop, stop_rx) = watch::channel(false);
        let shared = Arc::new(Shared {
            dropped: AtomicU64::new(0),
            unreported: AtomicU64::new(0),
            stop,
            writer: Mutex::new(None),
        });
        let writer = Writer {
            pool,
            rx,
            stop: stop_rx,
            shared: shared.clone(),
            config,
            touched: HashSet::new(),
            last_report: None,
        };
        (Recorder { tx, shared }, writer)
    }

    /// Queues a record for writing; never waits. A full channel drops it.
    pub fn record(&self, record: Invocation) {
        if self.tx.try_send(record).is_err() {
            self.shared.dropped.fetch_add(1, Ordering::Relaxed);
            self.shared.unreported.fetch_add(1, Ordering::Relaxed);
        }
    }

    /// Records lost since start.
    pub fn dropped(&self) -> u64 {
        self.shared.dropped.load(Ordering::Relaxed)
    }

    /// Makes the writer write what it holds and stop, and waits for it
    /// (when it was started by `start`). Records handed over afterwards are
    /// dropped.
    pub async fn shutdown(&self) {
        self.shared.stop.send_replace(true);
        let task = self.shared.writer.lock().unwrap().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }
}

/// The task that writes records and enforces retention.
pub struct Writer {
    pool: PgPool,
    rx: mpsc::Receiver<Invocation>,
    stop: watch::Receiver<bool>,
    shared: Arc<Shared>,
    config: RecorderConfig,
    /// Functions written to since their last trim.
    touched: HashSet<(String, String)>,
    last_report: Option<Instant>,
}

/// Resolves once a stop is asked for.
async fn stopped(stop: &mut watch::Receiver<bool>) {
    let _ = stop.wait_for(|s| *s).await;
}

impl Writer {
    /// Runs until `Recorder::shutdown` or until every `Recorder` is gone;
    /// writes what it holds before it returns.
    pub async fn run(mut self) {
        let max = self.config.batch_max.max(1);
        let mut batch = Vec::with_capacity(max);
        let mut next_retention = Instant::now() + self.config.retention.every;
        loop {
            tokio::select! {
                biased;
                _ = stopped(&mut self.stop) => break,
                n = self.rx.recv_many(&mut batch, max) => if n == 0 { break },
                _ = tokio::time::sleep_until(next_retention) => {
                    self.retain().await;
                    next_retention = Instant::now() + self.config.retention.every;
                    continue;
                }
            }
            // The first records are in: gather more until the batch is full
            // or its first record has waited `batch_wait`.
            let deadline = Instant::now() + self.config.batch_wait;
            let mut last = false;
            while batch.len() < max {
                let room = max - batch.len();
                tokio::select! {
                    biased;
                    n = self.rx.recv_many(&mut batch, room) => if n == 0 { last = true; break },
                    _ = tokio::time::sleep_until(deadline) => break,
                    _ = stopped(&mut self.stop) => { last = true; break }
                }
            }
            self.write(&mut batch).await;
            self.report_drops(false);
            if last {
                break;
            }
        }
        self.rx.close();
        while self.rx.recv_many(&mut batch, max).await > 0 {
            self.write(&mut batch).await;
        }
        self.report_drops(true);
    }

    async fn write(&mut self, batch: &mut Vec<Invocation>) {
        if batch.is_empty() {
            return;
        }
        let mut previous: Option<&Invocation> = None;
        for r in batch.iter() {
            // Records of one function mostly come in runs: one lookup per run.
            let same =
                previous.is_some_and(|p| p.function == r.function && p.namespace == r.namespace);
            previous = Some(r);
            if !same && self.touched.len() < MAX_TOUCHED {
                self.touched
                    .insert((r.namespace.clone(), r.function.clone()));
            }
        }
        if let Err(e) = records::insert(&self.pool, batch).await {
            let lost = batch.len() as u64;
            self.shared.dropped.fetch_add(lost, Ordering::Relaxed);
            tracing::warn!(lost, error = %e, "invocation records could not be written");
        }
        batch.clear();
    }

    fn report_drops(&mut self, always: bool) {
        if !always
            && self
                .last_report
                .is_some_and(|t| t.elapsed() < DROP_REPORT_EVERY)
        {
            return;
        }
        let dropped = self.shared.unreported.swap(0, Ordering::Relaxed);
        if dropped > 0 {
            self.last_report = Some(Instant::now());
            tracing::warn!(
                dropped,
                capacity = self.config.capacity,
                "invocation records dropped: the writer's queue was full"
            );
        }
    }

    /// One retention pass: records past the age bound, then the records of
    /// functions written to since their last trim beyond the newest
    /// `per_function`. Every statement is bounded by `delete_limit`.
    async fn retain(&mut self) {
        let r = self.config.retention;
        let cutoff = chrono::Duration::from_std(r.max_age)
            .ok()
            .and_then(|age| Utc::now().checked_sub_signed(age));
        for _ in 0..RETENTION_ROUNDS {
            let Some(cutoff) = cutoff else { break };
            match records::delete_started_before(&self.pool, cutoff, r.delete_limit).await {
                Ok(n) if n >= u64::from(r.delete_limit) => continue,
                Ok(_) => break,
                Err(e) => {
                    tracing::warn!(error = %e, "deleting old invocation records failed");
                    break;
                }
            }
        }
        // At most `TRIM_PER_PASS` functions; the rest wait for the next pass.
        let functions: Vec<(String, String)> =
            self.touched.iter().take(TRIM_PER_PASS).cloned().collect();
        for f in &functions {
            self.touched.remove(f);
        }
        for chunk in functions.chunks(TRIM_CHUNK) {
            match records::trim_functions(&self.pool, chunk, r.per_function, r.delete_limit).await {
                Ok(trimmed) => {
                    // One that lost as many as a statement may delete may
                    // have more to lose: next pass.
                    for (ns, f, n) in trimmed {
                        if n >= u64::from(r.delete_limit) {
                            self.touched.insert((ns, f));
                        }
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, "trimming invocation records failed");
                    self.touched.extend(chunk.iter().cloned());
                }
            }
        }
    }
}
