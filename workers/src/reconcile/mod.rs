//! The reconciler: level-triggered. A work item says "look at function X";
//! the reconciler reads what the log says X should be, asks the driver what
//! runs, and converges, recording what happened as events. Running it twice
//! has the effect of running it once, which is what makes a replay after an
//! outage safe.
//!
//! What should run: the current version of a function that exists, started
//! with its current spec. A deploy that fails leaves what served before it
//! serving (`DeployFailed`, then `DeployRolledBack` naming that version). A spec change redeploys the built artifact (a
//! runtime change comes with a new version, so it is built first); a
//! deleted function, or one with nothing uploaded, has whatever runs for it
//! removed, and so has a function with http triggers none of which is
//! enabled (`FunctionStopped`), and a function scaled to zero
//! (`FunctionScaledToZero`, until a call appends `FunctionScaledUp`). A
//! current version that failed while nothing ran has the version that
//! served before started again.
//!
//! Each build it asks the driver for is recorded (`crate::build_log`):
//! its log is in the database while it runs and in S3 once it ended,
//! before `BuildSucceeded` or `BuildFailed` (which carries the log's
//! tail) is appended. A converged function's pruned versions lose their
//! build logs here too.

use sless_domain::{Function, FunctionEvent, FunctionKey};
use sless_store::PgPool;
use sless_store::blobs::BlobStore;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::queue::{self, WorkItem};
use sless_store::trigger_index;

use crate::build_log::Recording;
use crate::driver::{
    self, Artifact, BuildRequest, CronRequest, DeployRequest, Driver, DriverError,
};
use crate::{HandlerError, HandlerResult};
use sless_domain::Runtime;
use sless_telemetry::Step;

pub use sless_store::queue::RECONCILE_FUNCTION as KIND;

/// What the reconciler works with.
pub struct Reconciler<D> {
    pub pool: PgPool,
    pub blobs: BlobStore,
    pub driver: std::sync::Arc<D>,
}

impl<D> Clone for Reconciler<D> {
    fn clone(&self) -> Self {
        Reconciler {
            pool: self.pool.clone(),
            blobs: self.blobs.clone(),
            driver: self.driver.clone(),
        }
    }
}

async fn load(pool: &PgPool, key: &FunctionKey) -> HandlerResult<Function> {
    eventlog::load::<Function>(pool, &key.stream())
        .await
        .map(|(state, _)| state)
        .map_err(HandlerError::retry)
}

/// Outcome of recording an event.
enum Recorded {
    Done,
    /// Someone appended first; look again.
    Stale,
}

impl<D: Driver> Reconciler<D> {
    /// Counts a build or deploy in the metrics: `failed` when the
    /// function's own build or start failed, `error` when the platform did.
    fn count<T>(
        &self,
        step: Step,
        runtime: Runtime,
        result: &Result<T, DriverError>,
        started: std::time::Instant,
    ) {
        let outcome = match result {
            Ok(_) => "succeeded",
            Err(DriverError::Build { .. } | DriverError::Deploy { .. }) => "failed",
            Err(DriverError::Infra(_)) => "error",
        };
        sless_telemetry::global().step(
            step,
            runtime.as_str(),
            self.driver.kind(),
            outcome,
            started.elapsed().as_secs_f64(),
        );
    }

    /// Appends `event` to the function's stream if it is still at the version
    /// we read and this worker still holds the item's lease.
    async fn record(
        &self,
        item: &WorkItem,
        key: &FunctionKey,
        state: &Function,
        event: FunctionEvent,
    ) -> HandlerResult<Recorded> {
        self.record_all(item, key, state, &[event]).await
    }

    /// [`Reconciler::record`] for events appended together.
    async fn record_all(
        &self,
        item: &WorkItem,
        key: &FunctionKey,
        state: &Function,
        events: &[FunctionEvent],
    ) -> HandlerResult<Recorded> {
        let mut tx = self.pool.begin().await.map_err(HandlerError::retry)?;
        let new: Vec<NewEvent> = events
            .iter()
            .map(|e| NewEvent::function(key, e, Metadata::system("worker", item.id)))
            .collect();
        match eventlog::append(&mut tx, &key.stream(), state.stream_version, &new).await {
            Ok(_) => {}
            Err(sless_store::Error::Conflict { .. }) => return Ok(Recorded::Stale),
            Err(e) => return Err(HandlerError::retry(e)),
        }
        if !queue::holds_lease(&mut tx, item)
            .await
            .map_err(HandlerError::retry)?
        {
            return Err(HandlerError::LeaseLost);
        }
        tx.commit().await.map_err(HandlerError::retry)?;
        Ok(Recorded::Done)
    }

