//! Everything sless keeps: the Postgres event log (and its audit queries),
//! the work queue, projector checkpoints and idempotency keys, what a
//! namespace uses (for its quotas), and the S3 blob store for sources.
//!
//! Store functions take a connection or transaction from the caller, so the
//! caller owns the transaction: an API handler appends events and enqueues
//! work in one commit. The decisions sless makes itself (a worker's, the
//! scheduler's, the idle sweep's, the invoke proxy's activation) go through
//! one executor, `system`, which loads, decides with the aggregate, appends,
//! enqueues and fences in one transaction.
//!
//! Architecture Invariant: store depends on `sless-domain` among our
//! crates, and on `sless-telemetry` to count its appends and blob
//! operations; it knows nothing of HTTP, workers or projections.

pub mod audit;
pub mod blobs;
pub mod build_logs;
pub mod command;
pub mod console;
pub mod crashes;
pub mod eventlog;
pub mod function_logs;
pub mod gauges;
pub mod idempotency;
pub mod invocations;
pub mod jobs;
pub mod orphans;
pub mod queue;
pub mod readmodel;
pub mod retention;
pub mod sandbox_uids;
pub mod scaling;
pub mod system;
pub mod trigger_index;
pub mod triggers;
pub mod usage;
pub mod workers;

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

    /// True when the database could not be reached or answer in time (see
    /// `is_unavailable`): the request may succeed if tried again later.
    pub fn is_unavailable(&self) -> bool {
        matches!(self, Error::Db(e) if is_unavailable(e))
    }
}

/// The schema, from `migrations/` (the only place it is defined).
pub static MIGRATOR: sqlx::migrate::Migrator = sqlx::migrate!("../migrations");

/// How long a caller waits for a pooled connection, including opening a new
/// one (so it also bounds the connect itself); past it, the database counts
/// as unavailable (`is_unavailable`). Long enough for a burst of callers on a
/// cold pool to open their connections together (each costs a SCRAM
/// handshake: a few ms of CPU in a release build, about 130 ms in a debug
/// one); a worker's or the projector's call waits this long at most. The API
/// answers sooner: its request deadline (`sless_api::Deadlines`) cuts a
/// request that waits on the pool, and its breaker sheds requests while the
/// database is unavailable.
pub const ACQUIRE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long `connect` keeps trying at start-up, when the database may still
/// be coming up (a container starting beside it, a restart).
pub const STARTUP_TIMEOUT: Duration = Duration::from_secs(30);

/// Session settings every sless connection runs with.
///
/// - `statement_timeout`: no statement of ours runs longer; one stuck behind a
///   lock or a lost client is cancelled by the server.
/// - `idle_in_transaction_session_timeout`: a transaction whose client went
///   quiet (crashed, partitioned, hung) is ended by the server, releasing its
///   locks and the projectors' watermark. Our transactions never wait on
///   anything but the database between statements.
/// - `tcp_keepalives_*`: the server probes an idle client after 30 s and gives
///   up after 3 unanswered probes 10 s apart, so the session of a client that
///   vanished from the network (not merely went idle) ends within about a
///   minute. sqlx has no client-side keepalive; client-side waits are bounded
///   by `ACQUIRE_TIMEOUT` and the API's request deadline instead.
pub const SESSION_SETTINGS: [(&str, &str); 5] = [
    ("statement_timeout", "30s"),
    ("idle_in_transaction_session_timeout", "10s"),
    ("tcp_keepalives_idle", "30"),
    ("tcp_keepalives_interval", "10"),
    ("tcp_keepalives_count", "3"),
];

/// Connects a pool with the settings every sless role uses
/// (`SESSION_SETTINGS`, `ACQUIRE_TIMEOUT`). Waits up to `STARTUP_TIMEOUT`
/// for a database that is not reachable yet; fails at once on anything else
/// (a wrong password, a missing database).
///
/// A connection is not pinged when it is taken from the pool, only when it
/// goes back (sqlx always does that): the ping on taking cost a round trip
/// on every transaction. A connection that broke while idle (the server
/// restarted) fails its first statement instead, and the ping on its return
/// then closes it; the API answers that one request 503 with Retry-After.
///
/// A connection gives back, as it returns to the pool, the buffer space a
/// large statement or result made it take (a batch of invocation records, a
/// page of 1,000 functions): otherwise every connection of the pool keeps
/// the largest buffers it ever needed, for as long as it lives.
pub async fn connect(url: &str, max_connections: u32) -> Result<PgPool> {
    let opts: PgConnectOptions = url.parse()?;
    let opts = opts.options(SESSION_SETTINGS).application_name("sless");
    let pool = PgPoolOptions::new()
        .max_connections(max_connections)
        .acquire_timeout(ACQUIRE_TIMEOUT)
        .test_before_acquire(false)
        .after_release(|conn, _| {
            sqlx::Connection::shrink_buffers(conn);
            Box::pin(std::future::ready(Ok(true)))
        })
        .connect_lazy_with(opts);
    let started = tokio::time::Instant::now();
    loop {
        match pool.acquire().await {
            Ok(_) => return Ok(pool),
            Err(e) if is_unavailable(&e) && started.elapsed() < STARTUP_TIMEOUT => {
                tracing::warn!(error = %e, "the database is not reachable yet; retrying");
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
            Err(e) => return Err(e.into()),
        }
    }
}

/// True when a database error says the database could not be reached or
/// could not answer in time (rather than refusing the request): no
/// connection within the acquire timeout, a broken or closed connection, a
/// server shutting down, starting up or out of connections, a statement or
/// an idle transaction cut off by its timeout. Worth retrying later.
pub fn is_unavailable(e: &sqlx::Error) -> bool {
    match e {
        sqlx::Error::PoolTimedOut
        | sqlx::Error::PoolClosed
        | sqlx::Error::WorkerCrashed
        | sqlx::Error::Io(_)
        | sqlx::Error::Protocol(_) => true,
        sqlx::Error::Database(db) => db.code().is_some_and(|code| {
            // 08: connection exception; 53: insufficient resources (too many
            // connections); 57P01-57P03: shutdown, crash, starting up;
            // 57014: statement timeout; 25P03: idle-in-transaction timeout;
            // 55P03: lock not available.
            code.starts_with("08")
                || code.starts_with("53")
                || matches!(
                    &*code,
                    "57P01" | "57P02" | "57P03" | "57014" | "25P03" | "55P03"
                )
        }),
        _ => false,
    }
}

/// Applies pending migrations. A database that a newer release migrated
/// further is accepted: migrations only expand while two releases run
/// side by side (docs/operations.md, "Upgrading"), so the release before
/// runs on it, and a rollback's pods start.
pub async fn migrate(pool: &PgPool) -> Result<()> {
    let mut migrator = sqlx::migrate::Migrator::with_migrations(MIGRATOR.iter().cloned().collect());
    migrator.set_ignore_missing(true);
    migrator.run(pool).await?;
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
