//! What a namespace uses, counted for its quotas: functions, kept versions
//! and their bytes, triggers, jobs waiting or running, recent uploads.
//!
//! The counts are read where commands write, never from a read model: the
//! projector may not have applied an append that has committed, and a
//! count that missed it would let a namespace pass its quota. Functions
//! and triggers are read from `namespace_counts`, which the log keeps in
//! the appending transaction; versions and uploads are counted from the
//! event log (the index on `(namespace, type, position)` finds a
//! namespace's events of a type); jobs from the work queue, where a job's run is enqueued in the
//! same transaction as its `JobRequested` and stays until a worker is done
//! with it.
//!
//! A count is only as good as what it can see: two commands that count,
//! then append, could both pass a quota at its edge. So a command takes
//! `lock` for the namespace and the resource first, in its own transaction,
//! and holds it until it commits: the next one to count waits, and its
//! count (a statement started after the lock was granted) sees the first
//! one's events. The lock is held while counting, so a count's cost is
//! paid by every command of its kind in the namespace in turn. An advisory lock assigns no transaction id, so taking it
//! before the append keeps the event log's rule that the stream lock comes
//! before anything that assigns one (`eventlog::append`).

use std::time::Duration;

use sha2::{Digest, Sha256};
use sqlx::{PgConnection, PgExecutor, Row};

use crate::Result;

/// Takes the transaction-scoped advisory lock on `resource` (`functions`,
/// `versions`, …) of namespace `ns`, until the transaction ends.
pub async fn lock(conn: &mut PgConnection, ns: &str, resource: &str) -> Result<()> {
    sqlx::query("select pg_advisory_xact_lock($1)")
        .bind(lock_key(ns, resource))
        .execute(conn)
        .await?;
    Ok(())
}

/// The lock of a namespace's resource: a name no event stream has
/// (`quota/{ns}/{resource}`), hashed as stream locks are.
fn lock_key(ns: &str, resource: &str) -> i64 {
    let d = Sha256::digest(format!("quota/{ns}/{resource}").as_bytes());
    i64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// What `functions` and `triggers` read: one row of `namespace_counts`,
/// which a trigger on `events` moves in the transaction that appends a
/// `FunctionCreated`, `FunctionDeleted`, `TriggerCreated` or
/// `TriggerDeleted` (migration `20261205000002_namespace_counts.sql`), so
/// it is the log's created less deleted at every commit. Counting the
/// events instead read one index entry per event under the namespace's
/// lock, which made filling one namespace quadratic.
pub const COUNTS: &str = "select functions, triggers from namespace_counts where namespace = $1";

async fn counts(exec: impl PgExecutor<'_>, ns: &str) -> Result<(u64, u64)> {
    let row: Option<(i64, i64)> = sqlx::query_as(COUNTS).bind(ns).fetch_optional(exec).await?;
    let (functions, triggers) = row.unwrap_or_default();
    Ok((functions.max(0) as u64, triggers.max(0) as u64))
}

/// Functions that exist in `ns` (created, and not deleted since).
pub async fn functions(exec: impl PgExecutor<'_>, ns: &str) -> Result<u64> {
    Ok(counts(exec, ns).await?.0)
}

/// Triggers that exist in `ns`.
pub async fn triggers(exec: impl PgExecutor<'_>, ns: &str) -> Result<u64> {
    Ok(counts(exec, ns).await?.1)
}

/// The kept versions of a namespace's functions, and the bytes of their zips.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct KeptVersions {
    pub versions: u64,
    /// The sum of each kept version's zip size (`FunctionUploaded.size`):
    /// a zip two versions share counts twice.
    pub bytes: u64,
}

/// The versions of the functions that exist in `ns` that retention has not
/// pruned (`FunctionUploaded` less `VersionsPruned`), as the function
/// aggregate keeps them. A deleted function's versions are left out: it
/// lists none and serves none.
pub async fn kept_versions(exec: impl PgExecutor<'_>, ns: &str) -> Result<KeptVersions> {
    let row = sqlx::query(
        "with living as (
             select stream from (
                 select distinct on (stream) stream, type
                 from events
                 where namespace = $1 and type in ('FunctionCreated', 'FunctionDeleted')
                 order by stream, position desc
             ) last
             where type = 'FunctionCreated'
         ),
         pruned as (
             select e.stream, v.version::bigint as version
             from events e, jsonb_array_elements_text(e.data->'versions') as v(version)
             where e.namespace = $1 and e.type = 'VersionsPruned'
         )
         select count(*) as versions, coalesce(sum((u.data->>'size')::bigint), 0)::bigint as bytes
         from events u
         join living l on l.stream = u.stream
         where u.namespace = $1 and u.type = 'FunctionUploaded'
           and not exists (
               select 1 from pruned p
               where p.stream = u.stream and p.version = (u.data->>'version')::bigint
           )",
    )
    .bind(ns)
    .fetch_one(exec)
    .await?;
    Ok(KeptVersions {
        versions: row.get::<i64, _>("versions") as u64,
        bytes: row.get::<i64, _>("bytes") as u64,
    })
}

/// User jobs of `ns` whose run waits in the work queue or runs (a `RunJob`
/// item keyed by the job's stream, `job/{ns}/{name}`). Cron runs (streams
/// `cron/…`) are not counted.
pub async fn running_jobs(exec: impl PgExecutor<'_>, ns: &str) -> Result<u64> {
    let n: i64 = sqlx::query_scalar(
        "select count(distinct key) from work_items where kind = $1 and starts_with(key, $2)",
    )
    .bind(crate::queue::RUN_JOB)
    .bind(format!("job/{ns}/"))
    .fetch_one(exec)
    .await?;
    Ok(n as u64)
}

/// The uploads a namespace made within a window, as the log recorded them.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct RecentUploads {
    /// Uploads within the window, counting at most the `limit` latest.
    pub count: u64,
    /// How long until the oldest of them leaves the window (zero when
    /// there are none).
    pub oldest_leaves_in: Duration,
}

/// The versions uploaded to `ns` (`FunctionUploaded` events) recorded
/// within `window` of the database's clock, counting the `limit` latest at
/// most: one index scan, newest first, however long the namespace's past.
pub async fn recent_uploads(
    exec: impl PgExecutor<'_>,
    ns: &str,
    window: Duration,
    limit: u64,
) -> Result<RecentUploads> {
    let row = sqlx::query(
        "select count(*) as uploads,
                coalesce(extract(epoch from min(recorded_at) + make_interval(secs => $3) - now()), 0)::float8
                    as leaves_in
         from (
             select recorded_at from events
             where namespace = $1 and type = 'FunctionUploaded'
             order by position desc
             limit $2
         ) latest
         where recorded_at > now() - make_interval(secs => $3)",
    )
    .bind(ns)
    .bind(limit.min(i64::MAX as u64) as i64)
    .bind(window.as_secs_f64())
    .fetch_one(exec)
    .await?;
    let leaves_in: f64 = row.get("leaves_in");
    Ok(RecentUploads {
        count: row.get::<i64, _>("uploads") as u64,
        oldest_leaves_in: Duration::from_secs_f64(leaves_in.max(0.0)),
    })
}
