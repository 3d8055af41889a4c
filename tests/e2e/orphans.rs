//! Orphan blobs: an upload stores its zip and build context before it
//! appends the event naming them; when that append loses, the blobs are
//! orphans, and the workers' sweep deletes them once the grace period is
//! over, under the blob lock protocol (`sless_store::orphans`,
//! `sless_workers::collect::sweep_orphans`). Most tests drive the store
//! functions the way an upload calls them and run the sweep themselves;
//! the last one lets a running worker do it beside a real upload.

use std::collections::BTreeMap;
use std::time::Duration;

use reqwest::Method;
use serde_json::json;
use sless_domain::{
    FunctionEvent, FunctionKey, FunctionName, FunctionSpec, Namespace, Runtime, SourceVersion,
    archive,
};
use sless_store::blobs::{self, BlobStore};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::{PgPool, orphans, retention};
use sless_testkit::{TestDb, TestS3, eventually};
use sless_workers::WorkerConfig;
use sless_workers::collect::{Swept, sweep_orphans};

use crate::platform::Platform;
use crate::zip_files;

const HOUR: Duration = Duration::from_secs(3600);

/// A database and a bucket, with function `ns/f` created and projected.
struct World {
    db: TestDb,
    _s3: TestS3,
    blobs: BlobStore,
    key: FunctionKey,
}

fn function_key(ns: &str, name: &str) -> FunctionKey {
    FunctionKey::new(
        Namespace::parse(ns).unwrap(),
        FunctionName::parse(name).unwrap(),
    )
}

impl World {
    async fn new() -> World {
        let db = TestDb::new().await;
        let s3 = TestS3::new().await;
        let key = function_key("sless-orphans", "f");
        let created = FunctionEvent::FunctionCreated {
            spec: FunctionSpec {
                runtime: Runtime::Python311,
                entrypoint: "handler.handle".into(),
                memory_mb: 128,
                timeout_sec: 30,
                env_vars: BTreeMap::new(),
                scale_to_zero_after_sec: None,
                scaling: Default::default(),
            },
        };
        let mut tx = db.pool.begin().await.unwrap();
        eventlog::append(&mut tx, &key.stream(), 0, &[event(&key, &created)])
            .await
            .unwrap();
        tx.commit().await.unwrap();
        let world = World {
            blobs: s3.blobs(),
            db,
            _s3: s3,
            key,
        };
        world.project().await;
        world
    }

    fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    async fn project(&self) {
        sless_projector::catch_up(self.pool()).await.unwrap();
    }

    async fn sweep(&self, grace: Duration) -> Swept {
        sweep_orphans(self.pool(), &self.blobs, grace, 100)
            .await
            .unwrap()
    }

    async fn exists(&self, key: &str) -> bool {
        self.blobs.exists(key).await.unwrap()
    }

    /// Keys with an in-flight record.
    async fn recorded(&self) -> Vec<String> {
        sqlx::query_scalar("select key from blobs_in_flight order by key")
            .fetch_all(self.pool())
            .await
            .unwrap()
    }

    /// Makes every in-flight record `age` old.
    async fn age_records(&self, age: Duration) {
        sqlx::query("update blobs_in_flight set stored_at = now() - make_interval(secs => $1)")
            .bind(age.as_secs_f64())
            .execute(self.pool())
            .await
            .unwrap();
    }
}

fn event(key: &FunctionKey, e: &FunctionEvent) -> NewEvent {
    NewEvent::function(
        key,
        e,
        Metadata {
            actor: "orphans-test".into(),
            ..Default::default()
        },
    )
}

