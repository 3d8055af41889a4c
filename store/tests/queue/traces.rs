//! A work item's causes in the trace: the `traceparent` it was enqueued
//! with, and links to the causes of the pending items it superseded.

use serde_json::json;
use sless_store::queue::{self, MAX_LINKS};
use sless_testkit::TestDb;

use super::{enqueue, rows};

fn tp(n: usize) -> String {
    format!("00-{:032x}-{:016x}-01", n + 1, n + 1)
}

#[tokio::test]
async fn a_superseding_item_links_the_causes_of_the_items_it_replaced() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    enqueue(pool, "ns/f", json!({"traceparent": tp(0)})).await;
    enqueue(pool, "ns/f", json!({"traceparent": tp(1)})).await;
    let r = rows(pool).await;
    assert_eq!(r.len(), 1);
    assert_eq!(
        r[0].payload,
        json!({"traceparent": tp(1), "links": [tp(0)]})
    );
    // A cron tick's item names its cause as a link.
    enqueue(pool, "ns/f", json!({"links": [tp(2)]})).await;
    let r = rows(pool).await;
    assert_eq!(r[0].payload, json!({"links": [tp(2), tp(0), tp(1)]}));
    // Items without a cause replace each other as before.
    enqueue(pool, "ns/g", json!({})).await;
    enqueue(pool, "ns/g", json!({"key": "k"})).await;
    let g = rows(pool)
        .await
        .into_iter()
        .find(|r| r.key == "ns/g")
        .unwrap();
    assert_eq!(g.payload, json!({"key": "k"}));
    // However many requests it supersedes, an item keeps MAX_LINKS links.
    for n in 3..40 {
        enqueue(pool, "ns/f", json!({"traceparent": tp(n)})).await;
    }
    let r = rows(pool)
        .await
        .into_iter()
        .find(|r| r.key == "ns/f")
        .unwrap();
    assert_eq!(r.payload["traceparent"], json!(tp(39)));
    let links = r.payload["links"].as_array().unwrap();
    assert_eq!(links.len(), MAX_LINKS);
    // The worker reads them back.
    let item = queue::claim(pool, "w", 10, std::time::Duration::from_secs(60))
        .await
        .unwrap()
        .into_iter()
        .find(|i| i.key == "ns/f")
        .unwrap();
    let (parent, linked) = queue::trace_of(&item);
    assert_eq!(parent, Some(tp(39).as_str()));
    assert_eq!(linked.len(), MAX_LINKS);
}
