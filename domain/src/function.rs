//! The Function aggregate: its state folded from events (`evolve`) and the
//! decisions that turn commands into new events (`decide`).

use serde::Serialize;

use crate::DomainError;
use crate::events::{FunctionEvent, SourceVersion};
use crate::spec::{FunctionSpec, Runtime};

mod retention;

pub use retention::{Retention, prune_versions};

/// Where a function is in its life, as users see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum Phase {
    /// Created, or uploaded and waiting for a worker.
    #[default]
    Pending,
    Building,
    Ready,
    Failed,
    /// Deleted: nothing runs, and the name may be created again.
    Deleted,
}

impl Phase {
    pub const ALL: [Phase; 5] = [
        Phase::Pending,
        Phase::Building,
        Phase::Ready,
        Phase::Failed,
        Phase::Deleted,
    ];

    pub fn parse(s: &str) -> Option<Phase> {
        Phase::ALL.into_iter().find(|p| p.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Building => "Building",
            Phase::Ready => "Ready",
            Phase::Failed => "Failed",
            Phase::Deleted => "Deleted",
        }
    }
}

/// A function's state: a fold over its stream.
///
/// A deleted function keeps its stream: `FunctionDeleted` clears what runs
/// and what is current, keeps the last spec (for the read model's row) and
/// the list of versions, so that a function created again under the same
/// name goes on numbering its uploads after the highest version the stream
/// ever had. Version N of a stream always means one upload.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Function {
    /// Number of events applied (the stream version).
    pub stream_version: u64,
    /// The spec users asked for (after a delete: the last one it had).
    pub spec: Option<FunctionSpec>,
    /// Every uploaded version not pruned, oldest first.
    pub versions: Vec<SourceVersion>,
    /// The highest version number the stream ever gave (pruned ones too).
    pub last_version: u32,
    /// The highest version number given before the function was last
    /// created: versions up to it belong to an earlier life of the name.
    pub earlier_lives: u32,
    /// The version users want running (the latest upload).
    pub current_version: Option<u32>,
    /// The version that runs now, and where.
    pub deployed_version: Option<u32>,
    pub endpoint: Option<String>,
    /// The worker it runs on, for the local driver (`FunctionDeployed`'s
    /// `node`).
    pub deployed_node: Option<String>,
    /// The artifact built for `current_version`, if the build finished.
    pub built: Option<(u32, String)>,
    /// The artifact last built for each version still kept (a rollback
    /// finds its version's build here).
    pub artifacts: std::collections::BTreeMap<u32, String>,
    pub phase: Phase,
    pub last_error: Option<String>,
    /// The version whose build or deploy failed last (cleared by a new upload).
    pub failed_version: Option<u32>,
    /// The spec the deployment of `deployed_version` was started with. A
    /// `FunctionDeployed` is appended against the stream version the
    /// reconciler read, so the spec current then is the one it deployed.
    pub deployed_spec: Option<FunctionSpec>,
    /// Scaled to zero (`FunctionScaledToZero`): nothing runs until a call
    /// scales it up. The phase stays what it was (`Ready`).
    pub idle: bool,
    /// The instances the autoscaler last asked for (`FunctionScaled`);
    /// `None` since it last started from zero. See [`Function::instances`].
    pub scaled_to: Option<u32>,
    /// Each instance's endpoint, as the last `FunctionDeployed` named them
    /// (empty when `endpoint` is the one address of all of them).
    pub instance_endpoints: Vec<String>,
}

impl Function {
    /// True when the function was created and not deleted since.
    pub fn exists(&self) -> bool {
        self.spec.is_some() && self.phase != Phase::Deleted
    }

    /// The number the next upload gets: one past the highest version the
    /// stream ever had, deletes included.
    pub fn next_version(&self) -> u32 {
        self.last_version + 1
    }

    /// Version `v`, unless it never existed or was pruned.
    pub fn version(&self, v: u32) -> Option<&SourceVersion> {
        self.versions.iter().find(|s| s.version == v)
    }

    /// The current source, when changing to `spec` needs it built again:
    /// the build context (its Dockerfile, the install step) depends on the
    /// runtime.
    pub fn rebuild_for(&self, spec: &FunctionSpec) -> Option<&SourceVersion> {
        let runtime = self.spec.as_ref()?.runtime;
        if runtime == spec.runtime {
            return None;
        }
        self.current()
    }

    /// True when what runs was started with the spec users want now.
    pub fn deployed_with_current_spec(&self) -> bool {
        match (&self.deployed_spec, &self.spec) {
            (Some(deployed), Some(spec)) => spec.runs_as(deployed),
            _ => false,
        }
    }

