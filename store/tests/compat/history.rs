//! The oldest rows: events as the first commit that had each type (or each
//! optional field) wrote them, made by that commit's own domain crate
//! (`history.json` says how). Today's code reads them, and writes the value
//! it read back as it was: no field was ever renamed, removed, or added
//! without a default that leaves it out.

use serde_json::Value;
use sless_domain::Function;
use sless_domain::job::Job;
use sless_domain::trigger::Trigger;

use crate::examples::{Event, Kind};
use crate::fixture::{self, differences, name};

fn kind(entry: &Value) -> Kind {
    match entry["aggregate"].as_str() {
        Some("function") => Kind::Function,
        Some("namespace") => Kind::Namespace,
        Some("trigger") => Kind::Trigger,
        Some("job") => Kind::Job,
        other => panic!("{}: no aggregate {other:?}", name(entry)),
    }
}

#[test]
fn events_of_the_first_commits_are_read_and_written_back_as_they_were() {
    let entries = fixture::load("history.json");
    assert!(
        entries.iter().any(|e| e["commit"] == "e07fdce"),
        "the first commit's events are there"
    );
    let mut decoded = Vec::new();
    let mut wrong = Vec::new();
    for e in &entries {
        let n = name(e);
        let event = kind(e)
            .decode(e["type"].as_str().expect("a type"), &e["data"])
            .unwrap_or_else(|err| panic!("{n}: today's code cannot read it: {err}"));
        let written = serde_json::json!({"type": event.type_name(), "data": event.data()});
        let stored = serde_json::json!({"type": e["type"], "data": e["data"]});
        wrong.extend(
            differences(&stored, &written)
                .into_iter()
                .map(|d| format!("{n}: {d}")),
        );
        decoded.push(event);
    }
    assert!(wrong.is_empty(), "{}", wrong.join("\n"));

    // They fold into today's aggregates, each aggregate's in the order the
    // commits wrote them.
    let count = |k: Kind| entries.iter().filter(|e| kind(e) == k).count() as u64;
    let function = Function::fold(decoded.iter().filter_map(|e| match e {
        Event::Function(e) => Some(e),
        _ => None,
    }));
    assert_eq!(function.stream_version, count(Kind::Function));
    let trigger = Trigger::fold(decoded.iter().filter_map(|e| match e {
        Event::Trigger(e) => Some(e),
        _ => None,
    }));
    assert_eq!(trigger.stream_version, count(Kind::Trigger));
    let job = Job::fold(decoded.iter().filter_map(|e| match e {
        Event::Job(e) => Some(e),
        _ => None,
    }));
    assert_eq!(job.stream_version, count(Kind::Job));
}
