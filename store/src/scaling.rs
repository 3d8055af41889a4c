//! Scaling to zero, back and out: the calls in flight each API process
//! measured (`function_load`) and when a call last reached each function
//! (`function_activity`), both written by every API process's load
//! report, which functions
//! have been idle past their window (by the database's clock, so every
//! worker and every API replica agrees), and the two commands sless asks
//! of itself: `ScaleToZero` (the workers' idle sweep) and `Activate` (the
//! invoke proxy, on a call to a function at zero). Each is appended with
//! the stream version it was decided on, with a reconcile in the same
//! transaction, so several sweeps or several proxies asking at once
//! record it once and start or stop one instance.

use sless_domain::function::FunctionCommand;
use sless_domain::{Aggregate, Function, FunctionKey};
use sqlx::{PgPool, Row};

use crate::eventlog::{Appended, Metadata};
use crate::system::{self, Executed, SystemCommand};
use crate::{Error, Result};

/// What one API process measured of one function since its last report.
#[derive(Debug, Clone, PartialEq)]
pub struct LoadReport {
    pub namespace: String,
    pub name: String,
    /// Calls in flight, on average over the time since the last report.
    pub in_flight: f64,
    /// A call was in flight at some moment since the last report: the
    /// function was called until now (its idle window starts again).
    pub called: bool,
}

/// Records what API process `replica` measured (`function_load`) and,
/// for the functions it saw called, that they were called until now
/// (`function_activity`, which the idle sweep reads): one statement.
pub async fn report_load(pool: &PgPool, replica: &str, reports: &[LoadReport]) -> Result<()> {
    if reports.is_empty() {
        return Ok(());
    }
    let namespaces: Vec<&str> = reports.iter().map(|r| r.namespace.as_str()).collect();
    let names: Vec<&str> = reports.iter().map(|r| r.name.as_str()).collect();
    let in_flight: Vec<f64> = reports.iter().map(|r| r.in_flight).collect();
    let called: Vec<bool> = reports.iter().map(|r| r.called).collect();
    sqlx::query(
        "with r as (
             select unnest($2::text[]) as namespace, unnest($3::text[]) as name,
                    unnest($4::float8[]) as in_flight, unnest($5::bool[]) as called
         ), load as (
             insert into function_load (namespace, name, replica, in_flight, reported_at)
             select namespace, name, $1, in_flight, now() from r
             on conflict (namespace, name, replica) do update
                 set in_flight = excluded.in_flight, reported_at = excluded.reported_at
         ), activity as (
             insert into function_activity (namespace, name, last_call_at)
             select namespace, name, now() from r where called
             on conflict (namespace, name) do update
                 set last_call_at = greatest(function_activity.last_call_at, excluded.last_call_at)
         )
         select 1",
    )
    .bind(replica)
    .bind(&namespaces)
    .bind(&names)
    .bind(&in_flight)
    .bind(&called)
    .execute(pool)
    .await?;
    Ok(())
}

/// How long an API process's report of a function's load counts: one
/// older than this is of a process that stopped reporting (gone).
pub const LOAD_FRESH_SECS: f64 = 5.0;

/// The calls in flight of each function with a fresh report, summed over
/// every API process: `(namespace, name, in_flight)`.
pub async fn load(pool: &PgPool) -> Result<Vec<(String, String, f64)>> {
    let rows = sqlx::query(
        "select namespace, name, sum(in_flight) as in_flight from function_load
         where reported_at > now() - make_interval(secs => $1)
         group by namespace, name",
    )
    .bind(LOAD_FRESH_SECS)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.get("namespace"), r.get("name"), r.get("in_flight")))
        .collect())
}

/// One function's calls in flight now, summed over every API process.
pub async fn in_flight(pool: &PgPool, ns: &str, name: &str) -> Result<f64> {
    let sum: Option<f64> = sqlx::query_scalar(
        "select sum(in_flight) from function_load
         where namespace = $1 and name = $2 and reported_at > now() - make_interval(secs => $3)",
    )
    .bind(ns)
    .bind(name)
    .bind(LOAD_FRESH_SECS)
    .fetch_one(pool)
    .await?;
    Ok(sum.unwrap_or(0.0))
}

/// A function idle past its window.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Idle {
    pub namespace: String,
    pub name: String,
    /// Its window, in seconds.
    pub after_sec: u32,
}

/// Functions that serve and have had no call for their window (their
/// `scale_to_zero_after_sec`, else `default_after_sec`; `0` is never),
/// counted from their last call's end (the last report of an API process
/// that saw a call in flight) and from the last change of their row (a
/// deploy); none with a call in flight by a fresh report, nor with
/// `min_instances` above 0. At most `limit`.
pub async fn idle(pool: &PgPool, default_after_sec: u32, limit: i64) -> Result<Vec<Idle>> {
    let rows = sqlx::query(
        "select f.namespace, f.name, w.after_sec
         from functions f
         cross join lateral (select coalesce(f.scale_to_zero_after_sec, $1) as after_sec) w
         left join function_activity a on a.namespace = f.namespace and a.name = f.name
         where f.phase = 'Ready' and not f.idle and f.endpoint is not null
           and w.after_sec > 0
           and f.updated_at < now() - make_interval(secs => w.after_sec)
           and coalesce((f.scaling->>'min_instances')::int, 0) = 0
           and (a.last_call_at is null
                or a.last_call_at < now() - make_interval(secs => w.after_sec))
           and not exists (
               select 1 from function_load l
               where l.namespace = f.namespace and l.name = f.name and l.in_flight > 0
                 and l.reported_at > now() - make_interval(secs => $3))
         order by f.namespace, f.name
         limit $2",
    )
    .bind(default_after_sec as i32)
    .bind(limit)
    .bind(LOAD_FRESH_SECS)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Idle {
            namespace: r.get("namespace"),
            name: r.get("name"),
            after_sec: r.get::<i32, _>("after_sec") as u32,
        })
        .collect())
}

