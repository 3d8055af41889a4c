//! Invocation records (the `invocations` table): what each call of a
//! function did, through the invoke proxy or as a job or cron run (`origin`).
//! The API writes the proxy's in batches (one statement per
//! batch), reads one function's a page at a time newest first, and keeps the
//! table bounded by age and by count per function with bounded deletes.
//!
//! A record's id is a UUIDv7 of its start time (`id_for`): ordering ids is
//! ordering start times to the millisecond, which deleting by age relies on
//! to walk the primary key instead of scanning the table.

use std::time::Duration;

use chrono::{DateTime, Utc};
use sqlx::{PgExecutor, Row};
use uuid::Uuid;

use crate::Result;

/// One call of a function.
#[derive(Debug, Clone, PartialEq)]
pub struct Invocation {
    /// `id_for(started_at)`.
    pub id: Uuid,
    pub namespace: String,
    pub function: String,
    /// The deployed version that answered; None when none did.
    pub version: Option<u32>,
    pub started_at: DateTime<Utc>,
    pub duration: Duration,
    pub status: u16,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub cold: bool,
    pub error: Option<String>,
    /// Why it failed, as a word (`oom`, `crashed`, `timeout`, ...).
    pub error_kind: Option<String>,
    pub request_id: String,
    /// Where the call came from: `http` (the invoke proxy), `job` or `cron`.
    pub origin: String,
    /// The run's stream, for a job or cron run (`job/{ns}/{name}`,
    /// `cron/{ns}/{trigger}/{unix seconds}`).
    pub run: Option<String>,
    /// A call through `/fn`: its method, and its path below the function
    /// (no query).
    pub method: Option<String>,
    pub path: Option<String>,
    /// A call that found its function scaled to zero: how long it was held
    /// until an instance served (its first call is the rest of `duration`).
    pub activation: Option<Duration>,
    /// ... and of that, how long the worker took to start the instance
    /// (from `FunctionScaledUp` to `FunctionDeployed`, as the log has them).
    pub instance_start: Option<Duration>,
}

/// A new record id for a call that started at `started_at`: a UUIDv7 of that
/// time (the random part makes ids of one millisecond unique).
pub fn id_for(started_at: DateTime<Utc>) -> Uuid {
    let ms = started_at.timestamp_millis().max(0) as u64;
    let ts = uuid::Timestamp::from_unix(uuid::NoContext, ms / 1000, (ms % 1000) as u32 * 1_000_000);
    Uuid::new_v7(ts)
}

/// The smallest id of a record that started at `at` or later: every record
/// that started before `at` (to the millisecond) has a smaller id.
fn first_id_at(at: DateTime<Utc>) -> Uuid {
    let ms = at.timestamp_millis().max(0) as u128;
    Uuid::from_u128(ms << 80)
}

/// Where a page ends: the last record it holds. The next page starts after it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Cursor {
    pub started_at: DateTime<Utc>,
    pub id: Uuid,
}

impl Cursor {
    pub fn of(r: &Invocation) -> Cursor {
        Cursor {
            started_at: r.started_at,
            id: r.id,
        }
    }

    /// An opaque token for clients: 48 hex digits.
    pub fn encode(&self) -> String {
        format!(
            "{:016x}{}",
            self.started_at.timestamp_micros() as u64,
            self.id.simple()
        )
    }

    /// The cursor a token stands for; None when it is not one `encode`
    /// made from a record (its id must be the UUIDv7 of its start time).
    pub fn decode(token: &str) -> Option<Cursor> {
        let (micros, id) = (token.get(..16)?, token.get(16..)?);
        let micros = u64::from_str_radix(micros, 16).ok()? as i64;
        let started_at = DateTime::from_timestamp_micros(micros)?;
        let id = Uuid::try_parse(id).ok()?;
        let (secs, nanos) = id.get_timestamp()?.to_unix();
        let id_ms = secs as i64 * 1000 + i64::from(nanos / 1_000_000);
        let c = Cursor { started_at, id };
        (id.get_version_num() == 7 && id_ms == started_at.timestamp_millis() && c.encode() == token)
            .then_some(c)
    }
}

