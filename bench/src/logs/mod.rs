//! What keeping functions' output costs (issue 43), each figure beside its
//! peer, in one sitting:
//!
//! 1. **Lines ingested per second.** `function_logs::insert` alone, batches
//!    of `--batch` lines of about 100 bytes over 20 functions, from each
//!    `--writers` count of writers; beside it the same rows by the same
//!    `insert … select … from unnest` into an unpartitioned table with no
//!    index (the bare rows: what PostgreSQL takes) and into one with the two
//!    indexes of `function_logs` (what the indexes take; the rest is the
//!    partitions, the lock and the NOTIFY). Then through a `Shipper` with
//!    its budget lifted: `--lines` pushed at once, timed until the last
//!    line kept is in the table, the push loop timed on its own, the lines
//!    dropped (queue full) counted; and `--paced-rate` lines a second for
//!    `--insert-seconds`.
//! 2. **The tail's delay**, on `sless dev`: a `Shipper` in this process
//!    pushes lines carrying their push time, at `--tail-rate` and then at
//!    `--burst-rate` for `--tail-seconds` each, while
//!    `GET …/logs?follow=true` is read here; receive − push. Beside it the
//!    build log's tail, its lines written as the workers' build-log writer
//!    writes them (a chunk `BATCH` after the first line of it), and the
//!    floor: a LISTEN connection receiving a NOTIFY sent after a one-row
//!    insert.
//! 3. **The proxy** (`/fn`, wrk) with a python function that prints a line
//!    per call against one that prints nothing, alternated `--rounds`
//!    times, with the CPU each side spent per call (`sless dev`, the
//!    processes it started, PostgreSQL). The runtime wrapper writes an
//!    access line per call for both. `sless dev` holds each function to
//!    its budget (`SLESS_LOG_LINES_PER_SEC`, 1,000, which it takes from
//!    this process's environment like every variable it is not given).

use std::time::{Duration, Instant};

use chrono::Utc;
use serde_json::json;
use sless_store::function_logs::{NewLine, Stream};
use sless_workers::logs::LogsConfig;
use uuid::Uuid;

use crate::sless_dev::{DevArgs, SlessDev};

mod ingest;
mod proxy;
mod tail;

use crate::{Server, percentile, wrk};
use ingest::ingest;
use proxy::{deploy, proxy};
use tail::{build_log_tail, function_log_tail, notify_floor};

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Part {
    /// Lines ingested per second: `insert` and its peers, the `Shipper`.
    Ingest,
    /// The live tail's delay, the build log's tail and the NOTIFY floor.
    Tail,
    /// The proxy with a function that prints against one that does not.
    Proxy,
}

#[derive(clap::Args)]
pub struct LogsArgs {
    #[command(flatten)]
    dev: DevArgs,
    #[command(flatten)]
    load: wrk::Load,
    /// What to measure, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "ingest,tail,proxy"
    )]
    part: Vec<Part>,
    /// Writer counts of the `insert` runs, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "1,4")]
    writers: Vec<usize>,
    /// Lines per `insert` batch.
    #[arg(long, default_value_t = 5_000)]
    batch: usize,
    /// Seconds of each `insert` run, and of the paced `Shipper` run.
    #[arg(long, default_value_t = 5)]
    insert_seconds: u64,
    /// Lines pushed into a `Shipper` as fast as possible.
    #[arg(long, default_value_t = 500_000)]
    lines: usize,
    /// Lines a second pushed into a `Shipper` at a steady pace (0: not run).
    #[arg(long, default_value_t = 50_000)]
    paced_rate: u64,
    /// Lines a second of the tail's steady run.
    #[arg(long, default_value_t = 200)]
    tail_rate: u64,
    /// Lines a second of the tail's burst.
    #[arg(long, default_value_t = 5_000)]
    burst_rate: u64,
    /// Seconds of each tail run.
    #[arg(long, default_value_t = 10)]
    tail_seconds: u64,
    /// NOTIFY round trips measured for the floor.
    #[arg(long, default_value_t = 500)]
    notifies: usize,
    /// Rounds of the proxy runs (quiet, then printing, each round).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
}

