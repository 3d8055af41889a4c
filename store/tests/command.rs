//! A command's writes in one statement (`sless_store::command`): the append,
//! its work item and its answer go together or not at all.

use std::sync::Arc;

use serde_json::json;
use sless_store::command::{self, Keep, Outcome, Write};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::idempotency::{self, StoredAnswer};
use sless_store::{Error, PgPool, queue};
use sless_testkit::TestDb;
use tokio::sync::Barrier;

fn event(n: u64) -> NewEvent {
    NewEvent {
        event_type: "Tested".to_owned(),
        namespace: "ns".to_owned(),
        data: json!({ "n": n }),
        metadata: Metadata {
            actor: "tester".to_owned(),
            ..Metadata::default()
        },
    }
}

fn answer(hash: &str) -> StoredAnswer {
    StoredAnswer {
        request_hash: hash.to_owned(),
        status: 201,
        body: json!({ "name": "f", "position": command::POSITION_PENDING }),
        headers: serde_json::Map::from_iter([("etag".to_owned(), json!("\"1\""))]),
    }
}

/// Runs one command alone (autocommit), with work for `stream` and, with
/// `key`, its answer kept.
async fn run(
    pool: &PgPool,
    stream: &str,
    expected: Option<u64>,
    events: &[NewEvent],
    key: Option<&str>,
) -> sless_store::Result<Outcome> {
    let kept = answer("h");
    let mut conn = pool.acquire().await.unwrap();
    command::run(
        &mut conn,
        Write {
            stream,
            expected,
            events,
            work: Some((queue::NOOP, stream)),
            answer: key.map(|key| Keep {
                actor: "tester",
                key,
                answer: &kept,
            }),
        },
    )
    .await
}

/// (events of `stream`, work items for it, idempotency keys kept).
async fn written(pool: &PgPool, stream: &str) -> (i64, i64, i64) {
    sqlx::query_as(
        "select (select count(*) from events where stream = $1),
                (select count(*) from work_items where key = $1),
                (select count(*) from idempotency_keys)",
    )
    .bind(stream)
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_command_appends_enqueues_and_keeps_its_answer_with_the_position() {
    let db = TestDb::new().await;
    let outcome = run(&db.pool, "s/a", Some(0), &[event(1)], Some("k1"))
        .await
        .unwrap();
    let Outcome::Appended(appended) = outcome else {
        panic!("expected an append, got {outcome:?}");
    };
    assert_eq!(appended.version, 1);
    let events = eventlog::read_stream(&db.pool, "s/a").await.unwrap();
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].position, appended.position);
    assert_eq!(written(&db.pool, "s/a").await, (1, 1, 1));

    let kept = idempotency::lookup(&db.pool, "tester", "k1")
        .await
        .unwrap()
        .expect("the answer is kept");
    assert_eq!(kept.status, 201);
    assert_eq!(kept.request_hash, "h");
    assert_eq!(kept.headers["etag"], json!("\"1\""));
    assert_eq!(
        kept.body,
        json!({ "name": "f", "position": appended.position }),
        "the database fills in the position the append wrote"
    );

    let mut body = answer("h").body;
    command::fill_position(&mut body, appended.position);
    assert_eq!(body, kept.body, "the caller's answer is the kept one");
}

#[tokio::test]
async fn a_conflict_writes_nothing() {
    let db = TestDb::new().await;
    run(&db.pool, "s/c", Some(0), &[event(1)], None)
        .await
        .unwrap();
    let refused = run(&db.pool, "s/c", Some(0), &[event(2)], Some("k"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            refused,
            Error::Conflict {
                expected: 0,
                actual: 1,
                ..
            }
        ),
        "{refused:?}"
    );
    // Behind (a stale version) and ahead (a version not yet reached).
    let ahead = run(&db.pool, "s/c", Some(5), &[event(3)], Some("k"))
        .await
        .unwrap_err();
    assert!(
        matches!(
            ahead,
            Error::Conflict {
                expected: 5,
                actual: 1,
                ..
            }
        ),
        "{ahead:?}"
    );
    assert_eq!(
        written(&db.pool, "s/c").await,
        (1, 1, 0),
        "no second event, no key kept"
    );
}

