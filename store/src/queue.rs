//! The work queue: items claimed with `FOR UPDATE SKIP LOCKED`, held under a
//! lease that a heartbeat extends, fenced by their attempt number.
//!
//! Per-key serialization is held by two partial unique indexes (one pending
//! and one running item per key at most), so two workers can never run the
//! same function at once and a burst of enqueues for one function leaves one
//! pending item. Enqueue runs in the caller's transaction, beside the events
//! that caused it, and wakes workers with NOTIFY at commit.

use std::time::Duration;

use chrono::{DateTime, Utc};
use rand::Rng;
use sqlx::{PgConnection, PgExecutor, PgPool, Row};

use crate::{Error, Result};

/// The NOTIFY channel enqueue signals on.
pub const CHANNEL: &str = "sless_work";

/// Wakes the workers for work committed without a NOTIFY of its own (a
/// command's, `crate::command`): a NOTIFY makes its transaction hold a
/// cluster-wide lock until its commit is flushed, so writers that NOTIFY
/// commit one at a time. `ring` after the commit; rings are coalesced into
/// one `NOTIFY` on `CHANNEL` for every ring since the last one was sent, in
/// a transaction of its own that writes nothing (so it flushes nothing).
/// A ring lost with the process is covered by the workers' polling.
#[derive(Clone)]
pub struct Ringer {
    pool: PgPool,
    bell: std::sync::Arc<tokio::sync::Notify>,
    started: std::sync::Arc<std::sync::OnceLock<()>>,
}

impl Ringer {
    pub fn new(pool: PgPool) -> Ringer {
        Ringer {
            pool,
            bell: Default::default(),
            started: Default::default(),
        }
    }

    /// Asks for a NOTIFY soon. Call within a tokio runtime.
    pub fn ring(&self) {
        self.started.get_or_init(|| {
            let (pool, bell) = (self.pool.clone(), self.bell.clone());
            tokio::spawn(async move {
                loop {
                    bell.notified().await;
                    if pool.is_closed() {
                        return;
                    }
                    if let Err(e) = sqlx::query("select pg_notify($1, '')")
                        .bind(CHANNEL)
                        .execute(&pool)
                        .await
                    {
                        tracing::warn!(error = %e, "waking the workers failed; they poll");
                    }
                }
            });
        });
        self.bell.notify_one();
    }
}

/// A claimed item. `attempt` fences: every later call names it, and changes
/// nothing once the lease has passed to another worker.
#[derive(Debug, Clone, PartialEq)]
pub struct WorkItem {
    pub id: i64,
    pub kind: String,
    pub key: String,
    pub payload: serde_json::Value,
    pub attempt: i32,
    pub max_attempts: i32,
    pub owner: String,
    /// When this process got it from its claim (the claim's answer came
    /// back): where the wait for a slot to start it begins.
    pub claimed_at: std::time::Instant,
}

/// The work kind that asks for a function to be reconciled: "look at
/// function X and make what runs match what the log says".
pub const RECONCILE_FUNCTION: &str = "ReconcileFunction";

/// The work kind that runs a job (or a cron trigger's run) once: its key is
/// the job's stream (`job/{ns}/{name}`, `cron/{ns}/{trigger}/{unix seconds}`).
pub const RUN_JOB: &str = "RunJob";

/// A work item that does nothing: for measuring the queue itself.
pub const NOOP: &str = "Noop";

/// The work kind that deletes a blob nothing uses any more (`retention`).
pub const COLLECT_BLOB: &str = "CollectBlob";

/// Every kind but jobs that this release's workers handle. A worker's
/// claim takes only these: during a rolling upgrade a kind that a newer
/// release added waits for a worker that knows it, and is never
/// dead-lettered by an older one as unknown.
pub const OTHER_KINDS: [&str; 3] = [RECONCILE_FUNCTION, COLLECT_BLOB, NOOP];

