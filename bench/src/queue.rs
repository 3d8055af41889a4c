//! Queue benchmarks: drain throughput and pickup latency, through the real
//! worker loop (claim in batches, lease, heartbeat, fenced completion).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use sless_store::PgPool;
use sless_store::blobs::{BlobStore, S3Config};
use sless_store::queue::{self, WorkItem};
use sless_workers::local::{LocalDriver, LocalDriverConfig};
use sless_workers::{Reconciler, Worker, WorkerConfig};
use tokio::sync::watch;

use crate::otlp::Sink;
use crate::{Server, cpu, percentile};
use sless_telemetry::trace::Exporter;

#[derive(clap::Args)]
pub struct DrainArgs {
    /// Items pre-enqueued, each with a key of its own.
    #[arg(long, default_value_t = 100_000)]
    items: i64,
    /// Items handled at once by each worker.
    #[arg(long, default_value_t = 16)]
    concurrency: usize,
    /// Items each worker claims ahead of free handlers (its local queue).
    #[arg(long, default_value_t = 256)]
    prefetch: usize,
    /// Worker loops per process, each with its own connection pool.
    #[arg(long, default_value_t = 1)]
    workers: usize,
    /// Worker processes: 1 runs the workers in this process; more start
    /// that many copies of this binary as workers.
    #[arg(long, default_value_t = 1)]
    processes: usize,
    /// What the workers record: nothing, metrics (sless's default), or
    /// metrics and traces of every item (sampled at 100%, sent over OTLP to
    /// a sink on loopback).
    #[arg(long, value_enum, default_value = "metrics")]
    telemetry: Telemetry,
    /// (internal) Run as a worker process against this database until killed.
    #[arg(long, hide = true)]
    join: Option<String>,
}

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Telemetry {
    Off,
    Metrics,
    Traces,
}

impl Telemetry {
    fn name(self) -> &'static str {
        match self {
            Telemetry::Off => "off",
            Telemetry::Metrics => "metrics",
            Telemetry::Traces => "traces",
        }
    }

    /// Sets this process's metrics and traces up as `sless worker` would:
    /// the traces' sink and exporter, when they are on.
    async fn install(self) -> anyhow::Result<Option<(Sink, Exporter)>> {
        use tracing_subscriber::layer::SubscriberExt;
        use tracing_subscriber::util::SubscriberInitExt;
        if self == Telemetry::Off {
            sless_telemetry::install(sless_telemetry::Metrics::off());
            return Ok(None);
        }
        sless_telemetry::install(sless_telemetry::Metrics::default());
        if self == Telemetry::Metrics {
            return Ok(None);
        }
        let sink = Sink::start().await?;
        let endpoint = sink.endpoint.clone();
        let settings = sless_telemetry::trace::Settings::read("bench", |k| {
            (k == "OTEL_EXPORTER_OTLP_ENDPOINT").then(|| endpoint.clone())
        })
        .map_err(anyhow::Error::msg)?;
        let (layer, exporter) =
            sless_telemetry::trace::install(&settings, tokio::runtime::Handle::current())
                .map_err(anyhow::Error::msg)?
                .expect("an endpoint is set");
        tracing_subscriber::registry().with(layer).init();
        Ok(Some((sink, exporter)))
    }
}

#[derive(clap::Args)]
pub struct PickupArgs {
    #[arg(long, default_value_t = 500)]
    items: usize,
    /// Pause between enqueues.
    #[arg(long, default_value_t = 10)]
    interval_ms: u64,
}

/// A worker for no-op items. Its driver and blob store are never touched.
fn worker(
    pool: PgPool,
    id: String,
    concurrency: usize,
    prefetch: usize,
) -> anyhow::Result<Worker<LocalDriver>> {
    let dir = std::env::temp_dir().join(format!(
        "sless-bench-driver-{}",
        uuid::Uuid::new_v4().simple()
    ));
    let driver = Arc::new(LocalDriver::new(LocalDriverConfig::new(dir))?);
    let blobs = BlobStore::new(&S3Config {
        endpoint: Some("http://127.0.0.1:9".into()),
        region: "us-east-1".into(),
        bucket: "unused".into(),
        access_key: "unused".into(),
        secret_key: "unused".into(),
        force_path_style: true,
        presign_endpoint: None,
    });
    Ok(Worker {
        pool: pool.clone(),
        reconciler: Reconciler {
            pool,
            blobs,
            driver,
        },
        config: WorkerConfig {
            id,
            concurrency,
            prefetch,
            poll: Duration::from_millis(100),
            ..WorkerConfig::default()
        },
        on_start: None,
    })
}

