//! Event-log append throughput, beside pgbench's one-row INSERT per
//! transaction with the same number of clients on the same server (the
//! ceiling for one write per transaction).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;
use sless_store::command;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::idempotency::StoredAnswer;
use sless_store::queue;

use crate::Server;
use crate::pgbench::Ceiling;

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Mode {
    /// One event per statement (in autocommit), each to a new stream.
    Distinct,
    /// As `distinct`, on a connection each client holds for the whole run:
    /// without the round trip sqlx's pool makes on each return (a Sync
    /// message and its answer), which `distinct` pays after every append.
    Held,
    /// A whole command per statement, each to a new stream: the event, its
    /// work item and its answer under an idempotency key.
    Command,
    /// One event per statement, all to one stream, appended at the stream's
    /// current version (never a conflict).
    Hot,
    /// One event per statement, all to one stream: each client reads the
    /// stream's version and appends expecting it (conflicts counted).
    HotRead,
    /// 100 events per statement, each to a new stream.
    Batch,
}

impl Mode {
    fn name(self) -> &'static str {
        match self {
            Mode::Distinct => "distinct",
            Mode::Held => "held",
            Mode::Command => "command",
            Mode::Hot => "hot",
            Mode::HotRead => "hot-read",
            Mode::Batch => "batch",
        }
    }
}

#[derive(clap::Args)]
pub struct AppendArgs {
    /// What to append, comma-separated.
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "distinct,held,command,hot,hot-read,batch"
    )]
    mode: Vec<Mode>,
    /// Client counts, comma-separated; each runs every mode and pgbench.
    #[arg(long, value_delimiter = ',', default_value = "1,4,16")]
    concurrency: Vec<usize>,
    /// Seconds per run (each mode and each pgbench run).
    #[arg(long, default_value_t = 10)]
    duration: u64,
    /// Leave out the pgbench ceiling.
    #[arg(long)]
    no_pgbench: bool,
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

