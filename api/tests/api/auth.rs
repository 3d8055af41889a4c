//! Bearer tokens: every way a token can be wrong gets a 401 problem with a
//! `WWW-Authenticate` challenge, and writes nothing; the controls beside
//! each table show the same request with a good token does write.
//!
//! The keys are fixtures in `keys/` (see its README): RS256 and ES256 are
//! checked with real key pairs, through PEM files and a JSON Web Key Set.

use std::sync::atomic::{AtomicUsize, Ordering};

use axum::Router;
use axum::http::{Method, StatusCode, header};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sless_api::Auth;
use sless_api::plumbing::auth::{AuthSettings, KeySet, TokenAlgorithm};

use super::support::*;

mod hs256;

const SUB: &str = "019cc268-6c6a-781e-8613-4bed4ec7cd20";
const ISS: &str = "https://id.example.com/";
const AUD: &str = "sless";

const RSA_A_KEY: &[u8] = include_bytes!("keys/rsa-a.key.pem");
const RSA_A_PUB: &[u8] = include_bytes!("keys/rsa-a.pub.pem");
const RSA_A_PKCS1_PUB: &[u8] = include_bytes!("keys/rsa-a.pkcs1.pub.pem");
const RSA_B_KEY: &[u8] = include_bytes!("keys/rsa-b.key.pem");
const RSA_B_PUB: &[u8] = include_bytes!("keys/rsa-b.pub.pem");
const EC_A_KEY: &[u8] = include_bytes!("keys/ec-a.key.pem");
const EC_A_PUB: &[u8] = include_bytes!("keys/ec-a.pub.pem");
/// rsa-a, rsa-b and ec-a by kid, and rsa-b once more as an encryption key.
const JWKS: &[u8] = include_bytes!("keys/jwks.json");

fn rsa_a() -> EncodingKey {
    EncodingKey::from_rsa_pem(RSA_A_KEY).unwrap()
}

fn rsa_b() -> EncodingKey {
    EncodingKey::from_rsa_pem(RSA_B_KEY).unwrap()
}

fn ec_a() -> EncodingKey {
    EncodingKey::from_ec_pem(EC_A_KEY).unwrap()
}

/// A token signed with `key` under `alg`, naming `kid`.
fn signed(alg: Algorithm, kid: Option<&str>, claims: &Value, key: &EncodingKey) -> String {
    let mut header = Header::new(alg);
    header.kid = kid.map(str::to_owned);
    jsonwebtoken::encode(&header, claims, key).unwrap()
}

fn rs256(kid: &str, claims: &Value) -> String {
    signed(Algorithm::RS256, Some(kid), claims, &rsa_a())
}

/// Claims the RS256 deployments accept, with `change` merged over them
/// (a `null` member removes that claim).
fn claims(change: Value) -> Value {
    let mut c = json!({ "sub": SUB, "iss": ISS, "aud": AUD, "iat": now(), "exp": now() + 3600 });
    for (k, v) in change.as_object().unwrap() {
        if v.is_null() {
            c.as_object_mut().unwrap().remove(k);
        } else {
            c[k] = v.clone();
        }
    }
    c
}

