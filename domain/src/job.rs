//! One-shot jobs: a function's current version run once, to completion,
//! with a JSON input; its exit code and output kept.
//!
//! The Job aggregate has one stream per run: `job/{ns}/{name}` for a job a
//! user asked for, `cron/{ns}/{trigger}/{unix seconds}` for a cron
//! trigger's tick. The tick's stream is what makes a tick run once: only
//! one append can start a stream, however many schedulers try.
//!
//! A run is at most once: a job whose worker went away mid-run (its lease
//! passed to another worker) is recorded as failed, not started again,
//! since a job may do what must not be done twice.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};

use crate::DomainError;
use crate::names::{FunctionName, JobName, Namespace, TriggerName};

/// Largest input, as JSON text, in bytes.
pub const MAX_INPUT_BYTES: usize = 64 * 1024;
/// Longest a job may run, in seconds (a function's HTTP timeout is at most 900).
pub const MAX_TIMEOUT_SEC: u32 = 24 * 3600;

/// A job as a user asks for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobSpec {
    pub name: JobName,
    pub function: FunctionName,
    pub input: serde_json::Value,
    /// None: the function's `timeout_sec`.
    pub timeout_sec: Option<u32>,
}

impl JobSpec {
    /// Checks a job request: names, an input of at most 64 KiB as JSON
    /// text, a timeout from 1 s to 24 h.
    pub fn parse(
        name: &str,
        function: &str,
        input: serde_json::Value,
        timeout_sec: Option<u32>,
    ) -> Result<JobSpec, DomainError> {
        let name = JobName::parse(name)?;
        let function = FunctionName::parse(function).map_err(|e| match e {
            DomainError::Invalid { detail, .. } => DomainError::Invalid {
                field: "function",
                detail,
            },
            other => other,
        })?;
        let size = serde_json::to_string(&input).map(|s| s.len()).unwrap_or(0);
        if size > MAX_INPUT_BYTES {
            return Err(DomainError::Invalid {
                field: "input",
                detail: format!(
                    "the input is {size} bytes as JSON; the limit is {MAX_INPUT_BYTES}"
                ),
            });
        }
        if let Some(t) = timeout_sec
            && !(1..=MAX_TIMEOUT_SEC).contains(&t)
        {
            return Err(DomainError::Invalid {
                field: "timeout_sec",
                detail: format!("{t} is not from 1 to {MAX_TIMEOUT_SEC} seconds"),
            });
        }
        Ok(JobSpec {
            name,
            function,
            input,
            timeout_sec,
        })
    }
}

/// The stream of job `name` in `ns`.
pub fn stream(ns: &Namespace, name: &JobName) -> String {
    format!("job/{ns}/{name}")
}

/// The stream of the run of cron trigger `trigger` for the tick at `at`.
pub fn cron_stream(ns: &Namespace, trigger: &TriggerName, at: DateTime<Utc>) -> String {
    format!("cron/{ns}/{trigger}/{}", at.timestamp())
}

/// The tick a cron run is for.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CronTick {
    pub trigger: TriggerName,
    pub schedule: String,
    pub timezone: String,
    pub scheduled_at: DateTime<Utc>,
    /// Ticks passed over before this one (the scheduler was down): they are
    /// not run, as a CronJob with a starting deadline would not.
    #[serde(default)]
    pub missed: u32,
}

/// What a run printed, cut to a limit.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize, Deserialize)]
pub struct Output {
    pub text: String,
    /// Everything printed, in bytes.
    pub bytes: u64,
    pub truncated: bool,
}

/// Everything that can happen to a job (or a cron trigger's run).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum JobEvent {
    JobRequested {
        function: FunctionName,
        /// The function's version it runs: the current one when requested.
        version: u32,
        input: serde_json::Value,
        timeout_sec: u32,
        /// Set for a cron trigger's run.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        cron: Option<CronTick>,
    },
    /// A worker started it (`attempt` of its work item).
    JobStarted { attempt: i32 },
    JobSucceeded {
        exit_code: i32,
        stdout: Output,
        stderr: Output,
        duration_ms: u64,
    },
    JobFailed {
        exit_code: Option<i32>,
        error: String,
        stdout: Output,
        stderr: Output,
        timed_out: bool,
        duration_ms: u64,
    },
    /// Not run: a cron run whose previous run was still going
    /// (concurrency policy Forbid), or whose function was gone.
    JobSkipped { reason: String },
    /// Deleted by a user; a running job is stopped. The name is free again.
    JobDeleted {},
}

impl JobEvent {
    pub const TYPES: [&'static str; 6] = [
        "JobRequested",
        "JobStarted",
        "JobSucceeded",
        "JobFailed",
        "JobSkipped",
        "JobDeleted",
    ];

