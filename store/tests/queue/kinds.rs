//! Claims for one pool of a worker's slots (`queue::claim_kinds`): jobs and
//! everything else are claimed apart, with every other queue rule kept.

use super::*;
use queue::Kinds;

/// Enqueues `n` items of `kind`, keys `{prefix}{i}`.
async fn enqueue_kind(pool: &PgPool, kind: &str, prefix: &str, n: usize) {
    for i in 0..n {
        queue::enqueue(pool, kind, &format!("{prefix}{i}"), &json!({}))
            .await
            .unwrap();
    }
}

fn kinds_of(items: &[WorkItem]) -> BTreeSet<String> {
    items.iter().map(|i| i.kind.clone()).collect()
}

#[tokio::test]
async fn a_claim_for_jobs_never_returns_other_work_and_a_claim_for_other_work_never_a_job() {
    let db = TestDb::new().await;
    // Jobs first in time, so a filter that let other kinds through (or kept
    // jobs out of the wrong claim only by luck of order) would show.
    enqueue_kind(&db.pool, queue::RUN_JOB, "job/ns/j", 5).await;
    enqueue_kind(&db.pool, queue::RECONCILE_FUNCTION, "ns/f", 5).await;
    enqueue_kind(&db.pool, sless_store::retention::COLLECT_BLOB, "blob/b", 2).await;
    enqueue_kind(&db.pool, queue::NOOP, "noop/", 2).await;

    let jobs = queue::claim_kinds(&db.pool, "w1", Kinds::Jobs, 100, LONG)
        .await
        .unwrap();
    assert_eq!(jobs.len(), 5, "{jobs:?}");
    assert_eq!(kinds_of(&jobs), BTreeSet::from([queue::RUN_JOB.to_owned()]));
    let none = queue::claim_kinds(&db.pool, "w1", Kinds::Jobs, 100, LONG)
        .await
        .unwrap();
    assert!(
        none.is_empty(),
        "no job is left, and nothing else is taken: {none:?}"
    );

    let other = queue::claim_kinds(&db.pool, "w1", Kinds::AllButJobs, 100, LONG)
        .await
        .unwrap();
    assert_eq!(other.len(), 9, "{other:?}");
    assert!(!kinds_of(&other).contains(queue::RUN_JOB), "{other:?}");

    // And the other way round: with only jobs waiting, a claim for other
    // work takes nothing; a claim of every kind takes both.
    enqueue_kind(&db.pool, queue::RUN_JOB, "job/ns/late", 2).await;
    let other = queue::claim_kinds(&db.pool, "w2", Kinds::AllButJobs, 100, LONG)
        .await
        .unwrap();
    assert!(other.is_empty(), "{other:?}");
    enqueue_kind(&db.pool, queue::RECONCILE_FUNCTION, "ns/late", 1).await;
    let all = queue::claim(&db.pool, "w2", 100, LONG).await.unwrap();
    assert_eq!(
        kinds_of(&all),
        BTreeSet::from([
            queue::RUN_JOB.to_owned(),
            queue::RECONCILE_FUNCTION.to_owned()
        ])
    );
    assert_eq!(queue::counts(&db.pool).await.unwrap(), (0, 17));
}

#[tokio::test]
async fn claims_for_jobs_keep_one_running_item_per_key_and_skip_locked_rows() {
    let db = TestDb::new().await;
    enqueue_kind(&db.pool, queue::RUN_JOB, "job/ns/j", 3).await;
    let first = queue::claim_kinds(&db.pool, "w1", Kinds::Jobs, 1, LONG)
        .await
        .unwrap();
    assert_eq!(first.len(), 1, "the limit holds");
    // New work for the running key waits; the others are claimable.
    queue::enqueue(&db.pool, queue::RUN_JOB, &first[0].key, &json!({}))
        .await
        .unwrap();
    let mut locker = db.pool.begin().await.unwrap();
    let locked: i64 = sqlx::query_scalar(
        "select id from work_items where key = 'job/ns/j2' and state = 'pending' for update",
    )
    .fetch_one(&mut *locker)
    .await
    .unwrap();
    let second = tokio::time::timeout(
        Duration::from_secs(10),
        queue::claim_kinds(&db.pool, "w2", Kinds::Jobs, 10, LONG),
    )
    .await
    .expect("a claim skips locked rows, never waits for them")
    .unwrap();
    let keys: Vec<&str> = second.iter().map(|i| i.key.as_str()).collect();
    assert_eq!(
        keys,
        ["job/ns/j1"],
        "not the running key, not the locked row"
    );
    assert!(second.iter().all(|i| i.id != locked));
    locker.rollback().await.unwrap();

    // The lease fences as for any item: a hand-back returns it due now.
    let back = [queue::Handback {
        id: second[0].id,
        attempt: second[0].attempt,
        started: false,
    }];
    assert_eq!(queue::hand_back(&db.pool, "w2", &back).await.unwrap(), 1);
    let again = queue::claim_kinds(&db.pool, "w3", Kinds::Jobs, 10, LONG)
        .await
        .unwrap();
    let mut keys: Vec<&str> = again.iter().map(|i| i.key.as_str()).collect();
    keys.sort();
    assert_eq!(keys, ["job/ns/j1", "job/ns/j2"]);
}

#[tokio::test]
async fn a_kind_this_release_does_not_know_is_left_for_a_worker_that_does() {
    let db = TestDb::new().await;
    // Written by a newer release during a rolling upgrade.
    enqueue_kind(&db.pool, "KindOfALaterRelease", "later/", 2).await;
    enqueue_kind(&db.pool, queue::RECONCILE_FUNCTION, "ns/f", 1).await;
    let other = queue::claim_kinds(&db.pool, "w1", Kinds::AllButJobs, 100, LONG)
        .await
        .unwrap();
    assert_eq!(
        kinds_of(&other),
        BTreeSet::from([queue::RECONCILE_FUNCTION.to_owned()]),
        "an unknown kind would be dead-lettered by the worker that took it"
    );
    let jobs = queue::claim_kinds(&db.pool, "w1", Kinds::Jobs, 100, LONG)
        .await
        .unwrap();
    assert!(jobs.is_empty(), "{jobs:?}");
    let waiting: i64 = sqlx::query_scalar(
        "select count(*) from work_items where kind = 'KindOfALaterRelease' and state = 'pending'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(waiting, 2);
}
