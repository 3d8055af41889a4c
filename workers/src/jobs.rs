//! Running jobs: a `RunJob` work item (key: the job's stream,
//! `job/{ns}/{name}` or a cron run's `cron/{ns}/{trigger}/{unix seconds}`)
//! runs the version of the function its `JobRequested` named, once, to
//! completion, through the driver, and records how it ended.
//!
//! At most once: `JobStarted` names the work item's attempt, and an
//! attempt that finds the job started by an earlier one records it failed
//! instead of running it again (see `sless_domain::job::decide`). While it
//! runs, the stream is watched: a `JobDeleted` stops the run (dropping the
//! driver's future kills the process group). Every append is fenced by the
//! work item's lease, as the reconciler's are.

use std::time::Duration;

use chrono::Utc;
use sless_domain::job::{self, Job, JobCommand, JobEvent, Output, RunResult};
use sless_domain::{FunctionKey, Namespace};
use sless_store::eventlog;
use sless_store::invocations::{self, Invocation};
use sless_store::queue::WorkItem;
use sless_store::system::{self, Executed, SystemCommand};

use crate::driver::{
    self, Artifact, BuildLog, BuildRequest, Captured, Driver, DriverError, JobOutput, JobRequest,
};
use crate::reconcile::Reconciler;
use crate::{HandlerError, HandlerResult};

pub use sless_store::queue::RUN_JOB as KIND;

/// How often a running job's stream version is read for a `JobDeleted`.
const WATCH_EVERY: Duration = Duration::from_millis(250);

/// The namespace of a job's stream (`job/{ns}/…`, `cron/{ns}/…`).
fn namespace_of(stream: &str) -> HandlerResult<Namespace> {
    let mut parts = stream.splitn(3, '/');
    match (parts.next(), parts.next()) {
        (Some("job" | "cron"), Some(ns)) => {
            Namespace::parse(ns).map_err(|e| HandlerError::Fatal(e.to_string()))
        }
        _ => Err(HandlerError::Fatal(format!(
            "{stream:?} is not a job stream"
        ))),
    }
}

/// The event a job's handler receives: the shape of an HTTP call, with
/// method `JOB` (or `CRON` for a cron trigger's run), `json` the input and
/// `body` the input as JSON text.
pub fn handler_event(request: &job::JobRequest) -> serde_json::Value {
    let (method, json) = match &request.cron {
        None => ("JOB", request.input.clone()),
        Some(tick) => (
            "CRON",
            serde_json::json!({
                "source": "cron",
                "trigger": tick.trigger,
                "schedule": tick.schedule,
                "timezone": tick.timezone,
                "scheduled_at": tick.scheduled_at,
                "missed": tick.missed,
            }),
        ),
    };
    serde_json::json!({
        "method": method,
        "path": "/",
        "query": {},
        "headers": {},
        "body": json.to_string(),
        "json": json,
    })
}

fn output(c: Captured) -> Output {
    Output {
        text: c.text,
        bytes: c.bytes,
        truncated: c.truncated,
    }
}

/// The start of a run's error when it was killed for memory.
const OUT_OF_MEMORY: &str = "killed for using more memory than its memory_mb of";

/// Why a run failed, as its invocation record says it (`None`: it did not).
pub(crate) fn error_kind(result: &RunResult) -> Option<&'static str> {
    if result.exit_code == Some(0) && !result.timed_out && result.error.is_none() {
        return None;
    }
    Some(match (&result.error, result.exit_code) {
        _ if result.timed_out => "timeout",
        (Some(e), _) if e.starts_with(OUT_OF_MEMORY) => "oom",
        (Some(_), None) if result.duration_ms == 0 => "not-run",
        (Some(_), _) => "killed",
        (None, _) => "exited",
    })
}