/// Enqueues a reconcile of a function (key `{ns}/{name}`) in the caller's transaction.
pub async fn enqueue_reconcile<'e>(exec: impl PgExecutor<'e>, function_key: &str) -> Result<()> {
    enqueue(
        exec,
        RECONCILE_FUNCTION,
        function_key,
        &serde_json::json!({}),
    )
    .await
}

/// What `enqueue_reconcile_all` runs: one item per function stream in the
/// log, read from `function_streams` (kept beside the log by a trigger on
/// its first event), so its cost follows the functions, not the history.
pub const RECONCILE_ALL: &str = "insert into work_items (kind, key)
     select $1, substr(stream, length('function/') + 1) from function_streams
     on conflict (key) where state = 'pending'
     do update set attempts = 0, run_at = now(), last_error = null";

/// Enqueues a reconcile of every function the log knows, deleted ones
/// included (after an outage, or when a worker starts with none of its
/// processes). Returns how many.
pub async fn enqueue_reconcile_all(pool: &PgPool) -> Result<u64> {
    let done = sqlx::query(RECONCILE_ALL)
        .bind(RECONCILE_FUNCTION)
        .execute(pool)
        .await?;
    sqlx::query("select pg_notify($1, '')")
        .bind(CHANNEL)
        .execute(pool)
        .await?;
    Ok(done.rows_affected())
}

/// Adds work for `key`, or refreshes the pending item that is already there
/// (newer desired state supersedes older pending work: the payload is
/// replaced, the attempt count starts over, and it is due now).
///
/// With traces on, the payload records the trace it was enqueued in
/// (`traceparent`: the worker's span continues it) unless it names its
/// causes itself (`links`: a cron tick's). A superseded item's causes are
/// kept as `links` of the new one, at most [`MAX_LINKS`].
pub async fn enqueue<'e>(
    exec: impl PgExecutor<'e>,
    kind: &str,
    key: &str,
    payload: &serde_json::Value,
) -> Result<()> {
    let payload = traced(payload);
    sqlx::query("select enqueue_work($1, $2, $3, $4, $5::jsonpath)")
        .bind(kind)
        .bind(key)
        .bind(payload.as_ref())
        .bind(CHANNEL)
        .bind(links_path())
        .execute(exec)
        .await?;
    Ok(())
}

/// A payload as `enqueue` stores it: with traces on, naming the trace it
/// was enqueued in, unless it names its causes itself.
pub(crate) fn traced(payload: &serde_json::Value) -> std::borrow::Cow<'_, serde_json::Value> {
    match sless_telemetry::trace::current() {
        Some(tp) if payload.get("links").is_none() && payload.get("traceparent").is_none() => {
            let mut p = payload.as_object().cloned().unwrap_or_default();
            p.insert("traceparent".into(), tp.into());
            std::borrow::Cow::Owned(serde_json::Value::Object(p))
        }
        _ => std::borrow::Cow::Borrowed(payload),
    }
}

/// The JSON path that keeps the first [`MAX_LINKS`] links (the database
/// function `enqueue_work` takes it).
pub(crate) fn links_path() -> String {
    format!("$[0 to {}]", MAX_LINKS - 1)
}

/// The most trace links a work item keeps of the items it superseded.
pub const MAX_LINKS: usize = 16;

/// The trace contexts a work item continues: the one that caused it, if
/// one did alone, and the links to the others.
pub fn trace_of(item: &WorkItem) -> (Option<&str>, Vec<&str>) {
    let parent = item.payload.get("traceparent").and_then(|v| v.as_str());
    let links = item
        .payload
        .get("links")
        .and_then(|v| v.as_array())
        .map(|l| l.iter().filter_map(|v| v.as_str()).collect())
        .unwrap_or_default();
    (parent, links)
}

