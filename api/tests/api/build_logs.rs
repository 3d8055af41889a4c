//! A version's build log, `GET .../versions/{v}/build-log`: plain and
//! followed, while the build runs and after, and only for its owner. The
//! tests write the log as a worker does (`sless_store::build_logs` and the
//! object in S3).

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use serde_json::Value;
use sless_api::{AppState, Auth};
use sless_store::blobs;
use sless_store::build_logs::{self, End, Outcome};
use tower::ServiceExt;
use uuid::Uuid;

use super::sse;
use super::support::*;

const ALICE: &str = "alice";
const BOB: &str = "bob";

fn log_uri(sub: &str, name: &str, version: &str) -> String {
    format!(
        "{}/versions/{version}/build-log",
        function_uri(&ns(sub), name)
    )
}

/// A function of ALICE's with `n` versions uploaded.
async fn function_with_versions(env: &Env, name: &str, n: usize) {
    assert_eq!(env.create(ALICE, name).await.status, StatusCode::CREATED);
    for i in 0..n {
        let up = env
            .upload(ALICE, name, &handler_zip(&format!("v{i}")))
            .await;
        assert_eq!(up.status, StatusCode::ACCEPTED, "{:?}", up.body);
    }
}

/// A build of `version` as a worker runs it: started, `lines` written as
/// one chunk each, not ended.
struct Build {
    ns: String,
    name: String,
    version: u32,
    attempt: Uuid,
    seq: i32,
    text: String,
}

impl Build {
    async fn start(env: &Env, name: &str, version: u32) -> Build {
        let attempt = Uuid::now_v7();
        let ns = ns(ALICE);
        build_logs::start(&env.db.pool, &ns, name, version, attempt)
            .await
            .unwrap();
        Build {
            ns,
            name: name.to_owned(),
            version,
            attempt,
            seq: 0,
            text: String::new(),
        }
    }

    async fn print(&mut self, env: &Env, text: &str) {
        self.seq += 1;
        let written = build_logs::append(
            &env.db.pool,
            &self.ns,
            &self.name,
            self.version,
            self.attempt,
            self.seq,
            text,
        )
        .await
        .unwrap();
        assert!(written);
        self.text.push_str(text);
    }

    /// Ends it: the last text and the whole log stored, then the end.
    async fn end(mut self, env: &Env, last: &str, error: Option<&str>) {
        if !last.is_empty() {
            self.print(env, last).await;
        }
        let key = blobs::build_log_key(&self.ns, &self.name, self.version);
        env.s3
            .blobs()
            .put(&key, self.text.clone().into_bytes(), "text/plain")
            .await
            .unwrap();
        let end = End {
            outcome: if error.is_some() {
                Outcome::Failed
            } else {
                Outcome::Succeeded
            },
            error: error.map(str::to_owned),
        };
        let ok = build_logs::finish(
            &env.db.pool,
            &self.ns,
            &self.name,
            self.version,
            self.attempt,
            &end,
            true,
        )
        .await
        .unwrap();
        assert!(ok);
    }
}

/// One message of a followed log.
#[derive(Debug, Clone, PartialEq)]
struct Message {
    id: Option<String>,
    event: String,
    data: String,
}

/// A followed log, read on a task of its own as a client reads it.
struct Follow(sse::Stream);

impl Follow {
    async fn open(env: &Env, uri: &str, last_event_id: Option<&str>) -> Follow {
        Follow(sse::Stream::open(&env.app, uri, ALICE, last_event_id).await)
    }

    /// The next message, None once the stream ended.
    /// Messages without an event (an id alone) are skipped.
    async fn next(&mut self) -> Option<Message> {
        loop {
            let m = self.0.next().await?;
            if let Some(event) = m.event {
                return Some(Message {
                    id: m.id,
                    event,
                    data: m.data.unwrap_or_default(),
                });
            }
        }
    }

    /// The data of the next `n` lines.
    async fn lines(&mut self, n: usize) -> Vec<String> {
        let mut lines = Vec::new();
        while lines.len() < n {
            let m = self.next().await.expect("more lines");
            assert_eq!(m.event, "line", "{m:?}");
            lines.push(m.data);
        }
        lines
    }

