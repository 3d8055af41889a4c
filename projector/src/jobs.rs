//! The `jobs` read model: one row per job a user asked for (stream
//! `job/{ns}/{name}`) and per cron trigger run (`cron/{ns}/{trigger}/{unix
//! seconds}`, named `{trigger}-{unix seconds}`), while it exists.
//!
//! Applied like `triggers`, by `batch::apply`: the rows a batch touches are
//! read in one query, each event folded into its row in memory (in stream
//! order; an event applied already is skipped, a gap is an error), and the
//! changed rows upserted, or deleted when the job was, in one statement. A
//! deleted job's row goes with its stream version: the next event of that
//! stream must be a `JobRequested` (the name asked for again), as the
//! decider allows nothing else.
//!
//! The status moves as `Job::evolve` moves it; the row adds what the
//! domain's state leaves out: when each step happened and how the run
//! ended (exit code, error, output).

use chrono::{DateTime, Utc};
use sless_domain::job::{Job, JobEvent, JobStatus, Output};
use sqlx::{AssertSqlSafe, PgConnection};

use crate::batch::{self, EventOf, ReadModel, Rows, Work};
use crate::functions::Tables;
use crate::{Error, Result};

/// The namespace and the row's name of a job stream: `job/{ns}/{name}`
/// gives `name`, `cron/{ns}/{trigger}/{unix}` gives `{trigger}-{unix}`.
fn job_key(stream: &str) -> Option<(&str, String)> {
    if let Some(rest) = stream.strip_prefix("job/") {
        let (ns, name) = rest.split_once('/')?;
        return Some((ns, name.to_owned()));
    }
    let rest = stream.strip_prefix("cron/")?;
    let (ns, rest) = rest.split_once('/')?;
    let (trigger, unix) = rest.split_once('/')?;
    Some((ns, format!("{trigger}-{unix}")))
}

/// How a run ended, as far as it has.
#[derive(Debug, Clone, Default)]
struct Outcome {
    exit_code: Option<i32>,
    error: Option<String>,
    timed_out: bool,
    stdout: Option<Output>,
    stderr: Option<Output>,
    duration_ms: Option<i64>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
}

/// A cron run's tick.
#[derive(Debug, Clone)]
struct Tick {
    trigger: String,
    scheduled_at: DateTime<Utc>,
    missed: i32,
}

/// One job's row.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    function: String,
    version: i32,
    input: serde_json::Value,
    timeout_sec: i32,
    cron: Option<Tick>,
    status: JobStatus,
    outcome: Outcome,
    requested_at: DateTime<Utc>,
}

/// What a job's row is named by: its namespace and its name.
pub(crate) struct JobKey {
    namespace: String,
    name: String,
}

/// The jobs read model, in the tables it is given.
pub(crate) struct Jobs {
    table: String,
    write: String,
}

impl Jobs {
    pub(crate) fn on(tables: &Tables) -> Jobs {
        Jobs {
            table: tables.jobs.clone(),
            write: WRITE.replace("{jobs}", &tables.jobs),
        }
    }

    /// Applies a decoded batch (in its order) in `tx`.
    pub(crate) async fn apply(&self, tx: &mut PgConnection, batch: &[EventOf<Jobs>]) -> Result<()> {
        batch::apply(self, tx, batch).await.map(drop)
    }
}

impl ReadModel for Jobs {
    type Aggregate = Job;
    type Key = JobKey;
    type Row = Row;

    /// A deleted job's row goes, and its stream version with it.
    const WITHOUT_ROW: Option<i64> = None;

    fn key(stream: &str) -> Option<JobKey> {
        let (namespace, name) = job_key(stream)?;
        Some(JobKey {
            namespace: namespace.to_owned(),
            name,
        })
    }

    fn creates(e: &EventOf<Jobs>) -> bool {
        matches!(e.event, JobEvent::JobRequested { .. })
    }