/// Which kinds of work a claim may take. A worker has a pool of handler
/// slots for jobs and another for everything else, and claims for each
/// only as many items of its own kinds as it has room for: long jobs never
/// hold up reconciles, and a burst of reconciles never holds up jobs.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kinds {
    /// Every kind (a worker driven step by step).
    All,
    /// Jobs and cron runs (`RunJob`).
    Jobs,
    /// Every kind but `RunJob` that this release handles
    /// ([`OTHER_KINDS`]): reconciles, blob collection, ...
    AllButJobs,
}

impl Kinds {
    /// The claim's condition on `w.kind`. Literal, not bound: each pool's
    /// claim then matches the partial index of its own due items
    /// (`work_items_due_jobs`, `work_items_due_other`).
    fn condition(self) -> String {
        match self {
            Kinds::All => String::new(),
            Kinds::Jobs => format!("and w.kind = '{RUN_JOB}'"),
            Kinds::AllButJobs => format!(
                "and w.kind <> '{RUN_JOB}' and w.kind in ({})",
                OTHER_KINDS.map(|k| format!("'{k}'")).join(", ")
            ),
        }
    }
}

/// Claims up to `limit` due items of any kind whose key has nothing running,
/// for `lease`.
pub async fn claim(
    pool: &PgPool,
    owner: &str,
    limit: i64,
    lease: Duration,
) -> Result<Vec<WorkItem>> {
    claim_kinds(pool, owner, Kinds::All, limit, lease).await
}

/// Claims up to `limit` due items of `kinds` whose key has nothing running,
/// for `lease`.
pub async fn claim_kinds(
    pool: &PgPool,
    owner: &str,
    kinds: Kinds,
    limit: i64,
    lease: Duration,
) -> Result<Vec<WorkItem>> {
    let sql = format!(
        "with due as (
             select id from work_items w
             where state = 'pending' and run_at <= now() {kinds}
               -- offset 0 keeps this a probe of the running index per candidate;
               -- as an anti-join the planner scans that whole index, dead
               -- entries of finished items included, on every claim.
               and not exists (select 1 from work_items r
                               where r.key = w.key and r.state = 'running' offset 0)
             order by run_at, id
             limit $2
             for update skip locked
         )
         update work_items w
         set state = 'running', attempts = w.attempts + 1, lease_owner = $1,
             lease_until = now() + make_interval(secs => $3)
         from due where w.id = due.id
         returning w.id, w.kind, w.key, w.payload, w.attempts, w.max_attempts",
        kinds = kinds.condition()
    );
    let result = sqlx::query(sqlx::AssertSqlSafe(sql))
        .bind(owner)
        .bind(limit)
        .bind(lease.as_secs_f64())
        .fetch_all(pool)
        .await;
    let rows = match result.map_err(Error::from) {
        Ok(rows) => rows,
        // Another worker started an item of the same key between our
        // snapshot and our update: the index refused; try again next round.
        Err(e) if e.is_unique_violation() => return Ok(vec![]),
        Err(e) => return Err(e),
    };
    let claimed_at = std::time::Instant::now();
    Ok(rows
        .into_iter()
        .map(|r| WorkItem {
            id: r.get("id"),
            kind: r.get("kind"),
            key: r.get("key"),
            payload: r.get("payload"),
            attempt: r.get("attempts"),
            max_attempts: r.get("max_attempts"),
            owner: owner.to_owned(),
            claimed_at,
        })
        .collect())
}

