//! Replay: rebuilds every read model from the start of the log into fresh
//! tables and swaps them in, while the live projector and the API go on.
//!
//! 1. Take the replay lock (a session-level advisory lock: one replay at a
//!    time; a replay whose process dies lets go of it with its session) and
//!    record the run in `replays`.
//! 2. Drop what a replay killed before this one left, and create the shadow
//!    tables (`functions_replay`, …) like the live ones.
//! 3. Apply the log to them in batches with the live projector's own code
//!    (`Models` on other tables), up to the live projector's
//!    checkpoint. Every event up to that checkpoint has committed (the
//!    projector read it below its watermark), so the replay needs no
//!    watermark of its own, and the rebuilt tables end where the live ones
//!    are. Then again up to where that checkpoint has moved meanwhile (a
//!    few passes at most), until little is left for step 4. The next batch
//!    is read and decoded on another connection while one is applied.
//! 4. In one transaction: lock the live projector's checkpoint row (its next
//!    batch waits), apply what it committed since step 3, checksum each
//!    rebuilt table and each live one, and (unless verifying) swap them by
//!    renaming, drop the old ones, and bump the checkpoint's generation so
//!    that a projector forgets the rows it remembers. Verifying drops the
//!    rebuilt tables instead. The checkpoint itself does not move: the
//!    rebuilt tables are at it.
//!
//! A checksum is a hash of the set of a table's rows, every column, written
//! as PostgreSQL writes a row (`t::text`, timestamps in UTC): the sum of the
//! rows' md5s, each taken as a 64-bit number, and the row count. Equal
//! tables give equal checksums on any server; the order rows are stored in
//! does not matter.
//!
//! Short transactions throughout: a transaction that stays open would hold
//! back every reader of the log (the watermark), the live projector first.

use std::future::Future;
use std::time::{Duration, Instant};

use chrono::{DateTime, Utc};
use serde::Serialize;
use sless_store::PgPool;
use sless_store::eventlog::{self, Checkpoint};
use sqlx::{AssertSqlSafe, Connection, PgConnection};

use crate::functions::Tables;
use crate::{Decoded, Error, Models, NAME, Result, decode};

/// The suffix of the tables a replay builds.
pub const SHADOW_SUFFIX: &str = "_replay";

/// The suffix a live table takes for the moment of the swap.
const RETIRED_SUFFIX: &str = "_retired";

/// The replay lock: an advisory lock in the two-key form (the doorbell's
/// first key, see `eventlog::DOORBELL`, with 2).
const LOCK: (i32, i32) = (eventlog::DOORBELL.0, 2);

/// Events per transaction while rebuilding.
pub const REPLAY_BATCH: i64 = 20_000;

/// Passes over what the live projector applied while the replay ran, at
/// most, before the swap applies the rest.
const CATCH_UP_PASSES: usize = 5;

/// Events few enough for the swap to apply while the live projector waits.
const SMALL_REST: u64 = 1_000;

/// The longest statement of a replay (a checksum of a large table).
const REPLAY_STATEMENT_TIMEOUT: &str = "15min";

/// How long the swap waits for a lock on a live table (queries of the API
/// hold theirs for milliseconds) before it gives up, changing nothing.
const SWAP_LOCK_TIMEOUT: &str = "10s";

/// Rebuild and swap, or rebuild and only compare.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Mode {
    Replay,
    Verify,
}

impl Mode {
    pub fn as_str(self) -> &'static str {
        match self {
            Mode::Replay => "replay",
            Mode::Verify => "verify",
        }
    }
}

/// How far a replay has come.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Progress {
    /// Events applied to the rebuilt tables.
    pub applied: u64,
    /// Events up to the live projector's checkpoint when the replay began.
    pub total: u64,
    pub elapsed: Duration,
}

impl Progress {
    pub fn events_per_sec(&self) -> f64 {
        self.applied as f64 / self.elapsed.as_secs_f64().max(1e-9)
    }

