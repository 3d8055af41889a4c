//! The worker loop: claims items in batches, runs each under a lease, and
//! acknowledges finished items in batches.
//!
//! Four parts work together while `run` runs:
//! - the *claimer* claims as many items as there is room for (free handler
//!   slots plus `prefetch`), so a slot that frees up starts its next item
//!   without a round trip; it wakes on NOTIFY from an enqueue and polls as a
//!   fallback;
//! - the *dispatcher* starts each claimed item as a free slot allows;
//! - the *acker* deletes finished items in batches: whatever finished while
//!   the previous batch was being written goes in the next one, so batches
//!   grow with load and an idle worker acknowledges at once;
//! - *maintenance* extends the leases of everything this worker holds in one
//!   statement every `lease / 3`, stops work whose lease was taken from it,
//!   and releases the expired leases of dead workers every `sweep`.
//!
//! Every write names the item's attempt, so a worker that lost an item (its
//! lease expired and another worker took it) changes nothing.
//!
//! On shutdown the worker stops claiming, hands back items it claimed but
//! never started, gives running items `shutdown_grace` to finish, stops and
//! hands back the rest, and flushes its acknowledgements: nothing is left
//! for another worker's sweep.

mod shared;

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use sless_domain::{FunctionEvent, FunctionKey};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::queue::{self, Backoff, WorkItem};
use sqlx::postgres::PgListener;
use tokio::sync::{Semaphore, mpsc, watch};
use tracing::Instrument;

use crate::HandlerError;
use crate::driver::Driver;
use crate::reconcile::{self, Reconciler};
use shared::{Ack, Shared};

/// How a worker behaves. Every field comes from configuration.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Names this worker in leases; unique per process.
    pub id: String,
    /// Items handled at once.
    pub concurrency: usize,
    /// Items claimed ahead of free slots. They wait in the worker, under its
    /// lease, so keep it at 0 for long work (builds) that another worker
    /// could start sooner; raise it for many short items.
    pub prefetch: usize,
    /// How long a claimed item stays this worker's without a heartbeat.
    pub lease: Duration,
    /// How often to look for work when no NOTIFY arrives.
    pub poll: Duration,
    /// How often to release expired leases.
    pub sweep: Duration,
    pub backoff: Backoff,
    /// On shutdown, how long running items get to finish before they are
    /// stopped and handed back to the queue.
    pub shutdown_grace: Duration,
    /// Most finished items acknowledged in one statement.
    pub ack_batch: usize,
}

impl Default for WorkerConfig {
    fn default() -> Self {
        WorkerConfig {
            id: format!(
                "worker-{}-{}",
                std::process::id(),
                uuid::Uuid::new_v4().simple()
            ),
            concurrency: 4,
            prefetch: 0,
            lease: Duration::from_secs(30),
            poll: Duration::from_secs(1),
            sweep: Duration::from_secs(5),
            backoff: Backoff::default(),
            shutdown_grace: Duration::from_secs(8),
            ack_batch: 1000,
        }
    }
}

/// Called as each item starts, on the worker's task (keep it cheap): for
/// metrics and benchmarks.
pub type StartObserver = Arc<dyn Fn(&WorkItem) + Send + Sync>;

pub struct Worker<D> {
    pub pool: PgPool,
    pub reconciler: Reconciler<D>,
    pub config: WorkerConfig,
    pub on_start: Option<StartObserver>,
}

impl<D> Clone for Worker<D> {
    fn clone(&self) -> Self {
        Worker {
            pool: self.pool.clone(),
            reconciler: self.reconciler.clone(),
            config: self.config.clone(),
            on_start: self.on_start.clone(),
        }
    }
}

/// How one run of a handler ended.
enum Outcome {
    Done,
    Failed(HandlerError),
    /// Stopped by the worker: its lease was taken, or the worker is stopping.
    Stopped,
}

