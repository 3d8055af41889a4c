//! What functions print, kept (`sless_store::function_logs`): every line
//! an instance, a job or a cron run writes reaches a [`Shipper`], which
//! holds each function to its budget and writes the lines in batches.
//!
//! - **Never in the function's way.** [`Shipper::push`] does not wait: the
//!   lines go into a bounded queue, and a line that finds it full is
//!   dropped and counted. The process's pipes are read at the pace it
//!   writes them, whatever the database does.
//! - **A budget per function** (in this process): a bucket of lines and
//!   one of bytes, refilled each second ([`LogsConfig`]). Past either,
//!   lines are dropped and counted (`function_log_drops`,
//!   `sless_function_log_lines_dropped_total`).
//! - **Which call printed it.** A runtime wrapper marks a line written
//!   while serving a call as `\x1e{invocation id}\x1f{text}`, or
//!   `\x1e{invocation id};{traceparent}\x1f{text}` when the call came with
//!   a `traceparent` (runtimes/README.md); [`Source::line`] reads the mark
//!   off. A job or cron run's lines all belong to its record.
//! - **Exported.** With OTLP log export on (`sless_telemetry::logs`),
//!   each line kept within the budget is also sent as a log record, with
//!   the trace and span of its call: [`Source::line`] notes the trace
//!   context of each invocation it reads (the mark's `traceparent`; a
//!   run's span), and the writer looks the line's invocation up there.
//! - **Retention.** Each writer makes sure the next days have their
//!   partitions, drops whole days past the longest retention and deletes a
//!   namespace's lines past a shorter one of its own, every
//!   [`LogsConfig::sweep_every`].

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use chrono::{Days, Utc};
use sless_store::PgPool;
use sless_store::function_logs::{self, NewLine, Stream};
use sless_telemetry::logs::{Record, Trace};
use tokio::sync::mpsc;
use uuid::Uuid;

/// How lines are kept, and for how long.
#[derive(Debug, Clone)]
pub struct LogsConfig {
    /// Lines a function may write each second (and at once, twice that).
    pub lines_per_sec: u32,
    /// Bytes of lines a function may write each second (and at once,
    /// twice that).
    pub bytes_per_sec: u64,
    /// Lines waiting to be written, past which new ones are dropped.
    pub queue: usize,
    /// The most lines one write holds.
    pub batch: usize,
    /// How long a line may wait for its batch.
    pub flush_every: Duration,
    /// How many days lines are kept (`SLESS_LOG_RETENTION_DAYS`).
    pub retention_days: u32,
    /// Namespaces that keep their lines for a number of days of their own.
    pub retention: BTreeMap<String, u32>,
    /// How often partitions and retention are seen to.
    pub sweep_every: Duration,
}

impl Default for LogsConfig {
    fn default() -> LogsConfig {
        LogsConfig {
            lines_per_sec: 1_000,
            bytes_per_sec: 1024 * 1024,
            queue: 100_000,
            batch: 5_000,
            flush_every: Duration::from_millis(100),
            retention_days: 7,
            retention: BTreeMap::new(),
            sweep_every: Duration::from_secs(3600),
        }
    }
}

impl LogsConfig {
    /// The days `namespace` keeps its lines.
    pub fn days_of(&self, namespace: &str) -> u32 {
        self.retention
            .get(namespace)
            .copied()
            .unwrap_or(self.retention_days)
    }
}

/// Lines dropped per function, not yet written down.
type Drops = Arc<Mutex<HashMap<(String, String), u64>>>;

/// Where lines go: cheap to clone, one per worker process.
#[derive(Clone)]
pub struct Shipper {
    tx: mpsc::Sender<NewLine>,
    drops: Drops,
}

impl std::fmt::Debug for Shipper {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Shipper").finish_non_exhaustive()
    }
}

impl Shipper {
    /// Starts the writer on `pool`; it writes what is left and stops once
    /// every clone of the `Shipper` is dropped.
    pub fn start(pool: PgPool, config: LogsConfig) -> (Shipper, tokio::task::JoinHandle<()>) {
        let (tx, rx) = mpsc::channel(config.queue.max(1));
        let drops: Drops = Arc::default();
        let writer = Writer {
            pool,
            config,
            drops: drops.clone(),
            buckets: HashMap::new(),
        };
        let task = tokio::spawn(writer.run(rx));
        (Shipper { tx, drops }, task)
    }

