//! Invocation records: what a call through the proxy leaves behind, paging
//! through them, retention, the writer's batching and its full queue, and
//! the `X-Request-Id` of every answer.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sless_api::plumbing::recorder::{Recorder, RecorderConfig, Retention};
use sless_api::proxy::Endpoints;
use sless_store::invocations::{self as store, Invocation, id_for};

use super::proxy::{Upstream, app_with, deployed, point_at, records};
use super::support::*;

const SUB: &str = "ivan@example.com";
const OTHER: &str = "mallory@example.com";
const WAIT: Duration = Duration::from_secs(10);

fn invocations_uri(ns: &str, name: &str, query: &str) -> String {
    format!("/v1/namespaces/{ns}/functions/{name}/invocations{query}")
}

/// Now, to the microsecond (as the database keeps times).
fn now_us() -> DateTime<Utc> {
    DateTime::from_timestamp_micros(Utc::now().timestamp_micros()).unwrap()
}

/// One page of `name`'s records, as its owner sees it.
async fn page(env: &Env, name: &str, query: &str) -> Answer {
    env.send(get(
        &invocations_uri(&ns(SUB), name, query),
        Some(&token(SUB)),
    ))
    .await
}

/// Waits until `name` has `n` records, and returns them newest first.
async fn wait_for_records(env: &Env, name: &str, n: usize) -> Vec<Value> {
    sless_testkit::eventually(&format!("{n} records of {name}"), WAIT, || async move {
        let answer = page(env, name, "?limit=1000").await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let items = answer.body["items"].as_array().unwrap().clone();
        (items.len() >= n).then_some(items)
    })
    .await
}