impl<D: Driver> Worker<D> {
    /// Claims up to `limit` items and runs them to the end, acknowledging
    /// each as it finishes; returns how many it claimed. Tests drive the
    /// worker with this, step by step.
    pub async fn run_once(&self, limit: usize) -> sless_store::Result<usize> {
        let items =
            queue::claim(&self.pool, &self.config.id, limit as i64, self.config.lease).await?;
        let n = items.len();
        let shared = Shared::new();
        let (stop_tx, stop) = watch::channel(false);
        let upkeep = tokio::spawn(self.clone().maintain(shared.clone(), stop, false));
        let mut set = tokio::task::JoinSet::new();
        for item in items {
            shared.hold(&item);
            let w = self.clone();
            let shared = shared.clone();
            set.spawn(async move { w.process(item, &shared, &Ack::Now).await });
        }
        while set.join_next().await.is_some() {}
        let _ = stop_tx.send(true);
        let _ = upkeep.await;
        Ok(n)
    }

    /// Runs until `shutdown` turns true; then stops as the module says.
    pub async fn run(self, shutdown: watch::Receiver<bool>) -> sless_store::Result<()> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(queue::CHANNEL).await?;
        let shared = Shared::new();
        let concurrency = self.config.concurrency.max(1);
        let room = Arc::new(Semaphore::new(concurrency + self.config.prefetch));
        let slots = Arc::new(Semaphore::new(concurrency));
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();
        let (claimed_tx, mut claimed) = mpsc::unbounded_channel();

        let acker = tokio::spawn(self.clone().acknowledge(ack_rx));
        let (upkeep_stop, upkeep_flag) = watch::channel(false);
        let upkeep = tokio::spawn(self.clone().maintain(shared.clone(), upkeep_flag, true));
        let claimer = tokio::spawn(self.clone().claim_loop(
            listener,
            shared.clone(),
            room.clone(),
            claimed_tx,
            shutdown.clone(),
        ));

        let ack = Ack::Batched(ack_tx);
        let mut shutdown_rx = shutdown.clone();
        loop {
            let item = tokio::select! {
                biased;
                _ = wait_true(&mut shutdown_rx) => break,
                item = claimed.recv() => match item {
                    Some(item) => item,
                    None => break,
                },
            };
            let slot = tokio::select! {
                biased;
                _ = wait_true(&mut shutdown_rx) => {
                    shared.hand_back_later(&item, false);
                    break;
                }
                slot = slots.clone().acquire_owned() => slot.expect("slots stay open"),
            };
            let (w, shared, room, ack) = (self.clone(), shared.clone(), room.clone(), ack.clone());
            tokio::spawn(async move {
                w.process(item, &shared, &ack).await;
                room.add_permits(1);
                drop(slot);
            });
        }