/// Extends the lease. False when the item is no longer this worker's.
pub async fn heartbeat(pool: &PgPool, item: &WorkItem, lease: Duration) -> Result<bool> {
    let done = sqlx::query(
        "update work_items set lease_until = now() + make_interval(secs => $4)
         where id = $1 and attempts = $2 and lease_owner = $3 and state = 'running'",
    )
    .bind(item.id)
    .bind(item.attempt)
    .bind(&item.owner)
    .bind(lease.as_secs_f64())
    .execute(pool)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// True when this worker still holds the item's lease; locks the item's row
/// until the transaction ends, so a worker can fence its own writes with it.
pub async fn holds_lease(conn: &mut PgConnection, item: &WorkItem) -> Result<bool> {
    let held: Option<i64> = sqlx::query_scalar(
        "select id from work_items
         where id = $1 and attempts = $2 and lease_owner = $3 and state = 'running'
           and lease_until > now()
         for update",
    )
    .bind(item.id)
    .bind(item.attempt)
    .bind(&item.owner)
    .fetch_optional(conn)
    .await?;
    Ok(held.is_some())
}

/// Finishes the item. False (and nothing changed) when the lease was lost.
pub async fn complete<'e>(exec: impl PgExecutor<'e>, item: &WorkItem) -> Result<bool> {
    let done = sqlx::query(
        "delete from work_items where id = $1 and attempts = $2 and lease_owner = $3 and state = 'running'",
    )
    .bind(item.id)
    .bind(item.attempt)
    .bind(&item.owner)
    .execute(exec)
    .await?;
    Ok(done.rows_affected() == 1)
}

/// Finishes many items of one worker in one statement (a worker flushes
/// its completions in batches). Each is fenced like `complete`: an item
/// whose lease passed to another worker, or to a later attempt, is left
/// alone. Returns the ids that were finished.
///
/// Work enqueued for a key while an item of that key ran waits for it
/// (one running item per key), and its enqueue's NOTIFY came while it
/// could not be claimed: when a finished item has such work behind it,
/// the same statement NOTIFYs the workers, so that work starts now and
/// not at a claimer's next poll (a call that comes just after a scale to
/// zero waits for the start its activation asked for, not for a poll).
pub async fn complete_many<'e>(
    exec: impl PgExecutor<'e>,
    owner: &str,
    items: &[(i64, i32)],
) -> Result<Vec<i64>> {
    let (ids, attempts): (Vec<i64>, Vec<i32>) = items.iter().copied().unzip();
    let done = sqlx::query_scalar(
        "with done as (
             delete from work_items w
             using unnest($1::bigint[], $2::int[]) as a(id, attempt)
             where w.id = a.id and w.attempts = a.attempt and w.lease_owner = $3 and w.state = 'running'
             returning w.id, w.key
         ),
         rang as (
             select pg_notify($4, '') from done d
             where exists (select 1 from work_items p
                           where p.key = d.key and p.state = 'pending' and p.run_at <= now())
             limit 1
         )
         select d.id from done d cross join (select count(*) from rang) r",
    )
    .bind(&ids)
    .bind(&attempts)
    .bind(owner)
    .bind(CHANNEL)
    .fetch_all(exec)
    .await?;
    Ok(done)
}

/// Extends the lease of every item `owner` holds, in one statement; returns
/// the `(id, attempt)` of each. An item the worker believes it holds and
/// that is missing here has been taken from it (its lease expired and the
/// sweep released it): the worker must stop working on it.
pub async fn heartbeat_owner(
    pool: &PgPool,
    owner: &str,
    lease: Duration,
) -> Result<Vec<(i64, i32)>> {
    let rows = sqlx::query(
        "update work_items set lease_until = now() + make_interval(secs => $2)
         where lease_owner = $1 and state = 'running'
         returning id, attempts",
    )
    .bind(owner)
    .bind(lease.as_secs_f64())
    .fetch_all(pool)
    .await?;
    Ok(rows.iter().map(|r| (r.get(0), r.get(1))).collect())
}

/// An item a stopping worker hands back.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Handback {
    pub id: i64,
    pub attempt: i32,
    /// False when its handler never started: the attempt is given back too.
    pub started: bool,
}

