//! Version manifests in S3: they agree with the read models, and still
//! tell what existed after the read models are dropped and rebuilt.

use chrono::{DateTime, Utc};
use sless_domain::{FunctionEvent, FunctionSpec, Runtime, SourceVersion};
use sless_projector::manifests::{self, Manifest, ManifestVersion};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_testkit::{TestDb, TestS3, eventually};
use sqlx::Row;
use std::time::Duration;
use tokio::sync::watch;
use tokio::task::JoinHandle;

/// The tests of this file take turns: a checkpoint's save holds back every
/// reader of the cluster for a moment (the watermark), and the first test
/// expects its catch-up to read its events at once.
static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

fn spec() -> FunctionSpec {
    FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        scaling: Default::default(),
    }
}

fn uploaded(version: u32) -> FunctionEvent {
    FunctionEvent::FunctionUploaded(SourceVersion {
        version,
        sha256: format!("{version:064}"),
        size: 100 + u64::from(version),
        files: version,
        zip_key: format!("blobs/zips/{version:064}.zip"),
        context_sha256: format!("c{version}"),
        context_key: format!("blobs/contexts/c{version}.tar.gz"),
        runtime: Some(Runtime::Python311),
    })
}

async fn append(pool: &PgPool, stream: &str, actor: &str, events: &[FunctionEvent]) {
    let at = eventlog::read_stream(pool, stream).await.unwrap().len() as u64;
    let ns = stream.split('/').nth(1).unwrap();
    let new: Vec<_> = events
        .iter()
        .map(|e| NewEvent {
            event_type: e.type_name().into(),
            namespace: ns.into(),
            data: e.data(),
            metadata: Metadata {
                actor: actor.into(),
                ..Default::default()
            },
        })
        .collect();
    let mut tx = pool.begin().await.unwrap();
    eventlog::append(&mut tx, stream, at, &new).await.unwrap();
    tx.commit().await.unwrap();
}

/// The versions of the `function_versions` read model, as a manifest lists them.
async fn read_model_versions(pool: &PgPool, ns: &str, name: &str) -> Vec<ManifestVersion> {
    let rows = sqlx::query(
        "select * from function_versions where namespace = $1 and name = $2 order by version",
    )
    .bind(ns)
    .bind(name)
    .fetch_all(pool)
    .await
    .unwrap();
    rows.iter()
        .map(|r| ManifestVersion {
            version: r.get::<i32, _>("version") as u32,
            sha256: r.get("sha256"),
            size: r.get::<i64, _>("size") as u64,
            files: r.get::<i32, _>("files") as u32,
            zip_key: r.get("zip_key"),
            context_sha256: r.get("context_sha256"),
            context_key: r.get("context_key"),
            runtime: r.get("runtime"),
            uploaded_by: r.get("uploaded_by"),
            uploaded_at: r.get::<DateTime<Utc>, _>("uploaded_at"),
        })
        .collect()
}

async fn live_version(pool: &PgPool, ns: &str, name: &str) -> Option<u32> {
    sqlx::query_scalar::<_, Option<i32>>(
        "select current_version from functions
         where namespace = $1 and name = $2 and phase <> 'Deleted'",
    )
    .bind(ns)
    .bind(name)
    .fetch_optional(pool)
    .await
    .unwrap()
    .flatten()
    .map(|v| v as u32)
}

async fn manifest(s3: &TestS3, ns: &str, name: &str) -> Manifest {
    manifests::read(&s3.blobs(), ns, name)
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("no manifest for {ns}/{name}"))
}

