//! Events, both ways: the fixtures (what a release wrote) are read by
//! today's code, and today's code writes them as they are.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt::Debug;

use serde_json::{Value, json};
use sless_domain::job::Job;
use sless_domain::namespace::NamespaceState;
use sless_domain::trigger::{Trigger, TriggerKind};
use sless_domain::{Aggregate, CrashCause, Function, Namespace, Runtime, ScaleWindow};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::trigger_index;
use sless_testkit::TestDb;

use crate::examples::{self, Event, Example, Kind, NS};
use crate::fixture::{self, accepted_names, differences, name, strings};

const FILE: &str = "events.json";
const ABOUT: &str = "Events as sless writes them: one entry per example of store/tests/compat/examples.rs, \
    the columns of its row in the log (stream, namespace, type, data, metadata). Entries are what a \
    release wrote: they are added (SLESS_BLESS=1 cargo test -p sless-store --test compat), never changed \
    or removed. Every one must decode with today's code, and today's code must write each as it is.";

/// The fixture entries (with today's new examples added, when blessing).
fn fixtures() -> Vec<Value> {
    let today: Vec<Value> = examples::all().iter().map(Example::entry).collect();
    fixture::load_or_bless(FILE, ABOUT, &today)
}

fn by_name(examples: &[Example]) -> BTreeMap<&str, &Example> {
    examples.iter().map(|e| (e.name, e)).collect()
}

fn column<'a>(entry: &'a Value, key: &str) -> &'a str {
    entry[key]
        .as_str()
        .unwrap_or_else(|| panic!("{}: no {key}", name(entry)))
}

#[test]
fn every_event_type_and_every_value_of_its_enums_has_a_fixture() {
    let fixtures = fixtures();
    let examples = examples::all();
    let named: BTreeSet<&str> = fixtures.iter().map(name).collect();
    let exemplified: BTreeSet<&str> = examples.iter().map(|e| e.name).collect();
    let unblessed: Vec<_> = exemplified.difference(&named).collect();
    assert!(
        unblessed.is_empty(),
        "examples with no fixture: {unblessed:?}; bless them: SLESS_BLESS=1 cargo test -p sless-store --test compat"
    );
    let orphaned: Vec<_> = named.difference(&exemplified).collect();
    assert!(
        orphaned.is_empty(),
        "fixtures with no example: {orphaned:?}; an example is never removed (its rows are in logs)"
    );

    for kind in Kind::ALL {
        let refused = kind
            .decode("NotAnEventType", &json!({}))
            .expect_err("an unknown event type is refused");
        let readable = accepted_names(&refused);
        let fixed: BTreeSet<String> = fixtures
            .iter()
            .filter(|f| Kind::of_stream(column(f, "stream")) == kind)
            .map(|f| column(f, "type").to_owned())
            .collect();
        let new: Vec<_> = readable.difference(&fixed).collect();
        assert!(
            new.is_empty(),
            "{kind:?} event types no fixture has: {new:?}. The release before cannot read them: a \
             stream holding one fails to load there, and its projector stops on it \
             (docs/operations.md, \"Upgrading\"). Add an example of each to \
             store/tests/compat/examples.rs and bless it"
        );
        let gone: Vec<_> = fixed.difference(&readable).collect();
        assert!(
            gone.is_empty(),
            "{kind:?} event types in the log that today's code no longer reads: {gone:?}"
        );
    }

    let mut written = BTreeSet::new();
    for f in &fixtures {
        strings(&f["data"], &mut written);
    }
    let enums = [
        (
            "runtime",
            serde_json::from_value::<Runtime>(json!("?")).err(),
        ),
        (
            "crash cause",
            serde_json::from_value::<CrashCause>(json!("?")).err(),
        ),
        (
            "scale window",
            serde_json::from_value::<ScaleWindow>(json!("?")).err(),
        ),
        (
            "trigger type",
            serde_json::from_value::<TriggerKind>(json!("?")).err(),
        ),
    ];
    for (what, refused) in enums {
        let values = accepted_names(&refused.expect("an unknown value is refused"));
        let missing: Vec<_> = values.difference(&written).collect();
        assert!(
            missing.is_empty(),
            "values of the {what} no fixture holds: {missing:?}. The release before cannot \
             read an event that carries one; add an example with each and bless it"
        );
    }
}

