//! `DELETE .../functions/{name}`: one `FunctionDeleted` and a reconcile; the
//! function is gone from list, get and the invoke proxy; the name can be
//! created again, and its uploads go on numbering after the old ones.

use std::time::Duration;

use axum::http::StatusCode;
use serde_json::json;
use sless_store::eventlog::{self, Metadata, NewEvent};

use super::requests::*;
use super::support::*;

const SUB: &str = "judy@example.com";

async fn del(env: &Env, name: &str) -> Answer {
    env.send(delete(&function_uri(&ns(SUB), name), Some(&token(SUB))))
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_appends_one_event_asks_for_removal_and_hides_the_function() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    for name in ["doomed", "kept"] {
        assert_eq!(env.create(SUB, name).await.status, StatusCode::CREATED);
    }
    assert_eq!(
        env.upload(SUB, "doomed", &handler_zip("x")).await.status,
        StatusCode::ACCEPTED
    );
    env.catch_up().await;
    sqlx::query("delete from work_items")
        .execute(&env.db.pool)
        .await
        .unwrap();

    let answer = del(&env, "doomed").await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    let events = env.stream(SUB, "doomed").await;
    let last = events.last().unwrap();
    assert_eq!(last.event_type, "FunctionDeleted");
    assert_eq!(last.data, json!({}));
    assert_eq!(last.metadata["actor"], SUB);
    assert_eq!(answer.body["position"], last.position);
    assert_eq!(answer.body["phase"], "Deleted");
    assert_eq!(
        env.work_items().await,
        vec![(
            "ReconcileFunction".to_owned(),
            format!("{ns}/doomed"),
            "pending".to_owned()
        )],
        "a worker removes what runs"
    );

    env.catch_up().await;
    let gone = env
        .send(get(&function_uri(&ns, "doomed"), Some(&tok)))
        .await;
    gone.assert_problem("get after delete", StatusCode::NOT_FOUND, "not-found");
    let list = env.send(get(&functions_uri(&ns), Some(&tok))).await;
    let names: Vec<_> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("kept")], "{}", list.body);
    let source = env.send(get(&source_uri(&ns, "doomed"), Some(&tok))).await;
    source.assert_problem("source after delete", StatusCode::NOT_FOUND, "not-found");
    let upload = env.upload(SUB, "doomed", &handler_zip("y")).await;
    upload.assert_problem("upload after delete", StatusCode::NOT_FOUND, "not-found");

    // The read model keeps the row, marked, for the stream to go on from.
    let phase: String =
        sqlx::query_scalar("select phase from functions where namespace = $1 and name = 'doomed'")
            .bind(&ns)
            .fetch_one(&env.db.pool)
            .await
            .unwrap();
    assert_eq!(phase, "Deleted");

    // Deleting again: 404, nothing written.
    assert_refused(
        &env,
        "delete again",
        delete(&function_uri(&ns, "doomed"), Some(&tok)),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
    assert_refused(
        &env,
        "delete of a function never created",
        delete(&function_uri(&ns, "never"), Some(&tok)),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_name_created_again_numbers_its_versions_after_the_old_ones() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    assert_eq!(env.create(SUB, "phoenix").await.status, StatusCode::CREATED);
    for greeting in ["v1", "v2"] {
        let up = env.upload(SUB, "phoenix", &handler_zip(greeting)).await;
        assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
    }
    env.catch_up().await;
    assert_eq!(del(&env, "phoenix").await.status, StatusCode::ACCEPTED);
    env.catch_up().await;

    let body = json!({ "name": "phoenix", "runtime": "nodejs20", "entrypoint": "index.handler" });
    let again = env
        .send(post_json(
            &functions_uri(&ns),
            Some(&tok),
            &body.to_string(),
        ))
        .await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    assert_eq!(again.body["runtime"], "nodejs20");
    assert_eq!(
        again.body["version"],
        json!(null),
        "nothing uploaded in this life"
    );
    assert_eq!(again.body["phase"], "Pending");

    // The bytes of old version 2 are a new upload now: version 3.
    let up = env.upload(SUB, "phoenix", &handler_zip("v2")).await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
    assert_eq!(up.body["version"], 3);

    let types: Vec<_> = env
        .stream(SUB, "phoenix")
        .await
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        types,
        [
            "FunctionCreated",
            "FunctionUploaded",
            "FunctionUploaded",
            "FunctionDeleted",
            "FunctionCreated",
            "FunctionUploaded"
        ]
    );

    env.catch_up().await;
    let view = env
        .send(get(&function_uri(&ns, "phoenix"), Some(&tok)))
        .await;
    assert_eq!(view.status, StatusCode::OK, "{}", view.body);
    assert_eq!(view.body["version"], 3);
    assert_eq!(view.body["runtime"], "nodejs20");
    assert_eq!(view.body["phase"], "Pending");
    let versions: Vec<i32> = sqlx::query_scalar(
        "select version from function_versions where namespace = $1 and name = 'phoenix' order by version",
    )
    .bind(&ns)
    .fetch_all(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(versions, [1, 2, 3], "history stays unambiguous");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_with_an_idempotency_key_retried_gets_the_first_answer() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "twice").await.status, StatusCode::CREATED);
    let req = || {
        let mut r = delete(&function_uri(&ns(SUB), "twice"), Some(&token(SUB)));
        r.headers_mut()
            .insert("idempotency-key", "del-1".parse().unwrap());
        r
    };
    let first = env.send(req()).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    let before = env.counts().await;
    let retry = env.send(req()).await;
    assert_eq!(
        retry.status,
        StatusCode::ACCEPTED,
        "not a 404: {}",
        retry.body
    );
    assert_eq!(retry.body, first.body);
    assert_eq!(env.counts().await, before);
}

