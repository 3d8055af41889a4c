//! Scaling to zero and back: when a call last reached each function
//! (`function_activity`, written by every API process), which functions
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

/// Records that a call reached `ns/name` now.
pub async fn touch(pool: &PgPool, ns: &str, name: &str) -> Result<()> {
    sqlx::query(
        "insert into function_activity (namespace, name, last_call_at) values ($1, $2, now())
         on conflict (namespace, name) do update
             set last_call_at = greatest(function_activity.last_call_at, excluded.last_call_at)",
    )
    .bind(ns)
    .bind(name)
    .execute(pool)
    .await?;
    Ok(())
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
/// counted from their last call's end at the latest (its start plus the
/// function's `timeout_sec`, so a long call is never cut) and from the
/// last change of their row (a deploy). At most `limit`.
pub async fn idle(pool: &PgPool, default_after_sec: u32, limit: i64) -> Result<Vec<Idle>> {
    let rows = sqlx::query(
        "select f.namespace, f.name, w.after_sec
         from functions f
         cross join lateral (select coalesce(f.scale_to_zero_after_sec, $1) as after_sec) w
         left join function_activity a on a.namespace = f.namespace and a.name = f.name
         where f.phase = 'Ready' and not f.idle and f.endpoint is not null
           and w.after_sec > 0
           and f.updated_at < now() - make_interval(secs => w.after_sec)
           and (a.last_call_at is null
                or a.last_call_at + make_interval(secs => f.timeout_sec)
                   < now() - make_interval(secs => w.after_sec))
         order by f.namespace, f.name
         limit $2",
    )
    .bind(default_after_sec as i32)
    .bind(limit)
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