/// What [`decide_and_enqueue`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decided {
    /// `None` when it decided nothing: the function is no longer in the
    /// state the command is for (another sweep or another proxy got there
    /// first).
    pub appended: Option<Appended>,
    /// The stream's version after it: what the read model must reach to
    /// show the command (or what it was decided on).
    pub version: u64,
}

/// Decides `command` (`ScaleToZero` or `Activate`) on the function's
/// stream as the log has it, and appends what it decides with a reconcile
/// of the function, in one transaction (`crate::system`: a lost race is
/// decided again on the stream as it is now).
pub async fn decide_and_enqueue(
    pool: &PgPool,
    key: &FunctionKey,
    command: FunctionCommand,
    metadata: Metadata,
) -> Result<Decided> {
    let cmd = SystemCommand::new(key.stream(), &key.namespace, metadata).reconcile(key.queue_key());
    let executed = system::execute::<Function>(pool, &cmd, |current| {
        Aggregate::decide(current.state, command.clone())
    })
    .await?;
    match executed {
        Executed::Appended { appended, .. } => Ok(Decided {
            appended: Some(appended),
            version: appended.version,
        }),
        Executed::Unchanged { version } | Executed::Lost { version } => Ok(Decided {
            appended: None,
            version,
        }),
        Executed::Refused(e) => Err(Error::Internal(format!("{}: {e}", key.queue_key()))),
        Executed::Fenced => Err(Error::Internal(
            "a command without a lease was fenced".into(),
        )),
    }
}

/// How long the last start of an instance after a call took, as the log
/// has it: from the stream's last `FunctionScaledUp` to the first
/// `FunctionDeployed` after it. `None` until that deploy is recorded.
pub async fn last_start(pool: &PgPool, stream: &str) -> Result<Option<std::time::Duration>> {
    let micros: Option<i64> = sqlx::query_scalar(
        "with up as (
             select version, recorded_at from events
             where stream = $1 and type = 'FunctionScaledUp'
             order by version desc limit 1)
         select (extract(epoch from (d.recorded_at - up.recorded_at)) * 1000000)::bigint
         from up
         join lateral (
             select recorded_at from events e
             where e.stream = $1 and e.type = 'FunctionDeployed' and e.version > up.version
             order by e.version limit 1) d on true",
    )
    .bind(stream)
    .fetch_optional(pool)
    .await?
    .flatten();
    Ok(micros.map(|us| std::time::Duration::from_micros(us.max(0) as u64)))
}

/// A function the autoscaler looks at: one that serves (Ready, with an
/// endpoint), or one scaled to zero that its `min_instances` keeps warm.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Scalable {
    pub namespace: String,
    pub name: String,
    /// Its spec's scaling settings, with its runtime's defaults filled.
    pub min_instances: u32,
    pub max_instances: u32,
    pub concurrency: u32,
    /// How many instances serve, as the read model has it.
    pub instances: u32,
    /// Scaled to zero.
    pub idle: bool,
}

/// The functions the autoscaler looks at (see [`Scalable`]), by name: of
/// those that serve, the ones with calls reported (fresh reports) or more
/// instances than their floor. One at its floor with no call has nothing
/// to decide, however many such functions there are.
pub async fn scalable(pool: &PgPool) -> Result<Vec<Scalable>> {
    let rows = sqlx::query(
        "select f.namespace, f.name, f.runtime, f.scaling, f.instances, f.idle from functions f
         where f.phase = 'Ready'
           and ((f.endpoint is not null and not f.idle
                 and (f.instances > greatest(coalesce((f.scaling->>'min_instances')::int, 0), 1)
                      or exists (select 1 from function_load l
                                 where l.namespace = f.namespace and l.name = f.name
                                   and l.reported_at > now() - make_interval(secs => $1))))
                or (f.idle and coalesce((f.scaling->>'min_instances')::int, 0) > 0))
         order by f.namespace, f.name",
    )
    .bind(LOAD_FRESH_SECS)
    .fetch_all(pool)
    .await?;
    let bad = |what: String| Error::Internal(format!("functions read model: {what}"));
    rows.into_iter()
        .map(|r| {
            let runtime: String = r.get("runtime");
            let runtime: sless_domain::Runtime = runtime
                .parse()
                .map_err(|e: sless_domain::DomainError| bad(e.to_string()))?;
            let scaling: sless_domain::Scaling =
                serde_json::from_value(r.get("scaling")).map_err(|e| bad(e.to_string()))?;
            Ok(Scalable {
                namespace: r.get("namespace"),
                name: r.get("name"),
                min_instances: scaling.min(),
                max_instances: scaling.max(),
                concurrency: scaling.concurrency_for(runtime),
                instances: r.get::<i32, _>("instances") as u32,
                idle: r.get("idle"),
            })
        })
        .collect()
}

/// Deletes the load reports older than `older_than` seconds: those of API
/// processes that are gone (each process reports under a name of its own).
pub async fn forget_stale_load(pool: &PgPool, older_than: f64) -> Result<u64> {
    let done = sqlx::query(
        "delete from function_load where reported_at < now() - make_interval(secs => $1)",
    )
    .bind(older_than)
    .execute(pool)
    .await?;
    Ok(done.rows_affected())
}
