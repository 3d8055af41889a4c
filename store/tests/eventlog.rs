//! The event log's invariants (DESIGN.md §4), against a real PostgreSQL.

use std::sync::Arc;
use std::time::Duration;

use serde_json::json;
use sless_store::eventlog::{self, Checkpoint, Metadata, NewEvent, RecordedEvent};
use sless_store::idempotency::{self, StoredAnswer};
use sless_store::{Error, PgPool};
use sless_testkit::{TestDb, eventually};
use tokio::sync::Barrier;

fn event(event_type: &str, data: serde_json::Value) -> NewEvent {
    NewEvent {
        event_type: event_type.to_owned(),
        namespace: "ns".to_owned(),
        data,
        metadata: Metadata {
            actor: "tester".to_owned(),
            ..Metadata::default()
        },
    }
}

/// Appends `events` to `stream` in a transaction of its own and commits.
async fn append_committed(
    pool: &PgPool,
    stream: &str,
    expected: u64,
    events: &[NewEvent],
) -> eventlog::Appended {
    let mut tx = pool.begin().await.unwrap();
    let appended = eventlog::append(&mut tx, stream, expected, events)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    appended
}

/// Every event of the database that the watermark lets through, from the start.
async fn read_all_committed(pool: &PgPool) -> Vec<RecordedEvent> {
    let mut tx = pool.begin().await.unwrap();
    let watermark = eventlog::watermark(&mut tx).await.unwrap();
    let batch = eventlog::read_committed_batch(&mut tx, Checkpoint::default(), watermark, 1000)
        .await
        .unwrap();
    tx.rollback().await.unwrap();
    batch
}

