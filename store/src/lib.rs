//! Everything sless keeps: the Postgres event log, the work queue, projector
//! checkpoints and idempotency keys, and the S3 blob store for sources.
//!
//! Store functions take a connection or transaction from the caller, so the
//! caller owns the transaction: an API handler appends events and enqueues
//! work in one commit.
//!
//! Architecture Invariant: store depends on `sless-domain` only among our
//! crates; it knows nothing of HTTP, workers or projections.

pub mod blobs;
pub mod eventlog;
pub mod idempotency;
pub mod queue;
pub mod readmodel;

use std::time::Duration;

use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
pub use sqlx::{PgPool, Postgres, Transaction};

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// An append expected a stream version that is no longer current.
    #[error("stream {stream} is at version {actual}, not {expected}")]
    Conflict {
        stream: String,
        expected: u64,
        actual: u64,
    },
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    #[error("migrations: {0}")]
    Migrate(#[from] sqlx::migrate::MigrateError),
    #[error("blob store: {0}")]
    Blob(String),
    #[error("{0}")]
    Internal(String),
}

impl Error {
    /// True when the database refused a write for a unique constraint.
    pub fn is_unique_violation(&self) -> bool {
        matches!(self, Error::Db(sqlx::Error::Database(e)) if e.is_unique_violation())
    }
}

/// The schema, from `migrations/` (the only place it is defined).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// Connects a pool with the session settings every sless role uses: a
/// statement timeout, and a limit on idle-in-transaction time so a stuck
/// writer cannot hold the projectors' watermark back for long.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool> {
    let opts: PgConnectOptions = url.parse()?;
    let opts = opts
        .options([
            ("statement_timeout", "60s"),
            ("idle_in_transaction_session_timeout", "60s"),
        ])
        .application_name("sless");
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(Duration::from_secs(30))
        .connect_with(opts)
        .await?;
    Ok(pool)
}

/// Applies pending migrations.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    MIGRATOR.run(pool).await?;
    Ok(())
}

/// True when every migration this binary knows has been applied.
pub async fn migrations_current(pool: &PgPool) -> Result<bool> {
    let applied: Vec<i64> =
        sqlx::query_scalar("select version from _sqlx_migrations where success")
            .fetch_all(pool)
            .await?;
    Ok(MIGRATOR.iter().all(|m| applied.contains(&m.version)))
}