    /// The time left at the rate so far; `None` before there is a rate.
    pub fn eta(&self) -> Option<Duration> {
        let rate = self.events_per_sec();
        (self.applied > 0 && rate > 0.0)
            .then(|| Duration::from_secs_f64(self.total.saturating_sub(self.applied) as f64 / rate))
    }
}

/// The checksums of one read model.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ModelChecksum {
    pub table: String,
    /// Of the table the replay built.
    pub rebuilt: String,
    pub rebuilt_rows: i64,
    /// Of the live table, at the same checkpoint.
    pub live: String,
    pub live_rows: i64,
}

impl ModelChecksum {
    pub fn equal(&self) -> bool {
        self.rebuilt == self.live && self.rebuilt_rows == self.live_rows
    }
}

/// What a replay did.
#[derive(Debug, Clone, Serialize)]
pub struct Outcome {
    pub id: i64,
    pub mode: Mode,
    /// Events applied to the rebuilt tables.
    pub applied: u64,
    /// The live projector's checkpoint the rebuilt tables were brought to.
    pub position: i64,
    pub models: Vec<ModelChecksum>,
    /// Whether the rebuilt tables are live now.
    pub swapped: bool,
    #[serde(skip)]
    pub elapsed: Duration,
}

impl Outcome {
    /// The read models whose rebuilt checksum differs from the live one.
    pub fn differing(&self) -> Vec<&str> {
        self.models
            .iter()
            .filter(|m| !m.equal())
            .map(|m| m.table.as_str())
            .collect()
    }
}

/// A replay as `replays` records it.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct Run {
    pub id: i64,
    pub mode: String,
    /// `running`, `equal`, `differs`, `failed` or `abandoned`.
    pub state: String,
    pub requested_by: String,
    pub started_at: DateTime<Utc>,
    pub finished_at: Option<DateTime<Utc>>,
    pub applied: i64,
    pub total: i64,
    pub position: Option<i64>,
    /// Per read model: `{"rebuilt", "rebuilt_rows", "live", "live_rows", "equal"}`.
    pub checksums: Option<serde_json::Value>,
    pub error: Option<String>,
}

/// The last replay, if any; one whose process died shows as `abandoned`.
pub async fn last(pool: &PgPool) -> Result<Option<Run>> {
    type RunRow = (
        i64,
        String,
        String,
        String,
        DateTime<Utc>,
        Option<DateTime<Utc>>,
        i64,
        i64,
        Option<i64>,
        Option<serde_json::Value>,
        Option<String>,
        bool,
    );
    let row: Option<RunRow> = sqlx::query_as(
        "select id, mode, state, requested_by, started_at, finished_at, applied, total,
                position, checksums, error,
                exists (select 1 from pg_locks l
                        where l.locktype = 'advisory' and l.granted
                          and l.database = (select oid from pg_database
                                            where datname = current_database())
                          and l.classid = $1::oid and l.objid = $2::oid and l.objsubid = 2)
         from replays order by id desc limit 1",
    )
    .bind(LOCK.0 as i64)
    .bind(LOCK.1 as i64)
    .fetch_optional(pool)
    .await?;
    Ok(row.map(
        |(
            id,
            mode,
            state,
            requested_by,
            started_at,
            finished_at,
            applied,
            total,
            position,
            checksums,
            error,
            locked,
        )| Run {
            id,
            mode,
            state: if state == "running" && !locked {
                "abandoned".into()
            } else {
                state
            },
            requested_by,
            started_at,
            finished_at,
            applied,
            total,
            position,
            checksums,
            error,
        },
    ))
}

/// A replay that holds the replay lock and has its row in `replays`.
pub struct Replay {
    /// Its own session (not returned to the pool: the lock is the session's).
    conn: PgConnection,
    id: i64,
    mode: Mode,
    pool: PgPool,
    batch: i64,
}