    async fn load(&self, tx: &mut PgConnection, rows: &mut Rows<'_, Jobs>) -> Result<()> {
        let streams: Vec<&str> = rows.keys().copied().collect();
        // The table name is ours (`Tables`), never input.
        let found = sqlx::query(AssertSqlSafe(format!(
            "select stream, function, version, input, timeout_sec, trigger, scheduled_at,
                    missed, status, exit_code, error, timed_out, stdout, stdout_bytes,
                    stdout_truncated, stderr, stderr_bytes, stderr_truncated, duration_ms,
                    requested_at, started_at, finished_at, stream_version
             from {} where stream = any($1::text[])",
            self.table
        )))
        .bind(&streams)
        .fetch_all(&mut *tx)
        .await?;
        for r in found {
            use sqlx::Row as _;
            let stream: String = r.try_get("stream")?;
            let Some(work) = rows.get_mut(stream.as_str()) else {
                continue;
            };
            let status: String = r.try_get("status")?;
            let status = JobStatus::parse(&status).ok_or_else(|| {
                Error::Store(sless_store::Error::Internal(format!(
                    "jobs read model: {stream} has status {status:?}"
                )))
            })?;
            let output = |text: &str, bytes: &str, truncated: &str| -> Result<Option<Output>> {
                let t: Option<String> = r.try_get(text)?;
                let b: Option<i64> = r.try_get(bytes)?;
                let truncated: bool = r.try_get(truncated)?;
                Ok(t.map(|text| Output {
                    text,
                    bytes: b.unwrap_or_default().max(0) as u64,
                    truncated,
                }))
            };
            let trigger: Option<String> = r.try_get("trigger")?;
            let scheduled_at: Option<DateTime<Utc>> = r.try_get("scheduled_at")?;
            let cron = match (trigger, scheduled_at) {
                (Some(trigger), Some(scheduled_at)) => Some(Tick {
                    trigger,
                    scheduled_at,
                    missed: r.try_get::<Option<i32>, _>("missed")?.unwrap_or_default(),
                }),
                _ => None,
            };
            let outcome = Outcome {
                exit_code: r.try_get("exit_code")?,
                error: r.try_get("error")?,
                timed_out: r.try_get("timed_out")?,
                stdout: output("stdout", "stdout_bytes", "stdout_truncated")?,
                stderr: output("stderr", "stderr_bytes", "stderr_truncated")?,
                duration_ms: r.try_get("duration_ms")?,
                started_at: r.try_get("started_at")?,
                finished_at: r.try_get("finished_at")?,
            };
            let version = i64::from(r.try_get::<i32, _>("stream_version")?);
            let row = Row {
                function: r.try_get("function")?,
                version: r.try_get("version")?,
                input: r.try_get("input")?,
                timeout_sec: r.try_get("timeout_sec")?,
                cron,
                status,
                outcome,
                requested_at: r.try_get("requested_at")?,
            };
            work.found(row, version);
        }
        Ok(())
    }

    fn apply(work: &mut Work<Jobs>, e: &EventOf<Jobs>) -> Result<()> {
        let event = &e.stored;
        let at = event.recorded_at;
        if let JobEvent::JobRequested {
            function,
            version,
            input,
            timeout_sec,
            cron,
        } = &e.event
        {
            work.row = Some(Row {
                function: function.as_str().to_owned(),
                version: *version as i32,
                input: input.clone(),
                timeout_sec: *timeout_sec as i32,
                cron: cron.as_ref().map(|t| Tick {
                    trigger: t.trigger.as_str().to_owned(),
                    scheduled_at: t.scheduled_at,
                    missed: t.missed as i32,
                }),
                status: JobStatus::Pending,
                outcome: Outcome::default(),
                requested_at: at,
            });
        } else {
            let Some(row) = work.row.as_mut() else {
                return Err(Error::BadEvent {
                    position: event.position,
                    event_type: event.event_type.clone(),
                    error: "an event of a job that does not exist".into(),
                });
            };
            let o = &mut row.outcome;
            match &e.event {
                JobEvent::JobRequested { .. } => unreachable!("handled above"),
                JobEvent::JobStarted { .. } => {
                    row.status = JobStatus::Running;
                    o.started_at = Some(at);
                }
                JobEvent::JobSucceeded {
                    exit_code,
                    stdout,
                    stderr,
                    duration_ms,
                } => {
                    row.status = JobStatus::Succeeded;
                    *o = Outcome {
                        exit_code: Some(*exit_code),
                        error: None,
                        timed_out: false,
                        stdout: Some(stdout.clone()),
                        stderr: Some(stderr.clone()),
                        duration_ms: Some(*duration_ms as i64),
                        started_at: o.started_at,
                        finished_at: Some(at),
                    };
                }
                JobEvent::JobFailed {
                    exit_code,
                    error,
                    stdout,
                    stderr,
                    timed_out,
                    duration_ms,
                } => {
                    row.status = JobStatus::Failed;
                    *o = Outcome {
                        exit_code: *exit_code,
                        error: Some(error.clone()),
                        timed_out: *timed_out,
                        stdout: Some(stdout.clone()),
                        stderr: Some(stderr.clone()),
                        duration_ms: Some(*duration_ms as i64),
                        started_at: o.started_at,
                        finished_at: Some(at),
                    };
                }
                JobEvent::JobSkipped { reason } => {
                    row.status = JobStatus::Skipped;
                    o.error = Some(reason.clone());
                    o.finished_at = Some(at);
                }
                JobEvent::JobDeleted {} => work.row = None,
            }
        }
        Ok(())
    }

