//! Per-namespace quotas (`sless_api::plumbing::quota`): one more than a quota allows
//! gets a `quota-exceeded` problem that names it and writes nothing (no
//! event, no work item, no idempotency answer, no blob); up to the limit
//! requests succeed; concurrent requests at the edge get exactly the
//! quota; what a namespace gives up frees its place; the upload rate opens
//! again once its window has passed, as every API replica sees it.

use std::collections::BTreeSet;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use serde_json::{Value, json};
use sless_api::plumbing::quota::{Quota, Quotas};
use sless_api::{AppState, Auth};

use super::requests::*;
use super::support::*;

const ALICE: &str = "alice-quotas@example.com";
const BOB: &str = "bob-quotas@example.com";

/// The API over `env`'s database and bucket with `quotas`, keeping
/// `keep_versions` versions per function besides the live one.
fn app(env: &Env, quotas: Quotas, keep_versions: usize) -> Router {
    let mut state = AppState::new(
        env.db.pool.clone(),
        env.s3.blobs(),
        Auth::hs256(SECRET, None, None),
    );
    state.quotas = quotas;
    state.keep_versions = keep_versions;
    sless_api::router(state)
}

/// An `Env` whose API has one quota, `quota` at `limit`.
async fn env_with(quota: Quota, limit: u64) -> Env {
    let mut quotas = Quotas::UNLIMITED;
    quotas.set(quota, Some(limit));
    let mut env = Env::new().await;
    env.app = app(&env, quotas, sless_api::DEFAULT_KEEP_VERSIONS);
    env
}

fn admin_token() -> String {
    sign(
        &json!({ "sub": "ops-quotas@example.com", "exp": now() + 3600, "sless_admin": true }),
        SECRET,
    )
}

fn with_key(mut req: Request<Body>, key: &str) -> Request<Body> {
    req.headers_mut()
        .insert("idempotency-key", key.parse().unwrap());
    req
}

/// The zip of the `i`-th upload of a case: every one a new version.
fn version_zip(i: usize) -> Vec<u8> {
    handler_zip(&format!("version {i}"))
}

/// A stored-bytes limit that three of the first `n` zips fit in, and no
/// four (their sizes differ by a few bytes at most).
fn three_zips(n: usize) -> u64 {
    3 * (0..n).map(|i| version_zip(i).len() as u64).max().unwrap()
}

fn limit_of(quota: Quota, three: u64, zips: usize) -> u64 {
    match quota {
        Quota::StoredBytes => three_zips(zips),
        _ => three,
    }
}

/// The quotas that count what a namespace has: every one but
/// `instances`, a bound on one setting (its own test).
const COUNTED: [Quota; 6] = [
    Quota::Functions,
    Quota::Versions,
    Quota::StoredBytes,
    Quota::Triggers,
    Quota::RunningJobs,
    Quota::UploadsPerMinute,
];

/// The `i`-th request of a quota's case: a function `f-{i}`, an upload to
/// function `f-{i}`, a trigger `t-{i}` or a job `j-{i}` of function `base`.
fn make(quota: Quota, sub: &str, tok: &str, i: usize) -> Request<Body> {
    let ns = ns(sub);
    match quota {
        Quota::Functions => post_json(
            &functions_uri(&ns),
            Some(tok),
            &spec(&format!("f-{i}")).to_string(),
        ),
        Quota::Versions | Quota::StoredBytes | Quota::UploadsPerMinute => post_zip(
            &upload_uri(&ns, &format!("f-{i}")),
            Some(tok),
            version_zip(i),
            ZIP,
        ),
        Quota::Triggers => post_json(
            &format!("/v1/namespaces/{ns}/triggers"),
            Some(tok),
            &json!({ "name": format!("t-{i}"), "function": "base", "type": "http" }).to_string(),
        ),
        Quota::RunningJobs => post_json(
            &format!("/v1/namespaces/{ns}/jobs"),
            Some(tok),
            &json!({ "name": format!("j-{i}"), "function": "base" }).to_string(),
        ),
        Quota::Instances => unreachable!("not counted"),
    }
}

