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
//!
//! Each round looks (`Reconciler::observe`: the http triggers, what the
//! driver runs, whether the worker the log names is alive), decides the
//! next [`Action`] with the pure [`next`], and carries it out
//! (`Reconciler::act`) through the driver; what it did is recorded
//! through the system executor (`sless_store::system`), fenced by the work
//! item's lease, on the stream version the round read. A round that loses
//! a race looks again.

use sless_domain::{Function, FunctionEvent, FunctionKey};
use sless_store::PgPool;
use sless_store::blobs::BlobStore;
use sless_store::build_logs::{End, Outcome};
use sless_store::eventlog;
use sless_store::queue::WorkItem;
use sless_store::system::{self, Executed, SystemCommand};
use sless_store::trigger_index;

use crate::build_log::Recording;
use crate::driver::{
    self, Artifact, BuildRequest, CronRequest, DeployRequest, Deployment, Driver, DriverError,
};
use crate::{HandlerError, HandlerResult};
use sless_domain::Runtime;
use sless_telemetry::Step;

pub use sless_store::queue::RECONCILE_FUNCTION as KIND;

mod next;
pub use next::{Action, Observed, next};

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

/// What carrying out an action came to.
enum Progress {
    /// Nothing more to do: the function has converged.
    Converged,
    /// Recorded something, or found the stream moved: look again.
    Again,
}

