//! The projector: reads the event log in commit order and keeps the read
//! models that queries use (`functions`, `function_versions`, `triggers`,
//! `jobs`).
//!
//! Each batch runs in one transaction: take the watermark and lock the
//! checkpoint (one statement), read the events below the watermark, apply
//! them, move the checkpoint, commit. The read-model rows and the checkpoint
//! change together or not at all. Each stream's events are applied in
//! version order; an event already applied is skipped, a gap is an error
//! that stops the projector.
//!
//! Each read model has a module of its own (`functions`, `triggers`,
//! `jobs`); a batch is sorted out among them by stream (`function/…`,
//! `trigger/…`, `job/…` and `cron/…`) and applied to all of them in its
//! one transaction. Events of other streams (`namespace/…`) change no read
//! model.
//!
//! A `Projector` remembers the function rows it wrote; the next batch starts
//! from them instead of reading them again, as long as the checkpoint it
//! finds is the one it left (no other copy applied anything in between) and
//! its generation is the one it saw (no replay swapped the tables since).
//! Trigger and job rows are few and change seldom: each batch reads those
//! it touches.
//!
//! `replay` rebuilds the read models from the start of the log into fresh
//! tables, with the same code, and swaps them in.
//!
//! Architecture Invariant: the projector depends on store and domain only;
//! it never calls a driver or the API.

mod batch;
mod doorbell;
mod functions;
mod jobs;
pub mod manifests;
pub mod replay;
mod triggers;

use std::time::Duration;

use sless_domain::Aggregate;
use sless_store::eventlog::{self, Checkpoint, StoredEvent};
use sless_store::{PgPool, Postgres};
use sqlx::pool::PoolConnection;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The checkpoint name of the read-model projector.
pub const NAME: &str = eventlog::READ_MODELS;

/// Events applied per transaction at most, by `catch_up` and `run`. Large
/// enough that a catch-up pays for its round trips and its row writes once
/// per many events; a batch of this size takes well under a second.
pub const BATCH: i64 = 50_000;

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
    /// Another replay holds the replay lock.
    #[error("a replay is running already{}", since.map(|t| format!(" (since {t})")).unwrap_or_default())]
    ReplayRunning {
        since: Option<chrono::DateTime<chrono::Utc>>,
    },
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

/// The read-model projector, with what it remembers between batches: the
/// rows it wrote, the connection it works on, and (from `Projector::new`,
/// not `Projector::default`) the next batch, read while it applies this one.
#[derive(Default)]
pub struct Projector {
    models: Models,
    /// The checkpoint the remembered rows belong to: the one this projector
    /// committed last, and the tables' generation then. `None` when it does
    /// not know (start, failed batch).
    at: Option<(Checkpoint, i64)>,
    /// Whether to read the next batch while applying this one.
    read_ahead: bool,
    /// The next batch, being read (and decoded) while this one is applied.
    ahead: Option<JoinHandle<Result<Batch>>>,
    /// The connection batches run on, kept from one to the next.
    conn: Option<PoolConnection<Postgres>>,
}

/// A batch of events read from the log: every event after `after` whose
/// transaction ended before the watermark it was read with, up to a limit.
struct Batch {
    after: Checkpoint,
    /// The checkpoint past the batch's last event, if it has any.
    to: Option<Checkpoint>,
    /// Events read (of every stream).
    read: usize,
    full: bool,
    /// The events among them that some read model keeps, decoded.
    events: Decoded,
}

/// The events of a batch, decoded for the read model each belongs to (in
/// log order within each); events of other streams are left out.
pub(crate) struct Decoded {
    functions: Vec<batch::EventOf<functions::Functions>>,
    triggers: Vec<batch::EventOf<triggers::Triggers>>,
    jobs: Vec<batch::EventOf<jobs::Jobs>>,
}

/// Sorts `events` by the read model their stream belongs to, and decodes them.
pub(crate) fn decode(events: Vec<StoredEvent>) -> Result<Decoded> {
    let (mut functions, mut triggers, mut jobs) = (Vec::new(), Vec::new(), Vec::new());
    for e in events {
        match e.stream.split_once('/').map(|(kind, _)| kind) {
            Some("function") => functions.push(e),
            Some("trigger") => triggers.push(e),
            Some("job" | "cron") => jobs.push(e),
            _ => {}
        }
    }
    Ok(Decoded {
        functions: batch::decode::<functions::Functions>(functions)?,
        triggers: batch::decode::<triggers::Triggers>(triggers)?,
        jobs: batch::decode::<jobs::Jobs>(jobs)?,
    })
}

