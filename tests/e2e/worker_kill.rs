//! A worker killed with SIGKILL in the middle of an item: another worker
//! takes the item once the lease expires and finishes it.

use std::time::{Duration, Instant};

use serde_json::json;
use sless_api::{AppState, Auth};
use sless_testkit::{TestDb, TestS3, scratch_dir};

use crate::{Client, Proc, processes_mentioning, zip_files};

const SECRET: &[u8] = b"worker-kill-test-secret";

fn worker(db: &TestDb, s3: &TestS3, id: &str, dir: &std::path::Path) -> Proc {
    let mut cmd = crate::sless_on(&db.url, s3);
    cmd.arg("worker")
        .env("SLESS_DATA_DIR", dir)
        .env("SLESS_WORKER_ID", id)
        .env("SLESS_LEASE_SECS", "2")
        .env("SLESS_SWEEP_SECS", "0.5");
    Proc::spawn(cmd, &dir.with_extension("log"))
}

async fn event_count(db: &TestDb, event_type: &str) -> i64 {
    sqlx::query_scalar("select count(*) from events where type = $1")
        .bind(event_type)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_worker_killed_mid_item_loses_its_lease_and_another_worker_finishes_the_item() {
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let state = AppState::new(db.pool.clone(), s3.blobs(), Auth::hs256(SECRET, None, None));
    let (url, fn_url) = crate::serve_origins(state).await;
    let projector_pool = db.pool.clone();
    let (_stop_tx, stop) = tokio::sync::watch::channel(false);
    tokio::spawn(sless_projector::run(
        projector_pool,
        Duration::from_millis(200),
        stop,
    ));

    let c = Client {
        url,
        fn_url,
        token: sless_api::issue_hs256(SECRET, "killer", Duration::from_secs(3600)),
        namespace: sless_domain::Namespace::for_subject("killer").to_string(),
        http: reqwest::Client::new(),
    };
    let res = c
        .create(json!({"name": "slow", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201);
    // Importing the module takes 4 s, so the deploy is still going when the worker dies.
    let handler = "import time\ntime.sleep(4)\n\ndef handle(event):\n    return 'finished'\n";
    assert_eq!(
        c.upload("slow", zip_files(&[("handler.py", handler)]))
            .await
            .status(),
        202
    );

    let root = scratch_dir("kill");
    let (dir1, dir2) = (root.join("w1"), root.join("w2"));
    let mut w1 = worker(&db, &s3, "w1", &dir1);
    sless_testkit::eventually(
        "w1 to be deploying the function",
        Duration::from_secs(60),
        || async {
            let owner: Option<String> =
                sqlx::query_scalar("select lease_owner from work_items where state = 'running'")
                    .fetch_optional(&db.pool)
                    .await
                    .unwrap()
                    .flatten();
            // The function's own process, importing its module: its jail
            // is set up (a worker killed while bwrap still sets a jail up
            // can leave the jail behind, a race of bwrap's own).
            let importing =
                !sless_testkit::processes::jailed_programs(dir1.to_str().unwrap()).is_empty();
            let deploying = owner.as_deref() == Some("w1")
                && event_count(&db, "BuildSucceeded").await == 1
                && importing;
            deploying.then_some(())
        },
    )
    .await;

    w1.signal(libc::SIGKILL);
    w1.wait_exit(Duration::from_secs(10)).await;
    let killed = Instant::now();
    // The function process dies with its worker.
    sless_testkit::eventually(
        "w1's function process to die with it",
        Duration::from_secs(10),
        || async {
            processes_mentioning(dir1.to_str().unwrap())
                .is_empty()
                .then_some(())
        },
    )
    .await;
    assert_eq!(event_count(&db, "FunctionDeployed").await, 0);

    let _w2 = worker(&db, &s3, "w2", &dir2);
    // Lease 2 s + sweep 0.5 s + the 4 s import, with room for a slow machine.
    let f = c.wait_ready("slow", Duration::from_secs(60)).await;
    println!(
        "killed worker's item finished by another worker {:?} after the kill",
        killed.elapsed()
    );
    assert_eq!(f["deployed_version"], 1);
    assert_eq!(event_count(&db, "FunctionDeployed").await, 1);
    // The item is completed right after the last event is appended.
    sless_testkit::eventually(
        "the item to be completed",
        Duration::from_secs(30),
        || async { (sless_store::queue::counts(&db.pool).await.unwrap() == (0, 0)).then_some(()) },
    )
    .await;
    let answer = c
        .http
        .get(format!("{}/fn/{}/slow", c.fn_url, c.namespace))
        .send()
        .await
        .unwrap();
    assert_eq!(answer.text().await.unwrap(), "finished");
    assert!(
        !processes_mentioning(dir2.to_str().unwrap()).is_empty(),
        "w2 runs the function now"
    );
}
