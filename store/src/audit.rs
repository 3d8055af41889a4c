//! The audit log: the event log read by namespace, stream, type, actor and
//! time, one page at a time, and tailed live without skipping an event.
//!
//! Statements are built with sea-query from a `Filter`; every value a
//! caller gives is a bound parameter, never part of the SQL text. The only
//! text the builder adds besides identifiers is the constant expressions of
//! `ACTOR` and `REQUEST_ID`.
//!
//! Pages (`page`) are read in position order, newest or oldest first, and a
//! page ends where the next one starts (`PageCursor`, the position of its
//! last entry). A page is what had committed when it was read: an append
//! whose transaction commits later can still take a position before a
//! cursor already handed out. The tail (`tail`) has no such window: like the
//! projector (see `eventlog`), it reads only events whose transaction is
//! below the watermark, in (xid, position) order, and resumes from an
//! (xid, position) pair.
//!
//! Indexes (migrations `..._event_log` and `..._events_audit_index`): a
//! namespace's newest events walk `(namespace, position)`; with one type,
//! `(namespace, type, position)`; with an actor,
//! `(namespace, (metadata->>'actor'), position)`; a stream's events come
//! from `(stream, version)`; the tail walks `(xid, position)`.

use chrono::{DateTime, Utc};
use sea_query::{Expr, ExprTrait, Order as SqlOrder, PostgresQueryBuilder, Query, SelectStatement};
use sea_query::{Value, Values};
use sqlx::postgres::{PgArguments, PgRow};
use sqlx::{AssertSqlSafe, PgConnection, PgExecutor, Postgres, Row};

use crate::eventlog::{self, Checkpoint};
use crate::{Error, Result};

/// The actor of an event, as the expression index on it spells it.
const ACTOR: &str = r#""metadata" ->> 'actor'"#;
/// The request id of an event.
const REQUEST_ID: &str = r#""metadata" ->> 'request_id'"#;

/// Which events a reader wants; every filter that is set must match.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filter {
    /// One namespace; None for all (admins only).
    pub namespace: Option<String>,
    /// One stream, exactly (`function/{ns}/{name}`).
    pub stream: Option<String>,
    /// Any of these types; empty for every type.
    pub types: Vec<String>,
    /// The actor: a token's `sub`, or `system:<role>`.
    pub actor: Option<String>,
    /// Recorded at or after.
    pub since: Option<DateTime<Utc>>,
    /// Recorded before.
    pub until: Option<DateTime<Utc>>,
}

/// Which end of the log a page starts from.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Order {
    #[default]
    Newest,
    Oldest,
}

impl Order {
    pub fn parse(s: &str) -> Option<Order> {
        match s {
            "newest" => Some(Order::Newest),
            "oldest" => Some(Order::Oldest),
            _ => None,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Order::Newest => "newest",
            Order::Oldest => "oldest",
        }
    }
}

/// One event as the audit log shows it.
#[derive(Debug, Clone, PartialEq)]
pub struct Entry {
    pub position: i64,
    pub xid: i64,
    pub stream: String,
    pub version: i64,
    pub event_type: String,
    pub namespace: String,
    pub actor: Option<String>,
    pub request_id: Option<String>,
    pub recorded_at: DateTime<Utc>,
    pub data: serde_json::Value,
}

impl Entry {
    /// Where a tail resumes after this entry.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            xid: self.xid,
            position: self.position,
        }
    }
}

/// Where a page ends: the next page starts after `position`, in `order`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PageCursor {
    pub order: Order,
    pub position: i64,
}

impl PageCursor {
    /// An opaque token for clients: `n` or `o` and 16 hex digits.
    pub fn encode(&self) -> String {
        let o = match self.order {
            Order::Newest => 'n',
            Order::Oldest => 'o',
        };
        format!("{o}{:016x}", self.position)
    }