/// Old → new: each entry decodes with today's types to the value it was
/// written for, and its metadata to the metadata it was written with.
#[test]
fn every_fixture_decodes_to_the_value_it_was_written_for() {
    let examples = examples::all();
    let examples = by_name(&examples);
    for f in fixtures() {
        let n = name(&f);
        let example = examples
            .get(n)
            .unwrap_or_else(|| panic!("{n}: no example; an example is never removed"));
        let kind = Kind::of_stream(column(&f, "stream"));
        let decoded = kind
            .decode(column(&f, "type"), &f["data"])
            .unwrap_or_else(|e| panic!("{n}: today's code cannot read the release's event: {e}"));
        assert_eq!(decoded, example.event, "{n}: read as another value");
        let metadata: Metadata = serde_json::from_value(f["metadata"].clone())
            .unwrap_or_else(|e| panic!("{n}: today's code cannot read its metadata: {e}"));
        assert_eq!(
            metadata, example.metadata,
            "{n}: its metadata read otherwise"
        );
    }
}

/// New → old: what today's code writes for each example is its fixture,
/// key for key, so the release before reads it as it read its own.
#[test]
fn todays_code_writes_every_example_as_its_fixture() {
    let fixtures: BTreeMap<String, Value> = fixtures()
        .into_iter()
        .map(|f| (name(&f).to_owned(), f))
        .collect();
    let mut wrong = Vec::new();
    for example in examples::all() {
        let Some(f) = fixtures.get(example.name) else {
            wrong.push(format!("{}: no fixture; bless it", example.name));
            continue;
        };
        for d in differences(f, &example.entry()) {
            wrong.push(format!("{}: {d}", example.name));
        }
    }
    assert!(
        wrong.is_empty(),
        "today's code writes what the release before may not read:\n{}",
        wrong.join("\n")
    );
}

/// Every JSON pointer to an object in `v` (`""` is `v` itself).
fn objects(v: &Value, at: String, into: &mut Vec<String>) {
    match v {
        Value::Object(m) => {
            for (k, x) in m {
                objects(
                    x,
                    format!("{at}/{}", k.replace('~', "~0").replace('/', "~1")),
                    into,
                );
            }
            into.push(at);
        }
        Value::Array(a) => {
            for (i, x) in a.iter().enumerate() {
                objects(x, format!("{at}/{i}"), into);
            }
        }
        _ => {}
    }
}

/// `v` with a field no release knows yet in the object at `pointer`.
fn with_a_later_field(v: &Value, pointer: &str) -> Value {
    let mut v = v.clone();
    v.pointer_mut(pointer)
        .and_then(Value::as_object_mut)
        .expect("an object")
        .insert("added_by_a_later_release".into(), json!("x"));
    v
}

/// The next release may add optional fields: today's decoders read an event
/// with a field they do not know, in any object of it (none of the types
/// events and their metadata are made of refuses unknown fields).
#[test]
fn todays_decoders_read_events_with_fields_a_later_release_added() {
    for f in fixtures() {
        let n = name(&f);
        let kind = Kind::of_stream(column(&f, "stream"));
        if kind.decode(column(&f, "type"), &f["data"]).is_err() {
            // Unreadable as it is: the test of old rows says why.
            continue;
        }
        let mut at = Vec::new();
        objects(&f["data"], String::new(), &mut at);
        for pointer in at {
            let data = with_a_later_field(&f["data"], &pointer);
            if let Err(e) = kind.decode(column(&f, "type"), &data) {
                panic!("{n}: a field added at data{pointer} makes it unreadable: {e}");
            }
        }
        let metadata = with_a_later_field(&f["metadata"], "");
        if let Err(e) = serde_json::from_value::<Metadata>(metadata) {
            panic!("{n}: a field added to its metadata makes it unreadable: {e}");
        }
    }
}

