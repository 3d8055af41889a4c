//! Conditional requests: a function's, trigger's or job's `ETag` is its
//! stream version; `If-Match` makes a command apply only to that version
//! (412 and nothing written otherwise), `If-None-Match: *` makes a create
//! create-only. And the retry rule of `command::execute`: a command that
//! lost a race is decided again only when what came in between is nothing
//! it depends on.

use std::sync::Arc;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;
use sless_domain::{FunctionEvent, FunctionKey, FunctionName, Namespace};
use sless_store::eventlog::{self, Metadata, NewEvent};

use super::support::*;

const SUB: &str = "ada@example.com";

fn etag_of(a: &Answer) -> String {
    a.headers
        .get(header::ETAG)
        .unwrap_or_else(|| panic!("an ETag on {} {}", a.status, a.body))
        .to_str()
        .unwrap()
        .to_owned()
}

fn with(
    method: Method,
    uri: &str,
    headers: &[(&str, &str)],
    content_type: &str,
    body: Vec<u8>,
) -> Request<Body> {
    let mut b = request(method, uri, Some(&token(SUB)));
    if !content_type.is_empty() {
        b = b.header(header::CONTENT_TYPE, content_type);
    }
    for (k, v) in headers {
        b = b.header(*k, *v);
    }
    b.body(Body::from(body)).unwrap()
}

fn key(name: &str) -> FunctionKey {
    FunctionKey::new(
        Namespace::parse(&ns(SUB)).unwrap(),
        FunctionName::parse(name).unwrap(),
    )
}

async fn get_function(env: &Env, name: &str) -> Answer {
    env.send(get(&function_uri(&ns(SUB), name), Some(&token(SUB))))
        .await
}

async fn ready(env: &Env, name: &str) -> String {
    assert_eq!(env.create(SUB, name).await.status, StatusCode::CREATED);
    let up = env.upload(SUB, name, &handler_zip("one")).await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
    let got = get_function(env, name).await;
    assert_eq!(got.status, StatusCode::OK);
    etag_of(&got)
}

#[tokio::test]
async fn every_get_carries_the_stream_version_as_etag_and_it_changes_after_every_write() {
    let env = Env::new().await;
    let created = env.create(SUB, "tagged").await;
    assert_eq!(etag_of(&created), "\"1\"", "the create's answer");
    assert_eq!(etag_of(&get_function(&env, "tagged").await), "\"1\"");
    let up = env.upload(SUB, "tagged", &handler_zip("one")).await;
    assert_eq!(etag_of(&up), "\"2\"", "the upload's answer");
    // From the log before the projector ran, and from the read model after.
    assert_eq!(etag_of(&get_function(&env, "tagged").await), "\"2\"");
    env.catch_up().await;
    assert_eq!(etag_of(&get_function(&env, "tagged").await), "\"2\"");
    let put = env
        .send(with(
            Method::PUT,
            &function_uri(&ns(SUB), "tagged"),
            &[],
            "application/json",
            br#"{"memory_mb": 256}"#.to_vec(),
        ))
        .await;
    assert_eq!(put.status, StatusCode::ACCEPTED, "{}", put.body);
    assert_eq!(etag_of(&put), "\"3\"");
    env.catch_up().await;
    assert_eq!(etag_of(&get_function(&env, "tagged").await), "\"3\"");

    // A trigger's and a job's too.
    let trigger = env
        .send(post_json(
            &format!("/v1/namespaces/{}/triggers", ns(SUB)),
            Some(&token(SUB)),
            &json!({"name": "web", "function": "tagged", "type": "http"}).to_string(),
        ))
        .await;
    assert_eq!(trigger.status, StatusCode::CREATED, "{}", trigger.body);
    assert_eq!(etag_of(&trigger), "\"1\"");
    let trigger_uri = format!("/v1/namespaces/{}/triggers/web", ns(SUB));
    let off = env
        .send(with(
            Method::PATCH,
            &trigger_uri,
            &[],
            "application/json",
            br#"{"enabled": false}"#.to_vec(),
        ))
        .await;
    assert_eq!(etag_of(&off), "\"2\"");
    let got = env.send(get(&trigger_uri, Some(&token(SUB)))).await;
    assert_eq!(etag_of(&got), "\"2\"");

    let job = env
        .send(post_json(
            &format!("/v1/namespaces/{}/jobs", ns(SUB)),
            Some(&token(SUB)),
            &json!({"name": "once", "function": "tagged"}).to_string(),
        ))
        .await;
    assert_eq!(job.status, StatusCode::ACCEPTED, "{}", job.body);
    assert_eq!(etag_of(&job), "\"1\"");
    let got = env
        .send(get(
            &format!("/v1/namespaces/{}/jobs/once", ns(SUB)),
            Some(&token(SUB)),
        ))
        .await;
    assert_eq!(etag_of(&got), "\"1\"");
}

