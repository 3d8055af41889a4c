//! `sless-bench`: measures sless's queue and event log on a real
//! PostgreSQL (`DATABASE_URL`, else a private cluster with default settings,
//! `synchronous_commit=on`). Each subcommand prints its figures; its last
//! line is one JSON object. Benchmarks never fail on a machine's speed.

mod append;
mod projector;
mod queue;

use std::path::PathBuf;

use clap::{Parser, Subcommand};
use sless_embedded::{PostgresOptions, PrivatePostgres};
use sless_store::PgPool;
use sqlx::Connection;

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
    /// Event appends per second: distinct streams, one hot stream, or batches.
    Append(append::AppendArgs),
    /// Projector catch-up over a log it has not seen; events/s applied.
    Projector(projector::CatchUpArgs),
}

/// The server benchmarks run on, and a fresh database on it.
pub struct Server {
    base_url: String,
    _cluster: Option<PrivatePostgres>,
    _dir: Option<PathBuf>,
}

impl Server {
    async fn start() -> anyhow::Result<Server> {
        if let Ok(url) = std::env::var("DATABASE_URL") {
            let base = url
                .rsplit_once('/')
                .map(|(b, _)| b.to_owned())
                .unwrap_or(url);
            return Ok(Server {
                base_url: base,
                _cluster: None,
                _dir: None,
            });
        }
        let dir =
            std::env::temp_dir().join(format!("sless-bench-{}", uuid::Uuid::new_v4().simple()));
        std::fs::create_dir_all(&dir)?;
        let cluster = PrivatePostgres::start(PostgresOptions {
            data_dir: dir.clone(),
            port: None,
            settings: vec![],
        })
        .await?;
        let url = cluster.url("postgres");
        let base = url.rsplit_once('/').unwrap().0.to_owned();
        eprintln!(
            "private PostgreSQL on port {} (default settings)",
            cluster.port()
        );
        Ok(Server {
            base_url: base,
            _cluster: Some(cluster),
            _dir: Some(dir),
        })
    }

    /// A fresh, migrated database.
    pub async fn database(&self, max_connections: u32) -> anyhow::Result<(PgPool, String)> {
        let name = format!("bench_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&format!("{}/postgres", self.base_url)).await?;
        sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
            .execute(&mut admin)
            .await?;
        admin.close().await?;
        let url = format!("{}/{name}", self.base_url);
        let pool = sless_store::connect(&url, max_connections).await?;
        sless_store::migrate(&pool).await?;
        Ok((pool, url))
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        if let Some(dir) = &self._dir {
            self._cluster.take();
            let _ = std::fs::remove_dir_all(dir);
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

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    rt.block_on(async {
        let server = Server::start().await?;
        let figures = match cli.command {
            Command::QueueDrain(args) => queue::drain(&server, args).await?,
            Command::Pickup(args) => queue::pickup(&server, args).await?,
            Command::Append(args) => append::run(&server, args).await?,
            Command::Projector(args) => projector::catch_up(&server, args).await?,
        };
        println!("{figures}");
        Ok(())
    })
}
