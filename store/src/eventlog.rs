//! The append-only event log.
//!
//! Appending: one stream per transaction. `append` first takes a
//! transaction-scoped advisory lock on the stream, before any statement that
//! assigns a transaction id, then checks the expected version. The next
//! append to the same stream waits for the lock, so it gets its xid only
//! after this one commits: a stream's versions come out in xid order. All of
//! it is one call of the database function `append_events`: one round trip.
//! Appends do not NOTIFY unless a projector sleeps (`DOORBELL`), so that
//! their commits can share WAL flushes.
//!
//! Reading in order (`read_committed_batch`, `read_committed_stored`): a
//! reader takes the watermark `pg_snapshot_xmin(pg_current_snapshot())`
//! first, reads only events whose xid is below it, in (xid, position) order,
//! and checkpoints on that pair. An event whose transaction commits after a
//! later position's is therefore not skipped: it is held back until its
//! transaction has ended.

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};
use sless_domain::job::JobEvent;
use sless_domain::trigger::TriggerEvent;
use sless_domain::{Aggregate, FunctionEvent, FunctionKey, Namespace};
use sqlx::{AssertSqlSafe, PgConnection, PgExecutor, Row};
use tracing::Instrument;

use crate::{Error, Result};

/// The checkpoint of the projector that keeps the read models.
pub const READ_MODELS: &str = "read_models";

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

    /// An event of any aggregate: its type name and `data` column.
    pub fn of(
        namespace: &Namespace,
        event_type: &str,
        data: serde_json::Value,
        metadata: Metadata,
    ) -> NewEvent {
        NewEvent {
            event_type: event_type.to_owned(),
            namespace: namespace.to_string(),
            data,
            metadata,
        }
    }

    /// A trigger's event.
    pub fn trigger(ns: &Namespace, event: &TriggerEvent, metadata: Metadata) -> NewEvent {
        NewEvent::of(ns, event.type_name(), event.data(), metadata)
    }

    /// A job's (or a cron run's) event.
    pub fn job(ns: &Namespace, event: &JobEvent, metadata: Metadata) -> NewEvent {
        NewEvent::of(ns, event.type_name(), event.data(), metadata)
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

    /// Metadata of an event sless itself records in answer to request
    /// `request_id` (a call that activates a function at zero).
    pub fn caused_by_request(role: &str, request_id: &str) -> Metadata {
        Metadata {
            actor: format!("system:{role}"),
            request_id: Some(request_id.to_owned()),
            correlation_id: Some(request_id.to_owned()),
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

/// The channel an append NOTIFYs when a projector sleeps at the doorbell.
pub const EVENTS_CHANNEL: &str = "sless_events";

/// The projector's doorbell: an advisory lock (the two-key form, which shares
/// no key with the streams' one-key locks). A projector with nothing left to
/// apply holds it exclusively while it sleeps; an append that cannot take it
/// shared NOTIFYs `EVENTS_CHANNEL`, and one that can holds it until it
/// commits. The same numbers are in the database function `append_events`.
pub const DOORBELL: (i32, i32) = (1_936_483_699, 1);

/// The advisory-lock key of a stream: the first 8 bytes of its sha256.
pub(crate) fn stream_lock_key(stream: &str) -> i64 {
    let d = Sha256::digest(stream.as_bytes());
    i64::from_be_bytes(d[..8].try_into().expect("8 bytes"))
}

/// Appends events to one stream, expecting it to be at `expected` (0 for a
/// new stream). Must be the first write of the caller's transaction; the
/// events are committed when the caller commits (run on a connection
/// outside a transaction, the append commits alone). A concurrent append
/// that got there first makes this one fail with `Error::Conflict`.
///
/// One round trip: the database function `append_events` (migrations
/// `20261129000011_append_in_one_call.sql`, `…13`, `20261205000001`) takes
/// the stream lock, checks that the transaction has no xid yet, checks the
/// version and inserts, in that order, and NOTIFYs `EVENTS_CHANNEL` if a
/// projector sleeps at the `DOORBELL`. (A command's append, work and
/// answer in one call: `crate::command`.)
pub async fn append(
    conn: &mut PgConnection,
    stream: &str,
    expected: u64,
    events: &[NewEvent],
) -> Result<Appended> {
    append_to(conn, stream, Some(expected), events).await
}

/// Appends events at the stream's version when the stream lock is taken,
/// whatever it is: for writes that do not depend on the stream's state.
/// They never conflict; the lock orders them.
pub async fn append_at_current(
    conn: &mut PgConnection,
    stream: &str,
    events: &[NewEvent],
) -> Result<Appended> {
    append_to(conn, stream, None, events).await
}

async fn append_to(
    conn: &mut PgConnection,
    stream: &str,
    expected: Option<u64>,
    events: &[NewEvent],
) -> Result<Appended> {
    let cols = Columns::of(events);
    let started = std::time::Instant::now();
    let (first_write, actual, position): (bool, Option<i64>, Option<i64>) = sqlx::query_as(
        "select first_write, actual, last_position from append_events($1, $2, $3, $4, $5, $6, $7)",
    )
    .bind(stream)
    .bind(stream_lock_key(stream))
    .bind(expected.map(|v| v as i64))
    .bind(&cols.types)
    .bind(&cols.namespaces)
    .bind(&cols.data)
    .bind(&cols.metadata)
    .fetch_one(&mut *conn)
    .instrument(append_span(stream, events.len()))
    .await?;
    outcome(
        stream,
        expected,
        events.is_empty(),
        started,
        (first_write, actual, position),
    )
}

/// The columns `append_events` takes. Each event's metadata records the
/// trace it was appended in, unless it names one.
pub(crate) struct Columns<'a> {
    pub types: Vec<&'a str>,
    pub namespaces: Vec<&'a str>,
    pub data: Vec<serde_json::Value>,
    pub metadata: Vec<serde_json::Value>,
}

impl<'a> Columns<'a> {
    pub fn of(events: &'a [NewEvent]) -> Columns<'a> {
        let trace = sless_telemetry::trace::current();
        Columns {
            types: events.iter().map(|e| e.event_type.as_str()).collect(),
            namespaces: events.iter().map(|e| e.namespace.as_str()).collect(),
            data: events.iter().map(|e| e.data.clone()).collect(),
            metadata: events
                .iter()
                .map(|e| match (&e.metadata.traceparent, &trace) {
                    (None, Some(t)) => {
                        let mut m = e.metadata.clone();
                        m.traceparent = Some(t.clone());
                        serde_json::to_value(&m)
                    }
                    _ => serde_json::to_value(&e.metadata),
                })
                .map(|m| m.expect("metadata serializes"))
                .collect(),
        }
    }
}

/// The span of one append (with traces on).
pub(crate) fn append_span(stream: &str, events: usize) -> tracing::Span {
    tracing::info_span!(
        target: sless_telemetry::trace::TARGET,
        "append",
        otel.kind = "client",
        db.system.name = "postgresql",
        stream,
        events,
    )
}

/// What `append_events` answered (`first_write`, `actual`, `last_position`),
/// as an append's result; counted in the metrics.
pub(crate) fn outcome(
    stream: &str,
    expected: Option<u64>,
    empty: bool,
    started: std::time::Instant,
    (first_write, actual, position): (bool, Option<i64>, Option<i64>),
) -> Result<Appended> {
    if !first_write {
        // Another write came first: the stream lock would no longer order this
        // transaction's xid behind the previous append's commit.
        return Err(Error::Internal(format!(
            "append to {stream} must be the first write of its transaction"
        )));
    }
    let actual = actual.unwrap_or_default() as u64;
    let unchanged = empty && expected.is_none_or(|e| e == actual);
    sless_telemetry::global().append(
        position.is_none() && !unchanged,
        started.elapsed().as_secs_f64(),
    );
    match position {
        Some(position) => Ok(Appended {
            version: actual,
            position,
        }),
        None if unchanged => Ok(Appended {
            version: actual,
            position: 0,
        }),
        None => Err(Error::Conflict {
            stream: stream.to_owned(),
            expected: expected.unwrap_or(actual),
            actual,
        }),
    }
}

/// The event of `row`; a column that does not decode (a number in `data`
/// that is no double, say) is an error of the read, not a panic of the
/// reader.
fn recorded(row: sqlx::postgres::PgRow) -> Result<RecordedEvent> {
    Ok(RecordedEvent {
        position: row.try_get("position")?,
        xid: row.try_get("xid")?,
        stream: row.try_get("stream")?,
        version: row.try_get::<i32, _>("version")? as i64,
        event_type: row.try_get("type")?,
        namespace: row.try_get("namespace")?,
        data: row.try_get("data")?,
        metadata: row.try_get("metadata")?,
        recorded_at: row.try_get("recorded_at")?,
    })
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
    rows.into_iter().map(recorded).collect()
}

/// An event of aggregate `A` read back from its stream, with when and
/// where the log recorded it.
#[derive(Debug, Clone)]
pub struct Loaded<E> {
    pub event: E,
    pub version: u64,
    pub position: i64,
    pub recorded_at: DateTime<Utc>,
}

/// The events of one stream of aggregate `A`, decoded, in version order.
pub async fn events_of<'e, A: Aggregate>(
    exec: impl PgExecutor<'e>,
    stream: &str,
) -> Result<Vec<Loaded<A::Event>>> {
    read_stream(exec, stream)
        .await?
        .iter()
        .map(decode::<A>)
        .collect()
}

/// An aggregate's state and stream version: a fold over its whole stream
/// (the source of truth for deciding commands). An instance that never
/// existed folds to the default, at version 0.
pub async fn load<'e, A: Aggregate>(exec: impl PgExecutor<'e>, stream: &str) -> Result<(A, u64)> {
    let state = events_of::<A>(exec, stream)
        .await?
        .iter()
        .fold(A::default(), |s, e| s.evolve(&e.event));
    let version = state.stream_version();
    Ok((state, version))
}

/// One stored event of `A`, decoded.
fn decode<A: Aggregate>(e: &RecordedEvent) -> Result<Loaded<A::Event>> {
    let event = A::decode(&e.event_type, &e.data).map_err(|err| {
        Error::Internal(format!(
            "event {} ({}) cannot be read as a {} event: {err}",
            e.position,
            e.event_type,
            A::KIND
        ))
    })?;
    Ok(Loaded {
        event,
        version: e.version as u64,
        position: e.position,
        recorded_at: e.recorded_at,
    })
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
    rows.into_iter().map(recorded).collect()
}

/// An event as a reader that decodes it itself reads it: `data` is the JSON
/// text the log holds (decoded once, straight into the reader's own types),
/// and of the metadata only the actor.
#[derive(Debug, Clone, PartialEq)]
pub struct StoredEvent {
    pub position: i64,
    pub xid: i64,
    pub stream: String,
    pub version: i64,
    pub event_type: String,
    pub data: String,
    pub actor: Option<String>,
    pub recorded_at: DateTime<Utc>,
}

impl StoredEvent {
    /// The checkpoint just past this event.
    pub fn checkpoint(&self) -> Checkpoint {
        Checkpoint {
            xid: self.xid,
            position: self.position,
        }
    }
}

type StoredRow = (
    i64,
    i64,
    String,
    i32,
    String,
    String,
    Option<String>,
    DateTime<Utc>,
);

/// `read_committed_batch` for a reader that decodes events itself: the same
/// events in the same order, as `StoredEvent`s.
pub async fn read_committed_stored(
    conn: &mut PgConnection,
    after: Checkpoint,
    watermark: i64,
    limit: i64,
) -> Result<Vec<StoredEvent>> {
    let rows: Vec<StoredRow> = sqlx::query_as(
        "select position, xid, stream, version, type, data::text, metadata->>'actor', recorded_at
         from events
         where (xid, position) > ($1, $2) and xid < $3
         order by xid, position
         limit $4",
    )
    .bind(after.xid)
    .bind(after.position)
    .bind(watermark)
    .bind(limit)
    .fetch_all(conn)
    .await?;
    Ok(rows
        .into_iter()
        .map(
            |(position, xid, stream, version, event_type, data, actor, recorded_at)| StoredEvent {
                position,
                xid,
                stream,
                version: version.into(),
                event_type,
                data,
                actor,
                recorded_at,
            },
        )
        .collect())
}

/// True when some event after `after` is still held back by the watermark
/// (its transaction, or an older one, is still running).
pub async fn has_events_beyond(conn: &mut PgConnection, after: Checkpoint) -> Result<bool> {
    // Not `exists (...)`: its generic plan (what a prepared statement gets
    // after a few runs) scans the whole table when nothing is there.
    Ok(sqlx::query_scalar(
        "select (select 1 from events where (xid, position) > ($1, $2)
                 order by xid, position limit 1) is not null",
    )
    .bind(after.xid)
    .bind(after.position)
    .fetch_one(conn)
    .await?)
}

