//! F2: the API process is killed (SIGKILL) right after a command's
//! transaction commits, before its answer is sent. The client sees the
//! connection close with no answer; after a restart, a retry with the same
//! Idempotency-Key returns the answer the command would have had, and
//! appends nothing.

use std::os::unix::process::ExitStatusExt;
use std::time::Duration;

use sless_testkit::{TestDb, TestS3, scratch_dir};

use crate::harness::{self, api_command, event_count, start_api_binary, unique_zip};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f2_api_killed_after_commit_answers_the_retry_from_the_idempotency_key() {
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let logs = scratch_dir("f2");
    let _projector = harness::projector(db.pool.clone());

    // The deployment's own order: migrations first (a no-op here: the test
    // database is migrated already), then the API.
    let migrate = tokio::process::Command::from(api_command(&db.url, &s3))
        .arg("migrate")
        .output()
        .await
        .unwrap();
    assert!(migrate.status.success(), "{migrate:?}");

    let c = harness::checker("http://127.0.0.1:1", "f2-user");
    let names = ["alpha", "bravo", "charlie"];
    let commands = names
        .iter()
        .flat_map(|n| [c.create(n), c.upload(n, unique_zip(&format!("f2-{n}")))]);
    let mut kills = 0;
    for (i, command) in commands.enumerate() {
        let mut crashing = api_command(&db.url, &s3);
        crashing.env(sless_api::plumbing::command::CRASH_AFTER_COMMIT_ENV, "1");
        let log = logs.join(format!("api-{i}.log"));
        let (mut api, url) = start_api_binary(crashing, &log).await;
        c.set_base(&url);
        let before = event_count(&db.pool).await;

        let op = c.send(command).await;
        let exited = tokio::time::timeout(Duration::from_secs(10), api.wait_exit(Duration::MAX))
            .await
            .unwrap_or_else(|_| {
                panic!(
                    "the API did not die after {:?} (answer: {:?}); its log:\n{}",
                    op.effect,
                    op.first,
                    std::fs::read_to_string(&log).unwrap_or_default()
                )
            });
        assert_eq!(exited.signal(), Some(libc::SIGKILL), "{exited:?}");
        assert!(
            op.first.is_indeterminate() && op.first.status().is_none(),
            "no answer at all, the connection just closes: {:?}",
            op.first
        );
        kills += 1;
        assert_eq!(
            event_count(&db.pool).await,
            before + 1,
            "the command was committed before the kill"
        );
    }

    let (_api, url) = start_api_binary(api_command(&db.url, &s3), &logs.join("api.log")).await;
    c.set_base(&url);
    let committed = event_count(&db.pool).await;
    c.retry_indeterminate(3).await;
    let after_retry = event_count(&db.pool).await;
    // A second retry of every command gets the same answer again.
    for op in c.ops() {
        assert!(op.last().is_acked(), "{:?}", op.last());
        let (again, _) = c.attempt(&op.key, &op.request).await;
        assert_eq!(
            &again,
            op.last(),
            "the same status and body for {:?}",
            op.effect
        );
    }
    let after_second_retry = event_count(&db.pool).await;
    assert_eq!(after_retry, committed, "a retry appends nothing");
    assert_eq!(
        after_second_retry, committed,
        "a second retry appends nothing"
    );

    let counts = c.check(&db.pool).await;
    counts.report(
        "F2",
        &format!(
            "{}_commands(3_creates,3_uploads)_each_to_a_fresh_api_process",
            c.ops().len()
        ),
        &format!("{kills}x_sigkill_after_commit_before_answer"),
        &format!("events_added_by_retries={}", after_second_retry - committed),
    );
    assert_eq!(
        counts.recovered, kills,
        "every killed command is acked on retry"
    );
}