    /// Everything until the stream ends: the lines and the end's data.
    async fn rest(&mut self) -> (Vec<Message>, Value) {
        let mut lines = Vec::new();
        loop {
            let m = self.next().await.expect("an end before the stream ends");
            if m.event == "end" {
                assert!(self.next().await.is_none(), "the stream ends after its end");
                return (lines, serde_json::from_str(&m.data).unwrap());
            }
            assert_eq!(m.event, "line", "{m:?}");
            lines.push(m);
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_log_is_the_lines_so_far_then_the_stored_log() {
    let env = Env::new().await;
    function_with_versions(&env, "app", 1).await;
    let uri = log_uri(ALICE, "app", "1");

    let mut build = Build::start(&env, "app", 1).await;
    build.print(&env, "Collecting six\n").await;
    let running = env.send(get(&uri, Some(&token(ALICE)))).await;
    assert_eq!(running.status, StatusCode::OK);
    assert_eq!(running.content_type(), "text/plain; charset=utf-8");
    assert_eq!(running.headers["sless-build-state"], "running");
    assert_eq!(running.body, "Collecting six\n");

    build
        .end(
            &env,
            "ERROR: No matching distribution found for nosuchpkg\n",
            Some("pip install failed"),
        )
        .await;
    let ended = env.send(get(&uri, Some(&token(ALICE)))).await;
    assert_eq!(ended.status, StatusCode::OK);
    assert_eq!(ended.headers["sless-build-state"], "failed");
    assert_eq!(
        ended.body,
        "Collecting six\nERROR: No matching distribution found for nosuchpkg\n"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_followed_log_sends_each_line_as_it_is_printed_and_ends_with_the_build() {
    let env = Env::new().await;
    function_with_versions(&env, "app", 1).await;
    let uri = log_uri(ALICE, "app", "1");
    // Followed before the build started: it waits for it.
    let mut follow = Follow::open(&env, &format!("{uri}?follow=true"), None).await;

    let mut build = Build::start(&env, "app", 1).await;
    build
        .print(&env, "Collecting six\nDownloading six.whl\n")
        .await;
    assert_eq!(
        follow.lines(2).await,
        ["Collecting six", "Downloading six.whl"]
    );
    // A progress bar's redraws show as the last one; a line printed in
    // two pieces arrives whole.
    build.print(&env, " 10%\r100%\r\nInstall").await;
    assert_eq!(follow.lines(1).await, ["100%"]);
    build.print(&env, "ing six\n").await;
    assert_eq!(follow.lines(1).await, ["Installing six"]);

    build.end(&env, "sless: build complete", None).await;
    let (lines, end) = follow.rest().await;
    let lines: Vec<_> = lines.iter().map(|m| m.data.as_str()).collect();
    assert_eq!(lines, ["sless: build complete"]);
    assert_eq!(end["outcome"], "succeeded");
    assert_eq!(end["error"], Value::Null);

    // Followed after the end (with Accept, no parameter): all of it at once.
    let req = request(Method::GET, &uri, Some(&token(ALICE)))
        .header("accept", "text/event-stream")
        .body(Body::empty())
        .unwrap();
    let res = env.app.clone().oneshot(req).await.unwrap();
    let mut after = Follow(sse::Stream::read(res));
    let (lines, end) = after.rest().await;
    let lines: Vec<_> = lines.iter().map(|m| m.data.as_str()).collect();
    assert_eq!(
        lines,
        [
            "Collecting six",
            "Downloading six.whl",
            "100%",
            "Installing six",
            "sless: build complete"
        ]
    );
    assert_eq!(end["outcome"], "succeeded");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_resumes_after_its_last_line_and_sees_a_retry_start_over() {
    let env = Env::new().await;
    function_with_versions(&env, "app", 1).await;
    let uri = format!("{}?follow=true", log_uri(ALICE, "app", "1"));
    let mut build = Build::start(&env, "app", 1).await;
    build.print(&env, "one\ntwo\nthree\n").await;

    let mut first = Follow::open(&env, &uri, None).await;
    let lines = first.lines(2).await;
    assert_eq!(lines, ["one", "two"]);
    drop(first);
    // The id of line 2, as a reconnecting EventSource sends it.
    let id = format!("{}.2", build.attempt);
    let mut again = Follow::open(&env, &uri, Some(&id)).await;
    let m = again.next().await.unwrap();
    assert_eq!((m.event.as_str(), m.data.as_str()), ("line", "three"));
    assert_eq!(m.id, Some(format!("{}.3", build.attempt)));

    // The worker died; another attempt starts the build again.
    let mut retry = Build::start(&env, "app", 1).await;
    retry.print(&env, "again\n").await;
    let lines = again.lines(2).await;
    assert_eq!(
        lines,
        ["sless: the build started again; its log follows", "again"]
    );
    retry.end(&env, "", Some("the build failed")).await;
    let (lines, end) = again.rest().await;
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!(end["outcome"], "failed");
    assert_eq!(end["error"], "the build failed");

    // The plain log is the retry's.
    let plain = env
        .send(get(&log_uri(ALICE, "app", "1"), Some(&token(ALICE))))
        .await;
    assert_eq!(plain.body, "again\n");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_log_that_cannot_be_served_is_a_problem_and_another_tenants_is_not_found() {
    let env = Env::new().await;
    function_with_versions(&env, "app", 2).await;
    // Version 2 is current and built; version 1 was superseded unbuilt.
    Build::start(&env, "app", 2)
        .await
        .end(&env, "built\n", None)
        .await;
    let ok = env
        .send(get(&log_uri(ALICE, "app", "2"), Some(&token(ALICE))))
        .await;
    assert_eq!(ok.status, StatusCode::OK, "{:?}", ok.body);

    let cases: &[(&str, String, Option<String>, StatusCode, &str)] = &[
        (
            "another tenant's",
            log_uri(ALICE, "app", "2"),
            Some(token(BOB)),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "another tenant asking in its own namespace",
            log_uri(BOB, "app", "2"),
            Some(token(BOB)),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "no token",
            log_uri(ALICE, "app", "2"),
            None,
            StatusCode::UNAUTHORIZED,
            "unauthorized",
        ),
        (
            "no such function",
            log_uri(ALICE, "nope", "1"),
            Some(token(ALICE)),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "no such version",
            log_uri(ALICE, "app", "9"),
            Some(token(ALICE)),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "a version that is not a number",
            log_uri(ALICE, "app", "two"),
            Some(token(ALICE)),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "version 0",
            log_uri(ALICE, "app", "0"),
            Some(token(ALICE)),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "a version never built",
            log_uri(ALICE, "app", "1"),
            Some(token(ALICE)),
            StatusCode::NOT_FOUND,
            "not-found",
        ),
        (
            "follow that is not a boolean",
            format!("{}?follow=yes", log_uri(ALICE, "app", "2")),
            Some(token(ALICE)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-field",
        ),
        (
            "an unknown parameter",
            format!("{}?tail=10", log_uri(ALICE, "app", "2")),
            Some(token(ALICE)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-field",
        ),
        (
            "follow twice",
            format!("{}?follow=true&follow=true", log_uri(ALICE, "app", "2")),
            Some(token(ALICE)),
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-field",
        ),
    ];
    let before = env.counts().await;
    for (what, uri, token, status, kind) in cases {
        let answer = env.send(get(uri, token.as_deref())).await;
        answer.assert_problem(what, *status, kind);
    }
    // A resume id this API never sent.
    let req = request(
        Method::GET,
        &format!("{}?follow=true", log_uri(ALICE, "app", "2")),
        Some(&token(ALICE)),
    )
    .header("last-event-id", "12")
    .body(Body::empty())
    .unwrap();
    let answer = env.send(req).await;
    answer.assert_problem(
        "a bad Last-Event-ID",
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
    );
    assert_eq!(answer.field(), Some("Last-Event-ID"));
    assert_eq!(env.counts().await, before, "reading writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_of_a_version_that_is_superseded_before_its_build_is_told_so() {
    let env = Env::new().await;
    function_with_versions(&env, "app", 1).await;
    let uri = format!("{}?follow=true", log_uri(ALICE, "app", "1"));
    let mut follow = Follow::open(&env, &uri, None).await;
    // A second upload before any build of the first: version 1 is never built.
    let up = env.upload(ALICE, "app", &handler_zip("v2")).await;
    assert_eq!(up.status, StatusCode::ACCEPTED);
    let (lines, end) = follow.rest().await;
    assert!(lines.is_empty(), "{lines:?}");
    assert_eq!(end["outcome"], "failed");
    let error = end["error"].as_str().unwrap();
    assert!(error.contains("never built"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_follower_is_counted_in_the_metrics_while_it_follows() {
    let env = Env::new().await;
    function_with_versions(&env, "app", 1).await;
    // A registry of this test's own: the process's is every test's.
    let metrics = Arc::new(sless_telemetry::Metrics::default());
    let mut state = AppState::new(
        env.db.pool.clone(),
        env.s3.blobs(),
        Auth::hs256(SECRET, None, None),
    );
    state.metrics = metrics.clone();
    let app = both_origins(state);
    let followers = || metrics.build_log_followers.get();
    let uri = log_uri(ALICE, "app", "1");
    let mut build = Build::start(&env, "app", 1).await;
    build.print(&env, "one\n").await;

    // A plain read follows nothing.
    let plain = send(&app, get(&uri, Some(&token(ALICE)))).await;
    assert_eq!(plain.status, StatusCode::OK);
    assert_eq!(followers(), 0);
    // Followed with the parameter, and with Accept.
    let by_query = format!("{uri}?follow=true");
    let mut by_query = Follow(sse::Stream::open(&app, &by_query, ALICE, None).await);
    assert_eq!(by_query.lines(1).await, ["one"]);
    let req = request(Method::GET, &uri, Some(&token(ALICE)))
        .header("accept", "text/event-stream")
        .body(Body::empty())
        .unwrap();
    let mut by_accept = Follow(sse::Stream::read(app.clone().oneshot(req).await.unwrap()));
    assert_eq!(by_accept.lines(1).await, ["one"]);
    assert_eq!(followers(), 2);
    assert_eq!(
        metrics.audit_followers.get(),
        0,
        "the audit log's are apart"
    );

    // A client that goes away is counted no more.
    drop(by_query);
    let left = || async { (followers() == 1).then_some(()) };
    sless_testkit::eventually("the client gone", Duration::from_secs(10), left).await;
    // Nor one whose build ended, once it has the end.
    build.end(&env, "", None).await;
    let (_, end) = by_accept.rest().await;
    assert_eq!(end["outcome"], "succeeded");
    assert_eq!(followers(), 0);
}
