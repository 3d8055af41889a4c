//! F1: a worker process killed with SIGKILL in the middle of an item while
//! another worker is busy with a stream of uploads. The item passes to the
//! other worker within lease + sweep; the dead worker's attempt is fenced:
//! its completion, heartbeat, retry and event appends change nothing.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sless_store::queue::{self, Retry};
use sless_testkit::scratch_dir;
use sless_workers::HandlerError;
use sless_workers::local::{LocalDriver, LocalDriverConfig};

use crate::harness::{
    Acked, Stack, all_settled, answering, event_count, fast, held_while, queue_empty, report,
    running_item, secs, stream_events, tally, within,
};
use crate::processes_mentioning;

/// How long a worker may take to start and deploy a dead worker's
/// functions on a loaded two-core machine (it builds each again: builds
/// are kept per worker).
const START_ROOM: Duration = Duration::from_secs(30);
/// The workers' lease and sweep (`SLESS_LEASE_SECS`, `SLESS_SWEEP_SECS` below).
const LEASE: Duration = Duration::from_secs(2);
const SWEEP: Duration = Duration::from_millis(500);
const LOAD_FUNCTIONS: usize = 10;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f1_killed_workers_item_finishes_elsewhere_and_its_late_writes_are_fenced() {
    let _cluster = crate::shared().await;
    let stack = Stack::start("f1", true).await;
    let pool = stack.pool().clone();
    let root = scratch_dir("f1");
    let (dir1, dir2) = (root.join("w1"), root.join("w2"));
    let env = |concurrency| {
        [
            ("SLESS_LEASE_SECS", "2"),
            ("SLESS_SWEEP_SECS", "0.5"),
            ("SLESS_WORKER_CONCURRENCY", concurrency),
            // Its functions call the test's beacon on loopback.
            ("SLESS_SANDBOX_NETWORK", "host"),
        ]
    };
    let (env1, env2) = (env("1"), env("4"));
    let mut acked = Acked::default();

    // w1 runs one item at a time: the slow deploy is the only item it ever
    // holds, so it has completed nothing when it dies.
    let mut w1 = stack.worker_process("w1", &dir1, &env1);
    // slow's import does not finish while the hold file exists: the kill
    // lands in the middle of its deploy, however loaded the machine.
    let hold = crate::Beacon::start().await;
    let slow = stack.key("slow");
    stack.create("slow").await;
    acked.upload(
        "slow",
        stack.upload("slow", &held_while(&hold, "slow")).await,
    );
    sless_testkit::eventually(
        "w1 to be deploying slow",
        Duration::from_secs(60),
        || async {
            let deploying = running_item(&pool, &slow)
                .await
                .is_some_and(|i| i.owner == "w1")
                && event_count(&pool, &slow, "BuildSucceeded").await == 1
                && !processes_mentioning(dir1.to_str().unwrap()).is_empty();
            deploying.then_some(())
        },
    )
    .await;

    // The load: w2 builds and deploys ten functions, each uploaded twice.
    let mut w2 = stack.worker_process("w2", &dir2, &env2);
    for round in 1..=2 {
        for i in 0..LOAD_FUNCTIONS {
            let name = format!("load-{i}");
            if round == 1 {
                stack.create(&name).await;
            }
            let v = stack
                .upload(&name, &fast(&format!("{name}-v{round}")))
                .await;
            acked.upload(&name, v);
        }
    }
    sless_testkit::eventually("w2 to be busy", Duration::from_secs(30), || async {
        let n: i64 = sqlx::query_scalar(
            "select count(*) from work_items where state = 'running' and lease_owner = 'w2'",
        )
        .fetch_one(&pool)
        .await
        .unwrap();
        (n > 0).then_some(())
    })
    .await;

    let stale = running_item(&pool, &slow).await.expect("w1 holds slow");
    assert_eq!(stale.owner, "w1");
    w1.signal(libc::SIGKILL);
    w1.wait_exit(Duration::from_secs(10)).await;
    let killed = Instant::now();
    assert_eq!(
        event_count(&pool, &slow, "FunctionDeployed").await,
        0,
        "the kill must land before slow's deploy finished"
    );

    // w2's sweep hands the item back once the lease has run out; w2 takes
    // it as soon as one of its slots is free of the load.
    let released = within(LEASE + SWEEP + Duration::from_secs(10), || async {
        let owner: Option<Option<String>> =
            sqlx::query_scalar("select lease_owner from work_items where id = $1")
                .bind(stale.id)
                .fetch_optional(&pool)
                .await
                .unwrap();
        owner.is_some_and(|o| o.as_deref() != Some("w1"))
    })
    .await;
    let released_in = released.map(|_| killed.elapsed());
    let reclaimed = within(Duration::from_secs(30), || async {
        running_item(&pool, &slow)
            .await
            .is_some_and(|i| i.owner == "w2" && i.id == stale.id)
    })
    .await;
    let reclaimed_in = reclaimed.map(|_| killed.elapsed());

    // The dead worker's attempt, were it to wake: every write it names is refused.
    let heartbeat = queue::heartbeat(&pool, &stale, LEASE).await.unwrap();
    let completed = queue::complete(&pool, &stale).await.unwrap();
    let retried = queue::retry(&pool, &stale, "late", Duration::ZERO)
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    let dead_lettered = queue::dead_letter(&mut tx, &stale, "late").await.unwrap();
    drop(tx);
    let held_by_w2 = running_item(&pool, &slow).await;
    // w2's deploy of slow may finish now.
    hold.release();
    // Its reconciler, run to the end with the stale attempt on a driver of
    // its own: it builds, but the append of what it built is refused.
    let zombie_dir = root.join("zombie");
    let zombie_driver = Arc::new(LocalDriver::new(LocalDriverConfig::new(&zombie_dir)).unwrap());
    let zombie = stack
        .reconciler(zombie_driver.clone())
        .reconcile(&stale)
        .await;
    zombie_driver.shutdown().await;
    let zombie_events = stream_events(&pool, &slow)
        .await
        .iter()
        .filter(|e| e.data().to_string().contains(zombie_dir.to_str().unwrap()))
        .count();
    let fenced = !heartbeat
        && !completed
        && retried == Retry::LeaseLost
        && !dead_lettered
        && matches!(zombie, Err(HandlerError::LeaseLost))
        && zombie_events == 0;

    let settled = within(Duration::from_secs(90), || all_settled(&stack, &acked)).await;
    let drained = within(Duration::from_secs(30), || queue_empty(&pool)).await;
    let ready_in = killed.elapsed();
    // Every function answers again: those w1 ran died with it, and once
    // its heartbeat was a lease old w2's sweep placed them on w2.
    let answered = within(LEASE + SWEEP + Duration::from_secs(60), || async {
        let (answering, total) = answering(&stack, &acked).await;
        answering == total
    })
    .await
    .map(|_| killed.elapsed());
    let (answering_now, functions) = answering(&stack, &acked).await;
    let slow_deploys = event_count(&pool, &slow, "FunctionDeployed").await;

    // Then w2, which runs every function now, is killed too: once its
    // heartbeat is a lease old, the sweep of w3 (started after it) places
    // them all on w3.
    w2.signal(libc::SIGKILL);
    let w2_killed = Instant::now();
    let _ = w2.wait_exit(Duration::from_secs(10)).await;
    let _w3 = stack.worker_process("w3", &root.join("w3"), &env2);
    let placed_bound = LEASE + SWEEP + START_ROOM;
    let placed_again = within(placed_bound + Duration::from_secs(30), || async {
        let (answering, total) = answering(&stack, &acked).await;
        answering == total
    })
    .await
    .map(|_| w2_killed.elapsed());
    let (answering_after_kill, _) = answering(&stack, &acked).await;
    let w1_processes = processes_mentioning(dir1.to_str().unwrap()).len();
    let t = tally(&stack, &acked).await;
    let bound = LEASE + SWEEP;
    report(
        "F1",
        &[
            (
                "load",
                format!(
                    "{}_uploads_of_{}_functions_on_2_worker_processes",
                    acked.uploads.len(),
                    LOAD_FUNCTIONS + 1
                ),
            ),
            ("faults", "kill-9_of_w1_mid_deploy".into()),
            ("acked", t.acked.to_string()),
            ("lost", t.lost.to_string()),
            ("duplicated", t.duplicated.to_string()),
            ("released_in", released_in.map_or("never".into(), secs)),
            ("reclaimed_in", reclaimed_in.map_or("never".into(), secs)),
            ("lease+sweep", secs(bound)),
            ("slow_ready_in", secs(ready_in)),
            ("api_retries", stack.retried_commands()),
            ("late_writes_fenced", fenced.to_string()),
            ("answering", format!("{answering_now}/{functions}")),
            ("all_answering_in", answered.map_or("never".into(), secs)),
            ("faults_then", "kill-9_of_w2_running_every_function".into()),
            (
                "answering_after",
                format!("{answering_after_kill}/{functions}"),
            ),
            ("placed_again_in", placed_again.map_or("never".into(), secs)),
        ],
    );
    let placed_again_in = placed_again.unwrap_or_else(|| {
        panic!("only {answering_after_kill} of {functions} functions answer after w2 was killed")
    });
    assert!(
        placed_again_in <= placed_bound,
        "w2's functions answered again {placed_again_in:?} after the kill, past lease + sweep + \
         start ({placed_bound:?})"
    );
    assert!(
        answered.is_some(),
        "only {answering_now} of {functions} functions answer after w1 was killed"
    );
    assert_eq!(t.lost, 0, "{:?}", t.findings);
    assert_eq!(t.duplicated, 0, "{:?}", t.findings);
    assert!(
        settled.is_some(),
        "not every function settled: {:?}",
        t.findings
    );
    assert!(drained.is_some(), "work was left in the queue");
    // Within lease + sweep, with room for a loaded two-core machine.
    let released_in = released_in.expect("the killed item was never released");
    assert!(
        released_in <= bound + Duration::from_secs(2),
        "the killed item was held {released_in:?}, past lease + sweep ({bound:?})"
    );
    assert!(
        !heartbeat,
        "the dead attempt's heartbeat extended the lease"
    );
    assert!(!completed, "the dead attempt's completion was taken");
    assert_eq!(retried, Retry::LeaseLost);
    assert!(!dead_lettered, "the dead attempt dead-lettered the item");
    let held_by_w2 = held_by_w2.expect("w2 holds slow while its import waits");
    assert_eq!(
        (held_by_w2.owner.as_str(), held_by_w2.attempt),
        ("w2", stale.attempt + 1),
        "the late writes changed the item"
    );
    assert!(
        matches!(zombie, Err(HandlerError::LeaseLost)),
        "the dead attempt's reconciler was not fenced: {zombie:?}"
    );
    assert_eq!(
        zombie_events, 0,
        "an event of the dead attempt was appended"
    );
    assert_eq!(w1_processes, 0, "w1's function process outlived it");
    assert_eq!(
        slow_deploys, 1,
        "slow was deployed more than once before w2 was killed"
    );
    stack.stop();
}
