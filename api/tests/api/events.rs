//! The audit log: `GET /v1/namespaces/{ns}/events`, `GET /v1/events` for
//! admins, and the live tail `GET /v1/namespaces/{ns}/events/stream`.

use std::collections::HashSet;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use chrono::{DateTime, SecondsFormat, Utc};
use serde_json::{Value, json};
use sless_store::eventlog::{self, Metadata, NewEvent};

use super::support::*;

pub(super) const ALICE: &str = "alice-audit@example.com";
pub(super) const BOB: &str = "bob-audit@example.com";

pub(super) fn events_uri(ns: &str, query: &str) -> String {
    format!("/v1/namespaces/{ns}/events{query}")
}

fn admin_token() -> String {
    sign(
        &json!({ "sub": "ops@example.com", "exp": now() + 3600, "sless_admin": true }),
        SECRET,
    )
}

/// Appends `types` to `stream` (in `sub`'s namespace) in one transaction,
/// as `actor`; returns the positions written.
pub(super) async fn append(
    env: &Env,
    sub: &str,
    stream: &str,
    types: &[&str],
    actor: &str,
) -> Vec<i64> {
    let mut tx = env.db.pool.begin().await.unwrap();
    let positions = append_in(&mut tx, sub, stream, types, actor).await;
    tx.commit().await.unwrap();
    positions
}

pub(super) async fn append_in(
    conn: &mut sqlx::PgConnection,
    sub: &str,
    stream: &str,
    types: &[&str],
    actor: &str,
) -> Vec<i64> {
    let version: i64 = sqlx::query_scalar(
        "select coalesce(max(version), 0)::bigint from events where stream = $1",
    )
    .bind(stream)
    .fetch_one(&mut *conn)
    .await
    .unwrap();
    let events: Vec<NewEvent> = types
        .iter()
        .enumerate()
        .map(|(i, t)| NewEvent {
            event_type: (*t).to_owned(),
            namespace: ns(sub),
            data: json!({ "n": i }),
            metadata: Metadata {
                actor: actor.to_owned(),
                ..Default::default()
            },
        })
        .collect();
    let appended = eventlog::append(conn, stream, version as u64, &events)
        .await
        .unwrap();
    let last = appended.position;
    (last - types.len() as i64 + 1..=last).collect()
}

async fn list(env: &Env, uri: &str, tok: &str) -> (Vec<Value>, Option<String>) {
    let a = env.send(get(uri, Some(tok))).await;
    assert_eq!(a.status, StatusCode::OK, "{uri}: {}", a.body);
    let items = a.body["items"].as_array().expect("items").clone();
    (items, a.body["next"].as_str().map(str::to_owned))
}

fn positions(items: &[Value]) -> Vec<i64> {
    items
        .iter()
        .map(|e| e["position"].as_i64().unwrap())
        .collect()
}

