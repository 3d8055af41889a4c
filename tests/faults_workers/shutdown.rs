//! F9: SIGTERM to a worker process holding items. It stops claiming, lets
//! the items that can finish finish within its grace period, returns the
//! rest to the queue (pending, due now, attempt kept) and exits within
//! 10 s, leaving nothing running for another worker's lease sweep.

use std::time::{Duration, Instant};

use sless_domain::FunctionKey;
use sless_store::PgPool;
use sless_store::queue;
use sless_testkit::scratch_dir;
use sqlx::Row;

use crate::harness::{
    Acked, Stack, all_settled, answering, event_count, fast, held_while, queue_empty, report, secs,
    slow_import, tally, within,
};
use crate::processes_mentioning;

/// A lease far longer than the scenario: only the worker itself can hand
/// its items back in time.
const LEASE_SECS: &str = "30";
/// What the worker may take to stop.
const EXIT_BOUND: Duration = Duration::from_secs(10);
/// How long the finishing functions take to import: they are mid-deploy at
/// the SIGTERM and done well within the grace period.
const FINISHING_IMPORT_SECS: f64 = 4.0;

/// A work item's row, whatever its state.
#[derive(Debug, PartialEq)]
struct ItemRow {
    state: String,
    attempts: i32,
    owner: Option<String>,
    due: bool,
}

async fn item(pool: &PgPool, key: &FunctionKey) -> Option<ItemRow> {
    let row = sqlx::query(
        "select state, attempts, lease_owner, run_at <= now() as due from work_items where key = $1",
    )
    .bind(key.queue_key())
    .fetch_optional(pool)
    .await
    .unwrap()?;
    Some(ItemRow {
        state: row.get("state"),
        attempts: row.get("attempts"),
        owner: row.get("lease_owner"),
        due: row.get("due"),
    })
}

/// The row version (`xmin`) of a key's item: it changes with every update,
/// so a claim leaves a trace even if the item is handed back unstarted.
async fn row_version(pool: &PgPool, key: &FunctionKey) -> Option<String> {
    sqlx::query_scalar("select xmin::text from work_items where key = $1")
        .bind(key.queue_key())
        .fetch_optional(pool)
        .await
        .unwrap()
}

