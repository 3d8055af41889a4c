//! The real `sless dev` binary as a child process, on a fresh database of the
//! benchmark server (through `DATABASE_URL`) with its embedded S3 and the
//! local driver, and a client of its API.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, Instant};

use anyhow::Context;
use serde_json::json;
use sless_store::PgPool;

use crate::otlp::Sink;
use crate::{Server, wait_for};

/// Where `sless dev` is, and how long to wait for it.
#[derive(clap::Args, Clone)]
pub struct DevArgs {
    /// The sless binary to start as `sless dev`.
    #[arg(long, default_value = "target/release/sless")]
    pub sless: PathBuf,
    /// Start it with `--unsafe-no-sandbox` (functions outside the sandbox),
    /// for the figures beside the sandbox's.
    #[arg(skip)]
    pub unsafe_no_sandbox: bool,
    /// Start it with traces on, sampled at 100%, sent over OTLP to a sink
    /// on loopback (metrics are on unless `SLESS_METRICS=off` is set).
    #[arg(long)]
    pub traces: bool,
}

/// Which of `sless dev` with the sandbox and without a benchmark measures.
#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sandbox {
    /// Both, one after the other, and the difference.
    Both,
    /// Functions in the sandbox (as `sless dev` runs them).
    On,
    /// `--unsafe-no-sandbox`.
    Off,
}

impl Sandbox {
    /// The runs: (name, whether unsafe).
    pub fn runs(self) -> Vec<(&'static str, bool)> {
        match self {
            Sandbox::Both => vec![("sandbox", false), ("no_sandbox", true)],
            Sandbox::On => vec![("sandbox", false)],
            Sandbox::Off => vec![("no_sandbox", true)],
        }
    }
}

/// The figures of [`SlessDev::measured_each`].
pub enum Runs {
    /// With the sandbox or without it.
    One(serde_json::Value),
    /// Both, by run name.
    Both(serde_json::Map<String, serde_json::Value>),
}

/// A running `sless dev`.
pub struct SlessDev {
    child: tokio::process::Child,
    dir: tempfile::TempDir,
    /// The API's origin.
    pub url: String,
    /// The functions' origin (`/fn/...`).
    pub fn_url: String,
    pub token: String,
    pub namespace: String,
    pub http: reqwest::Client,
    /// The database it runs on, for what the API does not show (endpoints).
    pub pool: PgPool,
    /// Where its spans go, with `--traces`.
    traces: Option<Sink>,
    /// How it was started, to start it again (`restart`).
    launch: Launch,
}

/// The command line and environment `sless dev` is started with.
struct Launch {
    binary: PathBuf,
    db_url: String,
    unsafe_no_sandbox: bool,
    traced: Vec<(&'static str, String)>,
    /// Where the API and the functions' origin listen, once the first
    /// start chose (a restart keeps them, as a deployment does).
    addresses: Option<(String, String)>,
}

/// Resident memory of a process, in KiB.
#[derive(Debug, Clone, Copy, serde::Serialize)]
pub struct Memory {
    /// Peak resident set size so far (VmHWM).
    pub peak_kib: u64,
    /// Resident set size now (VmRSS).
    pub rss_kib: u64,
    /// Of it, the process's own memory (RssAnon): its heap and stacks.
    pub anon_kib: u64,
    /// Of it, pages of mapped files (RssFile): mostly the binary's code, shared
    /// with the page cache, and mapped around each page run (fault-around).
    pub file_kib: u64,
}

impl SlessDev {
    /// Its data directory.
    pub fn data_dir(&self) -> &std::path::Path {
        self.dir.path()
    }

    /// The URL of the database it runs on.
    pub fn db_url(&self) -> &str {
        &self.launch.db_url
    }

    /// The `sless` binary it runs.
    pub fn binary(&self) -> &Path {
        &self.launch.binary
    }

    /// Starts `sless dev`, takes `measure`'s figures on it, and stops it;
    /// when the measurement fails, prints the tail of its log first.
    pub async fn measured(
        server: &Server,
        args: &DevArgs,
        measure: impl AsyncFnOnce(&SlessDev) -> anyhow::Result<serde_json::Value>,
    ) -> anyhow::Result<serde_json::Value> {
        let dev = SlessDev::start(server, args).await?;
        let figures = measure(&dev).await;
        if figures.is_err() {
            eprintln!("sless dev log:\n{}", tail(&dev.log_path()));
        }
        dev.stop().await?;
        figures
    }