    /// True when starting the version that serves failed with nothing
    /// running (scaled up from zero, its deploy failed): a call may try
    /// again (`Activate`).
    /// (A read model's row, which keeps no `failed_version`, says the same.)
    pub fn start_failed(&self) -> bool {
        self.phase == Phase::Failed
            && self.endpoint.is_none()
            && self.deployed_version.is_some()
            && self.deployed_version == self.current_version
    }

    /// How many instances should serve: none when it does not exist or is
    /// scaled to zero, else what the autoscaler last asked for (one since
    /// it last started) within the spec's `min_instances` (at least one)
    /// and `max_instances`, so a change of those applies at once.
    pub fn instances(&self) -> u32 {
        match &self.spec {
            Some(spec) if self.exists() && !self.idle => {
                let floor = spec.min_instances().max(1);
                let ceiling = spec.max_instances().max(floor);
                self.scaled_to.unwrap_or(1).clamp(floor, ceiling)
            }
            _ => 0,
        }
    }

    /// The source version users want running now.
    pub fn current(&self) -> Option<&SourceVersion> {
        let v = self.current_version?;
        self.versions.iter().find(|s| s.version == v)
    }

    /// Folds one event into the state.
    pub fn evolve(mut self, event: &FunctionEvent) -> Function {
        self.stream_version += 1;
        let created = matches!(event, FunctionEvent::FunctionCreated { .. });
        if !self.exists() && !created {
            // Nothing happens to a function that does not exist (a worker's
            // event can only land here if it raced a delete).
            return self;
        }
        match event {
            FunctionEvent::FunctionCreated { spec } => {
                // A new life: only the stream's position and its version
                // numbers carry over from before a delete.
                self = Function {
                    stream_version: self.stream_version,
                    spec: Some(spec.clone()),
                    versions: std::mem::take(&mut self.versions),
                    last_version: self.last_version,
                    earlier_lives: self.last_version,
                    ..Function::default()
                };
            }
            FunctionEvent::FunctionSpecChanged { spec } => {
                self.spec = Some(spec.clone());
                // What runs no longer matches: it is redeployed (the
                // reconciler compares `deployed_spec`), and a failure of the
                // old spec is not this one's.
                if matches!(self.phase, Phase::Ready | Phase::Failed) {
                    self.phase = Phase::Pending;
                }
                self.last_error = None;
                self.failed_version = None;
                self.idle = false;
            }
            FunctionEvent::FunctionDeleted {} => {
                self = Function {
                    stream_version: self.stream_version,
                    spec: self.spec.take(),
                    versions: std::mem::take(&mut self.versions),
                    last_version: self.last_version,
                    phase: Phase::Deleted,
                    ..Function::default()
                };
            }
            FunctionEvent::FunctionUploaded(v) => {
                self.versions.push(v.clone());
                self.last_version = self.last_version.max(v.version);
                self.current_version = Some(v.version);
                self.phase = Phase::Pending;
                self.last_error = None;
                self.failed_version = None;
                // A new version is deployed at once, idle or not.
                self.idle = false;
            }
            FunctionEvent::FunctionRolledBack { version } => {
                self.current_version = Some(*version);
                self.phase = Phase::Pending;
                self.last_error = None;
                self.failed_version = None;
                self.idle = false;
            }
            FunctionEvent::VersionsPruned { versions } => {
                self.versions.retain(|v| !versions.contains(&v.version));
                self.artifacts.retain(|v, _| !versions.contains(v));
            }
            FunctionEvent::BuildStarted { version } => {
                if self.current_version == Some(*version) {
                    self.phase = Phase::Building;
                }
            }
            FunctionEvent::BuildSucceeded { version, artifact } => {
                self.built = Some((*version, artifact.clone()));
                self.artifacts.insert(*version, artifact.clone());
            }
            FunctionEvent::BuildFailed {
                version,
                error,
                log_tail,
            }
            | FunctionEvent::DeployFailed {
                version,
                error,
                log_tail,
            } => {
                if self.current_version == Some(*version) {
                    self.phase = Phase::Failed;
                    self.last_error = Some(with_tail(error, log_tail));
                    self.failed_version = Some(*version);
                }
            }
            FunctionEvent::FunctionDeployed {
                version,
                endpoint,
                node,
                instances,
            } => {
                self.deployed_version = Some(*version);
                self.endpoint = Some(endpoint.clone());
                self.deployed_node.clone_from(node);
                self.instance_endpoints.clone_from(instances);
                self.deployed_spec = self.spec.clone();
                if self.current_version == Some(*version) {
                    self.phase = Phase::Ready;
                    self.last_error = None;
                }
            }
            FunctionEvent::FunctionStopped { version, .. } => {
                // Nothing runs; the build stays for when it is served again.
                if self.deployed_version == Some(*version) {
                    self.deployed_version = None;
                    self.endpoint = None;
                    self.deployed_node = None;
                    self.deployed_spec = None;
                    self.instance_endpoints.clear();
                }
            }
            FunctionEvent::FunctionScaledToZero { .. } => {
                // The version stays the one that serves when called; where
                // it ran is forgotten, so no call is sent there, and so is
                // how many served: it starts again with one.
                self.idle = true;
                self.endpoint = None;
                self.deployed_node = None;
                self.instance_endpoints.clear();
                self.scaled_to = None;
            }
            FunctionEvent::FunctionScaled { to, .. } => {
                self.scaled_to = Some(*to);
            }
            FunctionEvent::FunctionScaledUp { .. } => {
                // A start that failed is tried again.
                if self.start_failed() {
                    self.phase = Phase::Pending;
                    self.failed_version = None;
                }
                self.idle = false;
            }
            FunctionEvent::ReconcileAbandoned { attempts, error } => {
                self.phase = Phase::Failed;
                self.last_error = Some(format!("gave up after {attempts} attempts: {error}"));
            }
            FunctionEvent::DeployRolledBack {
                failed_version,
                restored_version,
            } => {
                // What serves is the restored version; the failure stays
                // the current version's, with a first line saying so.
                self.deployed_version = Some(*restored_version);
                if self.current_version == Some(*failed_version) {
                    let serving = if failed_version == restored_version {
                        format!(
                            "the new settings of version {failed_version} failed to deploy and were rolled back; version {restored_version} still serves with the settings it had"
                        )
                    } else {
                        format!(
                            "version {failed_version} failed to deploy and was rolled back; version {restored_version} still serves"
                        )
                    };
                    self.last_error = Some(match self.last_error.take() {
                        Some(error) => format!("{serving}\n{error}"),
                        None => serving,
                    });
                }
            }
            FunctionEvent::FunctionCrashed {
                version, detail, ..
            } => {
                // It serves again once its driver has started it again; the
                // crash stays the last error until the next deploy.
                if self.deployed_version == Some(*version) {
                    self.last_error = Some(format!("version {version} crashed: {detail}"));
                }
            }
        }
        self
    }

