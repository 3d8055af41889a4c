//! What the worker and projector scenarios share: an API (and optionally a
//! projector) in this process on a fresh database and S3 server, workers as
//! processes or in process, the Python sources the scenarios deploy, and the
//! checker that compares the log with what was acknowledged.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::path::Path;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde_json::json;
use sless_api::{AppState, Auth};
use sless_domain::{Function, FunctionEvent, FunctionKey, FunctionName, Namespace, Phase};
use sless_store::eventlog::{self, Checkpoint};
use sless_store::queue::{self, WorkItem};
use sless_store::{PgPool, readmodel};
use sless_testkit::{TestDb, TestS3};
use sless_workers::{Driver, Reconciler};
use sqlx::Row;
use tokio::sync::watch;
use tokio::time::Instant;

use crate::{Client, Proc, sless, zip_files};

const SECRET: &[u8] = b"faults-workers-secret";

/// A database, an S3 server, the API on loopback and (optionally) the
/// projector, all in this process. Workers are added by each scenario.
pub struct Stack {
    pub db: TestDb,
    pub s3: TestS3,
    pub client: Client,
    stop: watch::Sender<bool>,
    conflicts: AtomicUsize,
    unanswered: AtomicUsize,
}

impl Stack {
    pub async fn start(subject: &str, projector: bool) -> Stack {
        let db = TestDb::new().await;
        let s3 = TestS3::new().await;
        let state = AppState::new(db.pool.clone(), s3.blobs(), Auth::hs256(SECRET, None, None));
        let (url, fn_url) = crate::serve_origins(state).await;
        let (stop, stopped) = watch::channel(false);
        if projector {
            tokio::spawn(sless_projector::run(
                db.pool.clone(),
                Duration::from_millis(200),
                stopped,
            ));
        }
        let client = Client {
            url,
            fn_url,
            token: sless_api::issue_hs256(SECRET, subject, Duration::from_secs(3600)),
            namespace: Namespace::for_subject(subject).to_string(),
            http: reqwest::Client::builder().no_proxy().build().unwrap(),
        };
        Stack {
            db,
            s3,
            client,
            stop,
            conflicts: AtomicUsize::new(0),
            unanswered: AtomicUsize::new(0),
        }
    }

    pub fn pool(&self) -> &PgPool {
        &self.db.pool
    }

    pub fn key(&self, name: &str) -> FunctionKey {
        FunctionKey::new(
            Namespace::parse(&self.client.namespace).unwrap(),
            FunctionName::parse(name).unwrap(),
        )
    }

