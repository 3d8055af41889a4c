//! Crashes of what runs, into the log: a driver that supervises processes
//! (the local driver) reports each one that ended without being asked to,
//! and this appends `FunctionCrashed` to the function's stream, so its
//! `last_error` says so, the audit log shows it, and the invoke proxy can
//! tell a caller why its call failed (killed for memory, say). The
//! Kubernetes driver's pods are watched for the same (`kube::crashes`).

use sless_domain::{CrashCause, FunctionEvent, FunctionKey};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use tokio::sync::{mpsc, watch};

/// One process that ended on its own.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Crash {
    pub key: FunctionKey,
    pub version: u32,
    pub cause: CrashCause,
    pub detail: String,
    /// The limit it passed, for an `oom`.
    pub memory_mb: Option<u32>,
}

/// Appends a `FunctionCrashed` for each crash `crashes` reports, until
/// `stop` or until every reporter is gone.
pub async fn record(
    pool: PgPool,
    mut crashes: mpsc::UnboundedReceiver<Crash>,
    mut stop: watch::Receiver<bool>,
) {
    loop {
        let crash = tokio::select! {
            crash = crashes.recv() => match crash {
                Some(crash) => crash,
                None => return,
            },
            _ = stop.wait_for(|s| *s) => return,
        };
        if let Err(e) = append(&pool, &crash).await {
            tracing::warn!(function = %crash.key, error = %e, "could not record a crash");
        }
    }
}

/// Appends one crash at the end of the function's stream (whatever came
/// before it: a crash depends on nothing in the stream).
pub async fn append(pool: &PgPool, crash: &Crash) -> sless_store::Result<()> {
    append_unless_recorded(pool, crash, None).await.map(|_| ())
}

/// Appends one crash unless the log recorded one of the function at or
/// after `since` (a crash that several watchers see, or that one sees again
/// after a restart, is recorded once); true when it appended.
pub async fn append_unless_recorded(
    pool: &PgPool,
    crash: &Crash,
    since: Option<chrono::DateTime<chrono::Utc>>,
) -> sless_store::Result<bool> {
    let event = FunctionEvent::FunctionCrashed {
        version: crash.version,
        cause: crash.cause,
        detail: crash.detail.clone(),
        memory_mb: crash.memory_mb,
    };
    let stream = crash.key.stream();
    for _ in 0..8 {
        let at = sless_store::jobs::log_version(pool, &stream).await?;
        if let Some(since) = since
            && sless_store::crashes::since(pool, &crash.key, since)
                .await?
                .is_some()
        {
            return Ok(false);
        }
        let mut tx = pool.begin().await?;
        let new = NewEvent::function(&crash.key, &event, Metadata::system("worker", 0));
        match eventlog::append(&mut tx, &stream, at, &[new]).await {
            Ok(_) => {
                tx.commit().await?;
                return Ok(true);
            }
            Err(sless_store::Error::Conflict { .. }) => continue,
            Err(e) => return Err(e),
        }
    }
    Err(sless_store::Error::Internal(format!(
        "the stream {stream} kept moving"
    )))
}