    /// Folds a whole stream.
    pub fn fold<'a>(events: impl IntoIterator<Item = &'a FunctionEvent>) -> Function {
        events
            .into_iter()
            .fold(Function::default(), Function::evolve)
    }
}

fn with_tail(error: &str, log_tail: &str) -> String {
    if log_tail.trim().is_empty() {
        error.to_owned()
    } else {
        format!("{error}\n{}", log_tail.trim_end())
    }
}

/// What a user or a worker asks of a function.
#[derive(Debug, Clone)]
pub enum FunctionCommand {
    Create {
        spec: FunctionSpec,
    },
    /// Record an upload whose blobs are already stored. `version` is filled
    /// by `decide`, and `retention` prunes what the new version passes.
    Upload {
        source: UploadedSource,
        retention: Retention,
    },
    /// Replace the spec. When the runtime changes and there is a current
    /// version, `rebuilt` is that version's source with a build context made
    /// for the new runtime (its blobs already stored; see
    /// `Function::rebuild_for`): it becomes the next version, and
    /// `retention` prunes what it passes.
    ChangeSpec {
        spec: FunctionSpec,
        rebuilt: Option<UploadedSource>,
        retention: Retention,
    },
    /// Delete the function: stop what runs, free the name.
    Delete,
    /// Make an earlier version current again.
    Rollback {
        version: u32,
    },
    /// Stop what runs: no call came for the idle window (`reason`).
    ScaleToZero {
        reason: String,
    },
    /// Start an instance of a function scaled to zero (a call came).
    Activate {
        reason: String,
    },
    /// The instances that serve stopped with what ran them: the worker
    /// `node` (any, with `None`) stopped, was lost, or started again
    /// without them. The function is at zero at once, so that no call is
    /// sent where nothing listens (calls are held as for any start from
    /// zero), and starts again. Nothing when it is not served from there.
    InstancesLost {
        node: Option<String>,
        reason: String,
    },
    /// Serve with `to` instances (the autoscaler measured `observed` over
    /// `window`): bounded by the spec's `min_instances` and
    /// `max_instances`; nothing when that is what serves already, or when
    /// nothing serves to scale.
    Scale {
        to: u32,
        observed: crate::InFlight,
        window: crate::ScaleWindow,
        reason: String,
    },
}

