//! One batch shape for the read models that keep a row per stream
//! (`functions`, `triggers`, `jobs`).
//!
//! `apply` collects the streams of a batch's events, has the read model
//! load the stored rows of those streams in one query, folds each event
//! into its row in memory in log order (which is each stream's version
//! order) under the version rule below, and has the read model write every
//! changed row back in one `unnest` statement. What differs per read model
//! (which streams it takes, its row and key, the queries, how one event
//! moves a row) is its `impl ReadModel`.
//!
//! The version rule (`admits`): each row knows the stream version it has
//! applied. An event at or below it was applied already and is skipped (a
//! batch applied again after a crash, or read again by another copy); an
//! event past the next version is a gap, `Error::OutOfOrder`, which stops
//! the projector. A stream without a row starts where its read model says
//! (`WITHOUT_ROW`): at version 0 when rows are never removed, or unknown
//! when a deletion removes the row and its version with it; then only an
//! event that creates a row may come, at whatever version.

use std::collections::HashMap;

use sless_domain::Aggregate;
use sless_store::eventlog::StoredEvent;
use sqlx::PgConnection;

use crate::{Error, Result};

/// An event of the log, decoded as an event of aggregate `A`.
pub(crate) struct Event<A: Aggregate> {
    pub(crate) stored: StoredEvent,
    pub(crate) event: A::Event,
}

/// An event of the aggregate read model `M` keeps.
pub(crate) type EventOf<M> = Event<<M as ReadModel>::Aggregate>;

/// A stream's row while a batch is applied to it.
pub(crate) struct Work<M: ReadModel> {
    /// What the read model made of the stream's name (`ReadModel::key`).
    pub(crate) key: M::Key,
    /// The stream version the row has applied; `None` while unknown (no
    /// row, in a read model whose rows go with their aggregate).
    pub(crate) version: Option<i64>,
    /// `None`: no row (never created, or deleted).
    pub(crate) row: Option<M::Row>,
    /// A row is in the table (to update, or delete once the row is gone).
    pub(crate) stored: bool,
    /// An event of this batch moved the row.
    pub(crate) changed: bool,
}

impl<M: ReadModel> Work<M> {
    /// Records the row the table holds, at the stream version it applied.
    pub(crate) fn found(&mut self, row: M::Row, version: i64) {
        self.row = Some(row);
        self.version = Some(version);
        self.stored = true;
    }
}

/// The rows of one batch, by stream.
pub(crate) type Rows<'b, M> = HashMap<&'b str, Work<M>>;

/// A read model with a row per stream of one aggregate, applied by `apply`.
pub(crate) trait ReadModel: Sized {
    /// The aggregate whose streams this read model keeps.
    type Aggregate: Aggregate;
    /// What the read model reads off a stream's name (where its namespace
    /// and name are), once per stream and batch.
    type Key;
    /// One stream's row, as it is kept in memory.
    type Row;

    /// The stream version of a stream without a row: `Some(0)` when rows
    /// are never removed, `None` when a deletion removes the row (only an
    /// event that `creates` one may follow, at any version).
    const WITHOUT_ROW: Option<i64>;

    /// The key of `stream`; `None` for a stream that is not this model's.
    fn key(stream: &str) -> Option<Self::Key>;

    /// Whether `event` creates a row (it may come when there is none).
    fn creates(event: &EventOf<Self>) -> bool;

    /// Decodes one event of this model's streams with its aggregate's
    /// `decode` (`scratch`: a buffer to reuse from one event to the next).
    fn decode(_scratch: &mut String, stored: StoredEvent) -> Result<EventOf<Self>> {
        let event = crate::decode_event::<Self::Aggregate>(&stored)?;
        Ok(Event { stored, event })
    }