    /// `measure` on a `sless dev` with the sandbox, one without, or one of
    /// each after the other (their figures under `sandbox` and `no_sandbox`).
    pub async fn measured_each(
        server: &Server,
        args: &DevArgs,
        sandbox: Sandbox,
        what: &str,
        measure: impl AsyncFn(&SlessDev) -> anyhow::Result<serde_json::Value>,
    ) -> anyhow::Result<Runs> {
        let runs = sandbox.runs();
        let mut figures = serde_json::Map::new();
        for &(name, unsafe_no_sandbox) in &runs {
            let args = DevArgs {
                unsafe_no_sandbox,
                ..args.clone()
            };
            if runs.len() == 1 {
                return Ok(Runs::One(
                    SlessDev::measured(server, &args, &measure).await?,
                ));
            }
            eprintln!("{what}, {name}:");
            let got = SlessDev::measured(server, &args, &measure).await?;
            figures.insert(name.to_owned(), got);
        }
        Ok(Runs::Both(figures))
    }

    /// Quotas no benchmark reaches.
    const BENCH_QUOTAS: [(&str, &str); 6] = [
        ("SLESS_QUOTA_FUNCTIONS", "1000000"),
        ("SLESS_QUOTA_VERSIONS", "1000000"),
        ("SLESS_QUOTA_STORED_BYTES", "1099511627776"),
        ("SLESS_QUOTA_TRIGGERS", "1000000"),
        ("SLESS_QUOTA_RUNNING_JOBS", "1000000"),
        ("SLESS_QUOTA_UPLOADS_PER_MINUTE", "1000000"),
    ];

    pub async fn start(server: &Server, args: &DevArgs) -> anyhow::Result<SlessDev> {
        let binary = args.sless.canonicalize().with_context(|| {
            format!(
                "{} not found (build it: cargo build --release -p sless)",
                args.sless.display()
            )
        })?;
        let (pool, db_url) = server.database(4).await?;
        let dir = tempfile::Builder::new()
            .prefix("sless-bench-dev-")
            .tempdir()?;
        let traces = match args.traces {
            true => Some(Sink::start().await?),
            false => None,
        };
        let traced = match &traces {
            Some(sink) => vec![
                ("OTEL_EXPORTER_OTLP_ENDPOINT", sink.endpoint.clone()),
                ("OTEL_TRACES_SAMPLER", "always_on".to_owned()),
            ],
            None => Vec::new(),
        };
        let launch = Launch {
            binary,
            db_url,
            unsafe_no_sandbox: args.unsafe_no_sandbox,
            traced,
            addresses: None,
        };
        let child = launch.spawn(dir.path())?;
        let mut dev = SlessDev {
            child,
            dir,
            url: String::new(),
            fn_url: String::new(),
            token: String::new(),
            namespace: String::new(),
            http: reqwest::Client::new(),
            pool,
            traces,
            launch,
        };
        dev.announced().await?;
        eprintln!("sless dev (pid {}) at {}", dev.pid(), dev.url);
        Ok(dev)
    }

    /// Waits for `dev.json` and reads where the instance listens from it.
    async fn announced(&mut self) -> anyhow::Result<()> {
        let info_path = self.dir.path().join("data/dev.json");
        let info: serde_json::Value = {
            let child = &mut self.child;
            let log = self.dir.path().join("sless.log");
            wait_for(
                "sless dev to write dev.json",
                Duration::from_secs(300),
                Duration::from_millis(20),
                || {
                    let exited = child.try_wait();
                    let text = std::fs::read(&info_path).ok();
                    let log = log.clone();
                    async move {
                        if let Some(status) = exited? {
                            anyhow::bail!("sless dev exited ({status}): {}", tail(&log));
                        }
                        Ok(text.and_then(|t| serde_json::from_slice(&t).ok()))
                    }
                },
            )
            .await?
        };
        let field = |k: &str| {
            info[k]
                .as_str()
                .map(str::to_owned)
                .ok_or_else(|| anyhow::anyhow!("dev.json has no {k}: {info}"))
        };
        self.url = field("url")?;
        self.fn_url = field("fn_url")?;
        let address = |url: &str| url.trim_start_matches("http://").to_owned();
        self.launch.addresses = Some((address(&self.url), address(&self.fn_url)));
        self.token = field("token")?;
        self.namespace = field("namespace")?;
        Ok(())
    }