/// Runs `args.workers` worker loops on `url` until `stop` turns true; counts
/// started items in `started`.
async fn run_workers(
    url: &str,
    args: &DrainArgs,
    name: &str,
    started: Arc<std::sync::atomic::AtomicI64>,
    stop: watch::Receiver<bool>,
) -> anyhow::Result<Vec<tokio::task::JoinHandle<sless_store::Result<()>>>> {
    let mut tasks = Vec::new();
    for w in 0..args.workers {
        let wpool = sless_store::connect(url, (args.concurrency as u32 + 4).min(90)).await?;
        let mut worker = worker(
            wpool,
            format!("{name}-{w}"),
            args.concurrency,
            args.prefetch,
        )?;
        let seen = started.clone();
        worker.on_start = Some(Arc::new(move |_: &WorkItem| {
            seen.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        }));
        tasks.push(tokio::spawn(worker.run(stop.clone())));
    }
    Ok(tasks)
}

pub async fn drain(server: &Server, args: DrainArgs) -> anyhow::Result<serde_json::Value> {
    let traces = args.telemetry.install().await?;
    if let Some(url) = &args.join {
        // A worker process of a multi-process drain: works until killed.
        let (_stop_tx, stop) = watch::channel(false);
        let name = format!("bench-p{}", std::process::id());
        let seen = Arc::new(std::sync::atomic::AtomicI64::new(0));
        for t in run_workers(url, &args, &name, seen, stop).await? {
            t.await??;
        }
        return Ok(json!({ "bench": "queue-drain-worker" }));
    }
    let (pool, url) = server.database(8).await?;
    sqlx::query(
        "insert into work_items (kind, key) select $1, 'noop/' || g from generate_series(1, $2) g",
    )
    .bind(queue::NOOP)
    .bind(args.items)
    .execute(&pool)
    .await?;
    // The same preparation as the peers' drains: fresh statistics, and no
    // checkpoint debt carried into the timed window.
    sqlx::query("vacuum (analyze) work_items")
        .execute(&pool)
        .await?;
    sqlx::query("checkpoint").execute(&pool).await?;
    eprintln!(
        "enqueued {} no-op items; draining with {} process(es) x {} worker(s) x {} handlers, prefetch {}",
        args.items, args.processes, args.workers, args.concurrency, args.prefetch
    );
    let backend: i32 = sqlx::query_scalar("select pg_backend_pid()")
        .fetch_one(&pool)
        .await?;
    let postmaster = cpu::postmaster_of(backend as u32);
    let (stop_tx, stop) = watch::channel(false);
    let cpu_start = cpu::Mark::now(postmaster);
    let started = Instant::now();
    let started_items = Arc::new(std::sync::atomic::AtomicI64::new(0));
    let mut tasks = Vec::new();
    let mut children = Vec::new();
    if args.processes > 1 {
        for _ in 0..args.processes {
            let child = tokio::process::Command::new(std::env::current_exe()?)
                .args(["queue-drain", "--join", &url])
                .args(["--concurrency", &args.concurrency.to_string()])
                .args(["--prefetch", &args.prefetch.to_string()])
                .args(["--workers", &args.workers.to_string()])
                .args(["--telemetry", args.telemetry.name()])
                .stdout(std::process::Stdio::null())
                .kill_on_drop(true)
                .spawn()?;
            children.push(child);
        }
    } else {
        tasks = run_workers(&url, &args, "bench", started_items.clone(), stop).await?;
        // Every item has started: from here, watch the table until no item
        // is left in it, i.e. every acknowledgement is committed. (Polling
        // the table all along would load the database being measured.)
        while started_items.load(std::sync::atomic::Ordering::Relaxed) < args.items {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
    // Worker processes cannot tell this one when they started the last item,
    // so it polls the table all along, less often.
    let poll = Duration::from_millis(if children.is_empty() { 2 } else { 10 });
    loop {
        let left: bool = sqlx::query_scalar(
            "select exists (select 1 from work_items where state = 'pending')
                 or exists (select 1 from work_items where state = 'running')",
        )
        .fetch_one(&pool)
        .await?;
        if !left {
            break;
        }
        tokio::time::sleep(poll).await;
    }
    let elapsed = started.elapsed().as_secs_f64();
    let spent = cpu_start.since(postmaster);
    let _ = stop_tx.send(true);
    for t in tasks {
        t.await??;
    }
    for mut c in children {
        c.kill().await?;
    }
    let jobs_per_s = args.items as f64 / elapsed;
    eprintln!(
        "drained {} items in {elapsed:.2} s: {jobs_per_s:.0} jobs/s (telemetry: {})",
        args.items,
        args.telemetry.name()
    );
    let per_item = spent.per_item(args.items as f64);
    eprintln!(
        "CPU: the machine {:.0}% busy ({} cores); per item {:.1} µs busy: PostgreSQL {}, \
         this process {:.1}, the rest {:.1}",
        spent.machine_busy_share * 100.0,
        spent.cores,
        per_item.machine_busy,
        per_item
            .postgres
            .map_or_else(|| "out of sight".to_owned(), |us| format!("{us:.1}")),
        per_item.own,
        per_item.other,
    );
    if let Some((sink, exporter)) = traces {
        exporter.shutdown();
        let (exports, bytes, spans) = sink.received();
        eprintln!("the OTLP sink received {spans} spans in {exports} exports, {bytes} bytes");
    }
    Ok(json!({
        "bench": "queue-drain", "items": args.items, "workers": args.workers,
        "telemetry": args.telemetry.name(),
        "processes": args.processes,
        "concurrency": args.concurrency, "prefetch": args.prefetch,
        "seconds": elapsed, "jobs_per_s": jobs_per_s,
        "cpu": spent, "cpu_us_per_item": per_item,
    }))
}

pub async fn pickup(server: &Server, args: PickupArgs) -> anyhow::Result<serde_json::Value> {
    let (pool, url) = server.database(4).await?;
    let started: Arc<Mutex<Vec<Option<Instant>>>> = Arc::new(Mutex::new(vec![None; args.items]));
    let mut w = worker(
        sless_store::connect(&url, 8).await?,
        "bench-pickup".into(),
        4,
        0,
    )?;
    let seen = started.clone();
    w.on_start = Some(Arc::new(move |item: &WorkItem| {
        if let Some(i) = item.payload.get("seq").and_then(|s| s.as_u64()) {
            seen.lock().unwrap()[i as usize] = Some(Instant::now());
        }
    }));
    let (stop_tx, stop) = watch::channel(false);
    let task = tokio::spawn(w.run(stop));
    tokio::time::sleep(Duration::from_millis(300)).await; // let the worker go idle and LISTEN
    let mut committed = Vec::with_capacity(args.items);
    for i in 0..args.items {
        queue::enqueue(
            &pool,
            queue::NOOP,
            &format!("pickup/{i}"),
            &json!({ "seq": i }),
        )
        .await?;
        committed.push(Instant::now());
        tokio::time::sleep(Duration::from_millis(args.interval_ms)).await;
    }
    let deadline = Instant::now() + Duration::from_secs(30);
    while started.lock().unwrap().iter().any(Option::is_none) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let _ = stop_tx.send(true);
    task.await??;
    let starts = started.lock().unwrap().clone();
    let mut ms: Vec<f64> = committed
        .iter()
        .zip(&starts)
        .filter_map(|(c, s)| s.map(|s| s.saturating_duration_since(*c).as_secs_f64() * 1000.0))
        .collect();
    let missing = args.items - ms.len();
    ms.sort_by(f64::total_cmp);
    let (p50, p99) = (percentile(&ms, 50.0), percentile(&ms, 99.0));
    eprintln!(
        "pickup over {} items: p50 {p50:.2} ms, p99 {p99:.2} ms, max {:.2} ms",
        ms.len(),
        percentile(&ms, 100.0)
    );
    Ok(json!({
        "bench": "pickup", "items": args.items, "interval_ms": args.interval_ms,
        "p50_ms": p50, "p99_ms": p99, "max_ms": percentile(&ms, 100.0), "missing": missing,
    }))
}
