//! Work items, both ways, against PostgreSQL: each kind of item, written by
//! each path today's code writes it on, is the row `work_items.json` holds
//! (new → old); each of those rows, inserted as the release before wrote
//! it, is claimed by today's claimers and its key and payload read as the
//! workers read them (old → new).
//!
//! The readers of a payload live in the workers (`reconcile`: the key is a
//! function's `{ns}/{name}`; `jobs`: the key is the job's stream;
//! `collect`: the payload's `key` is the blob's; the traces: `traceparent`
//! and `links`, `queue::trace_of`); the checks below read them the same
//! way, with the same store and domain calls where there is one.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use serde_json::{Value, json};
use sless_domain::job::Job;
use sless_domain::{Function, FunctionKey, FunctionName, Namespace};
use sless_store::command::{self, Write};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::queue::{self, Kinds, WorkItem};
use sless_store::system::{self, SystemCommand};
use sless_store::{PgPool, retention};
use sless_testkit::TestDb;
use sqlx::Row;

use crate::examples::{self, Event, Example, NS, TRACEPARENT};
use crate::fixture::{self, differences, name};

const FILE: &str = "work_items.json";
const ABOUT: &str = "Work items as sless writes them: one entry per way today's code enqueues an item \
    (store/tests/compat/work.rs), the fields of its row in work_items as enqueued. Entries are what a \
    release wrote: they are added (SLESS_BLESS=1 cargo test -p sless-store --test compat), never changed \
    or removed. Every one must be claimed and read by today's queue and workers, and today's code must \
    write each as it is.";

/// Every kind of work the queue carries, and every way it is enqueued.
const EXAMPLES: [&str; 10] = [
    "ReconcileFunction",
    "ReconcileFunction/command",
    "ReconcileFunction/system",
    "ReconcileFunction/every-function",
    "ReconcileFunction/traced",
    "ReconcileFunction/superseded",
    "RunJob",
    "RunJob/cron",
    "CollectBlob",
    "Noop",
];

/// Every kind a worker handles (`workers/src/worker.rs`, `handle`).
const KINDS: [&str; 4] = [
    queue::RECONCILE_FUNCTION,
    queue::RUN_JOB,
    retention::COLLECT_BLOB,
    queue::NOOP,
];

const LEASE: Duration = Duration::from_secs(300);
const OTHER_TRACEPARENT: &str = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";

fn ns() -> Namespace {
    Namespace::parse(NS).unwrap()
}

fn function(name: &str) -> FunctionKey {
    FunctionKey::new(ns(), FunctionName::parse(name).unwrap())
}

fn example(name: &str) -> Example {
    examples::all()
        .into_iter()
        .find(|e| e.name == name)
        .unwrap_or_else(|| panic!("no event example {name}"))
}

fn function_event(name: &str) -> sless_domain::FunctionEvent {
    match example(name).event {
        Event::Function(e) => e,
        other => panic!("{name} is not a function's event: {other:?}"),
    }
}

fn job_event(name: &str) -> sless_domain::job::JobEvent {
    match example(name).event {
        Event::Job(e) => e,
        other => panic!("{name} is not a job's event: {other:?}"),
    }
}

