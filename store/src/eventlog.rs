//! The append-only event log.
//!
//! Appending: one stream per transaction. `append` first takes a
//! transaction-scoped advisory lock on the stream, before any statement that
//! assigns a transaction id, then checks the expected version. The next
//! append to the same stream waits for the lock, so it gets its xid only
//! after this one commits: a stream's versions come out in xid order.
//!
//! Reading in order (`read_committed_batch`): a reader takes the watermark
//! `pg_snapshot_xmin(pg_current_snapshot())` first, reads only events whose
//! xid is below it, in (xid, position) order, and checkpoints on that pair.
//! An event whose transaction commits after a later position's is therefore
//! not skipped: it is held back until its transaction has ended.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sless_domain::{Function, FunctionEvent, FunctionKey};
use sqlx::{AssertSqlSafe, PgConnection, PgExecutor, Row};

use crate::{Error, Result};

/// Who caused an event and in answer to what.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Metadata {
    /// The token subject that asked, or `system:<role>` for sless itself.
    pub actor: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub request_id: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub correlation_id: Option<String>,
    /// Position of the event this one answers, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub causation_id: Option<String>,
    /// W3C trace context of the request.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub traceparent: Option<String>,
}

/// An event about to be appended.
#[derive(Debug, Clone)]
pub struct NewEvent {
    pub event_type: String,
    pub namespace: String,
    pub data: serde_json::Value,
    pub metadata: Metadata,
}

impl NewEvent {
    /// A function's event, ready to append to its stream.
    pub fn function(key: &FunctionKey, event: &FunctionEvent, metadata: Metadata) -> NewEvent {
        NewEvent {
            event_type: event.type_name().to_owned(),
            namespace: key.namespace.to_string(),
            data: event.data(),
            metadata,
        }
    }
}

impl Metadata {
    /// Metadata of an event sless itself records while working on a work item.
    pub fn system(role: &str, work_item: i64) -> Metadata {
        Metadata {
            actor: format!("system:{role}"),
            correlation_id: Some(format!("work-{work_item}")),
            ..Default::default()
        }
    }
}

/// An event as the log holds it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct RecordedEvent {
    pub position: i64,
    pub xid: i64,
    pub stream: String,
    pub version: i64,
    pub event_type: String,
    pub namespace: String,
    pub data: serde_json::Value,
    pub metadata: serde_json::Value,
    pub recorded_at: DateTime<Utc>,
}

/// What an append wrote.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Appended {
    /// The stream's version after the append.
    pub version: u64,
    /// Global position of the last event written (0 when nothing was).
    pub position: i64,
}

/// Where a reader has read up to: the (xid, position) of the last event it applied.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Checkpoint {
    pub xid: i64,
    pub position: i64,
}

/// The advisory-lock key of a stream: the first 8 bytes of its sha256.
fn stream_lock_key(stream: &str) -> i64 {
    let d = Sha256::digest(stream.as_bytes());
    i64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// Appends events to one stream, expecting it to be at `expected` (0 for a
/// new stream). Must be the first write of the caller's transaction; the
/// events are committed when the caller commits. A concurrent append that
/// got there first makes this one fail with `Error::Conflict`.
pub async fn append(
    conn: &mut PgConnection,
    stream: &str,
    expected: u64,
    events: &[NewEvent],
) -> Result<Appended> {
    let fresh: bool = sqlx::query_scalar(
        "select pg_current_xact_id_if_assigned() is null from (select pg_advisory_xact_lock($1)) lock",
    )
    .bind(stream_lock_key(stream))
    .fetch_one(&mut *conn)
    .await?;
    if !fresh {
        // Another write came first: the stream lock would no longer order this
        // transaction's xid behind the previous append's commit.
        return Err(Error::Internal(format!(
            "append to {stream} must be the first write of its transaction"
        )));
    }
    let actual: i64 = sqlx::query_scalar(
        "select coalesce(max(version), 0)::bigint from events where stream = $1",
    )
    .bind(stream)
    .fetch_one(&mut *conn)
    .await?;
    let actual = actual as u64;
    if actual != expected {
        return Err(Error::Conflict {
            stream: stream.to_owned(),
            expected,
            actual,
        });
    }
    if events.is_empty() {
        return Ok(Appended {
            version: actual,
            position: 0,
        });
    }
    let n = events.len();
    let versions: Vec<i32> = (1..=n).map(|i| (expected as usize + i) as i32).collect();
    let types: Vec<&str> = events.iter().map(|e| e.event_type.as_str()).collect();
    let namespaces: Vec<&str> = events.iter().map(|e| e.namespace.as_str()).collect();
    let data: Vec<serde_json::Value> = events.iter().map(|e| e.data.clone()).collect();
    let metadata: Vec<serde_json::Value> = events
        .iter()
        .map(|e| serde_json::to_value(&e.metadata).expect("metadata serializes"))
        .collect();
    let position: i64 = sqlx::query_scalar(
        "with written as (
             insert into events (stream, version, type, namespace, data, metadata)
             select $1, v, t, ns, d, m
             from unnest($2::int[], $3::text[], $4::text[], $5::jsonb[], $6::jsonb[])
                  with ordinality as x(v, t, ns, d, m, ord)
             order by ord
             returning position
         )
         select max(position) from written",
    )
    .bind(stream)
    .bind(&versions)
    .bind(&types)
    .bind(&namespaces)
    .bind(&data)
    .bind(&metadata)
    .fetch_one(&mut *conn)
    .await?;
    sqlx::query("select pg_notify('sless_events', '')")
        .execute(&mut *conn)
        .await?;
    Ok(Appended {
        version: expected + n as u64,
        position,
    })
}

