//! Queue consumers of sless: the worker loop, the reconciler that converges
//! a function towards what the log says, and the drivers that run functions.
//!
//! Architecture Invariant: workers depend on `store` and `domain` (and on
//! `sandbox`, which jails the local driver's processes, and `telemetry`);
//! they never import the API or the projector. What they learn, they
//! append to the log as events, through the system executor
//! (`sless_store::system`) only.

pub mod autoscale;
pub mod build_log;
mod capture;
pub mod collect;
pub mod crashes;
pub mod driver;
pub mod idle;
pub mod jobs;
pub mod kube;
pub mod local;
pub mod logs;
pub mod placement;
pub mod reconcile;
pub mod scheduler;
pub mod worker;

pub use driver::Driver;
pub use reconcile::Reconciler;
pub use scheduler::Scheduler;
pub use worker::{Worker, WorkerConfig};

/// How a work item's handler failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum HandlerError {
    /// Worth another attempt after a backoff.
    #[error("{0}")]
    Retry(String),
    /// Will fail the same way again: dead-letter now.
    #[error("{0}")]
    Fatal(String),
    /// This worker no longer holds the item; another worker has it.
    #[error("the lease was lost")]
    LeaseLost,
}

impl HandlerError {
    pub fn retry(e: impl std::fmt::Display) -> HandlerError {
        HandlerError::Retry(e.to_string())
    }
}

pub type HandlerResult<T> = Result<T, HandlerError>;
