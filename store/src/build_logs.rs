//! Build logs: what a build printed, while it runs and after.
//!
//! Every version whose build started has a row in `build_logs` (migration
//! `20261202000003_build_logs.sql`) naming its latest *attempt* (a uuid)
//! and, once that ended, how. While an attempt runs, the worker appends
//! the lines it printed to `build_log_chunks`, numbered from 1 without a
//! gap, each append fenced by the attempt (an attempt another one took
//! over writes nothing) and announced on [`CHANNEL`] with the version's
//! [`payload`]. When it ends, the worker puts the whole log in S3
//! (`blobs::build_log_key`) first, then [`finish`] records the end and
//! deletes the attempt's chunks in one statement: a reader that sees the
//! end finds the object there. The object is the chunks put together, so
//! a reader that followed the chunks goes on in the object after the lines
//! it has.
//!
//! An attempt that printed nothing (a build found cached) stores nothing
//! and leaves the object an earlier attempt stored in place. An attempt
//! whose worker went silent (it died) is ended by the workers' sweep
//! ([`abandon_silent`]); its chunks go, and its log with them.

use std::time::Duration;

use sqlx::{PgExecutor, PgPool, Row};
use uuid::Uuid;

use crate::Result;

/// The channel a chunk, a start or an end is announced on; the payload
/// names the version ([`payload`]).
pub const CHANNEL: &str = "sless_build_log";

/// How long a running attempt's worker may be silent (no chunk, no
/// heartbeat; a worker beats every few seconds while its build prints
/// nothing) before the attempt counts as abandoned: its worker died or
/// lost the database.
pub const SILENT_AFTER: Duration = Duration::from_secs(60);

/// How an attempt ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    Succeeded,
    Failed,
}

impl Outcome {
    pub fn as_str(self) -> &'static str {
        match self {
            Outcome::Succeeded => "succeeded",
            Outcome::Failed => "failed",
        }
    }

    fn parse(s: &str) -> Outcome {
        match s {
            "succeeded" => Outcome::Succeeded,
            _ => Outcome::Failed,
        }
    }
}

/// The end of an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct End {
    pub outcome: Outcome,
    /// Why it failed.
    pub error: Option<String>,
}

/// A version's build log as the table has it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BuildLog {
    /// The latest attempt.
    pub attempt: Uuid,
    /// `None` while it runs.
    pub ended: Option<End>,
    /// The whole log of some attempt is in S3.
    pub stored: bool,
    /// How long ago its worker last wrote (by the database's clock).
    pub silent_for: Duration,
}

/// Some lines of a running attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Chunk {
    /// 1, 2, ...: the order the lines were printed in.
    pub seq: i32,
    /// Whole lines, each ending in `\n` (the last chunk of an attempt may
    /// end without one).
    pub text: String,
}

/// What [`CHANNEL`] says for a version: `{ns}/{name}/{version}`.
pub fn payload(namespace: &str, name: &str, version: u32) -> String {
    format!("{namespace}/{name}/{version}")
}

fn version_param(version: u32) -> i32 {
    i32::try_from(version).unwrap_or(i32::MAX)
}

/// Starts `attempt` of the version's build: it takes the row over (the
/// end of the attempt before is forgotten, the object it stored kept) and
/// the chunks of the attempt before go. True when an earlier attempt's
/// log is stored.
pub async fn start(
    pool: &PgPool,
    namespace: &str,
    name: &str,
    version: u32,
    attempt: Uuid,
) -> Result<bool> {
    let mut tx = pool.begin().await?;
    let before: Option<(Uuid, bool)> = sqlx::query_as(
        "select attempt, stored from build_logs
         where namespace = $1 and name = $2 and version = $3
         for update",
    )
    .bind(namespace)
    .bind(name)
    .bind(version_param(version))
    .fetch_optional(&mut *tx)
    .await?;
    sqlx::query(
        "insert into build_logs (namespace, name, version, attempt) values ($1, $2, $3, $4)
         on conflict (namespace, name, version) do update
         set attempt = excluded.attempt, started_at = now(), touched_at = now(),
             ended_at = null, outcome = null, error = null",
    )
    .bind(namespace)
    .bind(name)
    .bind(version_param(version))
    .bind(attempt)
    .execute(&mut *tx)
    .await?;
    if let Some((before, _)) = before {
        sqlx::query("delete from build_log_chunks where attempt = $1")
            .bind(before)
            .execute(&mut *tx)
            .await?;
    }
    sqlx::query("select pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(payload(namespace, name, version))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(before.is_some_and(|(_, stored)| stored))
}

/// Appends chunk `seq` of a running attempt and announces it. False (and
/// nothing written) when the attempt is not the version's running one any
/// more.
pub async fn append<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
    version: u32,
    attempt: Uuid,
    seq: i32,
    text: &str,
) -> Result<bool> {
    let done = sqlx::query(
        "with live as (
             update build_logs set touched_at = now()
             where namespace = $1 and name = $2 and version = $3
               and attempt = $4 and ended_at is null
             returning 1
         ), chunk as (
             insert into build_log_chunks (attempt, seq, text)
             select $4, $5, $6 from live
         )
         select pg_notify($7, $8) from live",
    )
    .bind(namespace)
    .bind(name)
    .bind(version_param(version))
    .bind(attempt)
    .bind(seq)
    .bind(text)
    .bind(CHANNEL)
    .bind(payload(namespace, name, version))
    .execute(exec)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Says the running attempt's worker is still there (while its build