/// Writes records in one statement. A record whose id is already stored is
/// skipped.
pub async fn insert<'e>(exec: impl PgExecutor<'e>, records: &[Invocation]) -> Result<u64> {
    let n = records.len();
    let mut ids = Vec::with_capacity(n);
    let mut namespaces = Vec::with_capacity(n);
    let mut functions = Vec::with_capacity(n);
    let mut versions = Vec::with_capacity(n);
    let mut started = Vec::with_capacity(n);
    let mut durations = Vec::with_capacity(n);
    let mut statuses = Vec::with_capacity(n);
    let mut bytes_in = Vec::with_capacity(n);
    let mut bytes_out = Vec::with_capacity(n);
    let mut cold = Vec::with_capacity(n);
    let mut errors = Vec::with_capacity(n);
    let mut error_kinds = Vec::with_capacity(n);
    let mut request_ids = Vec::with_capacity(n);
    let mut origins = Vec::with_capacity(n);
    let mut runs = Vec::with_capacity(n);
    let mut methods = Vec::with_capacity(n);
    let mut paths = Vec::with_capacity(n);
    let mut activations = Vec::with_capacity(n);
    let mut starts = Vec::with_capacity(n);
    let micros = |d: Duration| i64::try_from(d.as_micros()).unwrap_or(i64::MAX);
    for r in records {
        ids.push(r.id);
        namespaces.push(r.namespace.as_str());
        functions.push(r.function.as_str());
        versions.push(r.version.map(|v| v as i32));
        started.push(r.started_at);
        durations.push(i64::try_from(r.duration.as_micros()).unwrap_or(i64::MAX));
        statuses.push(r.status as i16);
        bytes_in.push(i64::try_from(r.bytes_in).unwrap_or(i64::MAX));
        bytes_out.push(i64::try_from(r.bytes_out).unwrap_or(i64::MAX));
        cold.push(r.cold);
        errors.push(r.error.as_deref());
        error_kinds.push(r.error_kind.as_deref());
        request_ids.push(r.request_id.as_str());
        origins.push(r.origin.as_str());
        runs.push(r.run.as_deref());
        methods.push(r.method.as_deref());
        paths.push(r.path.as_deref());
        activations.push(r.activation.map(micros));
        starts.push(r.instance_start.map(micros));
    }
    let done = sqlx::query(
        "insert into invocations
           (id, namespace, function, version, started_at, duration_us, status,
            bytes_in, bytes_out, cold, error, request_id, origin, run, error_kind,
            method, path, activation_us, instance_start_us)
         select * from unnest($1::uuid[], $2::text[], $3::text[], $4::int4[],
                              $5::timestamptz[], $6::int8[], $7::int2[], $8::int8[],
                              $9::int8[], $10::bool[], $11::text[], $12::text[],
                              $13::text[], $14::text[], $15::text[], $16::text[],
                              $17::text[], $18::int8[], $19::int8[])
         on conflict (id) do nothing",
    )
    .bind(ids)
    .bind(namespaces)
    .bind(functions)
    .bind(versions)
    .bind(started)
    .bind(durations)
    .bind(statuses)
    .bind(bytes_in)
    .bind(bytes_out)
    .bind(cold)
    .bind(errors)
    .bind(request_ids)
    .bind(origins)
    .bind(runs)
    .bind(error_kinds)
    .bind(methods)
    .bind(paths)
    .bind(activations)
    .bind(starts)
    .execute(exec)
    .await?;
    Ok(done.rows_affected())
}

const COLUMNS: &str = "id, namespace, function, version, started_at, duration_us, status, \
                       bytes_in, bytes_out, cold, error, error_kind, request_id, origin, run, \
                       method, path, activation_us, instance_start_us";

fn record_of(r: sqlx::postgres::PgRow) -> Invocation {
    Invocation {
        id: r.get("id"),
        namespace: r.get("namespace"),
        function: r.get("function"),
        version: r.get::<Option<i32>, _>("version").map(|v| v as u32),
        started_at: r.get("started_at"),
        duration: Duration::from_micros(r.get::<i64, _>("duration_us").max(0) as u64),
        status: r.get::<i16, _>("status") as u16,
        bytes_in: r.get::<i64, _>("bytes_in").max(0) as u64,
        bytes_out: r.get::<i64, _>("bytes_out").max(0) as u64,
        cold: r.get("cold"),
        error: r.get("error"),
        error_kind: r.get("error_kind"),
        request_id: r.get("request_id"),
        origin: r.get("origin"),
        run: r.get("run"),
        method: r.get("method"),
        path: r.get("path"),
        activation: r
            .get::<Option<i64>, _>("activation_us")
            .map(|us| Duration::from_micros(us.max(0) as u64)),
        instance_start: r
            .get::<Option<i64>, _>("instance_start_us")
            .map(|us| Duration::from_micros(us.max(0) as u64)),
    }
}

/// Up to `limit` records of one function, newest first, starting after
/// `after` (the last record of the page before).
pub async fn page<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    function: &str,
    after: Option<Cursor>,
    limit: u32,
) -> Result<Vec<Invocation>> {
    let rows = match after {
        None => {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "select {COLUMNS} from invocations
                 where namespace = $1 and function = $2
                 order by started_at desc, id desc
                 limit $3"
            )))
            .bind(namespace)
            .bind(function)
            .bind(i64::from(limit))
            .fetch_all(exec)
            .await?
        }
        Some(c) => {
            sqlx::query(sqlx::AssertSqlSafe(format!(
                "select {COLUMNS} from invocations
                 where namespace = $1 and function = $2
                   and (started_at, id) < ($3, $4)
                 order by started_at desc, id desc
                 limit $5"
            )))
            .bind(namespace)
            .bind(function)
            .bind(c.started_at)
            .bind(c.id)
            .bind(i64::from(limit))
            .fetch_all(exec)
            .await?
        }
    };
    Ok(rows.into_iter().map(record_of).collect())
}

