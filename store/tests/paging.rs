//! The lists' pages (functions, triggers, jobs) read from their cursor on:
//! a page deep in a namespace reads about as many rows as it holds, in
//! whatever plan PostgreSQL runs the statement with, the generic one of a
//! prepared statement included (what it uses after five calls), so
//! listing a namespace page by page costs what its rows do, not the
//! square of their number.

use sless_store::{jobs, readmodel, triggers};
use sless_testkit::TestDb;
use sqlx::{Postgres, Transaction};

const NS: &str = "sless-00000000000000d1";
const ROWS: i64 = 3_000;
const PAGE: i64 = 100;
/// The cursor of the last page: every row before it is behind the cursor.
const DEEP: &str = "n-02899";

async fn fill(db: &TestDb) {
    for sql in [
        "insert into functions (namespace, name, runtime, entrypoint, memory_mb, timeout_sec,
                                env_vars, phase, stream_version, created_at, updated_at)
         select $1, 'n-' || lpad(i::text, 5, '0'), 'python3.11', 'handler.handle', 128, 30,
                '{}', 'Pending', 1, now(), now()
         from generate_series(0, $2 - 1) i",
        "insert into triggers (namespace, name, function, kind, enabled, stream_version,
                               created_at, updated_at)
         select $1, 'n-' || lpad(i::text, 5, '0'), 'f', 'http', true, 1, now(), now()
         from generate_series(0, $2 - 1) i",
        "insert into jobs (stream, namespace, name, function, version, input, timeout_sec,
                           origin, status, requested_at, stream_version)
         select 'job/' || $1 || '/n-' || lpad(i::text, 5, '0'), $1, 'n-' || lpad(i::text, 5, '0'),
                'f', 1, '{}', 30, 'api', 'Succeeded', now(), 1
         from generate_series(0, $2 - 1) i",
    ] {
        sqlx::query(sql)
            .bind(NS)
            .bind(ROWS)
            .execute(&db.pool)
            .await
            .unwrap();
    }
    sqlx::query("analyze functions, triggers, jobs")
        .execute(&db.pool)
        .await
        .unwrap();
}

/// A transaction whose prepared statements run with their generic plan
/// from the first call.
async fn generic(db: &TestDb) -> Transaction<'static, Postgres> {
    let mut tx = db.pool.begin().await.unwrap();
    sqlx::query("set local plan_cache_mode = force_generic_plan")
        .execute(&mut *tx)
        .await
        .unwrap();
    tx
}

/// Rows of `table` this transaction fetched through an index so far.
async fn fetched(tx: &mut Transaction<'static, Postgres>, table: &str) -> i64 {
    sqlx::query_scalar(
        "select coalesce(idx_tup_fetch, 0) from pg_stat_xact_user_tables where relname = $1",
    )
    .bind(table)
    .fetch_one(&mut **tx)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_page_deep_in_a_list_reads_from_its_cursor_on_in_a_generic_plan() {
    let db = TestDb::new().await;
    fill(&db).await;
    let last = |names: Vec<String>| {
        assert_eq!(names.len(), PAGE as usize, "{names:?}");
        assert_eq!(names[0], "n-02900");
        names.last().cloned().unwrap()
    };

    let mut tx = generic(&db).await;
    let rows = readmodel::function_rows_after(&mut *tx, NS, Some(DEEP), PAGE)
        .await
        .unwrap();
    assert_eq!(last(rows.into_iter().map(|r| r.name).collect()), "n-02999");
    let read = fetched(&mut tx, "functions").await;
    assert!(read <= 2 * PAGE, "the functions' page read {read} rows");
    tx.rollback().await.unwrap();

    let mut tx = generic(&db).await;
    let rows = triggers::trigger_rows(&mut *tx, NS, Some(DEEP), PAGE)
        .await
        .unwrap();
    assert_eq!(last(rows.into_iter().map(|r| r.name).collect()), "n-02999");
    let read = fetched(&mut tx, "triggers").await;
    assert!(read <= 2 * PAGE, "the triggers' page read {read} rows");
    tx.rollback().await.unwrap();

    let mut tx = generic(&db).await;
    let rows = jobs::job_rows(&mut *tx, NS, Some(DEEP), PAGE)
        .await
        .unwrap();
    assert_eq!(last(rows.into_iter().map(|r| r.name).collect()), "n-02999");
    let read = fetched(&mut tx, "jobs").await;
    assert!(read <= 2 * PAGE, "the jobs' page read {read} rows");
    tx.rollback().await.unwrap();

    // The first page still starts at the first name.
    let first = readmodel::function_rows_after(&db.pool, NS, None, PAGE)
        .await
        .unwrap();
    assert_eq!(first[0].name, "n-00000");
    assert_eq!(first.len(), PAGE as usize);
}