        // Stopping: no more claims; what was claimed but not started goes back.
        let _ = claimer.await;
        claimed.close();
        while let Ok(item) = claimed.try_recv() {
            shared.hand_back_later(&item, false);
        }
        let all = concurrency as u32;
        let drained = tokio::time::timeout(self.config.shutdown_grace, slots.acquire_many(all));
        if drained.await.is_err() {
            shared.stopping.store(true, Ordering::SeqCst);
            shared.cancel_all();
            let _ = slots.acquire_many(all).await;
        }
        drop(ack);
        let _ = acker.await;
        let back = shared.take_handbacks();
        if !back.is_empty() {
            match queue::hand_back(&self.pool, &self.config.id, &back).await {
                Ok(n) => tracing::info!(handed_back = n, "returned unfinished work to the queue"),
                Err(e) => {
                    tracing::warn!(error = %e, "handing work back failed; its leases will expire")
                }
            }
        }
        let _ = upkeep_stop.send(true);
        let _ = upkeep.await;
        Ok(())
    }

    /// Claims whenever there is room, until shutdown.
    async fn claim_loop(
        self,
        mut listener: PgListener,
        shared: Arc<Shared>,
        room: Arc<Semaphore>,
        claimed: mpsc::UnboundedSender<WorkItem>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        loop {
            // At least one free place, then every other free place at once.
            tokio::select! {
                biased;
                _ = wait_true(&mut shutdown) => return,
                permit = room.acquire() => permit.expect("room stays open").forget(),
            }
            let mut want = 1;
            while let Ok(p) = room.try_acquire() {
                p.forget();
                want += 1;
            }
            let items =
                match queue::claim(&self.pool, &self.config.id, want, self.config.lease).await {
                    Ok(items) => items,
                    Err(e) => {
                        tracing::warn!(error = %e, "claiming work failed");
                        vec![]
                    }
                };
            let got = items.len();
            room.add_permits(want as usize - got);
            for item in items {
                shared.hold(&item);
                if claimed.send(item).is_err() {
                    return;
                }
            }
            if got as i64 == want {
                continue; // there may be more
            }
            tokio::select! {
                _ = wait_true(&mut shutdown) => return,
                n = listener.try_recv() => {
                    if let Err(e) = n {
                        tracing::warn!(error = %e, "worker listener failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                _ = tokio::time::sleep(self.config.poll) => {}
            }
        }
    }

    /// Deletes finished items in batches until every sender is gone.
    async fn acknowledge(self, mut rx: mpsc::UnboundedReceiver<(i64, i32)>) {
        let max = self.config.ack_batch.max(1);
        let mut batch = Vec::with_capacity(max);
        while rx.recv_many(&mut batch, max).await > 0 {
            let mut delay = Duration::from_millis(50);
            let deadline = tokio::time::Instant::now() + self.config.lease;
            loop {
                match queue::complete_many(&self.pool, &self.config.id, &batch).await {
                    Ok(done) => {
                        if done.len() < batch.len() {
                            tracing::warn!(
                                lost = batch.len() - done.len(),
                                "leases lost before completion; those items were left to their new owners"
                            );
                        }
                        break;
                    }
                    Err(e) if tokio::time::Instant::now() < deadline => {
                        tracing::warn!(error = %e, "acknowledging work failed; retrying");
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(2));
                    }
                    Err(e) => {
                        tracing::error!(error = %e, items = batch.len(), "acknowledging work failed; the items will run again when their leases expire");
                        break;
                    }
                }
            }
            batch.clear();
        }
    }

    /// Extends this worker's leases, stops work whose lease was taken, and
    /// (when `sweep`) releases dead workers' expired leases, until `stop`.
    async fn maintain(self, shared: Arc<Shared>, mut stop: watch::Receiver<bool>, sweep: bool) {
        let mut beat = tokio::time::interval(self.config.lease / 3);
        let mut sweeps = tokio::time::interval(self.config.sweep);
        beat.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        sweeps.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        beat.tick().await;
        loop {
            tokio::select! {
                _ = wait_true(&mut stop) => return,
                _ = beat.tick() => {
                    let asked = tokio::time::Instant::now();
                    match queue::heartbeat_owner(&self.pool, &self.config.id, self.config.lease).await {
                        Ok(held) => {
                            let lost = shared.cancel_missing(&held, asked);
                            if lost > 0 {
                                tracing::warn!(lost, "leases were taken from this worker; stopped that work");
                            }
                        }
                        Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
                    }
                }
                _ = sweeps.tick(), if sweep => {
                    match queue::release_expired(&self.pool).await {
                        Ok(0) => {}
                        Ok(n) => tracing::warn!(released = n, "released work items whose lease expired"),
                        Err(e) => tracing::warn!(error = %e, "lease sweep failed"),
                    }
                }
            }
        }
    }

    /// Runs one item under its lease, then settles it.
    async fn process(&self, item: WorkItem, shared: &Shared, ack: &Ack) {
        let span = tracing::info_span!("work", id = item.id, kind = %item.kind, key = %item.key, attempt = item.attempt);
        async {
            let Some(cancel) = shared.start(&item) else {
                return; // taken from us before it started
            };
            let outcome = if item.attempt > item.max_attempts {
                Outcome::Failed(HandlerError::Fatal(
                    "the lease expired on every attempt".into(),
                ))
            } else {
                tokio::select! {
                    r = self.handle(&item) => match r {
                        Ok(()) => Outcome::Done,
                        Err(e) => Outcome::Failed(e),
                    },
                    _ = cancel.cancelled() => Outcome::Stopped,
                }
            };
            shared.release(&item);
            if let Err(e) = Box::pin(self.settle(&item, outcome, shared, ack)).await {
                tracing::error!(error = %e, "settling a work item failed; its lease will expire");
            }
        }
        .instrument(span)
        .await
    }

    async fn settle(
        &self,
        item: &WorkItem,
        outcome: Outcome,
        shared: &Shared,
        ack: &Ack,
    ) -> sless_store::Result<()> {
        match outcome {
            Outcome::Done => match ack {
                Ack::Batched(tx) => {
                    let _ = tx.send((item.id, item.attempt));
                }
                Ack::Now => {
                    let done =
                        queue::complete_many(&self.pool, &item.owner, &[(item.id, item.attempt)])
                            .await?;
                    if done.is_empty() {
                        tracing::warn!(
                            "lease lost before completion; the item was left to its new owner"
                        );
                    }
                }
            },
            Outcome::Stopped if shared.stopping.load(Ordering::SeqCst) => {
                tracing::warn!("stopped by shutdown; handing the item back");
                shared.hand_back_later(item, true);
            }
            Outcome::Stopped | Outcome::Failed(HandlerError::LeaseLost) => {
                tracing::warn!("lease lost; stopped");
            }
            Outcome::Failed(HandlerError::Retry(error)) if item.attempt < item.max_attempts => {
                let delay = self.config.backoff.delay(item.attempt);
                tracing::warn!(%error, ?delay, "work failed; will retry");
                queue::retry(&self.pool, item, &error, delay).await?;
            }
            Outcome::Failed(HandlerError::Retry(error) | HandlerError::Fatal(error)) => {
                tracing::error!(%error, "work failed for good; dead-lettered");
                self.dead_letter(item, &error).await?;
            }
        }
        Ok(())
    }

    async fn handle(&self, item: &WorkItem) -> Result<(), HandlerError> {
        if let Some(observe) = &self.on_start {
            observe(item);
        }
        match item.kind.as_str() {
            // Boxed: a reconcile's state is large, and every item's task
            // would otherwise carry (and copy) room for it.
            reconcile::KIND => Box::pin(self.reconciler.reconcile(item)).await,
            crate::collect::KIND => {
                let r = &self.reconciler;
                crate::collect::collect(&r.pool, &r.blobs, item).await
            }
            crate::jobs::KIND => Box::pin(self.reconciler.run_job(item)).await,
            queue::NOOP => Ok(()),
            other => Err(HandlerError::Fatal(format!("unknown work kind {other:?}"))),
        }
    }

    /// Moves the item to the dead letters and, for a function, records why
    /// on it so its status shows the error.
    async fn dead_letter(&self, item: &WorkItem, error: &str) -> sless_store::Result<()> {
        let mut tx = self.pool.begin().await?;
        if item.kind == reconcile::KIND
            && let Ok(key) = FunctionKey::from_queue_key(&item.key)
        {
            let at = eventlog::read_stream(&mut *tx, &key.stream()).await?.len() as u64;
            let event = FunctionEvent::ReconcileAbandoned {
                attempts: item.attempt,
                error: error.to_owned(),
            };
            let new = NewEvent::function(&key, &event, Metadata::system("worker", item.id));
            if at > 0 {
                eventlog::append(&mut tx, &key.stream(), at, &[new]).await?;
            }
        }
        if queue::dead_letter(&mut tx, item, error).await? {
            tx.commit().await?;
        }
        Ok(())
    }
}

/// Resolves once the flag is true (at once if it already is); never if the
/// sender is gone while it is false.
async fn wait_true(flag: &mut watch::Receiver<bool>) {
    if flag.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}
