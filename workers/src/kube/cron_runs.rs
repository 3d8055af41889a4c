//! Runs of CronJobs, recorded in the log like the runs sless's own
//! scheduler fires: a Job a CronJob of sless started becomes `JobRequested`
//! and `JobStarted` on the tick's stream `cron/{ns}/{trigger}/{unix}`, and,
//! once it ends, `JobSucceeded` or `JobFailed` with its pod's log, and an
//! invocation record with origin `cron`.
//!
//! Every worker process watches; appends that expect the stream's version
//! make any number of them record each run once.

use std::time::Duration;

use chrono::{DateTime, TimeZone, Utc};
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams};
use sless_domain::Aggregate;
use sless_domain::job::{self, CronTick, Job as JobState, JobCommand, JobStatus};
use sless_domain::trigger::{self, TriggerKind};
use sless_domain::{FunctionName, Namespace, TriggerName};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata};
use sless_store::function_logs::Stream;
use sless_store::invocations::{self, Invocation};
use sless_store::system::{self, SystemCommand};
use sless_store::triggers;
use tokio::sync::watch;

use super::api::{JobEnd, job_end};
use super::render::pod::CONTAINER;
use super::render::{
    COMPONENT_CRON, LABEL_COMPONENT, LABEL_FUNCTION, LABEL_TRIGGER, LABEL_VERSION,
};
use crate::capture;
use crate::driver::{Captured, JobOutput};
use crate::logs::{Shipper, Source};

/// The annotation the CronJob controller puts on each Job it starts.
pub const SCHEDULED_AT: &str = "batch.kubernetes.io/cronjob-scheduled-timestamp";

/// What [`CronRunRecorder::record`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Recorded {
    /// Not a run of sless's CronJobs, or nothing new.
    Nothing,
    /// The run's request and start were appended.
    Started(String),
    /// Its end was appended.
    Finished(String),
}

/// Records the runs of sless's CronJobs in the log.
#[derive(Clone)]
pub struct CronRunRecorder {
    pool: PgPool,
    client: kube::Client,
    /// Changes when the driver deployed into a namespace.
    wake: Option<watch::Receiver<()>>,
    /// Where what a run printed goes too, under its invocation record.
    logs: Option<Shipper>,
}

impl CronRunRecorder {
    pub fn new(pool: PgPool, client: kube::Client) -> CronRunRecorder {
        CronRunRecorder {
            pool,
            client,
            wake: None,
            logs: None,
        }
    }

    /// Keeps what each run printed in its function's log as well.
    pub fn shipping_to(mut self, logs: Option<Shipper>) -> CronRunRecorder {
        self.logs = logs;
        self
    }

    /// Lists the namespaces to watch again whenever `wake` changes.
    pub fn woken_by(mut self, wake: watch::Receiver<()>) -> CronRunRecorder {
        self.wake = Some(wake);
        self
    }