    pub fn type_name(&self) -> &'static str {
        match self {
            JobEvent::JobRequested { .. } => "JobRequested",
            JobEvent::JobStarted { .. } => "JobStarted",
            JobEvent::JobSucceeded { .. } => "JobSucceeded",
            JobEvent::JobFailed { .. } => "JobFailed",
            JobEvent::JobSkipped { .. } => "JobSkipped",
            JobEvent::JobDeleted {} => "JobDeleted",
        }
    }

    pub fn data(&self) -> serde_json::Value {
        crate::events::data_of(self)
    }

    pub fn from_stored(
        type_name: &str,
        data: &serde_json::Value,
    ) -> Result<Self, serde_json::Error> {
        crate::events::from_type_and_data(type_name, data)
    }
}

/// Where a job is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, Default)]
pub enum JobStatus {
    #[default]
    Pending,
    Running,
    Succeeded,
    Failed,
    Skipped,
}

impl JobStatus {
    pub fn as_str(self) -> &'static str {
        match self {
            JobStatus::Pending => "Pending",
            JobStatus::Running => "Running",
            JobStatus::Succeeded => "Succeeded",
            JobStatus::Failed => "Failed",
            JobStatus::Skipped => "Skipped",
        }
    }

    pub fn parse(s: &str) -> Option<JobStatus> {
        [
            JobStatus::Pending,
            JobStatus::Running,
            JobStatus::Succeeded,
            JobStatus::Failed,
            JobStatus::Skipped,
        ]
        .into_iter()
        .find(|x| x.as_str() == s)
    }

    /// True once nothing more will happen to the run.
    pub fn finished(self) -> bool {
        matches!(
            self,
            JobStatus::Succeeded | JobStatus::Failed | JobStatus::Skipped
        )
    }
}

/// What a job was asked to do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JobRequest {
    pub function: FunctionName,
    pub version: u32,
    pub input: serde_json::Value,
    pub timeout_sec: u32,
    pub cron: Option<CronTick>,
}

/// A job's state: a fold over its stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Job {
    pub stream_version: u64,
    /// Set while the job exists (requested, not deleted).
    pub request: Option<JobRequest>,
    pub status: JobStatus,
    /// The work item attempt that started it.
    pub attempt: Option<i32>,
}

impl Job {
    pub fn exists(&self) -> bool {
        self.request.is_some()
    }

    pub fn evolve(mut self, event: &JobEvent) -> Job {
        self.stream_version += 1;
        match event {
            JobEvent::JobRequested {
                function,
                version,
                input,
                timeout_sec,
                cron,
            } => {
                self = Job {
                    stream_version: self.stream_version,
                    request: Some(JobRequest {
                        function: function.clone(),
                        version: *version,
                        input: input.clone(),
                        timeout_sec: *timeout_sec,
                        cron: cron.clone(),
                    }),
                    ..Job::default()
                }
            }
            JobEvent::JobStarted { attempt } => {
                self.status = JobStatus::Running;
                self.attempt = Some(*attempt);
            }
            JobEvent::JobSucceeded { .. } => self.status = JobStatus::Succeeded,
            JobEvent::JobFailed { .. } => self.status = JobStatus::Failed,
            JobEvent::JobSkipped { .. } => self.status = JobStatus::Skipped,
            JobEvent::JobDeleted {} => {
                self = Job {
                    stream_version: self.stream_version,
                    ..Job::default()
                }
            }
        }
        self
    }

    pub fn fold<'a>(events: impl IntoIterator<Item = &'a JobEvent>) -> Job {
        events.into_iter().fold(Job::default(), |j, e| j.evolve(e))
    }
}

/// How a run ended, as the worker saw it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RunResult {
    pub exit_code: Option<i32>,
    pub timed_out: bool,
    /// Set when it could not run at all, or was killed by a signal.
    pub error: Option<String>,
    pub stdout: Output,
    pub stderr: Output,
    pub duration_ms: u64,
}

/// What can happen to a job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JobCommand {
    /// A user asks for a run (`version`, `timeout_sec`: the function's now).
    Request {
        function: FunctionName,
        version: u32,
        input: serde_json::Value,
        timeout_sec: u32,
        cron: Option<CronTick>,
    },
    /// A worker with work item attempt `attempt` is about to run it.
    Start {
        attempt: i32,
    },
    /// The run of `attempt` ended.
    Finish {
        attempt: i32,
        result: RunResult,
    },
    /// A cron run that is not run.
    Skip {
        reason: String,
    },
    Delete,
}