/// Functions the ingested lines are spread over.
const FUNCTIONS: usize = 20;

/// Bytes of a line's text.
const LINE_BYTES: usize = 100;

/// Lines a call prints, sharing its invocation.
const LINES_PER_CALL: usize = 5;

/// The function whose log is followed.
const TAILED: &str = "logs-tail";

/// The python functions of the proxy runs: one prints nothing of its own,
/// the other a line per call.
const QUIET: &str = "quiet";
const PRINTING: &str = "printing";

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn summary(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    json!({
        "n": ms.len(), "p50_ms": percentile(&ms, 50.0), "p99_ms": percentile(&ms, 99.0),
        "max_ms": percentile(&ms, 100.0),
    })
}

fn f(v: &serde_json::Value) -> f64 {
    v.as_f64().unwrap_or(f64::NAN)
}

/// A budget no run reaches: every line is kept unless the queue is full.
fn unbounded() -> LogsConfig {
    LogsConfig {
        lines_per_sec: u32::MAX / 4,
        bytes_per_sec: u64::MAX / 4,
        ..LogsConfig::default()
    }
}

fn padded(mut text: String) -> String {
    while text.len() < LINE_BYTES {
        text.push('.');
    }
    text
}

/// Lines `from..from + n` of namespace `bench`: about [`LINE_BYTES`] each,
/// over [`FUNCTIONS`] functions, [`LINES_PER_CALL`] to an invocation.
fn lines(from: usize, n: usize) -> Vec<NewLine> {
    let mut invocation = Uuid::now_v7();
    (from..from + n)
        .map(|i| {
            if i % LINES_PER_CALL == 0 {
                invocation = Uuid::now_v7();
            }
            let function = (i / LINES_PER_CALL) % FUNCTIONS;
            NewLine {
                at: Utc::now(),
                namespace: "bench".into(),
                function: format!("f{function:02}"),
                version: Some(1),
                instance: format!("127.0.0.1:{}", 40_000 + function),
                invocation: Some(invocation),
                stream: if i % 10 == 9 {
                    Stream::Stderr
                } else {
                    Stream::Stdout
                },
                line: padded(format!(
                    "GET /orders/{} answered 200 in {} ms (line {i})",
                    i % 1000,
                    i % 97
                )),
                truncated: false,
            }
        })
        .collect()
}

pub async fn run(server: &Server, args: LogsArgs) -> anyhow::Result<serde_json::Value> {
    let mut figures = serde_json::Map::new();
    figures.insert("bench".into(), json!("logs"));
    if args.part.contains(&Part::Ingest) {
        figures.insert("ingest".into(), ingest(server, &args).await?);
    }
    if args.part.contains(&Part::Tail) || args.part.contains(&Part::Proxy) {
        let on_dev = SlessDev::measured(server, &args.dev, async |dev| {
            let (quiet_version, _) = deploy(dev).await?;
            let mut figures = serde_json::Map::new();
            if args.part.contains(&Part::Tail) {
                let base = Instant::now();
                let tail = function_log_tail(dev, &args, base).await?;
                let build = build_log_tail(dev, &args, base, QUIET, quiet_version).await?;
                let floor = notify_floor(dev.db_url(), args.notifies).await?;
                figures.insert(
                    "tail".into(),
                    json!({ "function_log": tail, "build_log": build, "notify_floor": floor }),
                );
            }
            if args.part.contains(&Part::Proxy) {
                figures.insert("proxy".into(), proxy(dev, &args).await?);
            }
            Ok(serde_json::Value::Object(figures))
        })
        .await?;
        if let serde_json::Value::Object(on_dev) = on_dev {
            figures.extend(on_dev);
        }
    }
    Ok(serde_json::Value::Object(figures))
}