/// Decodes one event's `data` as an event of aggregate `A`.
pub(crate) fn decode_event<A: Aggregate>(event: &StoredEvent) -> Result<A::Event> {
    serde_json::from_str(&event.data)
        .and_then(|data| A::decode(&event.event_type, &data))
        .map_err(|e| Error::BadEvent {
            position: event.position,
            event_type: event.event_type.clone(),
            error: e.to_string(),
        })
}

/// Every read model, kept in one set of tables (the live ones, or a
/// replay's). Only the functions read model remembers rows between batches.
pub(crate) struct Models {
    functions: functions::Functions,
    triggers: triggers::Triggers,
    jobs: jobs::Jobs,
}

impl Default for Models {
    fn default() -> Self {
        Models::on(functions::Tables::live())
    }
}

impl Models {
    pub(crate) fn on(tables: functions::Tables) -> Models {
        Models {
            triggers: triggers::Triggers::on(&tables),
            jobs: jobs::Jobs::on(&tables),
            functions: functions::Functions::on(tables),
        }
    }

    /// Forgets every remembered row (someone else may have written since).
    pub(crate) fn forget(&mut self) {
        self.functions.forget();
    }

    /// Applies a decoded batch in `tx`, every read model in the same transaction.
    pub(crate) async fn apply(
        &self,
        tx: &mut sqlx::PgConnection,
        batch: &Decoded,
    ) -> Result<functions::Applied> {
        let applied = self.functions.apply(tx, &batch.functions).await?;
        self.triggers.apply(tx, &batch.triggers).await?;
        self.jobs.apply(tx, &batch.jobs).await?;
        Ok(applied)
    }

    /// Keeps the rows of a batch whose transaction committed.
    pub(crate) fn keep(&mut self, applied: functions::Applied) {
        self.functions.keep(applied);
    }
}

/// Reads and decodes the events after `after` below `watermark`.
async fn read_batch(
    conn: &mut sqlx::PgConnection,
    after: Checkpoint,
    watermark: i64,
    limit: i64,
) -> Result<Batch> {
    let events = eventlog::read_committed_stored(conn, after, watermark, limit).await?;
    let to = events.last().map(|e| e.checkpoint());
    let read = events.len();
    Ok(Batch {
        after,
        to,
        read,
        full: read as i64 >= limit,
        events: decode(events)?,
    })
}

impl Projector {
    /// A projector that reads the next batch while it applies a full one.
    pub fn new() -> Projector {
        let mut projector = Projector::default();
        projector.read_ahead = true;
        projector
    }

    /// Applies one batch of up to `limit` events.
    ///
    /// It first looks past the checkpoint with one cheap statement (no
    /// transaction, no lock, no xid), and starts a batch only if some event
    /// can be read. When the batch is full (and the projector reads ahead),
    /// the next one is read and decoded on another connection while this one
    /// is applied, below this batch's watermark (an older watermark holds back
    /// more, never less). The next step uses it if the checkpoint it finds is
    /// where that read started.
    pub async fn step(&mut self, pool: &PgPool, limit: i64) -> Result<Step> {
        let step = self.try_step(pool, limit).await;
        if step.is_err() {
            // The connection may be broken; the next step takes another.
            self.conn = None;
        }
        step
    }