/// A token assembled by hand: base64url(header).base64url(claims).signature.
fn by_hand(header: &Value, claims: &Value, signature: &str) -> String {
    format!(
        "{}.{}.{signature}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    )
}

fn settings() -> AuthSettings {
    AuthSettings {
        issuers: vec![ISS.into()],
        audiences: vec![AUD.into()],
        ..AuthSettings::default()
    }
}

/// RS256 with the key set (`SLESS_JWKS_FILE`), issuer and audience set.
fn rs256_with_key_set(settings: AuthSettings) -> Auth {
    let mut keys = KeySet::new(TokenAlgorithm::Rs256);
    keys.add_jwks(JWKS).unwrap();
    Auth::new(keys, settings).unwrap()
}

/// `alg` with PEM public keys (`SLESS_JWT_PUBLIC_KEY_FILE`).
fn with_pem(alg: TokenAlgorithm, pems: &[&[u8]]) -> Auth {
    let mut keys = KeySet::new(alg);
    for pem in pems {
        keys.add_pem(pem).unwrap();
    }
    Auth::new(keys, settings()).unwrap()
}

/// A request that writes when it is let through.
fn create_with(
    authorization: Option<&str>,
    ns: &str,
    name: &str,
) -> axum::http::Request<axum::body::Body> {
    let mut req = request(Method::POST, &functions_uri(ns), None)
        .header(header::CONTENT_TYPE, "application/json");
    if let Some(value) = authorization {
        req = req.header(header::AUTHORIZATION, value);
    }
    req.body(axum::body::Body::from(spec(name).to_string()))
        .unwrap()
}

struct Refused {
    what: &'static str,
    /// The Authorization header, if any.
    authorization: Option<String>,
    /// What the problem's detail must say.
    because: &'static str,
}

fn refused(what: &'static str, token: String, because: &'static str) -> Refused {
    Refused {
        what,
        authorization: Some(format!("Bearer {token}")),
        because,
    }
}

/// Sends a create with each case's credentials and checks: 401, an
/// `unauthorized` problem whose detail gives the reason and repeats no part
/// of the token, the Bearer challenge, and nothing written.
async fn assert_refused_writing_nothing(env: &Env, app: &Router, cases: Vec<Refused>) {
    let before = env.counts().await;
    for c in cases {
        let answer = send(
            app,
            create_with(c.authorization.as_deref(), &ns(SUB), "refused"),
        )
        .await;
        answer.assert_problem(c.what, StatusCode::UNAUTHORIZED, "unauthorized");
        let detail = answer.body["detail"].as_str().unwrap();
        assert!(
            detail.contains(c.because),
            "{}: the detail should say {:?}; it says {detail:?}",
            c.what,
            c.because
        );
        let token = c
            .authorization
            .as_deref()
            .map(|a| a.split_once(' ').map_or(a, |(_, t)| t))
            .unwrap_or_default();
        for part in token.split('.').filter(|p| p.len() >= 8) {
            assert!(
                !detail.contains(part),
                "{}: the detail repeats the token",
                c.what
            );
        }
        let challenge = answer
            .headers
            .get(header::WWW_AUTHENTICATE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or_else(|| panic!("{}: no WWW-Authenticate header", c.what));
        let want = if c.authorization.is_some() {
            r#"Bearer realm="sless", error="invalid_token""#
        } else {
            r#"Bearer realm="sless""#
        };
        assert_eq!(challenge, want, "{}", c.what);
        assert_eq!(env.counts().await, before, "{}: nothing written", c.what);
    }
}

/// Creates one function per token in `SUB`'s namespace: each is let through.
async fn assert_accepted(env: &Env, app: &Router, cases: Vec<(&str, String)>) {
    static NEXT: AtomicUsize = AtomicUsize::new(0);
    for (what, token) in cases {
        let before = env.counts().await.events;
        let name = format!("accepted-{}", NEXT.fetch_add(1, Ordering::Relaxed));
        let bearer = format!("Bearer {token}");
        let answer = send(app, create_with(Some(&bearer), &ns(SUB), &name)).await;
        assert_eq!(
            answer.status,
            StatusCode::CREATED,
            "{what}: {}",
            answer.body
        );
        assert_eq!(env.counts().await.events, before + 1, "{what}: one event");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_tokens_are_refused_before_anything_is_written_rs256_with_a_key_set() {
    let env = Env::new().await;
    let app = app_on(&env.db, &env.s3, rs256_with_key_set(settings()));
    let now = now();
    let none = |kid: Option<&str>| json!({ "alg": "none", "typ": "JWT", "kid": kid });
    let good = rs256("rsa-a", &claims(json!({})));
    let good_signature = good.rsplit_once('.').unwrap().1.to_owned();
    let nine_kib = rs256("rsa-a", &claims(json!({ "pad": "x".repeat(6900) })));
    assert!(nine_kib.len() >= 9 * 1024, "{}", nine_kib.len());
    let (head, rest) = good.split_once('.').unwrap();

    let cases = vec![
        refused(
            "alg none, no signature",
            by_hand(&none(None), &claims(json!({})), ""),
            "is empty",
        ),
        refused(
            "alg none with a kid and a valid token's signature",
            by_hand(&none(Some("rsa-a")), &claims(json!({})), &good_signature),
            "alg none",
        ),
        refused(
            "HS256 signed with the RSA public key PEM as the HMAC secret",
            signed(
                Algorithm::HS256,
                Some("rsa-a"),
                &claims(json!({})),
                &EncodingKey::from_secret(RSA_A_PUB),
            ),
            "signed with HS256, but this server accepts RS256 only",
        ),
        refused(
            "RS384 by a configured key",
            signed(
                Algorithm::RS384,
                Some("rsa-a"),
                &claims(json!({})),
                &rsa_a(),
            ),
            "signed with RS384",
        ),
        refused(
            "expired beyond the 60 s leeway",
            rs256("rsa-a", &claims(json!({ "exp": now - 120 }))),
            "has expired",
        ),
        refused(
            "not yet valid",
            rs256("rsa-a", &claims(json!({ "nbf": now + 600 }))),
            "not valid yet",
        ),
        refused(
            "wrong aud",
            rs256("rsa-a", &claims(json!({ "aud": "someone-else" }))),
            "not meant for this server",
        ),
        refused(
            "no aud",
            rs256("rsa-a", &claims(json!({ "aud": null }))),
            "no valid aud claim",
        ),
        refused(
            "wrong iss",
            rs256("rsa-a", &claims(json!({ "iss": "https://evil.example/" }))),
            "issuer (iss) is not accepted",
        ),
        refused(
            "no iss",
            rs256("rsa-a", &claims(json!({ "iss": null }))),
            "no valid iss claim",
        ),
        refused(
            "missing sub",
            rs256("rsa-a", &claims(json!({ "sub": null }))),
            "no valid sub claim",
        ),
        refused(
            "empty sub",
            rs256("rsa-a", &claims(json!({ "sub": "" }))),
            "sub) is empty",
        ),
        refused(
            "sub not a string",
            rs256("rsa-a", &claims(json!({ "sub": 42 }))),
            "no valid sub claim",
        ),
        refused(
            "no exp",
            rs256("rsa-a", &claims(json!({ "exp": null }))),
            "no valid exp claim",
        ),
        refused(
            "kid a path",
            rs256("../../etc/passwd", &claims(json!({}))),
            "kid) is not a plain identifier",
        ),
        refused(
            "kid SQL",
            rs256("x' or '1'='1", &claims(json!({}))),
            "kid) is not a plain identifier",
        ),
        refused(
            "kid of 129 characters",
            rs256(&"k".repeat(129), &claims(json!({}))),
            "kid) is not a plain identifier",
        ),
        refused(
            "kid not in the key set",
            rs256("rsa-c", &claims(json!({}))),
            "names no configured key",
        ),
        refused(
            "kid of the set's EC key (not RS256)",
            rs256("ec-a", &claims(json!({}))),
            "names no configured key",
        ),
        refused(
            "kid of the set's encryption key",
            rs256("rsa-b-enc", &claims(json!({}))),
            "names no configured key",
        ),
        refused(
            "no kid, and the set has two keys",
            signed(Algorithm::RS256, None, &claims(json!({})), &rsa_a()),
            "names no key (kid)",
        ),
        refused(
            "signed by rsa-b, claiming kid rsa-a",
            signed(
                Algorithm::RS256,
                Some("rsa-a"),
                &claims(json!({})),
                &rsa_b(),
            ),
            "signature does not verify",
        ),
        refused(
            "claims changed after signing",
            format!(
                "{head}.{}.{good_signature}",
                b64url(claims(json!({ "sub": "mallory" })).to_string().as_bytes())
            ),
            "signature does not verify",
        ),
        refused("a token of 9 KiB", nine_kib, "longer than 8 KiB"),
        refused("two segments", rest.to_owned(), "three base64url segments"),
        refused(
            "four segments",
            format!("{good}.{head}"),
            "three base64url segments",
        ),
        refused(
            "non-base64url segment",
            format!("{head}.{}", rest.replacen('.', ".*", 1)),
            "not unpadded base64url",
        ),
        refused(
            "padded segment",
            format!("{good}=="),
            "signature is not unpadded base64url",
        ),
        refused(
            "header not JSON",
            format!("{}.{rest}", b64url(b"RS256")),
            "header is not a JSON object",
        ),
        refused(
            "header without alg",
            by_hand(
                &json!({ "kid": "rsa-a" }),
                &claims(json!({})),
                &good_signature,
            ),
            "names no algorithm",
        ),
        refused(
            "critical header extension",
            by_hand(
                &json!({ "alg": "RS256", "kid": "rsa-a", "crit": ["b64"], "b64": false }),
                &claims(json!({})),
                &good_signature,
            ),
            "critical extensions",
        ),
        refused("garbage", "not-a-jwt".into(), "three base64url segments"),
    ];
    assert_refused_writing_nothing(&env, &app, cases).await;

    // The controls: the same deployment lets good tokens through.
    let seven_kib = signed(
        Algorithm::RS256,
        Some("rsa-b"),
        &claims(json!({ "pad": "x".repeat(4800) })),
        &rsa_b(),
    );
    assert!((6 * 1024..8 * 1024).contains(&seven_kib.len()));
    let accepted = vec![
        ("RS256 via the key set, kid rsa-a", good.clone()),
        (
            "RS256 via the key set, kid rsa-b",
            signed(
                Algorithm::RS256,
                Some("rsa-b"),
                &claims(json!({})),
                &rsa_b(),
            ),
        ),
        (
            "expired 30 s ago, within the leeway",
            rs256("rsa-a", &claims(json!({ "exp": now - 30 }))),
        ),
        (
            "valid 30 s from now, within the leeway",
            rs256("rsa-a", &claims(json!({ "nbf": now + 30 }))),
        ),
        (
            "nbf in the past",
            rs256("rsa-a", &claims(json!({ "nbf": now - 10 }))),
        ),
        ("a token of 7 KiB", seven_kib),
        (
            "aud as a list that names this server",
            rs256("rsa-a", &claims(json!({ "aud": ["other", AUD] }))),
        ),
    ];
    assert_accepted(&env, &app, accepted).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pem_keys_check_rs256_and_es256_and_a_single_key_ignores_the_kid() {
    let env = Env::new().await;
    let es256 = |claims: &Value| signed(Algorithm::ES256, None, claims, &ec_a());

    let rsa_pem = app_on(
        &env.db,
        &env.s3,
        with_pem(TokenAlgorithm::Rs256, &[RSA_A_PUB]),
    );
    assert_refused_writing_nothing(
        &env,
        &rsa_pem,
        vec![
            refused(
                "signed by a key that is not configured",
                signed(Algorithm::RS256, None, &claims(json!({})), &rsa_b()),
                "signature does not verify",
            ),
            refused(
                "ES256 where RS256 is pinned",
                es256(&claims(json!({}))),
                "signed with ES256",
            ),
            refused(
                "a kid that is a path, though the kid is not used",
                rs256("../../etc/passwd", &claims(json!({}))),
                "kid) is not a plain identifier",
            ),
        ],
    )
    .await;
    assert_accepted(
        &env,
        &rsa_pem,
        vec![
            (
                "RS256 (PEM), no kid",
                signed(Algorithm::RS256, None, &claims(json!({})), &rsa_a()),
            ),
            (
                "RS256 (PEM), any kid",
                rs256("whatever-2025", &claims(json!({}))),
            ),
        ],
    )
    .await;

    // Two PEM files (key rotation): tokens of either key pass.
    let rotated = app_on(
        &env.db,
        &env.s3,
        with_pem(TokenAlgorithm::Rs256, &[RSA_A_PKCS1_PUB, RSA_B_PUB]),
    );
    assert_accepted(
        &env,
        &rotated,
        vec![
            (
                "RS256, the old key (PKCS#1 PEM)",
                signed(
                    Algorithm::RS256,
                    None,
                    &claims(json!({ "jti": "a" })),
                    &rsa_a(),
                ),
            ),
            (
                "RS256, the new key",
                signed(
                    Algorithm::RS256,
                    None,
                    &claims(json!({ "jti": "b" })),
                    &rsa_b(),
                ),
            ),
        ],
    )
    .await;

    let ec_pem = app_on(
        &env.db,
        &env.s3,
        with_pem(TokenAlgorithm::Es256, &[EC_A_PUB]),
    );
    assert_refused_writing_nothing(
        &env,
        &ec_pem,
        vec![
            refused(
                "RS256 where ES256 is pinned",
                rs256("rsa-a", &claims(json!({}))),
                "signed with RS256, but this server accepts ES256 only",
            ),
            refused(
                "HS256 signed with the EC public key PEM as the HMAC secret",
                signed(
                    Algorithm::HS256,
                    None,
                    &claims(json!({})),
                    &EncodingKey::from_secret(EC_A_PUB),
                ),
                "signed with HS256",
            ),
            refused(
                "ES256 expired",
                es256(&claims(json!({ "exp": now() - 600 }))),
                "has expired",
            ),
        ],
    )
    .await;
    let before = env.counts().await.events;
    let bearer = format!("Bearer {}", es256(&claims(json!({}))));
    let answer = send(&ec_pem, create_with(Some(&bearer), &ns(SUB), "es256")).await;
    assert_eq!(
        answer.status,
        StatusCode::CREATED,
        "ES256 (PEM): {}",
        answer.body
    );
    assert_eq!(env.counts().await.events, before + 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_claim_acts_in_another_namespace_and_only_when_true() {
    let env = Env::new().await;
    let other = ns(SUB);
    let operator = |extra: Value| {
        let mut c = claims(json!({ "sub": "operator" }));
        for (k, v) in extra.as_object().unwrap() {
            c[k] = v.clone();
        }
        rs256("rsa-a", &c)
    };
    // The default claim, `sless_admin`.
    let app = app_on(&env.db, &env.s3, rs256_with_key_set(settings()));
    // A configured one.
    let custom = app_on(
        &env.db,
        &env.s3,
        rs256_with_key_set(AuthSettings {
            admin_claim: "https://sless.dev/admin".into(),
            ..settings()
        }),
    );
    let cases = [
        ("no admin claim", &app, json!({}), false),
        (
            "sless_admin false",
            &app,
            json!({ "sless_admin": false }),
            false,
        ),
        (
            "sless_admin \"true\" (a string)",
            &app,
            json!({ "sless_admin": "true" }),
            false,
        ),
        (
            "sless_admin where another claim is configured",
            &custom,
            json!({ "sless_admin": true }),
            false,
        ),
        (
            "sless_admin true",
            &app,
            json!({ "sless_admin": true }),
            true,
        ),
        (
            "the configured claim true",
            &custom,
            json!({ "https://sless.dev/admin": true }),
            true,
        ),
    ];
    for (i, (what, app, extra, admin)) in cases.into_iter().enumerate() {
        let before = env.counts().await;
        let bearer = format!("Bearer {}", operator(extra));
        let name = format!("by-operator-{i}");
        let answer = send(app, create_with(Some(&bearer), &other, &name)).await;
        if admin {
            assert_eq!(
                answer.status,
                StatusCode::CREATED,
                "{what}: {}",
                answer.body
            );
            assert_eq!(env.counts().await.events, before.events + 1, "{what}");
        } else {
            answer.assert_problem(what, StatusCode::NOT_FOUND, "not-found");
            assert_eq!(env.counts().await, before, "{what}: nothing written");
        }
    }
    // The admin's functions are in the other user's namespace, for them to see.
    env.catch_up().await;
    let list = env
        .send(get(&functions_uri(&other), Some(&token(SUB))))
        .await;
    let names: Vec<&str> = list.body["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| f["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["by-operator-4", "by-operator-5"], "{}", list.body);
}

/// What the invoke proxy removes from a call (`Auth::signed_here`): a token
/// signed by any configured key, whatever its claims; nothing else.
#[test]
fn every_token_a_configured_key_signed_is_this_platform_s_whatever_its_claims() {
    let jwks = rs256_with_key_set(settings());
    let pem = with_pem(TokenAlgorithm::Rs256, &[RSA_A_PUB, RSA_B_PUB]);
    let expired = claims(json!({"exp": now() - 86_400}));
    let elsewhere = claims(json!({"aud": "another-service", "iss": "https://other.example/"}));
    let no_claims = json!({});
    for (what, auth, token, ours) in [
        (
            "key set, rsa-a",
            &jwks,
            rs256("rsa-a", &claims(json!({}))),
            true,
        ),
        (
            "key set, rsa-b, expired",
            &jwks,
            signed(Algorithm::RS256, Some("rsa-b"), &expired, &rsa_b()),
            true,
        ),
        (
            "key set, another audience and issuer",
            &jwks,
            rs256("rsa-a", &elsewhere),
            true,
        ),
        (
            "key set, no claims at all",
            &jwks,
            rs256("rsa-a", &no_claims),
            true,
        ),
        (
            "PEM keys, the second one",
            &pem,
            signed(Algorithm::RS256, None, &expired, &rsa_b()),
            true,
        ),
        // Not this platform's: another key, another algorithm, a kid it has not.
        (
            "key set, rsa-b's kid but rsa-a's signature",
            &jwks,
            signed(
                Algorithm::RS256,
                Some("rsa-b"),
                &claims(json!({})),
                &rsa_a(),
            ),
            false,
        ),
        (
            "key set, an unknown kid",
            &jwks,
            signed(
                Algorithm::RS256,
                Some("rsa-z"),
                &claims(json!({})),
                &rsa_a(),
            ),
            false,
        ),
        (
            "PEM keys, an ES256 token",
            &pem,
            signed(Algorithm::ES256, None, &claims(json!({})), &ec_a()),
            false,
        ),
        (
            "key set, HS256 with the public key as secret",
            &jwks,
            signed(
                Algorithm::HS256,
                Some("rsa-a"),
                &claims(json!({})),
                &EncodingKey::from_secret(RSA_A_PUB),
            ),
            false,
        ),
        ("not a token", &jwks, "their.own.token".to_owned(), false),
    ] {
        assert_eq!(auth.signed_here(&token), ours, "{what}");
    }
}
