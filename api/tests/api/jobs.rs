//! `/v1/namespaces/{ns}/jobs`: create (the run it enqueues, the 409 that
//! shows the job that has the name), get (from the log while the read
//! model is behind), delete.

use axum::http::{Method, StatusCode, header};
use serde_json::{Value, json};
use sless_domain::job::{JobEvent, Output};
use sless_domain::{JobName, Namespace};
use sless_store::eventlog::{self, Metadata, NewEvent};

use super::requests::*;
use super::support::*;

const ALICE: &str = "alice-jobs@example.com";
const BOB: &str = "bob-jobs@example.com";

fn jobs_uri(ns: &str) -> String {
    format!("/v1/namespaces/{ns}/jobs")
}

fn job_uri(ns: &str, name: &str) -> String {
    format!("/v1/namespaces/{ns}/jobs/{name}")
}

fn job_stream(sub: &str, name: &str) -> String {
    sless_domain::job::stream(&Namespace::for_subject(sub), &JobName::parse(name).unwrap())
}

async fn post_job(env: &Env, sub: &str, body: &Value) -> Answer {
    env.send(post_json(
        &jobs_uri(&ns(sub)),
        Some(&token(sub)),
        &body.to_string(),
    ))
    .await
}

async fn get_job(env: &Env, sub: &str, name: &str) -> Answer {
    env.send(get(&job_uri(&ns(sub), name), Some(&token(sub))))
        .await
}

/// A function with one uploaded version.
async fn uploaded(env: &Env, sub: &str, name: &str) {
    assert_eq!(env.create(sub, name).await.status, StatusCode::CREATED);
    let up = env.upload(sub, name, &handler_zip("hi")).await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
}

/// Appends what a worker appends while it runs a job.
pub async fn worker_appends(env: &Env, sub: &str, name: &str, events: &[JobEvent]) {
    let stream = job_stream(sub, name);
    let at = eventlog::read_stream(&env.db.pool, &stream)
        .await
        .unwrap()
        .len() as u64;
    let ns = Namespace::for_subject(sub);
    let new: Vec<NewEvent> = events
        .iter()
        .map(|e| NewEvent::job(&ns, e, Metadata::system("worker", 1)))
        .collect();
    let mut tx = env.db.pool.begin().await.unwrap();
    eventlog::append(&mut tx, &stream, at, &new).await.unwrap();
    tx.commit().await.unwrap();
}