    /// Converges one function. Retried on conflict a few times, then left to
    /// the next item (an append that raced us enqueued one).
    pub async fn reconcile(&self, item: &WorkItem) -> HandlerResult<()> {
        let key = FunctionKey::from_queue_key(&item.key)
            .map_err(|e| HandlerError::Fatal(e.to_string()))?;
        for _ in 0..8 {
            let state = load(&self.pool, &key).await?;
            match self.step(item, &key, &state).await? {
                Some(Recorded::Done) | Some(Recorded::Stale) => continue,
                None => {
                    self.collect_build_logs(&key, &state).await;
                    return self.sync_cron(&key, &state).await;
                }
            }
        }
        Ok(())
    }

    /// Deletes the build logs of the versions retention pruned (an upload
    /// that prunes enqueues this reconcile). A failure is left to the
    /// next reconcile of the function.
    async fn collect_build_logs(&self, key: &FunctionKey, state: &Function) {
        match crate::collect::build_logs_of_pruned(&self.pool, &self.blobs, key, state).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(function = %key.queue_key(), n, "deleted the build logs of pruned versions")
            }
            Err(e) => {
                tracing::warn!(function = %key.queue_key(), error = %e, "deleting the build logs of pruned versions failed")
            }
        }
    }

    /// For a driver that runs cron triggers itself: makes them the
    /// function's enabled cron triggers, running its current version (none
    /// until that version is built).
    async fn sync_cron(&self, key: &FunctionKey, state: &Function) -> HandlerResult<()> {
        if !self.driver.runs_cron() {
            return Ok(());
        }
        let triggers =
            trigger_index::function_triggers(&self.pool, &key.namespace, key.name.as_str())
                .await
                .map_err(HandlerError::retry)?;
        let runs = match (state.exists(), state.spec.as_ref(), state.current_version) {
            (true, Some(spec), Some(version)) => state
                .artifacts
                .get(&version)
                .map(|artifact| (spec, version, artifact.clone())),
            _ => None,
        };
        let wanted = match runs {
            None => Vec::new(),
            Some((spec, version, artifact)) => triggers
                .into_iter()
                .filter(|t| t.enabled && t.kind == sless_domain::trigger::TriggerKind::Cron)
                .filter_map(|t| {
                    let schedule = t.schedule?;
                    Some(CronRequest {
                        trigger: t.name.to_string(),
                        schedule: schedule.cron,
                        timezone: schedule.timezone,
                        version,
                        runtime: spec.runtime,
                        entrypoint: spec.entrypoint.clone(),
                        env_vars: spec.env_vars.clone(),
                        memory_mb: spec.memory_mb,
                        timeout: std::time::Duration::from_secs(spec.timeout_sec.into()),
                        artifact: Artifact {
                            reference: artifact.clone(),
                        },
                    })
                })
                .collect(),
        };
        self.driver.sync_cron(key, wanted).await.map_err(infra)
    }

    /// The current version serves, as deployed: converged. Made current
    /// again while it served (a rollback to the live version before a newer
    /// upload was deployed), it is `Pending` in the log, which records that
    /// it serves as it is (the same endpoint and node).
    async fn serving_as_it_is(
        &self,
        item: &WorkItem,
        key: &FunctionKey,
        state: &Function,
    ) -> HandlerResult<Option<Recorded>> {
        let (Some(version), Some(endpoint)) = (state.deployed_version, state.endpoint.clone())
        else {
            return Ok(None);
        };
        if state.phase != sless_domain::Phase::Pending {
            return Ok(None);
        }
        let again = FunctionEvent::FunctionDeployed {
            version,
            endpoint,
            node: state.deployed_node.clone(),
        };
        self.record(item, key, state, again).await.map(Some)
    }

    /// The current version failed to build or deploy and nothing runs,
    /// although a version served before (it was stopped while the function
    /// was scaled to zero, and the upload that failed made it warm): that
    /// version is started again, as a failed deploy leaves what served
    /// before it serving. The function stays `Failed` with its error.
    async fn restore_served(
        &self,
        item: &WorkItem,
        key: &FunctionKey,
        state: &Function,
        spec: &sless_domain::FunctionSpec,
    ) -> HandlerResult<Option<Recorded>> {
        let Some(served) = state.deployed_version else {
            return Ok(None);
        };
        let runs_here = state.version(served).is_some_and(|v| {
            v.runtime.is_none_or(|r| r == spec.runtime) && state.artifacts.contains_key(&served)
        });
        if state.endpoint.is_some()
            || state.idle
            || state.current_version == Some(served)
            || !runs_here
        {
            return Ok(None);
        }
        let started = std::time::Instant::now();
        let deployed = driver::traced(
            "deploy",
            key,
            served,
            spec.runtime,
            self.driver.kind(),
            self.driver.deploy(DeployRequest {
                key: key.clone(),
                version: served,
                runtime: spec.runtime,
                entrypoint: spec.entrypoint.clone(),
                memory_mb: spec.memory_mb,
                timeout_sec: spec.timeout_sec,
                env_vars: spec.env_vars.clone(),
                artifact: Artifact {
                    reference: state.artifacts[&served].clone(),
                },
            }),
        )
        .await;
        self.count(Step::Deploy, spec.runtime, &deployed, started);
        match deployed {
            Ok(d) => {
                let again = FunctionEvent::FunctionDeployed {
                    version: d.version,
                    endpoint: d.endpoint,
                    node: d.node,
                };
                self.record(item, key, state, again).await.map(Some)
            }
            // It cannot start either: the function stays as it is.
            Err(DriverError::Deploy { message, .. }) => {
                tracing::warn!(function = %key.queue_key(), version = served, error = %message, "the version that served before does not start again");
                Ok(None)
            }
            Err(e) => Err(infra(e)),
        }
    }

    /// Does the next thing the function needs; `None` when it has converged.
    async fn step(
        &self,
        item: &WorkItem,
        key: &FunctionKey,
        state: &Function,
    ) -> HandlerResult<Option<Recorded>> {
        let (Some(spec), Some(current)) = (state.spec.as_ref(), state.current()) else {
            // Deleted, never created, or nothing uploaded since it was
            // (created again): nothing should run.
            self.driver.remove(key).await.map_err(infra)?;
            return Ok(None);
        };
        // A function with http triggers runs only while one of them is
        // enabled; otherwise it is scaled to zero (and not built: enabling
        // a trigger builds and deploys its current version).
        let triggers = trigger_index::http_triggers(&self.pool, &key.namespace, key.name.as_str())
            .await
            .map_err(HandlerError::retry)?;
        if !triggers.served() {
            self.driver.stop(key).await.map_err(infra)?;
            if let Some(version) = state.deployed_version {
                let stopped = FunctionEvent::FunctionStopped {
                    version,
                    reason: format!(
                        "no http trigger of it is enabled ({})",
                        triggers.names.join(", ")
                    ),
                };
                return self.record(item, key, state, stopped).await.map(Some);
            }
            return Ok(None);
        }
        // Scaled to zero: nothing runs until a call scales it up (the
        // build is kept, so that deploys at once).
        if state.idle {
            self.driver.stop(key).await.map_err(infra)?;
            return Ok(None);
        }
        if state.failed_version == Some(current.version) {
            // Waits for a new upload, with what served before serving.
            return self.restore_served(item, key, state, spec).await;
        }
        let running = self.driver.status(key).await;
        // A driver whose functions run on one worker each: the log says
        // which. The current version with the current spec on another
        // worker that is alive is where it should be (no second copy here);
        // an older one, or one on a worker that is gone, is deployed here.
        let elsewhere = match (self.driver.node(), state.deployed_node.as_deref()) {
            (Some(here), Some(there)) if here.id != there => Some((here, there)),
            _ => None,
        };
        if let Some((here, there)) = &elsewhere {
            let current_there = state.deployed_version == Some(current.version)
                && state.deployed_with_current_spec();
            if current_there
                && sless_store::workers::alive(&self.pool, there, here.dead_after)
                    .await
                    .map_err(HandlerError::retry)?
            {
                return self.serving_as_it_is(item, key, state).await;
            }
        }
        // Converged: the current version runs, where the log says, started
        // with the spec the log has now (a spec change redeploys).
        let converged = elsewhere.is_none()
            && running.as_ref().is_some_and(|d| {
                d.version == current.version
                    && state.deployed_version == Some(current.version)
                    && state.endpoint.as_deref() == Some(d.endpoint.as_str())
                    && state.deployed_with_current_spec()
            });
        if converged {
            return self.serving_as_it_is(item, key, state).await;
        }
        let built = state.built.as_ref().filter(|(v, _)| *v == current.version);
        if built.is_none() && state.phase != sless_domain::Phase::Building {
            let started = FunctionEvent::BuildStarted {
                version: current.version,
            };
            return self.record(item, key, state, started).await.map(Some);
        }
        let context = self
            .blobs
            .get(&current.context_key)
            .await
            .map_err(HandlerError::retry)?;
        // The build's log: written down while it runs, stored when it ends,
        // before the event that says how it ended.
        let recording = Recording::start(&self.pool, key, current.version)
            .await
            .map_err(HandlerError::retry)?;
        let started = std::time::Instant::now();
        let build = driver::traced(
            "build",
            key,
            current.version,
            spec.runtime,
            self.driver.kind(),
            self.driver.build(BuildRequest {
                key: key.clone(),
                version: current.version,
                runtime: spec.runtime,
                context_sha256: current.context_sha256.clone(),
                context_key: current.context_key.clone(),
                context,
                built: state
                    .artifacts
                    .get(&current.version)
                    .cloned()
                    .map(|reference| Artifact { reference }),
                log: recording.log(),
            }),
        )
        .await;
        // A version built already only has its artifact checked.
        if built.is_none() {
            self.count(Step::Build, spec.runtime, &build, started);
        }
        recording
            .finish(&self.pool, &self.blobs, &build)
            .await
            .map_err(HandlerError::retry)?;
        let artifact = match build {
            Ok(a) => a,
            Err(DriverError::Build { message, log_tail }) => {
                let failed = FunctionEvent::BuildFailed {
                    version: current.version,
                    error: message,
                    log_tail,
                };
                return self.record(item, key, state, failed).await.map(Some);
            }
            Err(e) => return Err(infra(e)),
        };
        if built.is_none_or(|(_, a)| *a != artifact.reference) {
            let ok = FunctionEvent::BuildSucceeded {
                version: current.version,
                artifact: artifact.reference,
            };
            return self.record(item, key, state, ok).await.map(Some);
        }
        // Newer work supersedes: never deploy a version that is no longer
        // current, nor a spec that was changed since.
        let now = load(&self.pool, key).await?;
        if now.current_version != Some(current.version) || now.spec != state.spec {
            return Ok(Some(Recorded::Stale));
        }
        let started = std::time::Instant::now();
        let deployed = driver::traced(
            "deploy",
            key,
            current.version,
            spec.runtime,
            self.driver.kind(),
            self.driver.deploy(DeployRequest {
                key: key.clone(),
                version: current.version,
                runtime: spec.runtime,
                entrypoint: spec.entrypoint.clone(),
                memory_mb: spec.memory_mb,
                timeout_sec: spec.timeout_sec,
                env_vars: spec.env_vars.clone(),
                artifact,
            }),
        )
        .await;
        self.count(Step::Deploy, spec.runtime, &deployed, started);
        let events = match deployed {
            Ok(d) => vec![FunctionEvent::FunctionDeployed {
                version: d.version,
                endpoint: d.endpoint,
                node: d.node,
            }],
            Err(DriverError::Deploy { message, log_tail }) => {
                let failed = FunctionEvent::DeployFailed {
                    version: current.version,
                    error: message,
                    log_tail,
                };
                // A failed deploy leaves what served before serving (the
                // drivers keep it, or put it back): the log says which.
                match self.driver.status(key).await {
                    Some(serving) => vec![
                        failed,
                        FunctionEvent::DeployRolledBack {
                            failed_version: current.version,
                            restored_version: serving.version,
                        },
                    ],
                    None => vec![failed],
                }
            }
            Err(e) => return Err(infra(e)),
        };
        self.record_all(item, key, state, &events).await.map(Some)
    }
}

fn infra(e: DriverError) -> HandlerError {
    HandlerError::Retry(e.to_string())
}