/// A server on loopback that answers every request with `reply`.
async fn upstream(reply: &'static str) -> String {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let app = axum::Router::new().fallback(move || async move { reply });
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    url
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_functions_invoke_url_answers_404() {
    let env = Env::new().await;
    let ns = ns(SUB);
    assert_eq!(env.create(SUB, "served").await.status, StatusCode::CREATED);
    assert_eq!(
        env.upload(SUB, "served", &handler_zip("x")).await.status,
        StatusCode::ACCEPTED
    );
    // What a worker records once version 1 runs.
    let endpoint = upstream("from the function").await;
    let stream = stream_of(SUB, "served");
    let at = env.stream(SUB, "served").await.len() as u64;
    let deployed = [
        ("BuildStarted", json!({ "version": 1 })),
        ("BuildSucceeded", json!({ "version": 1, "artifact": "dir" })),
        (
            "FunctionDeployed",
            json!({ "version": 1, "endpoint": endpoint }),
        ),
    ]
    .map(|(t, data)| NewEvent {
        event_type: t.into(),
        namespace: ns.clone(),
        data,
        metadata: Metadata {
            actor: "system:worker".into(),
            ..Default::default()
        },
    });
    let mut tx = env.db.pool.begin().await.unwrap();
    eventlog::append(&mut tx, &stream, at, &deployed)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    env.catch_up().await;
    let url = format!("/fn/{ns}/served/hi");
    let served = env.send(get(&url, None)).await;
    assert_eq!(served.status, StatusCode::OK, "{}", served.body);
    assert_eq!(served.body, json!("from the function"));

    assert_eq!(del(&env, "served").await.status, StatusCode::ACCEPTED);
    env.catch_up().await;
    // The proxy remembers an endpoint briefly; within a deadline it is 404.
    let answer = sless_testkit::eventually(
        "the invoke URL answers 404",
        Duration::from_secs(10),
        || async {
            let a = env.send(get(&url, None)).await;
            (a.status == StatusCode::NOT_FOUND).then_some(a)
        },
    )
    .await;
    answer.assert_problem("invoke after delete", StatusCode::NOT_FOUND, "not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_is_a_404_before_the_projector_applies_it() {
    let env = Env::new().await;
    let (ns, tok) = (ns(SUB), token(SUB));
    assert_eq!(env.create(SUB, "laggy").await.status, StatusCode::CREATED);
    env.catch_up().await;
    assert_eq!(del(&env, "laggy").await.status, StatusCode::ACCEPTED);
    let gone = env.send(get(&function_uri(&ns, "laggy"), Some(&tok))).await;
    gone.assert_problem(
        "get before the delete is projected",
        StatusCode::NOT_FOUND,
        "not-found",
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_right_after_a_change_waits_for_the_read_model_to_show_it() {
    let env = Env::new().await;
    let (ns, tok) = (ns(SUB), token(SUB));
    assert_eq!(env.create(SUB, "fresh").await.status, StatusCode::CREATED);
    env.catch_up().await;
    let uri = function_uri(&ns, "fresh");
    let changed = env
        .send(put_json(&uri, Some(&tok), r#"{"memory_mb": 256}"#))
        .await;
    assert_eq!(changed.status, StatusCode::ACCEPTED, "{}", changed.body);
    // The read starts before the projector applies the change; it answers
    // with the change all the same.
    let read = env.send(get(&uri, Some(&tok)));
    let (read, ()) = tokio::join!(read, env.catch_up());
    assert_eq!(read.status, StatusCode::OK, "{}", read.body);
    assert_eq!(read.body["memory_mb"], json!(256), "{}", read.body);
}
