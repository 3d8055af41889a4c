//! Where functions actually run. The reconciler speaks only to this trait;
//! the local driver (processes on loopback) implements it today.

use std::collections::BTreeMap;
use std::future::Future;

use sless_domain::{FunctionKey, Runtime};

/// Everything a driver needs to turn a build context into a runnable artifact.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    pub key: FunctionKey,
    pub version: u32,
    pub runtime: Runtime,
    /// sha256 (hex) of the build context; builds are cached under it.
    pub context_sha256: String,
    /// The S3 key of the build context (what a cluster build would read).
    pub context_key: String,
    /// The build context itself: a tar.gz of the function's files plus a Dockerfile.
    pub context: Vec<u8>,
}

/// The result of a build: something `deploy` can run.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Artifact {
    /// Driver-specific reference: a directory for the local driver, an image for Kubernetes.
    pub reference: String,
}

#[derive(Debug, Clone)]
pub struct DeployRequest {
    pub key: FunctionKey,
    pub version: u32,
    pub runtime: Runtime,
    pub entrypoint: String,
    pub memory_mb: u32,
    pub timeout_sec: u32,
    pub env_vars: BTreeMap<String, String>,
    pub artifact: Artifact,
}

/// What runs for a function right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    pub version: u32,
    /// Base URL the invoke proxy forwards to, e.g. `http://127.0.0.1:41234`.
    pub endpoint: String,
    pub artifact: Artifact,
}

#[derive(Debug, Clone, thiserror::Error)]
pub enum DriverError {
    /// The user's code or dependencies could not be built. Not retried.
    #[error("build failed: {message}")]
    Build { message: String, log_tail: String },
    /// The built function did not start or did not become healthy. Not retried.
    #[error("deploy failed: {message}")]
    Deploy { message: String, log_tail: String },
    /// Something of ours or the machine's went wrong; worth retrying.
    #[error("driver: {0}")]
    Infra(String),
}

/// A place functions run. Every method is idempotent: calling it twice with
/// the same request has the effect of calling it once.
pub trait Driver: Send + Sync + 'static {
    /// Builds the context into an artifact, reusing an earlier build of the
    /// same `context_sha256`.
    fn build(
        &self,
        req: BuildRequest,
    ) -> impl Future<Output = Result<Artifact, DriverError>> + Send;

    /// Runs the artifact and waits until it is healthy. If another version of
    /// the function runs, it is replaced only once the new one is healthy.
    /// Deploying what already runs healthy returns the running deployment.
    fn deploy(
        &self,
        req: DeployRequest,
    ) -> impl Future<Output = Result<Deployment, DriverError>> + Send;

    /// Stops and removes whatever runs for the function (no error if nothing does).
    fn remove(&self, key: &FunctionKey) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// What runs for the function and is healthy, if anything.
    fn status(&self, key: &FunctionKey) -> impl Future<Output = Option<Deployment>> + Send;
}
