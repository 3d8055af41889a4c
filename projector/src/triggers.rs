//! The `triggers` read model: one row per trigger that exists.
//!
//! Applied like `functions`, by `batch::apply`: a batch's trigger events
//! are decoded once, the rows of the triggers it touches are read in one
//! query, each event is folded into its row in memory (in stream order; an
//! event applied already is skipped, a gap is an error), and the changed
//! rows go back in one statement: upserted, or deleted when the trigger was.
//!
//! A deleted trigger's row is removed, and its stream version with it: the
//! next event of that stream must be a `TriggerCreated` (at whatever
//! version), as the decider allows nothing else; any other event on a
//! trigger without a row is a gap.
//!
//! `active_since` is when the trigger was last enabled (created enabled, or
//! toggled on), null while it is disabled.

use chrono::{DateTime, Utc};
use sless_domain::trigger::{Trigger, TriggerEvent};
use sless_store::eventlog::StoredEvent;
use sqlx::{AssertSqlSafe, PgConnection};

use crate::batch::{self, EventOf, Names, ReadModel, Rows, Work};
use crate::functions::Tables;
use crate::{Error, Result};

/// The prefix of a trigger stream (`trigger/{ns}/{name}`).
const PREFIX: &str = "trigger/";

/// One trigger's row.
#[derive(Debug, Clone)]
pub(crate) struct Row {
    function: String,
    kind: String,
    schedule: Option<String>,
    timezone: Option<String>,
    enabled: bool,
    active_since: Option<DateTime<Utc>>,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

/// The triggers read model, in the tables it is given.
pub(crate) struct Triggers {
    table: String,
    write: String,
}

impl Triggers {
    pub(crate) fn on(tables: &Tables) -> Triggers {
        Triggers {
            table: tables.triggers.clone(),
            write: WRITE.replace("{triggers}", &tables.triggers),
        }
    }

    /// Applies a decoded batch (in its order) in `tx`.
    pub(crate) async fn apply(
        &self,
        tx: &mut PgConnection,
        batch: &[EventOf<Triggers>],
    ) -> Result<()> {
        batch::apply(self, tx, batch).await.map(drop)
    }
}

impl ReadModel for Triggers {
    type Aggregate = Trigger;
    type Key = Names;
    type Row = Row;

    /// A deleted trigger's row goes, and its stream version with it.
    const WITHOUT_ROW: Option<i64> = None;

    fn key(stream: &str) -> Option<Names> {
        Names::of(stream, PREFIX)
    }

    fn creates(e: &EventOf<Triggers>) -> bool {
        matches!(e.event, TriggerEvent::TriggerCreated { .. })
    }

    async fn load(&self, tx: &mut PgConnection, rows: &mut Rows<'_, Triggers>) -> Result<()> {
        let namespaces: Vec<&str> = rows.iter().map(|(s, w)| w.key.namespace(s)).collect();
        let names: Vec<&str> = rows.iter().map(|(s, w)| w.key.name(s)).collect();
        type Stored = (
            String,
            String,
            String,
            String,
            Option<String>,
            Option<String>,
            bool,
            Option<DateTime<Utc>>,
            i32,
            DateTime<Utc>,
            DateTime<Utc>,
        );
        // The table name is ours (`Tables`), never input.
        let found: Vec<Stored> = sqlx::query_as(AssertSqlSafe(format!(
            "select t.namespace, t.name, t.function, t.kind, t.schedule, t.timezone, t.enabled,
                    t.active_since, t.stream_version, t.created_at, t.updated_at
             from {} t
             join (select unnest($1::text[]) as namespace, unnest($2::text[]) as name) k
               on t.namespace = k.namespace and t.name = k.name",
            self.table
        )))
        .bind(&namespaces)
        .bind(&names)
        .fetch_all(&mut *tx)
        .await?;
        for (ns, name, function, kind, schedule, timezone, enabled, active_since, v, c, u) in found
        {
            let stream = format!("{PREFIX}{ns}/{name}");
            if let Some(work) = rows.get_mut(stream.as_str()) {
                let row = Row {
                    function,
                    kind,
                    schedule,
                    timezone,
                    enabled,
                    active_since,
                    created_at: c,
                    updated_at: u,
                };
                work.found(row, i64::from(v));
            }
        }
        Ok(())
    }

    fn apply(work: &mut Work<Triggers>, e: &EventOf<Triggers>) -> Result<()> {
        let event = &e.stored;
        let at = event.recorded_at;
        match &e.event {
            TriggerEvent::TriggerCreated { spec } => {
                work.row = Some(Row {
                    function: spec.function.as_str().to_owned(),
                    kind: spec.kind.as_str().to_owned(),
                    schedule: spec.schedule.as_ref().map(|s| s.cron.clone()),
                    timezone: spec.schedule.as_ref().map(|s| s.timezone.clone()),
                    enabled: spec.enabled,
                    active_since: spec.enabled.then_some(at),
                    created_at: at,
                    updated_at: at,
                });
            }
            TriggerEvent::TriggerToggled { enabled } => {
                let Some(row) = work.row.as_mut() else {
                    return Err(before_created(event));
                };
                if *enabled && !row.enabled {
                    row.active_since = Some(at);
                } else if !*enabled {
                    row.active_since = None;
                }
                row.enabled = *enabled;
                row.updated_at = at;
            }
            TriggerEvent::TriggerDeleted {} => {
                if work.row.is_none() {
                    return Err(before_created(event));
                }
                work.row = None;
            }
        }
        Ok(())
    }

