//! F3: PostgreSQL crashes (`pg_ctl stop -m immediate`: SIGQUIT to the
//! postmaster) under a steady load of 50 requests/s, and comes back on the
//! same port 4 s later. While it is down the API answers 503 quickly; what
//! was acked is all there; the pool serves again soon after the database is
//! back.

use std::time::{Duration, Instant};

use sless_api::AppState;
use sless_embedded::{PostgresOptions, PrivatePostgres};
use sless_testkit::{TestS3, scratch_dir};
use sqlx::Connection;

use crate::harness::{
    self, ack_ratio, base_functions, first_ack_after, hold_load, latency_ms, mixed_command,
};

const RATE: u32 = 50;
const CRASH_AT: Duration = Duration::from_secs(3);
const DOWN_FOR: Duration = Duration::from_secs(4);
/// The load goes on this long after the database accepts connections again.
const AFTER: Duration = Duration::from_secs(5);
/// Connections of the API's pool. A debug build spends about 130 ms of CPU
/// on one SCRAM handshake, so the 30 of `sless api` reconnecting at once on
/// two cores take longer than the request deadline, and each is cancelled
/// with its request before it is done (release builds: a few ms each). See
/// docs/reliability.md.
pub const API_POOL: u32 = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f3_postgres_crash_under_load_gives_quick_503s_loses_nothing_and_recovers() {
    // A cluster of its own: crashing the shared test server would take every
    // other test down with it.
    let mut pg = PrivatePostgres::start_with(
        PostgresOptions::new(scratch_dir("f3-pg")),
        sless_testkit::postgres_host(),
    )
    .await
    .expect("a private PostgreSQL");
    let mut admin = sqlx::PgConnection::connect(&pg.url("postgres"))
        .await
        .unwrap();
    sqlx::query("create database sless")
        .execute(&mut admin)
        .await
        .unwrap();
    admin.close().await.unwrap();
    let url = pg.url("sless");
    let pool = sless_store::connect(&url, API_POOL).await.unwrap();
    sless_store::migrate(&pool).await.unwrap();
    let check_pool = sless_store::connect(&url, 4).await.unwrap();
    let _projector = harness::projector(sless_store::connect(&url, 4).await.unwrap());

    let s3 = TestS3::new().await;
    harness::warm(&pool, API_POOL).await;
    let state = AppState::new(pool, s3.blobs(), harness::auth());
    let deadline = state.deadlines.request;
    let c = harness::checker(&harness::serve_api(state).await, "f3-user");
    let base = base_functions(&c, "f3-base", 5).await;

    let started = Instant::now();
    let (stop_load, load_stopped) = tokio::sync::oneshot::channel::<()>();
    let load = {
        let c = c.clone();
        tokio::spawn(async move {
            let until = async {
                let _ = load_stopped.await;
            };
            hold_load(&c, RATE, until, |i| mixed_command(&c, "f3", &base, i)).await
        })
    };
    tokio::time::sleep_until((started + CRASH_AT).into()).await;
    pg.crash().await.unwrap();
    let crashed = Instant::now();
    eprintln!(
        "F3: PostgreSQL crashed {:?} into the load",
        crashed - started
    );
    tokio::time::sleep(DOWN_FOR).await;
    let restarting = Instant::now();
    pg.start_again().await.unwrap();
    let back = Instant::now();
    eprintln!(
        "F3: PostgreSQL accepts connections again after {:?} of recovery",
        back - restarting
    );
    tokio::time::sleep(AFTER).await;
    let _ = stop_load.send(());
    let held = started.elapsed();
    let ops = load.await.unwrap();

    // While it was down: quick 503s, no 500s, no hangs.
    let down: Vec<_> = ops
        .iter()
        .filter(|o| o.sent_at >= crashed && o.sent_at < restarting)
        .collect();
    assert!(!down.is_empty());
    for op in &down {
        assert!(
            op.first.is_acked() || op.first.status() == Some(503),
            "while the database is down: an answer, or a 503 ({:?})",
            op.first
        );
    }
    let refused: Vec<_> = down
        .iter()
        .copied()
        .filter(|o| o.first.status() == Some(503))
        .collect();
    let (n503, p50_503, max_503) = latency_ms(&refused);
    let (_, _, slowest_down) = latency_ms(&down);
    assert!(n503 > 0, "requests during the outage got 503s");
    assert!(
        // A second for a timer firing late on a busy machine.
        Duration::from_millis(slowest_down as u64) <= deadline + Duration::from_secs(1),
        "the slowest answer while down took {slowest_down} ms (deadline {deadline:?})"
    );

    // Back: the pool hands out working connections again within 10 s.
    let recovered = first_ack_after(&ops, back).expect("an ack after the database came back");
    assert!(
        recovered <= Duration::from_secs(10),
        "recovered after {recovered:?}"
    );
    let before = ack_ratio(ops.iter().filter(|o| o.sent_at < crashed));
    let after = ack_ratio(ops.iter().filter(|o| o.sent_at >= back + recovered));
    let acked_before_crash = ops
        .iter()
        .filter(|o| o.first.is_acked() && o.sent_at + o.latency < crashed)
        .count();

    c.retry_indeterminate(3).await;
    let counts = c.check(&check_pool).await;
    counts.report(
        "F3",
        &format!(
            "{RATE}rps_x_{}s_creates+uploads({}_requests)",
            held.as_secs(),
            ops.len()
        ),
        &format!(
            "postgres_crash_immediate_at_{}s_down_{}s",
            CRASH_AT.as_secs(),
            DOWN_FOR.as_secs()
        ),
        &format!(
            "acked_before_crash={acked_before_crash} ack_ratio_before_crash={before:.2} down_503s={n503} down_503_p50_ms={p50_503} down_503_max_ms={max_503} down_slowest_ms={slowest_down} pg_recovery_ms={} pool_recovered_ms={} ack_ratio_after_recovery={after:.2}",
            (back - restarting).as_millis(),
            recovered.as_millis()
        ),
    );
    assert!(acked_before_crash > 0);
}
