//! The `functions` and `function_versions` read models.
//!
//! A batch is applied in memory (`batch::apply`): each event is decoded
//! once, straight from the log's JSON text into a `FunctionEvent`, and
//! folded into its function's row with the domain's `Function::evolve` (in
//! stream order, skipping what was applied already). The changed rows and
//! the new versions go back in one statement.
//!
//! The rows of the functions a batch touches come from a cache of the rows
//! this projector itself wrote, as long as nobody else moved the checkpoint
//! since (the caller checks that, see `lib.rs`); the others are read in one
//! query. During a catch-up, the cache spares the read of every row.

use std::collections::HashMap;
use std::sync::Arc;

use chrono::{DateTime, Utc};
use sless_domain::{Function, FunctionEvent, Phase, SourceVersion};
use sless_store::eventlog::StoredEvent;
use sless_store::readmodel::function_rows_by_key;
use sqlx::PgConnection;

use crate::batch::{self, Event, EventOf, Names, ReadModel, Rows, Work};
use crate::{Error, Result};

/// Rows kept between batches, at most: past it the cache starts over.
const CACHE_LIMIT: usize = 50_000;

/// The prefix of a function stream (`function/{ns}/{name}`).
const PREFIX: &str = "function/";

/// One function's row, as this projector last wrote or read it.
#[derive(Clone)]
pub(crate) struct Row {
    /// The fold so far; `versions` stays empty (they live in `function_versions`).
    state: Function,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// True when `event` changed only how many instances serve, or where
/// they are, not the function: a `FunctionScaled`, or a `FunctionDeployed`
/// of the version that served already, Ready before and after (a change of
/// spec makes it `Pending` first). Such an event leaves the row's
/// `updated_at` (its last change, which the idle sweep counts from, beside
/// the last call's end) as it was. Decided on what the row keeps alone, so
/// a row read back from the table decides as the cached one would.
fn only_the_count(before: &Function, after: &Function, event: &FunctionEvent) -> bool {
    match event {
        FunctionEvent::FunctionScaled { .. } => true,
        FunctionEvent::FunctionDeployed { version, .. } => {
            before.endpoint.is_some()
                && before.deployed_version == Some(*version)
                && before.phase == Phase::Ready
                && after.phase == Phase::Ready
        }
        _ => false,
    }
}

/// A version row to write.
struct NewVersion<'a> {
    stream: &'a str,
    namespace: &'a str,
    name: &'a str,
    version: &'a SourceVersion,
    by: Option<&'a str>,
    at: DateTime<Utc>,
}

/// The rows of one applied batch, by stream, kept once its transaction commits.
pub(crate) struct Applied {
    rows: Vec<(String, Row)>,
}

/// The tables of the read models: the live ones, or the copies a replay
/// builds before it swaps them in (see `replay`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Tables {
    pub(crate) functions: String,
    pub(crate) versions: String,
    pub(crate) triggers: String,
    pub(crate) jobs: String,
}

impl Tables {
    /// The live tables, which queries read.
    pub(crate) fn live() -> Tables {
        Tables {
            functions: "functions".into(),
            versions: "function_versions".into(),
            triggers: "triggers".into(),
            jobs: "jobs".into(),
        }
    }

    /// The tables with `suffix` appended to each name.
    pub(crate) fn suffixed(suffix: &str) -> Tables {
        let live = Tables::live();
        Tables {
            functions: format!("{}{suffix}", live.functions),
            versions: format!("{}{suffix}", live.versions),
            triggers: format!("{}{suffix}", live.triggers),
            jobs: format!("{}{suffix}", live.jobs),
        }
    }

    /// Every table, in a fixed order.
    pub(crate) fn all(&self) -> [&str; 4] {
        [&self.functions, &self.versions, &self.triggers, &self.jobs]
    }
}

/// The functions read model, with the cache of its rows (by stream).
pub(crate) struct Functions {
    tables: Tables,
    /// `WRITE` for these tables.
    write: Arc<str>,
    cache: HashMap<String, Row>,
}

impl Default for Functions {
    fn default() -> Self {
        Functions::on(Tables::live())
    }
}

impl Functions {
    /// The read model kept in `tables`, with nothing cached.
    pub(crate) fn on(tables: Tables) -> Functions {
        let write = WRITE
            .replace("{functions}", &tables.functions)
            .replace("{versions}", &tables.versions)
            .into();
        Functions {
            tables,
            write,
            cache: HashMap::new(),
        }
    }

