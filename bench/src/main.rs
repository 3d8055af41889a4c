//! `sless-bench`: measures sless on a real PostgreSQL (`DATABASE_URL`, else a
//! private cluster with default settings, `synchronous_commit=on`): the
//! queue and the event log in process, and the API, invoke proxy and
//! upload→Ready through the real `sless dev` binary. Each subcommand prints
//! its figures; its last line is one JSON object. Benchmarks never fail on a
//! machine's speed.

mod accept;
mod api;
mod append;
mod cold;
mod console;
mod control_plane;
mod cpu;
mod jail;
mod lag;
mod logs;
mod nginx;
mod node;
mod otlp;
mod pgbench;
mod projector;
mod proxy;
mod queue;
mod restart;
mod scale;
mod scale_out;
mod sless_dev;
mod upload;
mod wrk;

use std::future::Future;
use std::path::PathBuf;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use clap::{Parser, Subcommand};
use sless_embedded::{PostgresOptions, PrivatePostgres};
use sless_store::PgPool;
use sqlx::Connection;
use tokio::sync::OnceCell;

#[derive(Parser)]
#[command(name = "sless-bench")]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Drain pre-enqueued no-op work items; jobs/s.
    QueueDrain(queue::DrainArgs),
    /// Enqueue-commit to handler-start latency of an idle worker; p50/p99.
    Pickup(queue::PickupArgs),
    /// Event appends per second (distinct streams, one hot stream, batches)
    /// with 1, 4 and 16 clients, each beside pgbench's one-row INSERT.
    Append(append::AppendArgs),
    /// Projector catch-up over a log it has not seen, replay from zero, and
    /// live lag under a steady append rate.
    Projector(projector::ProjectorArgs),
    /// Invoke proxy: wrk against a python function directly, through
    /// `/fn/...` and through nginx; memory of `sless dev`.
    Proxy(proxy::ProxyArgs),
    /// Control-plane API: list and get with 1,000 functions in a namespace.
    Api(api::ApiArgs),
    /// Function logs: lines ingested per second beside the bare rows' insert,
    /// the live tail's delay beside the build log's and a NOTIFY's, and the
    /// proxy with a function that prints a line per call against one that
    /// prints nothing.
    Logs(logs::LogsArgs),
    /// The web console: the namespace page with 1,000 functions and a
    /// function page with a 200-file source.
    Console(console::ConsoleArgs),
    /// Upload→Ready of a python function without dependencies; p50/p99.
    UploadReady(upload::UploadArgs),
    /// How fast large uploads are accepted: one 10 MiB zip at a time and
    /// four at once; ms and MiB/s.
    UploadAccept(accept::AcceptArgs),
    /// What the sandbox adds to a process's start: the same program started
    /// directly and in a jail.
    Jail(jail::JailArgs),
    /// Cold calls of a function scaled to zero beside warm ones, a job's
    /// run, and the memory of functions running and scaled to zero.
    ColdStart(cold::ColdArgs),
    /// Cost curves: create rate, list and audit latency, restart to every
    /// function reconciled, replay, database size and memory, for 100,
    /// 1,000 and 10,000 functions in one namespace and over 100.
    Scale(scale::ScaleArgs),
    /// A step from 0 to 64 callers of a 100 ms function (concurrency 1, at
    /// most 16 instances): time to 90% of the ideal throughput, latency
    /// during the ramp, calls failed, and the way back down.
    ScaleOut(scale_out::ScaleOutArgs),
    /// `sless dev` restarted under a steady load of calls: calls failed,
    /// and the longest hold of each restart.
    Restart(restart::RestartArgs),
    /// The tests' Kubernetes control plane: `scripts/ensure-kubernetes`
    /// when it is built, and a start to ready, several times.
    ControlPlane(control_plane::ControlPlaneArgs),
    /// The cluster tier's real node (root): its start, the images' sizes,
    /// a pod's start from zero to its first answer, and the memory of the
    /// control plane, the node and its pods.
    Node(node::NodeArgs),
}

/// The server benchmarks run on, and the fresh databases made on it. The
/// private cluster starts on first use, so a subcommand that needs no
/// database of its own (a worker process joining a drain) starts none.
pub struct Server {
    /// `DATABASE_URL` without its database name.
    external: Option<String>,
    private: OnceCell<(PrivatePostgres, String)>,
    dir: PathBuf,
    created: Mutex<Vec<String>>,
}

impl Server {
    fn new() -> Server {
        let external = std::env::var("DATABASE_URL")
            .ok()
            .map(|url| match url.rsplit_once('/') {
                Some((base, _)) => base.to_owned(),
                None => url,
            });
        Server {
            external,
            private: OnceCell::new(),
            dir: std::env::temp_dir()
                .join(format!("sless-bench-{}", uuid::Uuid::new_v4().simple())),
            created: Mutex::new(Vec::new()),
        }
    }