    /// Records what `job` says that the log does not know yet. Idempotent.
    pub async fn record(&self, job: &Job) -> Result<Recorded, String> {
        let labels = job.labels();
        if labels.get(LABEL_COMPONENT).map(String::as_str) != Some(COMPONENT_CRON) {
            return Ok(Recorded::Nothing);
        }
        let parsed = (|| {
            let ns = Namespace::parse(job.namespace()?.as_str()).ok()?;
            let trigger = TriggerName::parse(labels.get(LABEL_TRIGGER)?).ok()?;
            let function = FunctionName::parse(labels.get(LABEL_FUNCTION)?).ok()?;
            let version: u32 = labels.get(LABEL_VERSION)?.parse().ok()?;
            Some((ns, trigger, function, version))
        })();
        let Some((ns, trigger_name, function, version)) = parsed else {
            return Ok(Recorded::Nothing);
        };
        let at = scheduled_at(job);
        let stream = job::cron_stream(&ns, &trigger_name, at);
        let err = |e: sless_store::Error| e.to_string();
        let (mut state, _) = eventlog::load::<JobState>(&self.pool, &stream)
            .await
            .map_err(err)?;
        let mut recorded = Recorded::Nothing;
        if !state.exists() {
            let (t, _) = eventlog::load::<sless_domain::trigger::Trigger>(
                &self.pool,
                &trigger::stream(&ns, &trigger_name),
            )
            .await
            .map_err(err)?;
            let Some(schedule) = t
                .spec
                .filter(|s| s.kind == TriggerKind::Cron)
                .and_then(|s| s.schedule)
            else {
                return Ok(Recorded::Nothing); // the trigger is gone
            };
            let timeout_sec = job
                .spec
                .as_ref()
                .and_then(|s| s.active_deadline_seconds)
                .and_then(|s| u32::try_from(s).ok())
                .unwrap_or(0);
            let commands = [
                JobCommand::Request {
                    function,
                    version,
                    input: serde_json::Value::Null,
                    timeout_sec,
                    cron: Some(CronTick {
                        trigger: trigger_name.clone(),
                        schedule: schedule.cron,
                        timezone: schedule.timezone,
                        scheduled_at: at,
                        missed: 0,
                    }),
                },
                JobCommand::Start { attempt: 1 },
            ];
            if !self.append(&ns, &stream, &state, &commands).await? {
                return Ok(Recorded::Nothing); // another worker was first
            }
            (state, _) = eventlog::load::<JobState>(&self.pool, &stream)
                .await
                .map_err(err)?;
            recorded = Recorded::Started(stream.clone());
        }
        let Some(end) = job_end(job) else {
            return Ok(recorded);
        };
        if state.status != JobStatus::Running || state.attempt != Some(1) {
            return Ok(recorded);
        }
        let (output, printed) = self.output(job, &end).await;
        let result = crate::jobs::run_result(output);
        let id = invocations::id_for(Utc::now());
        let status = if result.exit_code == Some(0) && !result.timed_out && result.error.is_none() {
            200
        } else {
            500
        };
        let record = Invocation {
            id,
            namespace: ns.to_string(),
            function: state
                .request
                .as_ref()
                .map(|r| r.function.to_string())
                .unwrap_or_default(),
            version: state.request.as_ref().map(|r| r.version),
            started_at: at,
            duration: Duration::from_millis(result.duration_ms),
            status,
            bytes_in: 0,
            bytes_out: result.stdout.bytes + result.stderr.bytes,
            cold: true,
            error: (status != 200).then(|| {
                if result.timed_out {
                    "timed out".to_owned()
                } else {
                    format!("exit code {:?}", result.exit_code)
                }
            }),
            error_kind: crate::jobs::error_kind(&result).map(str::to_owned),
            request_id: format!("cronjob-{}", job.name_any()),
            origin: "cron".to_owned(),
            run: Some(stream.clone()),
            method: None,
            path: None,
            activation: None,
            instance_start: None,
        };
        let finish = [JobCommand::Finish { attempt: 1, result }];
        if !self.append(&ns, &stream, &state, &finish).await? {
            return Ok(recorded);
        }
        // Only the recorder whose end was appended keeps what the run
        // printed: another that raced it keeps nothing twice.
        if let (Some(logs), Some(request)) = (&self.logs, &state.request) {
            let source = Source {
                namespace: ns.to_string(),
                function: request.function.to_string(),
                version: Some(request.version),
                instance: job.name_any(),
                invocation: Some(id),
            };
            logs.push_text(&source, Stream::Stdout, &printed);
        }
        if let Err(e) = invocations::insert(&self.pool, &[record]).await {
            tracing::warn!(error = %e, "recording a cron run as an invocation failed");
        }
        Ok(Recorded::Finished(stream))
    }