    /// Forgets every cached row (someone else may have written since).
    pub(crate) fn forget(&mut self) {
        self.cache.clear();
    }

    /// Keeps the rows of a batch whose transaction committed.
    pub(crate) fn keep(&mut self, applied: Applied) {
        if self.cache.len() + applied.rows.len() > CACHE_LIMIT {
            self.cache.clear();
        }
        self.cache.extend(applied.rows);
    }

    /// Applies a decoded batch (in its order) in `tx`.
    pub(crate) async fn apply(
        &self,
        tx: &mut PgConnection,
        batch: &[EventOf<Functions>],
    ) -> Result<Applied> {
        let rows = batch::apply(self, tx, batch).await?;
        let rows = rows
            .into_iter()
            .filter_map(|(stream, work)| Some((stream.to_owned(), work.row?)))
            .collect();
        Ok(Applied { rows })
    }
}

impl ReadModel for Functions {
    type Aggregate = Function;
    type Key = Names;
    type Row = Row;

    /// A function's row stays when it is deleted (phase `Deleted`): no row
    /// is a stream that has applied nothing.
    const WITHOUT_ROW: Option<i64> = Some(0);

    fn key(stream: &str) -> Option<Names> {
        Names::of(stream, PREFIX)
    }

    fn creates(_: &EventOf<Functions>) -> bool {
        false // never asked: a stream without a row is at version 0
    }

    /// In one pass over the event's text (no intermediate JSON tree).
    fn decode(scratch: &mut String, stored: StoredEvent) -> Result<EventOf<Functions>> {
        let event = decode_one(scratch, &stored)?;
        Ok(Event { stored, event })
    }

    /// Takes the cached rows, and reads the others in one query.
    async fn load(&self, tx: &mut PgConnection, rows: &mut Rows<'_, Functions>) -> Result<()> {
        let mut missing = (Vec::new(), Vec::new());
        for (stream, work) in rows.iter_mut() {
            match self.cache.get(*stream) {
                Some(row) => {
                    let version = row.state.stream_version as i64;
                    work.found(row.clone(), version);
                }
                None => {
                    missing.0.push(work.key.namespace(stream));
                    missing.1.push(work.key.name(stream));
                }
            }
        }
        if missing.0.is_empty() {
            return Ok(());
        }
        let found =
            function_rows_by_key(&mut *tx, &self.tables.functions, &missing.0, &missing.1).await?;
        for r in found {
            let stream = format!("{PREFIX}{}/{}", r.namespace, r.name);
            if let Some(work) = rows.get_mut(stream.as_str()) {
                let row = Row {
                    state: r.state(),
                    created_at: r.created_at,
                    updated_at: r.updated_at,
                };
                let version = row.state.stream_version as i64;
                work.found(row, version);
            }
        }
        Ok(())
    }

    fn apply(work: &mut Work<Functions>, e: &EventOf<Functions>) -> Result<()> {
        let event = &e.stored;
        let row = work.row.get_or_insert_with(|| Row {
            state: Function::default(),
            created_at: event.recorded_at,
            updated_at: event.recorded_at,
        });
        let before = row.state.clone();
        row.state = std::mem::take(&mut row.state).evolve(&e.event);
        row.state.versions.clear();
        if row.state.spec.is_none() {
            return Err(Error::BadEvent {
                position: event.position,
                event_type: event.event_type.clone(),
                error: "an event before FunctionCreated".into(),
            });
        }
        if !only_the_count(&before, &row.state, &e.event) {
            row.updated_at = event.recorded_at;
        }
        Ok(())
    }

    /// The changed rows and the new versions in one statement, then the
    /// pruned versions deleted (after the inserts: a version may come and
    /// go in one batch).
    async fn write(
        &self,
        tx: &mut PgConnection,
        rows: &Rows<'_, Functions>,
        applied: &[&EventOf<Functions>],
    ) -> Result<()> {
        let mut versions = Vec::new();
        let mut pruned: Vec<(&str, &str, i32)> = Vec::new();
        for e in applied {
            let stream = e.stored.stream.as_str();
            let names = &rows[stream].key;
            let (namespace, name) = (names.namespace(stream), names.name(stream));
            match &e.event {
                FunctionEvent::FunctionUploaded(v) => versions.push(NewVersion {
                    stream,
                    namespace,
                    name,
                    version: v,
                    by: e.stored.actor.as_deref(),
                    at: e.stored.recorded_at,
                }),
                FunctionEvent::VersionsPruned { versions: gone } => {
                    pruned.extend(gone.iter().map(|v| (namespace, name, *v as i32)));
                }
                _ => {}
            }
        }
        write(tx, &self.write, rows, &mut versions).await?;
        if !pruned.is_empty() {
            delete_versions(tx, &self.tables, &pruned).await?;
        }
        Ok(())
    }
}