/// `n` tasks each open a transaction, meet at a barrier, then append to the
/// same stream expecting version 0. Returns every task's result.
async fn race_first_appends(
    pool: &PgPool,
    stream: &str,
    n: usize,
) -> Vec<sless_store::Result<eventlog::Appended>> {
    let barrier = Arc::new(Barrier::new(n));
    let tasks: Vec<_> = (0..n)
        .map(|i| {
            let pool = pool.clone();
            let barrier = barrier.clone();
            let stream = stream.to_owned();
            tokio::spawn(async move {
                let mut tx = pool.begin().await.unwrap();
                barrier.wait().await;
                let result = eventlog::append(
                    &mut tx,
                    &stream,
                    0,
                    &[event("Created", json!({ "writer": i }))],
                )
                .await;
                if result.is_ok() {
                    tx.commit().await.unwrap();
                }
                result
            })
        })
        .collect();
    let mut results = Vec::new();
    for t in tasks {
        results.push(t.await.unwrap());
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_at_the_same_version_let_exactly_one_win() {
    let db = TestDb::new().await;
    for n in [2usize, 8] {
        let stream = format!("function/ns/race-{n}");
        let results = race_first_appends(&db.pool, &stream, n).await;

        let winners: Vec<_> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
        assert_eq!(
            winners.len(),
            1,
            "{n} racers: exactly one append commits, got {results:?}"
        );
        assert_eq!(winners[0].version, 1);
        for r in results.iter().filter(|r| r.is_err()) {
            assert!(
                matches!(r, Err(Error::Conflict { stream: s, expected: 0, actual: 1 }) if *s == stream),
                "{n} racers: a loser gets a conflict at version 1, got {r:?}"
            );
        }

        let events = eventlog::read_stream(&db.pool, &stream).await.unwrap();
        assert_eq!(
            events.len(),
            1,
            "{n} racers: the stream holds exactly the winner's event"
        );
        assert_eq!(events[0].version, 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_appends_to_different_streams_both_succeed_without_waiting_for_each_other() {
    let db = TestDb::new().await;
    // Both transactions must have appended while the other is still open: if
    // appends were serialised behind one lock, the second append would wait
    // for the first commit, which waits at the barrier, and the timeout fires.
    let barrier = Arc::new(Barrier::new(2));
    let tasks: Vec<_> = ["function/ns/one", "function/ns/two"]
        .into_iter()
        .map(|stream| {
            let pool = db.pool.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let mut tx = pool.begin().await.unwrap();
                barrier.wait().await;
                let appended =
                    eventlog::append(&mut tx, stream, 0, &[event("Created", json!({}))]).await;
                barrier.wait().await;
                tx.commit().await.unwrap();
                appended
            })
        })
        .collect();
    let results = tokio::time::timeout(
        Duration::from_secs(20),
        futures_util::future::join_all(tasks),
    )
    .await
    .expect("appends to different streams must not wait for each other");
    for r in results {
        let appended = r.unwrap().expect("an append to its own stream succeeds");
        assert_eq!(appended.version, 1);
    }
    for stream in ["function/ns/one", "function/ns/two"] {
        assert_eq!(
            eventlog::read_stream(&db.pool, stream).await.unwrap().len(),
            1,
            "{stream}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stale_append_is_refused_without_waiting_for_the_streams_lock() {
    let db = TestDb::new().await;
    let stream = "function/ns/hot";
    append_committed(&db.pool, stream, 0, &[event("Created", json!({}))]).await;
    // An append at version 1 holds the stream's lock and stays open.
    let mut holder = db.pool.begin().await.unwrap();
    eventlog::append(&mut holder, stream, 1, &[event("Uploaded", json!({}))])
        .await
        .unwrap();
    // A client that still believes the stream is new cannot win whatever
    // the holder does: it learns so at once, not after the holder ends.
    let mut stale = db.pool.begin().await.unwrap();
    let refused = tokio::time::timeout(
        Duration::from_secs(10),
        eventlog::append(&mut stale, stream, 0, &[event("Created", json!({}))]),
    )
    .await
    .expect("a stale append must not wait for the lock of an append it cannot follow");
    match refused {
        Err(Error::Conflict {
            expected, actual, ..
        }) => assert_eq!((expected, actual), (0, 1)),
        other => panic!("expected a conflict, got {other:?}"),
    }
    stale.rollback().await.unwrap();
    holder.commit().await.unwrap();
    assert_eq!(
        eventlog::read_stream(&db.pool, stream).await.unwrap().len(),
        2
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_that_finds_a_conflict_under_the_lock_lets_go_of_it_at_once() {
    let db = TestDb::new().await;
    let stream = "function/ns/hot";
    append_committed(&db.pool, stream, 0, &[event("Created", json!({}))]).await;
    // A client ahead of the stream passes the look before the lock, takes
    // the lock, finds its conflict, and keeps its transaction open.
    let mut loser = db.pool.begin().await.unwrap();
    let lost = eventlog::append(&mut loser, stream, 2, &[event("Uploaded", json!({}))]).await;
    assert!(
        matches!(lost, Err(Error::Conflict { actual: 1, .. })),
        "{lost:?}"
    );
    // The right append goes ahead without waiting for the loser to end.
    let mut winner = db.pool.begin().await.unwrap();
    let won = tokio::time::timeout(
        Duration::from_secs(10),
        eventlog::append(&mut winner, stream, 1, &[event("Uploaded", json!({}))]),
    )
    .await
    .expect("a losing append must not keep the stream's lock until its transaction ends")
    .unwrap();
    assert_eq!(won.version, 2);
    winner.commit().await.unwrap();
    loser.rollback().await.unwrap();
}

#[tokio::test]
async fn the_database_refuses_update_delete_and_truncate_of_events() {
    let db = TestDb::new().await;
    append_committed(
        &db.pool,
        "function/ns/f",
        0,
        &[
            event("Created", json!({ "a": 1 })),
            event("Updated", json!({ "a": 2 })),
        ],
    )
    .await;
    let before = eventlog::read_stream(&db.pool, "function/ns/f")
        .await
        .unwrap();
    assert_eq!(before.len(), 2);

    for statement in [
        "update events set data = '{}'",
        "delete from events",
        "truncate events",
        "delete from events where version = 2",
    ] {
        let err = sqlx::query(statement)
            .execute(&db.pool)
            .await
            .expect_err(statement);
        assert!(
            err.to_string().contains("append-only"),
            "{statement}: refused as append-only, got: {err}"
        );
    }

    let after = eventlog::read_stream(&db.pool, "function/ns/f")
        .await
        .unwrap();
    assert_eq!(after, before, "the events are unchanged");
}

#[tokio::test]
async fn an_append_that_is_not_the_first_write_of_its_transaction_is_refused() {
    let db = TestDb::new().await;
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("insert into idempotency_keys (actor, key, request_hash, status, response) values ('a', 'k', 'h', 201, '{}')")
        .execute(&mut *tx)
        .await
        .unwrap();
    let result =
        eventlog::append(&mut tx, "function/ns/f", 0, &[event("Created", json!({}))]).await;
    assert!(
        matches!(result, Err(Error::Internal(_))),
        "append after another write is refused, got {result:?}"
    );
    tx.rollback().await.unwrap();

    // Reads assign no transaction id, so an append after a read is still the first write.
    let mut tx = db.pool.begin().await.unwrap();
    let _: i64 = sqlx::query_scalar("select count(*) from events")
        .fetch_one(&mut *tx)
        .await
        .unwrap();
    eventlog::append(&mut tx, "function/ns/f", 0, &[event("Created", json!({}))])
        .await
        .expect("append after a read");
    tx.commit().await.unwrap();
    assert_eq!(
        eventlog::read_stream(&db.pool, "function/ns/f")
            .await
            .unwrap()
            .len(),
        1
    );
}

#[tokio::test]
async fn an_append_numbers_its_events_in_order_and_keeps_their_data_and_metadata() {
    let db = TestDb::new().await;
    let stream = "function/ns/f";
    let metadata = Metadata {
        actor: "alice".to_owned(),
        request_id: Some("req-1".to_owned()),
        correlation_id: Some("corr-1".to_owned()),
        causation_id: None,
        traceparent: None,
    };
    let events: Vec<NewEvent> = (1..=3)
        .map(|i| NewEvent {
            event_type: format!("Step{i}"),
            namespace: "ns".to_owned(),
            data: json!({ "step": i }),
            metadata: metadata.clone(),
        })
        .collect();

    let appended = append_committed(&db.pool, stream, 0, &events).await;
    assert_eq!(appended.version, 3);

    let read = eventlog::read_stream(&db.pool, stream).await.unwrap();
    assert_eq!(read.len(), 3);
    assert_eq!(
        appended.position, read[2].position,
        "the append reports the last event's position"
    );
    for (i, e) in read.iter().enumerate() {
        let n = i as i64 + 1;
        assert_eq!(e.version, n);
        assert_eq!(e.stream, stream);
        assert_eq!(e.event_type, format!("Step{n}"));
        assert_eq!(e.namespace, "ns");
        assert_eq!(e.data, json!({ "step": n }));
        assert_eq!(
            e.metadata,
            json!({ "actor": "alice", "request_id": "req-1", "correlation_id": "corr-1" })
        );
        assert_eq!(
            serde_json::from_value::<Metadata>(e.metadata.clone()).unwrap(),
            metadata
        );
        assert_eq!(e.xid, read[0].xid, "one append is one transaction");
    }
    assert!(
        read.windows(2).all(|w| w[0].position < w[1].position),
        "positions grow with versions"
    );

    let next = append_committed(&db.pool, stream, 3, &[event("Step4", json!({ "step": 4 }))]).await;
    assert_eq!(next.version, 4);
    assert!(next.position > appended.position);

    let mut tx = db.pool.begin().await.unwrap();
    let stale = eventlog::append(&mut tx, stream, 2, &[event("Late", json!({}))]).await;
    assert!(
        matches!(
            stale,
            Err(Error::Conflict {
                expected: 2,
                actual: 4,
                ..
            })
        ),
        "an append at a stale version conflicts, got {stale:?}"
    );
    drop(tx);
    assert_eq!(
        eventlog::read_stream(&db.pool, stream).await.unwrap().len(),
        4
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_committed_batch_holds_back_events_until_older_transactions_end() {
    let db = TestDb::new().await;

    // A appends first (smaller position and xid) and stays open.
    let mut a = db.pool.begin().await.unwrap();
    eventlog::append(
        &mut a,
        "function/ns/a",
        0,
        &[event("Created", json!({ "tx": "a" }))],
    )
    .await
    .unwrap();
    // C appends and will roll back.
    let mut c = db.pool.begin().await.unwrap();
    eventlog::append(
        &mut c,
        "function/ns/c",
        0,
        &[event("Created", json!({ "tx": "c" }))],
    )
    .await
    .unwrap();
    // B appends after both and commits first.
    append_committed(
        &db.pool,
        "function/ns/b",
        0,
        &[event("Created", json!({ "tx": "b" }))],
    )
    .await;

    // A reader trusting positions alone would read B and step past A's
    // position; the watermark holds B back while A (an older xid) is open.
    let mut reader = db.pool.begin().await.unwrap();
    let watermark = eventlog::watermark(&mut reader).await.unwrap();
    let batch = eventlog::read_committed_batch(&mut reader, Checkpoint::default(), watermark, 100)
        .await
        .unwrap();
    assert!(
        batch.is_empty(),
        "nothing is read while an older transaction is open, got {batch:?}"
    );
    assert!(
        eventlog::has_events_beyond(&mut reader, Checkpoint::default())
            .await
            .unwrap(),
        "B's event is held back"
    );
    reader.rollback().await.unwrap();

    a.commit().await.unwrap();
    c.rollback().await.unwrap();

    // Other tests' transactions on the same server may hold the watermark
    // back for a moment; wait for both events to pass it.
    let batch = eventually(
        "A's and B's events pass the watermark",
        Duration::from_secs(30),
        || async {
            let batch = read_all_committed(&db.pool).await;
            (batch.len() >= 2).then_some(batch)
        },
    )
    .await;
    let streams: Vec<&str> = batch.iter().map(|e| e.stream.as_str()).collect();
    assert_eq!(
        streams,
        ["function/ns/a", "function/ns/b"],
        "A then B, in xid order; C rolled back and never appears"
    );
    assert!(batch[0].xid < batch[1].xid);

    // Reading one at a time from the checkpoint pair gives the same sequence.
    let mut tx = db.pool.begin().await.unwrap();
    let watermark = eventlog::watermark(&mut tx).await.unwrap();
    let first = eventlog::read_committed_batch(&mut tx, Checkpoint::default(), watermark, 1)
        .await
        .unwrap();
    assert_eq!(first, batch[..1]);
    let at = Checkpoint {
        xid: first[0].xid,
        position: first[0].position,
    };
    let second = eventlog::read_committed_batch(&mut tx, at, watermark, 1)
        .await
        .unwrap();
    assert_eq!(second, batch[1..]);
    let end = Checkpoint {
        xid: second[0].xid,
        position: second[0].position,
    };
    assert!(
        eventlog::read_committed_batch(&mut tx, end, watermark, 100)
            .await
            .unwrap()
            .is_empty()
    );
    assert!(
        !eventlog::has_events_beyond(&mut tx, end).await.unwrap(),
        "the rolled-back event left nothing behind"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_committed_batch_orders_by_transaction_so_a_checkpoint_never_steps_past_an_older_one()
{
    let db = TestDb::new().await;
    // X takes its transaction id first but writes its event after Y, so X's
    // event has the smaller xid and the larger position. (Raw SQL: `append`
    // refuses a transaction that already has an id; this stands for two
    // appends whose xid and position were assigned in opposite orders.)
    let mut x = db.pool.begin().await.unwrap();
    let _: String = sqlx::query_scalar("select pg_current_xact_id()::text")
        .fetch_one(&mut *x)
        .await
        .unwrap();
    append_committed(
        &db.pool,
        "function/ns/y",
        0,
        &[event("Created", json!({ "tx": "y" }))],
    )
    .await;
    sqlx::query(
        "insert into events (stream, version, type, namespace, data) \
         values ('function/ns/x', 1, 'Created', 'ns', '{\"tx\": \"x\"}')",
    )
    .execute(&mut *x)
    .await
    .unwrap();
    x.commit().await.unwrap();

    let batch = eventually(
        "X's and Y's events pass the watermark",
        Duration::from_secs(30),
        || async {
            let batch = read_all_committed(&db.pool).await;
            (batch.len() >= 2).then_some(batch)
        },
    )
    .await;
    assert!(
        batch[0].position > batch[1].position,
        "the setup put X's position after Y's: {batch:?}"
    );
    let streams: Vec<&str> = batch.iter().map(|e| e.stream.as_str()).collect();
    assert_eq!(
        streams,
        ["function/ns/x", "function/ns/y"],
        "read in xid order, not position order"
    );

    // One at a time from the checkpoint pair, nothing is skipped.
    let mut tx = db.pool.begin().await.unwrap();
    let watermark = eventlog::watermark(&mut tx).await.unwrap();
    let mut at = Checkpoint::default();
    let mut seen = Vec::new();
    loop {
        let next = eventlog::read_committed_batch(&mut tx, at, watermark, 1)
            .await
            .unwrap();
        let Some(e) = next.into_iter().next() else {
            break;
        };
        at = Checkpoint {
            xid: e.xid,
            position: e.position,
        };
        seen.push(e);
    }
    assert_eq!(seen, batch);
}

#[tokio::test]
async fn an_append_of_no_events_checks_the_version_and_writes_nothing() {
    let db = TestDb::new().await;
    let stream = "function/ns/f";
    append_committed(&db.pool, stream, 0, &[event("Created", json!({}))]).await;

    let mut tx = db.pool.begin().await.unwrap();
    let same = eventlog::append(&mut tx, stream, 1, &[]).await.unwrap();
    assert_eq!(
        same,
        eventlog::Appended {
            version: 1,
            position: 0
        }
    );
    let stale = eventlog::append(&mut tx, stream, 0, &[]).await;
    assert!(
        matches!(
            stale,
            Err(Error::Conflict {
                expected: 0,
                actual: 1,
                ..
            })
        ),
        "an empty append at a stale version conflicts, got {stale:?}"
    );
    tx.commit().await.unwrap();
    assert_eq!(
        eventlog::read_stream(&db.pool, stream).await.unwrap().len(),
        1
    );
}

/// The backend pid of a pooled connection.
async fn backend_pid(conn: &mut sqlx::PgConnection) -> i32 {
    sqlx::query_scalar("select pg_backend_pid()")
        .fetch_one(conn)
        .await
        .unwrap()
}

/// Appends one event on `conn` in a transaction of its own and commits.
async fn append_on(conn: &mut sqlx::PgConnection, stream: &str) {
    let mut tx = sqlx::Connection::begin(&mut *conn).await.unwrap();
    eventlog::append(&mut tx, stream, 0, &[event("Created", json!({}))])
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_append_notifies_only_while_a_projector_sleeps_at_the_doorbell() {
    let db = TestDb::new().await;
    let mut listener = sqlx::postgres::PgListener::connect(&db.url).await.unwrap();
    listener.listen(eventlog::EVENTS_CHANNEL).await.unwrap();
    let (k1, k2) = eventlog::DOORBELL;

    // Nobody sleeps at the doorbell: this append does not ring.
    let mut quiet = db.pool.acquire().await.unwrap();
    let quiet_pid = backend_pid(&mut quiet).await;
    append_on(&mut quiet, "function/ns/quiet").await;

    // A projector falls asleep; the next append rings.
    let mut sleeper = db.pool.acquire().await.unwrap();
    sqlx::query("select pg_advisory_lock($1, $2)")
        .bind(k1)
        .bind(k2)
        .execute(&mut *sleeper)
        .await
        .unwrap();
    let mut ringing = db.pool.acquire().await.unwrap();
    let ringing_pid = backend_pid(&mut ringing).await;
    append_on(&mut ringing, "function/ns/ringing").await;

    // Notifications arrive in commit order: had the first append rung, its
    // notification would come first.
    let first = tokio::time::timeout(Duration::from_secs(30), listener.recv())
        .await
        .expect("the append to a sleeping projector notifies")
        .unwrap();
    assert_ne!(
        first.process_id() as i32,
        quiet_pid,
        "an append rang while no projector slept"
    );
    assert_eq!(first.process_id() as i32, ringing_pid);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_cannot_fall_asleep_before_an_append_that_did_not_ring_has_ended() {
    let db = TestDb::new().await;
    let (k1, k2) = eventlog::DOORBELL;
    let mut sleeper = db.pool.acquire().await.unwrap();
    let mut try_to_sleep = async || -> bool {
        sqlx::query_scalar("select pg_try_advisory_lock($1, $2)")
            .bind(k1)
            .bind(k2)
            .fetch_one(&mut *sleeper)
            .await
            .unwrap()
    };

    // An append that found no sleeper is open: the projector must not sleep,
    // or that append's event would wait for the polling fallback.
    let mut open = db.pool.begin().await.unwrap();
    eventlog::append(
        &mut open,
        "function/ns/f",
        0,
        &[event("Created", json!({}))],
    )
    .await
    .unwrap();
    assert!(
        !try_to_sleep().await,
        "the doorbell was free while an append that did not ring was open"
    );
    open.commit().await.unwrap();
    assert!(
        try_to_sleep().await,
        "the doorbell is free once the append has committed"
    );
}

#[tokio::test]
async fn an_idempotency_key_keeps_its_first_answer_and_cannot_be_saved_twice() {
    let db = TestDb::new().await;
    let answer = StoredAnswer {
        request_hash: "hash-1".to_owned(),
        status: 201,
        body: json!({ "version": 1 }),
        headers: json!({ "etag": "\"1\"" }).as_object().unwrap().clone(),
    };

    assert_eq!(
        idempotency::lookup(&db.pool, "alice", "key-1")
            .await
            .unwrap(),
        None
    );
    idempotency::save(&db.pool, "alice", "key-1", &answer)
        .await
        .unwrap();
    assert_eq!(
        idempotency::lookup(&db.pool, "alice", "key-1")
            .await
            .unwrap(),
        Some(answer.clone())
    );

    let other = StoredAnswer {
        request_hash: "hash-2".to_owned(),
        status: 200,
        body: json!({ "version": 2 }),
        headers: Default::default(),
    };
    let err = idempotency::save(&db.pool, "alice", "key-1", &other)
        .await
        .expect_err("second save of one key");
    assert!(
        err.is_unique_violation(),
        "a second save is a unique violation, got {err:?}"
    );
    assert_eq!(
        idempotency::lookup(&db.pool, "alice", "key-1")
            .await
            .unwrap(),
        Some(answer),
        "the first answer stands"
    );

    // Keys belong to an actor: another actor may use the same key.
    idempotency::save(&db.pool, "bob", "key-1", &other)
        .await
        .unwrap();
    assert_eq!(
        idempotency::lookup(&db.pool, "bob", "key-1").await.unwrap(),
        Some(other)
    );
}

/// What a caller may write in JSON, the log gives back as it was: the
/// largest and smallest doubles, a denormal, many digits. PostgreSQL keeps
/// a number in `jsonb` as a decimal and writes it out in full (the largest
/// double as 309 digits), which must still read as the same double.
#[tokio::test]
async fn numbers_at_the_edges_of_a_double_read_back_as_they_were_written() {
    let db = TestDb::new().await;
    let numbers = [
        f64::MAX,
        f64::MIN,
        f64::MIN_POSITIVE,
        5e-324,
        0.1 + 0.2,
        1e300,
        -2.5e-300,
    ];
    let data = json!({ "numbers": numbers, "big": u64::MAX, "small": i64::MIN });
    append_committed(
        &db.pool,
        "function/ns/numbers",
        0,
        &[event("Numbers", data.clone())],
    )
    .await;
    let read = eventlog::read_stream(&db.pool, "function/ns/numbers")
        .await
        .expect("the event reads back");
    assert_eq!(read[0].data, data);
    let all = read_all_committed(&db.pool).await;
    assert_eq!(all.last().unwrap().data, data);
}
