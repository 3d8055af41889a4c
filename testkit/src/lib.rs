//! Test support shared by every crate's integration tests: a real
//! PostgreSQL (the one in `DATABASE_URL`, else a private cluster started once
//! per test process), a fresh migrated database per test, and a real S3
//! server on loopback per test.

use std::path::PathBuf;
use std::sync::OnceLock;
use std::time::Duration;

use sless_embedded::{PostgresHost, PostgresOptions, PrivatePostgres, S3Server};
use sless_store::PgPool;
use sless_store::blobs::{BlobStore, S3Config};
use sqlx::Connection;

/// The server every test of this process creates its databases on.
struct Server {
    /// `postgres://…/` without a database name.
    base_url: String,
    _cluster: Option<PrivatePostgres>,
}

static SERVER: OnceLock<Server> = OnceLock::new();

fn server() -> &'static Server {
    SERVER.get_or_init(|| {
        if let Ok(url) = std::env::var("DATABASE_URL") {
            let base = url
                .rsplit_once('/')
                .map(|(b, _)| b.to_owned())
                .unwrap_or(url);
            return Server {
                base_url: base,
                _cluster: None,
            };
        }
        // Started on a thread of its own with its own runtime, so the cluster
        // outlives the runtime of whichever test asked first.
        std::thread::spawn(|| {
            let dir = scratch_dir("pg");
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let cluster = rt
                .block_on(PrivatePostgres::start_with(
                    PostgresOptions {
                        data_dir: dir,
                        port: None,
                        settings: vec![("fsync".into(), "off".into())],
                        socket_only: false,
                    },
                    postgres_host(),
                ))
                .expect("starting a private PostgreSQL for tests");
            let url = cluster.url("postgres");
            let base = url.rsplit_once('/').unwrap().0.to_owned();
            Server {
                base_url: base,
                _cluster: Some(cluster),
            }
        })
        .join()
        .expect("cluster thread")
    })
}

/// Where the tests' clusters find the server programs and what they run
/// in: `SLESS_PG_BIN` and this process's environment, as `sless dev` has.
pub fn postgres_host() -> PostgresHost {
    PostgresHost {
        bin_dir: std::env::var_os("SLESS_PG_BIN").map(PathBuf::from),
        env: std::env::vars().collect(),
    }
}

/// A directory for this test process, under `SLESS_TEST_TMP` or the system
/// temp dir. Directories left by earlier test processes that are gone are
/// removed.
pub fn scratch_dir(what: &str) -> PathBuf {
    let root = std::env::var_os("SLESS_TEST_TMP")
        .map(PathBuf::from)
        .unwrap_or_else(std::env::temp_dir);
    let me = std::process::id();
    if let Ok(entries) = std::fs::read_dir(&root) {
        for e in entries.flatten() {
            let name = e.file_name().to_string_lossy().into_owned();
            let pid = name
                .strip_prefix("sless-test-")
                .and_then(|r| r.split('-').next())
                .and_then(|p| p.parse::<u32>().ok());
            if let Some(pid) = pid
                && pid != me
                && !PathBuf::from(format!("/proc/{pid}")).exists()
            {
                let _ = std::fs::remove_dir_all(e.path());
            }
        }
    }
    let dir = root.join(format!(
        "sless-test-{me}-{what}-{}",
        uuid::Uuid::new_v4().simple()
    ));
    std::fs::create_dir_all(&dir).expect("creating a scratch dir");
    dir
}

/// A fresh, migrated database for one test.
pub struct TestDb {
    pub pool: PgPool,
    pub url: String,
    pub name: String,
}

impl TestDb {
    pub async fn new() -> TestDb {
        let server = server();
        let name = format!("t_{}", uuid::Uuid::new_v4().simple());
        let mut admin = sqlx::PgConnection::connect(&format!("{}/postgres", server.base_url))
            .await
            .expect("connecting to the test server");
        sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
            .execute(&mut admin)
            .await
            .expect("creating a test database");
        admin.close().await.ok();
        let url = format!("{}/{name}", server.base_url);
        let pool = sless_store::connect(&url, 40)
            .await
            .expect("connecting to the test database");
        sless_store::migrate(&pool)
            .await
            .expect("migrating the test database");
        TestDb { pool, url, name }
    }
}

/// A real S3 server (s3s-fs on loopback) with one bucket, for one test.
pub struct TestS3 {
    pub server: S3Server,
    pub config: S3Config,
    pub dir: PathBuf,
}

impl TestS3 {
    pub async fn new() -> TestS3 {
        let dir = scratch_dir("s3");
        let access = sless_embedded::random_secret();
        let secret = sless_embedded::random_secret();
        let server = S3Server::start(&dir, 0, "sless", &access, &secret)
            .await
            .expect("starting S3");
        let config = S3Config {
            endpoint: Some(server.endpoint()),
            region: "us-east-1".into(),
            bucket: "sless".into(),
            access_key: access,
            secret_key: secret,
            force_path_style: true,
            presign_endpoint: None,
        };
        TestS3 {
            server,
            config,
            dir,
        }
    }

    pub fn blobs(&self) -> BlobStore {
        BlobStore::new(&self.config)
    }
}

/// Polls `check` every 10 ms until it returns `Some`, or panics with `what`
/// after `deadline`. For waiting on background work without sleeping blind.
pub async fn eventually<T, F, Fut>(what: &str, deadline: Duration, mut check: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Option<T>>,
{
    let start = tokio::time::Instant::now();
    loop {
        if let Some(v) = check().await {
            return v;
        }
        if start.elapsed() > deadline {
            panic!("timed out after {deadline:?} waiting for {what}");
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
/// The first whole line of the file at `path` that holds `needle`. Whole
/// lines only: a process writing to an unbuffered stderr can leave
/// "…listening on http://" in the file and the address a moment later.
pub fn whole_line_with(path: &std::path::Path, needle: &str) -> Option<String> {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    text.split_inclusive('\n')
        .filter(|l| l.ends_with('\n') && l.contains(needle))
        .map(|l| l.trim_end().to_owned())
        .next()
}

/// What follows `marker` on the first whole line that holds it.
pub fn after_on_whole_line(path: &std::path::Path, marker: &str) -> Option<String> {
    let line = whole_line_with(path, marker)?;
    Some(line.split(marker).nth(1)?.trim().to_owned())
}

pub mod kube;
pub mod modules;
pub mod processes;
pub mod zips;
