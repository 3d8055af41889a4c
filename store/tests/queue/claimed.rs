//! When a claimed item was claimed (`WorkItem::claimed_at`): the wait for
//! a slot to start it, `sless_work_start_delay_seconds`, begins there.

use std::time::Instant;

use super::*;

#[tokio::test]
async fn an_item_is_stamped_when_it_is_claimed_not_when_it_was_enqueued() {
    let db = TestDb::new().await;
    enqueue(&db.pool, "ns/a", json!({})).await;
    enqueue(&db.pool, "ns/b", json!({})).await;
    // Everything before the claim call (the enqueues) comes before `before`.
    let before = Instant::now();
    let items = queue::claim(&db.pool, "w1", 10, LONG).await.unwrap();
    let after = Instant::now();
    assert_eq!(items.len(), 2, "{items:?}");
    for item in &items {
        assert!(
            before <= item.claimed_at && item.claimed_at <= after,
            "{item:?} claimed at {:?}, the claim ran from {before:?} to {after:?}",
            item.claimed_at
        );
    }
}