/// Each command with a stale `If-Match`: 412 with the current ETag, and
/// not one event, work item, blob or idempotency key written.
#[tokio::test]
async fn a_stale_if_match_is_412_with_the_current_etag_and_writes_nothing() {
    let env = Env::new().await;
    let etag = ready(&env, "stale").await;
    assert_eq!(etag, "\"2\"");
    let trigger = env
        .send(post_json(
            &format!("/v1/namespaces/{}/triggers", ns(SUB)),
            Some(&token(SUB)),
            &json!({"name": "web", "function": "stale", "type": "http"}).to_string(),
        ))
        .await;
    assert_eq!(trigger.status, StatusCode::CREATED);
    let job = env
        .send(post_json(
            &format!("/v1/namespaces/{}/jobs", ns(SUB)),
            Some(&token(SUB)),
            &json!({"name": "once", "function": "stale"}).to_string(),
        ))
        .await;
    assert_eq!(job.status, StatusCode::ACCEPTED);
    let f = function_uri(&ns(SUB), "stale");
    let t = format!("/v1/namespaces/{}/triggers/web", ns(SUB));
    let j = format!("/v1/namespaces/{}/jobs/once", ns(SUB));
    let json = "application/json";
    // (what, method, uri, content type, body, the ETag it is at)
    type Case<'a> = (&'a str, Method, String, &'a str, Vec<u8>, &'a str);
    let cases: Vec<Case> = vec![
        (
            "put",
            Method::PUT,
            f.clone(),
            json,
            br#"{"memory_mb": 512}"#.to_vec(),
            "\"2\"",
        ),
        ("delete", Method::DELETE, f.clone(), "", vec![], "\"2\""),
        (
            "upload",
            Method::POST,
            format!("{f}/upload"),
            ZIP,
            handler_zip("two"),
            "\"2\"",
        ),
        (
            "rollback",
            Method::POST,
            format!("{f}/rollback"),
            json,
            br#"{"version": 1}"#.to_vec(),
            "\"2\"",
        ),
        (
            "patch trigger",
            Method::PATCH,
            t.clone(),
            json,
            br#"{"enabled": false}"#.to_vec(),
            "\"1\"",
        ),
        (
            "delete trigger",
            Method::DELETE,
            t.clone(),
            "",
            vec![],
            "\"1\"",
        ),
        ("delete job", Method::DELETE, j.clone(), "", vec![], "\"1\""),
    ];
    for (what, method, uri, ct, body, at) in cases {
        // A version it is not at, a list of such, and its own one but weak.
        let weak = format!("W/{at}");
        for stale in ["\"9\"", "\"7\", \"8\"", weak.as_str()] {
            let before = env.counts().await;
            let req = with(
                method.clone(),
                &uri,
                &[("if-match", stale), ("idempotency-key", "k-stale")],
                ct,
                body.clone(),
            );
            let a = env.send(req).await;
            a.assert_problem(what, StatusCode::PRECONDITION_FAILED, "precondition-failed");
            assert_eq!(a.field(), Some("If-Match"), "{what}");
            assert_eq!(etag_of(&a), at, "{what}: the current ETag");
            assert_eq!(a.body["etag"], at, "{what}: the problem's etag member");
            assert_eq!(env.counts().await, before, "{what} with If-Match {stale}");
        }
    }
    // A malformed If-Match is a 400 naming the header, also writing nothing.
    let before = env.counts().await;
    let a = env
        .send(with(Method::DELETE, &f, &[("if-match", "2")], "", vec![]))
        .await;
    a.assert_problem("unquoted", StatusCode::BAD_REQUEST, "malformed-request");
    assert_eq!(a.field(), Some("If-Match"));
    assert_eq!(env.counts().await, before);
}