#[tokio::test]
async fn a_key_taken_by_another_request_rolls_the_whole_command_back() {
    let db = TestDb::new().await;
    run(&db.pool, "s/first", Some(0), &[event(1)], Some("same"))
        .await
        .unwrap();
    let second = run(&db.pool, "s/second", Some(0), &[event(2)], Some("same"))
        .await
        .unwrap();
    assert_eq!(second, Outcome::KeyTaken);
    assert_eq!(
        written(&db.pool, "s/second").await,
        (0, 0, 1),
        "the second command's event and work are rolled back with it"
    );
}

#[tokio::test]
async fn an_unchanged_command_keeps_its_answer_and_enqueues_nothing() {
    let db = TestDb::new().await;
    let outcome = run(&db.pool, "s/u", Some(0), &[], Some("k")).await.unwrap();
    assert!(matches!(outcome, Outcome::Appended(a) if a.version == 0 && a.position == 0));
    assert_eq!(written(&db.pool, "s/u").await, (0, 0, 1));
    let kept = idempotency::lookup(&db.pool, "tester", "k")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(kept.body["position"], json!(0));
}

#[tokio::test]
async fn a_command_in_a_transaction_must_be_its_first_write() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    queue::enqueue(&mut *tx, queue::NOOP, "other", &json!({}))
        .await
        .unwrap();
    let kept = answer("h");
    let refused = command::run(
        &mut tx,
        Write {
            stream: "s/t",
            expected: Some(0),
            events: &[event(1)],
            work: None,
            answer: Some(Keep {
                actor: "tester",
                key: "k",
                answer: &kept,
            }),
        },
    )
    .await
    .unwrap_err();
    assert!(matches!(refused, Error::Internal(_)), "{refused:?}");
}

/// Appends at the current version never conflict: 8 writers racing on one
/// stream leave versions 1..=n with no gap, in xid order.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn appends_at_the_current_version_never_conflict_and_leave_no_gap() {
    let db = TestDb::new().await;
    let (writers, each) = (8usize, 25u64);
    let barrier = Arc::new(Barrier::new(writers));
    let tasks: Vec<_> = (0..writers)
        .map(|w| {
            let (pool, barrier) = (db.pool.clone(), barrier.clone());
            tokio::spawn(async move {
                barrier.wait().await;
                for i in 0..each {
                    let outcome = run(&pool, "s/hot", None, &[event(w as u64 * 1000 + i)], None)
                        .await
                        .expect("an append at the current version is never refused");
                    assert!(matches!(outcome, Outcome::Appended(_)));
                }
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap();
    }
    let events = eventlog::read_stream(&db.pool, "s/hot").await.unwrap();
    let n = writers as i64 * each as i64;
    assert_eq!(
        events.iter().map(|e| e.version).collect::<Vec<_>>(),
        (1..=n).collect::<Vec<_>>()
    );
    let mut by_xid = events.clone();
    by_xid.sort_by_key(|e| (e.xid, e.position));
    assert_eq!(
        by_xid.iter().map(|e| e.version).collect::<Vec<_>>(),
        (1..=n).collect::<Vec<_>>(),
        "versions come out in xid order: the stream lock orders the appends"
    );
    // Plain appends at the current version take the same path.
    let appended =
        eventlog::append_at_current(&mut db.pool.acquire().await.unwrap(), "s/hot", &[event(0)])
            .await
            .unwrap();
    assert_eq!(appended.version, n as u64 + 1);
}

/// A command does not NOTIFY in its statement (notifying commits would be
/// serialised); the `Ringer` wakes the workers after it.
#[tokio::test]
async fn a_command_notifies_no_one_itself_and_the_ringer_wakes_the_workers() {
    let db = TestDb::new().await;
    let mut listener = sqlx::postgres::PgListener::connect_with(&db.pool)
        .await
        .unwrap();
    listener.listen(queue::CHANNEL).await.unwrap();
    run(&db.pool, "s/quiet", Some(0), &[event(1)], None)
        .await
        .unwrap();
    // Notifications arrive in commit order: the marker, sent after the
    // command committed, is the first one if the command sent none.
    sqlx::query("select pg_notify($1, 'marker')")
        .bind(queue::CHANNEL)
        .execute(&db.pool)
        .await
        .unwrap();
    let first = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
        .await
        .expect("the marker within 10 s")
        .unwrap();
    assert_eq!(first.payload(), "marker", "the command itself notified");

    let ringer = queue::Ringer::new(db.pool.clone());
    for _ in 0..50 {
        ringer.ring();
    }
    let rung = tokio::time::timeout(std::time::Duration::from_secs(10), listener.recv())
        .await
        .expect("a ring within 10 s")
        .unwrap();
    assert_eq!(rung.payload(), "");
}
