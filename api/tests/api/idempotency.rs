//! `Idempotency-Key`: a retried request gets the original answer and
//! appends nothing (DESIGN §4.3), across restarts and concurrent retries.

use std::sync::Arc;

use axum::http::{Method, StatusCode, header};
use tokio::sync::Barrier;

use super::support::*;

const SUB: &str = "frank@example.com";

fn create_with_key(sub: &str, key: &str, body: &str) -> axum::http::Request<axum::body::Body> {
    request(Method::POST, &functions_uri(&ns(sub)), Some(&token(sub)))
        .header(header::CONTENT_TYPE, "application/json")
        .header("idempotency-key", key)
        .body(axum::body::Body::from(body.to_owned()))
        .unwrap()
}

fn upload_with_key(
    sub: &str,
    name: &str,
    key: &str,
    zip: &[u8],
) -> axum::http::Request<axum::body::Body> {
    request(Method::POST, &upload_uri(&ns(sub), name), Some(&token(sub)))
        .header(header::CONTENT_TYPE, ZIP)
        .header("idempotency-key", key)
        .body(axum::body::Body::from(zip.to_vec()))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_create_gets_the_original_answer_and_appends_nothing() {
    let env = Env::new().await;
    let body = spec("hello").to_string();
    let first = env.send(create_with_key(SUB, "key-1", &body)).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let after_first = env.counts().await;
    assert_eq!(after_first.events, 1);
    assert_eq!(after_first.idempotency_keys, 1);

    // Without the key, the same request is a conflict: the key is what makes
    // the retry succeed.
    let unkeyed = env
        .send(post_json(
            &functions_uri(&ns(SUB)),
            Some(&token(SUB)),
            &body,
        ))
        .await;
    unkeyed.assert_problem(
        "the same create without a key",
        StatusCode::CONFLICT,
        "already-exists",
    );

    let retry = env.send(create_with_key(SUB, "key-1", &body)).await;
    assert_eq!(retry.status, first.status);
    assert_eq!(
        retry.body, first.body,
        "the very same answer, position included"
    );
    assert_eq!(env.counts().await, after_first);

    // A restarted API (new state, new router) on the same database.
    let restarted = env.restarted();
    let after_restart = send(&restarted, create_with_key(SUB, "key-1", &body)).await;
    assert_eq!(after_restart.status, first.status);
    assert_eq!(after_restart.body, first.body);
    assert_eq!(env.counts().await, after_first);

    // The original answer stands even after the function has changed.
    assert_eq!(
        env.upload(SUB, "hello", &handler_zip("x")).await.status,
        StatusCode::ACCEPTED
    );
    let later = env.send(create_with_key(SUB, "key-1", &body)).await;
    assert_eq!((later.status, &later.body), (first.status, &first.body));

    // The same key for a different request is refused, and writes nothing.
    let before = env.counts().await;
    let other_body = spec("other").to_string();
    let reused = env.send(create_with_key(SUB, "key-1", &other_body)).await;
    reused.assert_problem(
        "key reused with another body",
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
    );
    assert_eq!(reused.field(), Some("Idempotency-Key"));
    let reused_on_upload = env
        .send(upload_with_key(SUB, "hello", "key-1", &handler_zip("y")))
        .await;
    reused_on_upload.assert_problem(
        "key reused on another route",
        StatusCode::UNPROCESSABLE_ENTITY,
        "idempotency-key-reused",
    );
    assert_eq!(env.counts().await, before);

    // Keys belong to their caller: another user's identical key is theirs.
    let bob = "bob@example.com";
    let bobs = env
        .send(create_with_key(bob, "key-1", &spec("hello").to_string()))
        .await;
    assert_eq!(bobs.status, StatusCode::CREATED, "{}", bobs.body);
    assert_eq!(bobs.body["namespace"], ns(bob));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_request_does_not_burn_its_key() {
    // A 4xx stores no answer: the client may fix the request and retry with the same key.
    let env = Env::new().await;
    let bad = env
        .send(create_with_key(SUB, "key-x", &spec("Bad_Name").to_string()))
        .await;
    bad.assert_problem(
        "bad name",
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
    );
    assert_eq!(env.counts().await.idempotency_keys, 0);
    let good = env
        .send(create_with_key(SUB, "key-x", &spec("good").to_string()))
        .await;
    assert_eq!(good.status, StatusCode::CREATED, "{}", good.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_upload_gets_the_original_answer_and_makes_one_version() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "hello").await.status, StatusCode::CREATED);
    let zip = handler_zip("v1");
    let first = env.send(upload_with_key(SUB, "hello", "up-1", &zip)).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    assert_eq!(first.body["version"], 1);
    let after = env.counts().await;

    for app in [env.app.clone(), env.restarted()] {
        let retry = send(&app, upload_with_key(SUB, "hello", "up-1", &zip)).await;
        assert_eq!(
            retry.status,
            StatusCode::ACCEPTED,
            "the original status, not 200 unchanged: {}",
            retry.body
        );
        assert_eq!(retry.body, first.body);
    }
    assert_eq!(env.counts().await, after);
    let versions: Vec<_> = env
        .events_of_type(SUB, "hello", "FunctionUploaded")
        .await
        .iter()
        .map(|d| d["version"].clone())
        .collect();
    assert_eq!(versions, vec![serde_json::json!(1)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_identical_creates_with_one_key_get_one_answer_and_one_event() {
    let env = Arc::new(Env::new().await);
    // Several rounds, to give the race many chances to show.
    for round in 0..8 {
        let name = format!("race-{round}");
        let key = format!("race-key-{round}");
        let body = spec(&name).to_string();
        let barrier = Arc::new(Barrier::new(2));
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let (env, barrier, key, body) =
                    (env.clone(), barrier.clone(), key.clone(), body.clone());
                tokio::spawn(async move {
                    let req = create_with_key(SUB, &key, &body);
                    barrier.wait().await;
                    env.send(req).await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        for a in &answers {
            assert_eq!(
                a.status,
                StatusCode::CREATED,
                "round {round}: both get the original answer: {}",
                a.body
            );
        }
        assert_eq!(answers[0].body, answers[1].body, "round {round}");
        let created = env.events_of_type(SUB, &name, "FunctionCreated").await;
        assert_eq!(created.len(), 1, "round {round}: one FunctionCreated");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_identical_uploads_with_one_key_get_one_answer_and_one_version() {
    let env = Arc::new(Env::new().await);
    for round in 0..6 {
        let name = format!("up-race-{round}");
        assert_eq!(env.create(SUB, &name).await.status, StatusCode::CREATED);
        let key = format!("up-race-key-{round}");
        let zip = handler_zip(&format!("round {round}"));
        let barrier = Arc::new(Barrier::new(2));
        let tasks: Vec<_> = (0..2)
            .map(|_| {
                let (env, barrier, name, key, zip) = (
                    env.clone(),
                    barrier.clone(),
                    name.clone(),
                    key.clone(),
                    zip.clone(),
                );
                tokio::spawn(async move {
                    let req = upload_with_key(SUB, &name, &key, &zip);
                    barrier.wait().await;
                    env.send(req).await
                })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }
        for a in &answers {
            // Neither a 409 (the loser's stale append) nor a 200 "unchanged"
            // (the loser reading the winner's version): the original 202.
            assert_eq!(a.status, StatusCode::ACCEPTED, "round {round}: {}", a.body);
        }
        assert_eq!(answers[0].body, answers[1].body, "round {round}");
        let uploaded = env.events_of_type(SUB, &name, "FunctionUploaded").await;
        assert_eq!(uploaded.len(), 1, "round {round}: one version");
    }
}