impl Replay {
    /// Takes the replay lock and records the run; `Error::ReplayRunning`
    /// when another replay holds the lock.
    pub async fn begin(pool: &PgPool, mode: Mode, requested_by: &str) -> Result<Replay> {
        let mut conn = pool.acquire().await?.detach();
        // Checksums of large tables take longer than a statement of the
        // API may; this session is the replay's alone, and ends with it.
        sqlx::query(AssertSqlSafe(format!(
            "set statement_timeout = '{REPLAY_STATEMENT_TIMEOUT}'"
        )))
        .execute(&mut conn)
        .await?;
        let locked: bool = sqlx::query_scalar("select pg_try_advisory_lock($1, $2)")
            .bind(LOCK.0)
            .bind(LOCK.1)
            .fetch_one(&mut conn)
            .await?;
        if !locked {
            let since: Option<DateTime<Utc>> = sqlx::query_scalar(
                "select started_at from replays where state = 'running' order by id desc limit 1",
            )
            .fetch_optional(&mut conn)
            .await?;
            return Err(Error::ReplayRunning { since });
        }
        // Whatever is still `running` lost its process: we hold the lock.
        sqlx::query(
            "update replays set state = 'abandoned', finished_at = now() where state = 'running'",
        )
        .execute(&mut conn)
        .await?;
        let id: i64 = sqlx::query_scalar(
            "insert into replays (mode, requested_by) values ($1, $2) returning id",
        )
        .bind(mode.as_str())
        .bind(requested_by)
        .fetch_one(&mut conn)
        .await?;
        Ok(Replay {
            conn,
            id,
            mode,
            pool: pool.clone(),
            batch: REPLAY_BATCH,
        })
    }

    /// This run's id in `replays`.
    pub fn id(&self) -> i64 {
        self.id
    }

    /// Events per transaction while rebuilding (`REPLAY_BATCH` unless set).
    pub fn batch(mut self, events: i64) -> Replay {
        self.batch = events.max(1);
        self
    }

    /// Rebuilds, compares and (unless verifying) swaps; records the outcome
    /// in `replays`. Calls `progress` after every batch.
    pub async fn run(mut self, mut progress: impl FnMut(Progress)) -> Result<Outcome> {
        let started = Instant::now();
        let result = self.rebuild_and_swap(started, &mut progress).await;
        match &result {
            Ok(outcome) => {
                let state = if outcome.differing().is_empty() {
                    "equal"
                } else {
                    "differs"
                };
                let recorded = sqlx::query(
                    "update replays set state = $2, finished_at = now(), applied = $3,
                         position = $4, checksums = $5
                     where id = $1",
                )
                .bind(self.id)
                .bind(state)
                .bind(outcome.applied as i64)
                .bind(outcome.position)
                .bind(checksums_json(&outcome.models))
                .execute(&mut self.conn)
                .await;
                if let Err(e) = recorded {
                    // The replay itself is done (and swapped, unless verifying).
                    tracing::warn!(id = self.id, error = %e, "the replay's outcome was not recorded");
                }
            }
            Err(e) => {
                // The session may be what failed: record it on another.
                let _ = sqlx::query(
                    "update replays set state = 'failed', finished_at = now(), error = $2
                     where id = $1",
                )
                .bind(self.id)
                .bind(e.to_string())
                .execute(&self.pool)
                .await;
                let _ = drop_tables(&mut self.conn, &Tables::suffixed(SHADOW_SUFFIX)).await;
            }
        }
        // Let go before the session ends: a backend lets go of its locks
        // only after the client has gone, and the next replay may be quick.
        let _ = sqlx::query("select pg_advisory_unlock($1, $2)")
            .bind(LOCK.0)
            .bind(LOCK.1)
            .execute(&mut self.conn)
            .await;
        let _ = self.conn.close().await;
        result
    }