/// One run: `clients` appenders for `seconds`; its figures.
async fn appends(
    server: &Server,
    mode: Mode,
    clients: usize,
    seconds: u64,
) -> anyhow::Result<serde_json::Value> {
    let (pool, _) = server.database(clients as u32 + 2).await?;
    let ringer = queue::Ringer::new(pool.clone());
    let events = Arc::new(AtomicU64::new(0));
    let transactions = Arc::new(AtomicU64::new(0));
    let conflicts = Arc::new(AtomicU64::new(0));
    let deadline = Instant::now() + Duration::from_secs(seconds);
    let started = Instant::now();
    let mut tasks = Vec::new();
    for c in 0..clients {
        let (pool, ringer, events, transactions, conflicts) = (
            pool.clone(),
            ringer.clone(),
            events.clone(),
            transactions.clone(),
            conflicts.clone(),
        );
        tasks.push(tokio::spawn(async move {
            let mut held = match mode {
                Mode::Held => Some(pool.acquire().await?),
                _ => None,
            };
            let mut i: u64 = 0;
            while Instant::now() < deadline {
                i += 1;
                let (stream, expected, batch) = match mode {
                    Mode::Distinct | Mode::Held | Mode::Command => {
                        (format!("bench/{c}/{i}"), Some(0), 1)
                    }
                    Mode::Batch => (format!("bench/{c}/{i}"), Some(0), 100),
                    Mode::Hot => ("bench/hot".to_owned(), None, 1),
                    Mode::HotRead => {
                        let v: i64 = sqlx::query_scalar("select coalesce(max(version), 0)::bigint from events where stream = 'bench/hot'")
                            .fetch_one(&pool)
                            .await?;
                        ("bench/hot".to_owned(), Some(v as u64), 1)
                    }
                };
                let new: Vec<_> = (0..batch).map(|k| event(i * 1000 + k)).collect();
                let mut pooled;
                let conn: &mut sqlx::PgConnection = match held.as_mut() {
                    Some(conn) => conn,
                    None => {
                        pooled = pool.acquire().await?;
                        &mut pooled
                    }
                };
                let appended = match (mode, expected) {
                    (Mode::Command, _) => {
                        let key = format!("bench-{c}-{i}");
                        let answer = StoredAnswer {
                            request_hash: key.clone(),
                            status: 201,
                            body: json!({ "stream": stream, "position": command::POSITION_PENDING }),
                            headers: Default::default(),
                        };
                        let write = command::Write {
                            stream: &stream,
                            expected,
                            events: &new,
                            work: Some((queue::NOOP, &stream)),
                            answer: Some(command::Keep { actor: "bench", key: &key, answer: &answer }),
                        };
                        let done = command::run(conn, write).await.map(|_| ());
                        // As the API does: the workers are woken after the commit.
                        ringer.ring();
                        done
                    }
                    (_, Some(expected)) => eventlog::append(conn, &stream, expected, &new).await.map(|_| ()),
                    (_, None) => eventlog::append_at_current(conn, &stream, &new).await.map(|_| ()),
                };
                match appended {
                    Ok(()) => {
                        events.fetch_add(batch, Ordering::Relaxed);
                        transactions.fetch_add(1, Ordering::Relaxed);
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
    let tx_per_s = transactions.load(Ordering::Relaxed) as f64 / elapsed;
    eprintln!(
        "append {} x{clients}: {n} events in {elapsed:.1} s = {per_s:.0} events/s",
        mode.name()
    );
    pool.close().await;
    Ok(json!({
        "mode": mode.name(), "concurrency": clients, "seconds": elapsed, "events": n,
        "events_per_s": per_s, "transactions_per_s": tx_per_s,
        "conflicts": conflicts.load(Ordering::Relaxed),
    }))
}

fn ratio(a: f64, b: f64) -> Option<f64> {
    (b > 0.0).then(|| a / b)
}

pub async fn run(server: &Server, args: AppendArgs) -> anyhow::Result<serde_json::Value> {
    let ceiling = if args.no_pgbench {
        None
    } else {
        Some(Ceiling::prepare(server).await?)
    };
    let mut runs = Vec::new();
    let mut ceilings = Vec::new();
    for &clients in &args.concurrency {
        // The ceiling first, then every mode, so each mode sits next to it.
        let tps = match &ceiling {
            Some(c) => {
                let r = c.run(clients, args.duration).await?;
                let tps = r["tps"].as_f64();
                ceilings.push(r);
                tps
            }
            None => None,
        };
        for &mode in &args.mode {
            let mut r = appends(server, mode, clients, args.duration).await?;
            let per_s = r["events_per_s"].as_f64().unwrap_or(0.0);
            if let Some(tps) = tps {
                r["pgbench_tps"] = json!(tps);
                r["vs_pgbench"] = json!(ratio(per_s, tps));
            }
            runs.push(r);
        }
    }
    // Batched against single-event appends to distinct streams, per client count.
    let single = |clients: usize| {
        runs.iter()
            .find(|r| r["mode"] == "distinct" && r["concurrency"] == clients)
            .and_then(|r| r["events_per_s"].as_f64())
    };
    let batch_vs_single: Vec<_> = runs
        .iter()
        .filter(|r| r["mode"] == "batch")
        .filter_map(|r| {
            let clients = r["concurrency"].as_u64()? as usize;
            let x = ratio(r["events_per_s"].as_f64()?, single(clients)?)?;
            Some(json!({ "concurrency": clients, "ratio": x }))
        })
        .collect();
    eprintln!("\n| clients | mode | events/s | pgbench tps | append/pgbench |");
    eprintln!("|---:|---|---:|---:|---:|");
    for r in &runs {
        eprintln!(
            "| {} | {} | {:.0} | {} | {} |",
            r["concurrency"],
            r["mode"].as_str().unwrap_or(""),
            r["events_per_s"].as_f64().unwrap_or(0.0),
            r["pgbench_tps"]
                .as_f64()
                .map_or("-".into(), |v| format!("{v:.0}")),
            r["vs_pgbench"]
                .as_f64()
                .map_or("-".into(), |v| format!("{v:.2}")),
        );
    }
    for b in &batch_vs_single {
        eprintln!(
            "batched vs single-event x{}: {:.1}x",
            b["concurrency"],
            b["ratio"].as_f64().unwrap_or(0.0)
        );
    }
    Ok(json!({
        "bench": "append", "seconds_per_run": args.duration, "runs": runs,
        "pgbench": ceilings, "batch_vs_single": batch_vs_single,
    }))
}
