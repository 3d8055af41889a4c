//! The worker loop: claims items in batches, runs each under a lease, and
//! acknowledges finished items in batches.
//!
//! A worker has two pools of handler slots, each with its own claimer and
//! dispatcher: one for jobs and cron runs (`job_concurrency`), one for
//! everything else, reconciles above all (`concurrency`). Each claims only
//! its own kinds (`queue::claim_kinds`), so four long jobs never hold up an
//! upload's build, and a burst of builds never holds up a job.
//!
//! The parts that work together while `run` runs:
//! - per pool, a *claimer* claims as many items as there is room for (free
//!   slots plus `prefetch`; jobs get no prefetch), so a slot that frees up
//!   starts its next item without a round trip; it wakes on NOTIFY from an
//!   enqueue (one listener rings every pool's claimer) and polls as a
//!   fallback;
//! - per pool, a *dispatcher* starts each claimed item as a free slot allows;
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

use sless_domain::{Function, FunctionEvent, FunctionKey};
use sless_store::PgPool;
use sless_store::eventlog::Metadata;
use sless_store::queue::{self, Backoff, Kinds, WorkItem};
use sless_store::system::{self, Executed, SystemCommand};
use sqlx::postgres::PgListener;
use tokio::sync::{Notify, Semaphore, mpsc, watch};
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
    /// Work items other than jobs (reconciles: builds and deploys; blob
    /// collection) handled at once.
    pub concurrency: usize,
    /// Jobs and cron runs (`RunJob`) run at once: a pool of slots of their
    /// own, so long jobs never hold up reconciles and reconciles never hold
    /// up jobs.
    pub job_concurrency: usize,
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
    /// How often to look for orphan blobs (`collect::sweep_orphans`).
    pub orphan_sweep: Duration,
    /// How long a blob stored ahead of its event may wait for it before it
    /// counts as an orphan: longer than any upload takes from its S3 put to
    /// its commit.
    pub orphan_grace: Duration,
    /// Seconds without a call after which a function whose spec does not
    /// say is scaled to zero; `0`: never.
    pub scale_to_zero_after_sec: u32,
    /// How often to look for functions idle past their window.
    pub idle_sweep: Duration,
    /// The autoscaler, which one worker at a time runs
    /// (`crate::autoscale`); `None`: this worker never decides.
    pub autoscale: Option<crate::autoscale::AutoscaleConfig>,
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
            job_concurrency: 4,
            prefetch: 0,
            lease: Duration::from_secs(30),
            poll: Duration::from_secs(1),
            sweep: Duration::from_secs(5),
            backoff: Backoff::default(),
            shutdown_grace: Duration::from_secs(8),
            ack_batch: 1000,
            orphan_sweep: Duration::from_secs(300),
            orphan_grace: Duration::from_secs(3600),
            scale_to_zero_after_sec: 900,
            idle_sweep: Duration::from_secs(1),
            autoscale: Some(crate::autoscale::AutoscaleConfig::default()),
        }
    }
}

/// Most orphan blobs one sweep looks at; the next sweep takes the rest.
const ORPHANS_PER_SWEEP: i64 = 1000;

