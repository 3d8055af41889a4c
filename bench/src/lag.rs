//! Live projector lag: appends at a steady rate while the projector runs
//! live (`sless_projector::run`, woken by LISTEN), measuring append commit →
//! the event applied to the read model.
//!
//! The moment an event becomes visible is observed from the projector's own
//! commits: a trigger on `projector_checkpoints` (created in the benchmark's
//! database only) NOTIFYs the new (xid, position) checkpoint, which is
//! delivered when the projector's transaction commits. An event is visible
//! from the first checkpoint at or past its (xid, position), since the
//! projector applies the log in that order.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use sless_domain::{FunctionEvent, FunctionKey, FunctionName, FunctionSpec, Namespace};
use sless_domain::{Runtime, SourceVersion};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sqlx::postgres::PgListener;
use tokio::sync::watch;

use crate::{Server, percentile, wait_for};

const CHANNEL: &str = "bench_checkpoint";

const TRIGGER: &str = "
create function bench_checkpoint_moved() returns trigger language plpgsql as $$
begin
    perform pg_notify('bench_checkpoint', new.xid || ' ' || new.position);
    return null;
end $$;
create trigger bench_checkpoint_moved after insert or update on projector_checkpoints
    for each row execute function bench_checkpoint_moved();
";

/// Streams per appending task: each task owns its streams, so a stream's
/// appends never race each other.
const STREAMS_PER_TASK: u64 = 50;

#[derive(clap::Args)]
pub struct LagArgs {
    /// Appends per second (one event per transaction) while measuring lag.
    #[arg(long, default_value_t = 2_000)]
    rate: u64,
    /// Seconds of appending while measuring lag.
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Appending tasks (connections) for the lag measurement.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
}

/// One committed append: where it sits in the log and when it committed.
struct Committed {
    key: (i64, i64),
    at: Instant,
    /// How long begin → commit took.
    took: Duration,
    /// How late it started against its schedule.
    late: Duration,
}

/// Version `version` of function `name`: created first, then uploads.
fn new_event(name: &str, version: u64) -> anyhow::Result<(String, NewEvent)> {
    let key = FunctionKey::new(Namespace::parse("bench")?, FunctionName::parse(name)?);
    let event = if version == 1 {
        FunctionEvent::FunctionCreated {
            spec: FunctionSpec {
                runtime: Runtime::Python311,
                entrypoint: "handler.handle".into(),
                memory_mb: 128,
                timeout_sec: 30,
                env_vars: Default::default(),
                scale_to_zero_after_sec: None,
                scaling: Default::default(),
            },
        }
    } else {
        let v = (version - 1) as u32;
        FunctionEvent::FunctionUploaded(SourceVersion {
            version: v,
            sha256: format!("{name}-{v}"),
            size: 1000,
            files: 3,
            zip_key: "blobs/zips/x.zip".into(),
            context_sha256: "c".into(),
            context_key: "blobs/contexts/c.tar.gz".into(),
            runtime: None,
        })
    };
    let metadata = Metadata {
        actor: "bench".into(),
        ..Default::default()
    };
    Ok((key.stream(), NewEvent::function(&key, &event, metadata)))
}

/// A checkpoint the projector committed, (xid, position), and when its
/// NOTIFY arrived.
type Seen = ((i64, i64), Instant);

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

fn summary(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    json!({
        "p50_ms": percentile(&ms, 50.0), "p99_ms": percentile(&ms, 99.0),
        "max_ms": percentile(&ms, 100.0),
    })
}

