//! What a namespace uses, counted for its quotas (`sless_store::usage`):
//! what exists is what was created and not deleted since, and counting it
//! reads one row kept beside the log, so a create in a namespace of
//! thousands of functions does not read every one of its events under the
//! namespace's lock.

use serde_json::{Value, json};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::usage;
use sless_testkit::TestDb;

const NS: &str = "sless-00000000000000c1";
const OTHER: &str = "sless-00000000000000c2";

/// Appends events of `types` to `stream`, from version 1, one append each.
async fn append(db: &TestDb, ns: &str, stream: &str, types: &[&str]) {
    for (i, t) in types.iter().enumerate() {
        let event = NewEvent {
            event_type: (*t).into(),
            namespace: ns.into(),
            // What the trigger index reads of a trigger's events.
            data: json!({ "spec": { "name": "t", "function": "a", "type": "http", "enabled": true }, "enabled": true }),
            metadata: Metadata {
                actor: "tester".into(),
                ..Metadata::default()
            },
        };
        let mut tx = db.pool.begin().await.unwrap();
        eventlog::append(&mut tx, stream, i as u64, std::slice::from_ref(&event))
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
}

#[tokio::test]
async fn what_exists_is_what_was_created_and_not_deleted_since() {
    let db = TestDb::new().await;
    let (created, deleted) = ("FunctionCreated", "FunctionDeleted");
    append(
        &db,
        NS,
        &format!("function/{NS}/a"),
        &[created, "FunctionUploaded"],
    )
    .await;
    append(&db, NS, &format!("function/{NS}/b"), &[created, deleted]).await;
    append(
        &db,
        NS,
        &format!("function/{NS}/c"),
        &[created, deleted, created],
    )
    .await;
    append(
        &db,
        NS,
        &format!("function/{NS}/d"),
        &[created, deleted, created, deleted],
    )
    .await;
    append(&db, OTHER, &format!("function/{OTHER}/a"), &[created]).await;
    append(
        &db,
        NS,
        &format!("trigger/{NS}/t"),
        &["TriggerCreated", "TriggerToggled"],
    )
    .await;
    append(
        &db,
        NS,
        &format!("trigger/{NS}/u"),
        &["TriggerCreated", "TriggerDeleted"],
    )
    .await;

    assert_eq!(usage::functions(&db.pool, NS).await.unwrap(), 2, "a and c");
    assert_eq!(usage::functions(&db.pool, OTHER).await.unwrap(), 1);
    assert_eq!(
        usage::functions(&db.pool, "sless-00000000000000c3")
            .await
            .unwrap(),
        0
    );
    assert_eq!(usage::triggers(&db.pool, NS).await.unwrap(), 1, "t");
    assert_eq!(usage::triggers(&db.pool, OTHER).await.unwrap(), 0);
}

/// Every node of a plan: (node type, index).
fn nodes(plan: &Value, out: &mut Vec<(String, String)>) {
    let s = |k: &str| plan[k].as_str().unwrap_or_default().to_owned();
    out.push((s("Node Type"), s("Index Name")));
    for child in plan["Plans"].as_array().into_iter().flatten() {
        nodes(child, out);
    }
}

#[tokio::test]
async fn counting_a_namespaces_functions_reads_one_row_whatever_the_log_holds() {
    let db = TestDb::new().await;
    // 20,000 functions in NS (every 10th deleted and created again), 5,000
    // in another, and their other events, in one statement.
    sqlx::query(
        "insert into events (stream, version, type, namespace, data)
         select 'function/' || ns || '/f' || i, v,
                case when v = 1 or v = 4 then 'FunctionCreated'
                     when v = 3 then 'FunctionDeleted'
                     else 'FunctionUploaded' end,
                ns, '{}'::jsonb
         from generate_series(1, 25000) i,
              lateral (select case when i <= 20000 then $1 else $2 end as ns) n,
              generate_series(1, case when i % 10 = 0 then 4 else 2 end) v",
    )
    .bind(NS)
    .bind(OTHER)
    .execute(&db.pool)
    .await
    .unwrap();
    sqlx::query("vacuum analyze events")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(usage::functions(&db.pool, NS).await.unwrap(), 20_000);
    assert_eq!(usage::functions(&db.pool, OTHER).await.unwrap(), 5_000);
    // The same as the log says, counted the long way.
    let from_log: i64 = sqlx::query_scalar(
        "select count(*) filter (where type = 'FunctionCreated')
              - count(*) filter (where type = 'FunctionDeleted')
         from events where namespace = $1",
    )
    .bind(NS)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(from_log, 20_000);

    let plan: Value = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "explain (format json) {}",
        usage::COUNTS
    )))
    .bind(NS)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    let mut all = Vec::new();
    nodes(&plan[0]["Plan"], &mut all);
    assert_eq!(
        all,
        [("Index Scan".to_owned(), "namespace_counts_pkey".to_owned())],
        "the count reads the namespace's one row, and no event"
    );
}