/// The error of a build whose worker went silent, as its log's end says.
const ABANDONED_BUILD: &str =
    "the build's worker stopped reporting (it died or lost the database); the build is tried again";

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
        let lanes = [
            Lane::new(
                Kinds::AllButJobs,
                self.config.concurrency,
                self.config.prefetch,
            ),
            // No prefetch: a job claimed ahead of a free slot would wait
            // under this worker's lease while another worker could run it.
            Lane::new(Kinds::Jobs, self.config.job_concurrency, 0),
        ];
        let (ack_tx, ack_rx) = mpsc::unbounded_channel();

        let acker = tokio::spawn(self.clone().acknowledge(ack_rx));
        let (upkeep_stop, upkeep_flag) = watch::channel(false);
        let upkeep = tokio::spawn(self.clone().maintain(shared.clone(), upkeep_flag, true));
        let bells: Vec<_> = lanes.iter().map(|l| l.bell.clone()).collect();
        let doorbell = tokio::spawn(ring_on_notify(listener, bells, shutdown.clone()));
        let orphans = tokio::spawn(self.clone().sweep_orphans(shutdown.clone()));
        let idle = tokio::spawn(self.clone().sweep_idle(shutdown.clone()));
        let autoscaler = self.config.autoscale.map(|config| {
            tokio::spawn(crate::autoscale::run(
                self.pool.clone(),
                config,
                shutdown.clone(),
            ))
        });

        let ack = Ack::Batched(ack_tx);
        let mut claimers = Vec::new();
        let mut dispatchers = Vec::new();
        for lane in &lanes {
            let (claimed_tx, claimed) = mpsc::unbounded_channel();
            claimers.push(tokio::spawn(self.clone().claim_loop(
                lane.clone(),
                shared.clone(),
                claimed_tx,
                shutdown.clone(),
            )));
            dispatchers.push(tokio::spawn(self.clone().dispatch(
                lane.clone(),
                claimed,
                shared.clone(),
                ack.clone(),
                shutdown.clone(),
            )));
        }
        drop(ack);

        // Stopping: no more claims; what was claimed but not started goes back.
        let mut unstarted = Vec::new();
        for d in dispatchers {
            unstarted.push(d.await.expect("a dispatcher never panics"));
        }
        for c in claimers {
            let _ = c.await;
        }
        let _ = doorbell.await;
        let _ = orphans.await;
        let _ = idle.await;
        if let Some(autoscaler) = autoscaler {
            let _ = autoscaler.await;
        }
        for mut claimed in unstarted {
            claimed.close();
            while let Ok(item) = claimed.try_recv() {
                shared.hand_back_later(&item, false);
            }
        }
        let drained = tokio::time::timeout(
            self.config.shutdown_grace,
            futures_util::future::join_all(lanes.iter().map(Lane::drained)),
        );
        if drained.await.is_err() {
            shared.stopping.store(true, Ordering::SeqCst);
            shared.cancel_all();
            futures_util::future::join_all(lanes.iter().map(Lane::drained)).await;
        }
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

    /// Starts the lane's claimed items as its slots free up, until
    /// shutdown; returns what is left of the claimed items, to hand back.
    async fn dispatch(
        self,
        lane: Lane,
        mut claimed: mpsc::UnboundedReceiver<WorkItem>,
        shared: Arc<Shared>,
        ack: Ack,
        mut shutdown: watch::Receiver<bool>,
    ) -> mpsc::UnboundedReceiver<WorkItem> {
        loop {
            let item = tokio::select! {
                biased;
                _ = wait_true(&mut shutdown) => break,
                item = claimed.recv() => match item {
                    Some(item) => item,
                    None => break,
                },
            };
            let slot = tokio::select! {
                biased;
                _ = wait_true(&mut shutdown) => {
                    shared.hand_back_later(&item, false);
                    break;
                }
                slot = lane.slots.clone().acquire_owned() => slot.expect("slots stay open"),
            };
            let (w, shared, room, ack) =
                (self.clone(), shared.clone(), lane.room.clone(), ack.clone());
            tokio::spawn(async move {
                w.process(item, &shared, &ack).await;
                room.add_permits(1);
                drop(slot);
            });
        }
        claimed
    }

    /// Claims items of the lane's kinds whenever it has room, until shutdown.
    async fn claim_loop(
        self,
        lane: Lane,
        shared: Arc<Shared>,
        claimed: mpsc::UnboundedSender<WorkItem>,
        mut shutdown: watch::Receiver<bool>,
    ) {
        let room = &lane.room;
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
            let claim = queue::claim_kinds(
                &self.pool,
                &self.config.id,
                lane.kinds,
                want,
                self.config.lease,
            );
            let items = match claim.await {
                Ok(items) => items,
                Err(e) => {
                    tracing::warn!(error = %e, kinds = ?lane.kinds, "claiming work failed");
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
                _ = lane.bell.notified() => {}
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
        // Alive from the start: before its first beat, another worker's
        // placement sweep would take this one's functions for orphans.
        crate::placement::beat(&self.pool, &*self.reconciler.driver).await;
        if sweep {
            match crate::placement::arrive(&self.pool, &*self.reconciler.driver).await {
                Ok(0) => {}
                Ok(n) => tracing::info!(
                    functions = n,
                    "what this worker ran before it started again is started again"
                ),
                Err(e) => tracing::warn!(error = %e, "placing what this worker ran before failed"),
            }
        }
        loop {
            tokio::select! {
                _ = wait_true(&mut stop) => return,
                _ = beat.tick() => {
                    crate::placement::beat(&self.pool, &*self.reconciler.driver).await;
                    let asked = tokio::time::Instant::now();
                    match self.heartbeat().await {
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
                    if let Err(e) = crate::placement::sweep(&self.pool, &*self.reconciler.driver).await {
                        tracing::warn!(error = %e, "placement sweep failed");
                    }
                }
            }
        }
    }

    /// Extends this worker's leases, trying again while a beat has time:
    /// the statement can fail as a deadlock with an acknowledgement of the
    /// same rows (they lock them in other orders), and two beats missed in
    /// a row let every lease lapse, finished items not yet acknowledged
    /// included, which then run again.
    async fn heartbeat(&self) -> sless_store::Result<Vec<(i64, i32)>> {
        let deadline = tokio::time::Instant::now() + self.config.lease / 3;
        let mut delay = Duration::from_millis(20);
        loop {
            match queue::heartbeat_owner(&self.pool, &self.config.id, self.config.lease).await {
                Ok(held) => return Ok(held),
                Err(e) if tokio::time::Instant::now() + delay < deadline => {
                    tracing::warn!(error = %e, "heartbeat failed; trying again");
                    tokio::time::sleep(delay).await;
                    delay = (delay * 2).min(Duration::from_secs(1));
                }
                Err(e) => return Err(e),
            }
        }
    }

    /// Deletes orphan blobs every `orphan_sweep`, until shutdown, and ends
    /// the build logs of builds whose worker went silent. Every worker
    /// sweeps; they never wait for each other (see
    /// `collect::sweep_orphans`), and with nothing to do a sweep is two
    /// index probes.
    async fn sweep_orphans(self, mut shutdown: watch::Receiver<bool>) {
        let mut every = tokio::time::interval(self.config.orphan_sweep);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        every.tick().await;
        let r = &self.reconciler;
        loop {
            tokio::select! {
                _ = wait_true(&mut shutdown) => return,
                _ = every.tick() => {}
            }
            let sweep = crate::collect::sweep_orphans(
                &r.pool,
                &r.blobs,
                self.config.orphan_grace,
                ORPHANS_PER_SWEEP,
            );
            tokio::select! {
                // A sweep stopped halfway leaves its records for the next.
                _ = wait_true(&mut shutdown) => return,
                swept = sweep => match swept {
                    Ok(s) if s.lagging => tracing::debug!(
                        deleted = s.deleted.len(),
                        "orphan sweep stopped: the read models lag the log; the next sweep goes on"
                    ),
                    Ok(_) => {}
                    Err(e) => tracing::warn!(error = %e, "orphan sweep failed"),
                }
            }
            // Builds whose worker died: their attempt ends, its chunks go.
            match sless_store::build_logs::abandon_silent(
                &r.pool,
                crate::build_log::SILENT_AFTER,
                ABANDONED_BUILD,
            )
            .await
            {
                Ok(0) => {}
                Ok(n) => {
                    tracing::info!(n, "ended the build logs of builds whose worker went silent")
                }
                Err(e) => tracing::warn!(error = %e, "ending abandoned build logs failed"),
            }
        }
    }

    /// Scales idle functions to zero every `idle_sweep` (`crate::idle`),
    /// until shutdown. A sweep with nothing idle is one query.
    async fn sweep_idle(self, mut shutdown: watch::Receiver<bool>) {
        let mut every = tokio::time::interval(self.config.idle_sweep);
        every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = wait_true(&mut shutdown) => return,
                _ = every.tick() => {}
            }
            if let Err(e) =
                crate::idle::sweep(&self.pool, self.config.scale_to_zero_after_sec).await
            {
                tracing::warn!(error = %e, "idle sweep failed");
            }
        }
    }

    /// Runs one item under its lease, then settles it.
    async fn process(&self, item: WorkItem, shared: &Shared, ack: &Ack) {
        let span = tracing::info_span!(
            "work",
            id = item.id,
            kind = %item.kind,
            key = %item.key,
            attempt = item.attempt,
            otel.name = tracing::field::Empty,
            otel.kind = "consumer",
            trace_id = tracing::field::Empty,
            span_id = tracing::field::Empty,
        );
        if sless_telemetry::trace::enabled() {
            // It continues the trace of what caused it: the request whose
            // events enqueued it, or links to a cron tick and to superseded
            // requests. (Nothing of this on the queue's path without traces.)
            span.record("otel.name", format!("process {}", item.kind));
            let (parent, links) = queue::trace_of(&item);
            sless_telemetry::trace::continue_from(&span, parent);
            sless_telemetry::trace::link(&span, &links);
            sless_telemetry::trace::record_ids(&span);
        }
        async {
            let Some(cancel) = shared.start(&item) else {
                return; // taken from us before it started
            };
            sless_telemetry::global().work_started(
                &item.kind,
                item.claimed_at.elapsed().as_secs_f64(),
                item.attempt,
            );
            let started = std::time::Instant::now();
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
            let counted = match &outcome {
                Outcome::Done => "done",
                Outcome::Stopped if shared.stopping.load(Ordering::SeqCst) => "handed_back",
                Outcome::Stopped | Outcome::Failed(HandlerError::LeaseLost) => "lease_lost",
                Outcome::Failed(HandlerError::Retry(_)) if item.attempt < item.max_attempts => {
                    "retried"
                }
                Outcome::Failed(_) => "dead",
            };
            sless_telemetry::global().work(&item.kind, counted, started.elapsed().as_secs_f64());
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
            let event = FunctionEvent::ReconcileAbandoned {
                attempts: item.attempt,
                error: error.to_owned(),
            };
            let cmd = SystemCommand::new(
                key.stream(),
                &key.namespace,
                Metadata::system("worker", item.id),
            );
            // Recorded on a function whose stream exists, with the dead
            // letter or not at all.
            let recorded = system::execute_in::<Function>(&mut tx, &cmd, |current| {
                Ok(match current.state.stream_version {
                    0 => Vec::new(),
                    _ => vec![event],
                })
            })
            .await?;
            if let Executed::Lost { .. } = recorded {
                return Err(sless_store::Error::Internal(format!(
                    "the stream {} moved while its reconcile was abandoned",
                    key.stream()
                )));
            }
        }
        if queue::dead_letter(&mut tx, item, error).await? {
            tx.commit().await?;
        }
        Ok(())
    }
}