/// Decodes an event's `data` into a `FunctionEvent` in one pass over its
/// text (no intermediate JSON tree), reusing `json` as scratch space.
fn decode_one(json: &mut String, event: &StoredEvent) -> Result<FunctionEvent> {
    let bad = |error: String| Error::BadEvent {
        position: event.position,
        event_type: event.event_type.clone(),
        error,
    };
    json.clear();
    json.push_str("{\"type\":");
    if event.event_type.bytes().all(|b| b.is_ascii_alphanumeric()) {
        json.push('"');
        json.push_str(&event.event_type);
        json.push('"');
    } else {
        json.push_str(&serde_json::to_string(&event.event_type).map_err(|e| bad(e.to_string()))?);
    }
    json.push_str(",\"data\":");
    json.push_str(&event.data);
    json.push('}');
    serde_json::from_str(json).map_err(|e| bad(e.to_string()))
}

/// The columns of the changed rows, one array per column.
#[derive(Default)]
struct Columns<'a> {
    namespace: Vec<&'a str>,
    name: Vec<&'a str>,
    runtime: Vec<&'static str>,
    entrypoint: Vec<&'a str>,
    memory: Vec<i32>,
    timeout: Vec<i32>,
    env: Vec<serde_json::Value>,
    current: Vec<Option<i32>>,
    deployed: Vec<Option<i32>>,
    endpoint: Vec<Option<&'a str>>,
    node: Vec<Option<&'a str>>,
    scale_after: Vec<Option<i32>>,
    idle: Vec<bool>,
    scaling: Vec<serde_json::Value>,
    instances: Vec<i32>,
    instance_endpoints: Vec<serde_json::Value>,
    phase: Vec<&'static str>,
    last_error: Vec<Option<&'a str>>,
    stream_version: Vec<i32>,
    created: Vec<DateTime<Utc>>,
    updated: Vec<DateTime<Utc>>,
}

impl<'a> Columns<'a> {
    fn push(&mut self, stream: &'a str, work: &'a Work<Functions>) {
        let row = work.row.as_ref().expect("a changed row exists");
        let spec = row.state.spec.as_ref().expect("checked while applying");
        self.namespace.push(work.key.namespace(stream));
        self.name.push(work.key.name(stream));
        self.runtime.push(spec.runtime.as_str());
        self.entrypoint.push(&spec.entrypoint);
        self.memory.push(spec.memory_mb as i32);
        self.timeout.push(spec.timeout_sec as i32);
        self.env
            .push(serde_json::to_value(&spec.env_vars).expect("env serializes"));
        self.current
            .push(row.state.current_version.map(|v| v as i32));
        self.deployed
            .push(row.state.deployed_version.map(|v| v as i32));
        self.endpoint.push(row.state.endpoint.as_deref());
        self.node.push(row.state.deployed_node.as_deref());
        self.scale_after
            .push(spec.scale_to_zero_after_sec.map(|v| v as i32));
        self.idle.push(row.state.idle);
        self.scaling
            .push(serde_json::to_value(spec.scaling).expect("scaling serializes"));
        self.instances.push(row.state.instances() as i32);
        self.instance_endpoints.push(
            serde_json::to_value(&row.state.instance_endpoints).expect("endpoints serialize"),
        );
        self.phase.push(row.state.phase.as_str());
        self.last_error.push(row.state.last_error.as_deref());
        self.stream_version.push(row.state.stream_version as i32);
        self.created.push(row.created_at);
        self.updated.push(row.updated_at);
    }

    fn len(&self) -> usize {
        self.namespace.len()
    }
}

