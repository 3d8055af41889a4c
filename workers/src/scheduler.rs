//! The cron scheduler: turns the ticks of enabled cron triggers into runs.
//!
//! Each tick is a run of its own, with its own stream
//! (`cron/{ns}/{trigger}/{unix seconds}`, see `sless_domain::job`). Firing
//! a tick appends `JobRequested` to that stream expecting it to be empty,
//! and enqueues its `RunJob` item in the same transaction. Only one append
//! can start a stream, so a tick runs once however many schedulers look at
//! it, and a scheduler killed mid-tick leaves nothing behind (its
//! transaction never committed): the next look fires it.
//!
//! Like a CronJob with a starting deadline and `concurrencyPolicy: Forbid`:
//! - only the latest tick due is fired, and only within the starting
//!   deadline of its time: ticks missed while no scheduler ran are not run
//!   in a burst (the run says how many were passed over);
//! - a tick never fires for a time before the trigger was created or last
//!   enabled;
//! - a tick that comes while the trigger's previous run is still pending
//!   or running is recorded as skipped (`JobSkipped`), not run.
//!
//! `tick(now)` takes the time as an argument, so tests drive the clock.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use chrono::{DateTime, Utc};
use sless_domain::Aggregate;
use sless_domain::cron::Cron;
use sless_domain::job::{self, CronTick, Job, JobCommand};
use sless_domain::trigger::{self, TriggerKind};
use sless_domain::{FunctionKey, FunctionName, Namespace, TriggerName};
use sless_store::eventlog::{self, Metadata};
use sless_store::jobs::{last_cron_run, unfinished_cron_run};
use sless_store::system::{self, Executed, SystemCommand};
use sless_store::triggers::{CronTrigger, enabled_cron};
use sless_store::{PgPool, queue};
use tokio::sync::watch;
use tracing::Instrument;

/// Most ticks counted as missed before one that fires.
const MAX_MISSED_COUNTED: u32 = 10_000;

/// The scheduler of one process. Several may run against one database.
pub struct Scheduler {
    pool: PgPool,
    /// How late a tick may still fire.
    starting_deadline: Duration,
    /// The tick last handled per trigger (fired, found fired, or skipped),
    /// so a second look at the same tick costs no query.
    handled: Mutex<HashMap<(String, String), DateTime<Utc>>>,
}

/// What one look at the clock did.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct TickReport {
    /// Streams of the runs this scheduler started.
    pub fired: Vec<String>,
    /// Streams of the runs it recorded as skipped.
    pub skipped: Vec<String>,
    /// Ticks another scheduler had fired first.
    pub already: usize,
}

/// The default starting deadline: a tick fires at most this late.
pub const DEFAULT_STARTING_DEADLINE: Duration = Duration::from_secs(3600);

impl Scheduler {
    pub fn new(pool: PgPool, starting_deadline: Duration) -> Scheduler {
        Scheduler {
            pool,
            starting_deadline,
            handled: Mutex::default(),
        }
    }

    /// Fires what is due at `now`.
    pub async fn tick(&self, now: DateTime<Utc>) -> sless_store::Result<TickReport> {
        let mut report = TickReport::default();
        for t in enabled_cron(&self.pool).await? {
            let cron = match Cron::parse(&t.schedule, &t.timezone) {
                Ok(c) => c,
                Err(e) => {
                    tracing::warn!(namespace = %t.namespace, trigger = %t.name, error = %e, "a cron trigger's schedule cannot be read; it does not fire");
                    continue;
                }
            };
            let Some(at) = cron.latest_at_or_before(now) else {
                continue;
            };
            let late = (now - at).to_std().unwrap_or_default();
            if at < t.active_since || late > self.starting_deadline {
                continue;
            }
            let id = (t.namespace.clone(), t.name.clone());
            if self.handled.lock().unwrap().get(&id) == Some(&at) {
                continue;
            }
            // A tick is a trace of its own; the run it enqueues links to it.
            let span = tracing::info_span!(
                target: sless_telemetry::trace::TARGET,
                "cron tick",
                otel.kind = "producer",
                namespace = %t.namespace,
                trigger = %t.name,
                scheduled_at = %at.to_rfc3339(),
            );
            match self.fire(&t, &cron, at).instrument(span).await {
                Ok(Fired::Run(stream)) => report.fired.push(stream),
                Ok(Fired::Skipped(stream)) => report.skipped.push(stream),
                Ok(Fired::Already) => report.already += 1,
                Ok(Fired::NotNow) => continue,
                Err(e) => {
                    tracing::warn!(namespace = %t.namespace, trigger = %t.name, error = %e, "firing a cron tick failed; the next look tries again");
                    continue;
                }
            }
            self.handled.lock().unwrap().insert(id, at);
        }
        Ok(report)
    }

