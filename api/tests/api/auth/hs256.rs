//! HS256, the algorithm of `sless dev`: the same refusals as the other
//! algorithms, plus what the Authorization header itself can get wrong.

use super::*;

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
async fn every_bad_hs256_token_gets_401_and_writes_nothing_and_a_valid_one_passes() {
    let env = Env::new().await;
    let valid = token(SUB);
    let now = now();
    let hs = |c: Value| sign(&c, SECRET);
    let sub_exp = json!({ "sub": SUB, "exp": now + 3600 });
    let header = |v: &str| Refused {
        what: "",
        authorization: Some(v.to_owned()),
        because: "must be 'Bearer <token>'",
    };

    let cases = vec![
        Refused {
            what: "no Authorization header",
            authorization: None,
            because: "header is required",
        },
        Refused {
            what: "Basic scheme instead of Bearer",
            ..header("Basic dXNlcjpwYXNzd29yZA==")
        },
        Refused {
            what: "the token without a scheme",
            ..header(&valid)
        },
        Refused {
            what: "Bearer with no token",
            ..header("Bearer ")
        },
        refused(
            "three garbage parts",
            "aaaa.bbbb.cccc".into(),
            "header is not a JSON object",
        ),
        refused(
            "wrong signature",
            sign(&sub_exp, b"some-other-secret"),
            "signature does not verify",
        ),
        refused(
            "signature of another token",
            {
                let other = hs(json!({ "sub": "someone-else", "exp": now + 3600 }));
                let (msg, _) = valid.rsplit_once('.').unwrap();
                format!("{msg}.{}", other.rsplit_once('.').unwrap().1)
            },
            "signature does not verify",
        ),
        refused(
            "expired beyond the 60 s leeway",
            hs(json!({ "sub": SUB, "exp": now - 120 })),
            "has expired",
        ),
        refused(
            "not yet valid (nbf in 10 minutes)",
            hs(json!({ "sub": SUB, "nbf": now + 600, "exp": now + 3600 })),
            "not valid yet",
        ),
        refused(
            "no sub",
            hs(json!({ "exp": now + 3600 })),
            "no valid sub claim",
        ),
        refused(
            "empty sub",
            hs(json!({ "sub": "", "exp": now + 3600 })),
            "sub) is empty",
        ),
        refused("no exp", hs(json!({ "sub": SUB })), "no valid exp claim"),
        refused(
            "alg none, empty signature",
            by_hand(&json!({ "alg": "none", "typ": "JWT" }), &sub_exp, ""),
            "signature is empty",
        ),
        refused(
            "alg None (capitalised), with a signature",
            by_hand(
                &json!({ "alg": "None" }),
                &sub_exp,
                valid.rsplit_once('.').unwrap().1,
            ),
            "alg none",
        ),
        refused(
            "HS512 with the right secret (only HS256 is configured)",
            sign_with(Algorithm::HS512, &sub_exp, SECRET),
            "signed with HS512",
        ),
        refused(
            "kid that is a path (HS256 ignores kids, but not their shape)",
            {
                let mut h = Header::new(Algorithm::HS256);
                h.kid = Some("/dev/null".into());
                jsonwebtoken::encode(&h, &sub_exp, &EncodingKey::from_secret(SECRET)).unwrap()
            },
            "kid) is not a plain identifier",
        ),
    ];
    assert_refused_writing_nothing(&env, &env.app, cases).await;

    let accepted = vec![
        ("issued by issue_hs256", valid.clone()),
        (
            "assembled by hand, HS256",
            by_hand_hs256(&json!({ "sub": SUB, "exp": now + 3600 }), SECRET),
        ),
        (
            "expired 30 s ago, within the leeway",
            hs(json!({ "sub": SUB, "exp": now - 30 })),
        ),
        (
            "issued by Auth::issue",
            Auth::hs256(SECRET, None, None)
                .issue(SUB, std::time::Duration::from_secs(60), false)
                .unwrap(),
        ),
    ];
    assert_accepted(&env, &env.app, accepted).await;
    // The scheme is case-insensitive.
    let answer = env
        .send(create_with(
            Some(&format!("bearer {valid}")),
            &ns(SUB),
            "lower-case",
        ))
        .await;
    assert_eq!(answer.status, StatusCode::CREATED, "{}", answer.body);
}

/// An HS256 token assembled by hand and signed with `secret`: the control
/// that shows `by_hand` makes tokens the API accepts, so the `alg: none`
/// cases fail for their algorithm and nothing else.
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issuer_and_audience_are_checked_when_configured_and_issued_tokens_carry_them() {
    let env = Env::new().await;
    let auth = Auth::hs256(SECRET, Some("https://issuer.example"), Some("sless"));
    let app = app_on(&env.db, &env.s3, auth.clone());
    let exp = now() + 3600;
    let hs = |c: Value| sign(&c, SECRET);
    let cases = vec![
        refused(
            "wrong audience",
            hs(json!({ "sub": SUB, "exp": exp, "iss": "https://issuer.example", "aud": "other" })),
            "not meant for this server",
        ),
        refused(
            "no audience",
            hs(json!({ "sub": SUB, "exp": exp, "iss": "https://issuer.example" })),
            "no valid aud claim",
        ),
        refused(
            "wrong issuer",
            hs(json!({ "sub": SUB, "exp": exp, "iss": "https://evil.example", "aud": "sless" })),
            "issuer (iss) is not accepted",
        ),
        refused(
            "no issuer",
            hs(json!({ "sub": SUB, "exp": exp, "aud": "sless" })),
            "no valid iss claim",
        ),
        refused(
            "issued by issue_hs256, which knows no issuer",
            token(SUB),
            "no valid",
        ),
    ];
    assert_refused_writing_nothing(&env, &app, cases).await;
    let issued = auth
        .issue(SUB, std::time::Duration::from_secs(60), false)
        .unwrap();
    assert_accepted(
        &env,
        &app,
        vec![
            (
                "right issuer and audience",
                hs(json!({ "sub": SUB, "exp": exp, "iss": "https://issuer.example", "aud": "sless" })),
            ),
            ("issued by Auth::issue", issued),
        ],
    )
    .await;
    assert!(
        rs256_with_key_set(settings())
            .issue(SUB, std::time::Duration::from_secs(60), false)
            .is_none(),
        "a server with public keys only issues nothing"
    );
}