pub fn succeeded(stdout: &str) -> JobEvent {
    JobEvent::JobSucceeded {
        exit_code: 0,
        stdout: Output {
            text: stdout.into(),
            bytes: stdout.len() as u64,
            truncated: false,
        },
        stderr: Output::default(),
        duration_ms: 42,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_the_current_version_and_its_run_is_enqueued_with_it() {
    let env = Env::new().await;
    let ns = ns(ALICE);
    uploaded(&env, ALICE, "report").await;
    let before = env.counts().await;
    let created = post_job(
        &env,
        ALICE,
        &json!({ "name": "once", "function": "report", "input": { "day": "2026-11-30" } }),
    )
    .await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{}", created.body);
    assert_eq!(
        created.headers[header::LOCATION],
        job_uri(&ns, "once").as_str()
    );
    let j = &created.body;
    assert_eq!(
        (&j["name"], &j["function"], &j["status"], &j["version"]),
        (
            &json!("once"),
            &json!("report"),
            &json!("Pending"),
            &json!(1)
        )
    );
    assert_eq!(j["input"], json!({ "day": "2026-11-30" }));
    assert_eq!(j["timeout_sec"], 30, "the function's timeout");
    assert_eq!(j["stdout"], Value::Null);
    let after = env.counts().await;
    assert_eq!(after.events, before.events + 1);
    assert!(
        env.work_items().await.contains(&(
            "RunJob".into(),
            job_stream(ALICE, "once"),
            "pending".into()
        )),
        "{:?}",
        env.work_items().await
    );
    let requested: (String, Value) =
        sqlx::query_as("select type, data from events where stream = $1")
            .bind(job_stream(ALICE, "once"))
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(requested.0, "JobRequested");
    assert_eq!(requested.1["version"], 1);

    let got = get_job(&env, ALICE, "once").await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    assert_eq!(got.body["status"], "Pending");
    assert!(got.body["requested_at"].is_string(), "{}", got.body);

    // A timeout of its own.
    let own = post_job(
        &env,
        ALICE,
        &json!({ "name": "slow", "function": "report", "timeout_sec": 3600 }),
    )
    .await;
    assert_eq!(own.status, StatusCode::ACCEPTED, "{}", own.body);
    assert_eq!(
        (&own.body["timeout_sec"], &own.body["input"]),
        (&json!(3600), &Value::Null)
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_name_that_exists_answers_409_with_the_job_and_its_status() {
    let env = Env::new().await;
    uploaded(&env, ALICE, "report").await;
    let body = json!({ "name": "once", "function": "report" });
    assert_eq!(
        post_job(&env, ALICE, &body).await.status,
        StatusCode::ACCEPTED
    );
    let uri = jobs_uri(&ns(ALICE));
    let tok = token(ALICE);
    let pending = assert_refused(
        &env,
        "the same job again",
        post_json(&uri, Some(&tok), &body.to_string()),
        StatusCode::CONFLICT,
        "already-exists",
        None,
    )
    .await;
    assert_eq!(pending.body["job_status"], "Pending", "{}", pending.body);
    assert_eq!(pending.body["job"]["name"], "once");
    assert_eq!(pending.body["job"]["status"], "Pending");

    worker_appends(&env, ALICE, "once", &[JobEvent::JobStarted { attempt: 1 }]).await;
    let running = assert_refused(
        &env,
        "the job again while it runs",
        post_json(
            &uri,
            Some(&tok),
            &json!({ "name": "once", "function": "report", "input": 1 }).to_string(),
        ),
        StatusCode::CONFLICT,
        "already-exists",
        None,
    )
    .await;
    assert_eq!(running.body["job_status"], "Running", "{}", running.body);
    assert!(running.body["job"]["started_at"].is_string());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_needs_a_function_with_code() {
    let env = Env::new().await;
    let uri = jobs_uri(&ns(ALICE));
    let tok = token(ALICE);
    let body = json!({ "name": "once", "function": "report" }).to_string();
    assert_refused(
        &env,
        "no such function",
        post_json(&uri, Some(&tok), &body),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
        Some("function"),
    )
    .await;
    assert_eq!(
        env.create(ALICE, "report").await.status,
        StatusCode::CREATED
    );
    let nothing = assert_refused(
        &env,
        "nothing uploaded",
        post_json(&uri, Some(&tok), &body),
        StatusCode::CONFLICT,
        "conflict",
        None,
    )
    .await;
    let detail = nothing.body["detail"].as_str().unwrap();
    assert!(detail.contains("upload it first"), "{detail}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_finished_job_shows_how_it_ended_from_the_log() {
    let env = Env::new().await;
    uploaded(&env, ALICE, "report").await;
    let body = json!({ "name": "once", "function": "report" });
    assert_eq!(
        post_job(&env, ALICE, &body).await.status,
        StatusCode::ACCEPTED
    );
    worker_appends(
        &env,
        ALICE,
        "once",
        &[
            JobEvent::JobStarted { attempt: 1 },
            succeeded("{\"ok\": true}\n"),
        ],
    )
    .await;
    let got = get_job(&env, ALICE, "once").await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    let j = &got.body;
    assert_eq!(
        (&j["status"], &j["exit_code"]),
        (&json!("Succeeded"), &json!(0))
    );
    assert_eq!(
        j["stdout"],
        json!({ "text": "{\"ok\": true}\n", "bytes": 13, "truncated": false })
    );
    assert_eq!(j["stderr"]["text"], "");
    assert_eq!(j["duration_ms"], 42);
    for t in ["requested_at", "started_at", "finished_at"] {
        assert!(j[t].is_string(), "{t}: {j}");
    }
    assert_eq!(j["error"], Value::Null);

    // A failed one carries its exit code, error and timeout flag.
    let body = json!({ "name": "broken", "function": "report" });
    assert_eq!(
        post_job(&env, ALICE, &body).await.status,
        StatusCode::ACCEPTED
    );
    worker_appends(
        &env,
        ALICE,
        "broken",
        &[
            JobEvent::JobStarted { attempt: 1 },
            JobEvent::JobFailed {
                exit_code: Some(3),
                error: "exited with code 3".into(),
                stdout: Output::default(),
                stderr: Output {
                    text: "Traceback".into(),
                    bytes: 9,
                    truncated: false,
                },
                timed_out: false,
                duration_ms: 7,
            },
        ],
    )
    .await;
    let failed = get_job(&env, ALICE, "broken").await;
    let f = &failed.body;
    assert_eq!(
        (&f["status"], &f["exit_code"]),
        (&json!("Failed"), &json!(3)),
        "{f}"
    );
    assert_eq!(
        (&f["error"], &f["timed_out"]),
        (&json!("exited with code 3"), &json!(false))
    );
    assert_eq!(f["stderr"]["text"], "Traceback");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_job_is_gone_and_its_name_is_free_again() {
    let env = Env::new().await;
    uploaded(&env, ALICE, "report").await;
    let uri = job_uri(&ns(ALICE), "once");
    let tok = token(ALICE);
    let body = json!({ "name": "once", "function": "report" });
    assert_eq!(
        post_job(&env, ALICE, &body).await.status,
        StatusCode::ACCEPTED
    );
    worker_appends(&env, ALICE, "once", &[JobEvent::JobStarted { attempt: 1 }]).await;
    let gone = env.send(delete(&uri, Some(&tok))).await;
    assert_eq!(gone.status, StatusCode::ACCEPTED, "{}", gone.body);
    assert_eq!(
        (&gone.body["name"], &gone.body["deleted"]),
        (&json!("once"), &json!(true))
    );
    get_job(&env, ALICE, "once").await.assert_problem(
        "get after delete",
        StatusCode::NOT_FOUND,
        "not-found",
    );
    assert_refused(
        &env,
        "delete again",
        delete(&uri, Some(&tok)),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
    let again = post_job(&env, ALICE, &body).await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{}", again.body);
    assert_eq!(again.body["status"], "Pending");
    let types: Vec<String> =
        sqlx::query_scalar("select type from events where stream = $1 order by version")
            .bind(job_stream(ALICE, "once"))
            .fetch_all(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(
        types,
        ["JobRequested", "JobStarted", "JobDeleted", "JobRequested"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_jobs_are_not_found_and_nothing_is_written() {
    let env = Env::new().await;
    uploaded(&env, ALICE, "report").await;
    let body = json!({ "name": "once", "function": "report" });
    assert_eq!(
        post_job(&env, ALICE, &body).await.status,
        StatusCode::ACCEPTED
    );
    let alice_ns = ns(ALICE);
    let bob = token(BOB);
    let one = job_uri(&alice_ns, "once");
    for (what, req) in [
        (
            "create",
            post_json(
                &jobs_uri(&alice_ns),
                Some(&bob),
                &json!({ "name": "two", "function": "report" }).to_string(),
            ),
        ),
        ("get", get(&one, Some(&bob))),
        ("delete", delete(&one, Some(&bob))),
    ] {
        assert_refused(&env, what, req, StatusCode::NOT_FOUND, "not-found", None).await;
    }
    // Bob's own namespace has no function of that name: nothing to run.
    let own = post_job(&env, BOB, &body).await;
    own.assert_problem(
        "bob's own",
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_create_with_its_idempotency_key_runs_once() {
    let env = Env::new().await;
    uploaded(&env, ALICE, "report").await;
    let req = || {
        request(Method::POST, &jobs_uri(&ns(ALICE)), Some(&token(ALICE)))
            .header(header::CONTENT_TYPE, "application/json")
            .header("idempotency-key", "job-once-1")
            .body(axum::body::Body::from(
                json!({ "name": "once", "function": "report" }).to_string(),
            ))
            .unwrap()
    };
    let first = env.send(req()).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    let counts = env.counts().await;
    let second = env.send(req()).await;
    assert_eq!(second.status, StatusCode::ACCEPTED, "{}", second.body);
    assert_eq!(second.body, first.body);
    assert_eq!(
        second.headers[header::LOCATION],
        first.headers[header::LOCATION]
    );
    assert_eq!(env.counts().await, counts, "the retry wrote nothing");
}