async fn running(pool: &PgPool) -> i64 {
    queue::counts(pool).await.unwrap().1
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f9_sigterm_finishes_or_hands_back_every_item_and_leaves_nothing_to_sweep() {
    let _cluster = crate::shared().await;
    let stack = Stack::start("f9", true).await;
    let pool = stack.pool().clone();
    let root = scratch_dir("f9");
    let (dir1, dir2) = (root.join("w1"), root.join("w2"));
    let hold = crate::Beacon::start().await;
    let env = [
        ("SLESS_LEASE_SECS", LEASE_SECS),
        ("SLESS_WORKER_CONCURRENCY", "4"),
        ("SLESS_SWEEP_SECS", "0.5"),
        // Its functions call the test's beacon on loopback.
        ("SLESS_SANDBOX_NETWORK", "host"),
    ];
    let mut acked = Acked::default();

    let mut w1 = stack.worker_process("w1", &dir1, &env);
    // Four items fill w1: two whose deploy hangs, two that finish in a few seconds.
    let held = ["held-a", "held-b"];
    let finishing = ["finishing-a", "finishing-b"];
    for name in held {
        stack.create(name).await;
        acked.upload(name, stack.upload(name, &held_while(&hold, name)).await);
    }
    for name in finishing {
        stack.create(name).await;
        let source = slow_import(FINISHING_IMPORT_SECS, name);
        acked.upload(name, stack.upload(name, &source).await);
    }
    let in_flight: Vec<FunctionKey> = held
        .iter()
        .chain(&finishing)
        .map(|n| stack.key(n))
        .collect();
    sless_testkit::eventually(
        "w1 to be deploying four functions",
        Duration::from_secs(60),
        || async {
            for key in &in_flight {
                let owned = item(&pool, key)
                    .await
                    .is_some_and(|r| r.owner.as_deref() == Some("w1"));
                if !owned || event_count(&pool, key, "BuildSucceeded").await != 1 {
                    return None;
                }
            }
            Some(())
        },
    )
    .await;
    // Two more wait in the queue: w1 has no free slot for them.
    let queued = ["queued-a", "queued-b"];
    for name in queued {
        stack.create(name).await;
        acked.upload(name, stack.upload(name, &fast(name)).await);
    }
    let mut untouched = Vec::new();
    for name in queued {
        untouched.push((name, row_version(&pool, &stack.key(name)).await));
    }
    let mut finishing_at_stop = 0;
    for name in finishing {
        if event_count(&pool, &stack.key(name), "FunctionDeployed").await == 0 {
            finishing_at_stop += 1;
        }
    }

    w1.signal(libc::SIGTERM);
    let stopped = Instant::now();
    // Work that arrives after the SIGTERM is not w1's to take.
    stack.create("late").await;
    acked.upload("late", stack.upload("late", &fast("late")).await);
    untouched.push(("late", row_version(&pool, &stack.key("late")).await));
    let exited = within(Duration::from_secs(20), || {
        let done = w1.child.try_wait().unwrap().is_some();
        async move { done }
    })
    .await
    .map(|_| stopped.elapsed());
    let status = w1.child.try_wait().unwrap();

    // What w1 left behind.
    let left_running = running(&pool).await;
    let swept = queue::release_expired(&pool).await.unwrap();
    // Handed back: pending, due now, the attempt kept.
    let handed_back = ItemRow {
        state: "pending".into(),
        attempts: 1,
        owner: None,
        due: true,
    };
    let mut released = 0;
    for name in held {
        if item(&pool, &stack.key(name)).await.as_ref() == Some(&handed_back) {
            released += 1;
        }
    }
    let mut finished = 0;
    for name in finishing {
        let key = stack.key(name);
        // Its item completed: none is left but the reconcile w1 enqueued
        // when it left (to place it elsewhere), which nobody took yet.
        let placing_again = ItemRow {
            state: "pending".into(),
            attempts: 0,
            owner: None,
            due: true,
        };
        let item = item(&pool, &key).await;
        if item.is_none_or(|i| i == placing_again)
            && event_count(&pool, &key, "FunctionDeployed").await == 1
        {
            finished += 1;
        }
    }
    let mut claimed_after_stop = 0;
    for (name, version) in &untouched {
        let key = stack.key(name);
        let row = item(&pool, &key).await;
        let pending = row.is_some_and(|r| r.state == "pending" && r.attempts == 0);
        if !pending || row_version(&pool, &key).await != *version {
            claimed_after_stop += 1;
        }
    }
    let expired_errors: i64 =
        sqlx::query_scalar("select count(*) from work_items where last_error like '%expired%'")
            .fetch_one(&pool)
            .await
            .unwrap();
    let orphans = within(Duration::from_secs(10), || {
        let gone = processes_mentioning(dir1.to_str().unwrap()).is_empty();
        async move { gone }
    })
    .await;

    // Another worker picks up what w1 handed back, at once.
    hold.release();
    let _w2 = stack.worker_process("w2", &dir2, &env);
    let settled = within(Duration::from_secs(60), || all_settled(&stack, &acked)).await;
    let drained = within(Duration::from_secs(30), || queue_empty(&pool)).await;
    let t = tally(&stack, &acked).await;
    // Every function answers again: those w1 ran stopped with it, and it
    // left, so w2 placed them at once, well before w1's lease (after which
    // w2's sweep would have placed them anyway).
    let answered = within(
        Duration::from_secs(LEASE_SECS.parse::<u64>().unwrap() - 5),
        || async {
            let (answering, total) = answering(&stack, &acked).await;
            answering == total
        },
    )
    .await;
    let (answering, _) = answering(&stack, &acked).await;

    report(
        "F9",
        &[
            (
                "load",
                format!(
                    "{}_functions(2_hanging,2_finishing,3_queued)_on_w1_x4",
                    acked.uploads.len()
                ),
            ),
            ("faults", "SIGTERM_to_w1".into()),
            ("acked", t.acked.to_string()),
            ("lost", t.lost.to_string()),
            ("duplicated", t.duplicated.to_string()),
            ("exit_in", exited.map_or("over_20s".into(), secs)),
            (
                "exit",
                status.map_or("none".into(), |s| {
                    s.code().map_or("by_signal".into(), |c| c.to_string())
                }),
            ),
            (
                "finished_in_grace",
                format!("{finished}/{finishing_at_stop}"),
            ),
            ("handed_back", format!("{released}/{}", held.len())),
            ("claimed_after_sigterm", claimed_after_stop.to_string()),
            ("left_running", left_running.to_string()),
            ("swept", swept.to_string()),
            ("api_retries", stack.retried_commands()),
            (
                "answering_after",
                format!("{answering}/{}", acked.last().len()),
            ),
        ],
    );
    assert_eq!(t.lost, 0, "{:?}", t.findings);
    assert_eq!(t.duplicated, 0, "{:?}", t.findings);
    let exit_in = exited.expect("w1 did not exit within 20 s of SIGTERM");
    assert!(exit_in <= EXIT_BOUND, "w1 took {exit_in:?} to exit");
    assert!(
        status.is_some_and(|s| s.success()),
        "w1 exited with {status:?}"
    );
    assert_eq!(left_running, 0, "w1 left items running for the sweeper");
    assert_eq!(swept, 0, "the sweeper found expired leases");
    assert_eq!(expired_errors, 0, "an item was released by lease expiry");
    assert_eq!(
        released,
        held.len(),
        "the hanging items were not handed back pending, due now, with their attempt"
    );
    assert_eq!(
        finishing_at_stop,
        finishing.len(),
        "the SIGTERM came too late to test the grace"
    );
    assert_eq!(
        finished,
        finishing.len(),
        "items that could finish were cut short"
    );
    assert_eq!(claimed_after_stop, 0, "w1 claimed work after SIGTERM");
    assert!(orphans.is_some(), "w1's function processes outlived it");
    assert!(
        settled.is_some(),
        "not every function settled: {:?}",
        t.findings
    );
    assert!(drained.is_some(), "work was left in the queue");
    assert!(
        answered.is_some(),
        "only {answering} of {} functions answer within w1's lease after it stopped",
        acked.last().len()
    );

    stack.stop();
}
