//! sless on a real Kubernetes control plane: `sless api`, `sless projector`
//! and `sless worker` as processes of the built binary outside the cluster,
//! the worker (`SLESS_DRIVER=kubernetes`) reaching the cluster with
//! `KUBECONFIG` as the ServiceAccount `sless` that `deploy/base` installs.
//! `tests/kube_platform.rs` runs it beside a node that plays the kubelet,
//! `tests/cluster.rs` beside a real one.

use std::future::Future;
use std::path::PathBuf;
use std::process::Command;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::{Deployment, ReplicaSet};
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Pod, Secret, Service};
use kube::ResourceExt;
use kube::api::{Api, ListParams};
use reqwest::Method;
use serde_json::Value;
use sless_testkit::kube::ControlPlane;
use sless_testkit::{TestDb, TestS3, eventually, scratch_dir};

use super::{Client, Proc, sless_on};

const SECRET: &str = "kube-platform-test-secret-of-32-bytes-or-more";
/// The namespace kaniko builds run in.
pub const BUILDS: &str = "sless-builds";
/// The copy of the pull Secret in each tenant namespace: the namespace's own.
pub const TENANT_PULL_SECRET: &str = "sless-pull";

/// The platform's processes, a user of it, and the cluster.
pub struct Platform {
    pub client: Client,
    pub kube: kube::Client,
    /// The user's namespace, on sless and on the cluster.
    pub ns: String,
    /// Where the processes' logs are.
    pub dir: PathBuf,
    /// How long any one step may take: a build, a rollout, a removal.
    pub deadline: Duration,
    _procs: Vec<Proc>,
    _db: TestDb,
    _s3: TestS3,
}

impl Platform {
    /// Starts `sless api`, `sless projector` and `sless worker` (with the
    /// Kubernetes driver, as the ServiceAccount `sless`) for the user `sub`;
    /// `worker` adds the worker's settings of the cluster at hand.
    pub async fn start(
        sub: &str,
        deadline: Duration,
        worker: impl FnOnce(&TestS3, &mut Command),
    ) -> Platform {
        let started = Instant::now();
        let plane = ControlPlane::shared();
        eprintln!("control plane: {:?}", started.elapsed());
        let installed = sless_testkit::kube::installed().await;
        eprintln!("deploy/base installed: {:?}", started.elapsed());
        let db = TestDb::new().await;
        let s3 = TestS3::new().await;
        let dir = scratch_dir("kube-platform");
        let kubeconfig = installed.kubeconfig(&dir);
        eprintln!("the platform's logs: {}", dir.display());

        let mut api = sless_on(&db.url, &s3);
        api.env("SLESS_JWT_SECRET", SECRET)
            .args(["api", "--listen", "127.0.0.1:0"]);
        let mut projector = sless_on(&db.url, &s3);
        projector.arg("projector");
        let mut worker_cmd = sless_on(&db.url, &s3);
        worker_cmd
            .arg("worker")
            .env("SLESS_DATA_DIR", dir.join("worker"))
            .env("SLESS_DRIVER", "kubernetes")
            .env("KUBECONFIG", &kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBERNETES_SERVICE_PORT")
            .env("RUST_LOG", "info");
        worker(&s3, &mut worker_cmd);
        for cmd in [&mut api, &mut projector, &mut worker_cmd] {
            // Logs a failure shows: plain text.
            cmd.env("NO_COLOR", "1");
        }
        let procs = vec![
            Proc::spawn(api, &dir.join("api.log")),
            Proc::spawn(projector, &dir.join("projector.log")),
            Proc::spawn(worker_cmd, &dir.join("worker.log")),
        ];
        let log = dir.join("api.log");
        let url = eventually("sless api to listen", deadline, || async {
            sless_testkit::after_on_whole_line(&log, "sless api listening on ")
        })
        .await;
        eprintln!("the platform started: {:?}", started.elapsed());
        let ns = sless_domain::Namespace::for_subject(sub).to_string();
        Platform {
            client: Client {
                url,
                fn_url: String::new(),
                token: sless_api::issue_hs256(SECRET.as_bytes(), sub, Duration::from_secs(3600)),
                namespace: ns.clone(),
                http: reqwest::Client::new(),
            },
            kube: plane.admin(),
            ns,
            dir,
            deadline,
            _procs: procs,
            _db: db,
            _s3: s3,
        }
    }

    /// The last lines of each process's log.
    pub fn logs(&self) -> String {
        let mut out = String::new();
        for name in ["api", "projector", "worker"] {
            let text =
                std::fs::read_to_string(self.dir.join(format!("{name}.log"))).unwrap_or_default();
            let lines: Vec<&str> = text.lines().collect();
            out.push_str(&format!(
                "--- {name}.log:\n{}\n",
                lines[lines.len().saturating_sub(30)..].join("\n")
            ));
        }
        out
    }

    /// Waits for `check` to be `Ok` (a deadline of [`Platform::deadline`]); when it
    /// never is, says what it said last and shows the processes' logs.
    pub async fn wait<T, Fut>(&self, what: &str, mut check: impl FnMut() -> Fut) -> T
    where
        Fut: Future<Output = Result<T, String>>,
    {
        let started = Instant::now();
        let last = Mutex::new(String::new());
        let waiting = eventually(what, self.deadline + Duration::from_secs(5), || {
            let seen = check();
            let last = &last;
            async move { seen.await.map_err(|e| *last.lock().unwrap() = e).ok() }
        });
        match tokio::time::timeout(self.deadline, waiting).await {
            Ok(v) => {
                eprintln!("{what}: {:?}", started.elapsed());
                v
            }
            Err(_) => panic!(
                "timed out after {:?} waiting for {what}; last seen: {}\n{}",
                self.deadline,
                last.lock().unwrap(),
                self.logs()
            ),
        }
    }

    /// `method` on `/v1/namespaces/{ns}{path}` as the user: the status and
    /// the JSON answer.
    pub async fn call(&self, method: Method, path: &str, body: Option<Value>) -> (u16, Value) {
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

    pub fn api<K>(&self, ns: &str) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.kube.clone(), ns)
    }

