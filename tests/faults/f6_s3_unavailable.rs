//! F6: the blob store (S3) fails during uploads, three ways: it resets every
//! connection, it goes silent (a blackhole), it cuts each connection after a
//! few KiB. Each upload answers 503 with a problem document, appends no
//! event and leaves no event pointing at a missing blob; once S3 is back the
//! same upload, retried with its Idempotency-Key, succeeds.

use std::time::Duration;

use sless_api::AppState;
use sless_store::PgPool;
use sless_store::blobs::{BlobStore, S3Config};
use sless_testkit::{TestDb, TestS3};

use crate::harness::{self, event_count};
use crate::proxy::{FaultProxy, Mode};
use crate::zip_files;

/// Events that name a blob the store does not have.
async fn dangling_references(pool: &PgPool, blobs: &BlobStore) -> Vec<String> {
    let keys: Vec<(String, String)> = sqlx::query_as(
        "select data->>'zip_key', data->>'context_key' from events where type = 'FunctionUploaded'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut missing = Vec::new();
    for key in keys.into_iter().flat_map(|(z, c)| [z, c]) {
        if !blobs.exists(&key).await.unwrap() {
            missing.push(key);
        }
    }
    missing
}

/// A zip of about 32 KiB compressed, unique to `tag`.
fn sizeable_zip(tag: &str) -> Vec<u8> {
    let noise = hex::encode(
        (0..32 * 1024)
            .map(|_| rand::random::<u8>())
            .collect::<Vec<_>>(),
    );
    let handler = format!("# {tag}\nNOISE = '{noise}'\n\ndef handle(event):\n    return '{tag}'\n");
    zip_files(&[("handler.py", &handler)])
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn f6_uploads_while_s3_fails_get_503_write_nothing_and_succeed_once_it_is_back() {
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let direct = s3.blobs();
    let link = FaultProxy::start(([127, 0, 0, 1], s3.server.port()).into()).await;
    let via_proxy = BlobStore::new(&S3Config {
        endpoint: Some(format!("http://{}", link.addr())),
        ..s3.config.clone()
    });
    let state = AppState::new(db.pool.clone(), via_proxy, harness::auth());
    // A ~32 KiB upload stalled on S3 is answered 4 s after its last
    // progress, plus 1 s per MiB it stores (its zip and context): about 4.06 s.
    let answer_within = state.deadlines.request + state.deadlines.upload_per_mib;
    let _projector = harness::projector(db.pool.clone());
    let c = harness::checker(&harness::serve_api(state).await, "f6-user");
    assert!(c.send(c.create("fn")).await.first.is_acked());

    let faults = [
        ("reset", Mode::Reset, "blob-store-unavailable"),
        ("blackhole", Mode::Blackhole, "deadline-exceeded"),
        (
            "cut_after_4KiB",
            Mode::CloseAfter(4096),
            "blob-store-unavailable",
        ),
    ];
    let mut seen = Vec::new();
    for (name, mode, problem) in faults {
        link.set(mode);
        let before = event_count(&db.pool).await;
        let op = c.send(c.upload("fn", sizeable_zip(name))).await;
        let why = format!("{:?}", op.first);
        assert_eq!(op.first.status(), Some(503), "{name}: {why}");
        assert!(
            why.contains(PROBLEM_JSON_MARK),
            "{name}: a problem document: {why}"
        );
        assert!(why.contains(problem), "{name}: {problem}: {why}");
        assert!(why.contains("retry-after=2"), "{name}: Retry-After: {why}");
        assert!(
            op.latency <= answer_within + Duration::from_secs(1),
            "{name}: answered after {:?}",
            op.latency
        );
        assert_eq!(event_count(&db.pool).await, before, "{name}: no event");
        assert_eq!(
            dangling_references(&db.pool, &direct).await,
            Vec::<String>::new(),
            "{name}"
        );
        seen.push(format!("{name}_ms={}", op.latency.as_millis()));
    }

    link.set(Mode::Pass);
    c.retry_indeterminate(3).await;
    for op in c.ops() {
        assert!(op.last().is_acked(), "after healing: {:?}", op.last());
    }
    assert_eq!(
        dangling_references(&db.pool, &direct).await,
        Vec::<String>::new()
    );
    let counts = c.check(&db.pool).await;
    counts.report(
        "F6",
        &format!("{}_uploads_of_~32KiB_zips", faults.len()),
        "s3_reset,s3_blackhole,s3_cut_after_4KiB",
        &seen.join(" "),
    );
    assert_eq!(counts.recovered, faults.len());
}

/// How the checker renders a problem document's content type.
const PROBLEM_JSON_MARK: &str = "application/problem+json";
