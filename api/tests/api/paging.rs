//! Paged lists (functions, triggers, versions, jobs): `?limit=` and `?cursor=`,
//! each row exactly once and in order across pages, `next_cursor` and the
//! `Link: <…>; rel="next"` header, bad paging refused, and a cursor that
//! stays within its own list.

use axum::http::{StatusCode, header};
use serde_json::{Value, json};

use super::requests::{delete, put_json};
use super::support::*;

const ALICE: &str = "alice-paging@example.com";
const BOB: &str = "bob-paging@example.com";

/// `GET uri` as `sub`.
async fn list(env: &Env, sub: &str, uri: &str) -> Answer {
    env.send(get(uri, Some(&token(sub)))).await
}

/// The `Link` header's next URL, if the answer has one.
fn next_link(a: &Answer) -> Option<String> {
    let link = a.headers.get(header::LINK)?.to_str().unwrap();
    let url = link
        .strip_prefix('<')
        .and_then(|l| l.strip_suffix(">; rel=\"next\""))
        .unwrap_or_else(|| panic!("a Link to the next page: {link:?}"));
    Some(url.to_owned())
}

fn names(a: &Answer, key: &str) -> Vec<String> {
    a.body["items"]
        .as_array()
        .unwrap_or_else(|| panic!("items: {}", a.body))
        .iter()
        .map(|i| i[key].to_string().trim_matches('"').to_owned())
        .collect()
}