/// Turns a command into the events it causes.
///
/// - `Request` for a job that exists: `AlreadyExists`.
/// - `Start` of a pending job: `JobStarted`. Of a job a worker of an
///   earlier attempt started: `JobFailed` (at most once: it is not run
///   again). Of a finished or deleted job: nothing.
/// - `Finish` of the attempt that started it: `JobSucceeded` (exit code
///   0) or `JobFailed`; any other attempt, nothing.
pub fn decide(state: &Job, command: JobCommand) -> Result<Vec<JobEvent>, DomainError> {
    match command {
        JobCommand::Request {
            function,
            version,
            input,
            timeout_sec,
            cron,
        } => {
            if state.exists() {
                return Err(DomainError::AlreadyExists("job".into()));
            }
            Ok(vec![JobEvent::JobRequested {
                function,
                version,
                input,
                timeout_sec,
                cron,
            }])
        }
        JobCommand::Start { attempt } => Ok(match (state.exists(), state.status, state.attempt) {
            (true, JobStatus::Pending, _) => vec![JobEvent::JobStarted { attempt }],
            (true, JobStatus::Running, Some(a)) if a < attempt => vec![JobEvent::JobFailed {
                exit_code: None,
                error: format!(
                    "the worker running it (attempt {a}) stopped before it finished; a job is not run twice"
                ),
                stdout: Output::default(),
                stderr: Output::default(),
                timed_out: false,
                duration_ms: 0,
            }],
            _ => vec![],
        }),
        JobCommand::Finish { attempt, result } => {
            if !state.exists()
                || state.status != JobStatus::Running
                || state.attempt != Some(attempt)
            {
                return Ok(vec![]);
            }
            Ok(vec![match result {
                RunResult {
                    exit_code: Some(0),
                    timed_out: false,
                    error: None,
                    stdout,
                    stderr,
                    duration_ms,
                } => JobEvent::JobSucceeded {
                    exit_code: 0,
                    stdout,
                    stderr,
                    duration_ms,
                },
                r => JobEvent::JobFailed {
                    error: r.error.unwrap_or_else(|| match (r.timed_out, r.exit_code) {
                        (true, _) => format!(
                            "timed out after {} s",
                            state.request.as_ref().map_or(0, |q| q.timeout_sec)
                        ),
                        (false, Some(code)) => format!("exited with code {code}"),
                        (false, None) => "ended without an exit code".into(),
                    }),
                    exit_code: r.exit_code,
                    stdout: r.stdout,
                    stderr: r.stderr,
                    timed_out: r.timed_out,
                    duration_ms: r.duration_ms,
                },
            }])
        }
        JobCommand::Skip { reason } => Ok(match (state.exists(), state.status) {
            (true, JobStatus::Pending) => vec![JobEvent::JobSkipped { reason }],
            _ => vec![],
        }),
        JobCommand::Delete => {
            if !state.exists() {
                return Err(DomainError::NotFound("job".into()));
            }
            Ok(vec![JobEvent::JobDeleted {}])
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn a_job_needs_names_a_small_input_and_a_sane_timeout() {
        assert!(JobSpec::parse("once", "report", json!({"a": 1}), None).is_ok());
        assert!(JobSpec::parse("once", "report", json!(null), Some(86_400)).is_ok());
        let big = json!("x".repeat(MAX_INPUT_BYTES));
        let cases: Vec<(&str, Result<JobSpec, DomainError>)> = vec![
            ("name", JobSpec::parse("Once", "report", json!({}), None)),
            ("name", JobSpec::parse("", "report", json!({}), None)),
            (
                "function",
                JobSpec::parse("once", "Report", json!({}), None),
            ),
            ("input", JobSpec::parse("once", "report", big, None)),
            (
                "timeout_sec",
                JobSpec::parse("once", "report", json!({}), Some(0)),
            ),
            (
                "timeout_sec",
                JobSpec::parse("once", "report", json!({}), Some(86_401)),
            ),
        ];
        for (field, result) in cases {
            match result {
                Err(DomainError::Invalid { field: got, .. }) => assert_eq!(got, field),
                other => panic!("{field}: {other:?}"),
            }
        }
    }

    fn requested() -> Vec<JobEvent> {
        decide(
            &Job::default(),
            JobCommand::Request {
                function: FunctionName::parse("report").unwrap(),
                version: 2,
                input: json!({"n": 1}),
                timeout_sec: 30,
                cron: None,
            },
        )
        .unwrap()
    }

    fn ok_run() -> RunResult {
        RunResult {
            exit_code: Some(0),
            timed_out: false,
            error: None,
            stdout: Output {
                text: "{}\n".into(),
                bytes: 3,
                truncated: false,
            },
            stderr: Output::default(),
            duration_ms: 12,
        }
    }

    fn apply(j: Job, events: &[JobEvent]) -> Job {
        events.iter().fold(j, |j, e| j.evolve(e))
    }

    #[test]
    fn a_job_runs_once_and_records_how_it_ended() {
        let j = Job::fold(&requested());
        assert_eq!(j.status, JobStatus::Pending);
        assert!(matches!(
            decide(
                &j,
                JobCommand::Request {
                    function: FunctionName::parse("report").unwrap(),
                    version: 2,
                    input: json!(null),
                    timeout_sec: 1,
                    cron: None
                }
            ),
            Err(DomainError::AlreadyExists(_))
        ));
        let started = decide(&j, JobCommand::Start { attempt: 1 }).unwrap();
        let j = apply(j, &started);
        assert_eq!((j.status, j.attempt), (JobStatus::Running, Some(1)));
        // Another attempt's result changes nothing.
        assert_eq!(
            decide(
                &j,
                JobCommand::Finish {
                    attempt: 2,
                    result: ok_run()
                }
            ),
            Ok(vec![])
        );
        let done = decide(
            &j,
            JobCommand::Finish {
                attempt: 1,
                result: ok_run(),
            },
        )
        .unwrap();
        assert!(matches!(
            done[..],
            [JobEvent::JobSucceeded { exit_code: 0, .. }]
        ));
        let j = apply(j, &done);
        assert!(j.status.finished());
        // A finished job is not started again.
        assert_eq!(decide(&j, JobCommand::Start { attempt: 2 }), Ok(vec![]));
    }

    #[test]
    fn a_failed_exit_a_timeout_and_a_lost_worker_fail_the_job() {
        let j = apply(
            Job::fold(&requested()),
            &[JobEvent::JobStarted { attempt: 1 }],
        );
        let exit3 = RunResult {
            exit_code: Some(3),
            ..ok_run()
        };
        match &decide(
            &j,
            JobCommand::Finish {
                attempt: 1,
                result: exit3,
            },
        )
        .unwrap()[..]
        {
            [
                JobEvent::JobFailed {
                    exit_code: Some(3),
                    error,
                    timed_out: false,
                    ..
                },
            ] => assert!(error.contains("code 3"), "{error}"),
            other => panic!("{other:?}"),
        }
        let late = RunResult {
            exit_code: None,
            timed_out: true,
            ..ok_run()
        };
        match &decide(
            &j,
            JobCommand::Finish {
                attempt: 1,
                result: late,
            },
        )
        .unwrap()[..]
        {
            [
                JobEvent::JobFailed {
                    timed_out: true,
                    error,
                    ..
                },
            ] => assert!(error.contains("timed out after 30 s"), "{error}"),
            other => panic!("{other:?}"),
        }
        // The worker of attempt 1 went away: attempt 2 fails it, never reruns it.
        match &decide(&j, JobCommand::Start { attempt: 2 }).unwrap()[..] {
            [JobEvent::JobFailed { error, .. }] => assert!(error.contains("not run twice")),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn deleting_frees_the_name_and_skipping_only_applies_to_a_pending_run() {
        let j = Job::fold(&requested());
        let skipped = decide(
            &j,
            JobCommand::Skip {
                reason: "busy".into(),
            },
        )
        .unwrap();
        assert_eq!(apply(j.clone(), &skipped).status, JobStatus::Skipped);
        let gone = decide(&j, JobCommand::Delete).unwrap();
        let j = apply(j, &gone);
        assert!(!j.exists());
        assert_eq!(
            decide(&j, JobCommand::Delete),
            Err(DomainError::NotFound("job".into()))
        );
        assert_eq!(decide(&j, JobCommand::Start { attempt: 1 }), Ok(vec![]));
        let again = apply(j, &requested());
        assert_eq!(
            (again.status, again.stream_version),
            (JobStatus::Pending, 3)
        );
    }

    #[test]
    fn job_events_round_trip_through_type_and_data() {
        let tick = CronTick {
            trigger: TriggerName::parse("nightly").unwrap(),
            schedule: "0 3 * * *".into(),
            timezone: "Europe/Berlin".into(),
            scheduled_at: DateTime::parse_from_rfc3339("2026-11-30T02:00:00Z")
                .unwrap()
                .with_timezone(&Utc),
            missed: 2,
        };
        let mut events = requested();
        if let JobEvent::JobRequested { cron, .. } = &mut events[0] {
            *cron = Some(tick);
        }
        events.extend([
            JobEvent::JobStarted { attempt: 1 },
            JobEvent::JobFailed {
                exit_code: Some(1),
                error: "x".into(),
                stdout: Output::default(),
                stderr: Output::default(),
                timed_out: false,
                duration_ms: 5,
            },
            JobEvent::JobSkipped { reason: "r".into() },
            JobEvent::JobDeleted {},
        ]);
        for e in events {
            assert!(JobEvent::TYPES.contains(&e.type_name()));
            assert_eq!(JobEvent::from_stored(e.type_name(), &e.data()).unwrap(), e);
        }
    }
}
