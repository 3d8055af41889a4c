//! The pure core of sless: names, function specs, events, commands, the
//! deciders that turn commands into events, the rules an uploaded archive
//! must follow (and reading its build context back), and the rules of
//! trigger and job requests (cron schedules, time zones).
//!
//! Architecture Invariant: this crate does no IO. It never depends on tokio,
//! sqlx, an HTTP stack, or any other crate of this workspace; everything here
//! is a function of its arguments and is tested without a database.

pub mod aggregate;
pub mod archive;
pub mod autoscale;
pub mod cron;
pub mod diff;
pub mod events;
pub mod function;
pub mod job;
pub mod names;
pub mod namespace;
pub mod source;
pub mod spec;
pub mod trigger;

pub use aggregate::Aggregate;
pub use events::{CrashCause, FunctionEvent, InFlight, ScaleWindow, SourceVersion};
pub use function::{
    Decision, Function, FunctionCommand, Phase, Retention, UploadedSource, decide, prune_versions,
};
pub use names::{FunctionKey, FunctionName, JobName, Namespace, TriggerName};
pub use namespace::NamespaceEvent;
pub use spec::{FunctionSpec, Runtime, Scaling};

/// Why a command was refused or an input rejected.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DomainError {
    #[error("{field}: {detail}")]
    Invalid { field: &'static str, detail: String },
    #[error("{0} already exists")]
    AlreadyExists(String),
    #[error("{0} not found")]
    NotFound(String),
    #[error("{0}")]
    Conflict(String),
}