    /// Upserts the rows of jobs that exist and deletes those of jobs that
    /// were deleted, in one statement.
    async fn write(
        &self,
        tx: &mut PgConnection,
        rows: &Rows<'_, Jobs>,
        _applied: &[&EventOf<Jobs>],
    ) -> Result<()> {
        let mut changed: Vec<(&str, &Work<Jobs>)> = rows
            .iter()
            .filter(|(_, w)| w.changed)
            .map(|(s, w)| (*s, w))
            .collect();
        changed.sort_unstable_by_key(|(s, _)| *s);
        let mut gone = Vec::new();
        let mut c = Columns::default();
        for (stream, w) in changed {
            match &w.row {
                None if w.stored => gone.push(stream),
                None => {}
                Some(row) => c.push(stream, w, row),
            }
        }
        if gone.is_empty() && c.stream.is_empty() {
            return Ok(());
        }
        sqlx::query(AssertSqlSafe(self.write.as_str()))
            .bind(&gone)
            .bind(&c.stream)
            .bind(&c.namespace)
            .bind(&c.name)
            .bind(&c.function)
            .bind(&c.version)
            .bind(&c.input)
            .bind(&c.timeout_sec)
            .bind(&c.origin)
            .bind(&c.trigger)
            .bind(&c.scheduled_at)
            .bind(&c.missed)
            .bind(&c.status)
            .bind(&c.exit_code)
            .bind(&c.error)
            .bind(&c.timed_out)
            .bind(&c.stdout)
            .bind(&c.stdout_bytes)
            .bind(&c.stdout_truncated)
            .bind(&c.stderr)
            .bind(&c.stderr_bytes)
            .bind(&c.stderr_truncated)
            .bind(&c.duration_ms)
            .bind(&c.requested_at)
            .bind(&c.started_at)
            .bind(&c.finished_at)
            .bind(&c.stream_version)
            .execute(&mut *tx)
            .await?;
        Ok(())
    }
}

/// The columns of the rows to upsert, one array per column.
#[derive(Default)]
struct Columns<'a> {
    stream: Vec<&'a str>,
    namespace: Vec<&'a str>,
    name: Vec<&'a str>,
    function: Vec<&'a str>,
    version: Vec<i32>,
    input: Vec<&'a serde_json::Value>,
    timeout_sec: Vec<i32>,
    origin: Vec<&'static str>,
    trigger: Vec<Option<&'a str>>,
    scheduled_at: Vec<Option<DateTime<Utc>>>,
    missed: Vec<Option<i32>>,
    status: Vec<&'static str>,
    exit_code: Vec<Option<i32>>,
    error: Vec<Option<&'a str>>,
    timed_out: Vec<bool>,
    stdout: Vec<Option<&'a str>>,
    stdout_bytes: Vec<Option<i64>>,
    stdout_truncated: Vec<bool>,
    stderr: Vec<Option<&'a str>>,
    stderr_bytes: Vec<Option<i64>>,
    stderr_truncated: Vec<bool>,
    duration_ms: Vec<Option<i64>>,
    requested_at: Vec<DateTime<Utc>>,
    started_at: Vec<Option<DateTime<Utc>>>,
    finished_at: Vec<Option<DateTime<Utc>>>,
    stream_version: Vec<i32>,
}

