//! The system executor (`sless_store::system`): a lost race is decided
//! again unless the decision stands on its state, the work goes with the
//! events, and a worker that lost its lease writes nothing.

use std::time::Duration;

use sless_domain::{CrashCause, Function, FunctionEvent, FunctionKey, FunctionName, Namespace};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::system::{self, Executed, SystemCommand};
use sless_store::{PgPool, queue};
use sless_testkit::TestDb;

fn key() -> FunctionKey {
    FunctionKey::new(
        Namespace::parse("ns").unwrap(),
        FunctionName::parse("f").unwrap(),
    )
}

fn crash(detail: &str) -> FunctionEvent {
    FunctionEvent::FunctionCrashed {
        version: 1,
        cause: CrashCause::Exited,
        detail: detail.to_owned(),
        memory_mb: None,
    }
}

/// Appends `event` at the stream's end, as another writer would.
async fn append_elsewhere(pool: &PgPool, event: &FunctionEvent) {
    let k = key();
    let at = eventlog::read_stream(pool, &k.stream())
        .await
        .unwrap()
        .len() as u64;
    let mut conn = pool.acquire().await.unwrap();
    let new = NewEvent::function(&k, event, Metadata::default());
    eventlog::append(&mut conn, &k.stream(), at, &[new])
        .await
        .unwrap();
}

/// (the details of the stream's crashes in order, its reconcile items).
async fn written(pool: &PgPool) -> (Vec<String>, i64) {
    let k = key();
    let details = eventlog::events_of::<Function>(pool, &k.stream())
        .await
        .unwrap()
        .into_iter()
        .filter_map(|e| match e.event {
            FunctionEvent::FunctionCrashed { detail, .. } => Some(detail),
            _ => None,
        })
        .collect();
    let items: i64 = sqlx::query_scalar("select count(*) from work_items where key = $1")
        .bind(k.queue_key())
        .fetch_one(pool)
        .await
        .unwrap();
    (details, items)
}

/// Executes a command whose first decision loses a race to another
/// writer, which appends while it decides.
async fn race(pool: &PgPool, cmd: &SystemCommand<'_>) -> (Executed<Function>, u32) {
    let mut decided = 0;
    let executed = system::execute::<Function>(pool, cmd, |_| {
        decided += 1;
        if decided == 1 {
            tokio::task::block_in_place(|| {
                tokio::runtime::Handle::current()
                    .block_on(append_elsewhere(pool, &crash("another writer")))
            });
        }
        Ok(vec![crash("mine")])
    })
    .await
    .unwrap();
    (executed, decided)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lost_race_is_decided_again_on_the_stream_as_it_is_now() {
    let db = TestDb::new().await;
    let k = key();
    let cmd = SystemCommand::new(k.stream(), &k.namespace, Metadata::system("worker", 1))
        .reconcile(k.queue_key());
    let (executed, decided) = race(&db.pool, &cmd).await;
    assert!(
        executed.appended(),
        "appended on the second decision: {executed:?}"
    );
    assert_eq!(decided, 2, "decided again after losing the race");
    assert_eq!(
        written(&db.pool).await,
        (vec!["another writer".to_owned(), "mine".to_owned()], 1),
        "both appends stand, in order, with the work of the second"
    );
    let events = eventlog::read_stream(&db.pool, &k.stream()).await.unwrap();
    let metadata: Metadata = serde_json::from_value(events[1].metadata.clone()).unwrap();
    assert_eq!(metadata.actor, "system:worker");
    assert_eq!(metadata.correlation_id.as_deref(), Some("work-1"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decision_that_stands_on_its_state_is_lost_with_the_race() {
    let db = TestDb::new().await;
    let k = key();
    let cmd = SystemCommand::new(k.stream(), &k.namespace, Metadata::system("worker", 1))
        .reconcile(k.queue_key())
        .stands_on_its_state();
    let (executed, decided) = race(&db.pool, &cmd).await;
    assert!(
        matches!(executed, Executed::Lost { version: 0 }),
        "lost: {executed:?}"
    );
    assert_eq!(decided, 1, "not decided again");
    assert_eq!(
        written(&db.pool).await,
        (vec!["another writer".to_owned()], 0),
        "nothing of it written, no work enqueued"
    );
}

#[tokio::test]
async fn a_worker_that_lost_its_lease_writes_nothing() {
    let db = TestDb::new().await;
    let k = key();
    queue::enqueue_reconcile(&db.pool, &k.queue_key())
        .await
        .unwrap();
    let claimed = queue::claim(&db.pool, "worker-a", 1, Duration::from_secs(60))
        .await
        .unwrap();
    let item = &claimed[0];
    let cmd = SystemCommand::fenced(k.stream(), &k.namespace, "worker", item).work(
        queue::NOOP,
        "after".into(),
        serde_json::json!({}),
    );

    let held = system::execute::<Function>(&db.pool, &cmd, |_| Ok(vec![crash("held")]))
        .await
        .unwrap();
    assert!(
        held.appended(),
        "appended while the lease is held: {held:?}"
    );

    // Another worker takes the item over.
    sqlx::query("update work_items set lease_owner = 'worker-b' where id = $1")
        .bind(item.id)
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("delete from work_items where key = 'after'")
        .execute(&db.pool)
        .await
        .unwrap();
    let lost = system::execute::<Function>(&db.pool, &cmd, |_| Ok(vec![crash("lost")]))
        .await
        .unwrap();
    assert!(matches!(lost, Executed::Fenced), "fenced: {lost:?}");
    assert_eq!(written(&db.pool).await.0, vec!["held".to_owned()]);
    let after: i64 = sqlx::query_scalar("select count(*) from work_items where key = 'after'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(after, 0, "the fenced decision's work was not enqueued");
}

#[tokio::test]
async fn nothing_decided_writes_nothing_and_a_refusal_is_returned() {
    let db = TestDb::new().await;
    let k = key();
    let cmd = SystemCommand::new(k.stream(), &k.namespace, Metadata::system("worker", 1))
        .reconcile(k.queue_key());
    let unchanged = system::execute::<Function>(&db.pool, &cmd, |_| Ok(Vec::new()))
        .await
        .unwrap();
    assert!(matches!(unchanged, Executed::Unchanged { version: 0 }));
    let refused = system::execute::<Function>(&db.pool, &cmd, |_| {
        Err(sless_domain::DomainError::NotFound("function".into()))
    })
    .await
    .unwrap();
    assert!(matches!(refused, Executed::Refused(_)), "{refused:?}");
    assert_eq!(written(&db.pool).await, (Vec::new(), 0));
}