/// Writes example `name` the way today's code does; returns its key.
async fn write(pool: &PgPool, name: &str) -> String {
    let request = Metadata {
        actor: "alice".into(),
        ..Default::default()
    };
    match name {
        "ReconcileFunction" => {
            let key = function("hello").queue_key();
            queue::enqueue_reconcile(pool, &key).await.unwrap();
            key
        }
        // A command's work, enqueued by `run_command` with its events.
        "ReconcileFunction/command" => {
            let key = function("made");
            let events = [NewEvent::function(
                &key,
                &function_event("FunctionCreated/minimal"),
                request,
            )];
            let (stream, queue_key) = (key.stream(), key.queue_key());
            let mut conn = pool.acquire().await.unwrap();
            let write = Write {
                stream: &stream,
                expected: Some(0),
                events: &events,
                work: Some((queue::RECONCILE_FUNCTION, &queue_key)),
                answer: None,
            };
            command::run(&mut conn, write).await.unwrap();
            queue_key
        }
        // A decision of sless's own (a call that wakes a function at zero).
        "ReconcileFunction/system" => {
            let key = function("woken");
            let cmd = SystemCommand::new(key.stream(), &ns(), Metadata::system("proxy", 1))
                .reconcile(key.queue_key());
            let event = function_event("FunctionScaledUp");
            system::execute::<Function>(pool, &cmd, |_| Ok(vec![event.clone()]))
                .await
                .unwrap();
            key.queue_key()
        }
        // `sless reconcile`: one item per function stream.
        "ReconcileFunction/every-function" => {
            let key = function("everyone");
            let events = [NewEvent::function(
                &key,
                &function_event("FunctionCreated/minimal"),
                request,
            )];
            let mut conn = pool.acquire().await.unwrap();
            eventlog::append(&mut conn, &key.stream(), 0, &events)
                .await
                .unwrap();
            queue::enqueue_reconcile_all(pool).await.unwrap();
            key.queue_key()
        }
        // With traces on, `enqueue` records the trace it ran in.
        "ReconcileFunction/traced" => {
            let key = function("traced").queue_key();
            let payload = json!({"traceparent": TRACEPARENT});
            queue::enqueue(pool, queue::RECONCILE_FUNCTION, &key, &payload)
                .await
                .unwrap();
            key
        }
        // A second enqueue supersedes the first and links its cause.
        "ReconcileFunction/superseded" => {
            let key = function("superseded").queue_key();
            for tp in [OTHER_TRACEPARENT, TRACEPARENT] {
                let payload = json!({"traceparent": tp});
                queue::enqueue(pool, queue::RECONCILE_FUNCTION, &key, &payload)
                    .await
                    .unwrap();
            }
            key
        }
        // A job a user asked for: the API's command.
        "RunJob" => {
            let stream = examples::job_streams()[0].clone();
            let event = job_event("JobRequested");
            let events = [NewEvent::job(&ns(), &event, request)];
            let mut conn = pool.acquire().await.unwrap();
            let write = Write {
                stream: &stream,
                expected: Some(0),
                events: &events,
                work: Some((queue::RUN_JOB, &stream)),
                answer: None,
            };
            command::run(&mut conn, write).await.unwrap();
            stream
        }
        // A cron tick's run: the scheduler's command, linking the tick.
        "RunJob/cron" => {
            let stream = examples::job_streams()[1].clone();
            let metadata = Metadata {
                actor: "system:scheduler".into(),
                ..Default::default()
            };
            let cmd = SystemCommand::new(stream.clone(), &ns(), metadata)
                .stands_on_its_state()
                .work(
                    queue::RUN_JOB,
                    stream.clone(),
                    json!({"links": [TRACEPARENT]}),
                );
            let event = job_event("JobRequested/cron");
            system::execute::<Job>(pool, &cmd, |_| Ok(vec![event.clone()]))
                .await
                .unwrap();
            stream
        }
        "CollectBlob" => {
            let blob = format!("blobs/zips/{}.zip", "a".repeat(64));
            let mut conn = pool.acquire().await.unwrap();
            retention::enqueue_collect(&mut conn, &blob).await.unwrap();
            format!("blob/{blob}")
        }
        // The queue benchmark's items.
        "Noop" => {
            let key = "pickup/1";
            queue::enqueue(pool, queue::NOOP, key, &json!({"seq": 1}))
                .await
                .unwrap();
            key.to_owned()
        }
        other => panic!("no way to write {other}"),
    }
}

/// The row of `key`, as a fixture entry named `name`.
async fn row(pool: &PgPool, name: &str, key: &str) -> Value {
    let r = sqlx::query(
        "select kind, key, payload, state, attempts, max_attempts, lease_owner, last_error
         from work_items where key = $1",
    )
    .bind(key)
    .fetch_one(pool)
    .await
    .unwrap_or_else(|e| panic!("{name}: no item of key {key}: {e}"));
    json!({
        "name": name,
        "kind": r.get::<String, _>("kind"),
        "key": r.get::<String, _>("key"),
        "payload": r.get::<Value, _>("payload"),
        "state": r.get::<String, _>("state"),
        "attempts": r.get::<i32, _>("attempts"),
        "max_attempts": r.get::<i32, _>("max_attempts"),
        "lease_owner": r.get::<Option<String>, _>("lease_owner"),
        "last_error": r.get::<Option<String>, _>("last_error"),
    })
}

/// Every example as today's code writes it, each on a queue of its own.
async fn written_today(pool: &PgPool) -> Vec<Value> {
    let mut rows = Vec::new();
    for name in EXAMPLES {
        let key = write(pool, name).await;
        rows.push(row(pool, name, &key).await);
        sqlx::query("delete from work_items")
            .execute(pool)
            .await
            .unwrap();
    }
    rows
}

