//! Where functions actually run. The reconciler speaks only to this trait;
//! two drivers implement it: the local driver (processes on loopback, each
//! in a jail; `crate::local`) and the Kubernetes driver (Deployments, Jobs
//! and CronJobs; `crate::kube`). What both keep of a run's output is
//! `crate::capture`'s; a build's output goes to its `BuildLog`
//! (`crate::build_log`).

use std::collections::BTreeMap;
use std::future::Future;
use std::time::Duration;

use sless_domain::{FunctionKey, Runtime};

pub use crate::build_log::BuildLog;
pub use crate::capture::{Captured, JOB_OUTPUT_LIMIT};

/// Everything a driver needs to turn a build context into a runnable artifact.
#[derive(Debug, Clone)]
pub struct BuildRequest {
    pub key: FunctionKey,
    pub version: u32,
    pub runtime: Runtime,
    /// sha256 (hex) of the build context; builds are cached under it.
    pub context_sha256: String,
    /// The S3 key of the build context (what a cluster build fetches).
    pub context_key: String,
    /// The build context itself: a tar.gz of the function's files plus a Dockerfile.
    pub context: Vec<u8>,
    /// What an earlier build of this version gave, as the log recorded it.
    /// A driver whose artifacts cannot change once built (an image pinned
    /// by its digest) returns it without building again.
    pub built: Option<Artifact>,
    /// Where the build's output goes as it is printed (`crate::build_log`):
    /// the steps' output and sless's own notes about them. A build that
    /// runs nothing (found cached, or `built`) pushes nothing.
    pub log: BuildLog,
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
    /// How many instances should serve (at least one).
    pub instances: u32,
}

/// What runs for a function right now.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Deployment {
    pub version: u32,
    /// Base URL the invoke proxy forwards to, e.g. `http://127.0.0.1:41234`.
    pub endpoint: String,
    pub artifact: Artifact,
    /// The worker it runs on, for a driver whose functions live on one
    /// worker each ([`Driver::node`]).
    pub node: Option<String>,
    /// How many instances of it are ready.
    pub ready: u32,
    /// Each ready instance's own endpoint, when the proxy sends calls to
    /// each itself (the local driver's processes); empty when `endpoint`
    /// is the one address of all of them (a Service spreads the calls).
    pub instances: Vec<String>,
}

/// The worker a driver's functions run on (the local driver's), and how
/// long another worker's silence means it is gone.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Node {
    /// The worker's id (`SLESS_WORKER_ID`), as `FunctionDeployed` records it.
    pub id: String,
    /// A worker whose heartbeat is older than this is gone: what it ran is
    /// placed again (a lease: it beats every third of one).
    pub dead_after: Duration,
}

/// A function a driver runs here, for the placement sweep.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunningHere {
    pub key: FunctionKey,
    pub version: u32,
    pub endpoint: String,
    /// How long ago it was deployed.
    pub age: Duration,
}

/// One run of a function to completion.
#[derive(Debug, Clone)]
pub struct JobRequest {
    /// The function.
    pub key: FunctionKey,
    /// Names this run uniquely, e.g. `job/sless-0123456789abcdef/nightly` or
    /// `cron/sless-0123456789abcdef/report/1764470400`. It may contain `/`;
    /// drivers use it (sanitised) to name the run's log.
    pub run: String,
    pub version: u32,
    pub runtime: Runtime,
    pub entrypoint: String,
    pub env_vars: BTreeMap<String, String>,
    pub memory_mb: u32,
    /// How long the run may take before it is stopped.
    pub timeout: Duration,
    /// What [`Driver::build`] returned for this version.
    pub artifact: Artifact,
    /// The event the handler receives.
    pub event: serde_json::Value,
    /// The run's invocation record, which what it prints belongs to.
    pub invocation: Option<uuid::Uuid>,
}

/// How a run ended and what it printed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobOutput {
    /// The exit code, when the process exited on its own.
    pub exit_code: Option<i32>,
    /// The signal that ended the process, when one did.
    pub signal: Option<i32>,
    /// Whether the run was stopped for taking longer than its timeout.
    pub timed_out: bool,
    /// `Some(memory_mb)` when the run was killed for using more memory
    /// than its `memory_mb`.
    pub out_of_memory: Option<u32>,
    pub stdout: Captured,
    pub stderr: Captured,
    /// From the start of the process until it was gone.
    pub duration: Duration,
}