    async fn rebuild_and_swap(
        &mut self,
        started: Instant,
        progress: &mut impl FnMut(Progress),
    ) -> Result<Outcome> {
        let live = Tables::live();
        let shadow = Tables::suffixed(SHADOW_SUFFIX);
        let conn = &mut self.conn;
        drop_tables(conn, &shadow).await?;
        create_like(conn, &live, &shadow).await?;

        let mut model = Models::on(shadow.clone());
        let mut at = Checkpoint::default();
        let mut applied: u64 = 0;
        let mut total: u64 = 0;
        // Up to the live checkpoint, and again up to where it has moved
        // meanwhile, until little is left for the swap to apply while the
        // live projector waits.
        for _pass in 0..CATCH_UP_PASSES {
            let target = checkpoint(conn).await?;
            let events: i64 =
                sqlx::query_scalar("select count(*) from events where (xid, position) <= ($1, $2)")
                    .bind(target.xid)
                    .bind(target.position)
                    .fetch_one(&mut *conn)
                    .await?;
            sqlx::query("update replays set total = $2 where id = $1")
                .bind(self.id)
                .bind(events)
                .execute(&mut *conn)
                .await?;
            total = events as u64;
            let before = applied;
            // The next batch is read and decoded on another connection
            // while this one is applied.
            let mut ahead: Option<ReadAhead> = None;
            loop {
                let batch = match ahead.take() {
                    Some(read) => read.finish().await?,
                    None => read_batch(conn, at, target, self.batch).await?,
                };
                let Some(batch) = batch else {
                    break;
                };
                if batch.full {
                    ahead = Some(ReadAhead::start(&self.pool, batch.to, target, self.batch));
                }
                let n = batch.read;
                let mut tx = conn.begin().await?;
                let rows = model.apply(&mut tx, &batch.events).await?;
                sqlx::query("update replays set applied = $2 where id = $1")
                    .bind(self.id)
                    .bind((applied + n) as i64)
                    .execute(&mut *tx)
                    .await?;
                tx.commit().await?;
                model.keep(rows);
                applied += n;
                at = batch.to;
                progress(Progress {
                    applied,
                    total: total.max(applied),
                    elapsed: started.elapsed(),
                });
            }
            if applied - before < SMALL_REST {
                break;
            }
        }
        for table in shadow.all() {
            sqlx::query(AssertSqlSafe(format!("analyze {table}")))
                .execute(&mut *conn)
                .await?;
        }

        // The swap: the live projector waits at its checkpoint row meanwhile.
        let mut tx = conn.begin().await?;
        sqlx::query(AssertSqlSafe(format!(
            "set local lock_timeout = '{SWAP_LOCK_TIMEOUT}'"
        )))
        .execute(&mut *tx)
        .await?;
        sqlx::query("set local timezone = 'UTC'")
            .execute(&mut *tx)
            .await?;
        let live_at = eventlog::lock_checkpoint(&mut tx, NAME).await?;
        if live_at < at {
            return Err(Error::Store(sless_store::Error::Internal(format!(
                "the projector's checkpoint moved back (to position {}) while replaying \
                 up to position {}; nothing was swapped",
                live_at.position, at.position
            ))));
        }
        loop {
            let (n, to) = apply_batch(&mut tx, &mut model, at, live_at, self.batch).await?;
            if n == 0 {
                break;
            }
            applied += n;
            at = to;
        }
        let mut models = Vec::new();
        for (l, s) in live.all().into_iter().zip(shadow.all()) {
            let (live_rows, live_sum) = checksum(&mut tx, l).await?;
            let (rebuilt_rows, rebuilt_sum) = checksum(&mut tx, s).await?;
            models.push(ModelChecksum {
                table: l.to_owned(),
                rebuilt: rebuilt_sum,
                rebuilt_rows,
                live: live_sum,
                live_rows,
            });
        }
        let swapped = self.mode == Mode::Replay;
        if swapped {
            swap(&mut tx, &live, &shadow).await?;
            sqlx::query(
                "update projector_checkpoints set generation = generation + 1 where name = $1",
            )
            .bind(NAME)
            .execute(&mut *tx)
            .await?;
        } else {
            drop_tables(&mut tx, &shadow).await?;
        }
        tx.commit().await?;
        progress(Progress {
            applied,
            total: total.max(applied),
            elapsed: started.elapsed(),
        });
        Ok(Outcome {
            id: self.id,
            mode: self.mode,
            applied,
            position: live_at.position,
            models,
            swapped,
            elapsed: started.elapsed(),
        })
    }
}

/// Begins a replay and runs it (see `Replay`).
pub async fn replay(
    pool: &PgPool,
    mode: Mode,
    requested_by: &str,
    progress: impl FnMut(Progress),
) -> Result<Outcome> {
    Replay::begin(pool, mode, requested_by)
        .await?
        .run(progress)
        .await
}

