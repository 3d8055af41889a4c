//! What `/metrics` reads of the process's PostgreSQL pool when it is
//! scraped (`sless_api::plumbing::metrics::refresh`).

use std::time::Duration;

use sless_api::plumbing::metrics::{Scope, refresh};
use sless_telemetry::{ConnectionLabels, Metrics};
use sless_testkit::TestDb;

fn connections(metrics: &Metrics, state: &str) -> i64 {
    let labels = ConnectionLabels {
        state: state.to_owned(),
    };
    metrics.db_connections.get_or_create(&labels).get()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_pool_reads_its_connections_in_use_against_its_cap() {
    let db = TestDb::new().await;
    let pool = sless_store::connect(&db.url, 3).await.unwrap();
    let metrics = Metrics::default();
    // One in use: the cap is what the pool may open, not what it has.
    let mut held = vec![pool.acquire().await.unwrap()];
    refresh(&pool, &metrics, Scope::default()).await;
    assert_eq!(connections(&metrics, "in_use"), 1);
    assert_eq!(metrics.db_max_connections.get(), 3);
    // All in use.
    for _ in 1..3 {
        held.push(pool.acquire().await.unwrap());
    }
    refresh(&pool, &metrics, Scope::default()).await;
    assert_eq!(connections(&metrics, "in_use"), 3);
    assert_eq!(connections(&metrics, "idle"), 0);
    assert_eq!(metrics.db_max_connections.get(), 3);
    // Every connection in use: the next task to ask for one waits.
    assert!(pool.try_acquire().is_none());
    let (text, _) = metrics.encode(false);
    assert!(
        text.contains("\nsless_db_pool_max_connections 3\n"),
        "{text}"
    );

    drop(held);
    let back = || async {
        refresh(&pool, &metrics, Scope::default()).await;
        (connections(&metrics, "in_use") == 0).then_some(())
    };
    sless_testkit::eventually("the connections back", Duration::from_secs(10), back).await;
    assert_eq!(connections(&metrics, "idle"), 3);
    assert_eq!(metrics.db_max_connections.get(), 3);
}
