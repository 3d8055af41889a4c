//! The work queue's invariants (DESIGN.md §5), against a real PostgreSQL.

use std::collections::BTreeSet;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use chrono::Utc;
use serde_json::json;
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::queue::{self, Backoff, Retry, WorkItem};
use sless_testkit::{TestDb, eventually};
use sqlx::Row;
use sqlx::postgres::PgListener;
use tokio::sync::Barrier;

const LONG: Duration = Duration::from_secs(300);
const SHORT: Duration = Duration::from_secs(1);

async fn enqueue(pool: &PgPool, key: &str, payload: serde_json::Value) {
    queue::enqueue(pool, queue::RECONCILE_FUNCTION, key, &payload)
        .await
        .unwrap();
}

/// One row of `work_items`, as the tests look at it.
#[derive(Debug, Clone, PartialEq)]
struct ItemRow {
    id: i64,
    key: String,
    state: String,
    payload: serde_json::Value,
    attempts: i32,
    lease_owner: Option<String>,
    last_error: Option<String>,
    due_now: bool,
}

async fn rows(pool: &PgPool) -> Vec<ItemRow> {
    sqlx::query(
        "select id, key, state, payload, attempts, lease_owner, last_error, run_at <= now() as due_now
         from work_items order by id",
    )
    .fetch_all(pool)
    .await
    .unwrap()
    .into_iter()
    .map(|r| ItemRow {
        id: r.get("id"),
        key: r.get("key"),
        state: r.get("state"),
        payload: r.get("payload"),
        attempts: r.get("attempts"),
        lease_owner: r.get("lease_owner"),
        last_error: r.get("last_error"),
        due_now: r.get("due_now"),
    })
    .collect()
}

/// Waits until the expired leases have been released, `n` items in all.
async fn release_expired_until(pool: &PgPool, n: u64) {
    let released = AtomicU64::new(0);
    let total = &released;
    eventually(
        "expired leases to be released",
        Duration::from_secs(30),
        || async move {
            let just_now = queue::release_expired(pool).await.unwrap();
            let sum = total.fetch_add(just_now, Ordering::SeqCst) + just_now;
            (sum >= n).then_some(())
        },
    )
    .await;
    assert_eq!(released.into_inner(), n, "exactly {n} items released");
}

async fn holds_lease(pool: &PgPool, item: &WorkItem) -> bool {
    let mut tx = pool.begin().await.unwrap();
    let held = queue::holds_lease(&mut tx, item).await.unwrap();
    tx.rollback().await.unwrap();
    held
}