    /// The cursor a token stands for; None when `encode` did not make it.
    pub fn decode(token: &str) -> Option<PageCursor> {
        let order = match token.get(..1)? {
            "n" => Order::Newest,
            "o" => Order::Oldest,
            _ => return None,
        };
        let position = i64::try_from(u64::from_str_radix(token.get(1..)?, 16).ok()?).ok()?;
        let c = PageCursor { order, position };
        (c.encode() == token).then_some(c)
    }
}

/// A tail's resume point as an opaque token (an SSE event id): 32 hex
/// digits, the xid and the position.
pub fn encode_checkpoint(c: Checkpoint) -> String {
    format!("{:016x}{:016x}", c.xid, c.position)
}

/// The checkpoint a token stands for; None when `encode_checkpoint` did not
/// make it.
pub fn decode_checkpoint(token: &str) -> Option<Checkpoint> {
    let field =
        |s: Option<&str>| -> Option<i64> { i64::try_from(u64::from_str_radix(s?, 16).ok()?).ok() };
    let c = Checkpoint {
        xid: field(token.get(..16))?,
        position: field(token.get(16..))?,
    };
    (encode_checkpoint(c) == token).then_some(c)
}

/// A statement as sea-query built it: the SQL text and its values, in
/// placeholder order.
#[derive(Debug, Clone)]
pub struct Statement {
    pub sql: String,
    pub values: Values,
}

impl Statement {
    fn of(select: &SelectStatement) -> Statement {
        let (sql, values) = select.build(PostgresQueryBuilder);
        Statement { sql, values }
    }

    /// The statement with its values bound. `prefix` goes before the SQL
    /// (`explain ...`).
    fn bound(&self, prefix: &str) -> Result<sqlx::query::Query<'static, Postgres, PgArguments>> {
        let mut q = sqlx::query(AssertSqlSafe(format!("{prefix}{}", self.sql)));
        for v in &self.values.0 {
            q = match v {
                Value::String(Some(s)) => q.bind(s.clone()),
                Value::BigInt(Some(n)) => q.bind(*n),
                Value::Int(Some(n)) => q.bind(*n),
                Value::BigUnsigned(Some(n)) => q.bind(i64::try_from(*n).map_err(|_| {
                    Error::Internal(format!("an audit query value is out of range: {n}"))
                })?),
                Value::ChronoDateTimeUtc(Some(t)) => q.bind(*t),
                other => {
                    return Err(Error::Internal(format!(
                        "an audit query has a value of a kind it never binds: {other:?}"
                    )));
                }
            };
        }
        Ok(q)
    }
}

/// The columns of an `Entry`, from `events` filtered by `filter`.
fn select(filter: &Filter) -> SelectStatement {
    let mut q = Query::select();
    q.columns([
        "position",
        "xid",
        "stream",
        "version",
        "type",
        "namespace",
        "data",
        "recorded_at",
    ])
    .expr_as(Expr::cust(ACTOR), "actor")
    .expr_as(Expr::cust(REQUEST_ID), "request_id")
    .from("events");
    if let Some(ns) = &filter.namespace {
        q.and_where(Expr::col("namespace").eq(ns.as_str()));
    }
    if let Some(stream) = &filter.stream {
        q.and_where(Expr::col("stream").eq(stream.as_str()));
    }
    match filter.types.as_slice() {
        [] => {}
        [one] => {
            q.and_where(Expr::col("type").eq(one.as_str()));
        }
        many => {
            q.and_where(Expr::col("type").is_in(many.iter().map(String::as_str)));
        }
    }
    if let Some(actor) = &filter.actor {
        q.and_where(Expr::cust(ACTOR).eq(actor.as_str()));
    }
    if let Some(since) = filter.since {
        q.and_where(Expr::col("recorded_at").gte(since));
    }
    if let Some(until) = filter.until {
        q.and_where(Expr::col("recorded_at").lt(until));
    }
    q
}

