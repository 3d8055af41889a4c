//! What functions print (`function_logs`, migration `20261208000001`):
//! every line an instance, a job or a cron run wrote, with its time,
//! stream, process, version and, when the runtime wrapper marked it, the
//! invocation record of the call it was printed for.
//!
//! - **Writing** is batched (`insert`, one statement per batch). Every
//!   writer takes the transaction-scoped advisory lock `function_logs`
//!   before it draws ids and keeps it to its commit, so ids are given in
//!   commit order: a reader that sees a line sees every line with a smaller
//!   id. A tail that resumes after the last id it sent misses and repeats
//!   nothing. The batch NOTIFYs [`CHANNEL`] with the functions it wrote.
//! - **Days.** The table is partitioned by the day a line was read (UTC).
//!   `ensure_days` creates the partitions ahead; `drop_days_before` drops
//!   whole days past every namespace's retention; `delete_before` removes
//!   a namespace's lines past a shorter retention of its own, a bounded
//!   batch at a time.
//! - **Drops** (`add_drops`, `dropped`): lines not kept (over a function's
//!   budget, or while the writer could not keep up) are counted per
//!   function, never stored.
//! - **Reading** (`page`) is by function, filtered by time, invocation,
//!   stream and text, newest or oldest first, paged by id.

use chrono::{DateTime, Datelike, Days, NaiveDate, Utc};
use sqlx::{PgExecutor, PgPool, Postgres, QueryBuilder, Row};
use uuid::Uuid;

use crate::Result;

/// The channel a batch NOTIFYs, with `{namespace}/{function}` per line of
/// its payload (`*` when they would not fit).
pub const CHANNEL: &str = "sless_function_logs";

/// The most bytes of one line that are kept; a longer line is cut there
/// (at a character's boundary) and marked `truncated`.
pub const LINE_LIMIT: usize = 16 * 1024;

/// The most rows one page or one read of a tail returns.
pub const MAX_PAGE: u32 = 1000;

/// Which of a process's outputs a line came from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Stream {
    Stdout,
    Stderr,
}

impl Stream {
    pub fn as_str(self) -> &'static str {
        match self {
            Stream::Stdout => "stdout",
            Stream::Stderr => "stderr",
        }
    }

    pub fn parse(s: &str) -> Option<Stream> {
        match s {
            "stdout" => Some(Stream::Stdout),
            "stderr" => Some(Stream::Stderr),
            _ => None,
        }
    }

    fn code(self) -> i16 {
        match self {
            Stream::Stdout => 1,
            Stream::Stderr => 2,
        }
    }

    fn of_code(code: i16) -> Stream {
        if code == 2 {
            Stream::Stderr
        } else {
            Stream::Stdout
        }
    }
}

/// A line to keep.
#[derive(Debug, Clone, PartialEq)]
pub struct NewLine {
    pub at: DateTime<Utc>,
    pub namespace: String,
    pub function: String,
    pub version: Option<u32>,
    pub instance: String,
    pub invocation: Option<Uuid>,
    pub stream: Stream,
    pub line: String,
    pub truncated: bool,
}

impl NewLine {
    /// `text` cut to [`LINE_LIMIT`] bytes, at a character's boundary, and
    /// whether it was.
    pub fn cut(mut text: String) -> (String, bool) {
        if text.len() <= LINE_LIMIT {
            return (text, false);
        }
        let mut end = LINE_LIMIT;
        while !text.is_char_boundary(end) {
            end -= 1;
        }
        text.truncate(end);
        (text, true)
    }
}

/// A kept line.
#[derive(Debug, Clone, PartialEq)]
pub struct LogLine {
    pub id: i64,
    pub at: DateTime<Utc>,
    pub version: Option<u32>,
    pub instance: String,
    pub invocation: Option<Uuid>,
    pub stream: Stream,
    pub line: String,
    pub truncated: bool,
}

/// The NOTIFY payload of a batch: each function it wrote, once.
fn payload(lines: &[NewLine]) -> String {
    let mut names: Vec<String> = lines
        .iter()
        .map(|l| format!("{}/{}", l.namespace, l.function))
        .collect();
    names.sort_unstable();
    names.dedup();
    let joined = names.join("\n");
    // NOTIFY payloads are shorter than 8000 bytes.
    if joined.len() < 7000 {
        joined
    } else {
        "*".to_owned()
    }
}