/// An upload of one `handler.py` to `key` as the API makes it: its blobs
/// recorded in flight and stored, then the event appended expecting the
/// stream at `expected`. With `wins` the append commits and lands the
/// records, as `command::commit` does; otherwise the stream has moved on,
/// and the append loses with a conflict, leaving the blobs behind. Returns
/// the blob keys, zip first.
async fn upload(
    pool: &PgPool,
    blobs: &BlobStore,
    key: &FunctionKey,
    text: &str,
    expected: u64,
    wins: bool,
) -> [String; 2] {
    let zip = zip_files(&[("handler.py", text)]);
    let files = BTreeMap::from([("handler.py".to_owned(), text.as_bytes().to_vec())]);
    let context = archive::build_context(Runtime::Python311, &files);
    let version = SourceVersion {
        version: 1,
        sha256: archive::sha256_hex(&zip),
        size: zip.len() as u64,
        files: 1,
        zip_key: blobs::zip_key(&archive::sha256_hex(&zip)),
        context_sha256: archive::sha256_hex(&context),
        context_key: blobs::context_key(&archive::sha256_hex(&context)),
        runtime: Some(Runtime::Python311),
    };
    let keys = [version.zip_key.clone(), version.context_key.clone()];
    orphans::record_in_flight(pool, &[&keys[0], &keys[1]])
        .await
        .unwrap();
    blobs
        .put_if_absent(&keys[0], zip, "application/zip")
        .await
        .unwrap();
    blobs
        .put_if_absent(&keys[1], context, "application/gzip")
        .await
        .unwrap();
    let uploaded = FunctionEvent::FunctionUploaded(version);
    let mut tx = pool.begin().await.unwrap();
    let appended =
        eventlog::append(&mut tx, &key.stream(), expected, &[event(key, &uploaded)]).await;
    if wins {
        appended.unwrap();
        orphans::landed(&mut *tx, &keys).await.unwrap();
        for k in &keys {
            retention::lock_shared(&mut tx, k).await.unwrap();
        }
        tx.commit().await.unwrap();
    } else {
        let lost = appended.expect_err("the stream moved on: the append loses");
        assert!(
            matches!(lost, sless_store::Error::Conflict { .. }),
            "{lost}"
        );
    }
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn blobs_of_an_upload_that_lost_its_append_are_deleted_once_the_grace_period_is_over() {
    let w = World::new().await;
    // The stream is at version 1 (the create): expecting 0 loses.
    let keys = upload(
        w.pool(),
        &w.blobs,
        &w.key,
        "def handle(e):\n    return 1\n",
        0,
        false,
    )
    .await;
    assert!(w.exists(&keys[0]).await && w.exists(&keys[1]).await);
    let mut sorted = keys.to_vec();
    sorted.sort();
    assert_eq!(w.recorded().await, sorted, "both blobs recorded in flight");

    w.age_records(2 * HOUR).await;
    let swept = w.sweep(HOUR).await;
    let mut deleted = swept.deleted.clone();
    deleted.sort();
    assert_eq!(deleted, sorted, "{swept:?}");
    assert!(!w.exists(&keys[0]).await, "the orphan zip is gone");
    assert!(
        !w.exists(&keys[1]).await,
        "the orphan build context is gone"
    );
    assert!(w.recorded().await.is_empty());
    // Nothing is left to do: the next sweep finds nothing.
    assert_eq!(w.sweep(HOUR).await, Swept::default());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_younger_than_the_grace_period_is_not_deleted() {
    let w = World::new().await;
    let keys = upload(
        w.pool(),
        &w.blobs,
        &w.key,
        "def handle(e):\n    return 2\n",
        0,
        false,
    )
    .await;
    // Just stored, and 59 minutes old: neither is past an hour's grace.
    assert_eq!(w.sweep(HOUR).await, Swept::default());
    w.age_records(Duration::from_secs(59 * 60)).await;
    assert_eq!(w.sweep(HOUR).await, Swept::default());
    assert!(w.exists(&keys[0]).await && w.exists(&keys[1]).await);
    assert_eq!(w.recorded().await.len(), 2);
    // Past it, they go.
    w.age_records(Duration::from_secs(61 * 60)).await;
    assert_eq!(w.sweep(HOUR).await.deleted.len(), 2);
    assert!(!w.exists(&keys[0]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_a_kept_version_uses_is_never_deleted() {
    let w = World::new().await;
    let text = "def handle(e):\n    return 'kept'\n";
    let kept = upload(w.pool(), &w.blobs, &w.key, text, 1, true).await;
    assert!(
        w.recorded().await.is_empty(),
        "a committed upload lands its records"
    );
    // Another function uploads the same bytes and loses its append: the
    // records of the shared blobs come back.
    let other = function_key("sless-orphans", "other");
    let again = upload(w.pool(), &w.blobs, &other, text, 5, false).await;
    assert_eq!(again, kept);
    // And a lost upload of bytes nobody keeps, beside them.
    let lost = upload(
        w.pool(),
        &w.blobs,
        &w.key,
        "def handle(e):\n    return 'lost'\n",
        1,
        false,
    )
    .await;
    w.project().await;

    w.age_records(2 * HOUR).await;
    let swept = w.sweep(HOUR).await;
    assert_eq!(swept.in_use, 2, "{swept:?}");
    let mut deleted = swept.deleted.clone();
    deleted.sort();
    let mut expected = lost.to_vec();
    expected.sort();
    assert_eq!(deleted, expected, "{swept:?}");
    for k in &kept {
        assert!(w.exists(k).await, "{k} is used by version 1 and stays");
    }
    assert!(
        w.recorded().await.is_empty(),
        "the kept blobs' records were dropped"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_blob_a_command_is_about_to_name_is_not_deleted() {
    let w = World::new().await;
    let keys = upload(
        w.pool(),
        &w.blobs,
        &w.key,
        "def handle(e):\n    return 3\n",
        0,
        false,
    )
    .await;
    w.age_records(2 * HOUR).await;
    // A command holds the zip's lock shared: it has checked the blob is
    // there and is about to commit an event naming it.
    let mut command = w.pool().begin().await.unwrap();
    retention::lock_shared(&mut command, &keys[0])
        .await
        .unwrap();

    let swept = w.sweep(HOUR).await;
    assert_eq!(swept.busy, 1, "{swept:?}");
    assert_eq!(
        swept.deleted,
        [keys[1].clone()],
        "only the unlocked context goes"
    );
    assert!(w.exists(&keys[0]).await, "the locked zip stays");
    assert_eq!(
        w.recorded().await,
        [keys[0].clone()],
        "and its record with it"
    );

    // The command gave up (had it committed, the zip would be in use): the
    // next sweep deletes the zip.
    command.rollback().await.unwrap();
    assert_eq!(w.sweep(HOUR).await.deleted, [keys[0].clone()]);
    assert!(!w.exists(&keys[0]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_sweep_deletes_nothing_while_the_read_models_lag_the_log() {
    let w = World::new().await;
    let text = "def handle(e):\n    return 'unprojected'\n";
    // Committed, not yet projected: function_versions does not show it.
    let keys = upload(w.pool(), &w.blobs, &w.key, text, 1, true).await;
    // A lost upload of the same bytes records them again.
    let again = upload(w.pool(), &w.blobs, &w.key, text, 1, false).await;
    assert_eq!(again, keys);
    w.age_records(2 * HOUR).await;

    let swept = w.sweep(HOUR).await;
    assert!(swept.lagging, "{swept:?}");
    assert!(swept.deleted.is_empty(), "{swept:?}");
    assert!(w.exists(&keys[0]).await && w.exists(&keys[1]).await);
    assert_eq!(w.recorded().await.len(), 2, "left for the next sweep");

    w.project().await;
    let swept = w.sweep(HOUR).await;
    assert_eq!((swept.in_use, swept.deleted.len()), (2, 0), "{swept:?}");
    assert!(w.exists(&keys[0]).await && w.exists(&keys[1]).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_running_worker_deletes_an_orphan_and_keeps_what_an_upload_uses() {
    let config = WorkerConfig {
        orphan_sweep: Duration::from_millis(200),
        orphan_grace: Duration::from_secs(1),
        ..WorkerConfig::default()
    };
    let p = Platform::start_with(50, config).await;
    let (code, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({"name": "kept", "runtime": "python3.11", "entrypoint": "handler.handle"})),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let key = function_key(&p.client.namespace, "kept");
    let blobs = p.s3.blobs();
    let orphan = upload(
        &p.db.pool,
        &blobs,
        &key,
        "def handle(e):\n    return 'orphan'\n",
        0,
        false,
    )
    .await;

    let text = "def handle(event):\n    return 'kept'\n";
    let (code, body) = p.upload("kept", zip_files(&[("handler.py", text)])).await;
    assert_eq!(code, 202, "{body}");
    p.client.wait_ready("kept", Duration::from_secs(60)).await;
    eventually(
        "the orphan to be deleted",
        Duration::from_secs(30),
        || async {
            let gone = !blobs.exists(&orphan[0]).await.unwrap()
                && !blobs.exists(&orphan[1]).await.unwrap();
            gone.then_some(())
        },
    )
    .await;
    let versions: Vec<(String, String)> =
        sqlx::query_as("select zip_key, context_key from function_versions")
            .fetch_all(&p.db.pool)
            .await
            .unwrap();
    assert_eq!(versions.len(), 1);
    assert!(blobs.exists(&versions[0].0).await.unwrap());
    assert!(blobs.exists(&versions[0].1).await.unwrap());
    let left: i64 = sqlx::query_scalar("select count(*) from blobs_in_flight")
        .fetch_one(&p.db.pool)
        .await
        .unwrap();
    assert_eq!(left, 0);
    assert_eq!(p.invoke("kept").await, "kept");
    p.driver.shutdown().await;
}