fn types(items: &[Value]) -> Vec<&str> {
    items.iter().map(|e| e["type"].as_str().unwrap()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn entries_say_who_changed_what_in_which_request_and_when() {
    let env = Env::new().await;
    let before = Utc::now();
    let created = env
        .send(
            request(
                Method::POST,
                &functions_uri(&ns(ALICE)),
                Some(&token(ALICE)),
            )
            .header("content-type", "application/json")
            .header("x-request-id", "create-hello-1")
            .body(Body::from(spec("hello").to_string()))
            .unwrap(),
        )
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{}", created.body);
    let uploaded = env
        .send(
            request(
                Method::POST,
                &upload_uri(&ns(ALICE), "hello"),
                Some(&token(ALICE)),
            )
            .header("content-type", ZIP)
            .header("x-request-id", "upload-hello-1")
            .body(Body::from(handler_zip("hi")))
            .unwrap(),
        )
        .await;
    assert_eq!(uploaded.status, StatusCode::ACCEPTED, "{}", uploaded.body);

    let uri = events_uri(&ns(ALICE), "?function=hello");
    let (items, next) = list(&env, &uri, &token(ALICE)).await;
    assert_eq!(next, None);
    assert_eq!(
        types(&items),
        ["FunctionUploaded", "FunctionCreated"],
        "newest first"
    );
    let stream = stream_of(ALICE, "hello");
    for (e, request_id, version) in [
        (&items[0], "upload-hello-1", 2),
        (&items[1], "create-hello-1", 1),
    ] {
        assert_eq!(e["actor"], ALICE, "{e}");
        assert_eq!(e["request_id"], request_id, "{e}");
        assert_eq!(e["stream"], stream.as_str(), "{e}");
        assert_eq!(e["namespace"], ns(ALICE), "{e}");
        assert_eq!(e["version"], version, "{e}");
        let time: DateTime<Utc> = e["time"].as_str().unwrap().parse().unwrap();
        assert!(
            time >= before - chrono::Duration::seconds(1) && time <= Utc::now(),
            "{e}"
        );
    }
    assert_eq!(
        items[0]["data"]["sha256"], uploaded.body["sha256"],
        "the upload's data: {}",
        items[0]
    );
    assert_eq!(
        items[1]["data"]["spec"]["runtime"], "python3.11",
        "{}",
        items[1]
    );
    assert_eq!(
        positions(&items),
        vec![
            uploaded.body["position"].as_i64().unwrap(),
            items[1]["position"].as_i64().unwrap()
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_namespaces_events_never_appear_and_its_path_is_404() {
    let env = Env::new().await;
    assert_eq!(env.create(ALICE, "hello").await.status, StatusCode::CREATED);
    assert_eq!(env.create(BOB, "hello").await.status, StatusCode::CREATED);

    let (bobs, _) = list(&env, &events_uri(&ns(BOB), "?limit=1000"), &token(BOB)).await;
    assert!(!bobs.is_empty());
    assert!(bobs.iter().all(|e| e["namespace"] == ns(BOB)), "{bobs:?}");
    // Naming Alice's stream from Bob's namespace finds nothing.
    let alices_stream = stream_of(ALICE, "hello");
    let (found, _) = list(
        &env,
        &events_uri(&ns(BOB), &format!("?stream={alices_stream}")),
        &token(BOB),
    )
    .await;
    assert_eq!(found, Vec::<Value>::new());

    let before = env.counts().await;
    for uri in [
        events_uri(&ns(ALICE), ""),
        events_uri(&ns(ALICE), "?limit=0"),
        events_uri(&ns(ALICE), "/stream"),
    ] {
        let a = env.send(get(&uri, Some(&token(BOB)))).await;
        a.assert_problem(&uri, StatusCode::NOT_FOUND, "not-found");
    }
    let a = env.send(get(&events_uri(&ns(ALICE), ""), None)).await;
    a.assert_problem("no token", StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(env.counts().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_filter_narrows_the_log_and_filters_combine() {
    let env = Env::new().await;
    let tok = token(ALICE);
    let (s1, s2) = (stream_of(ALICE, "one"), stream_of(ALICE, "two"));
    let early = append(
        &env,
        ALICE,
        &s1,
        &["FunctionCreated", "FunctionUploaded"],
        ALICE,
    )
    .await;
    append(
        &env,
        BOB,
        &stream_of(BOB, "one"),
        &["FunctionCreated"],
        ALICE,
    )
    .await;
    let mid: DateTime<Utc> = sqlx::query_scalar("select clock_timestamp()")
        .fetch_one(&env.db.pool)
        .await
        .unwrap();
    let late_worker = append(
        &env,
        ALICE,
        &s1,
        &["BuildStarted", "BuildSucceeded"],
        "system:worker",
    )
    .await;
    let late_s2 = append(
        &env,
        ALICE,
        &s2,
        &["FunctionCreated", "FunctionDeleted"],
        "carol",
    )
    .await;
    let mid = mid
        .to_rfc3339_opts(SecondsFormat::Micros, true)
        .replace('+', "%2B");

    let cases: Vec<(&str, String, Vec<i64>)> = vec![
        (
            "no filter",
            String::new(),
            [&early[..], &late_worker, &late_s2].concat(),
        ),
        (
            "stream",
            format!("stream={s1}"),
            [&early[..], &late_worker].concat(),
        ),
        ("function", "function=two".into(), late_s2.clone()),
        (
            "one type",
            "type=FunctionCreated".into(),
            vec![early[0], late_s2[0]],
        ),
        (
            "two types",
            "type=FunctionCreated&type=BuildStarted".into(),
            vec![early[0], late_worker[0], late_s2[0]],
        ),
        ("an unknown type", "type=NothingHappened".into(), vec![]),
        ("a user", format!("actor={ALICE}"), early.clone()),
        (
            "sless itself",
            "actor=system:worker".into(),
            late_worker.clone(),
        ),
        (
            "since",
            format!("since={mid}"),
            [&late_worker[..], &late_s2].concat(),
        ),
        ("until", format!("until={mid}"), early.clone()),
        (
            "stream, type and since",
            format!("stream={s1}&type=BuildSucceeded&type=FunctionCreated&since={mid}"),
            vec![late_worker[1]],
        ),
        (
            "function and actor",
            "function=two&actor=carol&type=FunctionDeleted".into(),
            vec![late_s2[1]],
        ),
        (
            "actor of another stream",
            format!("function=two&actor={ALICE}"),
            vec![],
        ),
    ];
    for (what, query, mut expected) in cases {
        let (oldest, _) = list(
            &env,
            &events_uri(&ns(ALICE), &format!("?order=oldest&{query}")),
            &tok,
        )
        .await;
        assert_eq!(positions(&oldest), expected, "{what}: oldest first");
        let (newest, _) = list(&env, &events_uri(&ns(ALICE), &format!("?{query}")), &tok).await;
        expected.reverse();
        assert_eq!(
            positions(&newest),
            expected,
            "{what}: newest first (the default)"
        );
    }
}

/// Pages through `uri` (which has a query) by `after`, returning the pages.
async fn pages(env: &Env, uri: &str, tok: &str) -> Vec<Vec<Value>> {
    let mut out = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let page_uri = match &after {
            Some(c) => format!("{uri}&after={c}"),
            None => uri.to_owned(),
        };
        let (items, next) = list(env, &page_uri, tok).await;
        out.push(items);
        match next {
            Some(c) => after = Some(c),
            None => return out,
        }
        assert!(out.len() < 10, "paging does not end");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pages_of_100_cover_250_events_in_both_orders_without_duplicates_or_gaps() {
    let env = Env::new().await;
    let tok = token(ALICE);
    let mut written = Vec::new();
    for i in 0..5 {
        let types: Vec<&str> = (0..50)
            .map(|j| {
                if j % 5 == 0 {
                    "FunctionDeleted"
                } else {
                    "FunctionUploaded"
                }
            })
            .collect();
        written.extend(
            append(
                &env,
                ALICE,
                &stream_of(ALICE, &format!("f{i}")),
                &types,
                ALICE,
            )
            .await,
        );
    }
    // Another namespace's events interleave with none of them.
    append(
        &env,
        BOB,
        &stream_of(BOB, "f0"),
        &["FunctionCreated"; 20],
        BOB,
    )
    .await;

    for order in ["oldest", "newest"] {
        let got = pages(
            &env,
            &events_uri(&ns(ALICE), &format!("?order={order}")),
            &tok,
        )
        .await;
        let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
        assert_eq!(sizes, [100, 100, 50], "{order}");
        let all: Vec<i64> = got.iter().flat_map(|p| positions(p)).collect();
        let distinct: HashSet<i64> = all.iter().copied().collect();
        assert_eq!(distinct.len(), 250, "{order}: all distinct");
        let mut expected = written.clone();
        if order == "newest" {
            expected.reverse();
        }
        assert_eq!(all, expected, "{order}: every event, in order");
    }

    // With a filter, a page that ends exactly at the last match says so.
    let got = pages(
        &env,
        &events_uri(&ns(ALICE), "?type=FunctionDeleted&limit=25"),
        &tok,
    )
    .await;
    let sizes: Vec<usize> = got.iter().map(Vec::len).collect();
    assert_eq!(sizes, [25, 25], "50 deletions");

    // A cursor pages one way only.
    let (_, next) = list(&env, &events_uri(&ns(ALICE), "?limit=10"), &tok).await;
    let a = env
        .send(get(
            &events_uri(
                &ns(ALICE),
                &format!("?order=oldest&after={}", next.unwrap()),
            ),
            Some(&tok),
        ))
        .await;
    a.assert_problem(
        "a newest-first cursor, oldest first",
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
    );
    assert_eq!(a.field(), Some("after"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn admins_read_every_namespace_and_other_tokens_get_403() {
    let env = Env::new().await;
    assert_eq!(env.create(ALICE, "hello").await.status, StatusCode::CREATED);
    assert_eq!(env.create(BOB, "hello").await.status, StatusCode::CREATED);
    let admin = admin_token();

    let (all, _) = list(&env, "/v1/events?order=oldest", &admin).await;
    let namespaces: HashSet<&str> = all
        .iter()
        .map(|e| e["namespace"].as_str().unwrap())
        .collect();
    assert_eq!(
        namespaces,
        HashSet::from([ns(ALICE).as_str(), ns(BOB).as_str()])
    );

    let (bobs, _) = list(&env, &format!("/v1/events?namespace={}", ns(BOB)), &admin).await;
    assert!(
        !bobs.is_empty() && bobs.iter().all(|e| e["namespace"] == ns(BOB)),
        "{bobs:?}"
    );
    let (hello, _) = list(
        &env,
        &format!(
            "/v1/events?namespace={}&function=hello&type=FunctionCreated",
            ns(ALICE)
        ),
        &admin,
    )
    .await;
    assert_eq!(hello.len(), 1);
    assert_eq!(hello[0]["stream"], stream_of(ALICE, "hello").as_str());
    let (by_actor, _) = list(&env, &format!("/v1/events?actor={BOB}"), &admin).await;
    assert!(!by_actor.is_empty() && by_actor.iter().all(|e| e["namespace"] == ns(BOB)));

    // An admin may also read any one namespace's log at its own path.
    let (alices, _) = list(&env, &events_uri(&ns(ALICE), ""), &admin).await;
    assert!(alices.iter().all(|e| e["namespace"] == ns(ALICE)) && !alices.is_empty());

    let before = env.counts().await;
    let a = env.send(get("/v1/events", Some(&token(ALICE)))).await;
    a.assert_problem("a user's token", StatusCode::FORBIDDEN, "forbidden");
    let not_admin = sign(
        &json!({ "sub": "ops@example.com", "exp": now() + 3600, "sless_admin": "true" }),
        SECRET,
    );
    let a = env.send(get("/v1/events", Some(&not_admin))).await;
    a.assert_problem(
        "an admin claim that is not true",
        StatusCode::FORBIDDEN,
        "forbidden",
    );
    let a = env.send(get("/v1/events", None)).await;
    a.assert_problem("no token", StatusCode::UNAUTHORIZED, "unauthorized");
    assert_eq!(env.counts().await, before);
}

/// What is asked, the URI, the field the problem names, extra headers.
type BadCase = (
    &'static str,
    String,
    &'static str,
    Vec<(&'static str, &'static str)>,
);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_parameters_are_refused_naming_the_field_and_write_nothing() {
    let env = Env::new().await;
    append(
        &env,
        ALICE,
        &stream_of(ALICE, "one"),
        &["FunctionCreated"],
        ALICE,
    )
    .await;
    let (_, oldest_cursor) = {
        append(
            &env,
            ALICE,
            &stream_of(ALICE, "two"),
            &["FunctionCreated"],
            ALICE,
        )
        .await;
        list(
            &env,
            &events_uri(&ns(ALICE), "?order=oldest&limit=1"),
            &token(ALICE),
        )
        .await
    };
    let oldest_cursor = oldest_cursor.expect("a second page");
    let own = |q: &str| events_uri(&ns(ALICE), q);
    let tail = |q: &str| events_uri(&ns(ALICE), &format!("/stream{q}"));
    let cases: Vec<BadCase> = vec![
        ("limit 0", own("?limit=0"), "limit", vec![]),
        ("limit 1001", own("?limit=1001"), "limit", vec![]),
        ("limit not a number", own("?limit=ten"), "limit", vec![]),
        ("limit negative", own("?limit=-1"), "limit", vec![]),
        ("limit twice", own("?limit=10&limit=20"), "limit", vec![]),
        ("since not a time", own("?since=yesterday"), "since", vec![]),
        (
            "since without a zone",
            own("?since=2026-11-30T12:00:00"),
            "since",
            vec![],
        ),
        (
            "until not a time",
            own("?until=2026-13-01T00:00:00Z"),
            "until",
            vec![],
        ),
        (
            "since after until",
            own("?since=2026-11-30T12:00:00Z&until=2026-11-30T11:00:00Z"),
            "until",
            vec![],
        ),
        ("order sideways", own("?order=sideways"), "order", vec![]),
        ("order in capitals", own("?order=NEWEST"), "order", vec![]),
        ("unknown parameter", own("?colour=blue"), "colour", vec![]),
        (
            "namespace on a namespace's route",
            own("?namespace=x"),
            "namespace",
            vec![],
        ),
        (
            "cursor of the wrong order",
            own(&format!("?after={oldest_cursor}")),
            "after",
            vec![],
        ),
        (
            "malformed cursor",
            own("?after=not-a-cursor"),
            "after",
            vec![],
        ),
        (
            "cursor with capitals",
            own("?after=N0000000000000001"),
            "after",
            vec![],
        ),
        ("empty type", own("?type="), "type", vec![]),
        ("empty stream", own("?stream="), "stream", vec![]),
        (
            "overlong actor",
            own(&format!("?actor={}", "a".repeat(600))),
            "actor",
            vec![],
        ),
        (
            "function that is no name",
            own("?function=Not_A_Name"),
            "function",
            vec![],
        ),
        (
            "function and stream",
            own("?function=one&stream=function/x/one"),
            "function",
            vec![],
        ),
        (
            "too many types",
            own(&format!("?{}", vec!["type=T"; 51].join("&"))),
            "type",
            vec![],
        ),
        (
            "admin: bad namespace",
            "/v1/events?namespace=Not_A_Namespace".into(),
            "namespace",
            vec![],
        ),
        (
            "admin: function without namespace",
            "/v1/events?function=one".into(),
            "function",
            vec![],
        ),
        (
            "admin: unknown parameter",
            "/v1/events?nmespace=x".into(),
            "nmespace",
            vec![],
        ),
        ("tail: limit", tail("?limit=10"), "limit", vec![]),
        ("tail: order", tail("?order=oldest"), "order", vec![]),
        ("tail: bad after", tail("?after=123"), "after", vec![]),
        (
            "tail: a page cursor as after",
            tail(&format!("?after={oldest_cursor}")),
            "after",
            vec![],
        ),
        (
            "tail: bad Last-Event-ID",
            tail(""),
            "Last-Event-ID",
            vec![("last-event-id", "0000000000000001")],
        ),
        ("tail: bad since", tail("?since=now"), "since", vec![]),
    ];
    let before = env.counts().await;
    let admin = admin_token();
    for (what, uri, field, headers) in cases {
        let tok = if uri.starts_with("/v1/events") {
            admin.clone()
        } else {
            token(ALICE)
        };
        let mut req = request(Method::GET, &uri, Some(&tok));
        for (name, value) in headers {
            req = req.header(name, value);
        }
        let a = env.send(req.body(Body::empty()).unwrap()).await;
        a.assert_problem(what, StatusCode::UNPROCESSABLE_ENTITY, "invalid-field");
        assert_eq!(
            a.field(),
            Some(field),
            "{what}: the offending field; {}",
            a.body
        );
        assert_eq!(env.counts().await, before, "{what}: nothing written");
    }
}