    /// The names of the objects of kind `K` in `ns` that `selector` matches.
    pub async fn names<K>(&self, ns: &str, selector: &str) -> Vec<String>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
            + Clone
            + std::fmt::Debug
            + serde::de::DeserializeOwned,
        <K as kube::Resource>::DynamicType: Default,
    {
        self.api::<K>(ns)
            .list(&ListParams::default().labels(selector))
            .await
            .unwrap()
            .items
            .iter()
            .map(|o| o.name_any())
            .collect()
    }

    /// What of the function `name` is left on the cluster: its objects in
    /// the tenant namespace (all of them: nothing else lives there but the
    /// namespace's own pull Secret) and its build in the build namespace.
    pub async fn left_of(&self, name: &str) -> Vec<String> {
        let ns = self.ns.as_str();
        let mut left = Vec::new();
        let mut add = |kind: &str, names: Vec<String>| {
            left.extend(names.into_iter().map(|n| format!("{kind} {n}")));
        };
        add("deployment", self.names::<Deployment>(ns, "").await);
        add("service", self.names::<Service>(ns, "").await);
        add("replicaset", self.names::<ReplicaSet>(ns, "").await);
        add("pod", self.names::<Pod>(ns, "").await);
        add("cronjob", self.names::<CronJob>(ns, "").await);
        add("job", self.names::<Job>(ns, "").await);
        let secrets = self.names::<Secret>(ns, "").await;
        add(
            "secret",
            secrets
                .into_iter()
                .filter(|s| s != TENANT_PULL_SECRET)
                .collect(),
        );
        let build = format!("sless.dev/namespace={ns},sless.dev/function={name}");
        add("build job", self.names::<Job>(BUILDS, &build).await);
        add("build pod", self.names::<Pod>(BUILDS, &build).await);
        add("build secret", self.names::<Secret>(BUILDS, &build).await);
        left
    }
}
