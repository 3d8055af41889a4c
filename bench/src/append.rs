//! Event-log append throughput.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use sless_store::eventlog::{self, Metadata, NewEvent};

use crate::Server;

#[derive(Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
pub enum Mode {
    /// One event per transaction, each to a new stream.
    Distinct,
    /// One event per transaction, all to one stream (conflicts retried).
    Hot,
    /// 100 events per transaction, each transaction to a new stream.
    Batch,
}

#[derive(clap::Args)]
pub struct AppendArgs {
    #[arg(long, value_enum, default_value = "distinct")]
    mode: Mode,
    #[arg(long, default_value_t = 4)]
    concurrency: usize,
    #[arg(long, default_value_t = 10)]
    duration: u64,
}

fn event(i: u64) -> NewEvent {
    NewEvent {
        event_type: "BenchEvent".into(),
        namespace: "bench".into(),
        data: json!({ "i": i, "padding": "x".repeat(120) }),
        metadata: Metadata {
            actor: "bench".into(),
            ..Default::default()
        },
    }
}

pub async fn run(server: &Server, args: AppendArgs) -> anyhow::Result<serde_json::Value> {
    let (pool, _) = server.database(args.concurrency as u32 + 2).await?;
    let events = Arc::new(AtomicU64::new(0));
    let conflicts = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(args.duration);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..args.concurrency {
        let (pool, events, conflicts) = (pool.clone(), events.clone(), conflicts.clone());
        tasks.push(tokio::spawn(async move {
            let mut i: u64 = 0;
            while Instant::now() < deadline {
                i += 1;
                let (stream, expected, batch) = match args.mode {
                    Mode::Distinct => (format!("bench/{c}/{i}"), 0, 1),
                    Mode::Batch => (format!("bench/{c}/{i}"), 0, 100),
                    Mode::Hot => {
                        let v: i64 = sqlx::query_scalar("select coalesce(max(version), 0)::bigint from events where stream = 'bench/hot'")
                            .fetch_one(&pool)
                            .await?;
                        ("bench/hot".to_owned(), v as u64, 1)
                    }
                };
                let new: Vec<_> = (0..batch).map(|k| event(i * 1000 + k)).collect();
                let mut tx = pool.begin().await?;
                match eventlog::append(&mut tx, &stream, expected, &new).await {
                    Ok(_) => {
                        tx.commit().await?;
                        events.fetch_add(batch, Ordering::Relaxed);
                    }
                    Err(sless_store::Error::Conflict { .. }) => {
                        conflicts.fetch_add(1, Ordering::Relaxed);
                    }
                    Err(e) => return Err(anyhow::Error::from(e)),
                }
            }
            Ok::<(), anyhow::Error>(())
        }));
    }
    for t in tasks {
        t.await??;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let n = events.load(Ordering::Relaxed);
    let per_s = n as f64 / elapsed;
    let mode = match args.mode {
        Mode::Distinct => "distinct",
        Mode::Hot => "hot",
        Mode::Batch => "batch",
    };
    eprintln!(
        "append {mode} x{}: {n} events in {elapsed:.1} s = {per_s:.0} events/s",
        args.concurrency
    );
    Ok(json!({
        "bench": "append", "mode": mode, "concurrency": args.concurrency, "seconds": elapsed,
        "events": n, "events_per_s": per_s, "conflicts": conflicts.load(Ordering::Relaxed),
    }))
}
