//! One example of every event of every aggregate, as today's code makes it:
//! what `events.json` holds the written form of. Where a type has optional
//! fields, one example sets them all (so their names are pinned) and one
//! leaves them out; every value of the enums events carry appears.
//!
//! An example is never removed or changed once blessed: its fixture stands
//! for rows in logs. A new shape is a new example, with a name of its own.

use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sless_domain::job::{self, CronTick, JobEvent, Output};
use sless_domain::namespace::NamespaceState;
use sless_domain::trigger::{self, Schedule, TriggerEvent, TriggerKind, TriggerSpec};
use sless_domain::{
    Aggregate, CrashCause, Function, FunctionEvent, FunctionKey, FunctionName, FunctionSpec,
    InFlight, JobName, Namespace, NamespaceEvent, Runtime, ScaleWindow, Scaling, SourceVersion,
    TriggerName,
};
use sless_store::eventlog::Metadata;

/// The namespace every example lives in.
pub const NS: &str = "compat";
/// A W3C trace context, as events and work items record it.
pub const TRACEPARENT: &str = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01";

/// An event of one of the four aggregates.
#[derive(Debug, Clone, PartialEq)]
pub enum Event {
    Function(FunctionEvent),
    Namespace(NamespaceEvent),
    Trigger(TriggerEvent),
    Job(JobEvent),
}

/// The aggregates, by the prefix of their streams.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum Kind {
    Function,
    Namespace,
    Trigger,
    Job,
}

impl Kind {
    pub const ALL: [Kind; 4] = [Kind::Function, Kind::Namespace, Kind::Trigger, Kind::Job];

    /// The aggregate whose stream `stream` is.
    pub fn of_stream(stream: &str) -> Kind {
        match stream.split('/').next() {
            Some("function") => Kind::Function,
            Some("namespace") => Kind::Namespace,
            Some("trigger") => Kind::Trigger,
            Some("job" | "cron") => Kind::Job,
            _ => panic!("{stream:?} is no aggregate's stream"),
        }
    }

    /// Decodes the log's `type` and `data` as an event of this aggregate,
    /// with today's code.
    pub fn decode(self, event_type: &str, data: &Value) -> serde_json::Result<Event> {
        Ok(match self {
            Kind::Function => Event::Function(<Function as Aggregate>::decode(event_type, data)?),
            Kind::Namespace => {
                Event::Namespace(<NamespaceState as Aggregate>::decode(event_type, data)?)
            }
            Kind::Trigger => {
                Event::Trigger(<trigger::Trigger as Aggregate>::decode(event_type, data)?)
            }
            Kind::Job => Event::Job(<job::Job as Aggregate>::decode(event_type, data)?),
        })
    }
}

impl Event {
    pub fn type_name(&self) -> &'static str {
        match self {
            Event::Function(e) => <Function as Aggregate>::event_type(e),
            Event::Namespace(e) => <NamespaceState as Aggregate>::event_type(e),
            Event::Trigger(e) => <trigger::Trigger as Aggregate>::event_type(e),
            Event::Job(e) => <job::Job as Aggregate>::event_type(e),
        }
    }

    /// The `data` column today's code writes.
    pub fn data(&self) -> Value {
        match self {
            Event::Function(e) => <Function as Aggregate>::encode(e),
            Event::Namespace(e) => <NamespaceState as Aggregate>::encode(e),
            Event::Trigger(e) => <trigger::Trigger as Aggregate>::encode(e),
            Event::Job(e) => <job::Job as Aggregate>::encode(e),
        }
    }
}

/// One example: a name of its own, the stream it is appended to, the event
/// and its metadata.
#[derive(Debug, Clone)]
pub struct Example {
    pub name: &'static str,
    pub stream: String,
    pub event: Event,
    pub metadata: Metadata,
}

impl Example {
    /// The fixture entry today's code writes for it: the columns of its row.
    pub fn entry(&self) -> Value {
        json!({
            "name": self.name,
            "stream": self.stream,
            "namespace": NS,
            "type": self.event.type_name(),
            "data": self.event.data(),
            "metadata": serde_json::to_value(&self.metadata).expect("metadata serializes"),
        })
    }
}

