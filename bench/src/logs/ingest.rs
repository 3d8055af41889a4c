//! Lines ingested per second: `insert` beside its peers, and the `Shipper`.

use std::time::{Duration, Instant};

use serde_json::json;
use sless_store::PgPool;
use sless_store::function_logs::{self, NewLine, Stream};
use sless_workers::logs::Shipper;

use super::*;
use crate::{Server, percentile};

/// Where an `insert` run writes.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Target {
    /// `function_logs::insert`: partitions, two indexes, the lock, NOTIFY.
    Sless,
    /// The same statement into an unpartitioned table with the two indexes.
    Indexed,
    /// The same statement into an unpartitioned table with no index.
    Bare,
}

impl Target {
    fn name(self) -> &'static str {
        match self {
            Target::Sless => "function_logs::insert",
            Target::Indexed => "unpartitioned, two indexes",
            Target::Bare => "unpartitioned, no index",
        }
    }
}

const PEER_TABLE: &str = "
create sequence bench_rows_id;
create table bench_rows (like function_logs including defaults);
";

const PEER_INDEXES: &str = "
create index on bench_rows (namespace, function, id);
create index on bench_rows (invocation, id) where invocation is not null;
";

/// The statement of `function_logs::insert` into `bench_rows`, alone: no
/// transaction around it, no lock, no NOTIFY.
async fn insert_peer(pool: &PgPool, lines: &[NewLine]) -> anyhow::Result<u64> {
    let n = lines.len();
    let mut at = Vec::with_capacity(n);
    let mut namespaces = Vec::with_capacity(n);
    let mut functions = Vec::with_capacity(n);
    let mut versions = Vec::with_capacity(n);
    let mut instances = Vec::with_capacity(n);
    let mut invocations = Vec::with_capacity(n);
    let mut streams = Vec::with_capacity(n);
    let mut texts = Vec::with_capacity(n);
    let mut truncated = Vec::with_capacity(n);
    for l in lines {
        at.push(l.at);
        namespaces.push(l.namespace.as_str());
        functions.push(l.function.as_str());
        versions.push(l.version.map(|v| v as i32));
        instances.push(l.instance.as_str());
        invocations.push(l.invocation);
        streams.push(if l.stream == Stream::Stderr { 2i16 } else { 1 });
        texts.push(l.line.replace('\0', "\u{fffd}"));
        truncated.push(l.truncated);
    }
    let done = sqlx::query(
        "insert into bench_rows
           (id, at, namespace, function, version, instance, invocation, stream, line, truncated)
         select nextval('bench_rows_id'), * from unnest(
           $1::timestamptz[], $2::text[], $3::text[], $4::int4[], $5::text[],
           $6::uuid[], $7::int2[], $8::text[], $9::bool[])",
    )
    .bind(at)
    .bind(namespaces)
    .bind(functions)
    .bind(versions)
    .bind(instances)
    .bind(invocations)
    .bind(streams)
    .bind(texts)
    .bind(truncated)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}

/// `writers` writers each writing batches of `batch` lines to `target` for
/// `seconds`, on a fresh database with today's partitions made.
async fn insert_run(
    server: &Server,
    target: Target,
    writers: usize,
    batch: usize,
    seconds: u64,
) -> anyhow::Result<serde_json::Value> {
    let (pool, _) = server.database(writers as u32 + 1).await?;
    let today = function_logs::today(&pool).await?;
    function_logs::ensure_days(&pool, today, 3).await?;
    match target {
        Target::Sless => {}
        Target::Indexed => {
            sqlx::raw_sql(PEER_TABLE).execute(&pool).await?;
            sqlx::raw_sql(PEER_INDEXES).execute(&pool).await?;
        }
        Target::Bare => {
            sqlx::raw_sql(PEER_TABLE).execute(&pool).await?;
        }
    }
    let started = Instant::now();
    let deadline = started + Duration::from_secs(seconds);
    let mut tasks = Vec::new();
    for w in 0..writers {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let lines = lines(w * batch, batch);
            let (mut written, mut took) = (0u64, Vec::new());
            while Instant::now() < deadline {
                let t = Instant::now();
                written += match target {
                    Target::Sless => function_logs::insert(&pool, &lines).await?,
                    Target::Indexed | Target::Bare => insert_peer(&pool, &lines).await?,
                };
                took.push(ms(t.elapsed()));
            }
            anyhow::Ok((written, took))
        }));
    }
    let (mut written, mut took) = (0, Vec::new());
    for t in tasks {
        let (n, ms) = t.await??;
        written += n;
        took.extend(ms);
    }
    let elapsed = started.elapsed().as_secs_f64();
    pool.close().await;
    let per_s = written as f64 / elapsed;
    let batches = summary(took);
    eprintln!(
        "{} x{writers}: {written} lines in {elapsed:.1} s = {per_s:.0} lines/s \
         (a batch of {batch}: p50 {:.1} ms, p99 {:.1} ms)",
        target.name(),
        f(&batches["p50_ms"]),
        f(&batches["p99_ms"]),
    );
    Ok(json!({
        "target": target.name(), "writers": writers, "batch": batch, "seconds": elapsed,
        "lines": written, "lines_per_s": per_s, "batch_ms": batches,
    }))
}

