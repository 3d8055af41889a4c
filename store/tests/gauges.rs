//! What `/metrics` reads from the database: a projection's checkpoint and
//! the committed events past it, and the queue's items by kind and state.

use std::time::Duration;

use serde_json::json;
use sless_store::eventlog::{self, Checkpoint, Metadata, NewEvent};
use sless_store::{gauges, queue};
use sless_testkit::{TestDb, eventually};

#[tokio::test]
async fn a_projection_behind_the_log_reads_how_far_and_one_caught_up_reads_zero() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    sqlx::query("insert into projector_checkpoints (name) values ('held-back')")
        .execute(pool)
        .await
        .unwrap();
    let event = NewEvent {
        event_type: "Tested".into(),
        namespace: "ns".into(),
        data: json!({}),
        metadata: Metadata {
            actor: "tester".into(),
            ..Metadata::default()
        },
    };
    for i in 0..3 {
        let mut tx = pool.begin().await.unwrap();
        eventlog::append(
            &mut tx,
            &format!("test/ns/s{i}"),
            0,
            std::slice::from_ref(&event),
        )
        .await
        .unwrap();
        tx.commit().await.unwrap();
    }
    let held = |all: Vec<gauges::Projection>| {
        all.into_iter()
            .find(|p| p.name == "held-back")
            .expect("the projection")
    };
    let p = held(gauges::projections(pool).await.unwrap());
    assert_eq!((p.position, p.behind), (0, 3), "{p:?}");
    assert!(p.behind_secs >= 0.0);

    // Caught up: the checkpoint past the last event, once the watermark is
    // past all three (a transaction another test holds open in the same
    // cluster keeps it below them for a moment).
    let events = eventually(
        "the watermark past the three events",
        Duration::from_secs(10),
        || async {
            let mut tx = pool.begin().await.unwrap();
            let watermark = eventlog::watermark(&mut tx).await.unwrap();
            let events =
                eventlog::read_committed_batch(&mut tx, Checkpoint::default(), watermark, 100)
                    .await
                    .unwrap();
            tx.rollback().await.unwrap();
            (events.len() == 3).then_some(events)
        },
    )
    .await;
    let last = events.last().unwrap();
    sqlx::query(
        "update projector_checkpoints set xid = $1, position = $2 where name = 'held-back'",
    )
    .bind(last.xid)
    .bind(last.position)
    .execute(pool)
    .await
    .unwrap();
    let p = held(gauges::projections(pool).await.unwrap());
    assert_eq!(
        (p.position, p.behind, p.behind_secs),
        (last.position, 0, 0.0)
    );
}

#[tokio::test]
async fn the_queue_reads_its_items_by_kind_and_state() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    assert_eq!(gauges::queue(pool).await.unwrap(), vec![]);
    queue::enqueue_reconcile(pool, "ns/a").await.unwrap();
    queue::enqueue_reconcile(pool, "ns/b").await.unwrap();
    queue::enqueue_reconcile(pool, "ns/b").await.unwrap(); // one pending per key
    let items = gauges::queue(pool).await.unwrap();
    assert_eq!(items.len(), 1, "{items:?}");
    assert_eq!(
        (items[0].1.as_str(), items[0].2),
        ("pending", 2),
        "{items:?}"
    );
}