    /// Appends what `commands` decide, in order, expecting the stream where
    /// `state` left it; false when another writer came first.
    async fn append(
        &self,
        ns: &Namespace,
        stream: &str,
        state: &JobState,
        commands: &[JobCommand],
    ) -> Result<bool, String> {
        let events = state
            .decide_all(commands.iter().cloned())
            .map_err(|e| e.to_string())?;
        let metadata = Metadata {
            actor: "system:cronjob".into(),
            ..Default::default()
        };
        let cmd = SystemCommand::new(stream.to_owned(), ns, metadata).stands_on_its_state();
        system::record(&self.pool, &cmd, state, events)
            .await
            .map(|executed| executed.appended())
            .map_err(|e| e.to_string())
    }

    /// How the run's pod ended, and what it printed.
    async fn output(&self, job: &Job, end: &JobEnd) -> (JobOutput, String) {
        let ns = job.namespace().unwrap_or_default();
        let pods = Api::<Pod>::namespaced(self.client.clone(), &ns);
        let uid = job.uid().unwrap_or_default();
        let trigger = job.labels().get(LABEL_TRIGGER).cloned().unwrap_or_default();
        let pod = pods
            .list(&ListParams::default().labels(&format!("{LABEL_TRIGGER}={trigger}")))
            .await
            .ok()
            .and_then(|l| {
                l.items
                    .into_iter()
                    .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
                    .max_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0))
            });
        let exit = pod.as_ref().map(super::run::exit_of).unwrap_or_default();
        let (exit_code, signal) = (exit.code, exit.signal);
        // Killed for memory: the limit its pod ran with (the function's
        // memory_mb when the CronJob was written).
        let out_of_memory = exit
            .out_of_memory
            .then(|| pod.as_ref().and_then(super::run::memory_limit_mb))
            .flatten();
        let printed = match &pod {
            Some(p) => {
                let params = LogParams {
                    container: Some(CONTAINER.to_owned()),
                    limit_bytes: Some(16 * 1024 * 1024),
                    ..LogParams::default()
                };
                pods.logs(&p.name_any(), &params).await.unwrap_or_default()
            }
            None => String::new(),
        };
        let duration = super::api::run_duration(job);
        let output = JobOutput {
            exit_code: exit_code.or((!end.succeeded && signal.is_none()).then_some(1)),
            signal,
            timed_out: end.reason == "DeadlineExceeded",
            out_of_memory,
            stdout: capture::captured(printed.as_bytes()),
            stderr: Captured::default(),
            duration,
        };
        (output, printed)
    }

    /// Watches the Jobs of every namespace with a cron trigger and records
    /// their runs, until `shutdown`.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        let (client, pool, wake) = (self.client.clone(), self.pool.clone(), self.wake.clone());
        let namespaces = || triggers::namespaces_with_cron(&pool);
        let seen = move |job: Job| {
            let me = self.clone();
            async move {
                if let Err(e) = me.record(&job).await {
                    let ns = job.namespace().unwrap_or_default();
                    tracing::warn!(%ns, job = %job.name_any(), "recording a cron run: {e}");
                }
            }
        };
        let selector = format!("{LABEL_COMPONENT}={COMPONENT_CRON}");
        super::watch::each_namespace(client, selector, namespaces, seen, shutdown, wake).await;
    }
}

/// The tick a CronJob's Job is for: the controller's annotation, or else
/// the minute the Job was created in.
fn scheduled_at(job: &Job) -> DateTime<Utc> {
    let annotated = job
        .annotations()
        .get(SCHEDULED_AT)
        .and_then(|v| DateTime::parse_from_rfc3339(v).ok())
        .map(|t| t.with_timezone(&Utc));
    annotated.unwrap_or_else(|| {
        let created = job
            .metadata
            .creation_timestamp
            .as_ref()
            .map_or(0, |t| t.0.as_second());
        Utc.timestamp_opt(created - created.rem_euclid(60), 0)
            .single()
            .unwrap_or_default()
    })
}