/// Keeps `lines` in one transaction, with ids in commit order, and tells
/// the followers. Returns how many were written.
pub async fn insert(pool: &PgPool, lines: &[NewLine]) -> Result<u64> {
    if lines.is_empty() {
        return Ok(0);
    }
    let n = lines.len();
    let mut at = Vec::with_capacity(n);
    let mut namespaces = Vec::with_capacity(n);
    let mut functions = Vec::with_capacity(n);
    let mut versions = Vec::with_capacity(n);
    let mut instances = Vec::with_capacity(n);
    let mut invocations = Vec::with_capacity(n);
    let mut streams = Vec::with_capacity(n);
    let mut texts = Vec::with_capacity(n);
    let mut truncated = Vec::with_capacity(n);
    for l in lines {
        at.push(l.at);
        namespaces.push(l.namespace.as_str());
        functions.push(l.function.as_str());
        versions.push(l.version.map(|v| v as i32));
        instances.push(l.instance.as_str());
        invocations.push(l.invocation);
        streams.push(l.stream.code());
        // PostgreSQL's text holds no NUL.
        texts.push(l.line.replace('\0', "\u{fffd}"));
        truncated.push(l.truncated);
    }
    let mut tx = pool.begin().await?;
    sqlx::query("select pg_advisory_xact_lock(hashtext('function_logs'))")
        .execute(&mut *tx)
        .await?;
    let done = sqlx::query(
        "insert into function_logs
           (id, at, namespace, function, version, instance, invocation, stream, line, truncated)
         select nextval('function_logs_id'), * from unnest(
           $1::timestamptz[], $2::text[], $3::text[], $4::int4[], $5::text[],
           $6::uuid[], $7::int2[], $8::text[], $9::bool[])",
    )
    .bind(at)
    .bind(namespaces)
    .bind(functions)
    .bind(versions)
    .bind(instances)
    .bind(invocations)
    .bind(streams)
    .bind(texts)
    .bind(truncated)
    .execute(&mut *tx)
    .await?;
    sqlx::query("select pg_notify($1, $2)")
        .bind(CHANNEL)
        .bind(payload(lines))
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(done.rows_affected())
}

/// The name of `day`'s partition.
fn partition(day: NaiveDate) -> String {
    format!(
        "function_logs_{:04}{:02}{:02}",
        day.year(),
        day.month(),
        day.day()
    )
}

/// Makes sure the partitions of `from` and the `days - 1` days after it
/// exist. A day's lines that went to the default partition before its own
/// existed move into it.
pub async fn ensure_days(pool: &PgPool, from: NaiveDate, days: u32) -> Result<()> {
    for i in 0..u64::from(days) {
        let Some(day) = from.checked_add_days(Days::new(i)) else {
            break;
        };
        let Some(next) = day.succ_opt() else { break };
        let name = partition(day);
        let exists: bool = sqlx::query_scalar("select to_regclass($1) is not null")
            .bind(&name)
            .fetch_one(pool)
            .await?;
        if exists {
            continue;
        }
        let mut tx = pool.begin().await?;
        // Two workers at once: one creates it, the other waits and sees it.
        sqlx::query("select pg_advisory_xact_lock(hashtext('function_logs_days'))")
            .execute(&mut *tx)
            .await?;
        let exists: bool = sqlx::query_scalar("select to_regclass($1) is not null")
            .bind(&name)
            .fetch_one(&mut *tx)
            .await?;
        if exists {
            continue;
        }
        let (lo, hi) = (day.to_string(), next.to_string());
        for statement in [
            format!("create table {name} (like function_logs including defaults)"),
            format!(
                "insert into {name} select * from function_logs_default
                  where at >= '{lo}' and at < '{hi}'"
            ),
            format!("delete from function_logs_default where at >= '{lo}' and at < '{hi}'"),
            format!(
                "alter table function_logs attach partition {name}
                   for values from ('{lo}') to ('{hi}')"
            ),
        ] {
            // Only a partition name and dates this module made.
            sqlx::query(sqlx::AssertSqlSafe(statement))
                .execute(&mut *tx)
                .await?;
        }
        tx.commit().await?;
    }
    Ok(())
}

