//! A command's writes in one statement: its events, the work they call for
//! and its answer under an idempotency key.
//!
//! `run` calls the database function `run_command` (migration
//! `20261205000001_command_in_one_call.sql`), which appends with the stream
//! lock first (`eventlog::append`'s rules), enqueues (`queue::enqueue`'s
//! upsert) and stores the answer (`idempotency`), in that order. On a
//! connection outside a transaction it commits alone: one round trip for a
//! whole command. Inside a transaction (a command with more to check) it is
//! the transaction's first write, and commits with it. It does not NOTIFY
//! the workers: the caller rings them once it has committed
//! (`queue::Ringer`), so that commands need not commit one at a time.

use sqlx::PgConnection;
use tracing::Instrument;

use crate::eventlog::{self, Appended, Columns, NewEvent};
use crate::idempotency::StoredAnswer;
use crate::queue;
use crate::{Error, Result};

/// One command's writes.
pub struct Write<'a> {
    pub stream: &'a str,
    /// The version the command was decided on; `None` appends at the
    /// stream's current version (a write that depends on no state).
    pub expected: Option<u64>,
    pub events: &'a [NewEvent],
    /// The work the events call for: its kind and key. Enqueued only when
    /// events were appended.
    pub work: Option<(&'a str, &'a str)>,
    /// The answer to keep under an idempotency key.
    pub answer: Option<Keep<'a>>,
}

/// An answer kept for `actor`'s idempotency `key`.
pub struct Keep<'a> {
    pub actor: &'a str,
    pub key: &'a str,
    pub answer: &'a StoredAnswer,
}

/// What a command's write came to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Outcome {
    /// Appended (or, for no events at the expected version, unchanged); its
    /// answer, if any, is kept.
    Appended(Appended),
    /// A concurrent request with the same idempotency key committed first:
    /// nothing was written, and that request's answer stands.
    KeyTaken,
}

/// The top-level field of an answer that names its append's position: the
/// database fills it in, since it is known only once the events are written.
pub const POSITION: &str = "position";

/// A position an answer is built with before its append: `run` stores the
/// real one in its place. (An answer's body is built before the write, so
/// that the write and the answer are one statement.)
pub const POSITION_PENDING: i64 = i64::MIN + 0x5e55;

/// Runs one command's writes. A version conflict is `Error::Conflict` and
/// writes nothing.
pub async fn run(conn: &mut PgConnection, w: Write<'_>) -> Result<Outcome> {
    let cols = Columns::of(w.events);
    let payload = queue::traced(&serde_json::Value::Object(Default::default())).into_owned();
    let keep = w.answer.as_ref();
    let started = std::time::Instant::now();
    let answered = sqlx::query_as(
        "select first_write, actual, last_position from run_command(
             $1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12::jsonpath,
             $13, $14, $15, $16, $17, $18, $19)",
    )
    .bind(w.stream)
    .bind(eventlog::stream_lock_key(w.stream))
    .bind(w.expected.map(|v| v as i64))
    .bind(&cols.types)
    .bind(&cols.namespaces)
    .bind(&cols.data)
    .bind(&cols.metadata)
    .bind(w.work.map(|(kind, _)| kind))
    .bind(w.work.map(|(_, key)| key))
    .bind(&payload)
    // No NOTIFY in the statement: the caller rings (`queue::Ringer`).
    .bind(None::<&str>)
    .bind(queue::links_path())
    .bind(keep.map(|k| k.actor))
    .bind(keep.map(|k| k.key))
    .bind(keep.map(|k| k.answer.request_hash.as_str()))
    .bind(keep.map(|k| k.answer.status as i16))
    .bind(keep.map(|k| &k.answer.body))
    .bind(keep.map(|k| serde_json::Value::Object(k.answer.headers.clone())))
    .bind(keep.is_some_and(|k| names_pending_position(&k.answer.body)))
    .fetch_one(&mut *conn)
    .instrument(eventlog::append_span(w.stream, w.events.len()))
    .await;
    match answered {
        Ok(row) => eventlog::outcome(w.stream, w.expected, w.events.is_empty(), started, row)
            .map(Outcome::Appended),
        Err(sqlx::Error::Database(e)) if e.code().as_deref() == Some("SLKEY") => {
            Ok(Outcome::KeyTaken)
        }
        Err(e) => Err(Error::Db(e)),
    }
}

/// True when `body` names the pending position at its top level.
pub fn names_pending_position(body: &serde_json::Value) -> bool {
    body.get(POSITION).and_then(|p| p.as_i64()) == Some(POSITION_PENDING)
}

/// `body` with the position its append wrote in place of the pending one.
pub fn fill_position(body: &mut serde_json::Value, position: i64) {
    if names_pending_position(body) {
        body[POSITION] = position.into();
    }
}
