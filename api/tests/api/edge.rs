//! What crosses the proxy towards a function, through real proxied calls:
//! the functions' router served on a loopback socket as the binary serves
//! it (`sless_api::plumbing::serve`), requests written byte for byte, and a function
//! (an echo upstream) that answers with the headers it received. No
//! spelling of the platform's token, and none of its cookies, reaches the
//! function; what is not the platform's does, as sent; and the function is
//! told where the call came from by the proxy, not by the caller.

use std::time::Duration;

use serde_json::Value;
use sless_api::{AppState, Auth};
use tokio::net::TcpListener;
use tokio::sync::oneshot;

use super::proxy::{Upstream, deployed};
use super::support::*;

const SUB: &str = "ivan@example.com";
const BASIC: &str = "Basic dXNlcjpwYXNz";

/// The functions' origin over `env`'s database and bucket, served on a
/// loopback port until the sender is dropped.
async fn functions_origin(env: &Env) -> (String, oneshot::Sender<()>) {
    let state = AppState::new(
        env.db.pool.clone(),
        env.s3.blobs(),
        Auth::hs256(SECRET, None, None),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (stop_tx, stop) = oneshot::channel::<()>();
    tokio::spawn(async move {
        sless_api::plumbing::serve::serve(
            listener,
            sless_api::fn_router(state),
            sless_api::plumbing::serve::FN_HEADER_PARSE_LIMIT,
            async move {
                let _ = stop.await;
            },
        )
        .await
        .unwrap();
    });
    (addr, stop_tx)
}

/// Sends a GET of `path` with these header fields, exactly as given, on a
/// fresh connection; the headers the echo function received.
async fn seen_by_function(addr: &str, path: &str, fields: &[(&str, String)]) -> Value {
    let mut head = format!("GET {path} HTTP/1.1\r\nHost: fn.test:8081\r\nConnection: close\r\n");
    for (name, value) in fields {
        head.push_str(&format!("{name}: {value}\r\n"));
    }
    head.push_str("\r\n");
    let raw = raw_exchange(addr, &head).await;
    let (status, body) = raw.split_once("\r\n\r\n").expect("an HTTP answer");
    assert!(status.starts_with("HTTP/1.1 200 "), "{raw}");
    let echoed: Value = serde_json::from_str(body).unwrap_or_else(|_| panic!("{raw}"));
    echoed["headers"].clone()
}

/// How the function is called: `{t}` stands for a token.
struct Row {
    fields: &'static [(&'static str, &'static str)],
    /// What the function gets: `authorization` and `cookie` (None: the
    /// header did not reach it).
    authorization: Option<&'static str>,
    cookie: Option<&'static str>,
}

const OURS: &[Row] = &[
    Row {
        fields: &[("Authorization", "Bearer {t}")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "bearer {t}")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "Bearer\t{t}")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "bearer  {t}")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "Bearer   \t {t}")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "Token {t}")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "JWT {t}")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "{t}")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "Bearer {t},")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "Bearer {t}, Basic dXNlcjpwYXNz")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "Basic dXNlcjpwYXNz, Bearer {t}")],
        authorization: None,
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "Bearer token=\"{t}\"")],
        authorization: None,
        cookie: None,
    },
    // The field that carries it goes; the other arrives.
    Row {
        fields: &[("Authorization", "Token {t}"), ("Authorization", BASIC)],
        authorization: Some(BASIC),
        cookie: None,
    },
    Row {
        fields: &[("Cookie", "a=1; sless_session=s3cret; b=2")],
        authorization: None,
        cookie: Some("a=1; b=2"),
    },
    Row {
        fields: &[("Cookie", "a=1, sless_session=s3cret")],
        authorization: None,
        cookie: Some("a=1"),
    },
    Row {
        fields: &[("Cookie", "a=1,sless_session=s3cret")],
        authorization: None,
        cookie: Some("a=1"),
    },
    Row {
        fields: &[("Cookie", "a=1"), ("Cookie", "sless_session=s3cret")],
        authorization: None,
        cookie: Some("a=1"),
    },
    Row {
        fields: &[("Cookie", "__Host-sless_session=s3cret; theme=dark")],
        authorization: None,
        cookie: Some("theme=dark"),
    },
    Row {
        fields: &[("Cookie", "SLESS_Session=s3cret;\ttheme=dark")],
        authorization: None,
        cookie: Some("theme=dark"),
    },
    Row {
        fields: &[("Cookie", "theme=dark; __secure-SLESS_csrf=c")],
        authorization: None,
        cookie: Some("theme=dark"),
    },
    Row {
        fields: &[
            ("Authorization", "JWT {t}"),
            ("Cookie", "sless_session=s3cret , theme=dark"),
        ],
        authorization: None,
        cookie: Some("theme=dark"),
    },
];

