//! The projector: reads the event log in commit order and keeps the read
//! models that queries use (`functions`, `function_versions`).
//!
//! Each batch runs in one transaction: take the watermark, lock the
//! checkpoint, read the events below the watermark, apply them, move the
//! checkpoint, commit. The read-model rows and the checkpoint change together
//! or not at all. Each stream's events are applied in version order; an event
//! already applied is skipped, a gap is an error that stops the projector.
//!
//! Architecture Invariant: the projector depends on store and domain only;
//! it never calls a driver or the API.

mod functions;

use std::time::Duration;

use sless_store::PgPool;
use sless_store::eventlog::{self, Checkpoint};
use sqlx::postgres::PgListener;
use tokio::sync::watch;

/// The checkpoint name of the read-model projector.
pub const NAME: &str = "read_models";

pub type Result<T, E = Error> = std::result::Result<T, E>;

#[derive(Debug, thiserror::Error)]
pub enum Error {
    #[error(transparent)]
    Store(#[from] sless_store::Error),
    #[error("database: {0}")]
    Db(#[from] sqlx::Error),
    /// An event arrived out of its stream's order: a broken invariant, not a
    /// condition to retry.
    #[error(
        "event {position} is version {version} of {stream}, but the read model is at version {at}"
    )]
    OutOfOrder {
        stream: String,
        version: i64,
        at: i64,
        position: i64,
    },
    #[error("events stayed held back by running transactions for {0:?}")]
    HeldBack(Duration),
    #[error("event {position} ({event_type}) cannot be read: {error}")]
    BadEvent {
        position: i64,
        event_type: String,
        error: String,
    },
}

/// What one step did.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct Step {
    pub applied: usize,
    /// Events exist past the checkpoint but are held back by a transaction
    /// still running; worth looking again soon.
    pub held_back: bool,
}

/// Applies one batch of up to `limit` events. Drive it step by step in tests.
pub async fn step(pool: &PgPool, limit: i64) -> Result<Step> {
    let mut tx = pool.begin().await?;
    // The watermark comes before any write of ours.
    let watermark = eventlog::watermark(&mut tx).await?;
    let from = eventlog::lock_checkpoint(&mut tx, NAME).await?;
    let events = eventlog::read_committed_batch(&mut tx, from, watermark, limit).await?;
    let Some(last) = events.last() else {
        let held_back = eventlog::has_events_beyond(&mut tx, from).await?;
        tx.rollback().await?;
        return Ok(Step {
            applied: 0,
            held_back,
        });
    };
    let to = Checkpoint {
        xid: last.xid,
        position: last.position,
    };
    functions::apply_batch(&mut tx, &events).await?;
    eventlog::save_checkpoint(&mut tx, NAME, to).await?;
    tx.commit().await?;
    Ok(Step {
        applied: events.len(),
        held_back: false,
    })
}

/// Applies events until none is left past the checkpoint, waiting for
/// transactions that hold some back (in any database of the cluster: the
/// watermark is cluster-wide); returns how many it applied. Gives up after
/// `CATCH_UP_LIMIT` if events stay held back (a writer keeps writing, or a
/// transaction stays open).
pub async fn catch_up(pool: &PgPool) -> Result<usize> {
    let started = tokio::time::Instant::now();
    let mut total = 0;
    loop {
        let s = step(pool, 1000).await?;
        total += s.applied;
        if s.applied == 0 && !s.held_back {
            return Ok(total);
        }
        if s.applied == 0 {
            if started.elapsed() > CATCH_UP_LIMIT {
                return Err(Error::HeldBack(CATCH_UP_LIMIT));
            }
            tokio::time::sleep(Duration::from_millis(2)).await;
        }
    }
}

/// How long `catch_up` waits for events held back by running transactions.
pub const CATCH_UP_LIMIT: Duration = Duration::from_secs(60);

/// Runs until `shutdown` turns true: applies batches, then waits for a
/// NOTIFY from an append (or `poll` as a fallback). While an older
/// transaction holds events back it looks again every 5 ms.
pub async fn run(pool: PgPool, poll: Duration, mut shutdown: watch::Receiver<bool>) -> Result<()> {
    let mut listener = PgListener::connect_with(&pool).await?;
    listener.listen("sless_events").await?;
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let s = match step(&pool, 1000).await {
            Ok(s) => s,
            Err(e @ (Error::OutOfOrder { .. } | Error::BadEvent { .. })) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "projector step failed; retrying");
                Step {
                    applied: 0,
                    held_back: true,
                }
            }
        };
        if s.applied > 0 {
            continue;
        }
        let wait = if s.held_back {
            Duration::from_millis(5)
        } else {
            poll
        };
        tokio::select! {
            _ = shutdown.changed() => {}
            n = listener.try_recv() => {
                if let Err(e) = n {
                    tracing::warn!(error = %e, "projector listener failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
            }
            _ = tokio::time::sleep(wait) => {}
        }
    }
}
