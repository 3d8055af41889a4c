//! A token acts in its own namespace only; any other namespace answers 404
//! as if it did not exist, and an admin token may act in any.

use axum::http::StatusCode;
use serde_json::json;

use super::requests::{delete, put_json, source_uri};
use super::support::*;

const ALICE: &str = "alice@example.com";
const BOB: &str = "bob@example.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_namespace_is_404_for_every_route_and_writes_nothing() {
    let env = Env::new().await;
    let created = env.create(ALICE, "hello").await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    env.catch_up().await;
    let before = env.counts().await;

    let (alice_ns, bob) = (ns(ALICE), token(BOB));
    let zip = handler_zip("hi");
    let attempts = [
        ("list", get(&functions_uri(&alice_ns), Some(&bob))),
        ("get", get(&function_uri(&alice_ns, "hello"), Some(&bob))),
        (
            "get of a name that does not exist",
            get(&function_uri(&alice_ns, "nope"), Some(&bob)),
        ),
        (
            "create",
            post_json(
                &functions_uri(&alice_ns),
                Some(&bob),
                &spec("sneaky").to_string(),
            ),
        ),
        (
            "create of the same name",
            post_json(
                &functions_uri(&alice_ns),
                Some(&bob),
                &spec("hello").to_string(),
            ),
        ),
        (
            "upload",
            post_zip(
                &upload_uri(&alice_ns, "hello"),
                Some(&bob),
                zip.clone(),
                ZIP,
            ),
        ),
        (
            "update",
            put_json(
                &function_uri(&alice_ns, "hello"),
                Some(&bob),
                r#"{"memory_mb": 256}"#,
            ),
        ),
        (
            "delete",
            delete(&function_uri(&alice_ns, "hello"), Some(&bob)),
        ),
        ("source", get(&source_uri(&alice_ns, "hello"), Some(&bob))),
        (
            "ensure",
            post_json(&format!("/v1/namespaces/{alice_ns}/ensure"), Some(&bob), ""),
        ),
    ];
    for (what, req) in attempts {
        let answer = env.send(req).await;
        answer.assert_problem(what, StatusCode::NOT_FOUND, "not-found");
    }
    assert_eq!(env.counts().await, before, "refused requests wrote nothing");

    // 404 for a namespace that exists is indistinguishable from one that
    // does not (only the echoed name in the detail differs).
    let nobody_ns = "sless-0000000000000000";
    let existing = env.send(get(&functions_uri(&alice_ns), Some(&bob))).await;
    let missing = env.send(get(&functions_uri(nobody_ns), Some(&bob))).await;
    let mut expected = missing.body.clone();
    expected["detail"] = json!(
        missing.body["detail"]
            .as_str()
            .unwrap()
            .replace(nobody_ns, &alice_ns)
    );
    assert_eq!(existing.body, expected);
    // Not a valid namespace at all: still 404, not a 422 that echoes rules.
    let invalid = env
        .send(get(&functions_uri("Not_A_Namespace"), Some(&bob)))
        .await;
    invalid.assert_problem("invalid namespace", StatusCode::NOT_FOUND, "not-found");

    // Bob's own namespace does not show Alice's function; Alice's does.
    let bobs = env.send(get(&functions_uri(&ns(BOB)), Some(&bob))).await;
    assert_eq!(bobs.status, StatusCode::OK);
    assert_eq!(bobs.body, json!({ "items": [], "next_cursor": null }));
    let alices = env
        .send(get(&functions_uri(&alice_ns), Some(&token(ALICE))))
        .await;
    assert_eq!(alices.status, StatusCode::OK);
    assert_eq!(
        alices.body["items"].as_array().unwrap().len(),
        1,
        "{}",
        alices.body
    );
    assert_eq!(alices.body["items"][0]["name"], "hello");
    // Bob may have a function of the same name in his own namespace.
    let own = env.create(BOB, "hello").await;
    assert_eq!(own.status, StatusCode::CREATED, "{}", own.body);
    assert_eq!(own.body["namespace"], ns(BOB));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_admin_token_may_act_in_any_namespace() {
    let env = Env::new().await;
    assert_eq!(env.create(ALICE, "hello").await.status, StatusCode::CREATED);
    env.catch_up().await;
    let alice_ns = ns(ALICE);
    let exp = now() + 3600;

    let admin = sign(
        &json!({ "sub": "ops@example.com", "exp": exp, "sless_admin": true }),
        SECRET,
    );
    let list = env.send(get(&functions_uri(&alice_ns), Some(&admin))).await;
    assert_eq!(list.status, StatusCode::OK, "{}", list.body);
    let names: Vec<_> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].clone())
        .collect();
    assert_eq!(names, vec![json!("hello")]);
    let one = env
        .send(get(&function_uri(&alice_ns, "hello"), Some(&admin)))
        .await;
    assert_eq!(one.status, StatusCode::OK, "{}", one.body);
    assert_eq!(one.body["namespace"], alice_ns);

    // Anything but the JSON boolean true is not admin.
    for (what, value) in [
        ("string \"true\"", json!("true")),
        ("false", json!(false)),
        ("1", json!(1)),
    ] {
        let t = sign(
            &json!({ "sub": "ops@example.com", "exp": exp, "sless_admin": value }),
            SECRET,
        );
        let answer = env.send(get(&functions_uri(&alice_ns), Some(&t))).await;
        answer.assert_problem(what, StatusCode::NOT_FOUND, "not-found");
    }
}