const THEIRS: &[Row] = &[
    Row {
        fields: &[("Authorization", "Bearer {t}")],
        authorization: Some("Bearer {t}"),
        cookie: None,
    },
    Row {
        fields: &[("Authorization", "Token {t}, Basic dXNlcjpwYXNz")],
        authorization: Some("Token {t}, Basic dXNlcjpwYXNz"),
        cookie: None,
    },
    Row {
        fields: &[("Authorization", BASIC)],
        authorization: Some(BASIC),
        cookie: None,
    },
    Row {
        fields: &[("Cookie", "a=1,2; session=x")],
        authorization: None,
        cookie: Some("a=1,2; session=x"),
    },
];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_spelling_of_the_platform_s_credentials_reaches_a_function_and_others_do() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    let (addr, _stop) = functions_origin(&env).await;
    let path = format!("/fn/{}/echo", ns(SUB));

    // A caller's token (another tenant's, of this platform), expired too.
    let expired = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({"sub": "victim", "exp": 1}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET),
    )
    .unwrap();
    // A token of another issuer, well-formed.
    let another = sless_api::issue_hs256(
        b"another-issuer-secret-0123456789abcd",
        "victim",
        Duration::from_secs(3600),
    );
    for (rows, t) in [
        (OURS, token("victim@example.com")),
        (OURS, expired),
        (THEIRS, another.clone()),
    ] {
        for row in rows {
            let fields: Vec<(&str, String)> = row
                .fields
                .iter()
                .map(|(n, v)| (*n, v.replace("{t}", &t)))
                .collect();
            let seen = seen_by_function(&addr, &path, &fields).await;
            let want = row.authorization.map(|a| a.replace("{t}", &t));
            assert_eq!(
                seen["authorization"].as_str(),
                want.as_deref(),
                "{fields:?}: {seen}"
            );
            assert_eq!(seen["cookie"].as_str(), row.cookie, "{fields:?}: {seen}");
            // Not in any header, in any form.
            if std::ptr::eq(rows, OURS) {
                let all = seen.to_string();
                assert!(!all.contains(&t), "{fields:?}: {seen}");
                assert!(!all.contains("s3cret"), "{fields:?}: {seen}");
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_is_told_where_a_call_came_from_by_the_proxy_not_the_caller() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    let (addr, _stop) = functions_origin(&env).await;
    let path = format!("/fn/{}/echo", ns(SUB));

    let lies: Vec<(&str, String)> = [
        ("X-Forwarded-For", "6.6.6.6"),
        ("Forwarded", "for=6.6.6.6;host=bank.example;proto=https"),
        ("X-Forwarded-Host", "bank.example"),
        ("X-Forwarded-Proto", "https"),
        ("X-Forwarded-Port", "443"),
        ("X-Real-IP", "6.6.6.6"),
        ("X-Kept", "1"),
    ]
    .into_iter()
    .map(|(n, v)| (n, v.to_owned()))
    .collect();
    let seen = seen_by_function(&addr, &path, &lies).await;
    assert!(!seen.to_string().contains("6.6.6.6"), "{seen}");
    assert!(!seen.to_string().contains("bank.example"), "{seen}");
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "{seen}");
    assert_eq!(seen["x-forwarded-host"], "fn.test:8081", "{seen}");
    assert_eq!(seen["x-forwarded-proto"], "http", "{seen}");
    assert_eq!(
        seen["forwarded"], "for=127.0.0.1;host=\"fn.test:8081\";proto=http",
        "{seen}"
    );
    assert!(seen.get("x-forwarded-port").is_none(), "{seen}");
    assert!(seen.get("x-real-ip").is_none(), "{seen}");
    assert_eq!(seen["x-kept"], "1");

    // Without any of them, the same.
    let seen = seen_by_function(&addr, &path, &[]).await;
    assert_eq!(seen["x-forwarded-for"], "127.0.0.1", "{seen}");
    assert_eq!(
        seen["forwarded"], "for=127.0.0.1;host=\"fn.test:8081\";proto=http",
        "{seen}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn behind_an_https_origin_a_function_is_told_https() {
    let env = Env::new().await;
    let up = Upstream::echo().await;
    deployed(&env, SUB, "echo", 30, &up.url).await;
    let app = super::proxy::app_with(&env, |s| {
        s.fn_url = Some("https://fn.example.com".into());
    });
    let req = axum::http::Request::get(format!("/fn/{}/echo", ns(SUB)))
        .header("host", "fn.example.com")
        .header("x-forwarded-proto", "http")
        .body(axum::body::Body::empty())
        .unwrap();
    let answer = send(&app, req).await;
    let seen = &answer.body["headers"];
    assert_eq!(seen["x-forwarded-proto"], "https", "{seen}");
    assert_eq!(seen["x-forwarded-host"], "fn.example.com", "{seen}");
    // Handed to the router without a connection: no peer to tell of.
    assert!(seen.get("x-forwarded-for").is_none(), "{seen}");
    assert_eq!(
        seen["forwarded"], "host=fn.example.com;proto=https",
        "{seen}"
    );
}
