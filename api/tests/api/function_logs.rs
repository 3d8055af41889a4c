//! What functions print, as the API reads it: a function's lines filtered
//! and paged, the live tail (no gap, no repeat, even begun in a burst of
//! concurrent writers), an invocation with its lines, the header that ties
//! a call to its record, bad queries, and tenancy.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::http::{Method, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::Value;
use sless_store::function_logs::{self, NewLine, Stream};
use sless_store::invocations::{self as records, id_for};
use uuid::Uuid;

use super::proxy::{Upstream, deployed};
use super::sse;
use super::support::*;

const SUB: &str = "lena@example.com";
const OTHER: &str = "mallory@example.com";
const WAIT: Duration = Duration::from_secs(10);

fn logs_uri(ns: &str, name: &str, query: &str) -> String {
    format!("/v1/namespaces/{ns}/functions/{name}/logs{query}")
}

fn line(name: &str, text: &str, invocation: Option<Uuid>, stream: Stream) -> NewLine {
    NewLine {
        at: Utc::now(),
        namespace: ns(SUB),
        function: name.to_owned(),
        version: Some(1),
        instance: "127.0.0.1:4000".into(),
        invocation,
        stream,
        line: text.to_owned(),
        truncated: false,
    }
}

async fn page(env: &Env, name: &str, query: &str) -> Answer {
    env.send(get(&logs_uri(&ns(SUB), name, query), Some(&token(SUB))))
        .await
}

fn texts(answer: &Answer) -> Vec<String> {
    answer.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["line"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_functions_lines_are_read_filtered_and_paged() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "talker").await.status, StatusCode::CREATED);
    let (a, b) = (Uuid::now_v7(), Uuid::now_v7());
    let before = Utc::now();
    function_logs::insert(
        &env.db.pool,
        &[
            line("talker", "starting", None, Stream::Stdout),
            line("talker", "a: one", Some(a), Stream::Stdout),
            line("talker", "b: one", Some(b), Stream::Stdout),
            line("talker", "a: Warning two", Some(a), Stream::Stderr),
            line("talker", "b: two", Some(b), Stream::Stdout),
        ],
    )
    .await
    .unwrap();
    // Another function's lines are not this one's.
    function_logs::insert(
        &env.db.pool,
        &[line("other", "a: elsewhere", Some(a), Stream::Stdout)],
    )
    .await
    .unwrap();
    function_logs::add_drops(&env.db.pool, &[(ns(SUB), "talker".into(), 7)])
        .await
        .unwrap();

    let all = page(&env, "talker", "").await;
    assert_eq!(all.status, StatusCode::OK, "{}", all.body);
    assert_eq!(
        texts(&all),
        ["b: two", "a: Warning two", "b: one", "a: one", "starting"],
        "newest first"
    );
    assert_eq!(all.body["dropped"], 7);
    assert_eq!(all.body["next_cursor"], Value::Null);
    let first = &all.body["items"][4];
    assert_eq!(first["stream"], "stdout");
    assert_eq!(first["invocation"], Value::Null);
    assert_eq!(first["version"], 1);
    assert_eq!(first["instance"], "127.0.0.1:4000");
    let at: DateTime<Utc> = first["at"].as_str().unwrap().parse().unwrap();
    assert!(at >= before - chrono::Duration::seconds(1), "{at}");

    let oldest = page(&env, "talker", "?order=oldest").await;
    assert_eq!(texts(&oldest)[0], "starting");
    let of_a = page(&env, "talker", &format!("?invocation={a}&order=oldest")).await;
    assert_eq!(texts(&of_a), ["a: one", "a: Warning two"]);
    assert_eq!(of_a.body["items"][0]["invocation"], a.to_string());
    let stderr = page(&env, "talker", "?stream=stderr").await;
    assert_eq!(texts(&stderr), ["a: Warning two"]);
    let found = page(&env, "talker", "?q=WARNING").await;
    assert_eq!(texts(&found), ["a: Warning two"], "ignoring case");
    let future = (Utc::now() + chrono::Duration::hours(1)).to_rfc3339();
    let none = page(&env, "talker", &format!("?since={}", enc(&future))).await;
    assert_eq!(texts(&none), Vec::<String>::new());
    let past = (before - chrono::Duration::hours(1)).to_rfc3339();
    let until_past = page(&env, "talker", &format!("?until={}", enc(&past))).await;
    assert_eq!(texts(&until_past), Vec::<String>::new());

    // Pages of two, newest first, then the same oldest first: every line
    // once, in order.
    for (order, expected) in [
        (
            "newest",
            ["b: two", "a: Warning two", "b: one", "a: one", "starting"],
        ),
        (
            "oldest",
            ["starting", "a: one", "b: one", "a: Warning two", "b: two"],
        ),
    ] {
        let mut seen = Vec::new();
        let mut query = format!("?limit=2&order={order}");
        loop {
            let p = page(&env, "talker", &query).await;
            assert_eq!(p.status, StatusCode::OK, "{}", p.body);
            seen.extend(texts(&p));
            match p.body["next_cursor"].as_str() {
                Some(c) => query = format!("?limit=2&order={order}&cursor={c}"),
                None => break,
            }
        }
        assert_eq!(seen, expected, "{order}");
    }
}