    /// Stops it (SIGTERM, as `stop`) and starts it again on the same
    /// database, data directory and addresses; the time from the start of the new
    /// process until it announced itself (`dev.json`: its migrations ran,
    /// every function's reconcile is enqueued, the API listens).
    pub async fn restart(&mut self) -> anyhow::Result<Duration> {
        self.terminate().await?;
        self.start_again().await
    }

    /// Starts it again after it stopped (`restart`, or a stop of the
    /// caller's own), as `restart` says.
    pub async fn start_again(&mut self) -> anyhow::Result<Duration> {
        std::fs::remove_file(self.dir.path().join("data/dev.json"))?;
        let started = Instant::now();
        self.child = self.launch.spawn(self.dir.path())?;
        self.announced().await?;
        let took = started.elapsed();
        eprintln!("sless dev (pid {}) at {} again", self.pid(), self.url);
        Ok(took)
    }

    pub fn pid(&self) -> u32 {
        self.child.id().unwrap_or(0)
    }

    pub fn log_path(&self) -> PathBuf {
        self.dir.path().join("sless.log")
    }

    /// The resident memory of the `sless dev` process (not its children).
    pub fn memory(&self) -> anyhow::Result<Memory> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid()))?;
        let kib = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse().ok())
                .ok_or_else(|| anyhow::anyhow!("no {key} in /proc status"))
        };
        Ok(Memory {
            peak_kib: kib("VmHWM:")?,
            rss_kib: kib("VmRSS:")?,
            anon_kib: kib("RssAnon:")?,
            file_kib: kib("RssFile:")?,
        })
    }

    pub fn v1(&self, path: &str) -> String {
        format!("{}/v1/namespaces/{}{path}", self.url, self.namespace)
    }

    /// Creates a python3.11 function with entrypoint `handler.handle`. A 503
    /// (the API shedding load while its database is slow to answer) is
    /// retried with the same Idempotency-Key, a few times.
    pub async fn create(&self, name: &str) -> anyhow::Result<()> {
        self.create_with(name, json!({})).await
    }

    /// Creates `name` with the fields of `spec` besides (e.g. its scaling).
    pub async fn create_with(&self, name: &str, spec: serde_json::Value) -> anyhow::Result<()> {
        let mut body =
            json!({ "name": name, "runtime": "python3.11", "entrypoint": "handler.handle" });
        if let (Some(body), Some(spec)) = (body.as_object_mut(), spec.as_object()) {
            body.extend(spec.clone());
        }
        let key = uuid::Uuid::new_v4().to_string();
        let mut attempt = 0;
        loop {
            attempt += 1;
            let res = self
                .http
                .post(self.v1("/functions"))
                .bearer_auth(&self.token)
                .header("idempotency-key", &key)
                .json(&body)
                .send()
                .await?;
            let status = res.status();
            match status.as_u16() {
                201 => return Ok(()),
                503 if attempt < 10 => {
                    eprintln!("create {name}: 503, retrying");
                    tokio::time::sleep(Duration::from_millis(200 * attempt)).await;
                }
                _ => anyhow::bail!("create {name}: {status} {}", res.text().await?),
            }
        }
    }

    /// Uploads a zip; the version the API gave it.
    pub async fn upload(&self, name: &str, zip: Vec<u8>) -> anyhow::Result<u64> {
        let res = self
            .http
            .post(self.v1(&format!("/functions/{name}/upload")))
            .bearer_auth(&self.token)
            .header("content-type", "application/zip")
            .body(zip)
            .send()
            .await?;
        let status = res.status();
        let body: serde_json::Value = res.json().await?;
        if status.as_u16() != 202 {
            anyhow::bail!("upload {name}: {status} {body}");
        }
        body["version"]
            .as_u64()
            .ok_or_else(|| anyhow::anyhow!("upload {name}: no version in {body}"))
    }

    /// The function as `GET .../functions/{name}` shows it.
    pub async fn function(&self, name: &str) -> anyhow::Result<serde_json::Value> {
        let res = self
            .http
            .get(self.v1(&format!("/functions/{name}")))
            .bearer_auth(&self.token)
            .send()
            .await?;
        Ok(res.error_for_status()?.json().await?)
    }

    /// Waits until `version` of the function is deployed and Ready, checking
    /// every `every`; fails on `Failed`.
    pub async fn wait_ready(
        &self,
        name: &str,
        version: u64,
        deadline: Duration,
        every: Duration,
    ) -> anyhow::Result<Instant> {
        wait_for(
            &format!("{name} v{version} to be Ready"),
            deadline,
            every,
            || async {
                let f = self.function(name).await?;
                if f["phase"] == "Failed" {
                    anyhow::bail!("{name} failed: {f}");
                }
                let ready = f["phase"] == "Ready" && f["deployed_version"] == version;
                Ok(ready.then(Instant::now))
            },
        )
        .await
    }

    /// The loopback address a function runs on (`http://127.0.0.1:port`),
    /// from the read model.
    pub async fn endpoint(&self, name: &str) -> anyhow::Result<String> {
        let endpoint: Option<String> =
            sqlx::query_scalar("select endpoint from functions where namespace = $1 and name = $2")
                .bind(&self.namespace)
                .bind(name)
                .fetch_one(&self.pool)
                .await?;
        endpoint.ok_or_else(|| anyhow::anyhow!("{name} has no endpoint"))
    }

    /// SIGTERM, then waits for it (and the function processes it stops) to exit.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(sink) = &self.traces {
            let (exports, bytes, spans) = sink.received();
            eprintln!("the OTLP sink received {spans} spans in {exports} exports, {bytes} bytes");
        }
        self.terminate().await?;
        self.pool.close().await;
        Ok(())
    }

    /// SIGTERM to the process, and waits for it to exit (killed after 30 s).
    pub async fn terminate(&mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid as i32, libc::SIGTERM) };
        }
        match tokio::time::timeout(Duration::from_secs(30), self.child.wait()).await {
            Ok(status) => {
                status?;
            }
            Err(_) => {
                eprintln!("sless dev did not stop within 30 s of SIGTERM; killing it");
                self.child.kill().await?;
            }
        }
        Ok(())
    }
}

