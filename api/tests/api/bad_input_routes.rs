//! Bad input on the routes beyond create and upload: a spec change (PUT),
//! names in paths, triggers and jobs. Each gets a 4xx problem and writes
//! nothing.

use axum::body::Body;
use axum::http::{Method, StatusCode, header};
use serde_json::{Value, json};

use super::bad_input::{Case, assert_refused_writing_nothing_with, case};
use super::requests::*;
use super::support::*;

const SUB: &str = "mallory@example.com";
const INVALID: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;

fn invalid(what: &'static str, body: Value, field: &'static str) -> Case {
    case(
        what,
        body.to_string(),
        INVALID,
        "invalid-field",
        Some(field),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_spec_changes_are_refused_and_write_nothing() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "target").await.status, StatusCode::CREATED);
    assert_eq!(
        env.upload(SUB, "target", &handler_zip("x")).await.status,
        StatusCode::ACCEPTED
    );
    let uri = function_uri(&ns(SUB), "target");
    let big = "x".repeat(32 * 1024);
    let cases = vec![
        case(
            "malformed JSON",
            "{\"memory_mb\": ",
            StatusCode::BAD_REQUEST,
            "malformed-request",
            None,
        ),
        case(
            "empty body",
            "",
            StatusCode::BAD_REQUEST,
            "malformed-request",
            None,
        ),
        invalid("a JSON array", json!([1]), "body"),
        invalid("unknown field", json!({ "memory": 256 }), "memory"),
        invalid(
            "read-only field phase",
            json!({ "phase": "Ready" }),
            "phase",
        ),
        invalid(
            "another name (no renames)",
            json!({ "name": "other" }),
            "name",
        ),
        invalid(
            "unknown runtime",
            json!({ "runtime": "python2" }),
            "runtime",
        ),
        invalid("runtime null", json!({ "runtime": 7 }), "runtime"),
        invalid(
            "entrypoint without a function",
            json!({ "entrypoint": "handler" }),
            "entrypoint",
        ),
        invalid(
            "entrypoint with a NUL byte",
            json!({ "entrypoint": "handler.h\u{0}" }),
            "entrypoint",
        ),
        invalid("memory 63", json!({ "memory_mb": 63 }), "memory_mb"),
        invalid("memory 4097", json!({ "memory_mb": 4097 }), "memory_mb"),
        invalid("negative memory", json!({ "memory_mb": -1 }), "memory_mb"),
        invalid("timeout 0", json!({ "timeout_sec": 0 }), "timeout_sec"),
        invalid("timeout 901", json!({ "timeout_sec": 901 }), "timeout_sec"),
        invalid(
            "timeout as a string",
            json!({ "timeout_sec": "30" }),
            "timeout_sec",
        ),
        invalid(
            "env PORT",
            json!({ "env_vars": { "PORT": "1" } }),
            "env_vars",
        ),
        invalid(
            "env SLESS_",
            json!({ "env_vars": { "SLESS_X": "1" } }),
            "env_vars",
        ),
        invalid(
            "env KUBERNETES_",
            json!({ "env_vars": { "KUBERNETES_PORT": "1" } }),
            "env_vars",
        ),
        invalid(
            "env name 1X",
            json!({ "env_vars": { "1X": "1" } }),
            "env_vars",
        ),
        invalid(
            "env value NUL",
            json!({ "env_vars": { "A": "\u{0}" } }),
            "env_vars",
        ),
        invalid(
            "env value over 32 KiB",
            json!({ "env_vars": { "A": format!("{big}x") } }),
            "env_vars",
        ),
        invalid(
            "env values over 128 KiB",
            json!({ "env_vars": { "A": big, "B": big, "C": big, "D": big, "E": "x" } }),
            "env_vars",
        ),
        invalid(
            "env value not a string",
            json!({ "env_vars": { "A": true } }),
            "env_vars.A",
        ),
        // A valid runtime change with an invalid field: nothing repacked either.
        invalid(
            "runtime change with memory 1",
            json!({ "runtime": "nodejs20", "memory_mb": 1 }),
            "memory_mb",
        ),
        Case {
            headers: vec![("idempotency-key", String::new())],
            ..invalid(
                "empty Idempotency-Key",
                json!({ "memory_mb": 256 }),
                "Idempotency-Key",
            )
        },
    ];
    let tok = token(SUB);
    let before = assert_refused_writing_nothing_with(
        &env,
        Method::PUT,
        &uri,
        &tok,
        Some("application/json"),
        cases,
    )
    .await;
    // The control: a good change of the same function is accepted.
    let ok = env
        .send(put_json(
            &uri,
            Some(&tok),
            &json!({ "runtime": "nodejs20", "memory_mb": 256 }).to_string(),
        ))
        .await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{}", ok.body);
    assert_ne!(env.counts().await, before);
}

