//! What keeps the console its own, with real cookie headers: the session
//! and the sign-in form bound to the browser that asked for them, a cookie
//! sent twice refused, forms only from the console's own origin, exact
//! loopback names; and what keeps its text honest: invisible and
//! reordering characters shown marked, environment values hidden on the
//! audit log.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use sless_api::console::session::on_loopback;
use tower::ServiceExt;

use super::{BROWSER, Browser, Got, SESSION, with_function};
use crate::api::support::*;

const ALICE: &str = "alice";
const MALLORY: &str = "mallory";
const RLO: char = '\u{202e}';
const MARKED: &str = "&lt;U+202E&gt;";

/// One request with exactly these headers (and `Host: 127.0.0.1:8080`).
async fn raw(env: &Env, method: Method, path: &str, headers: &[(&str, &str)], form: &str) -> Got {
    let mut req = Request::builder()
        .method(method)
        .uri(path)
        .header(header::HOST, "127.0.0.1:8080");
    for (k, v) in headers {
        req = req.header(*k, *v);
    }
    if !form.is_empty() {
        req = req.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
    }
    let res = env
        .app
        .clone()
        .oneshot(req.body(Body::from(form.to_owned())).unwrap())
        .await
        .unwrap();
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res.into_body().collect().await.unwrap().to_bytes();
    Got {
        status,
        headers,
        text: String::from_utf8_lossy(&bytes).into_owned(),
    }
}

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

fn sessions_set(got: &Got) -> bool {
    got.headers
        .get_all(header::SET_COOKIE)
        .iter()
        .any(|c| c.to_str().unwrap().starts_with(&format!("{SESSION}=")))
}