/// A cron trigger as a driver that runs cron itself (a CronJob) needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronRequest {
    /// The trigger's name.
    pub trigger: String,
    /// Five fields, or `@hourly` and the like, as the trigger has it.
    pub schedule: String,
    /// IANA time zone the schedule is read in.
    pub timezone: String,
    /// The function's version each tick runs, and how.
    pub version: u32,
    pub runtime: Runtime,
    pub entrypoint: String,
    pub env_vars: BTreeMap<String, String>,
    pub memory_mb: u32,
    pub timeout: Duration,
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

/// Runs a driver's `step` (`build`, `deploy`, `run`) of `version` of the
/// function `key` as a span of the work item's trace (traces only), marked
/// as an error when it fails.
pub async fn traced<T>(
    step: &'static str,
    key: &FunctionKey,
    version: u32,
    runtime: Runtime,
    driver: &'static str,
    work: impl Future<Output = Result<T, DriverError>>,
) -> Result<T, DriverError> {
    use tracing::Instrument;
    if !sless_telemetry::trace::enabled() {
        return work.await;
    }
    let span = tracing::info_span!(
        target: sless_telemetry::trace::TARGET,
        "driver step",
        otel.name = step,
        otel.status_code = tracing::field::Empty,
        otel.status_message = tracing::field::Empty,
        faas.name = %key.queue_key(),
        version,
        runtime = runtime.as_str(),
        driver,
    );
    let done = work.instrument(span.clone()).await;
    if let Err(e) = &done {
        span.record("otel.status_code", "ERROR");
        span.record("otel.status_message", e.to_string());
    }
    done
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

    /// Runs `req.instances` instances of the artifact and waits until they
    /// are healthy. If another version of the function runs (or the same
    /// with other settings), it is replaced only once the new instances are
    /// healthy. Deploying what already runs healthy returns the running
    /// deployment; deploying it with another count starts or stops
    /// instances until that many serve, leaving the others alone.
    fn deploy(
        &self,
        req: DeployRequest,
    ) -> impl Future<Output = Result<Deployment, DriverError>> + Send;

    /// Stops and removes whatever runs for the function (no error if nothing does).
    fn remove(&self, key: &FunctionKey) -> impl Future<Output = Result<(), DriverError>> + Send;

    /// Scales the function to zero (none of its http triggers is enabled);
    /// a later `deploy` starts it again. Drivers with nothing to keep
    /// remove it.
    fn stop(&self, key: &FunctionKey) -> impl Future<Output = Result<(), DriverError>> + Send {
        self.remove(key)
    }

    /// What the metrics call the driver: `local`, `kubernetes`.
    fn kind(&self) -> &'static str {
        "other"
    }

    /// Whether the driver fires cron triggers itself ([`Driver::sync_cron`]);
    /// when it does not, sless's scheduler fires them.
    fn runs_cron(&self) -> bool {
        false
    }

    /// Makes the function's cron triggers exactly `triggers`: creates or
    /// updates each, and removes the function's others. Only called when
    /// [`Driver::runs_cron`].
    fn sync_cron(
        &self,
        key: &FunctionKey,
        triggers: Vec<CronRequest>,
    ) -> impl Future<Output = Result<(), DriverError>> + Send {
        let _ = (key, triggers);
        async { Ok(()) }
    }

    /// What runs for the function and is healthy, if anything.
    fn status(&self, key: &FunctionKey) -> impl Future<Output = Option<Deployment>> + Send;

    /// The worker this driver's functions run on, when they run on one
    /// worker each (the local driver); `None` when they run on a cluster.
    fn node(&self) -> Option<Node> {
        None
    }

    /// The functions this driver runs on this worker (for a driver with a
    /// [`Driver::node`]).
    fn running_here(&self) -> Vec<RunningHere> {
        Vec::new()
    }

    /// Runs the function once, to completion: hands it `req.event`, waits
    /// until it exits or `req.timeout` passes (then stops it), and returns
    /// what it printed. A non-zero exit, a signal or a timeout is an
    /// `Ok(JobOutput)`; an error means the run could not be started for a
    /// reason of ours (`Infra`). Dropping the future stops the run and
    /// whatever it started: that is how a running job is cancelled.
    fn run_job(
        &self,
        req: JobRequest,
    ) -> impl Future<Output = Result<JobOutput, DriverError>> + Send;
}
