//! The web console through the router, as a browser without JavaScript
//! uses it: sign-in (a token, a one-time code), sessions and their end,
//! the form token, tenancy, the security headers, escaping, and the seed's
//! plain-text routes.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use tower::ServiceExt;

use super::support::*;

// Sessions, sign-in forms, cookies and the console's text: its own file,
// beside this one (api/tests/api/console_isolation.rs).
#[path = "console_isolation.rs"]
mod isolation;

const ALICE: &str = "alice";
/// The console's session cookie.
pub const SESSION: &str = "__Host-sless_session";
/// The console's browser id.
pub const BROWSER: &str = "__Http-sless_browser";
const BOB: &str = "bob";

/// A browser: its cookies, kept between requests, and where it is.
pub struct Browser<'a> {
    env: &'a Env,
    pub cookies: BTreeMap<String, String>,
}

/// A page as the browser got it.
#[derive(Debug)]
pub struct Got {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub text: String,
}

impl Got {
    pub fn location(&self) -> &str {
        self.headers
            .get(header::LOCATION)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_default()
    }

    /// The value of the hidden field `csrf` of the page's first form that has one.
    pub fn csrf(&self) -> String {
        let at = self
            .text
            .find("name=\"csrf\" value=\"")
            .expect("a form token");
        let rest = &self.text[at + "name=\"csrf\" value=\"".len()..];
        rest[..rest.find('"').unwrap()].to_owned()
    }
}