/// What `n` requests of a case need first in `sub`'s namespace: functions
/// to upload to, or a function `base` (with a version, for jobs).
async fn prepare(env: &Env, quota: Quota, sub: &str, n: usize) {
    let created = |a: Answer| assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    match quota {
        Quota::Functions => {}
        Quota::Versions | Quota::StoredBytes | Quota::UploadsPerMinute => {
            for i in 0..n {
                created(env.create(sub, &format!("f-{i}")).await);
            }
        }
        Quota::Triggers => created(env.create(sub, "base").await),
        Quota::RunningJobs => {
            created(env.create(sub, "base").await);
            let up = env.upload(sub, "base", &handler_zip("base")).await;
            assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
        }
        Quota::Instances => unreachable!("not counted"),
    }
}

/// Gives up what the first request of a case made.
async fn free_one(env: &Env, quota: Quota, sub: &str) {
    let (ns, tok) = (ns(sub), token(sub));
    let uri = match quota {
        Quota::Functions | Quota::Versions | Quota::StoredBytes => function_uri(&ns, "f-0"),
        Quota::Triggers => format!("/v1/namespaces/{ns}/triggers/t-0"),
        Quota::RunningJobs => {
            // No worker runs here: its acker's part, once job j-0 has ended.
            let done = sqlx::query("delete from work_items where kind = 'RunJob' and key = $1")
                .bind(format!("job/{ns}/j-0"))
                .execute(&env.db.pool)
                .await
                .unwrap();
            assert_eq!(done.rows_affected(), 1);
            return;
        }
        Quota::UploadsPerMinute => unreachable!("time frees it"),
        Quota::Instances => unreachable!("not counted"),
    };
    let gone = env.send(delete(&uri, Some(&tok))).await;
    assert_eq!(gone.status, StatusCode::ACCEPTED, "{}", gone.body);
}

/// The events that say a request of the case was made.
async fn made(env: &Env, quota: Quota, sub: &str) -> i64 {
    let event_type = match quota {
        Quota::Functions => "FunctionCreated",
        Quota::Versions | Quota::StoredBytes | Quota::UploadsPerMinute => "FunctionUploaded",
        Quota::Triggers => "TriggerCreated",
        Quota::RunningJobs => "JobRequested",
        Quota::Instances => unreachable!("not counted"),
    };
    sqlx::query_scalar("select count(*) from events where namespace = $1 and type = $2")
        .bind(ns(sub))
        .bind(event_type)
        .fetch_one(&env.db.pool)
        .await
        .unwrap()
}