    /// The server's URL without a database name; starts the private
    /// cluster the first time when there is no `DATABASE_URL`.
    async fn base_url(&self) -> anyhow::Result<&str> {
        if let Some(base) = &self.external {
            return Ok(base);
        }
        let (_, base) = self
            .private
            .get_or_try_init(|| async {
                std::fs::create_dir_all(&self.dir)?;
                let cluster = PrivatePostgres::start(PostgresOptions {
                    data_dir: self.dir.clone(),
                    port: None,
                    settings: vec![],
                    socket_only: false,
                })
                .await?;
                let url = cluster.url("postgres");
                let base = url.rsplit_once('/').unwrap().0.to_owned();
                eprintln!(
                    "private PostgreSQL on port {} (default settings)",
                    cluster.port()
                );
                anyhow::Ok((cluster, base))
            })
            .await?;
        Ok(base)
    }

    /// The URL of database `name` on this server.
    pub async fn url(&self, name: &str) -> anyhow::Result<String> {
        Ok(format!("{}/{name}", self.base_url().await?))
    }

    /// A fresh, empty database (no schema); its name and URL.
    pub async fn empty_database(&self) -> anyhow::Result<(String, String)> {
        let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&self.url("postgres").await?).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
            .execute(&mut admin)
            .await?;
        admin.close().await?;
        self.created.lock().unwrap().push(name.clone());
        let url = self.url(&name).await?;
        Ok((name, url))
    }

    /// A fresh, migrated database.
    pub async fn database(&self, max_connections: u32) -> anyhow::Result<(PgPool, String)> {
        let (_, url) = self.empty_database().await?;
        let pool = sless_store::connect(&url, max_connections).await?;
        sless_store::migrate(&pool).await?;
        Ok((pool, url))
    }

    /// Drops the databases this run made on a server it did not start (a
    /// private cluster goes away whole), unless `SLESS_BENCH_KEEP_DB` is set.
    async fn drop_databases(&self) -> anyhow::Result<()> {
        if self.external.is_none() || std::env::var_os("SLESS_BENCH_KEEP_DB").is_some() {
            return Ok(());
        }
        let names = std::mem::take(&mut *self.created.lock().unwrap());
        if names.is_empty() {
            return Ok(());
        }
        let mut admin = sqlx::PgConnection::connect(&self.url("postgres").await?).await?;
        for name in names {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "drop database if exists {name} with (force)"
            )))
            .execute(&mut admin)
            .await?;
        }
        admin.close().await?;
        Ok(())
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(cluster) = self.private.take() {
            // Stop the cluster before removing its directory.
            drop(cluster);
            let _ = std::fs::remove_dir_all(&self.dir);
        }
    }
}

/// Percentile (0..=100) of sorted samples.
pub fn percentile(sorted: &[f64], p: f64) -> f64 {
    if sorted.is_empty() {
        return f64::NAN;
    }
    let rank = (p / 100.0 * (sorted.len() - 1) as f64).round() as usize;
    sorted[rank.min(sorted.len() - 1)]
}

/// Checks `check` every `every` until it gives a value, or fails after `deadline`.
pub async fn wait_for<T, F, Fut>(
    what: &str,
    deadline: Duration,
    every: Duration,
    mut check: F,
) -> anyhow::Result<T>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = anyhow::Result<Option<T>>>,
{
    let start = Instant::now();
    loop {
        if let Some(v) = check().await? {
            return Ok(v);
        }
        if start.elapsed() > deadline {
            anyhow::bail!("timed out after {deadline:?} waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let server = Server::new();
        let figures = match cli.command {
            Command::QueueDrain(args) => queue::drain(&server, args).await,
            Command::Pickup(args) => queue::pickup(&server, args).await,
            Command::Append(args) => append::run(&server, args).await,
            Command::Projector(args) => projector::run(&server, args).await,
            Command::Proxy(args) => proxy::run(&server, args).await,
            Command::Api(args) => api::run(&server, args).await,
            Command::Logs(args) => logs::run(&server, args).await,
            Command::Console(args) => console::run(&server, args).await,
            Command::UploadReady(args) => upload::run(&server, args).await,
            Command::UploadAccept(args) => accept::run(&server, args).await,
            Command::Jail(args) => jail::run(args),
            Command::ControlPlane(args) => control_plane::run(args),
            Command::Node(args) => node::run(args).await,
            Command::ColdStart(args) => cold::run(&server, args).await,
            Command::Scale(args) => scale::run(&server, args).await,
            Command::ScaleOut(args) => scale_out::run(&server, args).await,
            Command::Restart(args) => restart::run(&server, args).await,
        };
        if let Err(e) = server.drop_databases().await {
            eprintln!("could not drop the benchmark databases: {e:#}");
        }
        println!("{}", figures?);
        Ok(())
    })
}