/// Begins a replay and runs it in a task of its own; the task's answer is
/// the outcome. For callers that answer before it ends (the admin API).
pub async fn start(
    pool: &PgPool,
    mode: Mode,
    requested_by: &str,
) -> Result<(i64, impl Future<Output = Result<Outcome>> + Send + 'static)> {
    let replay = Replay::begin(pool, mode, requested_by).await?;
    let id = replay.id;
    Ok((id, replay.run(|_| {})))
}

/// The live projector's checkpoint, without locking it.
async fn checkpoint(conn: &mut PgConnection) -> Result<Checkpoint> {
    let row: Option<(i64, i64)> =
        sqlx::query_as("select xid, position from projector_checkpoints where name = $1")
            .bind(NAME)
            .fetch_optional(conn)
            .await?;
    Ok(row
        .map(|(xid, position)| Checkpoint { xid, position })
        .unwrap_or_default())
}

/// Events read from the log for a replay, decoded.
struct Batch {
    /// Events read (of every stream).
    read: u64,
    /// The checkpoint of the last.
    to: Checkpoint,
    /// As many as were asked for: there may be more.
    full: bool,
    events: Decoded,
}

/// Reads and decodes up to `limit` events after `after` and up to `until`
/// (inclusive); `None` when there are none.
async fn read_batch(
    conn: &mut PgConnection,
    after: Checkpoint,
    until: Checkpoint,
    limit: i64,
) -> Result<Option<Batch>> {
    if after >= until {
        return Ok(None);
    }
    // Every event up to `until` has committed: below `until.xid + 1` are
    // they and the rest of `until`'s own transaction, cut off here.
    let mut events = eventlog::read_committed_stored(conn, after, until.xid + 1, limit).await?;
    let full = events.len() as i64 >= limit;
    events.retain(|e| e.checkpoint() <= until);
    let Some(to) = events.last().map(|e| e.checkpoint()) else {
        return Ok(None);
    };
    Ok(Some(Batch {
        read: events.len() as u64,
        to,
        full: full && to < until,
        events: decode(events)?,
    }))
}

/// A batch being read on a connection of its own.
struct ReadAhead(tokio::task::JoinHandle<Result<Option<Batch>>>);

impl ReadAhead {
    fn start(pool: &PgPool, after: Checkpoint, until: Checkpoint, limit: i64) -> ReadAhead {
        let pool = pool.clone();
        ReadAhead(tokio::spawn(async move {
            let mut conn = pool.acquire().await?;
            read_batch(&mut conn, after, until, limit).await
        }))
    }

    async fn finish(mut self) -> Result<Option<Batch>> {
        match (&mut self.0).await {
            Ok(read) => read,
            Err(e) => Err(Error::Store(sless_store::Error::Internal(format!(
                "reading ahead: {e}"
            )))),
        }
    }
}