/// Asserts the problem of a request past `quota`: 409 (429 with
/// `Retry-After` for the upload rate), `quota-exceeded`, with `quota`,
/// `limit` and `used`, and a detail that names the setting and its value.
#[track_caller]
fn assert_exceeded(a: &Answer, what: &str, quota: Quota, limit: u64, used: Option<u64>) {
    let status = match quota {
        Quota::UploadsPerMinute => StatusCode::TOO_MANY_REQUESTS,
        _ => StatusCode::CONFLICT,
    };
    a.assert_problem(what, status, "quota-exceeded");
    assert_eq!(a.body["quota"], quota.name(), "{what}: {}", a.body);
    assert_eq!(a.body["limit"], limit, "{what}: {}", a.body);
    if let Some(used) = used {
        assert_eq!(a.body["used"], used, "{what}: {}", a.body);
    }
    let detail = a.body["detail"].as_str().unwrap();
    assert!(
        detail.contains(&format!("the quota {} is {limit}", quota.setting())),
        "{what}: {detail}"
    );
    assert!(detail.contains(&ns(ALICE)), "{what}: {detail}");
    let retry_after = a
        .headers
        .get(header::RETRY_AFTER)
        .map(|v| v.to_str().unwrap().parse::<u64>().unwrap());
    match quota {
        Quota::UploadsPerMinute => {
            let secs = retry_after.expect("a rate says when to retry");
            assert!((1..=60).contains(&secs), "{what}: Retry-After {secs}");
        }
        _ => assert_eq!(retry_after, None, "{what}: a count is no matter of time"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_more_than_a_quota_allows_is_refused_naming_it_and_writes_nothing() {
    const N: usize = 3;
    let admin = admin_token();
    for quota in COUNTED {
        let what = quota.name();
        let limit = limit_of(quota, N as u64, N + 1);
        let env = env_with(quota, limit).await;
        prepare(&env, quota, ALICE, N + 1).await;
        let tok = token(ALICE);
        for i in 0..N {
            let a = env.send(make(quota, ALICE, &tok, i)).await;
            assert!(
                a.status.is_success(),
                "{what}: request {} of {N}, within the quota: {} {}",
                i + 1,
                a.status,
                a.body
            );
        }
        let used = match quota {
            Quota::StoredBytes => (0..N).map(|i| version_zip(i).len() as u64).sum(),
            _ => N as u64,
        };

        let over = || with_key(make(quota, ALICE, &tok, N), "one-more");
        let before = env.counts().await;
        let refused = env.send(over()).await;
        assert_exceeded(&refused, what, quota, limit, Some(used));
        assert_eq!(env.counts().await, before, "{what}: nothing written");
        let by_admin = env.send(make(quota, ALICE, &admin, N)).await;
        assert_exceeded(
            &by_admin,
            &format!("{what} (admin)"),
            quota,
            limit,
            Some(used),
        );
        assert_eq!(
            env.counts().await,
            before,
            "{what} (admin): nothing written"
        );
        assert_eq!(made(&env, quota, ALICE).await, N as i64, "{what}");

        // Another namespace has quotas of its own.
        prepare(&env, quota, BOB, 1).await;
        let bob = env.send(make(quota, BOB, &token(BOB), 0)).await;
        assert!(
            bob.status.is_success(),
            "{what}: {} {}",
            bob.status,
            bob.body
        );

        if quota == Quota::UploadsPerMinute {
            continue; // time frees it: the_upload_rate_opens_again_once_its_window_has_passed
        }
        // Once a place is free, the refused request retried with its key
        // succeeds: the refusal left no answer to replay.
        free_one(&env, quota, ALICE).await;
        let retried = env.send(over()).await;
        assert!(
            retried.status.is_success(),
            "{what}: retried after a place was freed: {} {}",
            retried.status,
            retried.body
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_requests_at_a_quotas_edge_get_exactly_the_quota() {
    const N: usize = 3;
    const SENT: usize = 8;
    for quota in COUNTED {
        let what = quota.name();
        let limit = limit_of(quota, N as u64, SENT);
        let env = env_with(quota, limit).await;
        prepare(&env, quota, ALICE, SENT).await;
        let tok = token(ALICE);
        let sent: Vec<_> = (0..SENT)
            .map(|i| {
                let (app, req) = (env.app.clone(), make(quota, ALICE, &tok, i));
                tokio::spawn(async move { send(&app, req).await })
            })
            .collect();
        let mut answers = Vec::new();
        for a in sent {
            answers.push(a.await.unwrap());
        }
        let (accepted, refused): (Vec<_>, Vec<_>) =
            answers.iter().partition(|a| a.status.is_success());
        let statuses: Vec<_> = answers.iter().map(|a| a.status).collect();
        assert_eq!(accepted.len(), N, "{what}: {statuses:?}");
        for a in refused {
            assert_exceeded(a, what, quota, limit, None);
        }
        assert_eq!(made(&env, quota, ALICE).await, N as i64, "{what}");

        // An upload that lost the race after storing its blobs hands them
        // to the collector: every blob is a kept version's or is collected.
        let kept: BTreeSet<String> = sqlx::query_scalar(
            "select k from events, lateral (values (data->>'zip_key'), (data->>'context_key')) v(k)
             where type = 'FunctionUploaded'",
        )
        .fetch_all(&env.db.pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
        let collected: BTreeSet<String> =
            sqlx::query_scalar("select payload->>'key' from work_items where kind = 'CollectBlob'")
                .fetch_all(&env.db.pool)
                .await
                .unwrap()
                .into_iter()
                .collect();
        for blob in env.s3.blobs().list("blobs/").await.unwrap() {
            assert!(
                kept.contains(&blob) || collected.contains(&blob),
                "{what}: {blob} is left behind"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_that_retention_prunes_one_for_takes_no_more_of_the_quota() {
    let mut quotas = Quotas::UNLIMITED;
    quotas.versions = Some(2);
    quotas.stored_bytes = Some(2 * (0..4).map(|i| version_zip(i).len() as u64).max().unwrap());
    let mut env = Env::new().await;
    // Retention keeps two versions of a function.
    env.app = app(&env, quotas, 2);
    assert_eq!(env.create(ALICE, "f").await.status, StatusCode::CREATED);
    for i in 0..3 {
        let up = env.upload(ALICE, "f", &version_zip(i)).await;
        assert_eq!(up.status, StatusCode::ACCEPTED, "upload {i}: {}", up.body);
    }
    assert_eq!(
        env.events_of_type(ALICE, "f", "VersionsPruned").await,
        [json!({ "versions": [1] })]
    );
    assert_eq!(env.create(ALICE, "g").await.status, StatusCode::CREATED);
    let before = env.counts().await;
    let refused = env.upload(ALICE, "g", &version_zip(3)).await;
    assert_exceeded(&refused, "g's first", Quota::Versions, 2, Some(2));
    assert_eq!(env.counts().await, before, "nothing written");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_change_past_the_versions_quota_is_refused_and_stores_nothing() {
    let env = env_with(Quota::Versions, 1).await;
    assert_eq!(env.create(ALICE, "f").await.status, StatusCode::CREATED);
    let up = env.upload(ALICE, "f", &version_zip(0)).await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
    let uri = function_uri(&ns(ALICE), "f");
    let tok = token(ALICE);
    let change = json!({ "runtime": "nodejs20", "entrypoint": "index.handler" }).to_string();
    let before = env.counts().await;
    let refused = env.send(put_json(&uri, Some(&tok), &change)).await;
    assert_exceeded(&refused, "runtime change", Quota::Versions, 1, Some(1));
    assert_eq!(
        env.counts().await,
        before,
        "no event, no build context stored"
    );
    // A change that makes no version is not held to it.
    let memory = json!({ "memory_mb": 256 }).to_string();
    let changed = env.send(put_json(&uri, Some(&tok), &memory)).await;
    assert_eq!(changed.status, StatusCode::ACCEPTED, "{}", changed.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upload_rate_opens_again_once_its_window_has_passed() {
    const WINDOW: Duration = Duration::from_secs(2);
    let mut quotas = Quotas::UNLIMITED;
    quotas.uploads_per_minute = Some(2);
    quotas.upload_window = WINDOW;
    let mut env = Env::new().await;
    env.app = app(&env, quotas, sless_api::DEFAULT_KEEP_VERSIONS);
    // Another replica of the API: it counts from the same log.
    let replica = app(&env, quotas, sless_api::DEFAULT_KEEP_VERSIONS);
    prepare(&env, Quota::UploadsPerMinute, ALICE, 3).await;
    let tok = token(ALICE);
    for i in 0..2 {
        let up = env
            .send(make(Quota::UploadsPerMinute, ALICE, &tok, i))
            .await;
        assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
    }
    let before = env.counts().await;
    for (what, router) in [("this replica", &env.app), ("another replica", &replica)] {
        let refused = send(router, make(Quota::UploadsPerMinute, ALICE, &tok, 2)).await;
        assert_exceeded(&refused, what, Quota::UploadsPerMinute, 2, Some(2));
        let retry_after: u64 = refused.headers[header::RETRY_AFTER]
            .to_str()
            .unwrap()
            .parse()
            .unwrap();
        assert!(retry_after <= WINDOW.as_secs(), "{what}: {retry_after}");
    }
    assert_eq!(env.counts().await, before, "nothing written");

    // Once the database's clock has moved the first upload out of the
    // window, the next one is accepted.
    sless_testkit::eventually(
        "the first upload to leave the window",
        Duration::from_secs(15),
        || async {
            let in_window: i64 = sqlx::query_scalar(
                "select count(*) from events where namespace = $1 and type = 'FunctionUploaded'
                 and recorded_at > now() - make_interval(secs => $2)",
            )
            .bind(ns(ALICE))
            .bind(WINDOW.as_secs_f64())
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
            (in_window < 2).then_some(())
        },
    )
    .await;
    let up = send(&replica, make(Quota::UploadsPerMinute, ALICE, &tok, 2)).await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_openapi_document_names_the_quota_answers() {
    let env = Env::new().await;
    let doc = env.send(get("/openapi.json", None)).await.body;
    let ns = "/v1/namespaces/{ns}";
    for (method, path) in [
        ("post", format!("{ns}/functions")),
        ("put", format!("{ns}/functions/{{name}}")),
        ("post", format!("{ns}/functions/{{name}}/upload")),
        ("post", format!("{ns}/triggers")),
        ("post", format!("{ns}/jobs")),
    ] {
        let responses = &doc["paths"][&path][method]["responses"];
        let conflict = responses["409"]["description"].as_str().unwrap_or("");
        assert!(
            conflict.contains("quota-exceeded"),
            "{method} {path}: {conflict}"
        );
    }
    let upload = &doc["paths"][&format!("{ns}/functions/{{name}}/upload")]["post"]["responses"];
    let too_many = &upload["429"];
    assert!(
        too_many["description"]
            .as_str()
            .is_some_and(|d| d.contains("quota-exceeded")),
        "{too_many}"
    );
    assert!(
        too_many["headers"].get("Retry-After").is_some(),
        "{too_many}"
    );
    let problem: &Value = &doc["components"]["schemas"]["Problem"]["properties"];
    for member in ["quota", "limit", "used"] {
        assert!(problem.get(member).is_some(), "Problem has {member}");
    }
}

/// A function's `max_instances` (10 when left out) within its namespace's
/// instance quota: past it, created or changed, 422 naming the field and
/// the quota, and nothing written.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_instances_past_the_instance_quota_is_refused_naming_it_and_writes_nothing() {
    let env = env_with(Quota::Instances, 5).await;
    let tok = token(ALICE);
    let uri = functions_uri(&ns(ALICE));
    let create = |max: Option<u32>| {
        let mut body = spec("wide");
        if let Some(max) = max {
            body["max_instances"] = json!(max);
        }
        post_json(&uri, Some(&tok), &body.to_string())
    };
    let before = env.counts().await;
    for (what, max) in [("max_instances 6", Some(6)), ("left out: 10", None)] {
        let a = env.send(create(max)).await;
        a.assert_problem(what, StatusCode::UNPROCESSABLE_ENTITY, "invalid-field");
        assert_eq!(a.body["field"], "max_instances", "{what}: {}", a.body);
        assert_eq!(a.body["quota"], "instances", "{what}: {}", a.body);
        assert_eq!(a.body["limit"], 5, "{what}: {}", a.body);
        let detail = a.body["detail"].as_str().unwrap();
        assert!(detail.contains("SLESS_QUOTA_INSTANCES"), "{what}: {detail}");
        assert_eq!(env.counts().await, before, "{what}: nothing written");
    }
    let made = env.send(create(Some(5))).await;
    assert_eq!(made.status, StatusCode::CREATED, "{}", made.body);
    let after = env.counts().await;
    let changed = env
        .send(put_json(
            &function_uri(&ns(ALICE), "wide"),
            Some(&tok),
            &json!({ "max_instances": 6 }).to_string(),
        ))
        .await;
    changed.assert_problem(
        "changed to 6",
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
    );
    assert_eq!(changed.body["field"], "max_instances");
    assert_eq!(env.counts().await, after, "a change: nothing written");
}