    /// Fires tick `at` of trigger `t`, unless it was.
    async fn fire(
        &self,
        t: &CronTrigger,
        cron: &Cron,
        at: DateTime<Utc>,
    ) -> sless_store::Result<Fired> {
        let invalid = |e: sless_domain::DomainError| sless_store::Error::Internal(e.to_string());
        let ns = Namespace::parse(&t.namespace).map_err(invalid)?;
        let name = TriggerName::parse(&t.name).map_err(invalid)?;
        let last = last_cron_run(&self.pool, &t.namespace, &t.name).await?;
        let last_at = last.as_ref().and_then(|r| r.scheduled_at);
        if last_at.is_some_and(|l| l >= at) {
            return Ok(Fired::Already);
        }
        // The read model may lag: what fires is what the log says now.
        let (trigger, _) =
            eventlog::load::<trigger::Trigger>(&self.pool, &trigger::stream(&ns, &name)).await?;
        let Some(spec) = trigger.spec.filter(|s| {
            s.enabled
                && s.kind == TriggerKind::Cron
                && s.schedule
                    .as_ref()
                    .is_some_and(|c| c.cron == t.schedule && c.timezone == t.timezone)
        }) else {
            return Ok(Fired::NotNow);
        };
        let missed = count_between(cron, last_at.unwrap_or(t.active_since), at);
        let function = FunctionName::parse(&t.function).map_err(invalid)?;
        let key = FunctionKey::new(ns.clone(), spec.function.clone());
        let (f, _) = eventlog::load::<sless_domain::Function>(&self.pool, &key.stream()).await?;
        let mut skip = None;
        let (version, timeout_sec) = match (f.exists(), f.current_version, f.spec.as_ref()) {
            (true, Some(v), Some(s)) => (v, s.timeout_sec),
            (true, _, _) => {
                skip = Some(format!("function {function:?} has no uploaded source"));
                (0, 0)
            }
            _ => {
                skip = Some(format!("function {function:?} does not exist"));
                (0, 0)
            }
        };
        let going = match skip {
            None => unfinished_cron_run(&self.pool, &t.namespace, &t.name).await?,
            Some(_) => None,
        };
        if let Some(prev) = going {
            skip = Some(format!(
                "the run for {} is still {} (concurrency policy Forbid)",
                prev.scheduled_at
                    .map(|a| a.to_rfc3339())
                    .unwrap_or_default(),
                prev.status.to_lowercase()
            ));
        }
        let stream = job::cron_stream(&ns, &name, at);
        let mut commands = vec![JobCommand::Request {
            function,
            version,
            input: serde_json::Value::Null,
            timeout_sec,
            cron: Some(CronTick {
                trigger: name.clone(),
                schedule: t.schedule.clone(),
                timezone: t.timezone.clone(),
                scheduled_at: at,
                missed,
            }),
        }];
        if let Some(reason) = skip.clone() {
            commands.push(JobCommand::Skip { reason });
        }
        let metadata = Metadata {
            actor: "system:scheduler".into(),
            ..Default::default()
        };
        // A tick's run is a stream of its own: one that exists was fired.
        let mut cmd = SystemCommand::new(stream.clone(), &ns, metadata).stands_on_its_state();
        if skip.is_none() {
            let payload = match sless_telemetry::trace::current() {
                Some(tick) => serde_json::json!({ "links": [tick] }),
                None => serde_json::json!({}),
            };
            cmd = cmd.work(queue::RUN_JOB, stream.clone(), payload);
        }
        let fired = system::execute::<Job>(&self.pool, &cmd, |current| {
            if current.state.stream_version() > 0 {
                return Ok(Vec::new());
            }
            current.state.decide_all(commands.clone())
        })
        .await?;
        Ok(match fired {
            Executed::Appended { .. } if skip.is_none() => Fired::Run(stream),
            Executed::Appended { .. } => Fired::Skipped(stream),
            Executed::Refused(e) => return Err(invalid(e)),
            _ => Fired::Already,
        })
    }

    /// Looks at the clock every second until `shutdown` turns true.
    pub async fn run(self, mut shutdown: watch::Receiver<bool>) {
        loop {
            let now = Utc::now();
            match self.tick(now).await {
                Ok(r) if !r.fired.is_empty() || !r.skipped.is_empty() => {
                    tracing::info!(fired = ?r.fired, skipped = ?r.skipped, "cron ticks");
                }
                Ok(_) => {}
                Err(e) => tracing::warn!(error = %e, "the scheduler could not read the triggers"),
            }
            // Wake just after the next whole second (ticks are whole minutes).
            let wait = 1_000 - u64::from(now.timestamp_subsec_millis()).min(999) + 20;
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(wait)) => {}
                _ = shutdown.wait_for(|s| *s) => return,
            }
        }
    }
}

enum Fired {
    Run(String),
    Skipped(String),
    /// Fired before, by this scheduler or another.
    Already,
    /// The trigger changed since the read model was read.
    NotNow,
}

/// Ticks strictly between `after` and `before`.
fn count_between(cron: &Cron, after: DateTime<Utc>, before: DateTime<Utc>) -> u32 {
    let mut n = 0;
    let mut t = after;
    while n < MAX_MISSED_COUNTED {
        match cron.next_after(t) {
            Some(next) if next < before => {
                n += 1;
                t = next;
            }
            _ => break,
        }
    }
    n
}