    /// Keeps `line`, or counts it dropped when the queue is full. Never
    /// waits.
    pub fn push(&self, line: NewLine) {
        if let Err(e) = self.tx.try_send(line) {
            let line = match e {
                mpsc::error::TrySendError::Full(l) | mpsc::error::TrySendError::Closed(l) => l,
            };
            count_drop(&self.drops, &line.namespace, &line.function, 1);
        }
    }

    /// Keeps each line of `text`, all of `source` and `stream`: what a run
    /// printed, read whole once it ended (a pod's log).
    pub fn push_text(&self, source: &Source, stream: Stream, text: &str) {
        for line in text.split_inclusive('\n') {
            self.push(source.line(stream, line, false));
        }
    }
}

fn count_drop(drops: &Drops, namespace: &str, function: &str, n: u64) {
    *drops
        .lock()
        .unwrap()
        .entry((namespace.to_owned(), function.to_owned()))
        .or_default() += n;
    sless_telemetry::global()
        .log_lines_dropped
        .get_or_create(&sless_telemetry::global().function(namespace, function))
        .inc_by(n);
}

/// Whose output a stream of lines is: a function's instance, or a run.
#[derive(Debug, Clone)]
pub struct Source {
    pub namespace: String,
    pub function: String,
    pub version: Option<u32>,
    /// The process: a local instance's port, a pod's name, a run's stream.
    pub instance: String,
    /// Every line's invocation record (a job or cron run's), when the
    /// lines carry no mark of their own.
    pub invocation: Option<Uuid>,
}

/// The mark a runtime wrapper puts before a line it wrote for a call.
const MARK: char = '\u{1e}';
const MARK_END: char = '\u{1f}';

/// The invocation a line is marked with, and its text without the mark.
pub fn unmark(text: &str) -> (Option<Uuid>, &str) {
    let (id, _, line) = unmark_traced(text);
    (id, line)
}

/// The invocation a line is marked with, the `traceparent` its mark
/// carries (as written: not checked), and its text without the mark.
pub fn unmark_traced(text: &str) -> (Option<Uuid>, Option<&str>, &str) {
    let marked = text
        .strip_prefix(MARK)
        .and_then(|rest| rest.split_once(MARK_END))
        .and_then(|(mark, line)| {
            let (id, traceparent) = match mark.split_once(';') {
                Some((id, tp)) => (id, Some(tp)),
                None => (mark, None),
            };
            Some((Uuid::try_parse(id).ok()?, traceparent, line))
        });
    match marked {
        Some((id, traceparent, line)) => (Some(id), traceparent, line),
        None => (None, None, text),
    }
}

/// The trace contexts of the invocations whose lines were read lately, for
/// the writer to export their lines with: two generations of at most
/// [`TRACED`] each, the older forgotten when the newer is full.
static TRACES: Mutex<Option<[HashMap<Uuid, Trace>; 2]>> = Mutex::new(None);
const TRACED: usize = 4096;

fn note_trace(invocation: Uuid, trace: Trace) {
    let mut traces = TRACES.lock().unwrap();
    let [new, old] = traces.get_or_insert_with(Default::default);
    if new.get(&invocation) == Some(&trace) {
        return;
    }
    if new.len() >= TRACED {
        *old = std::mem::take(new);
    }
    new.insert(invocation, trace);
}

fn trace_of(invocation: Uuid) -> Option<Trace> {
    let traces = TRACES.lock().unwrap();
    let [new, old] = traces.as_ref()?;
    new.get(&invocation)
        .or_else(|| old.get(&invocation))
        .copied()
}

/// `line` as an OTLP log record, with its call's trace when known.
fn export(line: &NewLine) {
    let trace = line.invocation.and_then(trace_of);
    sless_telemetry::logs::export(Record {
        at_unix_nanos: line
            .at
            .timestamp_nanos_opt()
            .map_or(0, |n| u64::try_from(n).unwrap_or(0)),
        stderr: line.stream == Stream::Stderr,
        text: line.line.clone(),
        namespace: line.namespace.clone(),
        function: line.function.clone(),
        version: line.version,
        instance: line.instance.clone(),
        invocation: line.invocation.map(|id| id.to_string()),
        truncated: line.truncated,
        trace,
    });
}