/// How a run ended, for the decider.
pub(crate) fn run_result(out: JobOutput) -> RunResult {
    RunResult {
        error: match (out.timed_out, out.signal, out.out_of_memory) {
            (false, _, Some(mb)) => Some(format!("{OUT_OF_MEMORY} {mb}")),
            (false, Some(sig), None) => Some(format!("killed by signal {sig}")),
            _ => None,
        },
        exit_code: out.exit_code,
        timed_out: out.timed_out,
        stdout: output(out.stdout),
        stderr: output(out.stderr),
        duration_ms: out.duration.as_millis() as u64,
    }
}

/// A run that never started (no such version, a failed build).
fn not_run(error: String) -> RunResult {
    RunResult {
        exit_code: None,
        timed_out: false,
        error: Some(error),
        stdout: Output::default(),
        stderr: Output::default(),
        duration_ms: 0,
    }
}

impl<D: Driver> Reconciler<D> {
    /// Appends what `command` decides for the job, fenced by the lease.
    /// Returns the events appended (none: nothing to do, or someone
    /// appended first).
    async fn job_append(
        &self,
        item: &WorkItem,
        ns: &Namespace,
        state: &Job,
        command: JobCommand,
    ) -> HandlerResult<Vec<JobEvent>> {
        let events = job::decide(state, command).map_err(|e| HandlerError::Fatal(e.to_string()))?;
        let cmd = SystemCommand::fenced(item.key.clone(), ns, "worker", item).stands_on_its_state();
        match system::record(&self.pool, &cmd, state, events).await {
            Ok(Executed::Appended { events, .. }) => Ok(events),
            Ok(Executed::Fenced) => Err(HandlerError::LeaseLost),
            // Nothing to do, or a delete came first: the next look sees it.
            Ok(_) => Ok(Vec::new()),
            Err(e) => Err(HandlerError::retry(e)),
        }
    }

    /// Runs the job of a `RunJob` item.
    pub async fn run_job(&self, item: &WorkItem) -> HandlerResult<()> {
        let ns = namespace_of(&item.key)?;
        let (state, _) = eventlog::load::<sless_domain::job::Job>(&self.pool, &item.key)
            .await
            .map_err(HandlerError::retry)?;
        let Some(request) = state.request.clone() else {
            return Ok(()); // deleted before it ran
        };
        let started = self
            .job_append(
                item,
                &ns,
                &state,
                JobCommand::Start {
                    attempt: item.attempt,
                },
            )
            .await?;
        if !matches!(started[..], [JobEvent::JobStarted { .. }]) {
            return Ok(()); // finished, deleted, or failed for a lost worker
        }
        let state = started.iter().fold(state, |s, e| s.evolve(e));
        let began = Utc::now();
        // The run's invocation record: what the run prints is kept under it.
        let invocation = invocations::id_for(began);
        let result = tokio::select! {
            // A run that could not start is failed, not retried: a later
            // attempt would find it started and fail it anyway.
            r = self.execute(&ns, &item.key, &request, invocation) => match r {
                Ok(r) => r,
                Err(HandlerError::LeaseLost) => return Err(HandlerError::LeaseLost),
                Err(HandlerError::Retry(e) | HandlerError::Fatal(e)) => not_run(e),
            },
            () = self.deleted(&item.key, state.stream_version) => return Ok(()),
        };
        let origin = if request.cron.is_some() {
            "cron"
        } else {
            "job"
        };
        let status = if result.exit_code == Some(0) && !result.timed_out && result.error.is_none() {
            200
        } else {
            500
        };
        let error = (status != 200).then(|| {
            result
                .error
                .clone()
                .or_else(|| result.timed_out.then(|| "timed out".to_owned()))
                .unwrap_or_else(|| format!("exit code {:?}", result.exit_code))
        });
        let duration = Duration::from_millis(result.duration_ms);
        sless_telemetry::global().invocation(
            ns.as_str(),
            request.function.as_str(),
            status,
            origin,
            duration.as_secs_f64(),
            false,
        );
        let bytes_out = result.stdout.bytes + result.stderr.bytes;
        let error_kind = error_kind(&result).map(str::to_owned);
        self.job_append(
            item,
            &ns,
            &state,
            JobCommand::Finish {
                attempt: item.attempt,
                result,
            },
        )
        .await?;
        let record = Invocation {
            id: invocation,
            namespace: ns.to_string(),
            function: request.function.to_string(),
            version: Some(request.version),
            started_at: began,
            duration,
            status,
            bytes_in: request.input.to_string().len() as u64,
            bytes_out,
            cold: true,
            error,
            error_kind,
            request_id: format!("work-{}", item.id),
            origin: origin.to_owned(),
            run: Some(item.key.clone()),
            method: None,
            path: None,
            activation: None,
            instance_start: None,
        };
        if let Err(e) = invocations::insert(&self.pool, &[record]).await {
            tracing::warn!(error = %e, "recording the run as an invocation failed");
        }
        Ok(())
    }