impl Drop for ReadAhead {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// Applies up to `limit` events after `after` and up to `until` (inclusive)
/// to `model` in `tx`. Returns how many events it read and the checkpoint
/// of the last. `model` keeps the rows at once: if `tx` fails, so does the
/// replay, and `model` goes with it.
async fn apply_batch(
    tx: &mut PgConnection,
    model: &mut Models,
    after: Checkpoint,
    until: Checkpoint,
    limit: i64,
) -> Result<(u64, Checkpoint)> {
    let Some(batch) = read_batch(tx, after, until, limit).await? else {
        return Ok((0, after));
    };
    let rows = model.apply(tx, &batch.events).await?;
    model.keep(rows);
    Ok((batch.read, batch.to))
}

fn checksums_json(models: &[ModelChecksum]) -> serde_json::Value {
    let mut map = serde_json::Map::new();
    for m in models {
        map.insert(
            m.table.clone(),
            serde_json::json!({
                "rebuilt": m.rebuilt,
                "rebuilt_rows": m.rebuilt_rows,
                "live": m.live,
                "live_rows": m.live_rows,
                "equal": m.equal(),
            }),
        );
    }
    serde_json::Value::Object(map)
}

/// `"name"`, quoted for SQL.
fn ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

async fn drop_tables(conn: &mut PgConnection, tables: &Tables) -> Result<()> {
    for t in tables.all() {
        sqlx::query(AssertSqlSafe(format!("drop table if exists {}", ident(t))))
            .execute(&mut *conn)
            .await?;
    }
    Ok(())
}

/// Creates each of `shadow` like its `live` table: columns, defaults,
/// constraints, indexes and storage parameters (`fillfactor`).
async fn create_like(conn: &mut PgConnection, live: &Tables, shadow: &Tables) -> Result<()> {
    for (l, s) in live.all().into_iter().zip(shadow.all()) {
        sqlx::query(AssertSqlSafe(format!(
            "create table {} (like {} including all)",
            ident(s),
            ident(l)
        )))
        .execute(&mut *conn)
        .await?;
        let options: Option<String> = sqlx::query_scalar(
            "select array_to_string(reloptions, ', ') from pg_class where oid = $1::regclass",
        )
        .bind(l)
        .fetch_one(&mut *conn)
        .await?;
        if let Some(options) = options.filter(|o| !o.is_empty()) {
            sqlx::query(AssertSqlSafe(format!(
                "alter table {} set ({options})",
                ident(s)
            )))
            .execute(&mut *conn)
            .await?;
        }
    }
    Ok(())
}

/// The row count and checksum of `table`: a hash of the set of its rows,
/// every column, as PostgreSQL writes a row (`t::text`). Each row's md5 is
/// taken as a 64-bit number and the numbers are summed: the sum does not
/// depend on the order rows are read in, so the whole table is read once
/// and never sorted (twice as fast as an md5 of the rows in key order:
/// 3.8 s for a million rows). The caller sets the time zone, which timestamps are written in.
async fn checksum(conn: &mut PgConnection, table: &str) -> Result<(i64, String)> {
    let (rows, sum): (i64, String) = sqlx::query_as(AssertSqlSafe(format!(
        "select count(*),
                md5(count(*) || ':' || coalesce(sum(('x' || left(h, 16))::bit(64)::bigint::numeric), 0))
         from (select md5(t::text) as h from {} t) r",
        ident(table)
    )))
    .fetch_one(&mut *conn)
    .await?;
    Ok((rows, sum))
}

/// Puts each of `shadow` in the place of its `live` table: the live one is
/// renamed away and dropped, the shadow takes its name, and the shadow's
/// indexes take the names of the live indexes with the same definition.
async fn swap(tx: &mut PgConnection, live: &Tables, shadow: &Tables) -> Result<()> {
    for (l, s) in live.all().into_iter().zip(shadow.all()) {
        let indexes = |table: &str| {
            sqlx::query_as::<_, (String, String)>(
                "select c.relname::text,
                        i.indisunique::text || ' '
                        || regexp_replace(pg_get_indexdef(i.indexrelid), '^.* USING ', '')
                 from pg_index i join pg_class c on c.oid = i.indexrelid
                 where i.indrelid = $1::regclass",
            )
            .bind(table.to_owned())
        };
        let live_indexes = indexes(l).fetch_all(&mut *tx).await?;
        let shadow_indexes = indexes(s).fetch_all(&mut *tx).await?;
        let retired = format!("{l}{RETIRED_SUFFIX}");
        for statement in [
            format!("alter table {} rename to {}", ident(l), ident(&retired)),
            format!("drop table {}", ident(&retired)),
            format!("alter table {} rename to {}", ident(s), ident(l)),
        ] {
            sqlx::query(AssertSqlSafe(statement))
                .execute(&mut *tx)
                .await?;
        }
        for (shadow_name, def) in &shadow_indexes {
            if let Some((live_name, _)) = live_indexes.iter().find(|(_, d)| d == def) {
                sqlx::query(AssertSqlSafe(format!(
                    "alter index {} rename to {}",
                    ident(shadow_name),
                    ident(live_name)
                )))
                .execute(&mut *tx)
                .await?;
            }
        }
    }
    Ok(())
}