impl Source {
    /// A line of `stream` as read (its newline, if any, included), with its
    /// mark read off; `cut` says it was longer than what was read.
    pub fn line(&self, stream: Stream, raw: &str, cut: bool) -> NewLine {
        let raw = raw.trim_end_matches(['\n', '\r']);
        let (marked, traceparent, text) = unmark_traced(raw);
        if sless_telemetry::logs::enabled() {
            // A call's line: the trace its mark names. A run's: the span
            // it runs in.
            let noted = match marked {
                Some(id) => traceparent.and_then(Trace::parse).map(|t| (id, t)),
                None => self.invocation.zip(
                    sless_telemetry::trace::current()
                        .as_deref()
                        .and_then(Trace::parse),
                ),
            };
            if let Some((id, trace)) = noted {
                note_trace(id, trace);
            }
        }
        let (text, truncated) = NewLine::cut(text.to_owned());
        NewLine {
            at: Utc::now(),
            namespace: self.namespace.clone(),
            function: self.function.clone(),
            version: self.version,
            instance: self.instance.clone(),
            invocation: marked.or(self.invocation),
            stream,
            line: text,
            truncated: truncated || cut,
        }
    }
}

/// A function's budget: lines and bytes, refilled continuously up to
/// two seconds' worth.
struct Bucket {
    lines: f64,
    bytes: f64,
    at: Instant,
}

impl Bucket {
    fn full(config: &LogsConfig) -> Bucket {
        Bucket {
            lines: 2.0 * f64::from(config.lines_per_sec),
            bytes: 2.0 * config.bytes_per_sec as f64,
            at: Instant::now(),
        }
    }

    /// Takes one line of `bytes` from the budget, or says it is spent.
    fn take(&mut self, config: &LogsConfig, bytes: usize) -> bool {
        let now = Instant::now();
        let secs = now.duration_since(self.at).as_secs_f64();
        self.at = now;
        let (lps, bps) = (f64::from(config.lines_per_sec), config.bytes_per_sec as f64);
        self.lines = (self.lines + secs * lps).min(2.0 * lps);
        self.bytes = (self.bytes + secs * bps).min(2.0 * bps);
        if self.lines >= 1.0 && self.bytes >= bytes as f64 {
            self.lines -= 1.0;
            self.bytes -= bytes as f64;
            true
        } else {
            false
        }
    }
}

struct Writer {
    pool: PgPool,
    config: LogsConfig,
    drops: Drops,
    buckets: HashMap<(String, String), Bucket>,
}

impl Writer {
    async fn run(mut self, mut rx: mpsc::Receiver<NewLine>) {
        let mut next_sweep = tokio::time::Instant::now();
        let mut batch: Vec<NewLine> = Vec::with_capacity(self.config.batch);
        loop {
            if tokio::time::Instant::now() >= next_sweep {
                self.sweep().await;
                next_sweep = tokio::time::Instant::now() + self.config.sweep_every;
            }
            // The first line, then whatever comes within the flush window.
            let first = tokio::select! {
                line = rx.recv() => line,
                _ = tokio::time::sleep_until(next_sweep) => continue,
            };
            let Some(first) = first else { break };
            self.admit(first, &mut batch);
            let window = tokio::time::sleep(self.config.flush_every);
            tokio::pin!(window);
            while batch.len() < self.config.batch {
                tokio::select! {
                    line = rx.recv() => match line {
                        Some(l) => self.admit(l, &mut batch),
                        None => break,
                    },
                    _ = &mut window => break,
                }
            }
            self.write(&mut batch).await;
        }
    }

    /// Adds `line` to the batch if its function's budget allows.
    fn admit(&mut self, line: NewLine, batch: &mut Vec<NewLine>) {
        let key = (line.namespace.clone(), line.function.clone());
        let config = &self.config;
        let bucket = self
            .buckets
            .entry(key)
            .or_insert_with(|| Bucket::full(config));
        if bucket.take(config, line.line.len() + 1) {
            if sless_telemetry::logs::enabled() {
                export(&line);
            }
            batch.push(line);
        } else {
            count_drop(&self.drops, &line.namespace, &line.function, 1);
        }
    }

    async fn write(&mut self, batch: &mut Vec<NewLine>) {
        if !batch.is_empty() {
            match function_logs::insert(&self.pool, batch).await {
                Ok(_) => {
                    let metrics = sless_telemetry::global();
                    let mut counts: HashMap<(&str, &str), u64> = HashMap::new();
                    for l in batch.iter() {
                        *counts.entry((&l.namespace, &l.function)).or_default() += 1;
                    }
                    for ((ns, f), n) in counts {
                        metrics
                            .log_lines
                            .get_or_create(&metrics.function(ns, f))
                            .inc_by(n);
                    }
                }
                Err(e) => {
                    tracing::warn!(error = %e, lines = batch.len(), "function lines not kept");
                    for l in batch.iter() {
                        count_drop(&self.drops, &l.namespace, &l.function, 1);
                    }
                }
            }
            batch.clear();
        }
        let drops: Vec<(String, String, u64)> = {
            let mut d = self.drops.lock().unwrap();
            d.drain().map(|((ns, f), n)| (ns, f, n)).collect()
        };
        if let Err(e) = function_logs::add_drops(&self.pool, &drops).await {
            tracing::warn!(error = %e, "the count of dropped function lines was not kept");
        }
        // Budgets of functions quiet for a while are full again: forget them.
        let quiet = Duration::from_secs(2);
        self.buckets.retain(|_, b| b.at.elapsed() < quiet);
    }