/// The statement `page` runs: up to `limit` entries after `after`, in
/// position order.
pub fn page_statement(filter: &Filter, order: Order, after: Option<i64>, limit: u32) -> Statement {
    let mut q = select(filter);
    match (order, after) {
        (Order::Newest, Some(p)) => {
            q.and_where(Expr::col("position").lt(p));
        }
        (Order::Oldest, Some(p)) => {
            q.and_where(Expr::col("position").gt(p));
        }
        (_, None) => {}
    }
    let direction = match order {
        Order::Newest => SqlOrder::Desc,
        Order::Oldest => SqlOrder::Asc,
    };
    q.order_by("position", direction).limit(u64::from(limit));
    Statement::of(&q)
}

/// Up to `limit` entries that match `filter`, after the entry at position
/// `after` (exclusive) in `order`.
pub async fn page<'e>(
    exec: impl PgExecutor<'e>,
    filter: &Filter,
    order: Order,
    after: Option<i64>,
    limit: u32,
) -> Result<Vec<Entry>> {
    // Bound first: sea-query's values are not `Send`, so none may live
    // across an await.
    let query = page_statement(filter, order, after, limit).bound("")?;
    let rows = query.fetch_all(exec).await?;
    Ok(rows.into_iter().map(entry).collect())
}

/// The statement `tail` runs: up to `limit` entries after `after` whose
/// transactions are below `watermark`, in (xid, position) order.
pub fn tail_statement(filter: &Filter, after: Checkpoint, watermark: i64, limit: u32) -> Statement {
    let mut q = select(filter);
    q.and_where(
        Expr::tuple([Expr::col("xid"), Expr::col("position")]).gt(Expr::tuple([
            Expr::val(after.xid),
            Expr::val(after.position),
        ])),
    )
    .and_where(Expr::col("xid").lt(watermark))
    .order_by("xid", SqlOrder::Asc)
    .order_by("position", SqlOrder::Asc)
    .limit(u64::from(limit));
    Statement::of(&q)
}

/// What one read of the tail found.
#[derive(Debug, Clone, PartialEq)]
pub struct Tail {
    pub entries: Vec<Entry>,
    /// Where the next read starts. Past the last entry, and past every
    /// event below the watermark when the read was not cut by its limit:
    /// events that did not match need not be read again.
    pub next: Checkpoint,
}

/// Where a tail that starts now begins: after every event whose
/// transaction has ended below the watermark. Events of transactions still
/// running, or that ended above it, are still to come.
pub async fn tail_start(conn: &mut PgConnection) -> Result<Checkpoint> {
    let watermark = eventlog::watermark(conn).await?;
    Ok(below(watermark))
}

/// The checkpoint just past every event with an xid below `watermark`.
fn below(watermark: i64) -> Checkpoint {
    Checkpoint {
        xid: watermark - 1,
        position: i64::MAX,
    }
}

/// The next entries of a tail after `after`, in (xid, position) order:
/// only events whose transactions have ended below the watermark, so an
/// event that commits late is read late, never skipped.
pub async fn tail(
    conn: &mut PgConnection,
    filter: &Filter,
    after: Checkpoint,
    limit: u32,
) -> Result<Tail> {
    // The watermark first: every transaction below it has ended, so the
    // read's own (later) snapshot sees all of their events.
    let watermark = eventlog::watermark(conn).await?;
    let query = tail_statement(filter, after, watermark, limit).bound("")?;
    let rows = query.fetch_all(&mut *conn).await?;
    let entries: Vec<Entry> = rows.into_iter().map(entry).collect();
    let next = match entries.last() {
        Some(last) if entries.len() >= limit as usize => last.checkpoint(),
        _ => after.max(below(watermark)),
    };
    Ok(Tail { entries, next })
}

/// `EXPLAIN (ANALYZE, FORMAT JSON)` of `statement` with its values: the
/// plan the database chose and what running it took.
pub async fn explain<'e>(
    exec: impl PgExecutor<'e>,
    statement: &Statement,
) -> Result<serde_json::Value> {
    let query = statement.bound("explain (analyze, buffers, format json) ")?;
    let row = query.fetch_one(exec).await?;
    Ok(row.try_get(0)?)
}

