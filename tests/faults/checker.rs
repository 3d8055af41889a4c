//! A checker in the style of Jepsen's queue checker, for the commands the
//! fault scenarios send to the API.
//!
//! Every command is sent with its own `Idempotency-Key`, and its outcome is
//! recorded: *acked* (2xx), *rejected* (4xx) or *indeterminate* (a timeout,
//! a reset or closed connection, a 5xx). Indeterminate commands are retried
//! with the same key once the fault has healed. Then every command is looked
//! up in the event log (`events`) and the read models (`functions`,
//! `function_versions`) by what makes it unique (a create by its function's
//! name, an upload by its zip's sha256):
//! - a command acked (at first or on a retry) is there exactly once, in the
//!   log and in the read model, at the position its answer gave, and every
//!   answer to its key was the same;
//! - a command still indeterminate after its retries is absent or there once;
//! - a rejected command is absent.
//!
//! Anything missing counts as *lost*, anything there twice as *duplicated*.
#![allow(dead_code)]

use std::io::Write;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use sqlx::PgPool;

/// What a command asks for, and so how to find its effect.
#[derive(Debug, Clone)]
pub enum Effect {
    /// `FunctionCreated` on the function's stream; its row in `functions`.
    Create { namespace: String, name: String },
    /// `FunctionUploaded` of this zip (by sha256) on the function's stream;
    /// its row in `function_versions`.
    Upload { namespace: String, name: String },
}

impl Effect {
    fn stream(&self) -> String {
        match self {
            Effect::Create { namespace, name } | Effect::Upload { namespace, name } => {
                format!("function/{namespace}/{name}")
            }
        }
    }
}

/// A command's request, kept to send it again with the same key.
#[derive(Debug, Clone)]
pub struct Request {
    /// Path and query, e.g. `/v1/namespaces/ns/functions`.
    pub path: String,
    pub content_type: &'static str,
    pub body: Vec<u8>,
}

/// How one attempt of a command ended, as its client saw it.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    Acked {
        status: u16,
        body: serde_json::Value,
    },
    Rejected {
        status: u16,
        body: serde_json::Value,
    },
    Indeterminate {
        why: String,
    },
}

impl Outcome {
    pub fn is_acked(&self) -> bool {
        matches!(self, Outcome::Acked { .. })
    }

    pub fn is_indeterminate(&self) -> bool {
        matches!(self, Outcome::Indeterminate { .. })
    }

    /// The HTTP status, if an answer came.
    pub fn status(&self) -> Option<u16> {
        match self {
            Outcome::Acked { status, .. } | Outcome::Rejected { status, .. } => Some(*status),
            Outcome::Indeterminate { why } => why
                .strip_prefix("HTTP ")
                .and_then(|s| s.get(..3))
                .and_then(|s| s.parse().ok()),
        }
    }
}

/// One command and everything that happened to it.
#[derive(Debug, Clone)]
pub struct Op {
    pub key: String,
    pub effect: Effect,
    pub request: Request,
    /// When the first attempt was sent.
    pub sent_at: Instant,
    /// How long the first attempt took to end.
    pub latency: Duration,
    pub first: Outcome,
    /// Later attempts with the same key, in order.
    pub retries: Vec<Outcome>,
}

impl Op {
    pub fn last(&self) -> &Outcome {
        self.retries.last().unwrap_or(&self.first)
    }

    fn acks(&self) -> impl Iterator<Item = (u16, &serde_json::Value)> {
        std::iter::once(&self.first)
            .chain(&self.retries)
            .filter_map(|o| match o {
                Outcome::Acked { status, body } => Some((*status, body)),
                _ => None,
            })
    }
}

/// Sends commands to one API as one user, and remembers every one.
#[derive(Clone)]
pub struct Checker {
    base: Arc<Mutex<String>>,
    token: String,
    /// The token's subject: idempotency keys are kept per actor.
    pub actor: String,
    pub namespace: String,
    http: reqwest::Client,
    ops: Arc<Mutex<Vec<Op>>>,
}