fn recorded(row: sqlx::postgres::PgRow) -> RecordedEvent {
    RecordedEvent {
        position: row.get("position"),
        xid: row.get("xid"),
        stream: row.get("stream"),
        version: row.get::<i32, _>("version") as i64,
        event_type: row.get("type"),
        namespace: row.get("namespace"),
        data: row.get("data"),
        metadata: row.get("metadata"),
        recorded_at: row.get("recorded_at"),
    }
}

const COLUMNS: &str =
    "position, xid, stream, version, type, namespace, data, metadata, recorded_at";

/// Every event of one stream, in version order.
pub async fn read_stream<'e>(
    exec: impl PgExecutor<'e>,
    stream: &str,
) -> Result<Vec<RecordedEvent>> {
    let rows = sqlx::query(AssertSqlSafe(format!(
        "select {COLUMNS} from events where stream = $1 order by version"
    )))
    .bind(stream)
    .fetch_all(exec)
    .await?;
    Ok(rows.into_iter().map(recorded).collect())
}

/// A function's state: a fold over its whole stream (the source of truth
/// for deciding commands). A function that never existed folds to the default.
pub async fn load_function<'e>(exec: impl PgExecutor<'e>, key: &FunctionKey) -> Result<Function> {
    let events = read_stream(exec, &key.stream()).await?;
    let mut state = Function::default();
    for e in &events {
        let event = FunctionEvent::from_stored(&e.event_type, &e.data).map_err(|err| {
            Error::Internal(format!(
                "event {} ({}) cannot be read: {err}",
                e.position, e.event_type
            ))
        })?;
        state = state.evolve(&event);
    }
    Ok(state)
}

/// The transaction-id watermark: every transaction with a smaller id has
/// ended. Take it before a reader's own writes.
pub async fn watermark(conn: &mut PgConnection) -> Result<i64> {
    Ok(
        sqlx::query_scalar("select pg_snapshot_xmin(pg_current_snapshot())::text::bigint")
            .fetch_one(conn)
            .await?,
    )
}

/// Up to `limit` events after `after` whose transactions ended before
/// `watermark`, in (xid, position) order. Never skips a committed event.
pub async fn read_committed_batch(
    conn: &mut PgConnection,
    after: Checkpoint,
    watermark: i64,
    limit: i64,
) -> Result<Vec<RecordedEvent>> {
    let rows = sqlx::query(AssertSqlSafe(format!(
        "select {COLUMNS} from events
         where (xid, position) > ($1, $2) and xid < $3
         order by xid, position
         limit $4"
    )))
    .bind(after.xid)
    .bind(after.position)
    .bind(watermark)
    .bind(limit)
    .fetch_all(conn)
    .await?;
    Ok(rows.into_iter().map(recorded).collect())
}

/// True when some event after `after` is still held back by the watermark
/// (its transaction, or an older one, is still running).
pub async fn has_events_beyond(conn: &mut PgConnection, after: Checkpoint) -> Result<bool> {
    Ok(
        sqlx::query_scalar("select exists (select 1 from events where (xid, position) > ($1, $2))")
            .bind(after.xid)
            .bind(after.position)
            .fetch_one(conn)
            .await?,
    )
}

/// Reads a reader's checkpoint, locking its row for the rest of the
/// transaction so two copies of one projector never apply the same batch.
pub async fn lock_checkpoint(conn: &mut PgConnection, name: &str) -> Result<Checkpoint> {
    sqlx::query("insert into projector_checkpoints (name) values ($1) on conflict do nothing")
        .bind(name)
        .execute(&mut *conn)
        .await?;
    let row =
        sqlx::query("select xid, position from projector_checkpoints where name = $1 for update")
            .bind(name)
            .fetch_one(&mut *conn)
            .await?;
    Ok(Checkpoint {
        xid: row.get("xid"),
        position: row.get("position"),
    })
}

/// Moves a reader's checkpoint; call in the transaction that applied the events.
pub async fn save_checkpoint(conn: &mut PgConnection, name: &str, at: Checkpoint) -> Result<()> {
    sqlx::query("update projector_checkpoints set xid = $2, position = $3, updated_at = now() where name = $1")
        .bind(name)
        .bind(at.xid)
        .bind(at.position)
        .execute(conn)
        .await?;
    Ok(())
}