impl<'a> Columns<'a> {
    fn push(&mut self, stream: &'a str, w: &'a Work<Jobs>, row: &'a Row) {
        let o = &row.outcome;
        self.stream.push(stream);
        self.namespace.push(&w.key.namespace);
        self.name.push(&w.key.name);
        self.function.push(&row.function);
        self.version.push(row.version);
        self.input.push(&row.input);
        self.timeout_sec.push(row.timeout_sec);
        self.origin
            .push(if row.cron.is_some() { "cron" } else { "api" });
        self.trigger
            .push(row.cron.as_ref().map(|t| t.trigger.as_str()));
        self.scheduled_at
            .push(row.cron.as_ref().map(|t| t.scheduled_at));
        self.missed.push(row.cron.as_ref().map(|t| t.missed));
        self.status.push(row.status.as_str());
        self.exit_code.push(o.exit_code);
        self.error.push(o.error.as_deref());
        self.timed_out.push(o.timed_out);
        self.stdout.push(o.stdout.as_ref().map(|x| x.text.as_str()));
        self.stdout_bytes
            .push(o.stdout.as_ref().map(|x| x.bytes as i64));
        self.stdout_truncated
            .push(o.stdout.as_ref().is_some_and(|x| x.truncated));
        self.stderr.push(o.stderr.as_ref().map(|x| x.text.as_str()));
        self.stderr_bytes
            .push(o.stderr.as_ref().map(|x| x.bytes as i64));
        self.stderr_truncated
            .push(o.stderr.as_ref().is_some_and(|x| x.truncated));
        self.duration_ms.push(o.duration_ms);
        self.requested_at.push(row.requested_at);
        self.started_at.push(o.started_at);
        self.finished_at.push(o.finished_at);
        self.stream_version
            .push(w.version.expect("an applied row has its version") as i32);
    }
}

/// Deletes the rows of deleted jobs and upserts the others, from one array
/// per column (a job is in one list or the other, never both). `{jobs}`
/// stands for the table's name.
const WRITE: &str = "
with gone as (
    delete from {jobs} where stream = any($1::text[])
)
insert into {jobs} (stream, namespace, name, function, version, input, timeout_sec, origin,
    trigger, scheduled_at, missed, status, exit_code, error, timed_out, stdout, stdout_bytes,
    stdout_truncated, stderr, stderr_bytes, stderr_truncated, duration_ms, requested_at,
    started_at, finished_at, stream_version)
select unnest($2::text[]), unnest($3::text[]), unnest($4::text[]), unnest($5::text[]),
    unnest($6::int[]), unnest($7::jsonb[]), unnest($8::int[]), unnest($9::text[]),
    unnest($10::text[]), unnest($11::timestamptz[]), unnest($12::int[]), unnest($13::text[]),
    unnest($14::int[]), unnest($15::text[]), unnest($16::bool[]), unnest($17::text[]),
    unnest($18::bigint[]), unnest($19::bool[]), unnest($20::text[]), unnest($21::bigint[]),
    unnest($22::bool[]), unnest($23::bigint[]), unnest($24::timestamptz[]),
    unnest($25::timestamptz[]), unnest($26::timestamptz[]), unnest($27::int[])
on conflict (stream) do update set
    namespace = excluded.namespace, name = excluded.name, function = excluded.function,
    version = excluded.version, input = excluded.input, timeout_sec = excluded.timeout_sec,
    origin = excluded.origin, trigger = excluded.trigger, scheduled_at = excluded.scheduled_at,
    missed = excluded.missed, status = excluded.status, exit_code = excluded.exit_code,
    error = excluded.error, timed_out = excluded.timed_out, stdout = excluded.stdout,
    stdout_bytes = excluded.stdout_bytes, stdout_truncated = excluded.stdout_truncated,
    stderr = excluded.stderr, stderr_bytes = excluded.stderr_bytes,
    stderr_truncated = excluded.stderr_truncated, duration_ms = excluded.duration_ms,
    requested_at = excluded.requested_at, started_at = excluded.started_at,
    finished_at = excluded.finished_at, stream_version = excluded.stream_version";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn job_and_cron_streams_name_their_rows() {
        assert_eq!(
            job_key("job/sless-01/nightly-report"),
            Some(("sless-01", "nightly-report".to_owned()))
        );
        assert_eq!(
            job_key("cron/sless-01/nightly/1798675200"),
            Some(("sless-01", "nightly-1798675200".to_owned()))
        );
        for other in [
            "function/ns/f",
            "trigger/ns/t",
            "cron/ns/t",
            "job/ns",
            "jobs/ns/x",
        ] {
            assert_eq!(job_key(other), None, "{other}");
        }
    }
}
