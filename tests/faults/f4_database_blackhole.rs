//! F4: the network between the API and PostgreSQL drops everything for 30 s
//! (a blackhole: no RST, no FIN, connections just go silent) under a steady
//! load. Every request still gets an answer within 5 s; the server ends
//! every transaction the API left open; after healing, work resumes.

use std::time::{Duration, Instant};

use sless_api::AppState;
use sless_testkit::{TestDb, TestS3};

use crate::f3_postgres_crash::API_POOL;
use crate::harness::{
    self, ack_ratio, base_functions, first_ack_after, hold_load, latency_ms, mixed_command,
    pg_addr, pg_url_via,
};
use crate::proxy::{FaultProxy, Mode};

const RATE: u32 = 10;
const CUT_AT: Duration = Duration::from_secs(3);
const CUT_FOR: Duration = Duration::from_secs(30);
const AFTER: Duration = Duration::from_secs(6);
/// Every request is answered within this, blackhole or not.
const ANSWER_WITHIN: Duration = Duration::from_secs(5);

/// The longest any session of `db` has been idle inside a transaction
/// (zero when none is), seen from the server.
async fn longest_idle_in_transaction(db: &TestDb) -> Duration {
    let secs: f64 = sqlx::query_scalar(
        "select coalesce(max(extract(epoch from now() - state_change)), 0)::float8
         from pg_stat_activity
         where datname = $1 and state like 'idle in transaction%'",
    )
    .bind(&db.name)
    .fetch_one(&db.pool)
    .await
    .unwrap();
    Duration::from_secs_f64(secs.max(0.0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f4_blackholed_database_link_fails_requests_fast_and_leaves_no_open_transaction() {
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let proxy = FaultProxy::start(pg_addr(&db.url)).await;
    let via_proxy = pg_url_via(&db.url, proxy.addr());
    let api_pool = sless_store::connect(&via_proxy, API_POOL).await.unwrap();
    harness::warm(&api_pool, API_POOL).await;
    // The projector and the checks reach the database directly.
    let _projector = harness::projector(db.pool.clone());
    let c = harness::checker(
        &harness::serve_api(AppState::new(api_pool, s3.blobs(), harness::auth())).await,
        "f4-user",
    );
    let base = base_functions(&c, "f4-base", 5).await;

    let started = Instant::now();
    let load = {
        let c = c.clone();
        tokio::spawn(async move {
            let until = tokio::time::sleep(CUT_AT + CUT_FOR + AFTER);
            hold_load(&c, RATE, until, |i| mixed_command(&c, "f4", &base, i)).await
        })
    };
    // A transaction that is open when the link goes (as a request's would
    // be, mid-command), holding a transaction id and so the projector's
    // watermark.
    let holder = sless_store::connect(&via_proxy, 1).await.unwrap();
    let mut open_tx = holder.begin().await.unwrap();
    sqlx::query("select pg_current_xact_id()")
        .execute(&mut *open_tx)
        .await
        .unwrap();
    tokio::time::sleep_until((started + CUT_AT).into()).await;
    proxy.set(Mode::Blackhole);
    let cut = Instant::now();
    eprintln!("F4: the API's database link is blackholed");
    // Watch the server's side while the link is cut.
    let mut longest_idle = Duration::ZERO;
    while cut.elapsed() < CUT_FOR {
        longest_idle = longest_idle.max(longest_idle_in_transaction(&db).await);
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    let left_idle = longest_idle_in_transaction(&db).await;
    proxy.set(Mode::Pass);
    let healed = Instant::now();
    eprintln!("F4: healed");
    let ops = load.await.unwrap();

    // Every request got its answer in time, before, during and after the cut.
    let all: Vec<_> = ops.iter().collect();
    let (n, _, slowest) = latency_ms(&all);
    let during: Vec<_> = ops
        .iter()
        .filter(|o| o.sent_at >= cut && o.sent_at < healed)
        .collect();
    let (n_during, p50_during, max_during) = latency_ms(&during);
    assert!(n_during > 0);
    assert!(
        Duration::from_millis(slowest as u64) < ANSWER_WITHIN,
        "the slowest of {n} answers took {slowest} ms"
    );
    for op in &during {
        assert!(
            op.first.is_acked() || op.first.status() == Some(503),
            "during the cut: an answer or a 503, {:?}",
            op.first
        );
    }
    // The server ended what the cut left open (idle_in_transaction_session_timeout).
    drop(open_tx);
    assert!(
        longest_idle >= Duration::from_secs(5),
        "the transaction open at the cut was seen idle ({longest_idle:?})"
    );
    assert!(
        longest_idle < Duration::from_secs(15),
        "a transaction stayed idle for {longest_idle:?}"
    );
    assert!(
        left_idle < Duration::from_secs(1),
        "a transaction was still open after {left_idle:?} when the cut healed"
    );

    let resumed = first_ack_after(&ops, healed).expect("work resumes after healing");
    assert!(
        resumed < Duration::from_secs(10),
        "resumed after {resumed:?}"
    );
    let before = ack_ratio(ops.iter().filter(|o| o.sent_at < cut));
    let after = ack_ratio(ops.iter().filter(|o| o.sent_at >= healed + resumed));

    c.retry_indeterminate(3).await;
    let counts = c.check(&db.pool).await;
    counts.report(
        "F4",
        &format!(
            "{RATE}rps_x_{}s_creates+uploads({}_requests)",
            (CUT_AT + CUT_FOR + AFTER).as_secs(),
            ops.len()
        ),
        &format!("api_to_postgres_blackhole_{}s", CUT_FOR.as_secs()),
        &format!(
            "slowest_ms={slowest} ack_ratio_before_cut={before:.2} cut_requests={n_during} cut_p50_ms={p50_during} cut_max_ms={max_during} longest_idle_in_tx_ms={} idle_in_tx_at_heal_ms={} resumed_ms={} ack_ratio_after_resume={after:.2}",
            longest_idle.as_millis(),
            left_idle.as_millis(),
            resumed.as_millis()
        ),
    );
}