fn ns() -> Namespace {
    Namespace::parse(NS).unwrap()
}

fn hello() -> FunctionName {
    FunctionName::parse("hello").unwrap()
}

/// A user's command, with every field of the metadata set.
fn user() -> Metadata {
    Metadata {
        actor: "alice".into(),
        request_id: Some("req-1".into()),
        correlation_id: Some("req-1".into()),
        causation_id: Some("41".into()),
        traceparent: Some(TRACEPARENT.into()),
    }
}

/// A user's command, as most are recorded.
fn request() -> Metadata {
    Metadata {
        actor: "alice".into(),
        request_id: Some("req-2".into()),
        correlation_id: Some("req-2".into()),
        ..Default::default()
    }
}

/// A decision of a worker working on work item 42.
fn worker() -> Metadata {
    Metadata::system("worker", 42)
}

fn output(text: &str, bytes: u64, truncated: bool) -> Output {
    Output {
        text: text.into(),
        bytes,
        truncated,
    }
}

/// The tick of the cron run examples: 2026-12-01T00:00:00Z, and the next.
pub fn tick(n: i64) -> DateTime<Utc> {
    DateTime::from_timestamp(1_796_083_200 + 60 * n, 0).expect("a time")
}

fn upload(version: u32, zip: char, context: char, runtime: Option<Runtime>) -> SourceVersion {
    let (zip, context) = (zip.to_string().repeat(64), context.to_string().repeat(64));
    SourceVersion {
        version,
        zip_key: format!("blobs/zips/{zip}.zip"),
        sha256: zip,
        size: 1234,
        files: 2,
        context_key: format!("blobs/contexts/{context}.tar.gz"),
        context_sha256: context,
        runtime,
    }
}