/// What lies past a reader's checkpoint.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pending {
    /// Some event past the checkpoint is below the watermark: a batch would
    /// read it.
    pub ready: bool,
    /// Events lie past the checkpoint, but none can be read yet: a running
    /// transaction holds them back.
    pub held_back: bool,
}

/// Looks past reader `name`'s checkpoint without a transaction, a lock or an
/// xid: one index probe for a reader that polls, before it starts a batch.
/// The first event past the checkpoint has the smallest xid of them all: if
/// it is held back, so is every other.
pub async fn pending(conn: &mut PgConnection, name: &str) -> Result<Pending> {
    let next: Option<bool> = sqlx::query_scalar(
        "select n.xid < pg_snapshot_xmin(pg_current_snapshot())::text::bigint
         from (select coalesce(max(xid), 0) as xid, coalesce(max(position), 0) as position
               from projector_checkpoints where name = $1) c
         cross join lateral (select e.xid from events e
                             where (e.xid, e.position) > (c.xid, c.position)
                             order by e.xid, e.position limit 1) n",
    )
    .bind(name)
    .fetch_optional(conn)
    .await?;
    Ok(Pending {
        ready: next == Some(true),
        held_back: next == Some(false),
    })
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

/// What `lock_checkpoint_below_watermark` found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct LockedCheckpoint {
    pub at: Checkpoint,
    /// Every transaction with a smaller id has ended.
    pub watermark: i64,
    /// Bumped each time the reader's tables are swapped for rebuilt ones (a
    /// replay): rows a reader remembers from an older generation are not
    /// what the tables hold.
    pub generation: i64,
}

