//! sless as separate parts on one database, for the tests of what several
//! processes must agree on: API processes served from this process, a
//! projector, and `sless worker` processes.

use std::time::Duration;

use serde_json::{Value, json};
use sless_api::proxy::ProxyLimits;

use crate::{Client, zip_files};

const HANDLER: &str = "def handle(event):\n    return {\"ok\": True}\n";

const SECRET: &[u8] = b"fleet-test-secret";

/// sless as separate parts on one database: API processes (each with a
/// proxy of its own, served from this process), a projector, and `sless
/// worker` processes; a client of the user `sub`.
pub struct Platform {
    pub db: sless_testkit::TestDb,
    /// The functions' origin of each API.
    pub fn_urls: Vec<String>,
    pub client: Client,
    s3: sless_testkit::TestS3,
    /// The `sless worker` processes, `w1` first.
    pub workers: Vec<crate::Proc>,
    worker_env: Vec<(String, String)>,
    root: std::path::PathBuf,
    _projector: tokio::sync::watch::Sender<bool>,
}

impl Platform {
    pub async fn start(what: &str, apis: usize, workers: usize, sub: &str) -> Platform {
        Platform::start_with(what, apis, workers, sub, &[], ProxyLimits::default()).await
    }

    /// The same, with `env` set for the workers and the proxies' `limits`.
    pub async fn start_with(
        what: &str,
        apis: usize,
        workers: usize,
        sub: &str,
        env: &[(&str, &str)],
        limits: ProxyLimits,
    ) -> Platform {
        let db = sless_testkit::TestDb::new().await;
        let s3 = sless_testkit::TestS3::new().await;
        let mut urls = Vec::new();
        for _ in 0..apis {
            let mut state = sless_api::AppState::new(
                db.pool.clone(),
                s3.blobs(),
                sless_api::Auth::hs256(SECRET, None, None),
            );
            state.http = sless_api::proxy::HttpClient::new(limits);
            urls.push(crate::serve_origins(state).await);
        }
        let (projector, stop) = tokio::sync::watch::channel(false);
        tokio::spawn(sless_projector::run(
            db.pool.clone(),
            Duration::from_millis(200),
            stop,
        ));
        let root = sless_testkit::scratch_dir(what);
        let worker_env = env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        let client = Client {
            url: urls[0].0.clone(),
            fn_url: urls[0].1.clone(),
            token: sless_api::issue_hs256(SECRET, sub, Duration::from_secs(3600)),
            namespace: sless_domain::Namespace::for_subject(sub).to_string(),
            http: reqwest::Client::new(),
        };
        let mut p = Platform {
            db,
            fn_urls: urls.into_iter().map(|(_, f)| f).collect(),
            client,
            s3,
            workers: Vec::new(),
            worker_env,
            root,
            _projector: projector,
        };
        p.workers = (1..=workers).map(|i| p.start_worker(i, "log")).collect();
        p
    }

    /// Starts `sless worker` `w{i}` (from 1) on its data directory, logging
    /// to it with the extension `log`.
    pub fn start_worker(&self, i: usize, log: &str) -> crate::Proc {
        let dir = self.worker_dir(i);
        let mut cmd = crate::sless_on(&self.db.url, &self.s3);
        cmd.arg("worker")
            .env("SLESS_DATA_DIR", &dir)
            .env("SLESS_WORKER_ID", format!("w{i}"))
            .envs(self.worker_env.iter().map(|(k, v)| (k, v)));
        crate::Proc::spawn(cmd, &dir.with_extension(log))
    }

    /// The S3 server the platform's parts share.
    pub fn s3(&self) -> &sless_testkit::TestS3 {
        &self.s3
    }

    /// The worker `i`'s (from 1) data directory.
    pub fn worker_dir(&self, i: usize) -> std::path::PathBuf {
        self.root.join(format!("w{i}"))
    }

    /// Creates `name` (with `spec` besides) and deploys [`HANDLER`].
    pub async fn deploy(&self, name: &str, spec: Value) {
        self.deploy_code(name, spec, HANDLER).await
    }

    /// Creates `name` (with `spec` besides) and deploys `code` as its
    /// `handler.py`.
    pub async fn deploy_code(&self, name: &str, spec: Value, code: &str) {
        let c = &self.client;
        let mut body =
            json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle"});
        body.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        assert_eq!(c.create(body).await.status(), 201);
        let res = c.upload(name, zip_files(&[("handler.py", code)])).await;
        assert_eq!(res.status(), 202);
        c.wait_ready(name, Duration::from_secs(120)).await;
    }
}

/// Events of `event_type` in the log.
pub async fn count(p: &Platform, event_type: &str) -> i64 {
    sqlx::query_scalar("select count(*) from events where type = $1")
        .bind(event_type)
        .fetch_one(&p.db.pool)
        .await
        .unwrap()
}
