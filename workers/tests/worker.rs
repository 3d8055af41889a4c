//! The worker loop and the reconciler, driven step by step against a real
//! PostgreSQL, a real S3 server and the local driver.

mod support;

use sless_domain::{FunctionEvent, Phase};
use sless_store::queue;
use support::{Harness, handler, pending};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_upload_is_built_deployed_and_answers() {
    let h = Harness::new().await;
    let key = Harness::key("hello");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;

    assert_eq!(h.worker.run_once(10).await.unwrap(), 1);
    let state = h.state(&key).await;
    assert_eq!(state.phase, Phase::Ready, "{:?}", state.last_error);
    assert_eq!(state.deployed_version, Some(1));
    let types: Vec<_> = h.events(&key).await.iter().map(|e| e.type_name()).collect();
    assert_eq!(
        types,
        [
            "FunctionCreated",
            "FunctionUploaded",
            "BuildStarted",
            "BuildSucceeded",
            "FunctionDeployed"
        ]
    );
    let body: serde_json::Value = reqwest::get(format!("{}/x", state.endpoint.unwrap()))
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["reply"], "v1");
    assert_eq!(pending(&h.db.pool).await, 0);

    // Running the same reconcile again changes nothing: it is idempotent.
    queue::enqueue_reconcile(&h.db.pool, &key.queue_key())
        .await
        .unwrap();
    assert_eq!(h.worker.run_once(10).await.unwrap(), 1);
    assert_eq!(h.events(&key).await.len(), 5);
    h.driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_newer_upload_supersedes_pending_work_and_the_older_version_never_deploys() {
    let h = Harness::new().await;
    let key = Harness::key("fast");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.upload(&key, 2, &[("handler.py", &handler("v2"))], true)
        .await;
    assert_eq!(
        pending(&h.db.pool).await,
        1,
        "two uploads leave one pending reconcile"
    );

    h.worker.run_once(10).await.unwrap();
    let events = h.events(&key).await;
    assert!(
        !events.iter().any(|e| matches!(
            e,
            FunctionEvent::FunctionDeployed { version: 1, .. }
                | FunctionEvent::BuildStarted { version: 1 }
        )),
        "version 1 was built or deployed after version 2 was uploaded: {events:?}"
    );
    let state = h.state(&key).await;
    assert_eq!(
        (state.phase, state.deployed_version),
        (Phase::Ready, Some(2))
    );
    h.driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_build_failure_fails_the_function_with_its_log_and_is_not_retried() {
    let h = Harness::new().await;
    let key = Harness::key("broken");
    h.create(&key).await;
    let files = [
        ("handler.py", "def handle(e):\n    return 'x'\n"),
        (
            "requirements.txt",
            "--no-index\nno-such-package-sless==1.0\n",
        ),
    ];
    h.upload(&key, 1, &files, true).await;
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert_eq!(state.phase, Phase::Failed);
    let err = state.last_error.unwrap();
    assert!(
        err.contains("pip install failed") && err.contains("no-such-package-sless"),
        "{err}"
    );
    assert_eq!(
        pending(&h.db.pool).await,
        0,
        "a user's build error is not retried"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_function_that_crashes_on_import_reports_the_exception() {
    let h = Harness::new().await;
    let key = Harness::key("crash");
    h.create(&key).await;
    h.upload(
        &key,
        1,
        &[("handler.py", "raise RuntimeError('boom at import')\n")],
        true,
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert_eq!(state.phase, Phase::Failed);
    assert!(
        state
            .last_error
            .as_deref()
            .unwrap()
            .contains("boom at import"),
        "{:?}",
        state.last_error
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn work_that_keeps_failing_is_dead_lettered_and_its_error_shows_on_the_function() {
    let h = Harness::new().await;
    let key = Harness::key("nosource");
    h.create(&key).await;
    // The event references a context that is not in S3: every attempt fails.
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], false)
        .await;
    sqlx::query("update work_items set max_attempts = 3")
        .execute(&h.db.pool)
        .await
        .unwrap();

    for attempt in 1..=3 {
        assert_eq!(
            h.worker.run_once(10).await.unwrap(),
            1,
            "attempt {attempt} was not claimable"
        );
    }
    assert_eq!(h.worker.run_once(10).await.unwrap(), 0);
    let dead: (i32, String) = sqlx::query_as("select attempts, last_error from work_dead")
        .fetch_one(&h.db.pool)
        .await
        .unwrap();
    assert_eq!(dead.0, 3);
    let state = h.state(&key).await;
    assert_eq!(state.phase, Phase::Failed);
    let err = state.last_error.unwrap();
    assert!(
        err.contains("gave up after 3 attempts") && err.contains("contexts"),
        "{err}"
    );
    drop(h.s3);
}