impl Launch {
    /// Starts `sless dev` on data directory `dir`/data, its log appended
    /// to `dir`/sless.log.
    fn spawn(&self, dir: &Path) -> anyhow::Result<tokio::process::Child> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(dir.join("sless.log"))?;
        tokio::process::Command::new(&self.binary)
            .arg("dev")
            .arg("--data-dir")
            .arg(dir.join("data"))
            .args(match &self.addresses {
                Some((api, functions)) => ["--listen", api, "--fn-listen", functions],
                None => ["--listen", "127.0.0.1:0", "--fn-listen", "127.0.0.1:0"],
            })
            .args(self.unsafe_no_sandbox.then_some("--unsafe-no-sandbox"))
            .env("DATABASE_URL", &self.db_url)
            // A benchmark fills one namespace past the default quotas (the
            // API's fills it with 1,000 functions); quotas this high are
            // still checked on every command, so their cost is measured.
            .envs(SlessDev::BENCH_QUOTAS)
            .envs(self.traced.iter().map(|(k, v)| (k, v)))
            .env_remove("S3_ENDPOINT")
            .env_remove("S3_BUCKET")
            .stdin(Stdio::null())
            .stdout(log.try_clone()?)
            .stderr(log)
            .kill_on_drop(true)
            .spawn()
            .with_context(|| format!("starting {}", self.binary.display()))
    }
}

/// The last lines of a log file.
pub fn tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(20)..].join("\n")
}

/// A python function without dependencies; `marker` makes each version's
/// code (and so its zip) differ.
pub fn python_zip(marker: &str) -> anyhow::Result<Vec<u8>> {
    let handler = format!(
        "# {marker}\n\
         def handle(event):\n    \
             return {{\"message\": \"hello\", \"path\": event[\"path\"]}}\n"
    );
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    w.start_file("handler.py", zip::write::SimpleFileOptions::default())?;
    w.write_all(handler.as_bytes())?;
    Ok(w.finish()?.into_inner())
}