async fn sessions(env: &Env) -> i64 {
    sqlx::query_scalar("select count(*) from console_sessions")
        .fetch_one(&env.db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_form_passes_only_with_a_token_the_server_gave_this_browser() {
    let env = Env::new().await;
    // Mallory's own browser gets a real form: its browser id and token.
    let mut mallory = Browser::new(&env);
    let form = mallory.get("/console/sign-in").await;
    let minted_csrf = form.csrf();
    let minted_browser = mallory.cookies[BROWSER].clone();
    let set = form
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .next()
        .unwrap();
    let set = set.to_str().unwrap();
    for attr in ["Secure", "HttpOnly", "SameSite=Strict", "Path=/console"] {
        assert!(set.starts_with(BROWSER) && set.contains(attr), "{set}");
    }
    // The victim's browser, with an id of its own.
    let mut victim = Browser::new(&env);
    victim.get("/console/sign-in").await;
    let victims_browser = victim.cookies[BROWSER].clone();
    let token = pct(&token(MALLORY));
    let origin = ("origin", "http://127.0.0.1:8080");
    // What the case is, the headers it sends beside Origin, the form token it posts.
    type Case<'a> = (&'a str, Vec<(&'a str, String)>, String);
    let cases: Vec<Case> = vec![
        (
            "the old double submit: a cookie a script wrote, and the same value posted",
            vec![("cookie", "sless_sign_in=made-up".into())],
            "made-up".into(),
        ),
        (
            "a made-up browser id and the same value posted",
            vec![("cookie", format!("{BROWSER}=made-up"))],
            "made-up".into(),
        ),
        (
            "mallory's real form token, from the victim's browser",
            vec![("cookie", format!("{BROWSER}={victims_browser}"))],
            minted_csrf.clone(),
        ),
        (
            "a real pair, posted from the functions' origin (Origin)",
            vec![
                ("cookie", format!("{BROWSER}={minted_browser}")),
                ("origin", "http://127.0.0.1:8081".into()),
            ],
            minted_csrf.clone(),
        ),
        (
            "a real pair, posted from the functions' origin (Sec-Fetch-Site)",
            vec![
                ("cookie", format!("{BROWSER}={minted_browser}")),
                ("sec-fetch-site", "same-site".into()),
            ],
            minted_csrf.clone(),
        ),
        ("no browser id at all", vec![], minted_csrf.clone()),
    ];
    for (what, headers, csrf) in cases {
        let mut headers: Vec<(&str, &str)> =
            headers.iter().map(|(k, v)| (*k, v.as_str())).collect();
        if !headers.iter().any(|(k, _)| *k == "origin") {
            headers.push(origin);
        }
        let got = raw(
            &env,
            Method::POST,
            "/console/sign-in",
            &headers,
            &format!("token={token}&csrf={}", pct(&csrf)),
        )
        .await;
        assert_eq!(got.status, StatusCode::FORBIDDEN, "{what}: {}", got.text);
        assert!(!sessions_set(&got), "{what}");
        assert_eq!(sessions(&env).await, 0, "{what}: no session written");
    }
    // The real pair from the browser it was given to passes, once.
    let body = format!("token={token}&csrf={}", pct(&minted_csrf));
    let cookie = format!("{BROWSER}={minted_browser}");
    let headers = [("cookie", cookie.as_str()), origin];
    let first = raw(&env, Method::POST, "/console/sign-in", &headers, &body).await;
    assert_eq!(first.status, StatusCode::SEE_OTHER, "{}", first.text);
    assert!(sessions_set(&first));
    let again = raw(&env, Method::POST, "/console/sign-in", &headers, &body).await;
    assert_eq!(
        again.status,
        StatusCode::FORBIDDEN,
        "a form token is used once"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_session_planted_in_another_browser_signs_nobody_in() {
    let env = Env::new().await;
    let mut mallory = Browser::new(&env);
    assert_eq!(mallory.sign_in(MALLORY).await.status, StatusCode::SEE_OTHER);
    let session = mallory.cookies[SESSION].clone();
    let browser = mallory.cookies[BROWSER].clone();
    let home = format!("/console/ns/{}", ns(MALLORY));
    let theirs = format!("{SESSION}={session}; {BROWSER}={browser}");
    let own = raw(&env, Method::GET, &home, &[("cookie", &theirs)], "").await;
    assert_eq!(own.status, StatusCode::OK, "mallory's own browser");

    let mut victim = Browser::new(&env);
    victim.get("/console/sign-in").await;
    let victims_browser = victim.cookies[BROWSER].clone();
    for (what, cookie) in [
        ("the session alone", format!("{SESSION}={session}")),
        (
            "the session beside the victim's browser id",
            format!("{SESSION}={session}; {BROWSER}={victims_browser}"),
        ),
        ("the old cookie's name", format!("sless_session={session}")),
    ] {
        let got = raw(&env, Method::GET, "/console", &[("cookie", &cookie)], "").await;
        assert_eq!(got.location(), "/console/sign-in", "{what}: {}", got.text);
        let page = raw(&env, Method::GET, &home, &[("cookie", &cookie)], "").await;
        assert_eq!(page.location(), "/console/sign-in", "{what}: {}", page.text);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_with_a_console_cookie_twice_is_refused_and_changes_nothing() {
    let env = Env::new().await;
    let mut alice = Browser::new(&env);
    alice.sign_in(ALICE).await;
    let page = alice.get(&format!("/console/ns/{}", ns(ALICE))).await;
    let csrf = page.csrf();
    let (s, b) = (
        alice.cookies[SESSION].clone(),
        alice.cookies[BROWSER].clone(),
    );
    let home = format!("/console/ns/{}", ns(ALICE));
    let cases: Vec<(&str, Vec<String>)> = vec![
        (
            "the session twice",
            vec![format!("{SESSION}={s}; {SESSION}=other; {BROWSER}={b}")],
        ),
        (
            "the same session twice",
            vec![format!("{SESSION}={s}; {BROWSER}={b}; {SESSION}={s}")],
        ),
        (
            "in two Cookie headers",
            vec![
                format!("{SESSION}={s}; {BROWSER}={b}"),
                format!("{SESSION}=x"),
            ],
        ),
        (
            "another case of its name",
            vec![format!(
                "__host-sless_session=x; {SESSION}={s}; {BROWSER}={b}"
            )],
        ),
        (
            "the browser id twice",
            vec![format!("{SESSION}={s}; {BROWSER}={b}; {BROWSER}=x")],
        ),
    ];
    for (what, cookies) in cases {
        let mut headers: Vec<(&str, &str)> =
            cookies.iter().map(|c| ("cookie", c.as_str())).collect();
        for path in [home.as_str(), "/console"] {
            let got = raw(&env, Method::GET, path, &headers, "").await;
            assert_eq!(
                got.status,
                StatusCode::BAD_REQUEST,
                "{what} {path}: {}",
                got.text
            );
            assert!(got.text.contains("twice"), "{what} {path}: {}", got.text);
        }
        headers.push(("origin", "http://127.0.0.1:8080"));
        let out = raw(
            &env,
            Method::POST,
            "/console/sign-out",
            &headers,
            &format!("csrf={csrf}"),
        )
        .await;
        assert_eq!(out.status, StatusCode::BAD_REQUEST, "{what}: {}", out.text);
        let sign_in = raw(&env, Method::GET, "/console/sign-in", &headers, "").await;
        if what.contains("browser") {
            assert_eq!(sign_in.status, StatusCode::BAD_REQUEST, "{what}");
        }
        assert_eq!(
            sessions(&env).await,
            1,
            "{what}: the session is still there"
        );
    }
    assert_eq!(alice.get(&home).await.status, StatusCode::OK);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_exact_loopback_names_may_post_forms_over_plain_http() {
    for (host, loopback) in [
        ("localhost", true),
        ("localhost:8080", true),
        ("LOCALHOST:8080", true),
        ("127.0.0.1", true),
        ("127.0.0.1:8080", true),
        ("[::1]", true),
        ("[::1]:8080", true),
        ("127.evil.example", false),
        ("127.evil.example:8080", false),
        ("127.0.0.1.evil.example", false),
        ("127.1", false),
        ("127.0.0.2:8080", false),
        ("localhost.evil.example", false),
        ("evil-localhost", false),
        ("[::1].evil.example", false),
        ("[::2]:8080", false),
        ("127.0.0.1:", false),
        ("127.0.0.1:80:80", false),
        ("127.0.0.1:8080x", false),
        ("127.0.0.1:123456", false),
        ("", false),
    ] {
        assert_eq!(on_loopback(host), loopback, "{host:?}");
    }
    // Through the router: a form sent over plain http to a name that is not
    // loopback is refused; the same from https, or to loopback, is not.
    let env = Env::new().await;
    for (host, origin, refused) in [
        (
            "127.evil.example:8080",
            "http://127.evil.example:8080",
            true,
        ),
        (
            "127.evil.example:8080",
            "https://127.evil.example:8080",
            false,
        ),
        ("127.0.0.1:8080", "http://127.0.0.1:8080", false),
        ("localhost:8080", "http://localhost:8080", false),
    ] {
        let req = Request::builder()
            .method(Method::POST)
            .uri("/console/sign-in")
            .header(header::HOST, host)
            .header(header::ORIGIN, origin)
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Body::from("token=x&csrf=y"))
            .unwrap();
        let res = env.app.clone().oneshot(req).await.unwrap();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&bytes);
        assert_eq!(
            text.contains("Not sent from the console"),
            refused,
            "{host} from {origin}: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sign_in_link_opened_by_another_page_signs_nobody_in() {
    let env = Env::new().await;
    let caller = sless_api::Auth::hs256(SECRET, None, None)
        .verify(&token(MALLORY))
        .unwrap();
    let code =
        sless_api::console::issue_code(&env.db.pool, &caller, std::time::Duration::from_secs(60))
            .await
            .unwrap();
    let link = format!("/console/sign-in?code={code}");
    for site in ["same-site", "cross-site"] {
        let got = raw(&env, Method::GET, &link, &[("sec-fetch-site", site)], "").await;
        assert_eq!(got.status, StatusCode::FORBIDDEN, "{site}: {}", got.text);
        assert!(!sessions_set(&got), "{site}");
    }
    let typed = raw(&env, Method::GET, &link, &[("sec-fetch-site", "none")], "").await;
    assert_eq!(
        typed.location(),
        format!("/console/ns/{}", ns(MALLORY)),
        "{}",
        typed.text
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reordering_and_invisible_characters_are_shown_marked_on_every_page() {
    let env = Env::new().await;
    // The actor (the token's subject), a file's name, its source and a diff.
    let sub = format!("eve{RLO}gnp.exe");
    let file = format!("docs/read{RLO}me.py");
    let v1 = format!("access = \"user\" # {RLO}\u{2066} ok\u{2069}\u{200b}\n");
    let v2 = format!("access = \"admin\" # {RLO}\u{2066} ok\u{2069}\n");
    with_function(
        &env,
        &sub,
        "hello",
        &[("handler.py", v1.as_bytes()), (&file, b"x = 1\n")],
    )
    .await;
    let up = env
        .upload(
            &sub,
            "hello",
            &zip_of(&[("handler.py", v2.as_bytes()), (&file, b"x = 1\n")]),
        )
        .await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{:?}", up.body);
    env.catch_up().await;
    // A job's output.
    let created = env
        .send(post_json(
            &format!("/v1/namespaces/{}/jobs", ns(&sub)),
            Some(&token(&sub)),
            &serde_json::json!({ "name": "run", "function": "hello" }).to_string(),
        ))
        .await;
    assert_eq!(created.status, StatusCode::ACCEPTED, "{:?}", created.body);
    let output = format!("done {RLO}txt.exe");
    crate::api::jobs::worker_appends(&env, &sub, "run", &[crate::api::jobs::succeeded(&output)])
        .await;
    env.catch_up().await;

    let mut browser = Browser::new(&env);
    assert_eq!(browser.sign_in(&sub).await.status, StatusCode::SEE_OTHER);
    let home = format!("/console/ns/{}", ns(&sub));
    let function = format!("{home}/functions/hello");
    for (what, path, expected) in [
        (
            "the actor in the header",
            home.clone(),
            "eve<span class=\"invisible\"".to_owned(),
        ),
        (
            "the source",
            format!("{function}?file=handler.py"),
            "&lt;U+2066&gt;".into(),
        ),
        (
            "a file's name",
            format!("{function}?file={}", pct(&file)),
            "read<span class=\"invisible\"".to_owned(),
        ),
        (
            "the diff",
            format!("{function}/versions?from=1&to=2"),
            "&lt;U+200B&gt;".into(),
        ),
        (
            "the side by side diff",
            format!("{function}/versions?from=1&to=2&view=split"),
            "&lt;U+2069&gt;".into(),
        ),
        (
            "who uploaded",
            format!("{function}/versions"),
            MARKED.into(),
        ),
        (
            "a job's output",
            format!("{home}/jobs/run"),
            "done <span class=\"invisible\"".to_owned(),
        ),
        (
            "the audit log's actor",
            format!("{home}/events"),
            MARKED.into(),
        ),
    ] {
        let got = browser.get(&path).await;
        assert_eq!(got.status, StatusCode::OK, "{what}: {}", got.text);
        for c in [RLO, '\u{2066}', '\u{2069}', '\u{200b}'] {
            assert!(
                !got.text.contains(c),
                "{what} shows U+{:04X} raw: {}",
                c as u32,
                got.text
            );
        }
        assert!(got.text.contains(MARKED), "{what}: {}", got.text);
        assert!(
            got.text.contains(&expected),
            "{what}: {expected} is not in {}",
            got.text
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_audit_log_shows_environment_names_and_hides_their_values() {
    let env = Env::new().await;
    let mut spec = spec("hello");
    spec["env_vars"] = serde_json::json!({ "API_KEY": "s3cret-value", "MODE": "pr0d-value" });
    let created = env
        .send(post_json(
            &functions_uri(&ns(ALICE)),
            Some(&token(ALICE)),
            &spec.to_string(),
        ))
        .await;
    assert_eq!(created.status, StatusCode::CREATED, "{:?}", created.body);
    env.catch_up().await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    for path in [
        format!("/console/ns/{}/events", ns(ALICE)),
        format!("/console/ns/{}/events?function=hello", ns(ALICE)),
        format!("/console/ns/{}/functions/hello", ns(ALICE)),
    ] {
        let got = browser.get(&path).await;
        assert_eq!(got.status, StatusCode::OK, "{path}: {}", got.text);
        assert!(
            got.text.contains("API_KEY") && got.text.contains("MODE"),
            "{path}: {}",
            got.text
        );
        for secret in ["s3cret-value", "pr0d-value"] {
            assert!(
                !got.text.contains(secret),
                "{path} shows {secret}: {}",
                got.text
            );
        }
    }
    let log = browser
        .get(&format!("/console/ns/{}/events", ns(ALICE)))
        .await;
    assert!(
        log.text
            .contains("&quot;API_KEY&quot;:&quot;(hidden)&quot;"),
        "{}",
        log.text
    );
}