fn function_examples() -> Vec<(&'static str, FunctionEvent, Metadata)> {
    use FunctionEvent::*;
    let full = FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 256,
        timeout_sec: 30,
        env_vars: [("GREETING".to_owned(), "hello".to_owned())].into(),
        scale_to_zero_after_sec: Some(600),
        scaling: Scaling {
            min_instances: Some(1),
            max_instances: Some(20),
            concurrency: Some(8),
        },
    };
    let minimal = |runtime, entrypoint: &str| FunctionSpec {
        runtime,
        entrypoint: entrypoint.into(),
        memory_mb: 128,
        timeout_sec: 10,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        scaling: Scaling::default(),
    };
    let failed = |what: &str| (format!("{what} failed"), "last lines".to_owned());
    let (build_error, build_tail) = failed("pip install");
    let (deploy_error, deploy_tail) = failed("the health check");
    vec![
        ("FunctionCreated", FunctionCreated { spec: full }, user()),
        (
            "FunctionUploaded",
            FunctionUploaded(upload(1, 'a', 'b', Some(Runtime::Python311))),
            request(),
        ),
        ("BuildStarted", BuildStarted { version: 1 }, worker()),
        (
            "BuildSucceeded",
            BuildSucceeded {
                version: 1,
                artifact: "/var/lib/sless/builds/bbbb".into(),
            },
            worker(),
        ),
        (
            "FunctionDeployed",
            FunctionDeployed {
                version: 1,
                endpoint: "http://127.0.0.1:9001".into(),
                node: Some("worker-1".into()),
                instances: vec![
                    "http://127.0.0.1:9001".into(),
                    "http://127.0.0.1:9002".into(),
                ],
            },
            worker(),
        ),
        (
            "FunctionScaled",
            FunctionScaled {
                from: 2,
                to: 4,
                observed: InFlight(31.75),
                window: ScaleWindow::Stable,
                reason: "31.75 calls in flight over the last 60 s".into(),
            },
            Metadata::system("autoscaler", 43),
        ),
        (
            "FunctionScaled/panic",
            FunctionScaled {
                from: 4,
                to: 8,
                observed: InFlight(64.5),
                window: ScaleWindow::Panic,
                reason: "a burst past twice the capacity".into(),
            },
            Metadata::system("autoscaler", 44),
        ),
        (
            "FunctionScaledToZero",
            FunctionScaledToZero {
                version: 1,
                reason: "no call for 600 s".into(),
            },
            Metadata::system("idle", 45),
        ),
        (
            "FunctionScaledUp",
            FunctionScaledUp {
                reason: "a call".into(),
            },
            Metadata::caused_by_request("proxy", "req-3"),
        ),
        (
            "FunctionCrashed",
            FunctionCrashed {
                version: 1,
                cause: CrashCause::Oom,
                detail: "killed for using more memory than its memory_mb of 256".into(),
                memory_mb: Some(256),
            },
            worker(),
        ),
        (
            "FunctionCrashed/exited",
            FunctionCrashed {
                version: 1,
                cause: CrashCause::Exited,
                detail: "exited with status 1".into(),
                memory_mb: None,
            },
            worker(),
        ),
        (
            "FunctionCrashed/killed",
            FunctionCrashed {
                version: 1,
                cause: CrashCause::Killed,
                detail: "killed by signal 9".into(),
                memory_mb: None,
            },
            worker(),
        ),
        (
            "FunctionSpecChanged",
            FunctionSpecChanged {
                spec: minimal(Runtime::Go123, "main.Handle"),
            },
            request(),
        ),
        (
            "FunctionUploaded/minimal",
            FunctionUploaded(upload(2, 'c', 'd', None)),
            request(),
        ),
        ("BuildStarted/2", BuildStarted { version: 2 }, worker()),
        (
            "BuildFailed",
            BuildFailed {
                version: 2,
                error: build_error,
                log_tail: build_tail,
            },
            worker(),
        ),
        (
            "DeployFailed",
            DeployFailed {
                version: 2,
                error: deploy_error,
                log_tail: deploy_tail,
            },
            worker(),
        ),
        (
            "DeployRolledBack",
            DeployRolledBack {
                failed_version: 2,
                restored_version: 1,
            },
            worker(),
        ),
        (
            "FunctionRolledBack",
            FunctionRolledBack { version: 1 },
            request(),
        ),
        (
            "VersionsPruned",
            VersionsPruned { versions: vec![2] },
            request(),
        ),
        (
            "FunctionStopped",
            FunctionStopped {
                version: 1,
                reason: "no http trigger is enabled".into(),
            },
            worker(),
        ),
        (
            "FunctionDeployed/minimal",
            FunctionDeployed {
                version: 1,
                endpoint: "http://hello.sless-t-compat.svc:8080".into(),
                node: None,
                instances: Vec::new(),
            },
            worker(),
        ),
        (
            "ReconcileAbandoned",
            ReconcileAbandoned {
                attempts: 8,
                error: "the driver is unreachable".into(),
            },
            Metadata::system("worker", 46),
        ),
        ("FunctionDeleted", FunctionDeleted {}, request()),
        (
            "FunctionCreated/minimal",
            FunctionCreated {
                spec: minimal(Runtime::Nodejs20, "index.handler"),
            },
            request(),
        ),
    ]
}

fn trigger_examples() -> Vec<(&'static str, &'static str, TriggerEvent)> {
    let spec = |name: &str, kind, schedule, enabled| TriggerSpec {
        name: TriggerName::parse(name).unwrap(),
        function: hello(),
        kind,
        schedule,
        enabled,
    };
    vec![
        (
            "TriggerCreated",
            "every-minute",
            TriggerEvent::TriggerCreated {
                spec: spec(
                    "every-minute",
                    TriggerKind::Cron,
                    Some(Schedule {
                        cron: "* * * * *".into(),
                        timezone: "Europe/Paris".into(),
                    }),
                    true,
                ),
            },
        ),
        (
            "TriggerToggled",
            "every-minute",
            TriggerEvent::TriggerToggled { enabled: false },
        ),
        (
            "TriggerDeleted",
            "every-minute",
            TriggerEvent::TriggerDeleted {},
        ),
        (
            "TriggerCreated/http",
            "web",
            TriggerEvent::TriggerCreated {
                spec: spec("web", TriggerKind::Http, None, false),
            },
        ),
    ]
}