impl<'a> Browser<'a> {
    pub fn new(env: &'a Env) -> Browser<'a> {
        Browser {
            env,
            cookies: BTreeMap::new(),
        }
    }

    async fn request(&mut self, method: Method, path: &str, form: Option<&[(&str, &str)]>) -> Got {
        let mut req = Request::builder()
            .method(method.clone())
            .uri(path)
            .header(header::HOST, "127.0.0.1:8080")
            .header(header::ACCEPT, "text/html");
        // As a browser sends a form from the console's own page.
        if method == Method::POST {
            req = req.header(header::ORIGIN, "http://127.0.0.1:8080");
        }
        if !self.cookies.is_empty() {
            let jar: Vec<String> = self
                .cookies
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect();
            req = req.header(header::COOKIE, jar.join("; "));
        }
        let body = match form {
            Some(fields) => {
                req = req.header(header::CONTENT_TYPE, "application/x-www-form-urlencoded");
                Body::from(encode(fields))
            }
            None => Body::empty(),
        };
        let res = self
            .env
            .app
            .clone()
            .oneshot(req.body(body).unwrap())
            .await
            .unwrap();
        for set in res.headers().get_all(header::SET_COOKIE) {
            let set = set.to_str().unwrap();
            let (pair, attrs) = set.split_once(';').unwrap_or((set, ""));
            let (k, v) = pair.split_once('=').unwrap();
            if attrs.contains("Max-Age=0") || v.is_empty() {
                self.cookies.remove(k);
            } else {
                self.cookies.insert(k.to_owned(), v.to_owned());
            }
        }
        let status = res.status();
        let headers = res.headers().clone();
        let bytes = res.into_body().collect().await.unwrap().to_bytes();
        Got {
            status,
            headers,
            text: String::from_utf8_lossy(&bytes).into_owned(),
        }
    }

    pub async fn get(&mut self, path: &str) -> Got {
        self.request(Method::GET, path, None).await
    }

    pub async fn post(&mut self, path: &str, form: &[(&str, &str)]) -> Got {
        self.request(Method::POST, path, Some(form)).await
    }

    /// Opens an event stream: its content type (the stream is closed).
    pub async fn open_stream(&mut self, path: &str) -> String {
        let jar: Vec<String> = self
            .cookies
            .iter()
            .map(|(k, v)| format!("{k}={v}"))
            .collect();
        let req = Request::builder()
            .uri(path)
            .header(header::HOST, "127.0.0.1:8080")
            .header(header::ACCEPT, "text/event-stream")
            .header(header::COOKIE, jar.join("; "))
            .body(Body::empty())
            .unwrap();
        let res = self.env.app.clone().oneshot(req).await.unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        res.headers()[header::CONTENT_TYPE]
            .to_str()
            .unwrap()
            .to_owned()
    }

    /// Signs in with `sub`'s token through the form.
    pub async fn sign_in(&mut self, sub: &str) -> Got {
        let form = self.get("/console/sign-in").await;
        assert_eq!(form.status, StatusCode::OK, "{}", form.text);
        let csrf = form.csrf();
        let token = token(sub);
        self.post("/console/sign-in", &[("token", &token), ("csrf", &csrf)])
            .await
    }
}

fn encode(fields: &[(&str, &str)]) -> String {
    fields
        .iter()
        .map(|(k, v)| format!("{}={}", pct(k), pct(v)))
        .collect::<Vec<_>>()
        .join("&")
}

fn pct(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' => (b as char).to_string(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

async fn with_function(env: &Env, sub: &str, name: &str, files: &[(&str, &[u8])]) {
    assert_eq!(env.create(sub, name).await.status, StatusCode::CREATED);
    let up = env.upload(sub, name, &zip_of(files)).await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{:?}", up.body);
    env.catch_up().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_token_signs_in_the_pages_show_the_namespace_and_signing_out_ends_the_session() {
    let env = Env::new().await;
    with_function(
        &env,
        ALICE,
        "hello",
        &[("handler.py", b"def handle(e):\n    return 1\n")],
    )
    .await;
    let mut browser = Browser::new(&env);

    // Not signed in: every page sends the browser to the sign-in page.
    let home = browser.get(&format!("/console/ns/{}", ns(ALICE))).await;
    assert_eq!(home.status, StatusCode::SEE_OTHER);
    assert_eq!(home.location(), "/console/sign-in");

    let signed = browser.sign_in(ALICE).await;
    assert_eq!(signed.status, StatusCode::SEE_OTHER, "{}", signed.text);
    assert_eq!(signed.location(), format!("/console/ns/{}", ns(ALICE)));
    let cookie = signed
        .headers
        .get_all(header::SET_COOKIE)
        .iter()
        .map(|v| v.to_str().unwrap().to_owned())
        .find(|c| c.starts_with("__Host-sless_session="))
        .expect("a session cookie");
    for attr in [
        "HttpOnly",
        "SameSite=Strict",
        "; Path=/;",
        "Max-Age=",
        "Secure",
    ] {
        assert!(cookie.contains(attr), "{cookie}");
    }
    assert!(!cookie.contains("Domain"), "{cookie}");
    assert!(!signed.text.contains(&token(ALICE)) && !cookie.contains(&token(ALICE)));

    let page = browser.get(&format!("/console/ns/{}", ns(ALICE))).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.text.contains(">hello</a>"), "{}", page.text);
    assert!(
        page.text.contains("/fn/"),
        "the function's URL: {}",
        page.text
    );
    let function = browser
        .get(&format!("/console/ns/{}/functions/hello", ns(ALICE)))
        .await;
    assert_eq!(function.status, StatusCode::OK);
    assert!(
        function.text.contains("handler.py")
            && function
                .text
                .contains(r#"<span class="keyword">def</span>"#),
        "{}",
        function.text
    );

    let csrf = page.csrf();
    let out = browser.post("/console/sign-out", &[("csrf", &csrf)]).await;
    assert_eq!(out.status, StatusCode::SEE_OTHER);
    let after = browser.get(&format!("/console/ns/{}", ns(ALICE))).await;
    assert_eq!(after.location(), "/console/sign-in", "the session ended");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sign_in_is_refused_without_its_form_token_and_with_a_bad_token() {
    let env = Env::new().await;
    let mut browser = Browser::new(&env);
    let no_form = browser
        .post(
            "/console/sign-in",
            &[("token", &token(ALICE)), ("csrf", "guess")],
        )
        .await;
    assert_eq!(no_form.status, StatusCode::FORBIDDEN);
    assert!(!browser.cookies.contains_key(SESSION));

    let form = browser.get("/console/sign-in").await;
    let csrf = form.csrf();
    let forged = sign(
        &serde_json::json!({"sub": ALICE, "exp": now() + 600}),
        b"another-secret-of-32-bytes-or-more!!",
    );
    let bad = browser
        .post("/console/sign-in", &[("token", &forged), ("csrf", &csrf)])
        .await;
    assert_eq!(bad.status, StatusCode::UNAUTHORIZED);
    assert!(bad.text.contains("Sign in"), "the form again: {}", bad.text);
    assert!(!bad.text.contains(&forged), "the token is not shown back");
    assert!(!browser.cookies.contains_key(SESSION));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_form_without_the_sessions_token_changes_nothing_and_with_it_is_the_apis_command() {
    let env = Env::new().await;
    with_function(&env, ALICE, "hello", &[("handler.py", b"x = 1\n")]).await;
    let trigger = env
        .send(post_json(
            &format!("/v1/namespaces/{}/triggers", ns(ALICE)),
            Some(&token(ALICE)),
            r#"{"name": "web", "function": "hello", "type": "http"}"#,
        ))
        .await;
    assert_eq!(trigger.status, StatusCode::CREATED, "{:?}", trigger.body);
    env.catch_up().await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let page = browser.get(&format!("/console/ns/{}", ns(ALICE))).await;
    let csrf = page.csrf();
    let path = format!("/console/ns/{}/triggers/web", ns(ALICE));

    let before = env.counts().await;
    for refused in [
        vec![("enabled", "false")],
        vec![("enabled", "false"), ("csrf", "forged")],
    ] {
        let got = browser.post(&path, &refused).await;
        assert_eq!(got.status, StatusCode::FORBIDDEN, "{}", got.text);
    }
    assert_eq!(env.counts().await, before, "nothing written");

    let done = browser
        .post(&path, &[("enabled", "false"), ("csrf", &csrf)])
        .await;
    assert_eq!(done.status, StatusCode::SEE_OTHER, "{}", done.text);
    let events = sqlx::query_as::<_, (String, serde_json::Value)>(
        "select type, metadata from events where stream = $1 order by version desc limit 1",
    )
    .bind(format!("trigger/{}/web", ns(ALICE)))
    .fetch_one(&env.db.pool)
    .await
    .unwrap();
    assert_eq!(events.0, "TriggerToggled");
    assert_eq!(events.1["actor"], ALICE, "{}", events.1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_tenants_namespace_and_functions_are_404_pages() {
    let env = Env::new().await;
    with_function(&env, BOB, "secret", &[("handler.py", b"x = 1\n")]).await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    for path in [
        format!("/console/ns/{}", ns(BOB)),
        format!("/console/ns/{}/functions/secret", ns(BOB)),
        format!("/console/ns/{}/functions/secret", ns(ALICE)),
        "/console/ns/not-a-namespace".to_owned(),
    ] {
        let got = browser.get(&path).await;
        assert_eq!(got.status, StatusCode::NOT_FOUND, "{path}: {}", got.text);
        assert!(!got.text.contains("handler.py"), "{path}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ended_session_and_a_used_code_sign_in_again() {
    let env = Env::new().await;
    let mut browser = Browser::new(&env);
    browser.sign_in(ALICE).await;
    let home = format!("/console/ns/{}", ns(ALICE));
    assert_eq!(browser.get(&home).await.status, StatusCode::OK);
    sqlx::query("update console_sessions set expires_at = now() - interval '1 second'")
        .execute(&env.db.pool)
        .await
        .unwrap();
    assert_eq!(browser.get(&home).await.location(), "/console/sign-in");

    // A one-time code (as sless dev prints it): once.
    let caller = sless_api::Auth::hs256(SECRET, None, None)
        .verify(&token(ALICE))
        .unwrap();
    let code =
        sless_api::console::issue_code(&env.db.pool, &caller, std::time::Duration::from_secs(60))
            .await
            .unwrap();
    let mut fresh = Browser::new(&env);
    let first = fresh.get(&format!("/console/sign-in?code={code}")).await;
    assert_eq!(first.location(), home);
    assert_eq!(fresh.get(&home).await.status, StatusCode::OK);
    let again = Browser::new(&env)
        .get(&format!("/console/sign-in?code={code}"))
        .await;
    assert_eq!(again.status, StatusCode::UNAUTHORIZED);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_console_answer_carries_the_security_headers() {
    let env = Env::new().await;
    let mut browser = Browser::new(&env);
    let mut answers = vec![
        browser.get("/console/sign-in").await,
        browser.get("/console").await,
        browser.get("/console/assets/console.css").await,
        browser.get("/console/assets/console.js").await,
    ];
    browser.sign_in(ALICE).await;
    answers.push(browser.get(&format!("/console/ns/{}", ns(ALICE))).await);
    answers.push(browser.get(&format!("/console/ns/{}", ns(BOB))).await);
    for got in &answers {
        let h = |name: header::HeaderName| {
            got.headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .unwrap_or_default()
                .to_owned()
        };
        let csp = h(header::CONTENT_SECURITY_POLICY);
        assert!(
            csp.contains("script-src 'self'")
                && csp.contains("frame-ancestors 'none'")
                && !csp.contains("unsafe-inline"),
            "{csp}"
        );
        assert_eq!(h(header::X_CONTENT_TYPE_OPTIONS), "nosniff");
        assert!(!h(header::REFERRER_POLICY).is_empty());
        assert!(
            !got.text.contains("<script>"),
            "no inline script: {}",
            got.text
        );
    }
}

/// Strings a user controls that must never come out as markup.
pub const HOSTILE: &[&str] = &[
    "<script>alert(1)</script>",
    "\"><img src=x onerror=alert(1)>",
    "javascript:alert(1)",
    "\u{202e}evil\u{202c}",
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_users_control_is_escaped_on_every_page() {
    let env = Env::new().await;
    for (i, hostile) in HOSTILE.iter().enumerate() {
        // In an actor's name (the token's subject), a file's name and its text.
        let sub = format!("user{i}{hostile}");
        let name = format!("f{i}");
        let file = format!("dir{i}/{}.py", hostile.replace('/', "_"));
        let long = "x".repeat(200);
        with_function(
            &env,
            &sub,
            &name,
            &[
                (
                    "handler.py",
                    format!("# {hostile}\ns = \"{hostile}\"\n").as_bytes(),
                ),
                (&file, hostile.as_bytes()),
                (&format!("{long}.txt"), b"long name"),
            ],
        )
        .await;
        let mut browser = Browser::new(&env);
        browser.sign_in(&sub).await;
        for path in [
            format!("/console/ns/{}", ns(&sub)),
            format!("/console/ns/{}/functions/{name}", ns(&sub)),
        ] {
            let got = browser.get(&path).await;
            assert_eq!(got.status, StatusCode::OK, "{path}: {}", got.text);
            if hostile.contains('<') {
                assert!(
                    !got.text.contains(hostile),
                    "{path} shows {hostile:?} unescaped"
                );
                let escaped = hostile
                    .replace('&', "&amp;")
                    .replace('<', "&lt;")
                    .replace('>', "&gt;");
                let escaped = escaped.replace('"', "&quot;");
                assert!(
                    got.text.contains(&escaped),
                    "{path} lost {hostile:?}: {}",
                    got.text
                );
            }
            assert!(!got.text.contains("<img"), "{path}");
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_seeds_plain_text_routes_answer_curl_and_send_browsers_to_the_console() {
    let env = Env::new().await;
    with_function(
        &env,
        ALICE,
        "hello",
        &[("handler.py", b"def handle(e):\n    return 1\n")],
    )
    .await;
    let list = env
        .send(get(&format!("/funcs/{}", ns(ALICE)), Some(&token(ALICE))))
        .await;
    assert_eq!(list.status, StatusCode::OK);
    assert!(list.content_type().starts_with("text/plain"));
    let text = list.body.as_str().unwrap_or_default().to_owned();
    assert!(text.starts_with("hello Pending v1 "), "{text}");
    let source = env
        .send(get(
            &format!("/funcs/{}/source/hello", ns(ALICE)),
            Some(&token(ALICE)),
        ))
        .await;
    assert!(
        source
            .body
            .as_str()
            .unwrap_or_default()
            .contains("=== handler.py (")
            && source
                .body
                .as_str()
                .unwrap_or_default()
                .contains("return 1"),
        "{:?}",
        source.body
    );
    for (what, req, status) in [
        (
            "another tenant",
            get(&format!("/funcs/{}", ns(ALICE)), Some(&token(BOB))),
            StatusCode::NOT_FOUND,
        ),
        (
            "no token",
            get(&format!("/funcs/{}", ns(ALICE)), None),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "another tenant's source",
            get(
                &format!("/funcs/{}/source/hello", ns(ALICE)),
                Some(&token(BOB)),
            ),
            StatusCode::NOT_FOUND,
        ),
    ] {
        assert_eq!(env.send(req).await.status, status, "{what}");
    }
    let mut browser = Browser::new(&env);
    let redirected = browser
        .get(&format!("/funcs/{}/source/hello", ns(ALICE)))
        .await;
    assert_eq!(
        redirected.location(),
        format!("/console/ns/{}/functions/hello", ns(ALICE))
    );
}
