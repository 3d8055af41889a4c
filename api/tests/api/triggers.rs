//! `/v1/namespaces/{ns}/triggers`: create, get, toggle, delete; the events
//! they append and the reconciles an http trigger asks for.

use axum::http::{StatusCode, header};
use serde_json::{Value, json};

use super::requests::*;
use super::support::*;

const ALICE: &str = "alice-triggers@example.com";
const BOB: &str = "bob-triggers@example.com";

fn triggers_uri(ns: &str) -> String {
    format!("/v1/namespaces/{ns}/triggers")
}

fn trigger_uri(ns: &str, name: &str) -> String {
    format!("/v1/namespaces/{ns}/triggers/{name}")
}

fn cron(name: &str, function: &str) -> Value {
    json!({
        "name": name, "function": function, "type": "cron",
        "schedule": "0 3 * * *", "timezone": "Europe/Berlin"
    })
}

fn http(name: &str, function: &str) -> Value {
    json!({ "name": name, "function": function, "type": "http" })
}

async fn post_trigger(env: &Env, sub: &str, body: &Value) -> Answer {
    env.send(post_json(
        &triggers_uri(&ns(sub)),
        Some(&token(sub)),
        &body.to_string(),
    ))
    .await
}

async fn toggle(env: &Env, sub: &str, name: &str, enabled: bool) -> Answer {
    env.send(patch_json(
        &trigger_uri(&ns(sub), name),
        Some(&token(sub)),
        &json!({ "enabled": enabled }).to_string(),
    ))
    .await
}

/// The types of a trigger's events, in order.
async fn trigger_events(env: &Env, sub: &str, name: &str) -> Vec<String> {
    sqlx::query_scalar("select type from events where stream = $1 order by version")
        .bind(format!("trigger/{}/{name}", ns(sub)))
        .fetch_all(&env.db.pool)
        .await
        .unwrap()
}

async fn reconciles(env: &Env) -> Vec<String> {
    env.work_items()
        .await
        .into_iter()
        .filter(|(kind, _, _)| kind == "ReconcileFunction")
        .map(|(_, key, _)| key)
        .collect()
}