    /// Reads the stored rows of the streams in `rows` (`Work::found`).
    async fn load(&self, tx: &mut PgConnection, rows: &mut Rows<'_, Self>) -> Result<()>;

    /// Folds one event into its stream's row (the version rule has let it in).
    fn apply(work: &mut Work<Self>, event: &EventOf<Self>) -> Result<()>;

    /// Writes the changed rows in one statement; `applied` are the events
    /// folded in, in log order (the skipped ones left out).
    async fn write(
        &self,
        tx: &mut PgConnection,
        rows: &Rows<'_, Self>,
        applied: &[&EventOf<Self>],
    ) -> Result<()>;
}

/// Decodes the events of `M`'s streams among `events`, in their order; the
/// others are not this read model's.
pub(crate) fn decode<M: ReadModel>(events: Vec<StoredEvent>) -> Result<Vec<EventOf<M>>> {
    let mut scratch = String::new();
    let mut decoded = Vec::with_capacity(events.len());
    for stored in events {
        if M::key(&stored.stream).is_some() {
            decoded.push(M::decode(&mut scratch, stored)?);
        }
    }
    Ok(decoded)
}

/// Applies a decoded batch of `M`'s events (in log order) in `tx`: collect
/// its streams, load their rows, fold each event in under the version
/// rule, write the changed rows. Returns the rows as the batch left them.
pub(crate) async fn apply<'b, M: ReadModel>(
    model: &M,
    tx: &mut PgConnection,
    batch: &'b [EventOf<M>],
) -> Result<Rows<'b, M>> {
    let mut rows = collect::<M>(batch);
    if rows.is_empty() {
        return Ok(rows);
    }
    model.load(tx, &mut rows).await?;
    let applied = fold(&mut rows, batch)?;
    model.write(tx, &rows, &applied).await?;
    Ok(rows)
}

/// A row to fill for each stream of `batch`, none of them loaded yet.
fn collect<M: ReadModel>(batch: &[EventOf<M>]) -> Rows<'_, M> {
    let mut rows: Rows<'_, M> = HashMap::new();
    for e in batch {
        let stream = e.stored.stream.as_str();
        if !rows.contains_key(stream) {
            let key = M::key(stream).expect("decoded events are the model's");
            let work = Work {
                key,
                version: M::WITHOUT_ROW,
                row: None,
                stored: false,
                changed: false,
            };
            rows.insert(stream, work);
        }
    }
    rows
}

/// Folds each event of `batch` into its row, in order, under the version
/// rule; returns the events folded in.
fn fold<'b, M: ReadModel>(
    rows: &mut Rows<'b, M>,
    batch: &'b [EventOf<M>],
) -> Result<Vec<&'b EventOf<M>>> {
    let mut applied = Vec::with_capacity(batch.len());
    for e in batch {
        let work = rows
            .get_mut(e.stored.stream.as_str())
            .expect("every stream has its row");
        if !admits(work.version, M::creates(e), &e.stored)? {
            continue; // applied already
        }
        M::apply(work, e)?;
        work.version = Some(e.stored.version);
        work.changed = true;
        applied.push(e);
    }
    Ok(applied)
}

/// The version rule for `event` on a row at stream version `at` (`None`:
/// unknown, no row): `Ok(false)` when the row applied it already, `Ok(true)`
/// when it is the next, `OutOfOrder` for a gap; with no row, only an event
/// that `creates` one is let in.
fn admits(at: Option<i64>, creates: bool, event: &StoredEvent) -> Result<bool> {
    match at {
        Some(at) if event.version <= at => Ok(false),
        Some(at) if event.version != at + 1 => Err(out_of_order(event, at)),
        None if !creates => Err(out_of_order(event, 0)),
        _ => Ok(true),
    }
}

fn out_of_order(event: &StoredEvent, at: i64) -> Error {
    Error::OutOfOrder {
        stream: event.stream.clone(),
        version: event.version,
        at,
        position: event.position,
    }
}

/// Where the namespace and the name are in a `{kind}/{ns}/{name}` stream
/// (the name is everything past the namespace's slash).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Names {
    start: usize,
    slash: usize,
}

impl Names {
    /// The names of `stream` if it starts with `prefix` (`"trigger/"`).
    pub(crate) fn of(stream: &str, prefix: &str) -> Option<Names> {
        let slash = stream.strip_prefix(prefix)?.find('/')?;
        Some(Names {
            start: prefix.len(),
            slash: prefix.len() + slash,
        })
    }

    pub(crate) fn namespace<'s>(&self, stream: &'s str) -> &'s str {
        &stream[self.start..self.slash]
    }

    pub(crate) fn name<'s>(&self, stream: &'s str) -> &'s str {
        &stream[self.slash + 1..]
    }
}

#[cfg(test)]
mod tests {
    use sless_domain::trigger::{Trigger, TriggerEvent, TriggerFields, TriggerSpec};

    use super::*;

    /// A read model whose row is the list of versions folded into it.
    struct Versions;

    impl ReadModel for Versions {
        type Aggregate = Trigger;
        type Key = ();
        type Row = Vec<i64>;
        const WITHOUT_ROW: Option<i64> = None;

        fn key(stream: &str) -> Option<()> {
            stream.starts_with("trigger/").then_some(())
        }

        fn creates(e: &EventOf<Versions>) -> bool {
            matches!(e.event, TriggerEvent::TriggerCreated { .. })
        }

