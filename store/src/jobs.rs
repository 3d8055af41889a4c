//! The `jobs` read model: one row per job a user asked for (origin `api`,
//! stream `job/{ns}/{name}`) and per cron trigger run (origin `cron`,
//! stream `cron/{ns}/{trigger}/{unix seconds}`). The projector removes a
//! deleted job's row.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, Row};

use crate::Result;

/// One row of `jobs`: every column.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct JobRow {
    pub stream: String,
    pub namespace: String,
    /// The job's name; for a cron run `{trigger}-{unix seconds}`.
    pub name: String,
    pub function: String,
    pub version: u32,
    pub input: serde_json::Value,
    pub timeout_sec: u32,
    /// `api` or `cron`.
    pub origin: String,
    pub trigger: Option<String>,
    pub scheduled_at: Option<DateTime<Utc>>,
    pub missed: Option<u32>,
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Skipped`.
    pub status: String,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub timed_out: bool,
    pub stdout: Option<String>,
    pub stdout_bytes: Option<u64>,
    pub stdout_truncated: bool,
    pub stderr: Option<String>,
    pub stderr_bytes: Option<u64>,
    pub stderr_truncated: bool,
    pub duration_ms: Option<u64>,
    pub requested_at: DateTime<Utc>,
    pub started_at: Option<DateTime<Utc>>,
    pub finished_at: Option<DateTime<Utc>>,
    pub stream_version: u64,
}

fn row_of(r: sqlx::postgres::PgRow) -> JobRow {
    let unsigned = |v: Option<i64>| v.map(|v| v.max(0) as u64);
    JobRow {
        stream: r.get("stream"),
        namespace: r.get("namespace"),
        name: r.get("name"),
        function: r.get("function"),
        version: r.get::<i32, _>("version") as u32,
        input: r.get("input"),
        timeout_sec: r.get::<i32, _>("timeout_sec") as u32,
        origin: r.get("origin"),
        trigger: r.get("trigger"),
        scheduled_at: r.get("scheduled_at"),
        missed: r.get::<Option<i32>, _>("missed").map(|m| m.max(0) as u32),
        status: r.get("status"),
        exit_code: r.get("exit_code"),
        error: r.get("error"),
        timed_out: r.get("timed_out"),
        stdout: r.get("stdout"),
        stdout_bytes: unsigned(r.get("stdout_bytes")),
        stdout_truncated: r.get("stdout_truncated"),
        stderr: r.get("stderr"),
        stderr_bytes: unsigned(r.get("stderr_bytes")),
        stderr_truncated: r.get("stderr_truncated"),
        duration_ms: unsigned(r.get("duration_ms")),
        requested_at: r.get("requested_at"),
        started_at: r.get("started_at"),
        finished_at: r.get("finished_at"),
        stream_version: r.get::<i32, _>("stream_version") as u64,
    }
}

/// A job a user asked for, by name, if the projector has seen it.
pub async fn job_row(exec: impl PgExecutor<'_>, ns: &str, name: &str) -> Result<Option<JobRow>> {
    let row =
        sqlx::query("select * from jobs where namespace = $1 and name = $2 and origin = 'api'")
            .bind(ns)
            .bind(name)
            .fetch_optional(exec)
            .await?;
    Ok(row.map(row_of))
}

/// At most `limit` jobs users asked for in a namespace, by name, after the
/// name `after` (from the first when None): a page of the list (the index
/// `jobs_by_name` walks it, from the cursor on in any plan: see
/// `readmodel::function_rows_after`).
pub async fn job_rows(
    exec: impl PgExecutor<'_>,
    ns: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<JobRow>> {
    let rows = sqlx::query(
        "select * from jobs
         where namespace = $1 and origin = 'api' and name > coalesce($2, '')
         order by name limit $3",
    )
    .bind(ns)
    .bind(after)
    .bind(limit)
    .fetch_all(exec)
    .await?;
    Ok(rows.into_iter().map(row_of).collect())
}

/// A cron trigger's last `limit` runs, newest tick first.
pub async fn cron_runs(
    exec: impl PgExecutor<'_>,
    ns: &str,
    trigger: &str,
    limit: i64,
) -> Result<Vec<JobRow>> {
    let rows = sqlx::query(
        "select * from jobs
         where origin = 'cron' and namespace = $1 and trigger = $2
         order by scheduled_at desc
         limit $3",
    )
    .bind(ns)
    .bind(trigger)
    .bind(limit)
    .fetch_all(exec)
    .await?;
    Ok(rows.into_iter().map(row_of).collect())
}

/// The last `limit` runs of each of the cron triggers `triggers` of a
/// namespace, by trigger, newest tick first.
pub async fn cron_runs_in(
    exec: impl PgExecutor<'_>,
    ns: &str,
    triggers: &[&str],
    limit: i64,
) -> Result<Vec<JobRow>> {
    let rows = sqlx::query(
        "select * from (
             select *, row_number() over (partition by trigger order by scheduled_at desc) as n
             from jobs where origin = 'cron' and namespace = $1 and trigger = any($2)
         ) runs
         where n <= $3
         order by trigger, scheduled_at desc",
    )
    .bind(ns)
    .bind(triggers)
    .bind(limit)
    .fetch_all(exec)
    .await?;
    Ok(rows.into_iter().map(row_of).collect())
}

/// A cron trigger's latest run (by tick), if it ran at all.
pub async fn last_cron_run(
    exec: impl PgExecutor<'_>,
    ns: &str,
    trigger: &str,
) -> Result<Option<JobRow>> {
    Ok(cron_runs(exec, ns, trigger, 1).await?.into_iter().next())
}

/// A cron trigger's newest run that is pending or running, if any: while
/// there is one, the scheduler skips the trigger's ticks (concurrency
/// policy Forbid). Skipped runs never count, however recent.
pub async fn unfinished_cron_run(
    exec: impl PgExecutor<'_>,
    ns: &str,
    trigger: &str,
) -> Result<Option<JobRow>> {
    let row = sqlx::query(
        "select * from jobs
         where origin = 'cron' and namespace = $1 and trigger = $2
           and status in ('Pending', 'Running')
         order by scheduled_at desc
         limit 1",
    )
    .bind(ns)
    .bind(trigger)
    .fetch_optional(exec)
    .await?;
    Ok(row.map(row_of))
}

/// How many events a stream has: its version in the log. A read-model row
/// whose `stream_version` is below it is behind the log.
pub async fn log_version(exec: impl PgExecutor<'_>, stream: &str) -> Result<u64> {
    let v: Option<i32> = sqlx::query_scalar("select max(version) from events where stream = $1")
        .bind(stream)
        .fetch_one(exec)
        .await?;
    Ok(v.unwrap_or(0).max(0) as u64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use sless_testkit::TestDb;

    const NS: &str = "sless-0000000000000001";

    /// A cron run's row as the projector would write it.
    async fn put_run(db: &TestDb, trigger: &str, at: i64, status: &str) {
        sqlx::query(
            "insert into jobs (stream, namespace, name, function, version, input, timeout_sec,
                               origin, trigger, scheduled_at, missed, status, requested_at,
                               stream_version)
             values ($1, $2, $3, 'f', 1, '{}', 30, 'cron', $4, to_timestamp($5), 0, $6, now(), 1)",
        )
        .bind(format!("cron/{NS}/{trigger}/{at}"))
        .bind(NS)
        .bind(format!("{trigger}-{at}"))
        .bind(trigger)
        .bind(at as f64)
        .bind(status)
        .execute(&db.pool)
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn the_last_cron_run_is_the_latest_tick_of_that_trigger() {
        let db = TestDb::new().await;
        assert_eq!(last_cron_run(&db.pool, NS, "nightly").await.unwrap(), None);
        put_run(&db, "nightly", 1_800_000_060, "Succeeded").await;
        put_run(&db, "nightly", 1_800_000_180, "Running").await;
        put_run(&db, "nightly", 1_800_000_120, "Failed").await;
        put_run(&db, "hourly", 1_800_000_240, "Pending").await;
        let last = last_cron_run(&db.pool, NS, "nightly")
            .await
            .unwrap()
            .unwrap();
        assert_eq!(
            (last.name.as_str(), last.status.as_str()),
            ("nightly-1800000180", "Running")
        );
        assert_eq!(last.scheduled_at.unwrap().timestamp(), 1_800_000_180);
        let runs = cron_runs(&db.pool, NS, "nightly", 2).await.unwrap();
        let names: Vec<_> = runs.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(names, ["nightly-1800000180", "nightly-1800000120"]);
        // Every trigger's runs at once, each cut to the limit.
        let all = cron_runs_in(&db.pool, NS, &["hourly", "nightly"], 2)
            .await
            .unwrap();
        let names: Vec<_> = all.iter().map(|r| r.name.as_str()).collect();
        assert_eq!(
            names,
            [
                "hourly-1800000240",
                "nightly-1800000180",
                "nightly-1800000120"
            ]
        );
        // A cron run is not a user's job, whatever its name.
        assert_eq!(
            job_row(&db.pool, NS, "nightly-1800000180").await.unwrap(),
            None
        );
    }
}