    /// Sends a command as a careful client does: with an `Idempotency-Key`,
    /// retried with the same key while the answer is a refusal worth
    /// retrying (409: a worker appended to the function's stream between the
    /// API's read and its append) or unknown (5xx, no answer). Returns the
    /// first other answer.
    async fn command(
        &self,
        what: &str,
        request: impl Fn() -> reqwest::RequestBuilder,
    ) -> reqwest::Response {
        let key = uuid::Uuid::new_v4().to_string();
        for _ in 0..30 {
            let sent = request()
                .bearer_auth(&self.client.token)
                .header("idempotency-key", &key)
                .timeout(Duration::from_secs(30))
                .send()
                .await;
            match sent {
                Ok(res) if res.status() == 409 => {
                    self.conflicts.fetch_add(1, Ordering::Relaxed);
                }
                Ok(res) if res.status().is_server_error() => {
                    self.unanswered.fetch_add(1, Ordering::Relaxed);
                }
                Ok(res) => return res,
                Err(_) => {
                    self.unanswered.fetch_add(1, Ordering::Relaxed);
                }
            }
            // A client's pause before it tries again.
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        panic!("{what}: no answer after 30 tries");
    }

    /// Creates a python function; panics unless the API answers 201.
    pub async fn create(&self, name: &str) {
        let body = json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle"});
        let url = self.client.v1("/functions");
        let res = self
            .command(&format!("creating {name}"), || {
                self.client.http.post(&url).json(&body)
            })
            .await;
        assert_eq!(
            res.status(),
            201,
            "creating {name}: {}",
            res.text().await.unwrap()
        );
    }

    /// Uploads `handler.py`; returns the acknowledged version (panics
    /// unless the API answers 202).
    pub async fn upload(&self, name: &str, handler: &str) -> u32 {
        let zip = zip_files(&[("handler.py", handler)]);
        let url = self.client.v1(&format!("/functions/{name}/upload"));
        let res = self
            .command(&format!("uploading {name}"), || {
                self.client
                    .http
                    .post(&url)
                    .header("content-type", "application/zip")
                    .body(zip.clone())
            })
            .await;
        assert_eq!(
            res.status(),
            202,
            "uploading {name}: {}",
            res.text().await.unwrap()
        );
        let body: serde_json::Value = res.json().await.unwrap();
        body["version"].as_u64().expect("a version") as u32
    }

    /// How the API answered the commands that had to be retried: refused
    /// with 409, and left without an answer (5xx or none), for the FAULT lines.
    pub fn retried_commands(&self) -> String {
        format!(
            "409:{},unanswered:{}",
            self.conflicts.load(Ordering::Relaxed),
            self.unanswered.load(Ordering::Relaxed)
        )
    }

    /// A `sless worker` process on this stack's database and S3, with its
    /// data in `dir` and its output in `dir.log`.
    pub fn worker_process(&self, id: &str, dir: &Path, env: &[(&str, &str)]) -> Proc {
        let mut cmd = sless();
        cmd.arg("worker")
            .env("DATABASE_URL", &self.db.url)
            .env("S3_ENDPOINT", self.s3.config.endpoint.as_ref().unwrap())
            .env("S3_BUCKET", &self.s3.config.bucket)
            .env("S3_ACCESS_KEY_ID", &self.s3.config.access_key)
            .env("S3_SECRET_ACCESS_KEY", &self.s3.config.secret_key)
            .env("SLESS_DATA_DIR", dir)
            .env("SLESS_WORKER_ID", id);
        for (k, v) in env {
            cmd.env(k, v);
        }
        Proc::spawn(cmd, &dir.with_extension("log"))
    }

    /// What a function's process answers at its root, or why it did not.
    pub async fn answer(&self, endpoint: &str) -> String {
        match self.client.http.get(format!("{endpoint}/")).send().await {
            Ok(res) => res.text().await.unwrap_or_else(|e| e.to_string()),
            Err(e) => e.to_string(),
        }
    }

    pub fn reconciler<D: Driver>(&self, driver: Arc<D>) -> Reconciler<D> {
        Reconciler {
            pool: self.db.pool.clone(),
            blobs: self.s3.blobs(),
            driver,
        }
    }

    /// Stops the projector (if one runs).
    pub fn stop(&self) {
        let _ = self.stop.send(true);
    }
}

/// Prints a scenario's one line to stderr (libtest does not capture it).
pub fn report(id: &str, fields: &[(&str, String)]) {
    let mut line = format!("FAULT {id}");
    for (k, v) in fields {
        line.push_str(&format!(" {k}={v}"));
    }
    // Straight to the process's stderr: libtest captures `eprintln!`.
    let mut stderr = std::io::stderr().lock();
    writeln!(stderr, "{line}").unwrap();
}

/// Seconds with one decimal, for the FAULT lines.
pub fn secs(d: Duration) -> String {
    format!("{:.1}s", d.as_secs_f64())
}

/// Polls `check` every 20 ms until it holds; returns how long that took, or
/// `None` once `deadline` has passed (so a scenario can still print its line
/// before it fails).
pub async fn within<F, Fut>(deadline: Duration, mut check: F) -> Option<Duration>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let start = Instant::now();
    loop {
        if check().await {
            return Some(start.elapsed());
        }
        if start.elapsed() > deadline {
            return None;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

// ---- the functions the scenarios deploy ----

/// Answers `reply` right away.
pub fn fast(reply: &str) -> String {
    format!("def handle(event):\n    return '{reply}'\n")
}

/// Takes `secs` to import, so its deploy is still going for that long.
pub fn slow_import(secs: f64, reply: &str) -> String {
    format!("import time\ntime.sleep({secs})\n\ndef handle(event):\n    return '{reply}'\n")
}

/// Does not finish importing until `beacon` is released (the function, in
/// its sandbox, sees none of the test's files, but reaches loopback).
pub fn held_while(beacon: &crate::Beacon, reply: &str) -> String {
    format!(
        "import time, urllib.request\n\
         while urllib.request.urlopen({:?}).read() != b'yes':\n    time.sleep(0.05)\n\n\
         def handle(event):\n    return '{reply}'\n",
        format!("{}/released", beacon.url)
    )
}

/// Cannot import: a permanent error of the user's code.
pub const BROKEN: &str = "import sless_no_such_module\n\ndef handle(event):\n    return 'never'\n";

// ---- reading the log and the queue ----

pub async fn stream_events(pool: &PgPool, key: &FunctionKey) -> Vec<FunctionEvent> {
    eventlog::read_stream(pool, &key.stream())
        .await
        .unwrap()
        .iter()
        .map(|e| FunctionEvent::from_stored(&e.event_type, &e.data).unwrap())
        .collect()
}

pub async fn fold(pool: &PgPool, key: &FunctionKey) -> Function {
    Function::fold(&stream_events(pool, key).await)
}

pub async fn event_count(pool: &PgPool, key: &FunctionKey, event_type: &str) -> i64 {
    sqlx::query_scalar("select count(*) from events where stream = $1 and type = $2")
        .bind(key.stream())
        .bind(event_type)
        .fetch_one(pool)
        .await
        .unwrap()
}

/// The running item of a key, as the worker that holds it sees it.
pub async fn running_item(pool: &PgPool, key: &FunctionKey) -> Option<WorkItem> {
    let row = sqlx::query(
        "select id, kind, key, payload, attempts, max_attempts, lease_owner
         from work_items where key = $1 and state = 'running'",
    )
    .bind(key.queue_key())
    .fetch_optional(pool)
    .await
    .unwrap()?;
    Some(WorkItem {
        id: row.get("id"),
        kind: row.get("kind"),
        key: row.get("key"),
        payload: row.get("payload"),
        attempt: row.get("attempts"),
        max_attempts: row.get("max_attempts"),
        owner: row.get("lease_owner"),
        // When its worker claimed it is that process's; now is the
        // closest this one can say.
        claimed_at: std::time::Instant::now(),
    })
}

pub async fn queue_empty(pool: &PgPool) -> bool {
    queue::counts(pool).await.unwrap() == (0, 0)
}

/// Keys of the dead letters.
pub async fn dead_letters(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar("select key from work_dead order by key")
        .fetch_all(pool)
        .await
        .unwrap()
}

pub async fn checkpoint(pool: &PgPool) -> Checkpoint {
    let row = sqlx::query("select xid, position from projector_checkpoints where name = $1")
        .bind(sless_projector::NAME)
        .fetch_optional(pool)
        .await
        .unwrap();
    row.map_or(Checkpoint::default(), |r| Checkpoint {
        xid: r.get("xid"),
        position: r.get("position"),
    })
}

/// How far the projector is behind: the events past its checkpoint, and
/// the age of the oldest of them in seconds.
pub async fn projector_lag(pool: &PgPool) -> (i64, f64) {
    let at = checkpoint(pool).await;
    let row = sqlx::query(
        "select count(*) as events,
                coalesce(extract(epoch from now() - min(recorded_at)), 0)::float8 as secs
         from events where (xid, position) > ($1, $2)",
    )
    .bind(at.xid)
    .bind(at.position)
    .fetch_one(pool)
    .await
    .unwrap();
    (row.get("events"), row.get("secs"))
}

/// True when every function's read-model row equals a fold of its stream.
pub async fn read_model_matches_log(pool: &PgPool, keys: &[FunctionKey]) -> bool {
    for key in keys {
        let folded = fold(pool, key).await;
        let row = readmodel::function_row(pool, key.namespace.as_str(), key.name.as_str())
            .await
            .unwrap();
        if !row.is_some_and(|r| r.matches(&folded)) {
            return false;
        }
    }
    true
}

// ---- the checker ----

/// What the API acknowledged, and how each function should end.
#[derive(Default)]
pub struct Acked {
    /// (function, version) of every 202.
    pub uploads: Vec<(String, u32)>,
    /// Functions whose last version cannot run (user error): they end Failed.
    pub failing: BTreeSet<String>,
}

impl Acked {
    pub fn upload(&mut self, name: &str, version: u32) {
        self.uploads.push((name.to_owned(), version));
    }

    /// The last acknowledged version of each function.
    pub fn last(&self) -> BTreeMap<String, u32> {
        let mut last = BTreeMap::new();
        for (name, v) in &self.uploads {
            let e = last.entry(name.clone()).or_insert(*v);
            *e = (*e).max(*v);
        }
        last
    }
}

/// True when the function shows the final state for its last version.
pub fn settled(state: &Function, last: u32, failing: bool) -> bool {
    if failing {
        state.phase == Phase::Failed && state.failed_version == Some(last)
    } else {
        state.phase == Phase::Ready && state.deployed_version == Some(last)
    }
}

/// True when every acknowledged function has reached its final state.
pub async fn all_settled(stack: &Stack, acked: &Acked) -> bool {
    for (name, last) in acked.last() {
        let state = fold(stack.pool(), &stack.key(&name)).await;
        if !settled(&state, last, acked.failing.contains(&name)) {
            return false;
        }
    }
    true
}

/// How many of the acknowledged functions (those that are not failing on
/// purpose) answer through the endpoint the log names now, with their name
/// (`{name}`, or `{name}-v{version}` as the load's functions do).
pub async fn answering(stack: &Stack, acked: &Acked) -> (usize, usize) {
    let mut answering = 0;
    let mut total = 0;
    for name in acked.last().keys() {
        if acked.failing.contains(name) {
            continue;
        }
        total += 1;
        let endpoint = fold(stack.pool(), &stack.key(name))
            .await
            .endpoint
            .unwrap_or_default();
        let answer = stack.answer(&endpoint).await;
        if answer == *name || answer.starts_with(&format!("{name}-v")) {
            answering += 1;
        }
    }
    (answering, total)
}

/// The checker's verdict, in the terms of the FAULT line.
#[derive(Debug, Default)]
pub struct Tally {
    pub acked: usize,
    pub lost: usize,
    pub duplicated: usize,
    /// What was lost or duplicated, for the assertion message.
    pub findings: Vec<String>,
}

/// Compares the log with what was acknowledged: every acknowledged upload
/// is in the log exactly once; every function ends in its final state for
/// its last version (else that upload counts as lost); no version is
/// deployed twice (a doubled effect).
pub async fn tally(stack: &Stack, acked: &Acked) -> Tally {
    let mut t = Tally {
        acked: acked.uploads.len(),
        ..Tally::default()
    };
    let mut streams = BTreeMap::new();
    for name in acked.last().keys() {
        streams.insert(
            name.clone(),
            stream_events(stack.pool(), &stack.key(name)).await,
        );
    }
    for (name, version) in &acked.uploads {
        let n = streams[name]
            .iter()
            .filter(|e| matches!(e, FunctionEvent::FunctionUploaded(v) if v.version == *version))
            .count();
        match n {
            1 => {}
            0 => {
                t.lost += 1;
                t.findings
                    .push(format!("{name} v{version} is not in the log"));
            }
            n => {
                t.duplicated += n - 1;
                t.findings
                    .push(format!("{name} v{version} is in the log {n} times"));
            }
        }
    }
    for (name, last) in acked.last() {
        let events = &streams[&name];
        let state = Function::fold(events);
        if !settled(&state, last, acked.failing.contains(&name)) {
            t.lost += 1;
            t.findings.push(format!(
                "{name} v{last} did not settle: {:?} deployed {:?} ({:?})",
                state.phase, state.deployed_version, state.last_error
            ));
        }
        // Twice on one worker is a duplicate; on another worker, after the
        // first was gone, it is the function placed again.
        let mut deployed: BTreeMap<(u32, Option<&str>), usize> = BTreeMap::new();
        for e in events {
            if let FunctionEvent::FunctionDeployed { version, node, .. } = e {
                *deployed.entry((*version, node.as_deref())).or_default() += 1;
            }
        }
        for ((version, _), n) in deployed.into_iter().filter(|(_, n)| *n > 1) {
            t.duplicated += n - 1;
            t.findings
                .push(format!("{name} v{version} was deployed {n} times"));
        }
    }
    t
}