/// What the check found; the fault line prints it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counts {
    /// By the first attempt's outcome.
    pub acked: usize,
    pub rejected: usize,
    pub indeterminate: usize,
    /// Indeterminate at first, then acked by a retry with the same key.
    pub recovered: usize,
    /// Acked but missing from the log or the read model.
    pub lost: usize,
    /// There more than once.
    pub duplicated: usize,
    /// Rejected but there anyway.
    pub unexpected: usize,
    /// Acked with an answer that does not match the log (its position), or
    /// answered differently by two attempts with the same key.
    pub mismatched: usize,
}

impl Checker {
    /// `timeout` bounds each attempt on the client side: past it, the
    /// attempt is indeterminate.
    pub fn new(
        base_url: &str,
        token: &str,
        actor: &str,
        namespace: &str,
        timeout: Duration,
    ) -> Self {
        Checker {
            base: Arc::new(Mutex::new(base_url.to_owned())),
            token: token.to_owned(),
            actor: actor.to_owned(),
            namespace: namespace.to_owned(),
            http: reqwest::Client::builder()
                .timeout(timeout)
                .build()
                .expect("an HTTP client"),
            ops: Arc::default(),
        }
    }

    /// Points later attempts at another address (an API restarted elsewhere).
    pub fn set_base(&self, base_url: &str) {
        *self.base.lock().unwrap() = base_url.to_owned();
    }

    pub fn create(&self, name: &str) -> (Effect, Request) {
        let body = serde_json::json!({
            "name": name, "runtime": "python3.11", "entrypoint": "handler.handle",
        });
        (
            Effect::Create {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
            },
            Request {
                path: format!("/v1/namespaces/{}/functions", self.namespace),
                content_type: "application/json",
                body: serde_json::to_vec(&body).unwrap(),
            },
        )
    }

    /// An upload of `zip`; make each zip unique (its sha256 identifies it).
    pub fn upload(&self, name: &str, zip: Vec<u8>) -> (Effect, Request) {
        (
            Effect::Upload {
                namespace: self.namespace.clone(),
                name: name.to_owned(),
            },
            Request {
                path: format!("/v1/namespaces/{}/functions/{name}/upload", self.namespace),
                content_type: "application/zip",
                body: zip,
            },
        )
    }

    /// Sends one attempt with `key`; how it ended and how long it took.
    pub async fn attempt(&self, key: &str, req: &Request) -> (Outcome, Duration) {
        let url = format!("{}{}", self.base.lock().unwrap(), req.path);
        let started = Instant::now();
        let sent = self
            .http
            .post(url)
            .bearer_auth(&self.token)
            .header("idempotency-key", key)
            .header("content-type", req.content_type)
            .body(req.body.clone())
            .send()
            .await;
        let outcome = match sent {
            Err(e) => Outcome::Indeterminate {
                why: error_chain(&e),
            },
            Ok(res) => {
                let status = res.status().as_u16();
                let header = |name: &str| {
                    res.headers()
                        .get(name)
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or("-")
                        .to_owned()
                };
                let (content_type, retry_after) = (header("content-type"), header("retry-after"));
                match res.bytes().await {
                    Err(e) => Outcome::Indeterminate {
                        why: format!("HTTP {status}, body cut: {}", error_chain(&e)),
                    },
                    Ok(bytes) => {
                        let body = serde_json::from_slice(&bytes).unwrap_or_else(|_| {
                            serde_json::Value::String(String::from_utf8_lossy(&bytes).into())
                        });
                        match status {
                            200..=299 => Outcome::Acked { status, body },
                            400..=499 => Outcome::Rejected { status, body },
                            _ => Outcome::Indeterminate {
                                why: format!(
                                    "HTTP {status} {content_type} retry-after={retry_after} {body}"
                                ),
                            },
                        }
                    }
                }
            }
        };
        (outcome, started.elapsed())
    }