/// Percent-encodes a time's `+` and `:`.
fn enc(s: &str) -> String {
    s.replace('+', "%2B").replace(':', "%3A")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_queries_are_refused_naming_the_parameter() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "talker").await.status, StatusCode::CREATED);
    let long = "x".repeat(257);
    let cases: &[(&str, &str)] = &[
        ("?since=yesterday", "since"),
        ("?until=12", "until"),
        (
            "?since=2026-12-07T10:00:00Z&until=2026-12-07T09:00:00Z",
            "until",
        ),
        ("?invocation=nope", "invocation"),
        ("?stream=stdin", "stream"),
        ("?q=", "q"),
        (&format!("?q={long}"), "q"),
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?cursor=-4", "cursor"),
        ("?cursor=abc", "cursor"),
        ("?order=sideways", "order"),
        ("?follow=maybe", "follow"),
        ("?grep=x", "grep"),
        ("?limit=1&limit=2", "limit"),
    ];
    for (query, field) in cases {
        let answer = page(&env, "talker", query).await;
        answer.assert_problem(query, StatusCode::UNPROCESSABLE_ENTITY, "invalid-field");
        assert_eq!(answer.field(), Some(*field), "{query}: {}", answer.body);
    }
    // A Last-Event-ID that is no line id.
    let res = env
        .send(
            request(
                Method::GET,
                &logs_uri(&ns(SUB), "talker", "?follow=true"),
                Some(&token(SUB)),
            )
            .header("last-event-id", "yesterday")
            .body(axum::body::Body::empty())
            .unwrap(),
        )
        .await;
    res.assert_problem(
        "Last-Event-ID",
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_function_logs_and_invocations_are_not_found() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "talker").await.status, StatusCode::CREATED);
    let id = id_for(Utc::now());
    function_logs::insert(
        &env.db.pool,
        &[line("talker", "secret-ish", Some(id), Stream::Stdout)],
    )
    .await
    .unwrap();
    for uri in [
        logs_uri(&ns(SUB), "talker", ""),
        logs_uri(&ns(SUB), "talker", "?follow=true"),
        format!(
            "/v1/namespaces/{}/functions/talker/invocations/{id}",
            ns(SUB)
        ),
    ] {
        let answer = env.send(get(&uri, Some(&token(OTHER)))).await;
        answer.assert_problem(&uri, StatusCode::NOT_FOUND, "not-found");
        assert!(!answer.body.to_string().contains("secret-ish"));
    }
    // The owner's unknown function is 404 too, lines or not.
    let answer = page(&env, "nobody-here", "").await;
    answer.assert_problem("unknown", StatusCode::NOT_FOUND, "not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_invocation_shows_the_lines_its_call_printed_and_the_caller_gets_its_id() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    let app = env.restarted();
    // A caller's own id is replaced by the call's.
    let forged = Uuid::now_v7().to_string();
    let answer = send(
        &app,
        request(Method::GET, &format!("/fn/{}/echo/", ns(SUB)), None)
            .header("sless-invocation-id", &forged)
            .body(axum::body::Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let id = answer.headers["sless-invocation-id"]
        .to_str()
        .unwrap()
        .to_owned();
    assert_ne!(id, forged);
    assert_eq!(
        answer.body["headers"]["sless-invocation-id"], id,
        "the function got the call's id"
    );
    let uuid = Uuid::try_parse(&id).unwrap();
    let record_uri = format!("/v1/namespaces/{}/functions/echo/invocations/{id}", ns(SUB));
    sless_testkit::eventually("the record", WAIT, || async {
        (env.send(get(&record_uri, Some(&token(SUB)))).await.status == StatusCode::OK).then_some(())
    })
    .await;
    function_logs::insert(
        &env.db.pool,
        &[
            line("echo", "before any call", None, Stream::Stdout),
            line(
                "echo",
                "Traceback (most recent call last):",
                Some(uuid),
                Stream::Stderr,
            ),
            line(
                "echo",
                "another call's",
                Some(Uuid::now_v7()),
                Stream::Stdout,
            ),
            line("echo", "ValueError: boom", Some(uuid), Stream::Stderr),
        ],
    )
    .await
    .unwrap();
    let one = env.send(get(&record_uri, Some(&token(SUB)))).await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.body);
    assert_eq!(one.body["id"], id);
    assert_eq!(one.body["status"], 200);
    let lines: Vec<&str> = one.body["lines"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["line"].as_str().unwrap())
        .collect();
    assert_eq!(
        lines,
        ["Traceback (most recent call last):", "ValueError: boom"]
    );
    assert_eq!(one.body["more_lines"], false);
    // Not a record of this function: 404.
    for missing in [Uuid::now_v7().to_string(), "not-an-id".to_owned()] {
        let uri = format!(
            "/v1/namespaces/{}/functions/echo/invocations/{missing}",
            ns(SUB)
        );
        let answer = env.send(get(&uri, Some(&token(SUB)))).await;
        answer.assert_problem(&missing, StatusCode::NOT_FOUND, "not-found");
    }
    // The store's own read of one record names the function too.
    assert!(
        records::one(&env.db.pool, &ns(SUB), "other", uuid)
            .await
            .unwrap()
            .is_none()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tail_begun_in_a_burst_of_concurrent_writers_misses_and_repeats_nothing() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "burst").await.status, StatusCode::CREATED);
    const WRITERS: usize = 4;
    const BATCHES: usize = 60;
    const PER_BATCH: usize = 25;
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let pool = env.db.pool.clone();
            tokio::spawn(async move {
                for b in 0..BATCHES {
                    let lines: Vec<NewLine> = (0..PER_BATCH)
                        .map(|i| line("burst", &format!("w{w} b{b} l{i}"), None, Stream::Stdout))
                        .collect();
                    function_logs::insert(&pool, &lines).await.unwrap();
                }
            })
        })
        .collect();
    // Midway: a page, newest first, and a tail from its newest line.
    let start = sless_testkit::eventually("lines written", WAIT, || async {
        let p = page(&env, "burst", "?limit=1").await;
        p.body["items"][0]["id"].as_i64().filter(|id| *id > 200)
    })
    .await;
    let mut tail = sse::Stream::open(
        &env.app,
        &logs_uri(&ns(SUB), "burst", &format!("?follow=true&cursor={start}")),
        SUB,
        None,
    )
    .await;
    for w in writers {
        w.await.unwrap();
    }
    let expected: Vec<i64> = sqlx::query_scalar(
        "select id from function_logs where function = 'burst' and id > $1 order by id",
    )
    .bind(start)
    .fetch_all(&env.db.pool)
    .await
    .unwrap();
    assert!(!expected.is_empty());
    let mut got = Vec::new();
    while got.len() < expected.len() {
        let m = tail.next().await.expect("the tail goes on");
        assert_eq!(m.event.as_deref(), Some("line"));
        let data: Value = serde_json::from_str(m.data.as_deref().unwrap()).unwrap();
        let id = data["id"].as_i64().unwrap();
        assert_eq!(m.id.as_deref(), Some(id.to_string().as_str()));
        got.push(id);
    }
    assert_eq!(got, expected, "every line after the start, once, in order");
    let distinct: BTreeSet<i64> = got.iter().copied().collect();
    assert_eq!(distinct.len(), got.len());
    // What comes next is the next line written, not a repeat.
    function_logs::insert(
        &env.db.pool,
        &[line("burst", "the last", None, Stream::Stdout)],
    )
    .await
    .unwrap();
    let m = tail.next().await.expect("the tail goes on");
    let data: Value = serde_json::from_str(m.data.as_deref().unwrap()).unwrap();
    assert_eq!(data["line"], "the last");
}