/// Returns items a stopping worker holds to the queue, due now, so another
/// worker takes them at once instead of waiting out their leases. Items
/// whose key already has newer work pending are dropped in its favour.
/// Fenced like `complete`. Returns how many were handed back or dropped.
pub async fn hand_back(pool: &PgPool, owner: &str, items: &[Handback]) -> Result<u64> {
    if items.is_empty() {
        return Ok(0);
    }
    let ids: Vec<i64> = items.iter().map(|h| h.id).collect();
    let attempts: Vec<i32> = items.iter().map(|h| h.attempt).collect();
    let started: Vec<bool> = items.iter().map(|h| h.started).collect();
    // An enqueue that slips in between the check for newer pending work and
    // the update makes the update fail on the one-pending-per-key index;
    // the next try sees that work and drops the item in its favour.
    let mut tries = 0;
    let row = loop {
        tries += 1;
        let result = sqlx::query(
            "with mine as (
             select w.id, w.key, h.started from work_items w
             join unnest($1::bigint[], $2::int[], $3::bool[]) as h(id, attempt, started)
               on w.id = h.id and w.attempts = h.attempt
             where w.lease_owner = $4 and w.state = 'running'
             for update of w
         ),
         superseded as (
             delete from work_items w using mine m
             where w.id = m.id
               and exists (select 1 from work_items p where p.key = m.key and p.state = 'pending')
             returning w.id
         ),
         handed as (
             update work_items w
             set state = 'pending', run_at = now(), lease_owner = null, lease_until = null,
                 attempts = case when m.started then w.attempts else w.attempts - 1 end,
                 last_error = case when m.started
                     then 'attempt ' || w.attempts || ' was stopped by a worker shutting down'
                     else w.last_error end
             from mine m
             where w.id = m.id and w.id not in (select id from superseded)
             returning w.id
         )
         select (select count(*) from superseded) + (select count(*) from handed)",
        )
        .bind(&ids)
        .bind(&attempts)
        .bind(&started)
        .bind(owner)
        .fetch_one(pool)
        .await;
        match result.map_err(Error::from) {
            Ok(row) => break row,
            Err(e) if e.is_unique_violation() && tries < 3 => continue,
            Err(e) => return Err(e),
        }
    };
    sqlx::query("select pg_notify($1, '')")
        .bind(CHANNEL)
        .execute(pool)
        .await?;
    Ok(row.get::<i64, _>(0) as u64)
}

/// How long to wait before retry `attempt` (1-based): exponential with full
/// jitter over the upper half, capped.
#[derive(Debug, Clone, Copy)]
pub struct Backoff {
    pub base: Duration,
    pub max: Duration,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base: Duration::from_secs(1),
            max: Duration::from_secs(300),
        }
    }
}

impl Backoff {
    pub fn delay(&self, attempt: i32) -> Duration {
        let exp = self
            .base
            .saturating_mul(1u32 << attempt.clamp(1, 20).saturating_sub(1) as u32);
        let cap = exp.min(self.max);
        let half = cap / 2;
        half + rand::rng().random_range(Duration::ZERO..=half)
    }
}

/// What became of a failed item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Retry {
    /// Pending again, due at the given time.
    At(DateTime<Utc>),
    /// Dropped: newer work for the same key is already pending.
    Superseded,
    /// The lease had passed to another worker; nothing changed.
    LeaseLost,
}