/// An upload's facts, before it gets its version number.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UploadedSource {
    pub sha256: String,
    pub size: u64,
    pub files: u32,
    pub zip_key: String,
    pub context_sha256: String,
    pub context_key: String,
}

/// What a command decides: the events to append (none when it changes
/// nothing), retention's `VersionsPruned` among them when they pass the
/// number of versions kept, and the versions that event prunes.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Decision {
    pub events: Vec<FunctionEvent>,
    /// The versions the events prune, as they were: once the events
    /// commit, their blobs go to the collector, which deletes each one no
    /// kept version of any function uses.
    pub pruned: Vec<SourceVersion>,
}

impl Decision {
    /// The numbers of the versions pruned.
    pub fn pruned_versions(&self) -> Vec<u32> {
        self.pruned.iter().map(|v| v.version).collect()
    }

    /// The blobs of the versions pruned: each one's zip and build context.
    pub fn pruned_blobs(&self) -> Vec<String> {
        self.pruned
            .iter()
            .flat_map(|v| [v.zip_key.clone(), v.context_key.clone()])
            .collect()
    }
}

/// The events a command causes for a function in its current state
/// (`Function::decide`'s, without what they prune).
pub fn decide(
    state: &Function,
    command: FunctionCommand,
) -> Result<Vec<FunctionEvent>, DomainError> {
    state.decide(command).map(|d| d.events)
}

impl Function {
    /// Decides what a command means for the function in this state: an
    /// upload or a change of spec that makes events has the pruning its
    /// `retention` calls for appended to them.
    pub fn decide(&self, command: FunctionCommand) -> Result<Decision, DomainError> {
        let retention = match &command {
            FunctionCommand::Upload { retention, .. }
            | FunctionCommand::ChangeSpec { retention, .. } => Some(*retention),
            _ => None,
        };
        let events = events_of(self, command)?;
        Ok(match retention {
            Some(retention) if !events.is_empty() => retention.apply(self, events),
            _ => Decision {
                events,
                pruned: Vec::new(),
            },
        })
    }
}