    /// Partitions for today and the next two days; days and lines past
    /// their retention gone.
    async fn sweep(&self) {
        if let Err(e) = sweep(&self.pool, &self.config).await {
            tracing::warn!(error = %e, "keeping the function logs' days failed");
        }
    }
}

/// Sees to the days of the function logs: the next ones made, the ones
/// past every namespace's retention dropped, and each namespace's lines
/// past a shorter retention of its own deleted.
pub async fn sweep(pool: &PgPool, config: &LogsConfig) -> sless_store::Result<()> {
    let today = function_logs::today(pool).await?;
    function_logs::ensure_days(pool, today, 3).await?;
    let longest = config
        .retention
        .values()
        .copied()
        .chain([config.retention_days])
        .max()
        .unwrap_or(config.retention_days);
    // A day is dropped once its last line is older than the retention.
    if let Some(cutoff) = today.checked_sub_days(Days::new(u64::from(longest))) {
        function_logs::drop_days_before(pool, cutoff).await?;
    }
    let now = Utc::now();
    let shortest = config
        .retention
        .values()
        .copied()
        .chain([config.retention_days])
        .min()
        .unwrap_or(config.retention_days);
    let Some(earliest) = now.checked_sub_days(Days::new(u64::from(shortest))) else {
        return Ok(());
    };
    for ns in function_logs::namespaces_with_lines_before(pool, earliest).await? {
        let days = config.days_of(&ns);
        if days >= longest {
            continue;
        }
        let Some(before) = now.checked_sub_days(Days::new(u64::from(days))) else {
            continue;
        };
        while function_logs::delete_before(pool, &ns, before, 10_000).await? == 10_000 {}
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    const ID: &str = "0193a7c4-5b1e-7d2a-9c41-3f6d2e8b1a07";
    const TP: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

    #[test]
    fn a_mark_names_the_call_and_may_carry_its_traceparent() {
        let id = Uuid::parse_str(ID).unwrap();
        let old = format!("\u{1e}{ID}\u{1f}hello");
        assert_eq!(unmark_traced(&old), (Some(id), None, "hello"));
        assert_eq!(unmark(&old), (Some(id), "hello"));
        let traced = format!("\u{1e}{ID};{TP}\u{1f}hello;\u{1f}x");
        assert_eq!(
            unmark_traced(&traced),
            (Some(id), Some(TP), "hello;\u{1f}x")
        );
        assert_eq!(unmark(&traced), (Some(id), "hello;\u{1f}x"));
        // A traceparent that does not parse leaves the line its call's.
        let bad = format!("\u{1e}{ID};junk\u{1f}hello");
        assert_eq!(unmark_traced(&bad), (Some(id), Some("junk"), "hello"));
        assert_eq!(Trace::parse("junk"), None);
        for text in [
            format!("\u{1e}nope;{TP}\u{1f}x"),
            format!("\u{1e}{ID};{TP}x"),
            format!("x\u{1e}{ID}\u{1f}y"),
        ] {
            assert_eq!(
                unmark_traced(&text),
                (None, None, text.as_str()),
                "{text:?}"
            );
        }
    }

    #[test]
    fn the_traces_of_recent_calls_are_kept_and_old_ones_forgotten() {
        let trace = Trace::parse(TP).unwrap();
        let first = Uuid::new_v4();
        note_trace(first, trace);
        assert_eq!(trace_of(first), Some(trace));
        // Other tests may note traces too: fill two generations past it.
        for _ in 0..2 * TRACED {
            note_trace(Uuid::new_v4(), trace);
        }
        assert_eq!(trace_of(first), None);
        let last = Uuid::new_v4();
        note_trace(last, trace);
        assert_eq!(trace_of(last), Some(trace));
        let total: usize = TRACES
            .lock()
            .unwrap()
            .as_ref()
            .unwrap()
            .iter()
            .map(HashMap::len)
            .sum();
        assert!(total <= 2 * TRACED, "{total}");
    }
}