/// A pool of handler slots and the kinds of work it claims for.
#[derive(Clone)]
struct Lane {
    kinds: Kinds,
    /// Handlers of this lane running at once.
    concurrency: usize,
    /// Free slots plus prefetch: how many more items the claimer may take.
    room: Arc<Semaphore>,
    slots: Arc<Semaphore>,
    /// Rung when an enqueue may have added work.
    bell: Arc<Notify>,
}

impl Lane {
    fn new(kinds: Kinds, concurrency: usize, prefetch: usize) -> Lane {
        let concurrency = concurrency.max(1);
        Lane {
            kinds,
            concurrency,
            room: Arc::new(Semaphore::new(concurrency + prefetch)),
            slots: Arc::new(Semaphore::new(concurrency)),
            bell: Arc::new(Notify::new()),
        }
    }

    /// Resolves once every slot is free (every handler of the lane ended).
    async fn drained(&self) {
        let _ = self.slots.acquire_many(self.concurrency as u32).await;
    }
}

/// Rings every lane's bell on each NOTIFY of an enqueue, until shutdown.
/// A bell rung while its claimer is busy keeps the ring for its next wait.
async fn ring_on_notify(
    mut listener: PgListener,
    bells: Vec<Arc<Notify>>,
    mut shutdown: watch::Receiver<bool>,
) {
    loop {
        tokio::select! {
            _ = wait_true(&mut shutdown) => return,
            n = listener.try_recv() => {
                if let Err(e) = n {
                    tracing::warn!(error = %e, "worker listener failed");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                // A notification lost with the connection is covered too:
                // every claimer looks again.
                for bell in &bells {
                    bell.notify_one();
                }
            }
        }
    }
}

/// Resolves once the flag is true (at once if it already is); never if the
/// sender is gone while it is false.
async fn wait_true(flag: &mut watch::Receiver<bool>) {
    if flag.wait_for(|v| *v).await.is_err() {
        std::future::pending::<()>().await;
    }
}