fn entry(row: PgRow) -> Entry {
    Entry {
        position: row.get("position"),
        xid: row.get("xid"),
        stream: row.get("stream"),
        version: row.get::<i32, _>("version").into(),
        event_type: row.get("type"),
        namespace: row.get("namespace"),
        actor: row.get("actor"),
        request_id: row.get("request_id"),
        recorded_at: row.get("recorded_at"),
        data: row.get("data"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn user_values_are_bound_never_written_into_the_sql() {
        let hostile = "x' or '1'='1";
        let filter = Filter {
            namespace: Some(hostile.into()),
            stream: Some(hostile.into()),
            types: vec![hostile.into(), "FunctionDeleted".into()],
            actor: Some(hostile.into()),
            since: Some(DateTime::UNIX_EPOCH),
            until: Some(Utc::now()),
        };
        let s = page_statement(&filter, Order::Newest, Some(7), 100);
        assert!(!s.sql.contains(hostile), "{}", s.sql);
        assert!(!s.sql.contains("FunctionDeleted"), "{}", s.sql);
        // namespace, stream, two types, actor, since, until, after, limit.
        assert_eq!(s.values.0.len(), 9, "{:?}", s.values);
        assert!(
            s.sql.contains(r#"("metadata" ->> 'actor') = $5"#),
            "{}",
            s.sql
        );
        assert!(
            s.sql.ends_with(r#"ORDER BY "position" DESC LIMIT $9"#),
            "{}",
            s.sql
        );

        let t = tail_statement(
            &filter,
            Checkpoint {
                xid: 5,
                position: 9,
            },
            11,
            50,
        );
        assert!(!t.sql.contains(hostile), "{}", t.sql);
        assert!(
            t.sql.contains(r#"("xid", "position") > ($8, $9)"#),
            "{}",
            t.sql
        );
        assert!(
            t.sql
                .ends_with(r#"ORDER BY "xid" ASC, "position" ASC LIMIT $11"#),
            "{}",
            t.sql
        );
    }

    #[test]
    fn one_type_is_an_equality_and_no_filter_is_no_condition() {
        let one = Filter {
            types: vec!["FunctionUploaded".into()],
            ..Filter::default()
        };
        let s = page_statement(&one, Order::Oldest, None, 10);
        assert!(s.sql.contains(r#""type" = $1"#), "{}", s.sql);
        assert!(
            s.sql.ends_with(r#"ORDER BY "position" ASC LIMIT $2"#),
            "{}",
            s.sql
        );
        let none = page_statement(&Filter::default(), Order::Newest, None, 10);
        assert!(!none.sql.contains("WHERE"), "{}", none.sql);
    }

    #[test]
    fn cursors_decode_only_what_encode_made() {
        for c in [
            PageCursor {
                order: Order::Newest,
                position: 1,
            },
            PageCursor {
                order: Order::Oldest,
                position: i64::MAX,
            },
        ] {
            assert_eq!(PageCursor::decode(&c.encode()), Some(c));
        }
        for bad in [
            "",
            "n",
            "x0000000000000001",
            "n000000000000001",
            "n00000000000000001",
            "N0000000000000001",
            "n000000000000000A",
            "n8000000000000000",
            "n+000000000000001",
        ] {
            assert_eq!(PageCursor::decode(bad), None, "{bad:?}");
        }
        let c = Checkpoint {
            xid: 12345,
            position: i64::MAX,
        };
        assert_eq!(decode_checkpoint(&encode_checkpoint(c)), Some(c));
        for bad in [
            "",
            "0000000000003039",
            "00000000000030397fffffffffffffff0",
            "00000000000030398000000000000000",
            "000000000000303G7fffffffffffffff",
            "00000000000030397FFFFFFFFFFFFFFF",
        ] {
            assert_eq!(decode_checkpoint(bad), None, "{bad:?}");
        }
    }
}