#[tokio::test]
async fn a_matching_if_match_applies_and_answers_the_next_etag() {
    let env = Env::new().await;
    let etag = ready(&env, "fresh").await;
    let f = function_uri(&ns(SUB), "fresh");
    let put = env
        .send(with(
            Method::PUT,
            &f,
            &[("if-match", &etag)],
            "application/json",
            br#"{"memory_mb": 256}"#.to_vec(),
        ))
        .await;
    assert_eq!(put.status, StatusCode::ACCEPTED, "{}", put.body);
    assert_eq!(etag_of(&put), "\"3\"");
    let up = env
        .send(with(
            Method::POST,
            &format!("{f}/upload"),
            &[("if-match", "\"3\""), ("idempotency-key", "k-up")],
            ZIP,
            handler_zip("two"),
        ))
        .await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
    assert_eq!(up.body["version"], 2);
    assert_eq!(etag_of(&up), "\"4\"");
    // Its retry gets the same answer, ETag included, though the stream moved on.
    let again = env
        .send(with(
            Method::POST,
            &format!("{f}/upload"),
            &[("if-match", "\"3\""), ("idempotency-key", "k-up")],
            ZIP,
            handler_zip("two"),
        ))
        .await;
    assert_eq!(again.status, StatusCode::ACCEPTED);
    assert_eq!(again.body, up.body);
    assert_eq!(etag_of(&again), "\"4\"");
    let star = env
        .send(with(Method::DELETE, &f, &[("if-match", "*")], "", vec![]))
        .await;
    assert_eq!(star.status, StatusCode::ACCEPTED, "{}", star.body);
    // Deleted: `*` no longer matches.
    let gone = env
        .send(with(Method::DELETE, &f, &[("if-match", "*")], "", vec![]))
        .await;
    gone.assert_problem(
        "deleted",
        StatusCode::PRECONDITION_FAILED,
        "precondition-failed",
    );
}

#[tokio::test]
async fn if_none_match_star_creates_only_what_does_not_exist() {
    let env = Env::new().await;
    let create = |name: &str| {
        with(
            Method::POST,
            &functions_uri(&ns(SUB)),
            &[("if-none-match", "*")],
            "application/json",
            spec(name).to_string().into_bytes(),
        )
    };
    let first = env.send(create("once")).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let before = env.counts().await;
    let second = env.send(create("once")).await;
    second.assert_problem(
        "exists",
        StatusCode::PRECONDITION_FAILED,
        "precondition-failed",
    );
    assert_eq!(second.field(), Some("If-None-Match"));
    assert_eq!(etag_of(&second), "\"1\"");
    assert_eq!(env.counts().await, before);
    // Without it, the same create is the usual 409.
    env.create(SUB, "once")
        .await
        .assert_problem("plain", StatusCode::CONFLICT, "already-exists");
    // A trigger's create too.
    let trigger = |name: &str| {
        with(
            Method::POST,
            &format!("/v1/namespaces/{}/triggers", ns(SUB)),
            &[("if-none-match", "*")],
            "application/json",
            json!({"name": name, "function": "once", "type": "http"})
                .to_string()
                .into_bytes(),
        )
    };
    assert_eq!(env.send(trigger("web")).await.status, StatusCode::CREATED);
    env.send(trigger("web")).await.assert_problem(
        "trigger exists",
        StatusCode::PRECONDITION_FAILED,
        "precondition-failed",
    );
}

/// Tried as a user would: 20 uploads at once to one function all succeed,
/// each with a version of its own; with the same `If-Match`, one wins and
/// the other 19 get 412.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_uploads_all_succeed_and_with_if_match_exactly_one_wins() {
    let env = Arc::new(Env::new().await);
    let etag = ready(&env, "many").await;
    let send_all = |if_match: Option<String>| {
        let tasks: Vec<_> = (0..20)
            .map(|i| {
                let (env, if_match) = (env.clone(), if_match.clone());
                tokio::spawn(async move {
                    let headers: Vec<(&str, &str)> = match &if_match {
                        Some(t) => vec![("if-match", t.as_str())],
                        None => vec![],
                    };
                    let req = with(
                        Method::POST,
                        &upload_uri(&ns(SUB), "many"),
                        &headers,
                        ZIP,
                        handler_zip(&format!("many {i} {if_match:?}")),
                    );
                    env.send(req).await
                })
            })
            .collect();
        async move {
            let mut answers = Vec::new();
            for t in tasks {
                answers.push(t.await.unwrap());
            }
            answers
        }
    };
    let answers = send_all(None).await;
    let mut versions: Vec<u64> = answers
        .iter()
        .map(|a| {
            assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
            a.body["version"].as_u64().unwrap()
        })
        .collect();
    versions.sort();
    assert_eq!(versions, (2..=21).collect::<Vec<_>>());

    let now = etag_of(&get_function(&env, "many").await);
    assert_ne!(now, etag);
    let before = env.counts().await;
    let answers = send_all(Some(now)).await;
    let won: Vec<_> = answers
        .iter()
        .filter(|a| a.status == StatusCode::ACCEPTED)
        .collect();
    assert_eq!(won.len(), 1, "exactly one wins");
    for a in answers.iter().filter(|a| a.status != StatusCode::ACCEPTED) {
        a.assert_problem(
            "a loser",
            StatusCode::PRECONDITION_FAILED,
            "precondition-failed",
        );
    }
    let after = env.counts().await;
    assert_eq!(
        after.events,
        before.events + won[0].body["pruned"].as_array().map_or(1, |_| 2)
    );
}