/// `watermark` and `lock_checkpoint` in one round trip: the watermark (taken
/// by the statement's snapshot, before the row lock gives the transaction an
/// xid) and the reader's checkpoint and generation, its row locked for the
/// rest of the transaction. If another copy of the reader (or a replay)
/// holds the row, the statement waits and then returns what that copy
/// committed, with the watermark from before the wait: older, so it holds
/// back more, never less.
pub async fn lock_checkpoint_below_watermark(
    conn: &mut PgConnection,
    name: &str,
) -> Result<LockedCheckpoint> {
    if let Some(locked) = checkpoint_and_watermark(conn, name, true).await? {
        return Ok(locked);
    }
    // The reader's first batch: nothing was written yet, so the watermark
    // still comes before the insert of its row.
    let watermark = watermark(&mut *conn).await?;
    Ok(LockedCheckpoint {
        at: lock_checkpoint(conn, name).await?,
        watermark,
        generation: 0,
    })
}

/// A reader's checkpoint and generation, and the watermark, its row locked
/// for the rest of the transaction or not; `None` before its first save.
async fn checkpoint_and_watermark(
    conn: &mut PgConnection,
    name: &str,
    lock: bool,
) -> Result<Option<LockedCheckpoint>> {
    macro_rules! read {
        () => {
            "select xid, position, pg_snapshot_xmin(pg_current_snapshot())::text::bigint, generation
             from projector_checkpoints where name = $1"
        };
    }
    const READ: &str = read!();
    const LOCK: &str = concat!(read!(), " for update");
    let row: Option<(i64, i64, i64, i64)> = sqlx::query_as(if lock { LOCK } else { READ })
        .bind(name)
        .fetch_optional(&mut *conn)
        .await?;
    Ok(
        row.map(|(xid, position, watermark, generation)| LockedCheckpoint {
            at: Checkpoint { xid, position },
            watermark,
            generation,
        }),
    )
}

