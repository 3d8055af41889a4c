//! Create, get and list: the spec round-trips, GET works before the
//! projector has run (from the log) and after (from the read model).

use axum::http::StatusCode;
use serde_json::{Value, json};

use super::support::*;

const SUB: &str = "carol@example.com";

/// The members of a function view that describe what the user asked for
/// and where it stands.
fn described(v: &Value) -> Value {
    let keys = [
        "namespace",
        "name",
        "runtime",
        "entrypoint",
        "memory_mb",
        "timeout_sec",
        "env_vars",
        "phase",
        "version",
        "url",
    ];
    Value::Object(
        keys.iter()
            .map(|k| (k.to_string(), v[*k].clone()))
            .collect(),
    )
}

async fn read_model_rows(env: &Env) -> i64 {
    sqlx::query_scalar("select count(*) from functions")
        .fetch_one(&env.db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_answers_201_pending_and_get_and_list_show_the_function() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    let body = json!({
        "name": "hello",
        "runtime": "nodejs20",
        "entrypoint": "index.handler",
        "memory_mb": 256,
        "timeout_sec": 10,
        "env_vars": { "GREETING": "hi", "LOG_LEVEL": "debug" },
    });
    let created = env
        .send(post_json(
            &functions_uri(&ns),
            Some(&tok),
            &body.to_string(),
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.content_type(), "application/json");
    let want = json!({
        "namespace": ns,
        "name": "hello",
        "runtime": "nodejs20",
        "entrypoint": "index.handler",
        "memory_mb": 256,
        "timeout_sec": 10,
        "env_vars": { "GREETING": "hi", "LOG_LEVEL": "debug" },
        "phase": "Pending",
        "version": null,
        "url": format!("/fn/{ns}/hello"),
    });
    assert_eq!(described(&created.body), want);

    // The answer names the event that recorded it.
    let events = env.stream(SUB, "hello").await;
    assert_eq!(events.len(), 1);
    assert_eq!(events[0].event_type, "FunctionCreated");
    assert_eq!(events[0].version, 1);
    assert_eq!(events[0].namespace, ns);
    assert_eq!(
        events[0].metadata["actor"], SUB,
        "the event records who asked"
    );
    assert_eq!(created.body["position"], events[0].position);
    // Creating asks no worker for anything until there is source.
    assert_eq!(env.work_items().await, vec![]);

    // Before the projector has run, GET answers from the log.
    assert_eq!(read_model_rows(&env).await, 0, "nothing projected yet");
    let early = env.send(get(&function_uri(&ns, "hello"), Some(&tok))).await;
    assert_eq!(early.status, StatusCode::OK, "{}", early.body);
    assert_eq!(described(&early.body), want);
    // ... and the list, which reads the read model, does not show it yet.
    let early_list = env.send(get(&functions_uri(&ns), Some(&tok))).await;
    assert_eq!(early_list.body, json!({ "items": [], "next_cursor": null }));

    env.catch_up().await;
    assert_eq!(read_model_rows(&env).await, 1);
    let late = env.send(get(&function_uri(&ns, "hello"), Some(&tok))).await;
    assert_eq!(late.status, StatusCode::OK, "{}", late.body);
    assert_eq!(described(&late.body), want);
    assert!(
        late.body["created_at"].is_string(),
        "the read model's row answers: {}",
        late.body
    );

    let list = env.send(get(&functions_uri(&ns), Some(&tok))).await;
    assert_eq!(list.status, StatusCode::OK);
    let items = list.body["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{}", list.body);
    assert_eq!(described(&items[0]), want);

    // Again: 409, and nothing appended.
    let again = env
        .send(post_json(
            &functions_uri(&ns),
            Some(&tok),
            &body.to_string(),
        ))
        .await;
    again.assert_problem("create again", StatusCode::CONFLICT, "already-exists");
    // Also with a different spec: the name is what is taken.
    let other = env.create(SUB, "hello").await;
    other.assert_problem(
        "create again, other spec",
        StatusCode::CONFLICT,
        "already-exists",
    );
    assert_eq!(env.stream(SUB, "hello").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn create_fills_in_defaults_and_list_is_sorted_by_name() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    for name in ["zeta", "alpha", "mid"] {
        let a = env.create(SUB, name).await;
        assert_eq!(a.status, StatusCode::CREATED, "{name}: {}", a.body);
        assert_eq!(a.body["memory_mb"], 128, "default memory");
        assert_eq!(a.body["timeout_sec"], 30, "default timeout");
        assert_eq!(a.body["env_vars"], json!({}), "default env");
    }
    env.catch_up().await;
    let list = env.send(get(&functions_uri(&ns), Some(&tok))).await;
    let names: Vec<_> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    let mut sorted = names.clone();
    sorted.sort();
    assert_eq!(names.len(), 3, "{}", list.body);
    assert_eq!(names, sorted, "a stable order: by name");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn get_of_a_missing_or_invalid_name_is_404() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    for name in ["nope", "Not_Valid", &"a".repeat(64)] {
        let answer = env.send(get(&function_uri(&ns, name), Some(&tok))).await;
        answer.assert_problem(name, StatusCode::NOT_FOUND, "not-found");
    }
}