/// Holds the stream's lock with an append of `events` at `at` until the
/// request `req` waits for it, then commits: the request decided on the
/// state before the append and loses the race to it.
async fn race(
    env: &Arc<Env>,
    name: &str,
    at: u64,
    events: &[FunctionEvent],
    req: Request<Body>,
) -> Answer {
    let key = key(name);
    let mut tx = env.db.pool.begin().await.unwrap();
    let new: Vec<NewEvent> = events
        .iter()
        .map(|e| NewEvent::function(&key, e, Metadata::system("test", 1)))
        .collect();
    eventlog::append(&mut tx, &key.stream(), at, &new)
        .await
        .unwrap();
    let sent = {
        let env = env.clone();
        tokio::spawn(async move { env.send(req).await })
    };
    env.until_a_request_waits_for_a_stream_lock().await;
    tx.commit().await.unwrap();
    sent.await.unwrap()
}

/// A spec change depends on the spec it was decided on: another spec change
/// in between is a 409, never a silent overwrite. (An `execute` that decides
/// again on every conflict answers 202 here and overwrites memory_mb 512.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_change_that_lost_the_race_to_another_spec_change_is_a_409() {
    let env = Arc::new(Env::new().await);
    ready(&env, "contested").await;
    let other = sless_domain::FunctionSpec {
        runtime: sless_domain::Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 512,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        scaling: Default::default(),
    };
    let req = with(
        Method::PUT,
        &function_uri(&ns(SUB), "contested"),
        &[],
        "application/json",
        br#"{"timeout_sec": 60}"#.to_vec(),
    );
    let changed = FunctionEvent::FunctionSpecChanged { spec: other };
    let answer = race(&env, "contested", 2, &[changed], req).await;
    answer.assert_problem("lost", StatusCode::CONFLICT, "version-conflict");
    let specs = env
        .events_of_type(SUB, "contested", "FunctionSpecChanged")
        .await;
    assert_eq!(specs.len(), 1, "only the winner's change: {specs:?}");
    assert_eq!(specs[0]["spec"]["memory_mb"], 512);
}

/// An upload with `If-Match` names the version it depends on: a worker's
/// event in between, which an upload without it is decided again past,
/// makes it 412, and what it stored goes to the collector.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_with_if_match_overtaken_by_any_event_is_412_not_decided_again() {
    let env = Arc::new(Env::new().await);
    let etag = ready(&env, "pinned").await;
    let req = with(
        Method::POST,
        &upload_uri(&ns(SUB), "pinned"),
        &[("if-match", &etag)],
        ZIP,
        handler_zip("two"),
    );
    let started = FunctionEvent::BuildStarted { version: 1 };
    let answer = race(&env, "pinned", 2, &[started], req).await;
    answer.assert_problem(
        "overtaken",
        StatusCode::PRECONDITION_FAILED,
        "precondition-failed",
    );
    assert_eq!(etag_of(&answer), "\"3\"");
    let uploads = env.events_of_type(SUB, "pinned", "FunctionUploaded").await;
    assert_eq!(uploads.len(), 1, "no second version");
    let collect: i64 = sqlx::query_scalar("select count(*) from work_items where kind = $1")
        .bind(sless_store::retention::COLLECT_BLOB)
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(
        collect, 2,
        "the zip and the context it stored are collected"
    );
}
