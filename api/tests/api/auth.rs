//! Bearer tokens: every way a token can be wrong gets a 401 problem.

use axum::http::{Method, StatusCode, header};
use jsonwebtoken::{Algorithm, EncodingKey};
use serde_json::{Value, json};
use sless_api::Auth;

use super::support::*;

const SUB: &str = "019cc268-6c6a-781e-8613-4bed4ec7cd20";

/// A token assembled by hand: base64url(header).base64url(claims).signature.
fn by_hand(header: &Value, claims: &Value, signature: &str) -> String {
    format!(
        "{}.{}.{signature}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    )
}

fn valid_claims() -> Value {
    json!({ "sub": SUB, "iat": now(), "exp": now() + 3600 })
}

/// An HS256 token assembled by hand and signed with `secret`: the control
/// that shows `by_hand` makes tokens the API accepts, so the `alg: none`
/// case fails for its algorithm and nothing else.
fn by_hand_hs256(claims: &Value, secret: &[u8]) -> String {
    let header = json!({ "alg": "HS256", "typ": "JWT" });
    let message = format!(
        "{}.{}",
        b64url(header.to_string().as_bytes()),
        b64url(claims.to_string().as_bytes())
    );
    let sig = jsonwebtoken::crypto::sign(
        message.as_bytes(),
        &EncodingKey::from_secret(secret),
        Algorithm::HS256,
    )
    .unwrap();
    format!("{message}.{sig}")
}

#[test]
fn the_hand_made_base64url_matches_rfc_4648() {
    // RFC 4648 §10 test vectors, unpadded, plus the url-safe alphabet.
    let cases: [(&[u8], &str); 8] = [
        (b"", ""),
        (b"f", "Zg"),
        (b"fo", "Zm8"),
        (b"foo", "Zm9v"),
        (b"foob", "Zm9vYg"),
        (b"fooba", "Zm9vYmE"),
        (b"foobar", "Zm9vYmFy"),
        (&[0xfb, 0xff, 0xbf], "-_-_"),
    ];
    for (input, want) in cases {
        assert_eq!(b64url(input), want, "{input:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_bad_token_gets_401_unauthorized_and_a_valid_one_gets_200() {
    let env = Env::new().await;
    let uri = functions_uri(&ns(SUB));
    let valid = token(SUB);
    let now = now();
    let none_header = json!({ "alg": "none", "typ": "JWT" });

    // (what, Authorization header value or None)
    let refused: Vec<(&str, Option<String>)> = vec![
        ("no Authorization header", None),
        (
            "Basic scheme instead of Bearer",
            Some("Basic dXNlcjpwYXNzd29yZA==".into()),
        ),
        ("the token without a scheme", Some(valid.clone())),
        ("Bearer with no token", Some("Bearer ".into())),
        ("garbage token", Some("Bearer not-a-jwt".into())),
        ("three garbage parts", Some("Bearer aaaa.bbbb.cccc".into())),
        (
            "wrong signature",
            Some(format!(
                "Bearer {}",
                sign(&valid_claims(), b"some-other-secret")
            )),
        ),
        (
            "signature of another token",
            Some(format!("Bearer {}", {
                let other = sign(&json!({ "sub": "someone-else", "exp": now + 3600 }), SECRET);
                let (msg, _) = valid.rsplit_once('.').unwrap();
                format!("{msg}.{}", other.rsplit_once('.').unwrap().1)
            })),
        ),
        (
            "expired an hour ago",
            Some(format!(
                "Bearer {}",
                sign(
                    &json!({ "sub": SUB, "iat": now - 7200, "exp": now - 3600 }),
                    SECRET
                )
            )),
        ),
        (
            "expired beyond the 60 s leeway",
            Some(format!(
                "Bearer {}",
                sign(&json!({ "sub": SUB, "exp": now - 120 }), SECRET)
            )),
        ),
        (
            "not yet valid (nbf in 10 minutes)",
            Some(format!(
                "Bearer {}",
                sign(
                    &json!({ "sub": SUB, "nbf": now + 600, "exp": now + 3600 }),
                    SECRET
                )
            )),
        ),
        (
            "no sub",
            Some(format!(
                "Bearer {}",
                sign(&json!({ "exp": now + 3600 }), SECRET)
            )),
        ),
        (
            "empty sub",
            Some(format!(
                "Bearer {}",
                sign(&json!({ "sub": "", "exp": now + 3600 }), SECRET)
            )),
        ),
        (
            "sub not a string",
            Some(format!(
                "Bearer {}",
                sign(&json!({ "sub": 42, "exp": now + 3600 }), SECRET)
            )),
        ),
        (
            "no exp",
            Some(format!("Bearer {}", sign(&json!({ "sub": SUB }), SECRET))),
        ),
        (
            "alg none, empty signature",
            Some(format!(
                "Bearer {}",
                by_hand(&none_header, &valid_claims(), "")
            )),
        ),
        (
            "alg none, signature of a valid token kept",
            Some(format!(
                "Bearer {}",
                by_hand(
                    &none_header,
                    &valid_claims(),
                    valid.rsplit_once('.').unwrap().1
                )
            )),
        ),
        (
            "alg None (capitalised)",
            Some(format!(
                "Bearer {}",
                by_hand(&json!({ "alg": "None", "typ": "JWT" }), &valid_claims(), "")
            )),
        ),
        (
            "HS512 with the right secret (only HS256 is configured)",
            Some(format!(
                "Bearer {}",
                sign_with(Algorithm::HS512, &valid_claims(), SECRET)
            )),
        ),
    ];
    for (what, authorization) in &refused {
        let mut req = request(Method::GET, &uri, None);
        if let Some(value) = authorization {
            req = req.header(header::AUTHORIZATION, value);
        }
        let answer = env.send(req.body(axum::body::Body::empty()).unwrap()).await;
        answer.assert_problem(what, StatusCode::UNAUTHORIZED, "unauthorized");
    }

    // The controls: tokens that differ from refused ones in the one respect
    // that made those fail are accepted.
    let accepted: Vec<(&str, String)> = vec![
        ("issued by issue_hs256", valid.clone()),
        ("lower-case bearer scheme", valid.clone()),
        (
            "assembled by hand, HS256",
            by_hand_hs256(&valid_claims(), SECRET),
        ),
        (
            "expired 30 s ago, within the 60 s leeway",
            sign(&json!({ "sub": SUB, "exp": now - 30 }), SECRET),
        ),
        (
            "nbf in the past",
            sign(
                &json!({ "sub": SUB, "nbf": now - 10, "exp": now + 3600 }),
                SECRET,
            ),
        ),
    ];
    for (what, token) in &accepted {
        let scheme = if what.starts_with("lower-case") {
            "bearer"
        } else {
            "Bearer"
        };
        let req = request(Method::GET, &uri, None)
            .header(header::AUTHORIZATION, format!("{scheme} {token}"))
            .body(axum::body::Body::empty())
            .unwrap();
        let answer = env.send(req).await;
        assert_eq!(answer.status, StatusCode::OK, "{what}: {}", answer.body);
        assert_eq!(answer.body, json!({ "items": [] }), "{what}");
    }

    assert_eq!(env.counts().await.events, 0, "nothing is written by reads");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issuer_and_audience_are_checked_when_configured() {
    let db = sless_testkit::TestDb::new().await;
    let s3 = sless_testkit::TestS3::new().await;
    let app = app_on(
        &db,
        &s3,
        Auth::hs256(SECRET, Some("https://issuer.example"), Some("sless")),
    );
    let uri = functions_uri(&ns(SUB));
    let exp = now() + 3600;
    let cases = [
        (
            "right issuer and audience",
            json!({ "sub": SUB, "exp": exp, "iss": "https://issuer.example", "aud": "sless" }),
            StatusCode::OK,
        ),
        (
            "wrong audience",
            json!({ "sub": SUB, "exp": exp, "iss": "https://issuer.example", "aud": "other" }),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "no audience",
            json!({ "sub": SUB, "exp": exp, "iss": "https://issuer.example" }),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "wrong issuer",
            json!({ "sub": SUB, "exp": exp, "iss": "https://evil.example", "aud": "sless" }),
            StatusCode::UNAUTHORIZED,
        ),
        (
            "no issuer",
            json!({ "sub": SUB, "exp": exp, "aud": "sless" }),
            StatusCode::UNAUTHORIZED,
        ),
    ];
    for (what, claims, status) in cases {
        let answer = send(&app, get(&uri, Some(&sign(&claims, SECRET)))).await;
        if status == StatusCode::OK {
            assert_eq!(answer.status, StatusCode::OK, "{what}: {}", answer.body);
        } else {
            answer.assert_problem(what, status, "unauthorized");
        }
    }
}