/// Every page from `first`, following `Link`: the rows of each page (by
/// `key`). Checks that `next_cursor` and `Link` agree on every page.
async fn pages(env: &Env, sub: &str, first: &str, key: &str) -> Vec<Vec<String>> {
    let mut out = Vec::new();
    let mut uri = Some(first.to_owned());
    while let Some(u) = uri {
        let a = list(env, sub, &u).await;
        assert_eq!(a.status, StatusCode::OK, "{u}: {}", a.body);
        assert_eq!(a.content_type(), "application/json");
        uri = next_link(&a);
        match &uri {
            Some(next) => {
                let cursor = a.body["next_cursor"].as_str().expect("a next_cursor");
                assert!(next.ends_with(&format!("&cursor={cursor}")), "{next}");
            }
            None => assert_eq!(a.body["next_cursor"], Value::Null, "the last page"),
        }
        out.push(names(&a, key));
        assert!(out.len() <= 100, "the pages do not end");
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_page_by_name_each_once_with_a_link_to_the_next_page() {
    let env = Env::new().await;
    let uri = functions_uri(&ns(ALICE));
    // An empty namespace: one empty page, no Link.
    assert_eq!(
        pages(&env, ALICE, &uri, "name").await,
        [Vec::<String>::new()]
    );

    // Created out of order, listed by name.
    let mut want: Vec<String> = (0..7).map(|i| format!("f-{i}")).collect();
    for name in want.iter().rev() {
        assert_eq!(env.create(ALICE, name).await.status, StatusCode::CREATED);
    }
    env.catch_up().await;
    let got = pages(&env, ALICE, &format!("{uri}?limit=3"), "name").await;
    assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [3, 3, 1]);
    assert_eq!(got.concat(), want);
    // A limit of exactly the count: one page, no Link.
    assert_eq!(
        pages(&env, ALICE, &format!("{uri}?limit=7"), "name").await,
        [want.clone()]
    );

    // The default page holds 100.
    for i in 7..101 {
        let name = format!("f-{i}");
        assert_eq!(env.create(ALICE, &name).await.status, StatusCode::CREATED);
        want.push(name);
    }
    want.sort();
    env.catch_up().await;
    let got = pages(&env, ALICE, &uri, "name").await;
    assert_eq!(got.iter().map(Vec::len).collect::<Vec<_>>(), [100, 1]);
    assert_eq!(got.concat(), want);
    let whole = list(&env, ALICE, &format!("{uri}?limit=1000")).await;
    assert_eq!(names(&whole, "name"), want);
    assert!(next_link(&whole).is_none());
    // A row shows as GET shows the function.
    let one = list(&env, ALICE, &function_uri(&ns(ALICE), "f-0")).await;
    let mut shown = whole.body["items"][0].clone();
    for k in ["created_at", "updated_at"] {
        assert!(shown[k].is_string(), "{k}: {shown}");
        shown.as_object_mut().unwrap().remove(k);
    }
    let mut got = one.body.clone();
    // Only a function's own GET measures its calls in flight.
    for k in ["created_at", "updated_at", "in_flight"] {
        got.as_object_mut().unwrap().remove(k);
    }
    assert_eq!(shown, got);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_created_or_deleted_between_pages_shift_nothing() {
    let env = Env::new().await;
    let uri = functions_uri(&ns(ALICE));
    for name in ["b", "d", "f", "h"] {
        assert_eq!(env.create(ALICE, name).await.status, StatusCode::CREATED);
    }
    env.catch_up().await;
    let first = list(&env, ALICE, &format!("{uri}?limit=2")).await;
    assert_eq!(names(&first, "name"), ["b", "d"]);
    let next = next_link(&first).expect("a second page");

    // Before the cursor (not shown: that page was read), after it (shown),
    // and one deleted after it (gone).
    for name in ["a", "c", "e", "z"] {
        assert_eq!(env.create(ALICE, name).await.status, StatusCode::CREATED);
    }
    let deleted = env
        .send(
            request(
                axum::http::Method::DELETE,
                &function_uri(&ns(ALICE), "f"),
                Some(&token(ALICE)),
            )
            .body(axum::body::Body::empty())
            .unwrap(),
        )
        .await;
    assert_eq!(deleted.status, StatusCode::ACCEPTED, "{}", deleted.body);
    env.catch_up().await;
    let rest = pages(&env, ALICE, &next, "name").await;
    assert_eq!(rest.concat(), ["e", "h", "z"]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cursor_pages_only_its_own_namespace_and_another_namespace_is_404() {
    let env = Env::new().await;
    for name in ["a1", "a2", "a3"] {
        assert_eq!(env.create(ALICE, name).await.status, StatusCode::CREATED);
    }
    for name in ["b1", "b2"] {
        assert_eq!(env.create(BOB, name).await.status, StatusCode::CREATED);
    }
    env.catch_up().await;
    let alice = list(
        &env,
        ALICE,
        &format!("{}?limit=1", functions_uri(&ns(ALICE))),
    )
    .await;
    let cursor = alice.body["next_cursor"].as_str().unwrap().to_owned();

    // Alice's cursor in Bob's list: refused, nothing of either listed.
    let bob = list(
        &env,
        BOB,
        &format!("{}?limit=1&cursor={cursor}", functions_uri(&ns(BOB))),
    )
    .await;
    bob.assert_problem(
        "another namespace's cursor",
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-field",
    );
    assert_eq!(bob.field(), Some("cursor"));
    assert!(!bob.body.to_string().contains("a2"), "{}", bob.body);
    // Bob reading Alice's list, with her own cursor or without: 404.
    for uri in [
        functions_uri(&ns(ALICE)),
        format!("{}?cursor={cursor}", functions_uri(&ns(ALICE))),
        format!("/v1/namespaces/{}/triggers", ns(ALICE)),
        format!("/v1/namespaces/{}/jobs", ns(ALICE)),
        format!("{}/versions", function_uri(&ns(ALICE), "a1")),
    ] {
        let a = list(&env, BOB, &uri).await;
        a.assert_problem(&uri, StatusCode::NOT_FOUND, "not-found");
        assert!(!a.body.to_string().contains("a2"), "{}", a.body);
    }
    // A functions cursor is no triggers cursor.
    let triggers = list(
        &env,
        ALICE,
        &format!("/v1/namespaces/{}/triggers?cursor={cursor}", ns(ALICE)),
    )
    .await;
    assert_eq!(triggers.field(), Some("cursor"), "{}", triggers.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_limits_and_cursors_are_refused_naming_the_parameter() {
    let env = Env::new().await;
    assert_eq!(env.create(ALICE, "f").await.status, StatusCode::CREATED);
    assert_eq!(
        env.upload(ALICE, "f", &handler_zip("x")).await.status,
        StatusCode::ACCEPTED
    );
    env.catch_up().await;
    let ns = ns(ALICE);
    let own = list(&env, ALICE, &format!("{}?limit=1", functions_uri(&ns))).await;
    assert_eq!(own.status, StatusCode::OK);
    let b64 = |s: &str| b64url(s.as_bytes());
    // A real cursor of this list, and one with a character changed.
    let real = b64(&format!("functions/{ns}\nf"));
    let mut tampered = real.clone().into_bytes();
    tampered[3] ^= 0x01;
    let tampered = String::from_utf8(tampered).unwrap();
    let cases: Vec<(&str, String, &str)> = vec![
        ("limit 0", "limit=0".into(), "limit"),
        ("negative limit", "limit=-1".into(), "limit"),
        ("limit over 1000", "limit=1001".into(), "limit"),
        ("huge limit", "limit=99999999999999999999".into(), "limit"),
        ("non-numeric limit", "limit=ten".into(), "limit"),
        ("fractional limit", "limit=1.5".into(), "limit"),
        ("empty limit", "limit=".into(), "limit"),
        ("limit twice", "limit=1&limit=2".into(), "limit"),
        ("empty cursor", "cursor=".into(), "cursor"),
        ("not base64url", "cursor=%21%21%21".into(), "cursor"),
        (
            "padded base64",
            format!("cursor={}%3D", b64("functions/x")),
            "cursor",
        ),
        (
            "base64 of nothing we made",
            format!("cursor={}", b64("hello")),
            "cursor",
        ),
        (
            "not UTF-8",
            format!("cursor={}", b64url(&[0xff, 0xfe, b'\n', b'a'])),
            "cursor",
        ),
        ("tampered", format!("cursor={tampered}"), "cursor"),
        (
            "a name no function can have",
            format!("cursor={}", b64(&format!("functions/{ns}\nNOT A NAME"))),
            "cursor",
        ),
        (
            "overlong cursor",
            format!("cursor={}", "A".repeat(600)),
            "cursor",
        ),
        (
            "cursor twice",
            format!("cursor={real}&cursor={real}"),
            "cursor",
        ),
        ("unknown parameter", "page=2".into(), "page"),
        ("offset is not a parameter", "offset=10".into(), "offset"),
    ];
    // A real cursor is read.
    let ok = list(
        &env,
        ALICE,
        &format!("{}?cursor={real}", functions_uri(&ns)),
    )
    .await;
    assert_eq!(ok.status, StatusCode::OK, "{}", ok.body);
    assert_eq!(ok.body["items"], json!([]));
    let before = env.counts().await;
    let lists = [
        functions_uri(&ns),
        format!("/v1/namespaces/{ns}/triggers"),
        format!("{}/versions", function_uri(&ns, "f")),
        format!("/v1/namespaces/{ns}/jobs"),
    ];
    for base in &lists {
        for (what, query, field) in &cases {
            // Every list checks its own cursors: only the limit cases and the
            // ones no list made are shared; a functions cursor is refused by
            // the other two lists anyway.
            let a = list(&env, ALICE, &format!("{base}?{query}")).await;
            let what = format!("{base}: {what}");
            a.assert_problem(&what, StatusCode::UNPROCESSABLE_ENTITY, "invalid-field");
            assert_eq!(a.field(), Some(*field), "{what}: {}", a.body);
            assert!(a.headers.get(header::LINK).is_none(), "{what}");
        }
    }
    assert_eq!(env.counts().await, before, "bad paging writes nothing");
    // A versions cursor names a version: 0 and words are no version.
    for key in ["0", "-1", "one", "f"] {
        let c = b64(&format!("versions/{ns}/f\n{key}"));
        let a = list(&env, ALICE, &format!("{}?cursor={c}", lists[2])).await;
        assert_eq!(a.field(), Some("cursor"), "version {key:?}: {}", a.body);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn triggers_versions_and_jobs_page_too() {
    let env = Env::new().await;
    let ns = ns(ALICE);
    assert_eq!(env.create(ALICE, "f").await.status, StatusCode::CREATED);
    for i in 1..=3 {
        let up = env.upload(ALICE, "f", &handler_zip(&format!("v{i}"))).await;
        assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
    }
    let triggers = format!("/v1/namespaces/{ns}/triggers");
    assert_eq!(
        pages(&env, ALICE, &triggers, "name").await,
        [Vec::<String>::new()]
    );
    for (name, kind) in [("t-c", "cron"), ("t-a", "http"), ("t-b", "cron")] {
        let mut body = json!({ "name": name, "function": "f", "type": kind });
        if kind == "cron" {
            body["schedule"] = json!("0 3 * * *");
        }
        let a = env
            .send(post_json(&triggers, Some(&token(ALICE)), &body.to_string()))
            .await;
        assert_eq!(a.status, StatusCode::CREATED, "{}", a.body);
    }
    env.catch_up().await;
    let got = pages(&env, ALICE, &format!("{triggers}?limit=2"), "name").await;
    assert_eq!(got, [vec!["t-a", "t-b"], vec!["t-c"]]);

    let versions = format!("{}/versions", function_uri(&ns, "f"));
    let got = pages(&env, ALICE, &format!("{versions}?limit=2"), "version").await;
    assert_eq!(got, [vec!["3", "2"], vec!["1"]]);
    let first = list(&env, ALICE, &format!("{versions}?limit=2")).await;
    assert_eq!(first.body["live_version"], 3, "{}", first.body);

    let jobs = format!("/v1/namespaces/{ns}/jobs");
    assert_eq!(
        pages(&env, ALICE, &jobs, "name").await,
        [Vec::<String>::new()]
    );
    for name in ["j-c", "j-a", "j-b"] {
        let body = json!({ "name": name, "function": "f" });
        let a = env
            .send(post_json(&jobs, Some(&token(ALICE)), &body.to_string()))
            .await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{}", a.body);
    }
    env.catch_up().await;
    let got = pages(&env, ALICE, &format!("{jobs}?limit=2"), "name").await;
    assert_eq!(got, [vec!["j-a", "j-b"], vec!["j-c"]]);
    // A row is the job without its output.
    let page = list(&env, ALICE, &jobs).await;
    let job = &page.body["items"][0];
    assert_eq!(
        (&job["status"], &job["function"]),
        (&json!("Pending"), &json!("f"))
    );
    assert_eq!(
        (&job["stdout"], &job["stderr"]),
        (&Value::Null, &Value::Null)
    );
}

/// A functions page asked again is kept in memory while the read models
/// stand still (`page_cache`): it must show every change the projector has
/// applied since, on every page, and one namespace's kept page is never
/// another's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_page_asked_again_shows_what_the_projector_applied_since() {
    let env = Env::new().await;
    let uri = functions_uri(&ns(ALICE));
    let first = format!("{uri}?limit=2");
    for name in ["f-a", "f-b", "f-c"] {
        assert_eq!(env.create(ALICE, name).await.status, StatusCode::CREATED);
    }
    assert_eq!(env.create(BOB, "f-bob").await.status, StatusCode::CREATED);
    env.catch_up().await;
    let before = pages(&env, ALICE, &first, "name").await;
    assert_eq!(before, [vec!["f-a", "f-b"], vec!["f-c"]]);
    // Asked again, unchanged: the same answer.
    assert_eq!(pages(&env, ALICE, &first, "name").await, before);

    // Bob's namespace, read with the same limit while Alice's pages are
    // kept, shows Bob's functions.
    let bobs = functions_uri(&ns(BOB));
    assert_eq!(
        pages(&env, BOB, &format!("{bobs}?limit=2"), "name").await,
        [vec!["f-bob"]]
    );

    // A create, a delete and a spec change, each seen on the next read.
    assert_eq!(env.create(ALICE, "f-0").await.status, StatusCode::CREATED);
    env.catch_up().await;
    assert_eq!(
        pages(&env, ALICE, &first, "name").await,
        [vec!["f-0", "f-a"], vec!["f-b", "f-c"]]
    );
    let gone = env
        .send(delete(
            &function_uri(&ns(ALICE), "f-b"),
            Some(&token(ALICE)),
        ))
        .await;
    assert_eq!(gone.status, StatusCode::ACCEPTED, "{}", gone.body);
    env.catch_up().await;
    assert_eq!(
        pages(&env, ALICE, &first, "name").await,
        [vec!["f-0", "f-a"], vec!["f-c"]]
    );
    let changed = env
        .send(put_json(
            &function_uri(&ns(ALICE), "f-c"),
            Some(&token(ALICE)),
            &json!({ "memory_mb": 256 }).to_string(),
        ))
        .await;
    assert!(changed.status.is_success(), "{}", changed.body);
    env.catch_up().await;
    let last = list(&env, ALICE, &format!("{uri}?limit=1000")).await;
    let c = &last.body["items"][2];
    assert_eq!((&c["name"], &c["memory_mb"]), (&json!("f-c"), &json!(256)));
}