    /// Builds (or finds the build of) the version and runs it.
    async fn execute(
        &self,
        ns: &Namespace,
        stream: &str,
        request: &job::JobRequest,
        invocation: uuid::Uuid,
    ) -> HandlerResult<RunResult> {
        let key = FunctionKey::new(ns.clone(), request.function.clone());
        let (function, _) = eventlog::load::<sless_domain::Function>(&self.pool, &key.stream())
            .await
            .map_err(HandlerError::retry)?;
        let (Some(spec), true) = (function.spec.as_ref(), function.exists()) else {
            return Ok(not_run(format!(
                "function {:?} no longer exists",
                key.name.as_str()
            )));
        };
        let Some(source) = function.version(request.version) else {
            return Ok(not_run(format!(
                "version {} of function {:?} is no longer kept",
                request.version,
                key.name.as_str()
            )));
        };
        let runtime = source.runtime.unwrap_or(spec.runtime);
        let context = self
            .blobs
            .get(&source.context_key)
            .await
            .map_err(HandlerError::retry)?;
        let artifact = match driver::traced(
            "build",
            &key,
            request.version,
            runtime,
            self.driver.kind(),
            self.driver.build(BuildRequest {
                key: key.clone(),
                version: request.version,
                runtime,
                context_sha256: source.context_sha256.clone(),
                context_key: source.context_key.clone(),
                context,
                built: function
                    .artifacts
                    .get(&request.version)
                    .cloned()
                    .map(|reference| Artifact { reference }),
                // The version's build log is its reconcile's build; this
                // one (normally found cached) is the run's business only.
                log: BuildLog::default(),
            }),
        )
        .await
        {
            Ok(a) => a,
            Err(DriverError::Build { message, log_tail }) => {
                return Ok(not_run(format!(
                    "version {} did not build: {message}\n{log_tail}",
                    request.version
                )));
            }
            Err(e) => return Err(HandlerError::retry(e)),
        };
        let run = driver::traced(
            "run",
            &key,
            request.version,
            runtime,
            self.driver.kind(),
            self.driver.run_job(JobRequest {
                key: key.clone(),
                run: stream.to_owned(),
                version: request.version,
                runtime,
                entrypoint: spec.entrypoint.clone(),
                env_vars: spec.env_vars.clone(),
                memory_mb: spec.memory_mb,
                timeout: Duration::from_secs(request.timeout_sec as u64),
                artifact,
                event: handler_event(request),
                invocation: Some(invocation),
            }),
        )
        .await;
        match run {
            Ok(out) => Ok(run_result(out)),
            Err(DriverError::Infra(e)) => Err(HandlerError::Retry(e)),
            Err(e) => Ok(not_run(e.to_string())),
        }
    }

    /// Resolves once the job's stream has moved past `at` (a user deleted
    /// it): the run is then stopped by dropping it.
    async fn deleted(&self, stream: &str, at: u64) {
        loop {
            tokio::time::sleep(WATCH_EVERY).await;
            if sless_store::jobs::log_version(&self.pool, stream)
                .await
                .is_ok_and(|v| v > at)
            {
                return;
            }
        }
    }
}
