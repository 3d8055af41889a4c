//! The worker loop: claims items in batches, runs each under a lease kept
//! alive by a heartbeat, and completes, retries or dead-letters it.
//!
//! It wakes on NOTIFY from an enqueue and polls as a fallback; expired leases
//! of dead workers are released by every worker's sweep.

use std::sync::Arc;
use std::time::Duration;

use sless_domain::{FunctionEvent, FunctionKey};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::queue::{self, Backoff, WorkItem};
use sqlx::postgres::PgListener;
use tokio::sync::{Semaphore, watch};
use tokio::task::JoinSet;
use tracing::Instrument;

use crate::HandlerError;
use crate::driver::Driver;
use crate::reconcile::{self, Reconciler};

/// How a worker behaves. Every field comes from configuration.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Names this worker in leases; unique per process.
    pub id: String,
    /// Items handled at once.
    pub concurrency: usize,
    /// How long a claimed item stays this worker's without a heartbeat.
    pub lease: Duration,
    /// How often to look for work when no NOTIFY arrives.
    pub poll: Duration,
    /// How often to release expired leases.
    pub sweep: Duration,
    pub backoff: Backoff,
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
            lease: Duration::from_secs(30),
            poll: Duration::from_secs(1),
            sweep: Duration::from_secs(5),
            backoff: Backoff::default(),
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

impl<D: Driver> Worker<D> {
    /// Claims up to `limit` items and runs them to the end; returns how many
    /// it claimed. Tests drive the worker with this, step by step.
    pub async fn run_once(&self, limit: usize) -> sless_store::Result<usize> {
        let items =
            queue::claim(&self.pool, &self.config.id, limit as i64, self.config.lease).await?;
        let n = items.len();
        let mut set = JoinSet::new();
        for item in items {
            let w = self.clone();
            set.spawn(async move { w.process(item).await });
        }
        while set.join_next().await.is_some() {}
        Ok(n)
    }

    /// Runs until `shutdown` turns true; then lets running items finish.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) -> sless_store::Result<()> {
        let mut listener = PgListener::connect_with(&self.pool).await?;
        listener.listen(queue::CHANNEL).await?;
        let slots = Arc::new(Semaphore::new(self.config.concurrency));
        let mut running = JoinSet::new();
        let mut last_sweep = tokio::time::Instant::now() - self.config.sweep;
        loop {
            if *shutdown.borrow() {
                break;
            }
            if last_sweep.elapsed() >= self.config.sweep {
                match queue::release_expired(&self.pool).await {
                    Ok(0) => {}
                    Ok(n) => {
                        tracing::warn!(released = n, "released work items whose lease expired")
                    }
                    Err(e) => tracing::warn!(error = %e, "lease sweep failed"),
                }
                last_sweep = tokio::time::Instant::now();
            }
            let free = slots.available_permits();
            let claimed = if free > 0 {
                match queue::claim(&self.pool, &self.config.id, free as i64, self.config.lease)
                    .await
                {
                    Ok(items) => items,
                    Err(e) => {
                        tracing::warn!(error = %e, "claiming work failed");
                        vec![]
                    }
                }
            } else {
                vec![]
            };
            let got = claimed.len();
            for item in claimed {
                let permit = slots.clone().acquire_owned().await.expect("semaphore open");
                let w = self.clone();
                running.spawn(async move {
                    w.process(item).await;
                    drop(permit);
                });
            }
            while running.try_join_next().is_some() {}
            if got > 0 && got == free {
                continue; // there may be more
            }
            let until_sweep = self.config.sweep.saturating_sub(last_sweep.elapsed());
            tokio::select! {
                _ = shutdown.changed() => {}
                n = listener.try_recv() => {
                    if let Err(e) = n {
                        tracing::warn!(error = %e, "worker listener failed");
                        tokio::time::sleep(Duration::from_millis(100)).await;
                    }
                }
                Some(_) = running.join_next(), if !running.is_empty() => {}
                _ = tokio::time::sleep(self.config.poll.min(until_sweep)) => {}
            }
        }
        while running.join_next().await.is_some() {}
        Ok(())
    }

    /// Runs one item under its lease, then settles it.
    async fn process(&self, item: WorkItem) {
        let span = tracing::info_span!("work", id = item.id, kind = %item.kind, key = %item.key, attempt = item.attempt);
        self.settle(item).instrument(span).await
    }

    async fn settle(&self, item: WorkItem) {
        let outcome = if item.attempt > item.max_attempts {
            Err(HandlerError::Fatal(
                "the lease expired on every attempt".into(),
            ))
        } else {
            self.run_with_heartbeat(&item).await
        };
        let settled = match outcome {
            Ok(()) => queue::complete(&self.pool, &item).await.map(|done| {
                if !done {
                    tracing::warn!(
                        "lease lost before completion; the item was left to its new owner"
                    );
                }
            }),
            Err(HandlerError::LeaseLost) => {
                tracing::warn!("lease lost; stopped");
                Ok(())
            }
            Err(HandlerError::Retry(error)) if item.attempt < item.max_attempts => {
                let delay = self.config.backoff.delay(item.attempt);
                tracing::warn!(%error, ?delay, "work failed; will retry");
                queue::retry(&self.pool, &item, &error, delay)
                    .await
                    .map(|_| ())
            }
            Err(HandlerError::Retry(error) | HandlerError::Fatal(error)) => {
                tracing::error!(%error, "work failed for good; dead-lettered");
                self.dead_letter(&item, &error).await
            }
        };
        if let Err(e) = settled {
            tracing::error!(error = %e, "settling a work item failed; its lease will expire");
        }
    }

    async fn run_with_heartbeat(&self, item: &WorkItem) -> Result<(), HandlerError> {
        let work = self.handle(item);
        tokio::pin!(work);
        let mut beat = tokio::time::interval(self.config.lease / 3);
        beat.tick().await;
        loop {
            tokio::select! {
                r = &mut work => return r,
                _ = beat.tick() => {
                    match queue::heartbeat(&self.pool, item, self.config.lease).await {
                        Ok(true) => {}
                        Ok(false) => return Err(HandlerError::LeaseLost),
                        Err(e) => tracing::warn!(error = %e, "heartbeat failed"),
                    }
                }
            }
        }
    }

    async fn handle(&self, item: &WorkItem) -> Result<(), HandlerError> {
        if let Some(observe) = &self.on_start {
            observe(item);
        }
        match item.kind.as_str() {
            reconcile::KIND => self.reconciler.reconcile(item).await,
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
