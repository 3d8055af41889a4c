//! Helpers shared by the end-to-end and fault test binaries: the real
//! `sless` binary as a child process, zips, and an HTTP client of the API.
//! Each binary uses a different part of it.
#![allow(dead_code)]

pub mod kube;

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

/// The binary, with a configuration directory of its own (where `sless
/// dev` writes its `dev` profile), so a test never touches the profiles
/// of whoever runs it.
pub fn sless() -> Command {
    let mut cmd = Command::new(env!("CARGO_BIN_EXE_sless"));
    cmd.env("XDG_CONFIG_HOME", config_home());
    cmd
}

/// [`sless`] with the settings of a database and an S3 server, as every
/// role started on its own (`sless api`, `sless worker`) takes them.
pub fn sless_on(db_url: &str, s3: &sless_testkit::TestS3) -> Command {
    let mut cmd = sless();
    cmd.env("DATABASE_URL", db_url)
        .env("S3_ENDPOINT", s3.config.endpoint.as_ref().unwrap())
        .env("S3_BUCKET", &s3.config.bucket)
        .env("S3_ACCESS_KEY_ID", &s3.config.access_key)
        .env("S3_SECRET_ACCESS_KEY", &s3.config.secret_key);
    cmd
}

/// The configuration directory of the test binary's `sless` processes.
pub fn config_home() -> &'static Path {
    static DIR: std::sync::OnceLock<std::path::PathBuf> = std::sync::OnceLock::new();
    DIR.get_or_init(|| sless_testkit::scratch_dir("config"))
}

/// A child process that is killed (SIGKILL) if the test ends early.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    pub fn spawn(mut cmd: Command, log: &Path) -> Proc {
        let out = std::fs::File::create(log).unwrap();
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        Proc {
            child: cmd.spawn().expect("starting sless"),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Waits for the process to exit, up to `deadline`.
    pub async fn wait_exit(&mut self, deadline: Duration) -> std::process::ExitStatus {
        sless_testkit::eventually("the process to exit", deadline, || {
            let status = self.child.try_wait().unwrap();
            async move { status }
        })
        .await
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Processes whose command line mentions `needle` (e.g. a data directory),
/// a sandbox once (see `sless_testkit::processes::mentioning`).
pub fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    sless_testkit::processes::mentioning(needle)
}

/// An HTTP server on loopback that functions in their sandboxes can reach
/// (they cannot write the test's files): it records the paths `/hit/...`
/// asked for, and answers `/released` with `yes` once `release` was called.
pub struct Beacon {
    pub url: String,
    hits: std::sync::Arc<std::sync::Mutex<Vec<String>>>,
    open: std::sync::Arc<std::sync::atomic::AtomicBool>,
    task: tokio::task::JoinHandle<()>,
}

impl Beacon {
    pub async fn start() -> Beacon {
        use std::sync::atomic::Ordering;
        let hits = std::sync::Arc::new(std::sync::Mutex::new(Vec::new()));
        let open = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let (h, o) = (hits.clone(), open.clone());
        let app = axum::Router::new()
            .route(
                "/hit/{name}",
                axum::routing::get(
                    move |axum::extract::Path(name): axum::extract::Path<String>| {
                        let h = h.clone();
                        async move {
                            h.lock().unwrap().push(name);
                            "ok"
                        }
                    },
                ),
            )
            .route(
                "/released",
                axum::routing::get(move || {
                    let o = o.clone();
                    async move {
                        if o.load(Ordering::SeqCst) {
                            "yes"
                        } else {
                            "no"
                        }
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        let task = tokio::spawn(async move {
            let _ = axum::serve(listener, app).await;
        });
        Beacon {
            url,
            hits,
            open,
            task,
        }
    }

    /// The names asked for as `/hit/{name}`, in order.
    pub fn hits(&self) -> Vec<String> {
        self.hits.lock().unwrap().clone()
    }

    /// From now on `/released` answers `yes`.
    pub fn release(&self) {
        self.open.store(true, std::sync::atomic::Ordering::SeqCst);
    }
}

impl Drop for Beacon {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Zips the files of a directory (not recursing), as a user would.
pub fn zip_dir(dir: &Path) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            continue;
        }
        w.start_file(name, zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(&std::fs::read(e.path()).unwrap()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

pub fn zip_files(files: &[(&str, &str)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, content) in files {
        w.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(content.as_bytes()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// Serves both origins over `state` on loopback ports, until the test
/// ends: the API's and the functions' URLs.
pub async fn serve_origins(mut state: sless_api::AppState) -> (String, String) {
    let api = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let functions = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", api.local_addr().unwrap());
    let fn_url = format!("http://{}", functions.local_addr().unwrap());
    state.fn_url = Some(fn_url.as_str().into());
    let fn_app = sless_api::fn_router(state.clone());
    tokio::spawn(async move { axum::serve(api, sless_api::router(state)).await });
    tokio::spawn(async move { axum::serve(functions, fn_app).await });
    (url, fn_url)
}

/// A client of one sless instance.
#[derive(Clone)]
pub struct Client {
    /// The API's origin.
    pub url: String,
    /// The functions' origin (`/fn/...`).
    pub fn_url: String,
    pub token: String,
    pub namespace: String,
    pub http: reqwest::Client,
}

impl Client {
    pub fn v1(&self, path: &str) -> String {
        format!("{}/v1/namespaces/{}{path}", self.url, self.namespace)
    }

    pub async fn create(&self, body: serde_json::Value) -> reqwest::Response {
        self.http
            .post(self.v1("/functions"))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn upload(&self, name: &str, zip: Vec<u8>) -> reqwest::Response {
        self.http
            .post(self.v1(&format!("/functions/{name}/upload")))
            .bearer_auth(&self.token)
            .header("content-type", "application/zip")
            .body(zip)
            .send()
            .await
            .unwrap()
    }

    /// The functions of this client's namespace, as `token` sees them.
    pub async fn list_as(&self, token: &str) -> reqwest::Response {
        self.http
            .get(self.v1("/functions"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    pub async fn function(&self, name: &str) -> serde_json::Value {
        let res = self
            .http
            .get(self.v1(&format!("/functions/{name}")))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        res.json().await.unwrap()
    }

    /// The function's invocation records, newest first (None while the API
    /// does not answer with a page of them).
    pub async fn invocations(&self, name: &str) -> Option<Vec<serde_json::Value>> {
        let page: serde_json::Value = self
            .http
            .get(self.v1(&format!("/functions/{name}/invocations")))
            .bearer_auth(&self.token)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        page["items"].as_array().cloned()
    }

    /// Waits until the function is Ready (panics if it fails or the deadline passes).
    pub async fn wait_ready(&self, name: &str, deadline: Duration) -> serde_json::Value {
        sless_testkit::eventually(&format!("{name} to be Ready"), deadline, || async {
            let f = self.function(name).await;
            assert_ne!(f["phase"], "Failed", "{f}");
            (f["phase"] == "Ready").then_some(f)
        })
        .await
    }
}