/// The days that have a partition, oldest first.
pub async fn days(exec: impl PgExecutor<'_>) -> Result<Vec<NaiveDate>> {
    let names: Vec<String> = sqlx::query_scalar(
        "select c.relname::text from pg_inherits i
           join pg_class c on c.oid = i.inhrelid
          where i.inhparent = 'function_logs'::regclass",
    )
    .fetch_all(exec)
    .await?;
    let mut days: Vec<NaiveDate> = names
        .iter()
        .filter_map(|n| NaiveDate::parse_from_str(n.strip_prefix("function_logs_")?, "%Y%m%d").ok())
        .collect();
    days.sort_unstable();
    Ok(days)
}

/// Drops every day's partition before `cutoff`, and the default
/// partition's lines read before it. Returns the days dropped.
pub async fn drop_days_before(pool: &PgPool, cutoff: NaiveDate) -> Result<Vec<NaiveDate>> {
    let mut dropped = Vec::new();
    for day in days(pool).await? {
        if day >= cutoff {
            break;
        }
        let drop = format!("drop table if exists {}", partition(day));
        sqlx::query(sqlx::AssertSqlSafe(drop)).execute(pool).await?;
        dropped.push(day);
    }
    let cutoff = cutoff.and_hms_opt(0, 0, 0).map(|t| t.and_utc());
    sqlx::query("delete from function_logs_default where at < $1")
        .bind(cutoff)
        .execute(pool)
        .await?;
    Ok(dropped)
}

/// Deletes at most `batch` of `namespace`'s lines read before `before`;
/// how many it deleted (fewer than `batch`: none are left).
pub async fn delete_before(
    exec: impl PgExecutor<'_>,
    namespace: &str,
    before: DateTime<Utc>,
    batch: i64,
) -> Result<u64> {
    let done = sqlx::query(
        "delete from function_logs where id in (
           select id from function_logs where namespace = $1 and at < $2 limit $3)",
    )
    .bind(namespace)
    .bind(before)
    .bind(batch)
    .execute(exec)
    .await?;
    Ok(done.rows_affected())
}

/// The namespaces that have lines read before `before`.
pub async fn namespaces_with_lines_before(
    exec: impl PgExecutor<'_>,
    before: DateTime<Utc>,
) -> Result<Vec<String>> {
    Ok(
        sqlx::query_scalar("select distinct namespace from function_logs where at < $1")
            .bind(before)
            .fetch_all(exec)
            .await?,
    )
}

/// Counts `n` more lines of each function that were not kept.
pub async fn add_drops(exec: impl PgExecutor<'_>, drops: &[(String, String, u64)]) -> Result<()> {
    if drops.is_empty() {
        return Ok(());
    }
    let namespaces: Vec<&str> = drops.iter().map(|d| d.0.as_str()).collect();
    let functions: Vec<&str> = drops.iter().map(|d| d.1.as_str()).collect();
    let counts: Vec<i64> = drops
        .iter()
        .map(|d| i64::try_from(d.2).unwrap_or(i64::MAX))
        .collect();
    sqlx::query(
        "insert into function_log_drops (namespace, function, dropped)
         select * from unnest($1::text[], $2::text[], $3::int8[])
         on conflict (namespace, function) do update
           set dropped = function_log_drops.dropped + excluded.dropped, updated_at = now()",
    )
    .bind(namespaces)
    .bind(functions)
    .bind(counts)
    .execute(exec)
    .await?;
    Ok(())
}

/// How many of the function's lines were not kept, in all.
pub async fn dropped(exec: impl PgExecutor<'_>, namespace: &str, function: &str) -> Result<u64> {
    let n: Option<i64> = sqlx::query_scalar(
        "select dropped from function_log_drops where namespace = $1 and function = $2",
    )
    .bind(namespace)
    .bind(function)
    .fetch_optional(exec)
    .await?;
    Ok(n.unwrap_or(0).max(0) as u64)
}