/// The lines kept and the lines counted dropped in a database.
async fn kept_and_dropped(pool: &PgPool) -> anyhow::Result<(i64, i64)> {
    let kept: i64 = sqlx::query_scalar("select count(*) from function_logs")
        .fetch_one(pool)
        .await?;
    let dropped: i64 =
        sqlx::query_scalar("select coalesce(sum(dropped), 0)::bigint from function_log_drops")
            .fetch_one(pool)
            .await?;
    Ok((kept, dropped))
}

/// `n` lines pushed into a `Shipper` as fast as the loop goes (`rate`
/// None), or `rate` a second; timed until the writer, its `Shipper`
/// dropped, wrote the last line kept.
async fn shipper_run(
    server: &Server,
    n: usize,
    rate: Option<u64>,
) -> anyhow::Result<serde_json::Value> {
    let (pool, _) = server.database(4).await?;
    let config = unbounded();
    // The partitions first, as a worker has them before its lines come.
    sless_workers::logs::sweep(&pool, &config).await?;
    let queue = config.queue;
    let (shipper, writer) = Shipper::start(pool.clone(), config);
    let mut lines = lines(0, n).into_iter();
    // Each push's own time (µs), and the push loop's without its sleeps.
    let mut took = Vec::with_capacity(n);
    let mut pushing = Duration::ZERO;
    let started = Instant::now();
    let mut i = 0;
    while i < n {
        // Every line at once, or the lines due by now, every millisecond.
        let due = match rate {
            None => n,
            Some(rate) => ((started.elapsed().as_secs_f64() * rate as f64) as usize + 1).min(n),
        };
        let t = Instant::now();
        for l in lines.by_ref().take(due - i) {
            let t = Instant::now();
            shipper.push(l);
            took.push(t.elapsed().as_secs_f64() * 1e6);
        }
        pushing += t.elapsed();
        i = due;
        if i < n {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    let pushed_s = started.elapsed().as_secs_f64();
    drop(shipper);
    writer.await?;
    let done_s = started.elapsed().as_secs_f64();
    let (kept, dropped) = kept_and_dropped(&pool).await?;
    pool.close().await;
    let kept_per_s = kept as f64 / done_s;
    let mode = match rate {
        None => "as fast as possible".to_owned(),
        Some(r) => format!("{r}/s"),
    };
    let over_100us = took.iter().filter(|us| **us >= 100.0).count();
    took.sort_by(f64::total_cmp);
    let push_us = json!({
        "p50": percentile(&took, 50.0), "p99": percentile(&took, 99.0),
        "p99_9": percentile(&took, 99.9), "max": percentile(&took, 100.0),
        "over_100us": over_100us,
    });
    eprintln!(
        "Shipper, {n} lines pushed {mode}: pushed in {pushed_s:.2} s (the push loop {:.1} ms; a push \
         p50 {:.2} µs, p99.9 {:.1} µs, longest {:.1} µs, {over_100us} of 100 µs or more), all written \
         {done_s:.2} s after the first; {kept} kept = {kept_per_s:.0} lines/s, {dropped} dropped \
         (queue of {queue})",
        ms(pushing),
        f(&push_us["p50"]),
        f(&push_us["p99_9"]),
        f(&push_us["max"]),
    );
    Ok(json!({
        "lines": n, "rate": rate, "queue": queue, "pushed_s": pushed_s,
        "push_loop_ms": ms(pushing), "pushes_per_s": n as f64 / pushing.as_secs_f64(),
        "push_us": push_us, "written_s": done_s,
        "kept": kept, "dropped": dropped, "kept_per_s": kept_per_s,
        "behind_s": done_s - pushed_s,
    }))
}

pub(super) async fn ingest(server: &Server, args: &LogsArgs) -> anyhow::Result<serde_json::Value> {
    let mut runs = Vec::new();
    for &writers in &args.writers {
        // The peers first, so each figure of sless sits next to them.
        for target in [Target::Bare, Target::Indexed, Target::Sless] {
            runs.push(insert_run(server, target, writers, args.batch, args.insert_seconds).await?);
        }
    }
    let at_once = shipper_run(server, args.lines, None).await?;
    let paced = match args.paced_rate {
        0 => serde_json::Value::Null,
        rate => {
            let n = (rate * args.insert_seconds) as usize;
            shipper_run(server, n, Some(rate)).await?
        }
    };
    let per_s = |target: Target, writers: usize| {
        runs.iter()
            .find(|r| r["target"] == target.name() && r["writers"] == writers)
            .map_or(f64::NAN, |r| f(&r["lines_per_s"]))
    };
    let vs: Vec<_> = args
        .writers
        .iter()
        .map(|&w| {
            let (s, i, b) = (
                per_s(Target::Sless, w),
                per_s(Target::Indexed, w),
                per_s(Target::Bare, w),
            );
            eprintln!(
                "x{w}: function_logs::insert {s:.0} lines/s = {:.2}x the bare rows ({b:.0}), \
                 {:.2}x the indexed table ({i:.0})",
                s / b,
                s / i
            );
            json!({ "writers": w, "vs_bare": s / b, "vs_indexed": s / i, "indexed_vs_bare": i / b })
        })
        .collect();
    Ok(json!({
        "insert": runs, "insert_vs_peers": vs, "shipper_at_once": at_once, "shipper_paced": paced,
    }))
}