async fn assert_manifests_agree_with_read_models(db: &TestDb, s3: &TestS3) {
    for name in ["kept", "gone"] {
        let m = manifest(s3, "ns", name).await;
        assert_eq!(m.versions, read_model_versions(&db.pool, "ns", name).await);
        assert_eq!(m.live_version, live_version(&db.pool, "ns", name).await);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn manifests_mirror_the_version_index_and_survive_the_read_models() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let blobs = s3.blobs();
    let kept = "function/ns/kept";
    append(
        &db.pool,
        kept,
        "ann",
        &[FunctionEvent::FunctionCreated { spec: spec() }],
    )
    .await;
    for v in 1..=4 {
        append(
            &db.pool,
            kept,
            if v % 2 == 0 { "bob" } else { "ann" },
            &[uploaded(v)],
        )
        .await;
    }
    append(
        &db.pool,
        kept,
        "ann",
        &[
            FunctionEvent::VersionsPruned {
                versions: vec![1, 2],
            },
            FunctionEvent::FunctionRolledBack { version: 3 },
        ],
    )
    .await;
    let gone = "function/ns/gone";
    append(
        &db.pool,
        gone,
        "cy",
        &[FunctionEvent::FunctionCreated { spec: spec() }],
    )
    .await;
    append(&db.pool, gone, "cy", &[uploaded(1)]).await;
    append(&db.pool, gone, "cy", &[FunctionEvent::FunctionDeleted {}]).await;

    assert!(manifests::catch_up(&db.pool, &blobs).await.unwrap() > 0);
    sless_projector::catch_up(&db.pool).await.unwrap();

    let m = manifest(&s3, "ns", "kept").await;
    let numbers: Vec<u32> = m.versions.iter().map(|v| v.version).collect();
    assert_eq!(numbers, [3, 4]);
    assert_eq!(
        (m.live_version, m.last_version, m.exists),
        (Some(3), 4, true)
    );
    assert_eq!(m.versions[1].uploaded_by.as_deref(), Some("bob"));
    assert_eq!(m.versions[0].runtime.as_deref(), Some("python3.11"));
    let g = manifest(&s3, "ns", "gone").await;
    assert_eq!(
        (g.exists, g.live_version, g.versions.len()),
        (false, None, 1)
    );
    assert_manifests_agree_with_read_models(&db, &s3).await;

    // The read models are lost; the manifests still say what existed, and
    // the models rebuilt from the log agree with them.
    let before = manifest(&s3, "ns", "kept").await;
    sqlx::query("delete from function_versions")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("delete from functions")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query(
        "update projector_checkpoints set xid = 0, position = 0 where name = 'read_models'",
    )
    .execute(&db.pool)
    .await
    .unwrap();
    assert_eq!(manifest(&s3, "ns", "kept").await, before);
    sless_projector::catch_up(&db.pool).await.unwrap();
    assert_manifests_agree_with_read_models(&db, &s3).await;

    // Written again from the log, a manifest comes out the same.
    sqlx::query("update projector_checkpoints set xid = 0, position = 0 where name = $1")
        .bind(manifests::NAME)
        .execute(&db.pool)
        .await
        .unwrap();
    blobs.delete(&manifests::key("ns", "kept")).await.unwrap();
    manifests::catch_up(&db.pool, &blobs).await.unwrap();
    assert_eq!(manifest(&s3, "ns", "kept").await, before);
}

/// Manifests enough to write that a batch of them lasts seconds.
const FUNCTIONS: i64 = 3_000;

/// `FUNCTIONS` functions created in one statement, `function/ns/f-1`….
async fn many_created(db: &TestDb) {
    sqlx::query(
        "insert into events (stream, version, type, namespace, data, metadata)
         select 'function/ns/f-' || i, 1, 'FunctionCreated', 'ns', $1, '{\"actor\":\"ann\"}'
         from generate_series(1, $2) i",
    )
    .bind(FunctionEvent::FunctionCreated { spec: spec() }.data())
    .bind(FUNCTIONS)
    .execute(&db.pool)
    .await
    .unwrap();
}

/// The manifest writer's checkpoint position (0 before its first save).
async fn manifests_at(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select position from projector_checkpoints where name = $1")
        .bind(manifests::NAME)
        .fetch_optional(pool)
        .await
        .unwrap()
        .unwrap_or(0)
}

/// `manifests::run` started over a backlog, once its first manifest is in
/// the bucket: in the middle of its first batch.
async fn writing_mid_batch(
    db: &TestDb,
    s3: &TestS3,
) -> (watch::Sender<bool>, JoinHandle<sless_projector::Result<()>>) {
    let (stop, stopped) = watch::channel(false);
    let run = tokio::spawn(manifests::run(
        db.pool.clone(),
        s3.blobs(),
        Duration::from_secs(1),
        stopped,
    ));
    let blobs = s3.blobs();
    eventually(
        "the first manifest written",
        Duration::from_secs(30),
        || async { manifests::read(&blobs, "ns", "f-1").await.unwrap() },
    )
    .await;
    (stop, run)
}

/// A stop does not wait for the rest of a batch: with thousands of manifests
/// to write, `run` returns at once; the checkpoint stays before the batch,
/// and the next run writes every manifest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_does_not_wait_for_the_rest_of_a_batch_of_manifests() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    many_created(&db).await;
    let (stop, run) = writing_mid_batch(&db, &s3).await;
    stop.send(true).unwrap();
    tokio::time::timeout(Duration::from_secs(1), run)
        .await
        .expect("run returned within a second of the stop")
        .unwrap()
        .unwrap();
    assert_eq!(
        manifests_at(&db.pool).await,
        0,
        "the batch cut short moved the checkpoint"
    );

    assert_eq!(
        manifests::catch_up(&db.pool, &s3.blobs()).await.unwrap(),
        FUNCTIONS as usize
    );
    for i in [1, FUNCTIONS / 2, FUNCTIONS] {
        let m = manifest(&s3, "ns", &format!("f-{i}")).await;
        assert!(m.exists && m.versions.is_empty(), "f-{i}: {m:?}");
    }
}

/// A batch of manifests holds back no other reader of the log: an event
/// appended while it writes to S3 is below the watermark at once, so the
/// projector applies it without waiting for the batch.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_of_manifests_holds_back_no_other_reader() {
    let _turn = ONE_AT_A_TIME.lock().await;
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    many_created(&db).await;
    let (stop, run) = writing_mid_batch(&db, &s3).await;

    let late = "function/ns/late";
    append(
        &db.pool,
        late,
        "bob",
        &[FunctionEvent::FunctionCreated { spec: spec() }],
    )
    .await;
    let mut conn = db.pool.acquire().await.unwrap();
    let watermark = eventlog::watermark(&mut conn).await.unwrap();
    let xid: i64 = sqlx::query_scalar("select xid from events where stream = $1")
        .bind(late)
        .fetch_one(&mut *conn)
        .await
        .unwrap();
    assert_eq!(
        manifests_at(&db.pool).await,
        0,
        "the batch ended before the look: nothing was shown"
    );
    assert!(
        xid < watermark,
        "the event of xid {xid} is held back (watermark {watermark}) by the batch"
    );
    stop.send(true).unwrap();
    run.await.unwrap().unwrap();
}