/// The changed rows and the new versions of a batch, written in one
/// statement: rows that existed are updated, new ones inserted, versions
/// inserted, each from one array per column. The arrays are unnested in
/// select lists, where they are read in step, rather than in `from`, where
/// `unnest` first copies every row into a tuplestore (twice the work).
/// `{functions}` and `{versions}` stand for the tables' names.
const WRITE: &str = "
with updated as (
    update {functions} f set
        runtime = u.runtime, entrypoint = u.entrypoint, memory_mb = u.memory_mb,
        timeout_sec = u.timeout_sec, env_vars = u.env_vars,
        current_version = u.current_version, deployed_version = u.deployed_version,
        endpoint = u.endpoint, phase = u.phase, last_error = u.last_error,
        stream_version = u.stream_version, updated_at = u.updated_at,
        deployed_node = u.deployed_node, scale_to_zero_after_sec = u.scale_after, idle = u.idle,
        scaling = u.scaling, instances = u.instances, instance_endpoints = u.instance_endpoints
    from (select unnest($1::text[]) as namespace, unnest($2::text[]) as name,
                 unnest($3::text[]) as runtime, unnest($4::text[]) as entrypoint,
                 unnest($5::int[]) as memory_mb, unnest($6::int[]) as timeout_sec,
                 unnest($7::jsonb[]) as env_vars, unnest($8::int[]) as current_version,
                 unnest($9::int[]) as deployed_version, unnest($10::text[]) as endpoint,
                 unnest($11::text[]) as phase, unnest($12::text[]) as last_error,
                 unnest($13::int[]) as stream_version,
                 unnest($14::timestamptz[]) as updated_at,
                 unnest($42::text[]) as deployed_node,
                 unnest($44::int[]) as scale_after, unnest($45::bool[]) as idle,
                 unnest($48::jsonb[]) as scaling, unnest($49::int[]) as instances,
                 unnest($50::jsonb[]) as instance_endpoints) u
    where f.namespace = u.namespace and f.name = u.name
    returning 1
), inserted as (
    insert into {functions} (namespace, name, runtime, entrypoint, memory_mb, timeout_sec,
        env_vars, current_version, deployed_version, endpoint, phase, last_error,
        stream_version, created_at, updated_at, deployed_node, scale_to_zero_after_sec, idle,
        scaling, instances, instance_endpoints)
    select unnest($15::text[]), unnest($16::text[]), unnest($17::text[]), unnest($18::text[]),
        unnest($19::int[]), unnest($20::int[]), unnest($21::jsonb[]), unnest($22::int[]),
        unnest($23::int[]), unnest($24::text[]), unnest($25::text[]), unnest($26::text[]),
        unnest($27::int[]), unnest($28::timestamptz[]), unnest($29::timestamptz[]),
        unnest($43::text[]), unnest($46::int[]), unnest($47::bool[]),
        unnest($51::jsonb[]), unnest($52::int[]), unnest($53::jsonb[])
), versions as (
    insert into {versions} (namespace, name, version, sha256, size, files, zip_key,
        context_sha256, context_key, uploaded_by, uploaded_at, runtime)
    select unnest($30::text[]), unnest($31::text[]), unnest($32::int[]), unnest($33::text[]),
        unnest($34::bigint[]), unnest($35::int[]), unnest($36::text[]), unnest($37::text[]),
        unnest($38::text[]), unnest($39::text[]), unnest($40::timestamptz[]),
        unnest($41::text[])
)
select count(*) from updated";