        async fn load(&self, _: &mut PgConnection, _: &mut Rows<'_, Versions>) -> Result<()> {
            Ok(())
        }

        fn apply(work: &mut Work<Versions>, e: &EventOf<Versions>) -> Result<()> {
            work.row.get_or_insert_with(Vec::new).push(e.stored.version);
            Ok(())
        }

        async fn write(
            &self,
            _: &mut PgConnection,
            _: &Rows<'_, Versions>,
            _: &[&EventOf<Versions>],
        ) -> Result<()> {
            Ok(())
        }
    }

    const STREAM: &str = "trigger/ns/web";

    fn event(version: i64, event: TriggerEvent) -> EventOf<Versions> {
        let stored = StoredEvent {
            position: 100 + version,
            xid: 1,
            stream: STREAM.into(),
            version,
            event_type: Trigger::event_type(&event).into(),
            data: Trigger::encode(&event).to_string(),
            actor: None,
            recorded_at: chrono::Utc::now(),
        };
        Event { stored, event }
    }

    fn toggled(version: i64) -> EventOf<Versions> {
        event(version, TriggerEvent::TriggerToggled { enabled: true })
    }

    fn created(version: i64) -> EventOf<Versions> {
        let spec = TriggerSpec::parse(TriggerFields {
            name: "web",
            function: "hello",
            kind: "http",
            schedule: None,
            timezone: None,
            enabled: None,
        })
        .unwrap();
        event(version, TriggerEvent::TriggerCreated { spec })
    }

    /// The batch's rows, as if the table held `stored` at `version`.
    fn loaded(batch: &[EventOf<Versions>], stored: Option<i64>) -> Rows<'_, Versions> {
        let mut rows = collect::<Versions>(batch);
        if let Some(version) = stored {
            rows.get_mut(STREAM).unwrap().found(vec![version], version);
        }
        rows
    }

    fn versions(applied: &[&EventOf<Versions>]) -> Vec<i64> {
        applied.iter().map(|e| e.stored.version).collect()
    }

    #[test]
    fn events_a_row_applied_already_are_skipped_and_the_next_is_folded_in() {
        let batch = [toggled(1), toggled(2), toggled(3), toggled(3)];
        let mut rows = loaded(&batch, Some(2));
        let applied = fold(&mut rows, &batch).unwrap();
        assert_eq!(versions(&applied), [3]);
        let work = &rows[STREAM];
        assert_eq!(work.row.as_deref(), Some(&[2, 3][..]));
        assert_eq!(work.version, Some(3));
        assert!(work.changed && work.stored);
    }

    #[test]
    fn a_row_whose_events_were_all_applied_is_unchanged() {
        let batch = [toggled(1), toggled(2)];
        let mut rows = loaded(&batch, Some(2));
        assert!(fold(&mut rows, &batch).unwrap().is_empty());
        assert!(!rows[STREAM].changed);
        assert_eq!(rows[STREAM].row.as_deref(), Some(&[2][..]));
    }

    #[test]
    fn a_gap_past_the_next_version_is_out_of_order() {
        let batch = [toggled(3), toggled(5)];
        let mut rows = loaded(&batch, Some(2));
        match fold(&mut rows, &batch) {
            Err(Error::OutOfOrder {
                stream,
                version,
                at,
                position,
            }) => assert_eq!(
                (stream.as_str(), version, at, position),
                (STREAM, 5, 3, 105)
            ),
            Err(e) => panic!("expected OutOfOrder, got {e}"),
            Ok(applied) => panic!("a gap was applied: {:?}", versions(&applied)),
        }
    }

    #[test]
    fn without_a_row_only_a_creation_comes_next_at_any_version() {
        let batch = [created(7), toggled(8)];
        let mut rows = loaded(&batch, None);
        assert_eq!(versions(&fold(&mut rows, &batch).unwrap()), [7, 8]);
        assert!(!rows[STREAM].stored);

        let batch = [toggled(4)];
        let mut rows = loaded(&batch, None);
        assert!(matches!(
            fold(&mut rows, &batch),
            Err(Error::OutOfOrder {
                version: 4,
                at: 0,
                ..
            })
        ));
    }

    #[test]
    fn names_are_read_off_a_stream_after_its_prefix() {
        let stream = "function/ns-1/hello/world";
        let names = Names::of(stream, "function/").unwrap();
        assert_eq!(names.namespace(stream), "ns-1");
        assert_eq!(names.name(stream), "hello/world");
        assert_eq!(Names::of("function/ns", "function/"), None);
        assert_eq!(Names::of("trigger/ns/t", "function/"), None);
    }
}