/// Which lines of one function a read asks for.
#[derive(Debug, Clone, Default)]
pub struct Filter {
    pub namespace: String,
    pub function: String,
    pub since: Option<DateTime<Utc>>,
    pub until: Option<DateTime<Utc>>,
    pub invocation: Option<Uuid>,
    pub stream: Option<Stream>,
    /// Lines that contain this text, ignoring case.
    pub text: Option<String>,
    /// Only lines after this id (oldest first) or before it (newest first).
    pub cursor: Option<i64>,
    pub newest_first: bool,
    /// At most this many (capped at [`MAX_PAGE`]).
    pub limit: u32,
}

/// A page of the lines `filter` asks for, in its order.
pub async fn page(exec: impl PgExecutor<'_>, filter: &Filter) -> Result<Vec<LogLine>> {
    let mut q: QueryBuilder<Postgres> = QueryBuilder::new(
        "select id, at, version, instance, invocation, stream, line, truncated
           from function_logs where namespace = ",
    );
    q.push_bind(&filter.namespace);
    q.push(" and function = ");
    q.push_bind(&filter.function);
    if let Some(since) = filter.since {
        q.push(" and at >= ").push_bind(since);
    }
    if let Some(until) = filter.until {
        q.push(" and at < ").push_bind(until);
    }
    if let Some(invocation) = filter.invocation {
        q.push(" and invocation = ").push_bind(invocation);
    }
    if let Some(stream) = filter.stream {
        q.push(" and stream = ").push_bind(stream.code());
    }
    if let Some(text) = filter.text.as_deref().filter(|t| !t.is_empty()) {
        q.push(" and strpos(lower(line), lower(")
            .push_bind(text)
            .push(")) > 0");
    }
    let (compare, order) = if filter.newest_first {
        (" and id < ", " order by id desc limit ")
    } else {
        (" and id > ", " order by id limit ")
    };
    if let Some(cursor) = filter.cursor {
        q.push(compare).push_bind(cursor);
    }
    q.push(order)
        .push_bind(i64::from(filter.limit.clamp(1, MAX_PAGE)));
    let rows = q.build().fetch_all(exec).await?;
    Ok(rows
        .into_iter()
        .map(|r| LogLine {
            id: r.get("id"),
            at: r.get("at"),
            version: r.get::<Option<i32>, _>("version").map(|v| v as u32),
            instance: r.get("instance"),
            invocation: r.get("invocation"),
            stream: Stream::of_code(r.get("stream")),
            line: r.get("line"),
            truncated: r.get("truncated"),
        })
        .collect())
}

/// The id of the function's last kept line (0 when none): a tail that
/// starts now resumes after it.
pub async fn last_id(exec: impl PgExecutor<'_>, namespace: &str, function: &str) -> Result<i64> {
    let id: Option<i64> = sqlx::query_scalar(
        "select max(id) from function_logs where namespace = $1 and function = $2",
    )
    .bind(namespace)
    .bind(function)
    .fetch_one(exec)
    .await?;
    Ok(id.unwrap_or(0))
}

/// Today, by the database's clock: the day partitions are made from.
pub async fn today(exec: impl PgExecutor<'_>) -> Result<NaiveDate> {
    let now: DateTime<Utc> = sqlx::query_scalar("select now()").fetch_one(exec).await?;
    Ok(now.date_naive())
}

/// When the last kept line of one process's `stream` was read (`None`
/// when none is kept), looking only at lines read at or after `since`
/// (the process's start, less a margin): a follower of a process's
/// output that starts again resumes after it.
pub async fn last_at(
    exec: impl PgExecutor<'_>,
    namespace: &str,
    function: &str,
    instance: &str,
    stream: Stream,
    since: DateTime<Utc>,
) -> Result<Option<DateTime<Utc>>> {
    // Newest first along the function's index: a process's last line is
    // among the function's last ones; `since` spares the older days.
    let at: Option<DateTime<Utc>> = sqlx::query_scalar(
        "select at from function_logs
          where namespace = $1 and function = $2 and instance = $3 and stream = $4
            and at >= $5
          order by id desc
          limit 1",
    )
    .bind(namespace)
    .bind(function)
    .bind(instance)
    .bind(stream.code())
    .bind(since)
    .fetch_optional(exec)
    .await?;
    Ok(at)
}