/// The first key of the advisory lock copies of a slow reader take turns on
/// (`take_turn_below_watermark`); the second is `hashtext` of the reader's
/// name. Apart from `DOORBELL`'s first key and from the streams' one-key locks.
pub const READER_TURN: i32 = 1_936_483_700;

/// For a reader whose batch takes long (the manifest writer's S3 writes):
/// waits for its turn on an advisory lock held until the transaction ends,
/// then reads the watermark and the reader's checkpoint without locking the
/// row. Neither gives the transaction an xid, so while the batch runs it
/// holds back no reader's watermark (the projector's included); it gets one
/// at `save_checkpoint`, at the end. A row lock, as
/// `lock_checkpoint_below_watermark` takes, would hold every reader of the
/// log back for the whole batch.
pub async fn take_turn_below_watermark(
    conn: &mut PgConnection,
    name: &str,
) -> Result<LockedCheckpoint> {
    sqlx::query("select pg_advisory_xact_lock($1, hashtext($2))")
        .bind(READER_TURN)
        .bind(name)
        .execute(&mut *conn)
        .await?;
    if let Some(found) = checkpoint_and_watermark(conn, name, false).await? {
        return Ok(found);
    }
    // The reader's first batch: `save_checkpoint` writes its row.
    Ok(LockedCheckpoint {
        at: Checkpoint::default(),
        watermark: watermark(&mut *conn).await?,
        generation: 0,
    })
}

/// Where the read models stand: the projector's checkpoint position and
/// the generation of its tables (a replay that swaps them bumps it). The
/// read models change only in a transaction that moves one or the other,
/// so two equal answers mean the tables held the same rows in between.
/// `None` before the projector's first start.
pub async fn read_models_at<'e>(exec: impl PgExecutor<'e>) -> Result<Option<(i64, i64)>> {
    Ok(
        sqlx::query_as("select position, generation from projector_checkpoints where name = $1")
            .bind(READ_MODELS)
            .fetch_optional(exec)
            .await?,
    )
}

/// Moves a reader's checkpoint (writing its row, the first time); call in the
/// transaction that applied the events.
pub async fn save_checkpoint(conn: &mut PgConnection, name: &str, at: Checkpoint) -> Result<()> {
    sqlx::query(
        "insert into projector_checkpoints (name, xid, position) values ($1, $2, $3)
         on conflict (name) do update
         set xid = excluded.xid, position = excluded.position, updated_at = now()",
    )
    .bind(name)
    .bind(at.xid)
    .bind(at.position)
    .execute(conn)
    .await?;
    Ok(())
}