pub async fn run(server: &Server, args: &LagArgs) -> anyhow::Result<serde_json::Value> {
    let tasks = args.concurrency.max(1) as u64;
    let (pool, url) = server.database(tasks as u32 + 2).await?;
    sqlx::raw_sql(TRIGGER).execute(&pool).await?;

    // Checkpoints as the projector commits them, in commit order.
    let seen: Arc<Mutex<Vec<Seen>>> = Arc::default();
    let mut listener = PgListener::connect(&url).await?;
    listener.listen(CHANNEL).await?;
    let (stop_tx, stop) = watch::channel(false);
    let listening = {
        let seen = seen.clone();
        let mut stop = stop.clone();
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    _ = stop.changed() => return Ok::<(), anyhow::Error>(()),
                    n = listener.recv() => {
                        let n = n?;
                        let at = Instant::now();
                        let mut parts = n.payload().split(' ').map(str::parse::<i64>);
                        if let (Some(Ok(xid)), Some(Ok(position))) = (parts.next(), parts.next()) {
                            seen.lock().unwrap().push(((xid, position), at));
                        }
                    }
                }
            }
        })
    };
    let projector_pool = sless_store::connect(&url, 4).await?;
    let projector = tokio::spawn(sless_projector::run(
        projector_pool,
        Duration::from_secs(1),
        stop.clone(),
    ));

    // Warm up: one function created and seen applied.
    let (stream, event) = new_event("warm-up", 1)?;
    let mut tx = pool.begin().await?;
    eventlog::append(&mut tx, &stream, 0, &[event]).await?;
    tx.commit().await?;
    wait_for(
        "the projector to apply a first event",
        Duration::from_secs(30),
        Duration::from_millis(5),
        || {
            let any = !seen.lock().unwrap().is_empty();
            async move { Ok(any.then_some(())) }
        },
    )
    .await?;

    let total = args.rate * args.duration;
    let streams = tasks * STREAMS_PER_TASK;
    let interval = Duration::from_secs_f64(1.0 / args.rate as f64);
    let start = Instant::now() + Duration::from_millis(50);
    eprintln!(
        "appending {total} events at {}/s over {streams} streams with {tasks} connections; projector live",
        args.rate
    );
    let mut appenders = Vec::new();
    for t in 0..tasks {
        let pool = pool.clone();
        appenders.push(tokio::spawn(async move {
            let mut done = Vec::new();
            // Tick i belongs to task i % tasks and stream i % streams, which
            // task i % tasks owns since `streams` is a multiple of `tasks`.
            for i in (t..total).step_by(tasks as usize) {
                let due = start + interval.mul_f64(i as f64);
                tokio::time::sleep_until(due.into()).await;
                let began = Instant::now();
                let (stream, event) = new_event(&format!("f{}", i % streams), i / streams + 1)?;
                let mut tx = pool.begin().await?;
                let appended = eventlog::append(&mut tx, &stream, i / streams, &[event]).await?;
                let xid: i64 = sqlx::query_scalar("select pg_current_xact_id()::text::bigint")
                    .fetch_one(&mut *tx)
                    .await?;
                tx.commit().await?;
                let at = Instant::now();
                done.push(Committed {
                    key: (xid, appended.position),
                    at,
                    took: at - began,
                    late: began.saturating_duration_since(due),
                });
            }
            Ok::<_, anyhow::Error>(done)
        }));
    }
    let mut committed = Vec::with_capacity(total as usize);
    for a in appenders {
        committed.extend(a.await??);
    }
    let appending = start.elapsed().as_secs_f64();
    let last = committed.iter().map(|c| c.key).max();
    if let Some(last) = last {
        // Let the projector finish; events it never applies count as missing.
        let caught_up = wait_for(
            "the projector to apply the last append",
            Duration::from_secs(60),
            Duration::from_millis(5),
            || {
                let done = seen.lock().unwrap().last().is_some_and(|(k, _)| *k >= last);
                async move { Ok(Some(done).filter(|d| *d)) }
            },
        )
        .await;
        if let Err(e) = caught_up {
            eprintln!("{e:#}");
        }
    }
    let _ = stop_tx.send(true);
    projector.await??;
    listening.await??;

    let seen = seen.lock().unwrap();
    let mut lag = Vec::with_capacity(committed.len());
    let mut missing = 0;
    for c in &committed {
        let first = seen.partition_point(|(k, _)| *k < c.key);
        match seen.get(first) {
            Some((_, visible)) => lag.push(ms(visible.saturating_duration_since(c.at))),
            None => missing += 1,
        }
    }
    let achieved = committed.len() as f64 / appending;
    let over = |limit: f64| lag.iter().filter(|&&l| l >= limit).count();
    let (over_100ms, over_500ms) = (over(100.0), over(500.0));
    let lag_summary = summary(lag);
    let commit = summary(committed.iter().map(|c| ms(c.took)).collect());
    let late = summary(committed.iter().map(|c| ms(c.late)).collect());
    eprintln!(
        "live lag over {} appends ({achieved:.0}/s achieved): p50 {:.2} ms, p99 {:.2} ms, max {:.2} ms; \
         {over_100ms} took 100 ms or more, {over_500ms} 500 ms or more, {missing} never seen; \
         {} projector commits",
        committed.len(),
        lag_summary["p50_ms"].as_f64().unwrap_or(f64::NAN),
        lag_summary["p99_ms"].as_f64().unwrap_or(f64::NAN),
        lag_summary["max_ms"].as_f64().unwrap_or(f64::NAN),
        seen.len(),
    );
    eprintln!(
        "append begin→commit p50 {:.2} ms, p99 {:.2} ms; start behind schedule p99 {:.2} ms",
        commit["p50_ms"].as_f64().unwrap_or(f64::NAN),
        commit["p99_ms"].as_f64().unwrap_or(f64::NAN),
        late["p99_ms"].as_f64().unwrap_or(f64::NAN),
    );
    Ok(json!({
        "rate": args.rate, "achieved_rate": achieved, "duration_s": args.duration,
        "connections": tasks, "streams": streams, "appends": committed.len(),
        "p50_ms": lag_summary["p50_ms"], "p99_ms": lag_summary["p99_ms"],
        "max_ms": lag_summary["max_ms"], "over_100ms": over_100ms, "over_500ms": over_500ms,
        "missing": missing,
        "projector_commits": seen.len(), "append_commit": commit, "behind_schedule": late,
    }))
}