/// A record of `name` in `SUB`'s namespace that started at `at`.
fn record_at(name: &str, at: DateTime<Utc>, status: u16) -> Invocation {
    Invocation {
        id: id_for(at),
        namespace: ns(SUB),
        function: name.to_owned(),
        version: Some(1),
        started_at: at,
        duration: Duration::from_millis(3),
        status,
        bytes_in: 0,
        bytes_out: 2,
        cold: false,
        error: None,
        error_kind: None,
        request_id: format!("req-{}", at.timestamp_micros()),
        origin: "http".into(),
        run: None,
        method: Some("GET".into()),
        path: Some("/".into()),
        activation: None,
        instance_start: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_leaves_a_record_of_what_it_did() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    // No memory of endpoints: each call reads where the function runs.
    let app = app_with(&env, |s| {
        s.endpoints = Arc::new(Endpoints::new(Duration::ZERO));
    });
    let path = format!("/fn/{}/echo/some/where", ns(SUB));
    let before = now_us();

    let first = send(
        &app,
        request(Method::POST, &path, None)
            .header("x-request-id", "call-one")
            .body(Body::from("12345"))
            .unwrap(),
    )
    .await;
    assert_eq!(first.status, StatusCode::OK, "{}", first.body);
    let first_len: u64 = first.headers["content-length"]
        .to_str()
        .unwrap()
        .parse()
        .unwrap();
    let items = wait_for_records(&env, "echo", 1).await;
    let r = &items[0];
    assert_eq!(r["namespace"], ns(SUB));
    assert_eq!(r["function"], "echo");
    assert_eq!(r["version"], 1);
    assert_eq!(r["status"], 200);
    assert_eq!(r["bytes_in"], 5);
    assert_eq!(r["bytes_out"], first_len);
    assert_eq!(r["cold"], true, "the first call to the endpoint");
    assert_eq!(r["error"], Value::Null);
    assert_eq!(r["request_id"], "call-one");
    assert_eq!(r["origin"], "http", "a call through the proxy");
    assert_eq!(r["run"], Value::Null);
    assert_eq!(
        (r["method"].as_str(), r["path"].as_str()),
        (Some("POST"), Some("/some/where"))
    );
    assert!(r["duration_ms"].as_f64().unwrap() > 0.0);
    let started: DateTime<Utc> = r["started_at"].as_str().unwrap().parse().unwrap();
    assert!(started >= before && started <= Utc::now(), "{started}");
    assert!(r["id"].as_str().is_some_and(|id| !id.is_empty()));

    // The second call is warm; its generated request id is the answer's.
    let second = send(&app, get(&path, None)).await;
    assert_eq!(second.status, StatusCode::OK);
    let items = wait_for_records(&env, "echo", 2).await;
    assert_eq!(items[0]["cold"], false);
    assert_eq!(items[0]["bytes_in"], 0);
    assert_eq!(
        items[0]["request_id"].as_str(),
        second.headers["x-request-id"].to_str().ok()
    );

    // A new endpoint is a freshly started process: cold again.
    let up2 = Upstream::echo().await;
    point_at(&env, "echo", &up2.url).await;
    sqlx::query("update functions set deployed_version = 2 where name = 'echo'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    for _ in 0..2 {
        assert_eq!(send(&app, get(&path, None)).await.status, StatusCode::OK);
    }
    let items = wait_for_records(&env, "echo", 4).await;
    assert_eq!(
        (&items[1]["cold"], &items[1]["version"]),
        (&json!(true), &json!(2))
    );
    assert_eq!(
        (&items[0]["cold"], &items[0]["version"]),
        (&json!(false), &json!(2))
    );
    // The cold call's probe of the new port, then one kept-alive
    // connection for both calls.
    assert_eq!(up2.connections(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failed_calls_are_recorded_with_their_error() {
    let env = Env::new().await;
    let closed = {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        format!("http://{}", l.local_addr().unwrap())
    };
    deployed(&env, SUB, "down", 30, &closed).await;
    let slow = Upstream::start(axum::Router::new().fallback(|| async {
        tokio::time::sleep(Duration::from_secs(30)).await; // the fault
        "late"
    }))
    .await;
    deployed(&env, SUB, "slow", 1, &slow.url).await;
    let ns = ns(SUB);
    let sink = Upstream::echo().await;
    deployed(&env, SUB, "sink", 30, &sink.url).await;

    // Its instance refuses and the log never names another: the call is
    // held for one, then refused with why.
    let held = crate::api::proxy::app_with(&env, |s| {
        s.http = sless_api::proxy::HttpClient::new(sless_api::proxy::ProxyLimits {
            activation_timeout: Duration::from_secs(1),
            ..Default::default()
        });
    });
    let answer = send(&held, get(&format!("/fn/{ns}/down"), None)).await;
    answer.assert_problem(
        "a call whose only instance refuses",
        StatusCode::SERVICE_UNAVAILABLE,
        "function-activating",
    );
    let r = &wait_for_records(&env, "down", 1).await[0];
    assert_eq!(r["status"], 503);
    let error = r["error"].as_str().unwrap();
    assert!(error.contains("refused"), "{error}");

    let answer = env.send(get(&format!("/fn/{ns}/slow"), None)).await;
    assert_eq!(answer.status, StatusCode::GATEWAY_TIMEOUT);
    let r = &wait_for_records(&env, "slow", 1).await[0];
    assert_eq!(r["status"], 504);
    assert!(r["error"].as_str().unwrap().contains("timeout"), "{r}");
    assert!(r["duration_ms"].as_f64().unwrap() >= 1000.0, "{r}");

    let answer = env
        .send(
            request(Method::POST, &format!("/fn/{ns}/sink"), None)
                .body(Body::from(vec![0u8; 6 * 1024 * 1024 + 1]))
                .unwrap(),
        )
        .await;
    assert_eq!(answer.status, StatusCode::PAYLOAD_TOO_LARGE);
    let r = &wait_for_records(&env, "sink", 1).await[0];
    assert_eq!(r["status"], 413);
    assert!(r["error"].as_str().unwrap().contains("limit"), "{r}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn paging_through_250_records_by_100_gives_100_100_50_newest_first() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "busy").await.status, StatusCode::CREATED);
    env.catch_up().await;
    // Pairs that started in the same microsecond: the id breaks the tie.
    let t0 = now_us() - chrono::Duration::hours(1);
    let all: Vec<Invocation> = (0..250)
        .map(|i| record_at("busy", t0 + chrono::Duration::milliseconds(i / 2), 200))
        .collect();
    store::insert(&env.db.pool, &all).await.unwrap();

    let mut seen = Vec::new();
    let mut sizes = Vec::new();
    let mut query = "?limit=100".to_owned();
    loop {
        let answer = page(&env, "busy", &query).await;
        assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
        let items = answer.body["items"].as_array().unwrap();
        sizes.push(items.len());
        seen.extend(items.iter().cloned());
        match answer.body["next_cursor"].as_str() {
            Some(c) => query = format!("?limit=100&cursor={c}"),
            None => break,
        }
        assert!(sizes.len() < 10, "paging does not end");
    }
    assert_eq!(sizes, [100, 100, 50]);
    let ids: Vec<&str> = seen.iter().map(|r| r["id"].as_str().unwrap()).collect();
    assert_eq!(
        ids.iter().collect::<HashSet<_>>().len(),
        250,
        "no duplicates"
    );
    let mut expected = all.clone();
    expected.sort_by_key(|r| std::cmp::Reverse((r.started_at, r.id)));
    let expected: Vec<String> = expected.iter().map(|r| r.id.to_string()).collect();
    assert_eq!(ids, expected, "newest first, ties by id");

    // Without a limit, a page holds 100.
    let answer = page(&env, "busy", "").await;
    assert_eq!(answer.body["items"].as_array().unwrap().len(), 100);
    let answer = page(&env, "busy", "?limit=1000").await;
    assert_eq!(answer.body["items"].as_array().unwrap().len(), 250);
    assert_eq!(answer.body["next_cursor"], Value::Null);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limits_and_cursors_are_422_naming_the_parameter() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "f").await.status, StatusCode::CREATED);
    env.catch_up().await;
    let forged = store::Cursor {
        started_at: now_us() - chrono::Duration::days(1),
        id: uuid::Uuid::now_v7(),
    }
    .encode();
    let before = env.counts().await;
    for (query, field) in [
        ("?limit=0", "limit"),
        ("?limit=1001", "limit"),
        ("?limit=-1", "limit"),
        ("?limit=abc", "limit"),
        ("?limit=1.5", "limit"),
        ("?limit=", "limit"),
        ("?limit=99999999999999999999", "limit"),
        ("?limit=10&limit=20", "limit"),
        ("?cursor=nonsense", "cursor"),
        ("?cursor=", "cursor"),
        (&format!("?cursor={}", "0".repeat(48)), "cursor"),
        (&format!("?cursor={forged}"), "cursor"),
        ("?page=2", "page"),
    ] {
        let answer = page(&env, "f", query).await;
        answer.assert_problem(query, StatusCode::UNPROCESSABLE_ENTITY, "invalid-field");
        assert_eq!(answer.field(), Some(field), "{query}");
    }
    assert_eq!(env.counts().await, before, "nothing written");
    // The controls.
    for query in ["?limit=1", "?limit=1000", ""] {
        assert_eq!(
            page(&env, "f", query).await.status,
            StatusCode::OK,
            "{query}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespace_and_missing_functions_are_404_and_no_token_401() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "mine").await.status, StatusCode::CREATED);
    env.catch_up().await;
    store::insert(&env.db.pool, &[record_at("mine", Utc::now(), 200)])
        .await
        .unwrap();
    let mine = invocations_uri(&ns(SUB), "mine", "");
    let ok = env.send(get(&mine, Some(&token(SUB)))).await;
    assert_eq!(ok.body["items"].as_array().unwrap().len(), 1);

    env.send(get(&mine, Some(&token(OTHER))))
        .await
        .assert_problem("another namespace", StatusCode::NOT_FOUND, "not-found");
    env.send(get(&mine, None)).await.assert_problem(
        "no token",
        StatusCode::UNAUTHORIZED,
        "unauthorized",
    );
    for name in ["nope", "Mine", "a_b", "%FF"] {
        env.send(get(&invocations_uri(&ns(SUB), name, ""), Some(&token(SUB))))
            .await
            .assert_problem(name, StatusCode::NOT_FOUND, "not-found");
    }
    // A function created but not projected yet exists.
    assert_eq!(env.create(SUB, "fresh").await.status, StatusCode::CREATED);
    let answer = page(&env, "fresh", "").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body, json!({ "items": [], "next_cursor": null }));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn job_and_cron_runs_are_listed_with_their_origin_and_run() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "report").await.status, StatusCode::CREATED);
    env.catch_up().await;
    let t0 = now_us() - chrono::Duration::minutes(5);
    let ns = ns(SUB);
    let job = Invocation {
        origin: "job".into(),
        run: Some(format!("job/{ns}/once")),
        ..record_at("report", t0, 200)
    };
    let cron = Invocation {
        origin: "cron".into(),
        run: Some(format!("cron/{ns}/nightly/1798675200")),
        status: 500,
        error: Some("exited with code 3".into()),
        error_kind: Some("exited".into()),
        ..record_at("report", t0 + chrono::Duration::seconds(1), 500)
    };
    let http = record_at("report", t0 + chrono::Duration::seconds(2), 200);
    store::insert(&env.db.pool, &[job.clone(), cron.clone(), http])
        .await
        .unwrap();

    let answer = page(&env, "report", "").await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    let seen: Vec<(&str, &Value)> = answer.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| (r["origin"].as_str().unwrap(), &r["run"]))
        .collect();
    let (cron_run, job_run) = (json!(cron.run), json!(job.run));
    assert_eq!(
        seen,
        [
            ("http", &Value::Null),
            ("cron", &cron_run),
            ("job", &job_run)
        ],
        "newest first, each with where it came from"
    );
    // What the store hands back is what was written.
    let stored = store::page(&env.db.pool, &ns, "report", None, 10)
        .await
        .unwrap();
    assert_eq!(stored[1], cron);
    assert_eq!(stored[2], job);
}

fn config(retention: Retention) -> RecorderConfig {
    RecorderConfig {
        batch_wait: Duration::from_millis(10),
        retention,
        ..RecorderConfig::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_keeps_the_newest_per_function_and_nothing_past_the_age() {
    let env = Env::new().await;
    let recorder = Recorder::start(
        env.db.pool.clone(),
        config(Retention {
            max_age: Duration::from_secs(3600),
            per_function: 5,
            every: Duration::from_millis(50),
            delete_limit: 2,
        }),
    );
    let now = now_us();
    let at = |ms: i64| now - chrono::Duration::milliseconds(ms);
    for i in 0..12 {
        recorder.record(record_at("many", at(1000 - i), 200));
    }
    for i in 0..3 {
        recorder.record(record_at("few", at(1000 - i), 200));
    }
    // Two hours old: past the age bound.
    for i in 0..3 {
        recorder.record(record_at("old", at(7_200_000 + i), 200));
    }
    let pool = &env.db.pool;
    let left = |name: &'static str| async move {
        sqlx::query_scalar::<_, DateTime<Utc>>(
            "select started_at from invocations where function = $1 order by started_at",
        )
        .bind(name)
        .fetch_all(pool)
        .await
        .unwrap()
    };
    sless_testkit::eventually("retention to catch up", WAIT, || async {
        (left("many").await.len() == 5 && left("old").await.is_empty()).then_some(())
    })
    .await;
    let kept = left("many").await;
    assert_eq!(kept, (7..12).map(|i| at(1000 - i)).collect::<Vec<_>>());
    assert_eq!(left("few").await.len(), 3, "under the cap: untouched");
    recorder.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_by_age_is_bounded_per_statement() {
    let env = Env::new().await;
    let old = Utc::now() - chrono::Duration::days(8);
    let rows: Vec<Invocation> = (0..30)
        .map(|i| record_at("f", old + chrono::Duration::milliseconds(i), 200))
        .collect();
    store::insert(&env.db.pool, &rows).await.unwrap();
    store::insert(&env.db.pool, &[record_at("f", Utc::now(), 200)])
        .await
        .unwrap();
    let cutoff = Utc::now() - chrono::Duration::days(7);
    let n = store::delete_started_before(&env.db.pool, cutoff, 10)
        .await
        .unwrap();
    assert_eq!(n, 10);
    assert_eq!(records(&env).await, 21);
    let n = store::delete_started_before(&env.db.pool, cutoff, 100)
        .await
        .unwrap();
    assert_eq!(n, 20);
    assert_eq!(records(&env).await, 1, "the recent one stays");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_queue_drops_and_counts_records_instead_of_blocking_calls() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    // A queue of 2 and a writer not yet running: it fills at once.
    let (recorder, writer) = Recorder::detached(
        env.db.pool.clone(),
        RecorderConfig {
            capacity: 2,
            ..config(Retention::default())
        },
    );
    let app = app_with(&env, |s| s.invocations = recorder.clone());
    let path = format!("/fn/{}/echo", ns(SUB));
    let calls = async {
        for _ in 0..10 {
            assert_eq!(send(&app, get(&path, None)).await.status, StatusCode::OK);
        }
    };
    tokio::time::timeout(Duration::from_secs(10), calls)
        .await
        .expect("calls are never held up by a full queue");
    assert_eq!(recorder.dropped(), 8);
    assert_eq!(records(&env).await, 0);

    tokio::spawn(writer.run());
    sless_testkit::eventually("the queued two written", WAIT, || async {
        (records(&env).await == 2).then_some(())
    })
    .await;
    recorder.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_full_batch_is_written_at_once_and_shutdown_writes_what_is_held() {
    let env = Env::new().await;
    let recorder = Recorder::start(
        env.db.pool.clone(),
        RecorderConfig {
            batch_max: 10,
            batch_wait: Duration::from_secs(3600),
            ..RecorderConfig::default()
        },
    );
    let now = now_us();
    for i in 0..10 {
        recorder.record(record_at("f", now + chrono::Duration::milliseconds(i), 200));
    }
    sless_testkit::eventually("a full batch written", WAIT, || async {
        (records(&env).await == 10).then_some(())
    })
    .await;
    for i in 10..13 {
        recorder.record(record_at("f", now + chrono::Duration::milliseconds(i), 200));
    }
    // The batch waits an hour for more, unless the writer is told to stop.
    recorder.shutdown().await;
    assert_eq!(records(&env).await, 13);
    recorder.record(record_at("f", now, 200));
    assert_eq!(recorder.dropped(), 1, "nothing is taken after shutdown");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_answer_carries_a_request_id_kept_from_the_request_when_sane() {
    let env = Env::new().await;
    let tok = token(SUB);
    let long = "r".repeat(128);
    let too_long = "r".repeat(129);
    for (given, kept) in [
        (Some("abc-123"), true),
        (Some(long.as_str()), true),
        (Some("!#$%&'*+-.^_`|~"), true),
        (Some(too_long.as_str()), false),
        (Some("has space"), false),
        (Some("tab\there"), false),
        (Some(""), false),
        (None, false),
    ] {
        let mut req = request(Method::GET, &functions_uri(&ns(SUB)), Some(&tok));
        if let Some(v) = given {
            req = req.header("x-request-id", v);
        }
        let answer = env.send(req.body(Body::empty()).unwrap()).await;
        assert_eq!(answer.status, StatusCode::OK, "{given:?}");
        let id = answer.headers["x-request-id"].to_str().unwrap();
        if kept {
            assert_eq!(Some(id), given);
        } else {
            assert_ne!(Some(id), given);
            assert!(uuid::Uuid::parse_str(id).is_ok(), "{id}");
        }
    }
    // Refusals and unknown routes carry one too.
    for (req, status) in [
        (
            get(&functions_uri(&ns(SUB)), None),
            StatusCode::UNAUTHORIZED,
        ),
        (get("/v1/nowhere", None), StatusCode::NOT_FOUND),
        (get("/healthz", None), StatusCode::OK),
    ] {
        let answer = env.send(req).await;
        assert_eq!(answer.status, status);
        assert!(answer.headers.contains_key("x-request-id"), "{status}");
    }
    // A command's events carry the id its answer names.
    let created = env
        .send(
            request(Method::POST, &functions_uri(&ns(SUB)), Some(&tok))
                .header("content-type", "application/json")
                .header("x-request-id", "not sane")
                .body(Body::from(spec("traced").to_string()))
                .unwrap(),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let id = created.headers["x-request-id"].to_str().unwrap();
    let events = env.stream(SUB, "traced").await;
    assert_eq!(events[0].metadata["request_id"], id);
}