async fn clear_work(env: &Env) {
    sqlx::query("delete from work_items")
        .execute(&env.db.pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_trigger_is_created_with_its_next_tick_and_its_name_is_then_taken() {
    let env = Env::new().await;
    let ns = ns(ALICE);
    assert_eq!(
        env.create(ALICE, "report").await.status,
        StatusCode::CREATED
    );
    let before = env.counts().await;
    let created = post_trigger(&env, ALICE, &cron("nightly", "report")).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(
        created.headers[header::LOCATION],
        trigger_uri(&ns, "nightly").as_str()
    );
    let t = &created.body;
    assert_eq!(
        (&t["name"], &t["function"], &t["type"], &t["enabled"]),
        (
            &json!("nightly"),
            &json!("report"),
            &json!("cron"),
            &json!(true)
        )
    );
    assert_eq!(
        (&t["schedule"], &t["timezone"]),
        (&json!("0 3 * * *"), &json!("Europe/Berlin"))
    );
    assert_eq!(t["runs"], json!([]));
    let next: chrono::DateTime<chrono::FixedOffset> = t["next_run_at"]
        .as_str()
        .expect("next_run_at")
        .parse()
        .unwrap();
    // 03:00 in Berlin is 01:00 or 02:00 UTC, within a day.
    let utc = next.with_timezone(&chrono::Utc);
    assert!(
        ["01:00:00", "02:00:00"].contains(&utc.format("%H:%M:%S").to_string().as_str()),
        "{next}"
    );
    let ahead = utc - chrono::Utc::now();
    assert!(
        ahead > chrono::Duration::zero() && ahead <= chrono::Duration::days(1),
        "{next}"
    );
    assert_eq!(
        trigger_events(&env, ALICE, "nightly").await,
        ["TriggerCreated"]
    );
    let after = env.counts().await;
    assert_eq!(after.events, before.events + 1);
    assert_eq!(
        after.work_items,
        before.work_items + 1,
        "a cron trigger reconciles its function (its CronJob)"
    );

    let got = env
        .send(get(&trigger_uri(&ns, "nightly"), Some(&token(ALICE))))
        .await;
    assert_eq!(got.status, StatusCode::OK, "{}", got.body);
    for member in [
        "name",
        "function",
        "type",
        "schedule",
        "timezone",
        "enabled",
        "next_run_at",
    ] {
        assert_eq!(got.body[member], t[member], "{member}");
    }
    assert!(got.body["created_at"].is_string(), "{}", got.body);

    let again = assert_refused(
        &env,
        "the same name again",
        post_json(
            &triggers_uri(&ns),
            Some(&token(ALICE)),
            &http("nightly", "report").to_string(),
        ),
        StatusCode::CONFLICT,
        "already-exists",
        None,
    )
    .await;
    assert!(again.body["detail"].as_str().unwrap().contains("nightly"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_of_a_function_that_does_not_exist_is_refused() {
    let env = Env::new().await;
    let uri = triggers_uri(&ns(ALICE));
    let tok = token(ALICE);
    assert_refused(
        &env,
        "no such function",
        post_json(&uri, Some(&tok), &cron("nightly", "ghost").to_string()),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
        Some("function"),
    )
    .await;
    // Nor one that was deleted.
    assert_eq!(env.create(ALICE, "ghost").await.status, StatusCode::CREATED);
    let gone = env
        .send(delete(&function_uri(&ns(ALICE), "ghost"), Some(&tok)))
        .await;
    assert_eq!(gone.status, StatusCode::ACCEPTED);
    assert_refused(
        &env,
        "a deleted function",
        post_json(&uri, Some(&tok), &http("web", "ghost").to_string()),
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
        Some("function"),
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn toggling_to_the_state_it_is_in_appends_nothing() {
    let env = Env::new().await;
    assert_eq!(
        env.create(ALICE, "report").await.status,
        StatusCode::CREATED
    );
    let created = post_trigger(&env, ALICE, &cron("nightly", "report")).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);

    let same = toggle(&env, ALICE, "nightly", true).await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.body);
    assert_eq!(
        (&same.body["enabled"], &same.body["unchanged"]),
        (&json!(true), &json!(true))
    );
    assert_eq!(
        trigger_events(&env, ALICE, "nightly").await,
        ["TriggerCreated"]
    );

    let off = toggle(&env, ALICE, "nightly", false).await;
    assert_eq!(off.status, StatusCode::OK, "{}", off.body);
    assert_eq!(off.body["enabled"], false);
    assert_eq!(
        off.body["next_run_at"],
        Value::Null,
        "a disabled trigger has no next tick"
    );
    assert!(off.body.get("unchanged").is_none(), "{}", off.body);
    let off_again = toggle(&env, ALICE, "nightly", false).await;
    assert_eq!(off_again.status, StatusCode::OK);
    assert_eq!(off_again.body["unchanged"], true);
    assert_eq!(
        trigger_events(&env, ALICE, "nightly").await,
        ["TriggerCreated", "TriggerToggled"]
    );
    let got = env
        .send(get(
            &trigger_uri(&ns(ALICE), "nightly"),
            Some(&token(ALICE)),
        ))
        .await;
    assert_eq!(got.body["enabled"], false, "{}", got.body);

    let on = toggle(&env, ALICE, "nightly", true).await;
    assert_eq!(on.body["enabled"], true);
    assert!(on.body["next_run_at"].is_string(), "{}", on.body);
    assert_eq!(trigger_events(&env, ALICE, "nightly").await.len(), 3);

    let missing = toggle(&env, ALICE, "nobody", false).await;
    missing.assert_problem("toggle of no trigger", StatusCode::NOT_FOUND, "not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_asks_for_a_reconcile_of_its_function_whenever_it_changes() {
    let env = Env::new().await;
    let key = format!("{}/hello", ns(ALICE));
    assert_eq!(env.create(ALICE, "hello").await.status, StatusCode::CREATED);
    clear_work(&env).await;

    let created = post_trigger(&env, ALICE, &http("web", "hello")).await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    assert_eq!(created.body["schedule"], Value::Null);
    assert!(created.body.get("runs").is_none(), "{}", created.body);
    assert_eq!(reconciles(&env).await, std::slice::from_ref(&key), "create");

    clear_work(&env).await;
    assert_eq!(
        toggle(&env, ALICE, "web", false).await.status,
        StatusCode::OK
    );
    assert_eq!(
        reconciles(&env).await,
        std::slice::from_ref(&key),
        "disable"
    );

    clear_work(&env).await;
    assert_eq!(
        toggle(&env, ALICE, "web", false).await.status,
        StatusCode::OK
    );
    assert_eq!(
        reconciles(&env).await,
        Vec::<String>::new(),
        "no change, no work"
    );

    let gone = env
        .send(delete(&trigger_uri(&ns(ALICE), "web"), Some(&token(ALICE))))
        .await;
    assert_eq!(gone.status, StatusCode::ACCEPTED, "{}", gone.body);
    assert_eq!(reconciles(&env).await, std::slice::from_ref(&key), "delete");

    // A cron trigger's changes too (a driver may run it as a CronJob).
    clear_work(&env).await;
    assert_eq!(
        post_trigger(&env, ALICE, &cron("tick", "hello"))
            .await
            .status,
        StatusCode::CREATED
    );
    assert_eq!(reconciles(&env).await, std::slice::from_ref(&key), "cron");
    clear_work(&env).await;
    assert_eq!(
        toggle(&env, ALICE, "tick", false).await.status,
        StatusCode::OK
    );
    assert_eq!(
        reconciles(&env).await,
        std::slice::from_ref(&key),
        "cron off"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_trigger_is_gone_and_its_name_is_free_again() {
    let env = Env::new().await;
    let uri = trigger_uri(&ns(ALICE), "nightly");
    let tok = token(ALICE);
    assert_eq!(
        env.create(ALICE, "report").await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        post_trigger(&env, ALICE, &cron("nightly", "report"))
            .await
            .status,
        StatusCode::CREATED
    );
    let gone = env.send(delete(&uri, Some(&tok))).await;
    assert_eq!(gone.status, StatusCode::ACCEPTED, "{}", gone.body);
    assert_eq!(gone.body["deleted"], true);
    assert!(gone.body["position"].as_i64().unwrap() > 0);
    env.send(get(&uri, Some(&tok))).await.assert_problem(
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
    let again = post_trigger(&env, ALICE, &http("nightly", "report")).await;
    assert_eq!(again.status, StatusCode::CREATED, "{}", again.body);
    assert_eq!(again.body["type"], "http");
    assert_eq!(
        trigger_events(&env, ALICE, "nightly").await,
        ["TriggerCreated", "TriggerDeleted", "TriggerCreated"]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_users_triggers_are_not_found_and_nothing_is_written() {
    let env = Env::new().await;
    let alice_ns = ns(ALICE);
    assert_eq!(
        env.create(ALICE, "report").await.status,
        StatusCode::CREATED
    );
    assert_eq!(
        post_trigger(&env, ALICE, &cron("nightly", "report"))
            .await
            .status,
        StatusCode::CREATED
    );
    let bob = token(BOB);
    let one = trigger_uri(&alice_ns, "nightly");
    for (what, req) in [
        ("list", get(&triggers_uri(&alice_ns), Some(&bob))),
        ("get", get(&one, Some(&bob))),
        (
            "create",
            post_json(
                &triggers_uri(&alice_ns),
                Some(&bob),
                &http("web", "report").to_string(),
            ),
        ),
        (
            "patch",
            patch_json(&one, Some(&bob), r#"{"enabled": false}"#),
        ),
        ("delete", delete(&one, Some(&bob))),
    ] {
        assert_refused(&env, what, req, StatusCode::NOT_FOUND, "not-found", None).await;
    }
    // Bob's own namespace has no such trigger either.
    let own = env
        .send(get(&trigger_uri(&ns(BOB), "nightly"), Some(&bob)))
        .await;
    own.assert_problem("bob's own", StatusCode::NOT_FOUND, "not-found");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retried_create_with_its_idempotency_key_is_answered_as_the_first() {
    let env = Env::new().await;
    assert_eq!(
        env.create(ALICE, "report").await.status,
        StatusCode::CREATED
    );
    let req = || {
        request(
            axum::http::Method::POST,
            &triggers_uri(&ns(ALICE)),
            Some(&token(ALICE)),
        )
        .header(header::CONTENT_TYPE, "application/json")
        .header("idempotency-key", "create-nightly-1")
        .body(axum::body::Body::from(
            cron("nightly", "report").to_string(),
        ))
        .unwrap()
    };
    let first = env.send(req()).await;
    assert_eq!(first.status, StatusCode::CREATED, "{}", first.body);
    let second = env.send(req()).await;
    assert_eq!(second.status, StatusCode::CREATED, "{}", second.body);
    assert_eq!(second.body, first.body);
    assert_eq!(
        second.headers[header::LOCATION],
        first.headers[header::LOCATION]
    );
    assert_eq!(
        trigger_events(&env, ALICE, "nightly").await,
        ["TriggerCreated"]
    );
}