/// Puts a failed item back for a retry after `delay`, keeping its error.
/// Call only while `attempt < max_attempts`; past that, `dead_letter`.
pub async fn retry(pool: &PgPool, item: &WorkItem, error: &str, delay: Duration) -> Result<Retry> {
    let mut tx = pool.begin().await?;
    if !holds_lease(&mut tx, item).await? {
        return Ok(Retry::LeaseLost);
    }
    let newer: bool = sqlx::query_scalar(
        "select exists (select 1 from work_items where key = $1 and state = 'pending')",
    )
    .bind(&item.key)
    .fetch_one(&mut *tx)
    .await?;
    if newer {
        complete(&mut *tx, item).await?;
        tx.commit().await?;
        return Ok(Retry::Superseded);
    }
    let result = sqlx::query_scalar(
        "update work_items
         set state = 'pending', run_at = now() + make_interval(secs => $2), last_error = $3,
             lease_owner = null, lease_until = null
         where id = $1
         returning run_at",
    )
    .bind(item.id)
    .bind(delay.as_secs_f64())
    .bind(error)
    .fetch_one(&mut *tx)
    .await;
    match result.map_err(Error::from) {
        Ok(at) => {
            tx.commit().await?;
            Ok(Retry::At(at))
        }
        Err(e) if e.is_unique_violation() => {
            // An enqueue slipped in after our check: it supersedes this item.
            drop(tx);
            let mut tx = pool.begin().await?;
            complete(&mut *tx, item).await?;
            tx.commit().await?;
            Ok(Retry::Superseded)
        }
        Err(e) => Err(e),
    }
}

/// Moves an item that ran out of attempts to `work_dead`, in the caller's
/// transaction (so the caller can record the failure beside it). False when
/// the lease was lost.
pub async fn dead_letter(conn: &mut PgConnection, item: &WorkItem, error: &str) -> Result<bool> {
    let moved = sqlx::query(
        "with gone as (
             delete from work_items
             where id = $1 and attempts = $2 and lease_owner = $3 and state = 'running'
             returning id, kind, key, payload, attempts, created_at
         )
         insert into work_dead (id, kind, key, payload, attempts, last_error, created_at)
         select id, kind, key, payload, attempts, $4, created_at from gone",
    )
    .bind(item.id)
    .bind(item.attempt)
    .bind(&item.owner)
    .bind(error)
    .execute(conn)
    .await?;
    Ok(moved.rows_affected() == 1)
}

/// Returns items whose lease expired (their worker died or hung) to the
/// queue, keeping the attempt count. Where newer work for the key is already
/// pending, the expired item is dropped in its favour. Returns how many
/// items were released.
pub async fn release_expired(pool: &PgPool) -> Result<u64> {
    release(pool, false).await
}

/// Returns every running item to the queue, whatever its lease, like
/// `release_expired` does for expired ones. Only for a process that knows it
/// is the sole worker on its database (the embedded default, starting after
/// an unclean stop): anywhere else it would take work from a live worker.
pub async fn release_all_running(pool: &PgPool) -> Result<u64> {
    release(pool, true).await
}

async fn release(pool: &PgPool, all: bool) -> Result<u64> {
    let result = sqlx::query(
        "with expired as (
             select id, key from work_items
             where state = 'running' and (lease_until < now() or $1)
             for update skip locked
         ),
         superseded as (
             delete from work_items w using expired e
             where w.id = e.id
               and exists (select 1 from work_items p where p.key = e.key and p.state = 'pending')
             returning w.id
         ),
         released as (
             update work_items w
             set state = 'pending', run_at = now(), lease_owner = null, lease_until = null,
                 last_error = case when $1
                     then 'attempt ' || w.attempts || ' was cut short by a stop; released at start'
                     else 'the lease of attempt ' || w.attempts || ' expired (worker died or hung)' end
             from expired e
             where w.id = e.id and w.id not in (select id from superseded)
             returning w.id
         )
         select (select count(*) from superseded) + (select count(*) from released)",
    )
    .bind(all)
    .fetch_one(pool)
    .await;
    match result.map_err(Error::from) {
        Ok(row) => Ok(row.get::<i64, _>(0) as u64),
        Err(e) if e.is_unique_violation() => Ok(0),
        Err(e) => Err(e),
    }
}

/// Counts of items by state, for status pages and tests.
pub async fn counts(pool: &PgPool) -> Result<(i64, i64)> {
    let row = sqlx::query(
        "select count(*) filter (where state = 'pending'), count(*) filter (where state = 'running') from work_items",
    )
    .fetch_one(pool)
    .await?;
    Ok((row.get(0), row.get(1)))
}