    /// Sends a new command (a fresh key) and records it.
    pub async fn send(&self, (effect, request): (Effect, Request)) -> Op {
        let key = uuid::Uuid::new_v4().to_string();
        let sent_at = Instant::now();
        let (first, latency) = self.attempt(&key, &request).await;
        let op = Op {
            key,
            effect,
            request,
            sent_at,
            latency,
            first,
            retries: Vec::new(),
        };
        self.ops.lock().unwrap().push(op.clone());
        op
    }

    /// Retries every command whose last attempt was indeterminate, with its
    /// own key, up to `attempts` times each (a pause between), until it is
    /// acked or rejected. Call once the fault has healed.
    pub async fn retry_indeterminate(&self, attempts: usize) {
        let pending: Vec<usize> = {
            let ops = self.ops.lock().unwrap();
            (0..ops.len())
                .filter(|&i| ops[i].last().is_indeterminate())
                .collect()
        };
        for i in pending {
            let (key, request) = {
                let ops = self.ops.lock().unwrap();
                (ops[i].key.clone(), ops[i].request.clone())
            };
            for n in 0..attempts {
                if n > 0 {
                    tokio::time::sleep(Duration::from_millis(500)).await;
                }
                let (outcome, _) = self.attempt(&key, &request).await;
                let done = !outcome.is_indeterminate();
                self.ops.lock().unwrap()[i].retries.push(outcome);
                if done {
                    break;
                }
            }
        }
    }

    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }

    /// Checks every recorded command against the log and the read models,
    /// once the projector has applied every event in the log.
    pub async fn check(&self, pool: &PgPool) -> Counts {
        wait_projected(pool).await;
        let mut c = Counts::default();
        for op in self.ops() {
            match &op.first {
                Outcome::Acked { .. } => c.acked += 1,
                Outcome::Rejected { .. } => c.rejected += 1,
                Outcome::Indeterminate { .. } => {
                    c.indeterminate += 1;
                    if op.last().is_acked() {
                        c.recovered += 1;
                    }
                }
            }
            let (logged, position, modelled) = find(pool, &op).await;
            let problem = match op.last() {
                Outcome::Acked { .. } if logged == 0 || modelled == 0 => Some("lost"),
                Outcome::Rejected { .. } if logged > 0 || modelled > 0 => Some("unexpected"),
                _ if logged > 1 || modelled > 1 => Some("duplicated"),
                _ => None,
            };
            match problem {
                Some("lost") => c.lost += 1,
                Some("unexpected") => c.unexpected += 1,
                Some(_) => c.duplicated += 1,
                None => {}
            }
            if let Some(p) = problem {
                eprintln!(
                    "checker: {p}: {:?} key {} log={logged} model={modelled} first={:?} retries={:?}",
                    op.effect, op.key, op.first, op.retries
                );
            }
            let mut acks = op.acks();
            if let Some(first_ack) = acks.next() {
                let same_answers = acks.all(|a| a == first_ack);
                let at = first_ack.1.get("position").and_then(|p| p.as_i64());
                let stored = stored_answer(pool, &self.actor, &op.key).await;
                let stored_same = stored
                    .as_ref()
                    .is_some_and(|(s, b)| *s == first_ack.0 && b == first_ack.1);
                if !same_answers || at != position || !stored_same {
                    c.mismatched += 1;
                    eprintln!(
                        "checker: mismatched answers for {:?} key {}: acks {:?}, log position {position:?}, stored {stored:?}",
                        op.effect,
                        op.key,
                        op.acks().collect::<Vec<_>>()
                    );
                }
            }
        }
        c
    }
}

/// The error and its sources, e.g. "error sending request: connection closed".
fn error_chain(e: &dyn std::error::Error) -> String {
    let mut s = e.to_string();
    let mut source = e.source();
    while let Some(inner) = source {
        s.push_str(": ");
        s.push_str(&inner.to_string());
        source = inner.source();
    }
    s
}

