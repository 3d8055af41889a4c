//! A reconcile of every function the log knows (`queue::enqueue_reconcile_all`),
//! read from the function streams kept beside the log.

use super::*;

#[tokio::test]
async fn enqueue_reconcile_all_enqueues_one_item_per_function_in_the_log() {
    let db = TestDb::new().await;
    let ev = |t: &str| NewEvent {
        event_type: t.to_owned(),
        namespace: "ns".to_owned(),
        data: json!({}),
        metadata: Metadata {
            actor: "tester".to_owned(),
            ..Metadata::default()
        },
    };
    for (stream, events) in [
        ("function/ns/a", vec![ev("Created")]),
        ("function/ns/b", vec![ev("Created"), ev("Updated")]),
        ("trigger/x", vec![ev("Created")]),
    ] {
        let mut tx = db.pool.begin().await.unwrap();
        eventlog::append(&mut tx, stream, 0, &events).await.unwrap();
        tx.commit().await.unwrap();
    }

    assert_eq!(queue::enqueue_reconcile_all(&db.pool).await.unwrap(), 2);
    let keys = |r: Vec<ItemRow>| r.into_iter().map(|r| (r.key, r.state)).collect::<Vec<_>>();
    let expected = vec![
        ("ns/a".to_owned(), "pending".to_owned()),
        ("ns/b".to_owned(), "pending".to_owned()),
    ];
    assert_eq!(keys(rows(&db.pool).await), expected);
    let kinds: Vec<String> = sqlx::query_scalar("select distinct kind from work_items")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(kinds, [queue::RECONCILE_FUNCTION]);

    // Doing it again refreshes the pending items rather than adding more.
    queue::enqueue_reconcile_all(&db.pool).await.unwrap();
    assert_eq!(keys(rows(&db.pool).await), expected);

    // It reads the function streams kept beside the log, not the log.
    let plan: serde_json::Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "explain (format json) {}",
        queue::RECONCILE_ALL
    )))
    .bind(queue::RECONCILE_FUNCTION)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let text = plan.to_string();
    assert!(text.contains("\"function_streams\""), "{text}");
    assert!(!text.contains("\"events\""), "it reads the log: {text}");
}

/// `function_streams` is the set of function streams in the log, whatever
/// wrote the events: appends, and many streams in one statement.
#[tokio::test]
async fn the_function_streams_beside_the_log_are_the_logs() {
    let db = TestDb::new().await;
    sqlx::query(
        "insert into events (stream, version, type, namespace, data)
         select s || '/f' || i, v, 'E', 'ns', '{}'::jsonb
         from generate_series(1, 300) i, generate_series(1, 3) v,
              unnest(array['function/ns', 'trigger/ns', 'job/ns']) s",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    let mut tx = db.pool.begin().await.unwrap();
    let ev = NewEvent {
        event_type: "FunctionCreated".to_owned(),
        namespace: "ns".to_owned(),
        data: json!({}),
        metadata: Metadata::default(),
    };
    eventlog::append(&mut tx, "function/ns/late", 0, std::slice::from_ref(&ev))
        .await
        .unwrap();
    tx.commit().await.unwrap();
    let differ: Vec<String> = sqlx::query_scalar(
        "(select distinct stream from events where stream like 'function/%'
          except select stream from function_streams)
         union all
         (select stream from function_streams
          except select distinct stream from events where stream like 'function/%')",
    )
    .fetch_all(&db.pool)
    .await
    .unwrap();
    assert_eq!(differ, Vec::<String>::new());
    let n: i64 = sqlx::query_scalar("select count(*) from function_streams")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(n, 301);
}