/// One record of a function, by its id.
pub async fn one<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    function: &str,
    id: Uuid,
) -> Result<Option<Invocation>> {
    let row = sqlx::query(sqlx::AssertSqlSafe(format!(
        "select {COLUMNS} from invocations
         where id = $1 and namespace = $2 and function = $3"
    )))
    .bind(id)
    .bind(namespace)
    .bind(function)
    .fetch_optional(exec)
    .await?;
    Ok(row.map(record_of))
}

/// How many calls a function had since a time, and how many of them failed
/// (a 5xx answer, or none).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Counts {
    pub function: String,
    pub calls: i64,
    pub errors: i64,
}

/// The calls of the functions `names` of a namespace since `since`.
pub async fn counts_since<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    names: &[String],
    since: DateTime<Utc>,
) -> Result<Vec<Counts>> {
    let rows = sqlx::query(
        "select function, count(*) as calls,
                count(*) filter (where status >= 500 or error is not null) as errors
         from invocations where namespace = $1 and function = any($2) and started_at >= $3
         group by function",
    )
    .bind(namespace)
    .bind(names)
    .bind(since)
    .fetch_all(exec)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Counts {
            function: r.get("function"),
            calls: r.get("calls"),
            errors: r.get("errors"),
        })
        .collect())
}

/// Deletes up to `limit` records that started before `before` (to the
/// millisecond), oldest first; returns how many went. Walks the primary key
/// from its low end: the cost is the rows deleted, not the table.
pub async fn delete_started_before<'e>(
    exec: impl PgExecutor<'e>,
    before: DateTime<Utc>,
    limit: u32,
) -> Result<u64> {
    let done = sqlx::query(
        "delete from invocations
         where id in (select id from invocations where id < $1 order by id limit $2)",
    )
    .bind(first_id_at(before))
    .bind(i64::from(limit))
    .execute(exec)
    .await?;
    Ok(done.rows_affected())
}

/// Deletes, for each of the given functions, its records beyond the newest
/// `keep`, at most `limit` per function; returns the (namespace, function,
/// deleted) of those that lost any. A function whose count equals `limit`
/// may have more to lose. Each function costs an index range scan of
/// `keep` entries plus the rows deleted.
pub async fn trim_functions<'e>(
    exec: impl PgExecutor<'e>,
    functions: &[(String, String)],
    keep: u32,
    limit: u32,
) -> Result<Vec<(String, String, u64)>> {
    let namespaces: Vec<&str> = functions.iter().map(|(ns, _)| ns.as_str()).collect();
    let names: Vec<&str> = functions.iter().map(|(_, f)| f.as_str()).collect();
    let rows = sqlx::query(
        "with f as (
           select * from unnest($1::text[], $2::text[]) as f(namespace, function)
         ),
         oldest_kept as (
           select f.namespace, f.function, k.started_at, k.id
           from f cross join lateral (
             select i.started_at, i.id from invocations i
             where i.namespace = f.namespace and i.function = f.function
             order by i.started_at desc, i.id desc
             offset $3 - 1 limit 1
           ) k
         ),
         doomed as (
           select d.id
           from oldest_kept o cross join lateral (
             select i.id from invocations i
             where i.namespace = o.namespace and i.function = o.function
               and (i.started_at, i.id) < (o.started_at, o.id)
             order by i.started_at, i.id
             limit $4
           ) d
         ),
         gone as (
           delete from invocations where id in (select id from doomed)
           returning namespace, function
         )
         select namespace, function, count(*) as n from gone group by namespace, function",
    )
    .bind(namespaces)
    .bind(names)
    .bind(i64::from(keep.max(1)))
    .bind(i64::from(limit))
    .fetch_all(exec)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.get("namespace"),
                r.get("function"),
                r.get::<i64, _>("n") as u64,
            )
        })
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_order_as_start_times_and_the_age_bound_sits_between_milliseconds() {
        let t0 = DateTime::from_timestamp_millis(1_800_000_000_123).unwrap();
        let t1 = t0 + chrono::Duration::milliseconds(1);
        let (a, b) = (id_for(t0), id_for(t1));
        assert!(a < b);
        assert_eq!(a.get_version_num(), 7);
        assert!(
            first_id_at(t1) > a,
            "a record of the millisecond before is older"
        );
        assert!(first_id_at(t1) <= b, "a record of that millisecond is not");
    }

    #[test]
    fn a_cursor_survives_its_token_and_garbage_is_no_cursor() {
        let started_at = DateTime::from_timestamp_micros(1_800_000_000_123_456).unwrap();
        let c = Cursor {
            started_at,
            id: id_for(started_at),
        };
        let token = c.encode();
        assert_eq!(token.len(), 48);
        assert_eq!(Cursor::decode(&token), Some(c));
        let other_time = format!("{:016x}{}", 1_800_000_000_999_456u64, &token[16..]);
        let not_v7 = format!("{}{}", &token[..16], Uuid::new_v4().simple());
        for bad in [
            String::new(),
            "abc".to_owned(),
            "z".repeat(48),
            "0".repeat(47),
            "f".repeat(48),
            token.to_uppercase(),
            format!("{token}0"),
            other_time,
            not_v7,
            "é".repeat(24),
        ] {
            assert_eq!(Cursor::decode(&bad), None, "{bad:?}");
        }
    }
}