/// Writes the changed rows and the new versions of a batch (one round trip).
///
/// Only the projector writes these rows, and the checkpoint's row lock keeps
/// its copies apart: no row locks, no conflict handling. Updates change no
/// indexed column, so most stay on their page (HOT). Rows go in key order,
/// so that consecutive ones meet the same index pages.
async fn write(
    tx: &mut PgConnection,
    statement: &Arc<str>,
    rows: &Rows<'_, Functions>,
    versions: &mut [NewVersion<'_>],
) -> Result<()> {
    let mut updates = Columns::default();
    let mut inserts = Columns::default();
    let mut changed: Vec<(&str, &Work<Functions>)> = rows
        .iter()
        .filter(|(_, w)| w.changed)
        .map(|(s, w)| (*s, w))
        .collect();
    changed.sort_unstable_by_key(|(s, _)| *s);
    for (stream, work) in changed {
        if work.stored {
            updates.push(stream, work);
        } else {
            inserts.push(stream, work);
        }
    }
    if updates.len() + inserts.len() + versions.len() == 0 {
        return Ok(());
    }
    versions
        .sort_unstable_by(|a, b| (a.stream, a.version.version).cmp(&(b.stream, b.version.version)));
    let v = VersionColumns::of(versions);
    let u = &updates;
    let i = &inserts;
    let updated: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(statement.clone()))
        .bind(&u.namespace)
        .bind(&u.name)
        .bind(&u.runtime)
        .bind(&u.entrypoint)
        .bind(&u.memory)
        .bind(&u.timeout)
        .bind(&u.env)
        .bind(&u.current)
        .bind(&u.deployed)
        .bind(&u.endpoint)
        .bind(&u.phase)
        .bind(&u.last_error)
        .bind(&u.stream_version)
        .bind(&u.updated)
        .bind(&i.namespace)
        .bind(&i.name)
        .bind(&i.runtime)
        .bind(&i.entrypoint)
        .bind(&i.memory)
        .bind(&i.timeout)
        .bind(&i.env)
        .bind(&i.current)
        .bind(&i.deployed)
        .bind(&i.endpoint)
        .bind(&i.phase)
        .bind(&i.last_error)
        .bind(&i.stream_version)
        .bind(&i.created)
        .bind(&i.updated)
        .bind(&v.namespace)
        .bind(&v.name)
        .bind(&v.number)
        .bind(&v.sha256)
        .bind(&v.size)
        .bind(&v.files)
        .bind(&v.zip_key)
        .bind(&v.context_sha256)
        .bind(&v.context_key)
        .bind(&v.by)
        .bind(&v.at)
        .bind(&v.runtime)
        .bind(&u.node)
        .bind(&i.node)
        .bind(&u.scale_after)
        .bind(&u.idle)
        .bind(&i.scale_after)
        .bind(&i.idle)
        .bind(&u.scaling)
        .bind(&u.instances)
        .bind(&u.instance_endpoints)
        .bind(&i.scaling)
        .bind(&i.instances)
        .bind(&i.instance_endpoints)
        .fetch_one(&mut *tx)
        .await?;
    if updated != updates.len() as i64 {
        return Err(Error::Store(sless_store::Error::Internal(format!(
            "functions read model: {updated} of {} rows to update exist; \
             was it written by another process?",
            updates.len()
        ))));
    }
    Ok(())
}

/// Deletes the version rows retention pruned.
async fn delete_versions(
    tx: &mut PgConnection,
    tables: &Tables,
    pruned: &[(&str, &str, i32)],
) -> Result<()> {
    let ns: Vec<&str> = pruned.iter().map(|p| p.0).collect();
    let name: Vec<&str> = pruned.iter().map(|p| p.1).collect();
    let version: Vec<i32> = pruned.iter().map(|p| p.2).collect();
    // The table name is ours (`Tables`), never input.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "delete from {} v
         using (select unnest($1::text[]) as namespace, unnest($2::text[]) as name,
                       unnest($3::int[]) as version) p
         where v.namespace = p.namespace and v.name = p.name and v.version = p.version",
        tables.versions
    )))
    .bind(&ns)
    .bind(&name)
    .bind(&version)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The columns of the new version rows, one array per column.
struct VersionColumns<'a> {
    namespace: Vec<&'a str>,
    name: Vec<&'a str>,
    number: Vec<i32>,
    sha256: Vec<&'a str>,
    size: Vec<i64>,
    files: Vec<i32>,
    zip_key: Vec<&'a str>,
    context_sha256: Vec<&'a str>,
    context_key: Vec<&'a str>,
    by: Vec<Option<&'a str>>,
    at: Vec<DateTime<Utc>>,
    runtime: Vec<Option<&'static str>>,
}

impl<'a> VersionColumns<'a> {
    fn of(versions: &[NewVersion<'a>]) -> VersionColumns<'a> {
        let text = |f: fn(&NewVersion<'a>) -> &'a str| versions.iter().map(f).collect();
        VersionColumns {
            namespace: text(|v| v.namespace),
            name: text(|v| v.name),
            number: versions.iter().map(|v| v.version.version as i32).collect(),
            sha256: text(|v| &v.version.sha256),
            size: versions.iter().map(|v| v.version.size as i64).collect(),
            files: versions.iter().map(|v| v.version.files as i32).collect(),
            zip_key: text(|v| &v.version.zip_key),
            context_sha256: text(|v| &v.version.context_sha256),
            context_key: text(|v| &v.version.context_key),
            by: versions.iter().map(|v| v.by).collect(),
            at: versions.iter().map(|v| v.at).collect(),
            runtime: versions
                .iter()
                .map(|v| v.version.runtime.map(|r| r.as_str()))
                .collect(),
        }
    }
}