    async fn try_step(&mut self, pool: &PgPool, limit: i64) -> Result<Step> {
        if self.conn.is_none() {
            self.conn = Some(pool.acquire().await?);
        }
        let conn = self.conn.as_mut().expect("a connection was just taken");
        if self.ahead.is_none() {
            let pending = eventlog::pending(conn, NAME).await?;
            if !pending.ready {
                return Ok(Step {
                    applied: 0,
                    held_back: pending.held_back,
                });
            }
        }
        let mut tx = sqlx::Connection::begin(&mut **conn).await?;
        // The watermark comes before any write of ours.
        let locked = eventlog::lock_checkpoint_below_watermark(&mut tx, NAME).await?;
        let (from, watermark) = (locked.at, locked.watermark);
        if self.at != Some((from, locked.generation)) {
            // Another copy moved the checkpoint, ours failed, or a replay
            // swapped the tables: what we remember may no longer be what the
            // tables hold.
            self.models.forget();
            self.at = Some((from, locked.generation));
        }
        let ahead = match self.ahead.take() {
            Some(read) => read.await.ok().and_then(Result::ok),
            None => None,
        };
        let batch = match ahead {
            Some(b) if b.after == from && b.read > 0 => b,
            _ => read_batch(&mut tx, from, watermark, limit).await?,
        };
        let Some(to) = batch.to else {
            let held_back = eventlog::has_events_beyond(&mut tx, from).await?;
            tx.rollback().await?;
            return Ok(Step {
                applied: 0,
                held_back,
            });
        };
        if batch.full && self.read_ahead {
            let pool = pool.clone();
            self.ahead = Some(tokio::spawn(async move {
                let mut conn = pool.acquire().await?;
                read_batch(&mut conn, to, watermark, limit).await
            }));
        }
        // Until the commit succeeds, the remembered rows may be ahead of the tables.
        self.at = None;
        let started = std::time::Instant::now();
        let applied = self.models.apply(&mut tx, &batch.events).await?;
        eventlog::save_checkpoint(&mut tx, NAME, to).await?;
        tx.commit().await?;
        sless_telemetry::global().projector_batch(
            NAME,
            batch.read,
            started.elapsed().as_secs_f64(),
        );
        self.models.keep(applied);
        self.at = Some((to, locked.generation));
        Ok(Step {
            applied: batch.read,
            held_back: false,
        })
    }
}

impl Drop for Projector {
    fn drop(&mut self) {
        if let Some(read) = self.ahead.take() {
            read.abort();
        }
    }
}

/// Applies one batch of up to `limit` events, remembering nothing and
/// reading nothing ahead. Drive it step by step in tests.
pub async fn step(pool: &PgPool, limit: i64) -> Result<Step> {
    Projector::default().step(pool, limit).await
}

/// Applies events until none is left past the checkpoint, waiting for
/// transactions that hold some back (in any database of the cluster: the
/// watermark is cluster-wide); returns how many it applied. Gives up after
/// `CATCH_UP_LIMIT` if events stay held back (a writer keeps writing, or a
/// transaction stays open).
pub async fn catch_up(pool: &PgPool) -> Result<usize> {
    let started = tokio::time::Instant::now();
    let mut projector = Projector::new();
    let mut total = 0;
    loop {
        let s = projector.step(pool, BATCH).await?;
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

/// How soon `run` looks again while events are held back by a running
/// transaction, or while appends are in flight and it cannot sleep. A look
/// is one index probe.
pub const BUSY_POLL: Duration = Duration::from_millis(2);

/// Runs until `shutdown` turns true: applies batches; with nothing left to
/// apply, it takes the doorbell (see `doorbell`) and sleeps until an append
/// wakes it with a NOTIFY, or `poll` passes as a fallback. While appends are
/// in flight (it cannot take the doorbell) or an older transaction holds
/// events back, it looks again every `BUSY_POLL`.
pub async fn run(pool: PgPool, poll: Duration, mut shutdown: watch::Receiver<bool>) -> Result<()> {
    let mut doorbell = doorbell::Doorbell::connect(&pool).await?;
    let mut projector = Projector::new();
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        let s = match projector.step(&pool, BATCH).await {
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
            // Awake and busy: appends need not ring.
            doorbell.wake().await;
            continue;
        }
        let wait = if s.held_back {
            BUSY_POLL
        } else if doorbell.is_asleep() {
            poll
        } else {
            match doorbell.sleep().await {
                // Asleep now; every append that did not ring has ended: look
                // once more before waiting.
                doorbell::Sleep::Asleep => continue,
                // Another copy sleeps at the doorbell: the same NOTIFY wakes us.
                doorbell::Sleep::Taken => poll,
                doorbell::Sleep::Busy => BUSY_POLL,
            }
        };
        tokio::select! {
            _ = shutdown.changed() => {}
            _ = doorbell.wait(wait) => {}
        }
    }
}