/// How often the command's effect is in the log (and the position of the
/// first), and in the read model.
async fn find(pool: &PgPool, op: &Op) -> (i64, Option<i64>, i64) {
    let stream = op.effect.stream();
    match &op.effect {
        Effect::Create { namespace, name } => {
            let (logged, position): (i64, Option<i64>) = sqlx::query_as(
                "select count(*), min(position) from events
                 where stream = $1 and type = 'FunctionCreated'",
            )
            .bind(&stream)
            .fetch_one(pool)
            .await
            .unwrap();
            let modelled: i64 = sqlx::query_scalar(
                "select count(*) from functions where namespace = $1 and name = $2",
            )
            .bind(namespace)
            .bind(name)
            .fetch_one(pool)
            .await
            .unwrap();
            (logged, position, modelled)
        }
        Effect::Upload { namespace, name } => {
            let sha: String = sqlx::query_scalar("select encode(sha256($1), 'hex')")
                .bind(&op.request.body)
                .fetch_one(pool)
                .await
                .unwrap();
            let (logged, position): (i64, Option<i64>) = sqlx::query_as(
                "select count(*), min(position) from events
                 where stream = $1 and type = 'FunctionUploaded' and data->>'sha256' = $2",
            )
            .bind(&stream)
            .bind(&sha)
            .fetch_one(pool)
            .await
            .unwrap();
            let modelled: i64 = sqlx::query_scalar(
                "select count(*) from function_versions
                 where namespace = $1 and name = $2 and sha256 = $3",
            )
            .bind(namespace)
            .bind(name)
            .bind(&sha)
            .fetch_one(pool)
            .await
            .unwrap();
            (logged, position, modelled)
        }
    }
}

/// The answer kept for an idempotency key.
async fn stored_answer(pool: &PgPool, actor: &str, key: &str) -> Option<(u16, serde_json::Value)> {
    let row: Option<(i16, serde_json::Value)> = sqlx::query_as(
        "select status, response from idempotency_keys where actor = $1 and key = $2",
    )
    .bind(actor)
    .bind(key)
    .fetch_optional(pool)
    .await
    .unwrap();
    row.map(|(s, b)| (s as u16, b))
}

/// Waits (up to 60 s) until the projector has applied every event in the log.
pub async fn wait_projected(pool: &PgPool) {
    sless_testkit::eventually(
        "the projector to apply every event",
        Duration::from_secs(60),
        || async {
            let behind: bool = sqlx::query_scalar(
                "select exists (
                     select 1 from events e
                     where not exists (
                         select 1 from projector_checkpoints c
                         where c.name = $1 and (e.xid, e.position) <= (c.xid, c.position)))",
            )
            .bind(sless_projector::NAME)
            .fetch_one(pool)
            .await
            .ok()?;
            (!behind).then_some(())
        },
    )
    .await
}

impl Counts {
    /// Counts an effect that must have happened exactly once (e.g. one
    /// `FunctionDeployed` per version): none is lost, more is duplicated.
    pub fn expect_once(&mut self, what: &str, n: i64) {
        if n == 0 {
            self.lost += 1;
            eprintln!("checker: lost: {what} happened 0 times");
        } else if n > 1 {
            self.duplicated += 1;
            eprintln!("checker: duplicated: {what} happened {n} times");
        }
    }

    /// Prints the scenario's one line to stderr (libtest does not capture
    /// it), then asserts nothing was lost, duplicated, unexpected or
    /// mismatched. `extra` is appended as more `key=value` fields.
    pub fn report(&self, scenario: &str, load: &str, faults: &str, extra: &str) {
        let line = format!(
            "FAULT {scenario} load={load} faults={faults} acked={} rejected={} indeterminate={} lost={} duplicated={} recovered={} unexpected={} mismatched={}{}{extra}",
            self.acked,
            self.rejected,
            self.indeterminate,
            self.lost,
            self.duplicated,
            self.recovered,
            self.unexpected,
            self.mismatched,
            if extra.is_empty() { "" } else { " " },
        );
        let _ = writeln!(std::io::stderr(), "{line}");
        assert_eq!(self.lost, 0, "{line}");
        assert_eq!(self.duplicated, 0, "{line}");
        assert_eq!(self.unexpected, 0, "{line}");
        assert_eq!(self.mismatched, 0, "{line}");
    }
}