/// New → old: each way today's code enqueues writes the row the release
/// before wrote, and every kind of work has a fixture.
#[tokio::test]
async fn todays_code_writes_every_work_item_as_its_fixture() {
    let db = TestDb::new().await;
    let today = written_today(&db.pool).await;
    let fixtures = fixture::load_or_bless(FILE, ABOUT, &today);
    let fixtures: BTreeMap<&str, &Value> = fixtures.iter().map(|f| (name(f), f)).collect();
    let mut wrong = Vec::new();
    for written in &today {
        match fixtures.get(name(written)) {
            None => wrong.push(format!("{}: no fixture; bless it", name(written))),
            Some(f) => wrong.extend(
                differences(f, written)
                    .into_iter()
                    .map(|d| format!("{}: {d}", name(written))),
            ),
        }
    }
    assert!(
        wrong.is_empty(),
        "today's code enqueues what the release before may not read:\n{}",
        wrong.join("\n")
    );
    let kinds: BTreeSet<&str> = fixtures
        .values()
        .filter_map(|f| f["kind"].as_str())
        .collect();
    assert_eq!(
        kinds,
        BTreeSet::from(KINDS),
        "every kind of work has a fixture, and no fixture has a kind today's workers do not handle"
    );
}

/// Reads `item` as its worker does; panics naming what it could not read.
fn read_as_its_worker_does(item: &WorkItem) {
    let key = &item.key;
    match item.kind.as_str() {
        queue::RECONCILE_FUNCTION => {
            FunctionKey::from_queue_key(key)
                .unwrap_or_else(|e| panic!("{key}: not a function's key: {e}"));
        }
        queue::RUN_JOB => {
            let mut parts = key.splitn(3, '/');
            assert!(
                matches!(parts.next(), Some("job" | "cron")),
                "{key}: not a job's stream"
            );
            Namespace::parse(parts.next().unwrap_or_default())
                .unwrap_or_else(|e| panic!("{key}: no namespace: {e}"));
        }
        retention::COLLECT_BLOB => {
            let blob = item.payload["key"]
                .as_str()
                .unwrap_or_else(|| panic!("{key}: a blob's item without its key"));
            assert_eq!(key, &format!("blob/{blob}"));
        }
        queue::NOOP => {}
        other => panic!("{key}: a kind no worker handles: {other}"),
    }
    let (parent, links) = queue::trace_of(item);
    assert_eq!(parent, item.payload["traceparent"].as_str(), "{key}");
    let listed: Vec<&str> = item.payload["links"]
        .as_array()
        .map(|l| l.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    assert_eq!(links, listed, "{key}");
}

/// Old → new: the rows the release before wrote are claimed by today's
/// claimers, each by its own pool's, and read as today's workers read them.
#[tokio::test]
async fn work_items_a_release_wrote_are_claimed_and_read_by_todays_queue() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let fixtures = fixture::load(FILE);
    for f in &fixtures {
        sqlx::query(
            "insert into work_items (kind, key, payload, state, attempts, max_attempts, lease_owner, last_error)
             values ($1, $2, $3, $4, $5, $6, $7, $8)",
        )
        .bind(f["kind"].as_str())
        .bind(f["key"].as_str())
        .bind(&f["payload"])
        .bind(f["state"].as_str())
        .bind(f["attempts"].as_i64().map(|a| a as i32))
        .bind(f["max_attempts"].as_i64().map(|a| a as i32))
        .bind(f["lease_owner"].as_str())
        .bind(f["last_error"].as_str())
        .execute(pool)
        .await
        .unwrap_or_else(|e| panic!("{}: inserting the release's row: {e}", name(f)));
    }
    let jobs = queue::claim_kinds(pool, "new", Kinds::Jobs, 100, LEASE)
        .await
        .unwrap();
    let others = queue::claim_kinds(pool, "new", Kinds::AllButJobs, 100, LEASE)
        .await
        .unwrap();
    assert!(jobs.iter().all(|i| i.kind == queue::RUN_JOB), "{jobs:?}");
    assert!(
        others.iter().all(|i| i.kind != queue::RUN_JOB),
        "{others:?}"
    );
    let claimed: BTreeMap<&str, &WorkItem> = jobs
        .iter()
        .chain(&others)
        .map(|i| (i.key.as_str(), i))
        .collect();
    for f in &fixtures {
        let n = name(f);
        let key = f["key"].as_str().expect("a key");
        let item = claimed.get(key).unwrap_or_else(|| {
            let keys: Vec<&&str> = claimed.keys().collect();
            panic!("{n}: today's claimers left it; they took {keys:?}")
        });
        assert_eq!(item.kind, f["kind"].as_str().unwrap(), "{n}");
        assert_eq!(item.payload, f["payload"], "{n}");
        assert_eq!(item.attempt, 1, "{n}: its first attempt");
        read_as_its_worker_does(item);
    }
    let all: Vec<(i64, i32)> = claimed.values().map(|i| (i.id, i.attempt)).collect();
    let done = queue::complete_many(pool, "new", &all).await.unwrap();
    assert_eq!(done.len(), fixtures.len());
    assert_eq!(queue::counts(pool).await.unwrap(), (0, 0));
}