impl<D: Driver> Reconciler<D> {
    /// Runs a build or deploy of `version` (`work`, boxed by the caller: a
    /// driver's futures are large, and each layer that held one by value
    /// would take its size again from the worker thread's stack) in a trace
    /// span, and
    /// counts it in the metrics unless `counted` is false: `failed` when
    /// the function's own build or start failed, `error` when the platform
    /// did.
    async fn measured<T>(
        &self,
        step: Step,
        counted: bool,
        key: &FunctionKey,
        version: u32,
        runtime: Runtime,
        work: impl Future<Output = Result<T, DriverError>>,
    ) -> Result<T, DriverError> {
        let started = std::time::Instant::now();
        let name = match step {
            Step::Build => "build",
            Step::Deploy => "deploy",
        };
        let result = driver::traced(name, key, version, runtime, self.driver.kind(), work).await;
        if counted {
            let outcome = match &result {
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
        result
    }

    /// Records `events`, decided on `state`, through the system executor:
    /// appended only if the stream is still at the version `state` was
    /// read at and this worker still holds the item's lease.
    async fn record(
        &self,
        item: &WorkItem,
        key: &FunctionKey,
        state: &Function,
        events: Vec<FunctionEvent>,
    ) -> HandlerResult<Progress> {
        let cmd = SystemCommand::fenced(key.stream(), &key.namespace, "worker", item)
            .stands_on_its_state();
        match system::record(&self.pool, &cmd, state, events).await {
            Ok(Executed::Fenced) => Err(HandlerError::LeaseLost),
            // Appended, or someone appended first: look again.
            Ok(_) => Ok(Progress::Again),
            Err(e) => Err(HandlerError::retry(e)),
        }
    }

    /// Converges one function: looks, decides the next action ([`next`]),
    /// carries it out, and again until nothing is left to do. Left to the
    /// next item after a few rounds (an append that raced us enqueued one).
    pub async fn reconcile(&self, item: &WorkItem) -> HandlerResult<()> {
        let key = FunctionKey::from_queue_key(&item.key)
            .map_err(|e| HandlerError::Fatal(e.to_string()))?;
        for _ in 0..8 {
            let state = load(&self.pool, &key).await?;
            let observed = self.observe(&key, &state).await?;
            let action = next(&state, &observed);
            // Boxed: the driver's futures are large, and a caller's stack
            // (a test's, say) need not hold them.
            match Box::pin(self.act(item, &key, &state, action)).await? {
                Progress::Again => continue,
                Progress::Converged => {
                    self.collect_build_logs(&key, &state).await;
                    return self.sync_cron(&key, &state).await;
                }
            }
        }
        Ok(())
    }

    /// What `next` needs to know beyond the log: the function's http
    /// triggers, what the driver runs for it, and whether the worker the
    /// log says it runs on is alive. Nothing, for a function that should
    /// not run.
    async fn observe(&self, key: &FunctionKey, state: &Function) -> HandlerResult<Observed> {
        if state.spec.is_none() || state.current().is_none() {
            return Ok(Observed::default());
        }
        let triggers = trigger_index::http_triggers(&self.pool, &key.namespace, key.name.as_str())
            .await
            .map_err(HandlerError::retry)?;
        let running = Box::pin(self.driver.status(key)).await;
        let here = self.driver.node();
        let there_alive = match (&here, state.deployed_node.as_deref()) {
            (Some(here), Some(there)) if here.id != there => {
                sless_store::workers::alive(&self.pool, there, here.dead_after)
                    .await
                    .map_err(HandlerError::retry)?
            }
            _ => false,
        };
        Ok(Observed {
            triggers,
            running,
            here: here.map(|h| h.id),
            there_alive,
        })
    }

    /// Carries out `action`, decided on `state`.
    async fn act(
        &self,
        item: &WorkItem,
        key: &FunctionKey,
        state: &Function,
        action: Action,
    ) -> HandlerResult<Progress> {
        match action {
            Action::Nothing => Ok(Progress::Converged),
            Action::Remove => {
                self.driver.remove(key).await.map_err(infra)?;
                Ok(Progress::Converged)
            }
            Action::Stop { then } => {
                self.driver.stop(key).await.map_err(infra)?;
                match then {
                    Some(event) => self.record(item, key, state, vec![event]).await,
                    None => Ok(Progress::Converged),
                }
            }
            Action::Record(event) => self.record(item, key, state, vec![event]).await,
            Action::Restore { version } => self.restore(item, key, state, version).await,
            Action::Build { version } | Action::Deploy { version } => {
                Box::pin(self.build_and_deploy(item, key, state, version)).await
            }
        }
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

    /// Starts `served`, the version that served before the current one
    /// failed, again; a version that cannot start either leaves the
    /// function as it is.
    async fn restore(
        &self,
        item: &WorkItem,
        key: &FunctionKey,
        state: &Function,
        served: u32,
    ) -> HandlerResult<Progress> {
        let Some(spec) = state.spec.as_ref() else {
            return Ok(Progress::Converged);
        };
        let artifact = Artifact {
            reference: state.artifacts[&served].clone(),
        };
        match self
            .deploy(key, served, spec, artifact, state.instances())
            .await
        {
            Ok(d) => self.record(item, key, state, vec![deployed(d)]).await,
            Err(DriverError::Deploy { message, .. }) => {
                tracing::warn!(function = %key.queue_key(), version = served, error = %message, "the version that served before does not start again");
                Ok(Progress::Converged)
            }
            Err(e) => Err(infra(e)),
        }
    }

    /// Builds the current version `version` (or, built already, checks its
    /// artifact), records how the build ended, and deploys a version whose
    /// build was recorded already.
    async fn build_and_deploy(
        &self,
        item: &WorkItem,
        key: &FunctionKey,
        state: &Function,
        version: u32,
    ) -> HandlerResult<Progress> {
        let (Some(spec), Some(current)) = (state.spec.as_ref(), state.current()) else {
            return Ok(Progress::Again);
        };
        let built = state.built.as_ref().filter(|(v, _)| *v == version);
        let context = self
            .blobs
            .get(&current.context_key)
            .await
            .map_err(HandlerError::retry)?;
        // The build's log: written down while it runs, stored when it ends,
        // before the event that says how it ended.
        let recording = Recording::start(&self.pool, key, version)
            .await
            .map_err(HandlerError::retry)?;
        // A version built already only has its artifact checked: not
        // counted as a build.
        let build = self
            .measured(
                Step::Build,
                built.is_none(),
                key,
                version,
                spec.runtime,
                Box::pin(
                    self.driver.build(BuildRequest {
                        key: key.clone(),
                        version,
                        runtime: spec.runtime,
                        context_sha256: current.context_sha256.clone(),
                        context_key: current.context_key.clone(),
                        context,
                        built: state
                            .artifacts
                            .get(&version)
                            .cloned()
                            .map(|reference| Artifact { reference }),
                        log: recording.log(),
                    }),
                ),
            )
            .await;
        recording
            .finish(&self.pool, &self.blobs, build_end(&build))
            .await
            .map_err(HandlerError::retry)?;
        let artifact = match build {
            Ok(a) => a,
            Err(DriverError::Build { message, log_tail }) => {
                let failed = FunctionEvent::BuildFailed {
                    version,
                    error: message,
                    log_tail,
                };
                return self.record(item, key, state, vec![failed]).await;
            }
            Err(e) => return Err(infra(e)),
        };
        if built.is_none_or(|(_, a)| *a != artifact.reference) {
            let ok = FunctionEvent::BuildSucceeded {
                version,
                artifact: artifact.reference,
            };
            return self.record(item, key, state, vec![ok]).await;
        }
        // Newer work supersedes: never deploy a version that is no longer
        // current, nor a spec that was changed since.
        let now = load(&self.pool, key).await?;
        if now.current_version != Some(version) || now.spec != state.spec {
            return Ok(Progress::Again);
        }
        let events = match self
            .deploy(key, version, spec, artifact, state.instances())
            .await
        {
            Ok(d) => vec![deployed(d)],
            Err(DriverError::Deploy { message, log_tail }) => {
                let failed = FunctionEvent::DeployFailed {
                    version,
                    error: message,
                    log_tail,
                };
                // A failed deploy leaves what served before serving (the
                // drivers keep it, or put it back): the log says which.
                match Box::pin(self.driver.status(key)).await {
                    Some(serving) => vec![
                        failed,
                        FunctionEvent::DeployRolledBack {
                            failed_version: version,
                            restored_version: serving.version,
                        },
                    ],
                    None => vec![failed],
                }
            }
            Err(e) => return Err(infra(e)),
        };
        self.record(item, key, state, events).await
    }

    /// Asks the driver to deploy `version` of the function, with `spec`,
    /// counted and traced.
    async fn deploy(
        &self,
        key: &FunctionKey,
        version: u32,
        spec: &sless_domain::FunctionSpec,
        artifact: Artifact,
        instances: u32,
    ) -> Result<Deployment, DriverError> {
        self.measured(
            Step::Deploy,
            true,
            key,
            version,
            spec.runtime,
            Box::pin(self.driver.deploy(DeployRequest {
                key: key.clone(),
                version,
                runtime: spec.runtime,
                entrypoint: spec.entrypoint.clone(),
                memory_mb: spec.memory_mb,
                timeout_sec: spec.timeout_sec,
                env_vars: spec.env_vars.clone(),
                artifact,
                instances: instances.max(1),
            })),
        )
        .await
    }
}

/// How a build ended, as its log records it.
fn build_end(built: &Result<Artifact, DriverError>) -> End {
    match built {
        Ok(_) => End {
            outcome: Outcome::Succeeded,
            error: None,
        },
        Err(DriverError::Build { message, .. }) => End {
            outcome: Outcome::Failed,
            error: Some(message.clone()),
        },
        Err(e) => End {
            outcome: Outcome::Failed,
            error: Some(format!(
                "the build was interrupted ({e}); it is tried again"
            )),
        },
    }
}

/// The event that records a deploy.
fn deployed(d: Deployment) -> FunctionEvent {
    FunctionEvent::FunctionDeployed {
        version: d.version,
        endpoint: d.endpoint,
        node: d.node,
        instances: d.instances,
    }
}

fn infra(e: DriverError) -> HandlerError {
    HandlerError::Retry(e.to_string())
}

#[cfg(test)]
mod tests;