/// Folds stream `stream` as today's store loads it, and checks the state is
/// the fold of its examples.
async fn loads_as_its_examples_fold<A>(
    pool: &PgPool,
    stream: &str,
    examples: &[&Example],
    pick: fn(&Event) -> Option<&A::Event>,
) -> A
where
    A: Aggregate + PartialEq + Debug,
{
    let (loaded, version) = eventlog::load::<A>(pool, stream)
        .await
        .unwrap_or_else(|e| panic!("{stream}: today's store cannot load the release's rows: {e}"));
    let events: Vec<&A::Event> = examples
        .iter()
        .map(|e| pick(&e.event).expect("an event of the stream's aggregate"))
        .collect();
    let expected = A::fold(events);
    assert_eq!(version, examples.len() as u64, "{stream}");
    assert_eq!(loaded, expected, "{stream}: folded otherwise");
    loaded
}

/// Old → new against PostgreSQL: the fixtures appended as the rows a
/// release wrote (their `data` as it is) load and fold with today's code,
/// and the database's own readers of events (the trigger index) read them.
#[tokio::test]
async fn rows_a_release_wrote_fold_into_todays_aggregates() {
    let db = TestDb::new().await;
    let fixtures = fixtures();
    let examples = examples::all();
    let examples = by_name(&examples);
    let mut streams: Vec<(String, Vec<&Value>)> = Vec::new();
    for f in &fixtures {
        let stream = column(f, "stream");
        match streams.iter_mut().find(|(s, _)| s == stream) {
            Some((_, entries)) => entries.push(f),
            None => streams.push((stream.to_owned(), vec![f])),
        }
    }
    let mut conn = db.pool.acquire().await.unwrap();
    for (stream, entries) in &streams {
        let rows: Vec<NewEvent> = entries
            .iter()
            .map(|f| NewEvent {
                event_type: column(f, "type").to_owned(),
                namespace: column(f, "namespace").to_owned(),
                data: f["data"].clone(),
                metadata: serde_json::from_value(f["metadata"].clone()).unwrap(),
            })
            .collect();
        eventlog::append(&mut conn, stream, 0, &rows)
            .await
            .unwrap_or_else(|e| panic!("{stream}: appending the release's rows: {e}"));
    }
    drop(conn);

    let mut existing_triggers = Vec::new();
    for (stream, entries) in &streams {
        let of_stream: Vec<&Example> = entries.iter().map(|f| examples[name(f)]).collect();
        match Kind::of_stream(stream) {
            Kind::Function => {
                loads_as_its_examples_fold::<Function>(&db.pool, stream, &of_stream, |e| match e {
                    Event::Function(e) => Some(e),
                    _ => None,
                })
                .await;
            }
            Kind::Namespace => {
                let state = loads_as_its_examples_fold::<NamespaceState>(
                    &db.pool,
                    stream,
                    &of_stream,
                    |e| match e {
                        Event::Namespace(e) => Some(e),
                        _ => None,
                    },
                )
                .await;
                assert!(state.ensured, "{stream}");
            }
            Kind::Trigger => {
                let trigger = loads_as_its_examples_fold::<Trigger>(
                    &db.pool,
                    stream,
                    &of_stream,
                    |e| match e {
                        Event::Trigger(e) => Some(e),
                        _ => None,
                    },
                )
                .await;
                existing_triggers.extend(trigger.spec);
            }
            Kind::Job => {
                loads_as_its_examples_fold::<Job>(&db.pool, stream, &of_stream, |e| match e {
                    Event::Job(e) => Some(e),
                    _ => None,
                })
                .await;
            }
        }
    }
    assert!(
        !existing_triggers.is_empty(),
        "a trigger of the fixtures exists"
    );
    let indexed =
        trigger_index::function_triggers(&db.pool, &Namespace::parse(NS).unwrap(), "hello")
            .await
            .expect("the trigger index reads the release's trigger events");
    assert_eq!(
        indexed, existing_triggers,
        "the trigger index folds them alike"
    );
}