/// A request body and its content type.
type Payload = (&'static str, Vec<u8>);

/// Names in a path that cannot be a function's (trigger's, job's): as the
/// client sends them, percent-encoding and all.
const BAD_PATH_NAMES: [&str; 13] = [
    "Hello",
    "a_b",
    "a.b",
    "h%D0%B5llo", // Cyrillic е
    "%EF%BD%81",  // fullwidth a
    "a%2Fb",
    "%2E%2E",
    "..",
    ".",
    "a%00b",
    "%FF",
    "1st",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", // 41
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_in_paths_that_cannot_be_names_are_404_and_write_nothing() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    assert_eq!(env.create(SUB, "real").await.status, StatusCode::CREATED);
    for name in BAD_PATH_NAMES {
        let base = format!("/v1/namespaces/{ns}");
        let attempts: Vec<(Method, String, Option<Payload>)> = vec![
            (Method::GET, format!("{base}/functions/{name}"), None),
            (
                Method::PUT,
                format!("{base}/functions/{name}"),
                Some(("application/json", b"{\"memory_mb\": 256}".to_vec())),
            ),
            (Method::DELETE, format!("{base}/functions/{name}"), None),
            (
                Method::POST,
                format!("{base}/functions/{name}/upload"),
                Some((ZIP, handler_zip("x"))),
            ),
            (Method::GET, format!("{base}/functions/{name}/source"), None),
            (Method::GET, format!("{base}/triggers/{name}"), None),
            (
                Method::PATCH,
                format!("{base}/triggers/{name}"),
                Some(("application/json", b"{\"enabled\": true}".to_vec())),
            ),
            (Method::DELETE, format!("{base}/triggers/{name}"), None),
            (Method::GET, format!("{base}/jobs/{name}"), None),
            (Method::DELETE, format!("{base}/jobs/{name}"), None),
        ];
        for (method, uri, body) in attempts {
            let what = format!("{method} {uri}");
            let mut b = request(method, &uri, Some(&tok));
            let body = match body {
                Some((ct, bytes)) => {
                    b = b.header(header::CONTENT_TYPE, ct);
                    Body::from(bytes)
                }
                None => Body::empty(),
            };
            let before = env.counts().await;
            let answer = env.send(b.body(body).unwrap()).await;
            // `a%2Fb` and `.` may also miss every route: 404 either way.
            answer.assert_problem(&what, StatusCode::NOT_FOUND, "not-found");
            assert_eq!(env.counts().await, before, "{what}: nothing written");
        }
    }
    // The control: the real name answers.
    let ok = env.send(get(&function_uri(&ns, "real"), Some(&tok))).await;
    assert_eq!(ok.status, StatusCode::OK);
}

fn trigger(change: Value) -> Value {
    let mut t = json!({
        "name": "nightly", "function": "report", "type": "cron",
        "schedule": "0 3 * * *", "timezone": "Europe/Berlin", "enabled": true
    });
    for (k, v) in change.as_object().unwrap() {
        if v.is_null() {
            t.as_object_mut().unwrap().remove(k);
        } else {
            t[k] = v.clone();
        }
    }
    t
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_trigger_requests_are_refused_and_write_nothing() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    let uri = format!("/v1/namespaces/{ns}/triggers");
    let cases = vec![
        case(
            "malformed JSON",
            "{",
            StatusCode::BAD_REQUEST,
            "malformed-request",
            None,
        ),
        invalid("unknown field", trigger(json!({ "cron": "x" })), "cron"),
        invalid("missing name", trigger(json!({ "name": null })), "name"),
        invalid("bad name", trigger(json!({ "name": "Nightly_1" })), "name"),
        invalid(
            "name of 41",
            trigger(json!({ "name": "n".repeat(41) })),
            "name",
        ),
        invalid(
            "missing function",
            trigger(json!({ "function": null })),
            "function",
        ),
        invalid(
            "bad function",
            trigger(json!({ "function": "my.fn" })),
            "function",
        ),
        invalid("missing type", trigger(json!({ "type": null })), "type"),
        invalid("unknown type", trigger(json!({ "type": "queue" })), "type"),
        invalid(
            "cron without schedule",
            trigger(json!({ "schedule": null })),
            "schedule",
        ),
        invalid(
            "4 fields",
            trigger(json!({ "schedule": "* * * *" })),
            "schedule",
        ),
        invalid(
            "6 fields",
            trigger(json!({ "schedule": "0 * * * * *" })),
            "schedule",
        ),
        invalid(
            "minute 60",
            trigger(json!({ "schedule": "60 * * * *" })),
            "schedule",
        ),
        invalid(
            "hour 24",
            trigger(json!({ "schedule": "0 24 * * *" })),
            "schedule",
        ),
        invalid(
            "step 0",
            trigger(json!({ "schedule": "*/0 * * * *" })),
            "schedule",
        ),
        invalid(
            "backwards range",
            trigger(json!({ "schedule": "0 5-1 * * *" })),
            "schedule",
        ),
        invalid(
            "unknown day",
            trigger(json!({ "schedule": "0 0 * * FUN" })),
            "schedule",
        ),
        invalid(
            "NUL",
            trigger(json!({ "schedule": "0 0 * * *\u{0}" })),
            "schedule",
        ),
        invalid(
            "CRON_TZ= prefix",
            trigger(json!({ "schedule": "CRON_TZ=UTC 0 3 * * *" })),
            "schedule",
        ),
        invalid(
            "Quartz ?",
            trigger(json!({ "schedule": "0 3 ? * *" })),
            "schedule",
        ),
        invalid(
            "never fires (30 February)",
            trigger(json!({ "schedule": "0 0 30 2 *" })),
            "schedule",
        ),
        invalid(
            "unknown time zone",
            trigger(json!({ "timezone": "Mars/Olympus_Mons" })),
            "timezone",
        ),
        invalid(
            "@every",
            trigger(json!({ "schedule": "@every 1h" })),
            "schedule",
        ),
        invalid(
            "schedule not a string",
            trigger(json!({ "schedule": 5 })),
            "schedule",
        ),
        invalid(
            "bad time zone",
            trigger(json!({ "timezone": "../../etc/passwd" })),
            "timezone",
        ),
        invalid(
            "offset for a zone",
            trigger(json!({ "timezone": "+02:00" })),
            "timezone",
        ),
        invalid(
            "empty time zone",
            trigger(json!({ "timezone": "" })),
            "timezone",
        ),
        invalid(
            "enabled as a string",
            trigger(json!({ "enabled": "yes" })),
            "enabled",
        ),
        invalid(
            "http trigger with a schedule",
            trigger(json!({ "type": "http", "timezone": null })),
            "schedule",
        ),
        invalid(
            "http trigger with a time zone",
            trigger(json!({ "type": "http", "schedule": null })),
            "timezone",
        ),
    ];
    let before = assert_refused_writing_nothing_with(
        &env,
        Method::POST,
        &uri,
        &tok,
        Some("application/json"),
        cases,
    )
    .await;

    let patch_uri = format!("{uri}/nightly");
    let patches = vec![
        case(
            "malformed JSON",
            "{",
            StatusCode::BAD_REQUEST,
            "malformed-request",
            None,
        ),
        invalid("no enabled", json!({}), "enabled"),
        invalid("enabled null", json!({ "enabled": null }), "enabled"),
        invalid("enabled 1", json!({ "enabled": 1 }), "enabled"),
        invalid(
            "another field",
            json!({ "enabled": true, "schedule": "* * * * *" }),
            "schedule",
        ),
    ];
    assert_refused_writing_nothing_with(
        &env,
        Method::PATCH,
        &patch_uri,
        &tok,
        Some("application/json"),
        patches,
    )
    .await;

    // Valid requests for a function that does not exist: refused, nothing written.
    for (what, req) in [
        (
            "cron",
            post_json(&uri, Some(&tok), &trigger(json!({})).to_string()),
        ),
        (
            "http",
            post_json(
                &uri,
                Some(&tok),
                &trigger(json!({ "type": "http", "schedule": null, "timezone": null })).to_string(),
            ),
        ),
    ] {
        assert_refused(&env, what, req, INVALID, "invalid-field", Some("function")).await;
    }
    // Another user's namespace, with a body that would do in one's own.
    assert_refused(
        &env,
        "another namespace",
        post_json(
            &format!(
                "/v1/namespaces/{}/triggers",
                super::support::ns("someone-else@example.com")
            ),
            Some(&tok),
            &trigger(json!({})).to_string(),
        ),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
    // A trigger that does not exist cannot be toggled.
    assert_refused(
        &env,
        "patch of no trigger",
        patch_json(&patch_uri, Some(&tok), r#"{"enabled": false}"#),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
    assert_eq!(env.counts().await, before);

    // The control: with the function there, the base body is accepted.
    assert_eq!(env.create(SUB, "report").await.status, StatusCode::CREATED);
    let good = env
        .send(post_json(
            &uri,
            Some(&tok),
            &trigger(json!({ "timezone": null, "enabled": null, "schedule": "@daily" }))
                .to_string(),
        ))
        .await;
    assert_eq!(good.status, StatusCode::CREATED, "{}", good.body);
    let on = env
        .send(patch_json(&patch_uri, Some(&tok), r#"{"enabled": false}"#))
        .await;
    assert_eq!(on.status, StatusCode::OK, "{}", on.body);
}

fn job(change: Value) -> Value {
    let mut j = json!({ "name": "once", "function": "report", "input": { "n": 1 } });
    for (k, v) in change.as_object().unwrap() {
        if v.is_null() {
            j.as_object_mut().unwrap().remove(k);
        } else {
            j[k] = v.clone();
        }
    }
    j
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_job_requests_are_refused_and_write_nothing() {
    let env = Env::new().await;
    let tok = token(SUB);
    let uri = format!("/v1/namespaces/{}/jobs", ns(SUB));
    let cases = vec![
        case(
            "malformed JSON",
            "[",
            StatusCode::BAD_REQUEST,
            "malformed-request",
            None,
        ),
        case(
            "not JSON",
            "name=once",
            StatusCode::BAD_REQUEST,
            "malformed-request",
            None,
        ),
        invalid("unknown field", job(json!({ "image": "x" })), "image"),
        invalid(
            "args are not a field",
            job(json!({ "args": ["--all"] })),
            "args",
        ),
        invalid("missing name", job(json!({ "name": null })), "name"),
        invalid("bad name", job(json!({ "name": "Once" })), "name"),
        invalid("name of 41", job(json!({ "name": "o".repeat(41) })), "name"),
        invalid("name with a dot", job(json!({ "name": "a.b" })), "name"),
        invalid(
            "missing function",
            job(json!({ "function": null })),
            "function",
        ),
        invalid("bad function", job(json!({ "function": "-x" })), "function"),
        invalid(
            "input over 64 KiB",
            job(json!({ "input": "x".repeat(64 * 1024) })),
            "input",
        ),
        invalid("timeout 0", job(json!({ "timeout_sec": 0 })), "timeout_sec"),
        invalid(
            "timeout over a day",
            job(json!({ "timeout_sec": 86_401 })),
            "timeout_sec",
        ),
        invalid(
            "negative timeout",
            job(json!({ "timeout_sec": -1 })),
            "timeout_sec",
        ),
        invalid(
            "timeout as a string",
            job(json!({ "timeout_sec": "30" })),
            "timeout_sec",
        ),
        // Valid, but there is no such function.
        invalid("no such function", job(json!({})), "function"),
    ];
    let before = assert_refused_writing_nothing_with(
        &env,
        Method::POST,
        &uri,
        &tok,
        Some("application/json"),
        cases,
    )
    .await;
    assert_refused(
        &env,
        "another namespace",
        post_json(
            &format!("/v1/namespaces/{}/jobs", ns("someone-else@example.com")),
            Some(&tok),
            &job(json!({})).to_string(),
        ),
        StatusCode::NOT_FOUND,
        "not-found",
        None,
    )
    .await;
    assert_eq!(env.counts().await, before);

    // The control: with the function uploaded, the base body is accepted.
    assert_eq!(env.create(SUB, "report").await.status, StatusCode::CREATED);
    let up = env.upload(SUB, "report", &handler_zip("x")).await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
    let good = env
        .send(post_json(&uri, Some(&tok), &job(json!({})).to_string()))
        .await;
    assert_eq!(good.status, StatusCode::ACCEPTED, "{}", good.body);
}
