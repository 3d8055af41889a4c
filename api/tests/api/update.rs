//! `PUT .../functions/{name}`: a spec change is one event carrying the whole
//! new spec and a reconcile; a runtime change also makes the current source,
//! packed for the new runtime, the next version; no change appends nothing.

use axum::http::StatusCode;
use serde_json::{Value, json};

use sless_domain::Runtime;
use sless_domain::archive::{self, ArchiveLimits};
use sless_domain::source;

use super::requests::*;
use super::support::*;

const SUB: &str = "ivan@example.com";

async fn put(env: &Env, name: &str, body: Value) -> Answer {
    env.send(put_json(
        &function_uri(&ns(SUB), name),
        Some(&token(SUB)),
        &body.to_string(),
    ))
    .await
}

async fn created_and_uploaded(env: &Env, name: &str) {
    assert_eq!(env.create(SUB, name).await.status, StatusCode::CREATED);
    let up = env.upload(SUB, name, &handler_zip("v1")).await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_change_appends_the_whole_new_spec_and_asks_for_a_redeploy() {
    let env = Env::new().await;
    let ns = ns(SUB);
    created_and_uploaded(&env, "hello").await;
    env.catch_up().await;
    // The upload's reconcile has been done.
    sqlx::query("delete from work_items")
        .execute(&env.db.pool)
        .await
        .unwrap();

    let changed = put(
        &env,
        "hello",
        json!({ "memory_mb": 256, "env_vars": { "GREETING": "hej" } }),
    )
    .await;
    assert_eq!(changed.status, StatusCode::ACCEPTED, "{}", changed.body);
    let want_spec = json!({
        "runtime": "python3.11",
        "entrypoint": "handler.handle",
        "memory_mb": 256,
        "timeout_sec": 30,
        "env_vars": { "GREETING": "hej" },
    });
    for (k, v) in want_spec.as_object().unwrap() {
        assert_eq!(&changed.body[k], v, "{k}: {}", changed.body);
    }
    assert_eq!(changed.body["phase"], "Pending", "until it is redeployed");
    assert_eq!(changed.body["status_url"], function_uri(&ns, "hello"));

    let events = env.stream(SUB, "hello").await;
    let last = events.last().unwrap();
    assert_eq!(last.event_type, "FunctionSpecChanged");
    assert_eq!(last.data, json!({ "spec": want_spec }), "the whole spec");
    assert_eq!(last.metadata["actor"], SUB);
    assert_eq!(changed.body["position"], last.position);
    assert_eq!(
        env.work_items().await,
        vec![(
            "ReconcileFunction".to_owned(),
            format!("{ns}/hello"),
            "pending".to_owned()
        )]
    );

    // Fields left out keep their values; env_vars given replaces the map.
    let again = put(&env, "hello", json!({ "timeout_sec": 60, "env_vars": {} })).await;
    assert_eq!(again.status, StatusCode::ACCEPTED, "{}", again.body);
    assert_eq!(again.body["memory_mb"], 256);
    assert_eq!(again.body["timeout_sec"], 60);
    assert_eq!(again.body["env_vars"], json!({}));

    env.catch_up().await;
    let view = env
        .send(get(&function_uri(&ns, "hello"), Some(&token(SUB))))
        .await;
    assert_eq!(view.status, StatusCode::OK);
    assert_eq!(
        (
            &view.body["memory_mb"],
            &view.body["timeout_sec"],
            &view.body["version"]
        ),
        (&json!(256), &json!(60), &json!(1)),
        "{}",
        view.body
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_that_changes_nothing_is_200_and_appends_nothing() {
    let env = Env::new().await;
    created_and_uploaded(&env, "same").await;
    let before = env.counts().await;
    for body in [
        json!({}),
        json!({ "memory_mb": 128, "timeout_sec": 30 }),
        json!({
            "name": "same", "runtime": "python3.11", "entrypoint": "handler.handle",
            "memory_mb": 128, "timeout_sec": 30, "env_vars": {}
        }),
    ] {
        let answer = put(&env, "same", body.clone()).await;
        assert_eq!(answer.status, StatusCode::OK, "{body}: {}", answer.body);
        assert_eq!(answer.body["unchanged"], true);
        assert_eq!(answer.body["version"], 1);
        assert_eq!(env.counts().await, before, "{body}: nothing written");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_change_makes_the_current_source_packed_for_it_the_next_version() {
    let env = Env::new().await;
    let ns = ns(SUB);
    created_and_uploaded(&env, "porting").await;
    let v1 = env.events_of_type(SUB, "porting", "FunctionUploaded").await[0].clone();

    let changed = put(
        &env,
        "porting",
        json!({ "runtime": "nodejs20", "entrypoint": "index.handler" }),
    )
    .await;
    assert_eq!(changed.status, StatusCode::ACCEPTED, "{}", changed.body);
    assert_eq!(changed.body["runtime"], "nodejs20");
    assert_eq!(changed.body["version"], 2, "{}", changed.body);

    let events = env.stream(SUB, "porting").await;
    let n = events.len();
    assert_eq!(events[n - 2].event_type, "FunctionSpecChanged");
    assert_eq!(events[n - 1].event_type, "FunctionUploaded");
    assert_eq!(changed.body["position"], events[n - 1].position);
    let v2 = &events[n - 1].data;
    assert_eq!(v2["version"], 2);
    for same in ["sha256", "size", "files", "zip_key"] {
        assert_eq!(v2[same], v1[same], "{same}: the same source");
    }
    assert_ne!(v2["context_sha256"], v1["context_sha256"]);

    // The new context is the old one's files packed for the new runtime
    // (contexts are deterministic: byte for byte).
    let blobs = env.s3.blobs();
    let old = blobs
        .get(v1["context_key"].as_str().unwrap())
        .await
        .unwrap();
    let new = blobs
        .get(v2["context_key"].as_str().unwrap())
        .await
        .unwrap();
    let files = source::read_context(&old, &ArchiveLimits::default()).unwrap();
    assert_eq!(
        files.files.len(),
        2,
        "handler.py and lib/util.py, no Dockerfile"
    );
    assert_eq!(new, files.build_context(Runtime::Nodejs20));
    assert_eq!(old, files.build_context(Runtime::Python311));
    assert_ne!(
        new,
        archive::build_context(Runtime::Python311, &files.files)
    );
    assert_eq!(sha256_hex(&new), v2["context_sha256"].as_str().unwrap());
    // Stored ahead of its event like an upload's blobs; landed by the commit.
    assert!(env.blobs_in_flight().await.is_empty());

    // The source route shows the new version, same files.
    let source = env
        .send(get(&source_uri(&ns, "porting"), Some(&token(SUB))))
        .await;
    assert_eq!(source.status, StatusCode::OK, "{}", source.body);
    assert_eq!(source.body["version"], 2);

    // The same zip again is no new upload: version 2 has it, for nodejs20.
    let same = env.upload(SUB, "porting", &handler_zip("v1")).await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.body);
    assert_eq!(same.body["version"], 2);

    // Back to python: version 3, whose context is version 1's, byte for byte.
    let back = put(
        &env,
        "porting",
        json!({ "runtime": "python3.11", "entrypoint": "handler.handle" }),
    )
    .await;
    assert_eq!(back.status, StatusCode::ACCEPTED, "{}", back.body);
    let v3 = env.events_of_type(SUB, "porting", "FunctionUploaded").await[2].clone();
    assert_eq!(v3["version"], 3);
    assert_eq!(v3["context_key"], v1["context_key"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_runtime_change_before_any_upload_only_changes_the_spec() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "early").await.status, StatusCode::CREATED);
    let answer = put(
        &env,
        "early",
        json!({ "runtime": "go1.23", "entrypoint": "handler.Handle" }),
    )
    .await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    let types: Vec<_> = env
        .stream(SUB, "early")
        .await
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(types, ["FunctionCreated", "FunctionSpecChanged"]);
    assert_eq!(
        env.s3.blobs().list("").await.unwrap().len(),
        0,
        "nothing to repack"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spec_change_with_an_idempotency_key_is_applied_once() {
    let env = Env::new().await;
    created_and_uploaded(&env, "once").await;
    let req = || {
        let mut r = put_json(
            &function_uri(&ns(SUB), "once"),
            Some(&token(SUB)),
            &json!({ "memory_mb": 512 }).to_string(),
        );
        r.headers_mut()
            .insert("idempotency-key", "put-once-1".parse().unwrap());
        r
    };
    let first = env.send(req()).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    let after_first = env.counts().await;
    let retry = env.send(req()).await;
    assert_eq!(retry.status, StatusCode::ACCEPTED);
    assert_eq!(retry.body, first.body, "the original answer");
    assert_eq!(env.counts().await, after_first, "nothing new");
    assert_eq!(
        env.events_of_type(SUB, "once", "FunctionSpecChanged")
            .await
            .len(),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn changing_a_missing_or_deleted_function_is_404_and_writes_nothing() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    let body = json!({ "memory_mb": 256 }).to_string();
    assert_refused(
        &env,
        "missing",
        put_json(&function_uri(&ns, "ghost"), Some(&tok), &body),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
    assert_eq!(env.create(SUB, "gone").await.status, StatusCode::CREATED);
    let deleted = env
        .send(delete(&function_uri(&ns, "gone"), Some(&tok)))
        .await;
    assert_eq!(deleted.status, StatusCode::ACCEPTED, "{}", deleted.body);
    assert_refused(
        &env,
        "deleted",
        put_json(&function_uri(&ns, "gone"), Some(&tok), &body),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
}