fn ids(items: &[WorkItem]) -> BTreeSet<i64> {
    items.iter().map(|i| i.id).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn claim_skips_items_locked_by_another_transaction_without_waiting() {
    let db = TestDb::new().await;
    for i in 0..10 {
        enqueue(&db.pool, &format!("ns/f{i}"), json!({})).await;
    }

    // Another transaction holds four of the rows.
    let mut locker = db.pool.begin().await.unwrap();
    let locked: BTreeSet<i64> = sqlx::query_scalar(
        "select id from work_items where key in ('ns/f0', 'ns/f3', 'ns/f5', 'ns/f9') for update",
    )
    .fetch_all(&mut *locker)
    .await
    .unwrap()
    .into_iter()
    .collect();
    assert_eq!(locked.len(), 4);

    let first = tokio::time::timeout(
        Duration::from_secs(10),
        queue::claim(&db.pool, "w1", 10, LONG),
    )
    .await
    .expect("claim must skip locked rows, not wait for them")
    .unwrap();
    assert_eq!(first.len(), 6);
    assert!(
        ids(&first).is_disjoint(&locked),
        "claim took a locked row: {first:?}"
    );

    locker.rollback().await.unwrap();
    let second = queue::claim(&db.pool, "w2", 10, LONG).await.unwrap();
    assert_eq!(ids(&second), locked, "the rows once unlocked are claimable");
    assert_eq!(queue::counts(&db.pool).await.unwrap(), (0, 10));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_claims_take_disjoint_items_and_together_take_all() {
    let db = TestDb::new().await;
    for i in 0..10 {
        enqueue(&db.pool, &format!("ns/f{i}"), json!({})).await;
    }
    let all: BTreeSet<i64> = rows(&db.pool).await.iter().map(|r| r.id).collect();
    for round in 0..5 {
        // Put everything back to pending for the next round.
        sqlx::query("update work_items set state = 'pending', attempts = 0, lease_owner = null, lease_until = null")
            .execute(&db.pool)
            .await
            .unwrap();
        let barrier = Arc::new(Barrier::new(2));
        let tasks: Vec<_> = ["w1", "w2"]
            .into_iter()
            .map(|owner| {
                let pool = db.pool.clone();
                let barrier = barrier.clone();
                tokio::spawn(async move {
                    barrier.wait().await;
                    queue::claim(&pool, owner, 10, LONG).await.unwrap()
                })
            })
            .collect();
        let a = tasks.into_iter().map(|t| async { t.await.unwrap() });
        let claimed = futures_util::future::join_all(a).await;
        let (x, y) = (ids(&claimed[0]), ids(&claimed[1]));
        assert!(
            x.is_disjoint(&y),
            "round {round}: both claims took {:?}",
            x.intersection(&y).collect::<Vec<_>>()
        );
        assert_eq!(
            &x | &y,
            all,
            "round {round}: together the claims take every item"
        );
        assert!(
            claimed.iter().flatten().all(|i| i.attempt == 1),
            "round {round}: every item claimed once"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn fifty_concurrent_enqueues_of_one_reconcile_leave_one_pending_item() {
    let db = TestDb::new().await;
    // A pool of its own with a connection for every task.
    let pool = sless_store::connect(&db.url, 60).await.unwrap();
    let barrier = Arc::new(Barrier::new(50));
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let pool = pool.clone();
            let barrier = barrier.clone();
            tokio::spawn(async move {
                let mut conn = pool.acquire().await.unwrap();
                barrier.wait().await;
                queue::enqueue_reconcile(&mut *conn, "ns/f").await
            })
        })
        .collect();
    for t in tasks {
        t.await.unwrap().expect("every enqueue succeeds");
    }
    assert_eq!(queue::counts(&db.pool).await.unwrap(), (1, 0));
    let rows = rows(&db.pool).await;
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].key, "ns/f");
}

#[tokio::test]
async fn a_key_never_has_two_items_running() {
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/f", json!({ "v": 1 })).await;
    let first = queue::claim(&db.pool, "w1", 10, LONG).await.unwrap();
    assert_eq!(first.len(), 1);

    enqueue(&db.pool, "ns/f", json!({ "v": 2 })).await;
    assert_eq!(
        queue::counts(&db.pool).await.unwrap(),
        (1, 1),
        "new work waits beside the running item"
    );
    // Work for other keys is still claimed beside the blocked key.
    enqueue(&db.pool, "ns/g", json!({})).await;
    let others = queue::claim(&db.pool, "w2", 10, LONG).await.unwrap();
    let keys: Vec<&str> = others.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(keys, ["ns/g"], "nothing of ns/f is claimable while it runs");

    assert!(queue::complete(&db.pool, &first[0]).await.unwrap());
    let second = queue::claim(&db.pool, "w2", 10, LONG).await.unwrap();
    assert_eq!(second.len(), 1);
    assert_ne!(second[0].id, first[0].id);
    assert_eq!(second[0].payload, json!({ "v": 2 }));

    // The database itself refuses a second running item for the key.
    enqueue(&db.pool, "ns/f", json!({ "v": 3 })).await;
    let err = sqlx::query(
        "update work_items set state = 'running' where key = 'ns/f' and state = 'pending'",
    )
    .execute(&db.pool)
    .await
    .expect_err("two running items for one key");
    let db_err = err.as_database_error().expect("a database error");
    assert!(
        db_err.is_unique_violation(),
        "refused by the unique index, got {err}"
    );
    assert_eq!(db_err.constraint(), Some("work_items_one_running_per_key"));
    assert_eq!(queue::counts(&db.pool).await.unwrap(), (1, 2));
}

#[tokio::test]
async fn newer_desired_state_supersedes_older_pending_work() {
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/f", json!({ "v": 1 })).await;
    enqueue(&db.pool, "ns/f", json!({ "v": 2 })).await;
    let r = rows(&db.pool).await;
    assert_eq!(r.len(), 1);
    assert_eq!(r[0].payload, json!({ "v": 2 }));

    // A pending item that already failed once is reset by newer work.
    let item = queue::claim(&db.pool, "w1", 10, LONG)
        .await
        .unwrap()
        .remove(0);
    assert!(matches!(
        queue::retry(&db.pool, &item, "boom", LONG).await.unwrap(),
        Retry::At(_)
    ));
    let r = rows(&db.pool).await;
    assert_eq!(
        (r[0].attempts, r[0].last_error.as_deref(), r[0].due_now),
        (1, Some("boom"), false)
    );

    enqueue(&db.pool, "ns/f", json!({ "v": 3 })).await;
    let r = rows(&db.pool).await;
    assert_eq!(r.len(), 1, "still one item: {r:?}");
    assert_eq!(r[0].state, "pending");
    assert_eq!(r[0].payload, json!({ "v": 3 }));
    assert_eq!(
        (r[0].attempts, r[0].last_error.as_deref(), r[0].due_now),
        (0, None, true),
        "attempts start over"
    );

    let item = queue::claim(&db.pool, "w1", 10, LONG)
        .await
        .unwrap()
        .remove(0);
    assert_eq!((item.payload, item.attempt), (json!({ "v": 3 }), 1));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_whose_lease_passed_to_another_changes_nothing() {
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/f", json!({})).await;
    let a = queue::claim(&db.pool, "worker-a", 10, SHORT)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(a.attempt, 1);

    release_expired_until(&db.pool, 1).await;
    let b = queue::claim(&db.pool, "worker-b", 10, LONG)
        .await
        .unwrap()
        .remove(0);
    assert_eq!((b.id, b.attempt), (a.id, 2));
    let running = rows(&db.pool).await;

    assert!(
        !queue::heartbeat(&db.pool, &a, LONG).await.unwrap(),
        "A's heartbeat is refused"
    );
    assert!(
        !queue::complete(&db.pool, &a).await.unwrap(),
        "A's completion is refused"
    );
    assert_eq!(
        queue::retry(&db.pool, &a, "late", Duration::ZERO)
            .await
            .unwrap(),
        Retry::LeaseLost
    );
    assert!(!holds_lease(&db.pool, &a).await);
    assert_eq!(rows(&db.pool).await, running, "A changed nothing");

    assert!(holds_lease(&db.pool, &b).await);
    assert!(queue::heartbeat(&db.pool, &b, LONG).await.unwrap());
    assert!(queue::complete(&db.pool, &b).await.unwrap());
    assert_eq!(queue::counts(&db.pool).await.unwrap(), (0, 0));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_attempt_of_the_same_worker_changes_nothing() {
    // The attempt number fences even when the same worker takes the item
    // again (it stalled past its lease, then claimed it anew).
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/f", json!({})).await;
    let old = queue::claim(&db.pool, "worker-a", 10, SHORT)
        .await
        .unwrap()
        .remove(0);
    release_expired_until(&db.pool, 1).await;
    let new = queue::claim(&db.pool, "worker-a", 10, LONG)
        .await
        .unwrap()
        .remove(0);
    assert_eq!(
        (new.id, new.attempt, new.owner.as_str()),
        (old.id, 2, "worker-a")
    );
    let running = rows(&db.pool).await;

    assert!(!queue::heartbeat(&db.pool, &old, LONG).await.unwrap());
    assert!(!queue::complete(&db.pool, &old).await.unwrap());
    assert!(!holds_lease(&db.pool, &old).await);
    let mut tx = db.pool.begin().await.unwrap();
    assert!(!queue::dead_letter(&mut tx, &old, "stale").await.unwrap());
    tx.commit().await.unwrap();
    assert_eq!(
        rows(&db.pool).await,
        running,
        "the stale attempt changed nothing"
    );

    assert!(queue::complete(&db.pool, &new).await.unwrap());
    assert_eq!(queue::counts(&db.pool).await.unwrap(), (0, 0));
}

#[tokio::test]
async fn a_retried_item_waits_out_its_delay_and_keeps_its_error() {
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/slow", json!({})).await;
    enqueue(&db.pool, "ns/fast", json!({})).await;
    let claimed = queue::claim(&db.pool, "w1", 10, LONG).await.unwrap();
    let slow = claimed.iter().find(|i| i.key == "ns/slow").unwrap();
    let fast = claimed.iter().find(|i| i.key == "ns/fast").unwrap();

    let before = Utc::now();
    let Retry::At(at) = queue::retry(&db.pool, slow, "slow failed", Duration::from_secs(60))
        .await
        .unwrap()
    else {
        panic!("retry of a held item is scheduled");
    };
    let after = Utc::now();
    let slack = chrono::Duration::seconds(5);
    assert!(
        at >= before + chrono::Duration::seconds(60) - slack
            && at <= after + chrono::Duration::seconds(60) + slack,
        "due about a minute from now, got {at} (now {after})"
    );
    assert!(matches!(
        queue::retry(&db.pool, fast, "fast failed", Duration::ZERO)
            .await
            .unwrap(),
        Retry::At(_)
    ));

    let r = rows(&db.pool).await;
    let slow_row = r.iter().find(|r| r.key == "ns/slow").unwrap();
    assert_eq!(slow_row.state, "pending");
    assert_eq!(slow_row.last_error.as_deref(), Some("slow failed"));
    assert_eq!(slow_row.lease_owner, None);
    assert!(!slow_row.due_now);

    let again = queue::claim(&db.pool, "w2", 10, LONG).await.unwrap();
    assert_eq!(
        again.len(),
        1,
        "only the item without delay is claimable: {again:?}"
    );
    assert_eq!((again[0].key.as_str(), again[0].attempt), ("ns/fast", 2));
}

#[tokio::test]
async fn a_retry_is_dropped_when_newer_work_for_its_key_is_pending() {
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/f", json!({ "v": 1 })).await;
    let item = queue::claim(&db.pool, "w1", 10, LONG)
        .await
        .unwrap()
        .remove(0);
    enqueue(&db.pool, "ns/f", json!({ "v": 2 })).await;

    assert_eq!(
        queue::retry(&db.pool, &item, "boom", Duration::ZERO)
            .await
            .unwrap(),
        Retry::Superseded
    );
    let r = rows(&db.pool).await;
    assert_eq!(r.len(), 1, "only the newer item remains: {r:?}");
    assert_ne!(r[0].id, item.id);
    assert_eq!(
        (r[0].state.as_str(), &r[0].payload),
        ("pending", &json!({ "v": 2 }))
    );
}

#[test]
fn backoff_grows_exponentially_with_jitter_up_to_its_cap() {
    let backoff = Backoff {
        base: Duration::from_millis(100),
        max: Duration::from_secs(10),
    };
    let within = |attempt: i32, lo: Duration, hi: Duration| {
        for _ in 0..200 {
            let d = backoff.delay(attempt);
            assert!(
                d >= lo && d <= hi,
                "delay({attempt}) = {d:?}, not in [{lo:?}, {hi:?}]"
            );
        }
    };
    within(1, Duration::from_millis(50), Duration::from_millis(100));
    within(2, Duration::from_millis(100), Duration::from_millis(200));
    within(4, Duration::from_millis(400), Duration::from_millis(800));
    within(30, Duration::from_secs(5), Duration::from_secs(10));
    within(i32::MAX, Duration::from_secs(5), Duration::from_secs(10));

    let samples: BTreeSet<Duration> = (0..20).map(|_| backoff.delay(5)).collect();
    assert!(samples.len() > 1, "20 delays, all {samples:?}: no jitter");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_item_out_of_attempts_is_dead_lettered_with_its_error() {
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/f", json!({ "v": 7 })).await;
    sqlx::query("update work_items set max_attempts = 1")
        .execute(&db.pool)
        .await
        .unwrap();
    let item = queue::claim(&db.pool, "w1", 10, LONG)
        .await
        .unwrap()
        .remove(0);
    assert_eq!((item.attempt, item.max_attempts), (1, 1));

    let mut tx = db.pool.begin().await.unwrap();
    assert!(
        queue::dead_letter(&mut tx, &item, "image build failed")
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
    assert_eq!(queue::counts(&db.pool).await.unwrap(), (0, 0));
    assert!(rows(&db.pool).await.is_empty());

    let dead = sqlx::query("select id, key, payload, attempts, last_error from work_dead")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].get::<i64, _>("id"), item.id);
    assert_eq!(dead[0].get::<String, _>("key"), "ns/f");
    assert_eq!(
        dead[0].get::<serde_json::Value, _>("payload"),
        json!({ "v": 7 })
    );
    assert_eq!(dead[0].get::<i32, _>("attempts"), 1);
    assert_eq!(
        dead[0].get::<Option<String>, _>("last_error").as_deref(),
        Some("image build failed")
    );

    // A worker that lost its lease cannot dead-letter the item.
    enqueue(&db.pool, "ns/g", json!({})).await;
    let a = queue::claim(&db.pool, "worker-a", 10, SHORT)
        .await
        .unwrap()
        .remove(0);
    release_expired_until(&db.pool, 1).await;
    let b = queue::claim(&db.pool, "worker-b", 10, LONG)
        .await
        .unwrap()
        .remove(0);
    let running = rows(&db.pool).await;
    let mut tx = db.pool.begin().await.unwrap();
    assert!(!queue::dead_letter(&mut tx, &a, "too late").await.unwrap());
    tx.commit().await.unwrap();
    assert_eq!(rows(&db.pool).await, running, "the item still runs under B");
    let dead: i64 = sqlx::query_scalar("select count(*) from work_dead")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(dead, 1, "nothing more was dead-lettered");
    assert!(queue::complete(&db.pool, &b).await.unwrap());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_expired_item_is_dropped_for_newer_work_or_else_returned_to_pending() {
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/superseded", json!({ "v": 1 })).await;
    enqueue(&db.pool, "ns/alone", json!({ "v": 1 })).await;
    let claimed = queue::claim(&db.pool, "worker-a", 10, SHORT).await.unwrap();
    assert_eq!(claimed.len(), 2);
    let superseded = claimed.iter().find(|i| i.key == "ns/superseded").unwrap();
    let alone = claimed.iter().find(|i| i.key == "ns/alone").unwrap();
    enqueue(&db.pool, "ns/superseded", json!({ "v": 2 })).await;

    release_expired_until(&db.pool, 2).await;

    let r = rows(&db.pool).await;
    assert_eq!(r.len(), 2, "{r:?}");
    let newer = r.iter().find(|r| r.key == "ns/superseded").unwrap();
    assert_ne!(
        newer.id, superseded.id,
        "the expired item gave way to the newer one"
    );
    assert_eq!(
        (newer.state.as_str(), &newer.payload, newer.attempts),
        ("pending", &json!({ "v": 2 }), 0)
    );

    let back = r.iter().find(|r| r.key == "ns/alone").unwrap();
    assert_eq!(back.id, alone.id);
    assert_eq!(
        (
            back.state.as_str(),
            back.attempts,
            back.lease_owner.as_deref()
        ),
        ("pending", 1, None)
    );
    assert!(
        back.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("expired"),
        "{back:?}"
    );
    assert_eq!(queue::counts(&db.pool).await.unwrap(), (2, 0));

    let again = queue::claim(&db.pool, "worker-b", 10, LONG).await.unwrap();
    let alone_again = again.iter().find(|i| i.key == "ns/alone").unwrap();
    assert_eq!(alone_again.attempt, 2, "the attempt count is kept");
}

#[tokio::test]
async fn enqueue_notifies_workers_when_its_transaction_commits() {
    let db = TestDb::new().await;
    let mut listener = PgListener::connect(&db.url).await.unwrap();
    listener.listen(queue::CHANNEL).await.unwrap();

    let mut tx = db.pool.begin().await.unwrap();
    queue::enqueue(&mut *tx, queue::RECONCILE_FUNCTION, "ns/f", &json!({}))
        .await
        .unwrap();
    // The bounded wait is the assertion: nothing may arrive before commit.
    let early = tokio::time::timeout(Duration::from_millis(200), listener.recv()).await;
    assert!(
        early.is_err(),
        "notified before the enqueue committed: {early:?}"
    );

    tx.commit().await.unwrap();
    let note = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("a notification after commit")
        .unwrap();
    assert_eq!(note.channel(), queue::CHANNEL);
}

#[tokio::test]
async fn finishing_an_item_with_work_behind_it_notifies_the_workers() {
    let db = TestDb::new().await;
    for k in ["ns/behind", "ns/alone"] {
        enqueue(&db.pool, k, json!({ "v": 1 })).await;
    }
    let items = queue::claim(&db.pool, "w1", 10, LONG).await.unwrap();
    assert_eq!(items.len(), 2);
    // Enqueued while "ns/behind" runs: it cannot be claimed until that
    // item is finished, and its own NOTIFY has come and gone.
    enqueue(&db.pool, "ns/behind", json!({ "v": 2 })).await;
    assert!(
        queue::claim(&db.pool, "w2", 10, LONG)
            .await
            .unwrap()
            .is_empty()
    );

    let mut listener = PgListener::connect(&db.url).await.unwrap();
    listener.listen(queue::CHANNEL).await.unwrap();
    let alone = items.iter().find(|i| i.key == "ns/alone").unwrap();
    queue::complete_many(&db.pool, "w1", &[(alone.id, alone.attempt)])
        .await
        .unwrap();
    // The bounded wait is the assertion: nothing waits behind "ns/alone".
    let quiet = tokio::time::timeout(Duration::from_millis(300), listener.recv()).await;
    assert!(quiet.is_err(), "notified with nothing behind: {quiet:?}");

    let behind = items.iter().find(|i| i.key == "ns/behind").unwrap();
    let done = queue::complete_many(&db.pool, "w1", &[(behind.id, behind.attempt)])
        .await
        .unwrap();
    assert_eq!(done, vec![behind.id]);
    let note = tokio::time::timeout(Duration::from_secs(10), listener.recv())
        .await
        .expect("a notification for the work behind the finished item")
        .unwrap();
    assert_eq!(note.channel(), queue::CHANNEL);
    let next = queue::claim(&db.pool, "w2", 10, LONG).await.unwrap();
    assert_eq!(next.len(), 1);
    assert_eq!(next[0].payload, json!({ "v": 2 }));
}

#[tokio::test]
async fn release_all_running_returns_items_whose_lease_has_not_expired() {
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/f", json!({})).await;
    enqueue(&db.pool, "ns/g", json!({})).await;
    let claimed = queue::claim(&db.pool, "worker-a", 10, LONG).await.unwrap();
    assert_eq!(claimed.len(), 2);
    enqueue(&db.pool, "ns/g", json!({ "v": 2 })).await;
    // The leases are long: the sweep leaves them alone.
    assert_eq!(queue::release_expired(&db.pool).await.unwrap(), 0);

    assert_eq!(queue::release_all_running(&db.pool).await.unwrap(), 2);
    let r = rows(&db.pool).await;
    assert_eq!(r.len(), 2, "{r:?}");
    assert!(
        r.iter()
            .all(|r| r.state == "pending" && r.lease_owner.is_none()),
        "{r:?}"
    );
    let f = r.iter().find(|r| r.key == "ns/f").unwrap();
    assert!(
        f.last_error
            .as_deref()
            .unwrap_or_default()
            .contains("released at start"),
        "{f:?}"
    );
    let g = r.iter().find(|r| r.key == "ns/g").unwrap();
    assert_eq!(
        g.payload,
        json!({ "v": 2 }),
        "the newer pending item is kept"
    );
    // The worker that held them is fenced off.
    for item in &claimed {
        assert!(!queue::complete(&db.pool, item).await.unwrap());
    }
}

#[tokio::test]
async fn batched_completion_and_heartbeat_touch_only_the_items_a_worker_still_holds() {
    let db = TestDb::new().await;
    for k in ["ns/a", "ns/b", "ns/c"] {
        enqueue(&db.pool, k, json!({})).await;
    }
    let items = queue::claim(&db.pool, "w1", 10, LONG).await.unwrap();
    assert_eq!(items.len(), 3);
    // "ns/b" passes to another worker, as after an expired lease.
    let b = items.iter().find(|i| i.key == "ns/b").unwrap().clone();
    sqlx::query("update work_items set lease_owner = 'w2', attempts = attempts + 1 where id = $1")
        .bind(b.id)
        .execute(&db.pool)
        .await
        .unwrap();
    let held = queue::heartbeat_owner(&db.pool, "w1", LONG).await.unwrap();
    let held: BTreeSet<i64> = held.into_iter().map(|(id, _)| id).collect();
    assert_eq!(
        held,
        ids(&items).into_iter().filter(|id| *id != b.id).collect()
    );

    let all: Vec<(i64, i32)> = items.iter().map(|i| (i.id, i.attempt)).collect();
    let done = queue::complete_many(&db.pool, "w1", &all).await.unwrap();
    assert_eq!(done.len(), 2);
    assert!(!done.contains(&b.id));
    let left = rows(&db.pool).await;
    assert_eq!(left.len(), 1);
    assert_eq!(
        (left[0].id, left[0].lease_owner.as_deref()),
        (b.id, Some("w2"))
    );
}

#[tokio::test]
async fn handed_back_items_are_due_now_unless_newer_work_supersedes_them() {
    let db = TestDb::new().await;
    for k in ["ns/started", "ns/unstarted", "ns/superseded"] {
        enqueue(&db.pool, k, json!({ "v": 1 })).await;
    }
    let items = queue::claim(&db.pool, "w1", 10, LONG).await.unwrap();
    enqueue(&db.pool, "ns/superseded", json!({ "v": 2 })).await;
    let back: Vec<queue::Handback> = items
        .iter()
        .map(|i| queue::Handback {
            id: i.id,
            attempt: i.attempt,
            started: i.key != "ns/unstarted",
        })
        .collect();
    // Another worker's handback of these items changes nothing.
    assert_eq!(queue::hand_back(&db.pool, "w2", &back).await.unwrap(), 0);
    assert_eq!(queue::hand_back(&db.pool, "w1", &back).await.unwrap(), 3);
    let rows = rows(&db.pool).await;
    let by_key = |k: &str| rows.iter().find(|r| r.key == k).unwrap().clone();
    assert_eq!(rows.len(), 3);
    let started = by_key("ns/started");
    assert_eq!((started.state.as_str(), started.attempts), ("pending", 1));
    assert!(started.due_now && started.lease_owner.is_none());
    assert!(started.last_error.unwrap().contains("shutting down"));
    let unstarted = by_key("ns/unstarted");
    assert_eq!(
        (unstarted.state.as_str(), unstarted.attempts),
        ("pending", 0)
    );
    assert_eq!(by_key("ns/superseded").payload, json!({ "v": 2 }));
}

#[path = "queue/claimed.rs"]
mod claimed;
#[path = "queue/kinds.rs"]
mod kinds;
#[path = "queue/reconcile_all.rs"]
mod reconcile_all;
#[path = "queue/traces.rs"]
mod traces;
