//! Crashes of what runs, into the log: a driver that supervises processes
//! (the local driver) reports each one that ended without being asked to,
//! and this appends `FunctionCrashed` to the function's stream, so its
//! `last_error` says so, the audit log shows it, and the invoke proxy can
//! tell a caller why its call failed (killed for memory, say). The
//! Kubernetes driver's pods are watched for the same (`kube::crashes`).

use sless_domain::{CrashCause, Function, FunctionEvent, FunctionKey};
use sless_store::PgPool;
use sless_store::eventlog::Metadata;
use sless_store::system::{self, Executed, SystemCommand};
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
    // A crash depends on nothing in the stream: a lost race is decided
    // again, on the stream as it is now.
    let cmd = SystemCommand::new(
        crash.key.stream(),
        &crash.key.namespace,
        Metadata::system("worker", 0),
    );
    let executed = system::execute::<Function>(pool, &cmd, |current| {
        let recorded = since.is_some_and(|since| {
            current.events.iter().any(|e| {
                matches!(e.event, FunctionEvent::FunctionCrashed { .. }) && e.recorded_at >= since
            })
        });
        Ok(if recorded {
            Vec::new()
        } else {
            vec![event.clone()]
        })
    })
    .await?;
    match executed {
        Executed::Appended { .. } => Ok(true),
        Executed::Unchanged { .. } => Ok(false),
        _ => Err(sless_store::Error::Internal(format!(
            "the stream {} kept moving",
            cmd.stream()
        ))),
    }
}
