//! The platform in one process for end-to-end tests: the API on a real
//! socket, the projector and a worker with the local driver, each running
//! as `sless dev` runs them, against a private database and S3 server.
//! The cron scheduler is not started: tests drive it with their own clock.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sless_api::{AppState, Auth};
use sless_sandbox::Network;
use sless_testkit::{TestDb, TestS3, scratch_dir};
use sless_workers::local::{LocalDriver, LocalDriverConfig};
use sless_workers::{Reconciler, Worker, WorkerConfig};
use tokio::sync::watch;

use crate::Client;

/// The token subject of the platform's client.
pub const SUBJECT: &str = "historian";

const SECRET: &[u8] = b"platform-test-secret-of-32-bytes-or-more";

/// The API (with `keep` versions kept), the projector and a worker with
/// the local driver, all in this process.
pub struct Platform {
    pub db: TestDb,
    pub s3: TestS3,
    pub client: Client,
    pub driver: Arc<LocalDriver>,
    _stop: watch::Sender<bool>,
}

impl Platform {
    pub async fn start(keep: usize) -> Platform {
        Platform::start_with(keep, WorkerConfig::default()).await
    }

    /// `start`, with a worker of `config`.
    pub async fn start_with(keep: usize, config: WorkerConfig) -> Platform {
        Platform::start_on(keep, config, Network::Outbound).await
    }

    /// [`Platform::start_with`] whose functions share the host's network,
    /// for a test whose functions call back to it on loopback (a
    /// [`crate::support::Beacon`]); isolation is tested elsewhere.
    pub async fn start_sharing_loopback(keep: usize, config: WorkerConfig) -> Platform {
        Platform::start_on(keep, config, Network::Host).await
    }

    async fn start_on(keep: usize, config: WorkerConfig, network: Network) -> Platform {
        let db = TestDb::new().await;
        let s3 = TestS3::new().await;
        let mut state = AppState::new(db.pool.clone(), s3.blobs(), Auth::hs256(SECRET, None, None));
        state.keep_versions = keep;
        let (url, fn_url) = crate::serve_origins(state).await;
        let (stop_tx, stop) = watch::channel(false);
        tokio::spawn(sless_projector::run(
            db.pool.clone(),
            Duration::from_millis(100),
            stop.clone(),
        ));
        let mut cfg = LocalDriverConfig::new(scratch_dir("history-driver"));
        cfg.network = network;
        if let Ok(python) = std::env::var("SLESS_PYTHON") {
            cfg.python = python;
        }
        let driver = Arc::new(LocalDriver::new(cfg).unwrap());
        let worker = Worker {
            pool: db.pool.clone(),
            reconciler: Reconciler {
                pool: db.pool.clone(),
                blobs: s3.blobs(),
                driver: driver.clone(),
            },
            config,
            on_start: None,
        };
        tokio::spawn(worker.run(stop));
        let client = Client {
            url,
            fn_url,
            token: sless_api::issue_hs256(SECRET, SUBJECT, Duration::from_secs(3600)),
            namespace: sless_domain::Namespace::for_subject(SUBJECT).to_string(),
            http: reqwest::Client::new(),
        };
        Platform {
            db,
            s3,
            client,
            driver,
            _stop: stop_tx,
        }
    }

    pub async fn get(&self, path: &str) -> reqwest::Response {
        let c = &self.client;
        c.http
            .get(c.v1(path))
            .bearer_auth(&c.token)
            .send()
            .await
            .unwrap()
    }

    pub async fn get_json(&self, path: &str) -> Value {
        let res = self.get(path).await;
        assert_eq!(res.status(), 200, "GET {path}");
        res.json().await.unwrap()
    }

    pub async fn rollback(&self, name: &str, version: Value) -> (u16, Value) {
        let c = &self.client;
        let res = c
            .http
            .post(c.v1(&format!("/functions/{name}/rollback")))
            .bearer_auth(&c.token)
            .json(&json!({ "version": version }))
            .send()
            .await
            .unwrap();
        (res.status().as_u16(), res.json().await.unwrap())
    }

    pub async fn invoke(&self, name: &str) -> String {
        let c = &self.client;
        let url = format!("{}/fn/{}/{name}", c.fn_url, c.namespace);
        let res = c.http.get(url).send().await.unwrap();
        assert_eq!(res.status(), 200);
        res.text().await.unwrap()
    }

    /// Waits until `version` runs and the function is Ready.
    pub async fn wait_deployed(&self, name: &str, version: u64) {
        sless_testkit::eventually(
            &format!("{name} v{version} deployed"),
            Duration::from_secs(60),
            || async {
                let f = self.client.function(name).await;
                assert_ne!(f["phase"], "Failed", "{f}");
                (f["phase"] == "Ready" && f["deployed_version"] == version).then_some(())
            },
        )
        .await
    }

    pub async fn upload(&self, name: &str, zip: Vec<u8>) -> (u16, Value) {
        let res = self.client.upload(name, zip).await;
        (res.status().as_u16(), res.json().await.unwrap())
    }
    /// Sends `method` to `/v1/namespaces/{ns}{path}` with a JSON body (or
    /// none); the status and the JSON answer (null when there is none).
    pub async fn call(
        &self,
        method: reqwest::Method,
        path: &str,
        body: Option<Value>,
    ) -> (u16, Value) {
        let c = &self.client;
        let mut req = c.http.request(method, c.v1(path)).bearer_auth(&c.token);
        if let Some(b) = body {
            req = req.json(&b);
        }
        let res = req.send().await.unwrap();
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        (status, serde_json::from_str(&text).unwrap_or(Value::Null))
    }
}