/// The events `command` causes in `state`, before retention.
fn events_of(
    state: &Function,
    command: FunctionCommand,
) -> Result<Vec<FunctionEvent>, DomainError> {
    match command {
        FunctionCommand::Create { spec } => {
            if state.exists() {
                return Err(DomainError::AlreadyExists("function".into()));
            }
            spec.validate()?;
            Ok(vec![FunctionEvent::FunctionCreated { spec }])
        }
        FunctionCommand::Upload { source, .. } => {
            if !state.exists() {
                return Err(DomainError::NotFound("function".into()));
            }
            // The same files packed for the same runtime as a version kept
            // (of this life of the name): no new version. What is current
            // already changes nothing; an earlier one becomes current again.
            let same = state
                .versions
                .iter()
                .rev()
                .take_while(|v| v.version > state.earlier_lives)
                .find(|v| v.context_sha256 == source.context_sha256);
            if let Some(v) = same {
                if state.current_version == Some(v.version) {
                    return Ok(vec![]);
                }
                return Ok(vec![FunctionEvent::FunctionRolledBack {
                    version: v.version,
                }]);
            }
            let runtime = state.spec.as_ref().map(|s| s.runtime);
            Ok(vec![FunctionEvent::FunctionUploaded(
                source.into_version(state.next_version(), runtime),
            )])
        }
        FunctionCommand::ChangeSpec { spec, rebuilt, .. } => {
            if !state.exists() {
                return Err(DomainError::NotFound("function".into()));
            }
            spec.validate()?;
            if state.spec.as_ref() == Some(&spec) {
                return Ok(vec![]);
            }
            let runtime = spec.runtime;
            let rebuild = state.rebuild_for(&spec).map(|current| {
                match rebuilt {
                    Some(r) if r.sha256 == current.sha256 => Ok(r),
                    Some(_) => Err(DomainError::Conflict(
                        "the function's source changed while its runtime was being changed: read it again and retry".into(),
                    )),
                    None => Err(DomainError::Conflict(
                        "a runtime change needs the current source rebuilt for the new runtime".into(),
                    )),
                }
            });
            let mut events = vec![FunctionEvent::FunctionSpecChanged { spec }];
            if let Some(rebuilt) = rebuild.transpose()? {
                events.push(FunctionEvent::FunctionUploaded(
                    rebuilt.into_version(state.next_version(), Some(runtime)),
                ));
            }
            Ok(events)
        }
        FunctionCommand::Delete => {
            if !state.exists() {
                return Err(DomainError::NotFound("function".into()));
            }
            Ok(vec![FunctionEvent::FunctionDeleted {}])
        }
        FunctionCommand::Rollback { version } => {
            if !state.exists() {
                return Err(DomainError::NotFound("function".into()));
            }
            let Some(target) = state.version(version) else {
                let detail = if version >= 1 && version <= state.last_version {
                    format!("version {version} was pruned by retention; its source is gone")
                } else {
                    format!(
                        "version {version} does not exist; the function has versions 1 to {}",
                        state.last_version
                    )
                };
                return Err(DomainError::Invalid {
                    field: "version",
                    detail,
                });
            };
            let runtime = state.spec.as_ref().map(|s| s.runtime);
            if let (Some(packed), Some(now)) = (target.runtime, runtime)
                && packed != now
            {
                return Err(DomainError::Conflict(format!(
                    "version {version} was packed for {packed} but the function now runs {now}: \
                     change its runtime to {packed} first (PUT), then roll back"
                )));
            }
            if state.current_version == Some(version) {
                return Ok(vec![]);
            }
            Ok(vec![FunctionEvent::FunctionRolledBack { version }])
        }
        // Both are asked by sless itself, and change nothing when the
        // function is no longer in the state they were asked for.
        FunctionCommand::ScaleToZero { reason } => {
            match state.deployed_version.filter(|_| serving(state)) {
                Some(version) => Ok(vec![FunctionEvent::FunctionScaledToZero {
                    version,
                    reason,
                }]),
                None => Ok(vec![]),
            }
        }
        FunctionCommand::Activate { reason } => {
            if !state.exists() {
                return Err(DomainError::NotFound("function".into()));
            }
            if !state.idle && !state.start_failed() {
                return Ok(vec![]);
            }
            Ok(vec![FunctionEvent::FunctionScaledUp { reason }])
        }
        FunctionCommand::InstancesLost { node, reason } => {
            let there = node.is_none() || state.deployed_node == node;
            let lost = state.exists() && !state.idle && state.endpoint.is_some() && there;
            match state.deployed_version.filter(|_| lost) {
                Some(version) => Ok(vec![
                    FunctionEvent::FunctionScaledToZero {
                        version,
                        reason: reason.clone(),
                    },
                    FunctionEvent::FunctionScaledUp {
                        reason: format!("started again: {reason}"),
                    },
                ]),
                None => Ok(vec![]),
            }
        }
        FunctionCommand::Scale {
            to,
            observed,
            window,
            reason,
        } => {
            let from = state.instances();
            let scalable = from > 0 && state.endpoint.is_some() && state.phase == Phase::Ready;
            let Some(spec) = state.spec.as_ref().filter(|_| scalable) else {
                return Ok(vec![]);
            };
            let floor = spec.min_instances().max(1);
            let to = to.clamp(floor, spec.max_instances().max(floor));
            if to == from {
                return Ok(vec![]);
            }
            Ok(vec![FunctionEvent::FunctionScaled {
                from,
                to,
                observed,
                window,
                reason,
            }])
        }
    }
}

/// True when `state` runs its current version, Ready, as deployed: what
/// scaling to zero may stop.
fn serving(state: &Function) -> bool {
    state.exists()
        && !state.idle
        && state.phase == Phase::Ready
        && state.endpoint.is_some()
        && state.deployed_version.is_some()
        && state.deployed_version == state.current_version
}

/// A kept version's source, as the upload that made it gave it.
impl From<&SourceVersion> for UploadedSource {
    fn from(v: &SourceVersion) -> UploadedSource {
        UploadedSource {
            sha256: v.sha256.clone(),
            size: v.size,
            files: v.files,
            zip_key: v.zip_key.clone(),
            context_sha256: v.context_sha256.clone(),
            context_key: v.context_key.clone(),
        }
    }
}

impl UploadedSource {
    fn into_version(self, version: u32, runtime: Option<Runtime>) -> SourceVersion {
        SourceVersion {
            runtime,
            version,
            sha256: self.sha256,
            size: self.size,
            files: self.files,
            zip_key: self.zip_key,
            context_sha256: self.context_sha256,
            context_key: self.context_key,
        }
    }
}

#[cfg(test)]
mod tests;
