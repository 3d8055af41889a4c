//! The harness the worker tests share: a real PostgreSQL, a real S3 server,
//! the local driver and a worker, plus helpers that append a function's
//! events the way the API would.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use sless_domain::archive;
use sless_domain::{
    Function, FunctionEvent, FunctionKey, FunctionName, FunctionSpec, Namespace, Runtime,
    SourceVersion,
};
use sless_store::blobs::{self, BlobStore};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::{PgPool, queue};
use sless_testkit::{TestDb, TestS3, scratch_dir};
use sless_workers::driver::{Artifact, BuildRequest, DeployRequest};
use sless_workers::local::{LocalDriver, LocalDriverConfig};
use sless_workers::{Driver, Reconciler, Worker, WorkerConfig};

pub struct Harness<D = LocalDriver> {
    pub db: TestDb,
    pub s3: TestS3,
    pub blobs: BlobStore,
    pub driver: Arc<D>,
    pub worker: Worker<D>,
}

impl Harness {
    pub async fn new() -> Harness {
        let s3 = TestS3::new().await;
        let driver = Arc::new(
            LocalDriver::new(LocalDriverConfig {
                env: std::env::vars().collect(),
                ..LocalDriverConfig::new(scratch_dir("driver"))
            })
            .unwrap(),
        );
        Harness::with_driver(s3, driver).await
    }

    pub fn key(name: &str) -> FunctionKey {
        FunctionKey::new(
            Namespace::parse("sless-test").unwrap(),
            FunctionName::parse(name).unwrap(),
        )
    }
}

impl<D: Driver> Harness<D> {
    /// A harness whose worker runs functions with `driver`.
    pub async fn with_driver(s3: TestS3, driver: Arc<D>) -> Harness<D> {
        let db = TestDb::new().await;
        let blobs = s3.blobs();
        let config = WorkerConfig {
            lease: Duration::from_secs(30),
            backoff: queue::Backoff {
                base: Duration::ZERO,
                max: Duration::ZERO,
            },
            ..WorkerConfig::default()
        };
        let worker = Worker {
            pool: db.pool.clone(),
            reconciler: Reconciler {
                pool: db.pool.clone(),
                blobs: blobs.clone(),
                driver: driver.clone(),
            },
            config,
            on_start: None,
        };
        Harness {
            db,
            s3,
            blobs,
            driver,
            worker,
        }
    }

    pub async fn append(&self, key: &FunctionKey, events: &[FunctionEvent], reconcile: bool) {
        let at = eventlog::read_stream(&self.db.pool, &key.stream())
            .await
            .unwrap()
            .len() as u64;
        let new: Vec<_> = events
            .iter()
            .map(|e| NewEvent {
                event_type: e.type_name().into(),
                namespace: key.namespace.to_string(),
                data: e.data(),
                metadata: Metadata {
                    actor: "test".into(),
                    ..Default::default()
                },
            })
            .collect();
        let mut tx = self.db.pool.begin().await.unwrap();
        eventlog::append(&mut tx, &key.stream(), at, &new)
            .await
            .unwrap();
        if reconcile {
            queue::enqueue_reconcile(&mut *tx, &key.queue_key())
                .await
                .unwrap();
        }
        tx.commit().await.unwrap();
    }

    pub async fn create(&self, key: &FunctionKey) {
        let spec = FunctionSpec {
            runtime: Runtime::Python311,
            entrypoint: "handler.handle".into(),
            memory_mb: 128,
            timeout_sec: 30,
            env_vars: BTreeMap::new(),
            scale_to_zero_after_sec: None,
            scaling: Default::default(),
        };
        self.append(key, &[FunctionEvent::FunctionCreated { spec }], false)
            .await;
    }

    /// Stores the files' blobs (unless `store` is false) and appends an upload.
    pub async fn upload(
        &self,
        key: &FunctionKey,
        version: u32,
        files: &[(&str, &str)],
        store: bool,
    ) {
        let files: BTreeMap<String, Vec<u8>> = files
            .iter()
            .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
            .collect();
        let context = archive::build_context(Runtime::Python311, &files);
        let context_sha256 = archive::sha256_hex(&context);
        let fake_zip_sha = archive::sha256_hex(format!("{key}{version}").as_bytes());
        if store {
            self.blobs
                .put_if_absent(
                    &blobs::context_key(&context_sha256),
                    context,
                    "application/gzip",
                )
                .await
                .unwrap();
        }
        let v = SourceVersion {
            version,
            sha256: fake_zip_sha.clone(),
            size: 1,
            files: files.len() as u32,
            zip_key: blobs::zip_key(&fake_zip_sha),
            context_key: blobs::context_key(&context_sha256),
            runtime: None,
            context_sha256,
        };
        self.append(key, &[FunctionEvent::FunctionUploaded(v)], true)
            .await;
    }

    pub async fn events(&self, key: &FunctionKey) -> Vec<FunctionEvent> {
        eventlog::read_stream(&self.db.pool, &key.stream())
            .await
            .unwrap()
            .iter()
            .map(|e| FunctionEvent::from_stored(&e.event_type, &e.data).unwrap())
            .collect()
    }

    pub async fn state(&self, key: &FunctionKey) -> Function {
        Function::fold(&self.events(key).await)
    }
}

pub async fn pending(pool: &PgPool) -> i64 {
    queue::counts(pool).await.unwrap().0
}

pub fn handler(reply: &str) -> String {
    format!("def handle(event):\n    return {{'reply': '{reply}', 'path': event['path']}}\n")
}

/// A local driver with its data below `dir`, in the sandbox, functions
/// run by `SLESS_PYTHON` (or `python3`) with the test's environment.
pub fn local_driver(dir: &std::path::Path) -> LocalDriver {
    LocalDriver::new(LocalDriverConfig {
        python: std::env::var("SLESS_PYTHON").unwrap_or_else(|_| "python3".into()),
        env: std::env::vars().collect(),
        ..LocalDriverConfig::new(dir)
    })
    .unwrap()
}

/// The build of `version` of the Python function `key` made of `files`
/// (cached by their contents, as the API's contexts are).
pub fn python_build(key: &FunctionKey, version: u32, files: &[(&str, &str)]) -> BuildRequest {
    let files: BTreeMap<String, Vec<u8>> = files
        .iter()
        .map(|(p, c)| (p.to_string(), c.as_bytes().to_vec()))
        .collect();
    let context = archive::build_context(Runtime::Python311, &files);
    let context_sha256 = archive::sha256_hex(&context);
    BuildRequest {
        key: key.clone(),
        version,
        runtime: Runtime::Python311,
        context_key: blobs::context_key(&context_sha256),
        context_sha256,
        context,
        built: None,
        log: Default::default(),
    }
}

/// A deploy of `instances` instances of `version` of the Python function
/// `key` (entrypoint `handler.handle`), built as `artifact`.
pub fn python_deploy(
    key: &FunctionKey,
    version: u32,
    artifact: &Artifact,
    instances: u32,
) -> DeployRequest {
    DeployRequest {
        key: key.clone(),
        version,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: BTreeMap::new(),
        artifact: artifact.clone(),
        instances,
    }
}