/// prints nothing). False when the attempt is not running any more.
pub async fn heartbeat<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
    version: u32,
    attempt: Uuid,
) -> Result<bool> {
    let done = sqlx::query(
        "update build_logs set touched_at = now()
         where namespace = $1 and name = $2 and version = $3
           and attempt = $4 and ended_at is null",
    )
    .bind(namespace)
    .bind(name)
    .bind(version_param(version))
    .bind(attempt)
    .execute(exec)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// Whether `attempt` is the version's latest.
pub async fn is_latest<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
    version: u32,
    attempt: Uuid,
) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "select exists (select 1 from build_logs
                        where namespace = $1 and name = $2 and version = $3 and attempt = $4)",
    )
    .bind(namespace)
    .bind(name)
    .bind(version_param(version))
    .bind(attempt)
    .fetch_one(exec)
    .await?)
}

/// Ends `attempt` (`stored`: its whole log was just put in S3), deletes its
/// chunks and announces the end, in one statement: the end replaces the
/// one the sweep gave an attempt it took for abandoned. False when another
/// attempt had taken the row over (its chunks go all the same).
pub async fn finish<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
    version: u32,
    attempt: Uuid,
    end: &End,
    stored: bool,
) -> Result<bool> {
    let done = sqlx::query(
        "with done as (
             update build_logs
             set ended_at = now(), touched_at = now(), outcome = $5, error = $6,
                 stored = stored or $7
             where namespace = $1 and name = $2 and version = $3 and attempt = $4
             returning 1
         ), gone as (
             delete from build_log_chunks where attempt = $4
         )
         select pg_notify($8, $9) from done",
    )
    .bind(namespace)
    .bind(name)
    .bind(version_param(version))
    .bind(attempt)
    .bind(end.outcome.as_str())
    .bind(end.error.as_deref())
    .bind(stored)
    .bind(CHANNEL)
    .bind(payload(namespace, name, version))
    .execute(exec)
    .await?;
    Ok(done.rows_affected() > 0)
}

/// The version's build log, if its build ever started.
pub async fn find<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
    version: u32,
) -> Result<Option<BuildLog>> {
    let row = sqlx::query(
        "select attempt, ended_at is not null as ended, outcome, error, stored,
                extract(epoch from now() - touched_at)::float8 as silent
         from build_logs
         where namespace = $1 and name = $2 and version = $3",
    )
    .bind(namespace)
    .bind(name)
    .bind(version_param(version))
    .fetch_optional(exec)
    .await?;
    Ok(row.map(|r| {
        let ended: bool = r.get("ended");
        let outcome: Option<String> = r.get("outcome");
        BuildLog {
            attempt: r.get("attempt"),
            ended: ended.then(|| End {
                outcome: Outcome::parse(outcome.as_deref().unwrap_or_default()),
                error: r.get("error"),
            }),
            stored: r.get("stored"),
            silent_for: Duration::from_secs_f64(r.get::<f64, _>("silent").max(0.0)),
        }
    }))
}

/// The chunks of `attempt` after `after`, in order.
pub async fn chunks_after<'e>(
    exec: impl PgExecutor<'e>,
    attempt: Uuid,
    after: i32,
) -> Result<Vec<Chunk>> {
    let rows = sqlx::query(
        "select seq, text from build_log_chunks
         where attempt = $1 and seq > $2
         order by seq",
    )
    .bind(attempt)
    .bind(after)
    .fetch_all(exec)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Chunk {
            seq: r.get("seq"),
            text: r.get("text"),
        })
        .collect())
}

/// The versions of a function with a build log but not in `kept` (pruned
/// by retention), whose attempt has ended or gone silent for `silent`.
pub async fn not_kept<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
    kept: &[u32],
    silent: Duration,
) -> Result<Vec<u32>> {
    let kept: Vec<i32> = kept.iter().map(|v| version_param(*v)).collect();
    let versions: Vec<i32> = sqlx::query_scalar(
        "select version from build_logs
         where namespace = $1 and name = $2 and version <> all($3)
           and (ended_at is not null or touched_at < now() - make_interval(secs => $4))
         order by version",
    )
    .bind(namespace)
    .bind(name)
    .bind(&kept)
    .bind(silent.as_secs_f64())
    .fetch_all(exec)
    .await?;
    Ok(versions.into_iter().map(|v| v.max(0) as u32).collect())
}

/// Forgets the version's build log (its object deleted first), chunks
/// and all.
pub async fn forget<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
    version: u32,
) -> Result<()> {
    sqlx::query(
        "with gone as (
             delete from build_logs
             where namespace = $1 and name = $2 and version = $3
             returning attempt
         )
         delete from build_log_chunks where attempt in (select attempt from gone)",
    )
    .bind(namespace)
    .bind(name)
    .bind(version_param(version))
    .execute(exec)
    .await?;
    Ok(())
}

/// Ends, as failed with `error`, every running attempt whose worker has
/// been silent for `silent` (it died, or lost the database), deleting its
/// chunks. Returns how many.
pub async fn abandon_silent<'e>(
    exec: impl PgExecutor<'e>,
    silent: Duration,
    error: &str,
) -> Result<u64> {
    let done = sqlx::query(
        "with gone as (
             update build_logs
             set ended_at = now(), outcome = 'failed', error = $2
             where ended_at is null and touched_at < now() - make_interval(secs => $1)
             returning attempt, namespace, name, version
         ), chunks as (
             delete from build_log_chunks where attempt in (select attempt from gone)
         )
         select pg_notify($3, namespace || '/' || name || '/' || version) from gone",
    )
    .bind(silent.as_secs_f64())
    .bind(error)
    .bind(CHANNEL)
    .execute(exec)
    .await?;
    Ok(done.rows_affected())
}
