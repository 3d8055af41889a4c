//! The Function aggregate: its state folded from events (`evolve`) and the
//! decisions that turn commands into new events (`decide`).

use serde::Serialize;

use crate::DomainError;
use crate::events::{FunctionEvent, SourceVersion};
use crate::spec::FunctionSpec;

/// Where a function is in its life, as users see it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Default)]
pub enum Phase {
    /// Created, or uploaded and waiting for a worker.
    #[default]
    Pending,
    Building,
    Ready,
    Failed,
}

impl Phase {
    pub fn parse(s: &str) -> Option<Phase> {
        [Phase::Pending, Phase::Building, Phase::Ready, Phase::Failed]
            .into_iter()
            .find(|p| p.as_str() == s)
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Pending => "Pending",
            Phase::Building => "Building",
            Phase::Ready => "Ready",
            Phase::Failed => "Failed",
        }
    }
}

/// A function's state: a fold over its stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Function {
    /// Number of events applied (the stream version).
    pub stream_version: u64,
    pub spec: Option<FunctionSpec>,
    /// Every uploaded version, oldest first.
    pub versions: Vec<SourceVersion>,
    /// The version users want running (the latest upload).
    pub current_version: Option<u32>,
    /// The version that runs now, and where.
    pub deployed_version: Option<u32>,
    pub endpoint: Option<String>,
    /// The artifact built for `current_version`, if the build finished.
    pub built: Option<(u32, String)>,
    pub phase: Phase,
    pub last_error: Option<String>,
    /// The version whose build or deploy failed last (cleared by a new upload).
    pub failed_version: Option<u32>,
}

impl Function {
    pub fn exists(&self) -> bool {
        self.spec.is_some()
    }

    /// The source version users want running now.
    pub fn current(&self) -> Option<&SourceVersion> {
        let v = self.current_version?;
        self.versions.iter().find(|s| s.version == v)
    }

    /// Folds one event into the state.
    pub fn evolve(mut self, event: &FunctionEvent) -> Function {
        self.stream_version += 1;
        match event {
            FunctionEvent::FunctionCreated { spec } => {
                self.spec = Some(spec.clone());
                self.phase = Phase::Pending;
            }
            FunctionEvent::FunctionUploaded(v) => {
                self.versions.push(v.clone());
                self.current_version = Some(v.version);
                self.phase = Phase::Pending;
                self.last_error = None;
                self.failed_version = None;
            }
            FunctionEvent::BuildStarted { version } => {
                if self.current_version == Some(*version) {
                    self.phase = Phase::Building;
                }
            }
            FunctionEvent::BuildSucceeded { version, artifact } => {
                self.built = Some((*version, artifact.clone()));
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
            FunctionEvent::FunctionDeployed { version, endpoint } => {
                self.deployed_version = Some(*version);
                self.endpoint = Some(endpoint.clone());
                if self.current_version == Some(*version) {
                    self.phase = Phase::Ready;
                    self.last_error = None;
                }
            }
            FunctionEvent::ReconcileAbandoned { attempts, error } => {
                self.phase = Phase::Failed;
                self.last_error = Some(format!("gave up after {attempts} attempts: {error}"));
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
    /// Record an upload whose blobs are already stored. `version` is filled by `decide`.
    Upload {
        source: UploadedSource,
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

/// The result of `decide`: the events to append (none when the command
/// changes nothing).
pub type Decision = Result<Vec<FunctionEvent>, DomainError>;

/// Decides what a command means for a function in its current state.
pub fn decide(state: &Function, command: FunctionCommand) -> Decision {
    match command {
        FunctionCommand::Create { spec } => {
            if state.exists() {
                return Err(DomainError::AlreadyExists("function".into()));
            }
            spec.validate()?;
            Ok(vec![FunctionEvent::FunctionCreated { spec }])
        }
        FunctionCommand::Upload { source } => {
            if !state.exists() {
                return Err(DomainError::NotFound("function".into()));
            }
            // An identical re-upload of what is current changes nothing.
            if state.current().is_some_and(|c| c.sha256 == source.sha256) {
                return Ok(vec![]);
            }
            let version = state.versions.iter().map(|v| v.version).max().unwrap_or(0) + 1;
            Ok(vec![FunctionEvent::FunctionUploaded(SourceVersion {
                version,
                sha256: source.sha256,
                size: source.size,
                files: source.files,
                zip_key: source.zip_key,
                context_sha256: source.context_sha256,
                context_key: source.context_key,
            })])
        }
    }
}

#[cfg(test)]
mod tests;
