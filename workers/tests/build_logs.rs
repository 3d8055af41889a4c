//! Build logs as the reconciler records them, with the local driver's
//! real builds: in S3 under the version once the build ends (before the
//! event that says how), no chunk left behind, the failed build's pip
//! error kept, and the log gone with its version when retention prunes
//! it; an attempt whose worker went silent is ended by the sweep.

mod support;

use std::time::Duration;

use sless_domain::{FunctionEvent, Phase};
use sless_store::blobs;
use sless_store::build_logs::{self, Outcome};
use support::{Harness, handler};
use uuid::Uuid;

async fn chunk_count(h: &Harness) -> i64 {
    sqlx::query_scalar("select count(*) from build_log_chunks")
        .fetch_one(&h.db.pool)
        .await
        .unwrap()
}

async fn stored(h: &Harness, name: &str, version: u32) -> String {
    let key = blobs::build_log_key("sless-test", name, version);
    String::from_utf8(h.blobs.get(&key).await.unwrap()).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_build_keeps_its_log_in_s3_and_a_failed_one_keeps_the_pip_error() {
    let h = Harness::new().await;
    let key = Harness::key("logged");
    h.create(&key).await;
    let deps = "--no-index\n# nothing to install\n";
    h.upload(
        &key,
        1,
        &[("handler.py", &handler("v1")), ("requirements.txt", deps)],
        true,
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    assert_eq!(h.state(&key).await.phase, Phase::Ready);

    let log = build_logs::find(&h.db.pool, "sless-test", "logged", 1)
        .await
        .unwrap()
        .expect("the build's log is recorded");
    let end = log.ended.expect("ended");
    assert_eq!(end.outcome, Outcome::Succeeded);
    assert!(log.stored);
    let text = stored(&h, "logged", 1).await;
    assert!(text.starts_with("sless: unpacked "), "{text}");
    assert!(
        text.lines().any(|l| !l.starts_with("sless: ")),
        "pip's own output is in it: {text}"
    );
    assert!(text.ends_with("sless: build complete\n"), "{text}");
    assert_eq!(
        chunk_count(&h).await,
        0,
        "chunks live only while a build runs"
    );

    let bad = "--no-index\nno-such-package-sless==1.0\n";
    h.upload(
        &key,
        2,
        &[("handler.py", &handler("v2")), ("requirements.txt", bad)],
        true,
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    let events = h.events(&key).await;
    let Some(FunctionEvent::BuildFailed { log_tail, .. }) = events
        .iter()
        .rev()
        .find(|e| matches!(e, FunctionEvent::BuildFailed { .. }))
    else {
        panic!("no BuildFailed in {events:?}");
    };
    assert!(
        log_tail.contains("no-such-package-sless"),
        "the tail is on the event: {log_tail}"
    );
    let log = build_logs::find(&h.db.pool, "sless-test", "logged", 2)
        .await
        .unwrap()
        .unwrap();
    let end = log.ended.unwrap();
    assert_eq!(end.outcome, Outcome::Failed);
    assert_eq!(end.error.as_deref(), Some("pip install failed (exit 1)"));
    let text = stored(&h, "logged", 2).await;
    assert!(text.contains("no-such-package-sless"), "{text}");
    assert!(
        text.ends_with("sless: pip install failed (exit 1)\n"),
        "the log ends saying why: {text}"
    );
    // Version 1's log is its own still.
    assert!(
        stored(&h, "logged", 1)
            .await
            .ends_with("sless: build complete\n")
    );

    // Retention prunes version 1: its log goes with it.
    h.append(
        &key,
        &[FunctionEvent::VersionsPruned { versions: vec![1] }],
        true,
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    assert_eq!(
        build_logs::find(&h.db.pool, "sless-test", "logged", 1)
            .await
            .unwrap(),
        None
    );
    let objects = h.blobs.list("blobs/build-logs/").await.unwrap();
    assert_eq!(
        objects,
        [blobs::build_log_key("sless-test", "logged", 2)],
        "only the kept version's log is left"
    );
    h.driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_sweep_ends_an_attempt_whose_worker_went_silent() {
    let h = Harness::new().await;
    let attempt = Uuid::now_v7();
    build_logs::start(&h.db.pool, "sless-test", "gone", 1, attempt)
        .await
        .unwrap();
    assert!(
        build_logs::append(&h.db.pool, "sless-test", "gone", 1, attempt, 1, "half\n")
            .await
            .unwrap()
    );
    // Not silent long enough: left alone.
    let swept = build_logs::abandon_silent(&h.db.pool, Duration::from_secs(60), "gone")
        .await
        .unwrap();
    assert_eq!(swept, 0);
    assert_eq!(chunk_count(&h).await, 1);

    let swept = build_logs::abandon_silent(&h.db.pool, Duration::ZERO, "its worker died")
        .await
        .unwrap();
    assert_eq!(swept, 1);
    let log = build_logs::find(&h.db.pool, "sless-test", "gone", 1)
        .await
        .unwrap()
        .unwrap();
    let end = log.ended.unwrap();
    assert_eq!(end.outcome, Outcome::Failed);
    assert_eq!(end.error.as_deref(), Some("its worker died"));
    assert_eq!(chunk_count(&h).await, 0);
    // The attempt writes nothing more once ended.
    assert!(
        !build_logs::append(&h.db.pool, "sless-test", "gone", 1, attempt, 2, "late\n")
            .await
            .unwrap()
    );
}