    /// Upserts the rows of triggers that exist and deletes those of
    /// triggers that were deleted, in one statement.
    async fn write(
        &self,
        tx: &mut PgConnection,
        rows: &Rows<'_, Triggers>,
        _applied: &[&EventOf<Triggers>],
    ) -> Result<()> {
        let mut changed: Vec<(&str, &Work<Triggers>)> = rows
            .iter()
            .filter(|(_, w)| w.changed)
            .map(|(s, w)| (*s, w))
            .collect();
        changed.sort_unstable_by(|(a, wa), (b, wb)| {
            (wa.key.namespace(a), wa.key.name(a)).cmp(&(wb.key.namespace(b), wb.key.name(b)))
        });
        let mut gone = (Vec::new(), Vec::new());
        let mut c = Columns::default();
        for (stream, w) in changed {
            match &w.row {
                None if w.stored => {
                    gone.0.push(w.key.namespace(stream));
                    gone.1.push(w.key.name(stream));
                }
                None => {}
                Some(row) => c.push(stream, w, row),
            }
        }
        if gone.0.is_empty() && c.namespace.is_empty() {
            return Ok(());
        }
        sqlx::query(AssertSqlSafe(self.write.as_str()))
            .bind(&gone.0)
            .bind(&gone.1)
            .bind(&c.namespace)
            .bind(&c.name)
            .bind(&c.function)
            .bind(&c.kind)
            .bind(&c.schedule)
            .bind(&c.timezone)
            .bind(&c.enabled)
            .bind(&c.active_since)
            .bind(&c.stream_version)
            .bind(&c.created)
            .bind(&c.updated)
            .execute(&mut *tx)
            .await?;
        Ok(())
    }
}

fn before_created(event: &StoredEvent) -> Error {
    Error::BadEvent {
        position: event.position,
        event_type: event.event_type.clone(),
        error: "an event of a trigger that does not exist".into(),
    }
}

/// The columns of the rows to upsert, one array per column.
#[derive(Default)]
struct Columns<'a> {
    namespace: Vec<&'a str>,
    name: Vec<&'a str>,
    function: Vec<&'a str>,
    kind: Vec<&'a str>,
    schedule: Vec<Option<&'a str>>,
    timezone: Vec<Option<&'a str>>,
    enabled: Vec<bool>,
    active_since: Vec<Option<DateTime<Utc>>>,
    stream_version: Vec<i32>,
    created: Vec<DateTime<Utc>>,
    updated: Vec<DateTime<Utc>>,
}

impl<'a> Columns<'a> {
    fn push(&mut self, stream: &'a str, w: &'a Work<Triggers>, row: &'a Row) {
        self.namespace.push(w.key.namespace(stream));
        self.name.push(w.key.name(stream));
        self.function.push(&row.function);
        self.kind.push(&row.kind);
        self.schedule.push(row.schedule.as_deref());
        self.timezone.push(row.timezone.as_deref());
        self.enabled.push(row.enabled);
        self.active_since.push(row.active_since);
        self.stream_version
            .push(w.version.expect("an applied row has its version") as i32);
        self.created.push(row.created_at);
        self.updated.push(row.updated_at);
    }
}

/// Deletes the rows of deleted triggers and upserts the others, from one
/// array per column (a trigger is in one list or the other, never both).
/// `{triggers}` stands for the table's name.
const WRITE: &str = "
with gone as (
    delete from {triggers} t
    using (select unnest($1::text[]) as namespace, unnest($2::text[]) as name) d
    where t.namespace = d.namespace and t.name = d.name
)
insert into {triggers} (namespace, name, function, kind, schedule, timezone, enabled,
    active_since, stream_version, created_at, updated_at)
select unnest($3::text[]), unnest($4::text[]), unnest($5::text[]), unnest($6::text[]),
    unnest($7::text[]), unnest($8::text[]), unnest($9::bool[]), unnest($10::timestamptz[]),
    unnest($11::int[]), unnest($12::timestamptz[]), unnest($13::timestamptz[])
on conflict (namespace, name) do update set
    function = excluded.function, kind = excluded.kind, schedule = excluded.schedule,
    timezone = excluded.timezone, enabled = excluded.enabled,
    active_since = excluded.active_since, stream_version = excluded.stream_version,
    created_at = excluded.created_at, updated_at = excluded.updated_at";