/// The streams of the job examples: a job a user asked for, two cron runs,
/// and a job that fails.
pub fn job_streams() -> [String; 4] {
    let every_minute = TriggerName::parse("every-minute").unwrap();
    [
        job::stream(&ns(), &JobName::parse("nightly").unwrap()),
        job::cron_stream(&ns(), &every_minute, tick(0)),
        job::cron_stream(&ns(), &every_minute, tick(1)),
        job::stream(&ns(), &JobName::parse("broken").unwrap()),
    ]
}

fn job_examples() -> Vec<(&'static str, usize, JobEvent)> {
    let cron = |n: i64, missed| {
        Some(CronTick {
            trigger: TriggerName::parse("every-minute").unwrap(),
            schedule: "* * * * *".into(),
            timezone: "Europe/Paris".into(),
            scheduled_at: tick(n),
            missed,
        })
    };
    let requested = |input, timeout_sec, cron| JobEvent::JobRequested {
        function: hello(),
        version: 1,
        input,
        timeout_sec,
        cron,
    };
    vec![
        (
            "JobRequested",
            0,
            requested(json!({"name": "job", "n": [1, 2]}), 60, None),
        ),
        ("JobStarted", 0, JobEvent::JobStarted { attempt: 1 }),
        (
            "JobSucceeded",
            0,
            JobEvent::JobSucceeded {
                exit_code: 0,
                stdout: output("done", 4, false),
                stderr: output("", 0, false),
                duration_ms: 120,
            },
        ),
        ("JobDeleted", 0, JobEvent::JobDeleted {}),
        (
            "JobRequested/cron",
            1,
            requested(Value::Null, 30, cron(0, 2)),
        ),
        ("JobStarted/cron", 1, JobEvent::JobStarted { attempt: 2 }),
        (
            "JobFailed",
            1,
            JobEvent::JobFailed {
                exit_code: None,
                error: "timed out after 30 s".into(),
                stdout: output("", 0, false),
                stderr: output("Traceback", 70_000, true),
                timed_out: true,
                duration_ms: 30_000,
            },
        ),
        (
            "JobRequested/cron-skipped",
            2,
            requested(Value::Null, 30, cron(1, 0)),
        ),
        (
            "JobSkipped",
            2,
            JobEvent::JobSkipped {
                reason: "the run before is still running".into(),
            },
        ),
        ("JobRequested/broken", 3, requested(json!({}), 5, None)),
        ("JobStarted/broken", 3, JobEvent::JobStarted { attempt: 1 }),
        (
            "JobFailed/exited",
            3,
            JobEvent::JobFailed {
                exit_code: Some(1),
                error: "exited with status 1".into(),
                stdout: output("", 0, false),
                stderr: output("boom", 4, false),
                timed_out: false,
                duration_ms: 15,
            },
        ),
    ]
}

/// Every example, in the order of the fixture file: streams in their order,
/// each stream's events in the order they are appended.
pub fn all() -> Vec<Example> {
    let function = FunctionKey::new(ns(), hello()).stream();
    let mut out: Vec<Example> = function_examples()
        .into_iter()
        .map(|(name, e, metadata)| Example {
            name,
            stream: function.clone(),
            event: Event::Function(e),
            metadata,
        })
        .collect();
    out.push(Example {
        name: "NamespaceEnsured",
        stream: ns().stream(),
        event: Event::Namespace(NamespaceEvent::NamespaceEnsured {}),
        metadata: request(),
    });
    out.extend(
        trigger_examples()
            .into_iter()
            .map(|(name, trigger_name, e)| Example {
                name,
                stream: trigger::stream(&ns(), &TriggerName::parse(trigger_name).unwrap()),
                event: Event::Trigger(e),
                metadata: request(),
            }),
    );
    let streams = job_streams();
    out.extend(job_examples().into_iter().map(|(name, s, e)| Example {
        name,
        stream: streams[s].clone(),
        metadata: match &e {
            JobEvent::JobRequested { cron: None, .. } | JobEvent::JobDeleted {} => request(),
            JobEvent::JobRequested { cron: Some(_), .. } | JobEvent::JobSkipped { .. } => {
                Metadata {
                    actor: "system:scheduler".into(),
                    ..Default::default()
                }
            }
            _ => worker(),
        },
        event: Event::Job(e),
    }));
    out
}
