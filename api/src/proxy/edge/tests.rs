//! What crosses the proxy, table by table: each row a spelling a caller
//! may use, and what the function gets of it.

use super::*;

const PREFIX: &str = "/fn/sless-ffd1f598c169b0ae/shop";

#[test]
fn hop_by_hop_headers_go_and_so_do_those_connection_names() {
    let mut h = HeaderMap::new();
    for (n, v) in [
        ("connection", "close, x-secret"),
        ("connection", "X-Other"),
        ("keep-alive", "timeout=5"),
        ("te", "trailers"),
        ("trailer", "x-sum"),
        ("upgrade", "h2c"),
        ("proxy-authorization", "Basic x"),
        ("x-secret", "1"),
        ("x-other", "2"),
        ("x-kept", "3"),
    ] {
        h.append(HeaderName::from_static(n), HeaderValue::from_static(v));
    }
    strip_hop_by_hop(&mut h);
    let left: Vec<_> = h.keys().map(|k| k.as_str()).collect();
    assert_eq!(left, ["x-kept"]);
}

#[test]
fn a_cookie_is_held_to_the_function_s_own_paths() {
    for (set, want) in [
        ("a=1", Some("a=1; Path=/fn/sless-ffd1f598c169b0ae/shop")),
        (
            "a=1; Path=/",
            Some("a=1; Path=/fn/sless-ffd1f598c169b0ae/shop"),
        ),
        (
            "a=1; Path=/v1; HttpOnly",
            Some("a=1; HttpOnly; Path=/fn/sless-ffd1f598c169b0ae/shop/v1"),
        ),
        (
            "a=1; path=relative; Max-Age=5",
            Some("a=1; Max-Age=5; Path=/fn/sless-ffd1f598c169b0ae/shop"),
        ),
        (
            "a=1; Domain=",
            Some("a=1; Path=/fn/sless-ffd1f598c169b0ae/shop"),
        ),
        ("a=1; Domain=127.0.0.1; Path=/v1", None),
        ("a=1; domain=.example.com", None),
        ("sless_session=x", None),
        ("__Host-SLESS_csrf=x; Path=/; Secure", None),
        ("=nameless", None),
        ("novalue", None),
    ] {
        assert_eq!(scoped_set_cookie(set, PREFIX).as_deref(), want, "{set}");
    }
}

#[test]
fn sless_s_own_cookies_are_those_named_sless_underscore() {
    for own in [
        "sless_session",
        "SLESS_csrf",
        "__Host-sless_session",
        "__secure-sless_x",
        "__Http-sless_browser",
        "__Host-Http-sless_session",
        " sless_a",
    ] {
        assert!(is_own_cookie(own), "{own}");
    }
    for theirs in [
        "session",
        "slesssession",
        "my_sless_session",
        "__Host-session",
    ] {
        assert!(!is_own_cookie(theirs), "{theirs}");
    }
}

const SECRET: &[u8] = b"edge-tests-secret-0123456789abcdef";
const BASIC: &str = "Basic dXNlcjpwYXNz";

fn auth() -> Auth {
    Auth::hs256(SECRET, None, None)
}

/// A token this platform's key signed, valid for a minute.
fn ours() -> String {
    crate::plumbing::auth::issue_hs256(SECRET, "someone", std::time::Duration::from_secs(60))
}

/// A well-formed token of another issuer (another key).
fn theirs() -> String {
    crate::plumbing::auth::issue_hs256(
        b"another-issuer-secret-0123456789abcd",
        "someone",
        std::time::Duration::from_secs(60),
    )
}

const NOWHERE: Seen = Seen {
    peer: None,
    proto: Proto::Http,
};

/// The request headers a function gets of these.
fn forwarded_of(fields: &[(&str, &[u8])], seen: Seen) -> HeaderMap {
    let mut h = HeaderMap::new();
    for (name, value) in fields {
        h.append(
            HeaderName::from_bytes(name.as_bytes()).unwrap(),
            HeaderValue::from_bytes(value).unwrap(),
        );
    }
    request_headers(&mut h, &auth(), seen);
    h
}

/// The values of `name`, as text (a byte past ASCII shown as U+FFFD).
fn values(h: &HeaderMap, name: &str) -> Vec<String> {
    h.get_all(name)
        .iter()
        .map(|v| String::from_utf8_lossy(v.as_bytes()).into_owned())
        .collect()
}

#[test]
fn the_platform_s_token_is_removed_in_every_spelling() {
    let ours = ours();
    // Expired, or for another audience: still this platform's credential.
    let expired = jsonwebtoken::encode(
        &jsonwebtoken::Header::default(),
        &serde_json::json!({"sub": "someone", "exp": 1, "aud": "elsewhere"}),
        &jsonwebtoken::EncodingKey::from_secret(SECRET),
    )
    .unwrap();
    for spelling in [
        "Bearer {t}",
        "bearer {t}",
        "BEARER {t}",
        "Bearer\t{t}",
        "Bearer  {t}",
        "Bearer \t {t} ",
        "Token {t}",
        "JWT {t}",
        "{t}",
        " {t}",
        "Bearer {t},",
        "Bearer {t}, Basic dXNlcjpwYXNz",
        "Basic dXNlcjpwYXNz, Bearer {t}",
        "Basic dXNlcjpwYXNz,Bearer {t}",
        "Bearer \"{t}\"",
        "Bearer token={t}",
        "Bearer {t}==",
        "Bearer realm=\"x\", token=\"{t}\"",
        "Bearer x.{t}",
        "Bearer {t}.x",
        "Digest username=\"u\", response=\"{t}\"",
    ] {
        for token in [&ours, &expired] {
            let value = spelling.replace("{t}", token);
            let h = forwarded_of(&[("authorization", value.as_bytes())], NOWHERE);
            assert!(
                h.get(header::AUTHORIZATION).is_none(),
                "{spelling:?} reached the function"
            );
        }
    }
    // Not text (a byte past ASCII beside it): still found.
    let mut raw = format!("Bearer {ours}").into_bytes();
    raw.push(0xff);
    let h = forwarded_of(&[("authorization", &raw)], NOWHERE);
    assert!(h.get(header::AUTHORIZATION).is_none());
}

#[test]
fn an_authorization_that_is_not_the_platform_s_arrives_as_sent() {
    let theirs = theirs();
    for spelling in [
        "Bearer {t}",
        "bearer  {t}",
        "Token {t}",
        "{t}",
        "Bearer {t}, Basic dXNlcjpwYXNz",
        BASIC,
        "Bearer their.own.token",
        "Bearer a.b.c.d.e",
        "Bearer ..x..",
        "Digest username=\"u\", realm=\"r\", nonce=\"n\", response=\"abc\"",
    ] {
        let value = spelling.replace("{t}", &theirs);
        let h = forwarded_of(&[("authorization", value.as_bytes())], NOWHERE);
        assert_eq!(
            values(&h, "authorization"),
            [value.as_str()],
            "{spelling:?}"
        );
    }
}

#[test]
fn only_the_fields_that_carry_the_platform_s_token_go() {
    let (ours, theirs) = (ours(), theirs());
    let h = forwarded_of(
        &[
            ("authorization", format!("Bearer {theirs}").as_bytes()),
            ("authorization", format!("Token {ours}").as_bytes()),
            ("authorization", BASIC.as_bytes()),
            ("authorization", format!("bearer  {ours}").as_bytes()),
        ],
        NOWHERE,
    );
    assert_eq!(
        values(&h, "authorization"),
        [format!("Bearer {theirs}").as_str(), BASIC]
    );
}

#[test]
fn an_authorization_with_more_token_pieces_than_are_checked_is_removed() {
    let theirs = theirs();
    // Each token of another issuer is one piece: as many as are checked
    // arrive, one more and the value holding it goes unchecked.
    let at_limit = vec![theirs.as_str(); MAX_TOKEN_PIECES].join(", ");
    let h = forwarded_of(&[("authorization", at_limit.as_bytes())], NOWHERE);
    assert_eq!(values(&h, "authorization"), [at_limit.as_str()]);

    let past = vec![theirs.as_str(); MAX_TOKEN_PIECES + 1].join(", ");
    let h = forwarded_of(&[("authorization", past.as_bytes())], NOWHERE);
    assert!(h.get(header::AUTHORIZATION).is_none());

    // Across fields: the first ones, checked, stay.
    let h = forwarded_of(
        &[
            ("authorization", BASIC.as_bytes()),
            ("authorization", at_limit.as_bytes()),
            ("authorization", theirs.as_bytes()),
        ],
        NOWHERE,
    );
    assert_eq!(values(&h, "authorization"), [BASIC, at_limit.as_str()]);
}

#[test]
fn token_pieces_are_every_three_dot_joined_segments_of_base64url() {
    for (value, want) in [
        ("Bearer a.b.c", &["a.b.c"][..]),
        ("a.b.c,d.e.f", &["a.b.c", "d.e.f"]),
        ("x=a-_.b.c==", &["a-_.b.c"]),
        ("a.b.c.d", &["a.b.c", "b.c.d"]),
        ("a..b.c", &[]),
        (".a.b.c.", &["a.b.c"]),
        ("a.b", &[]),
        ("a+b.c.d", &["b.c.d"]),
        ("Basic dXNlcjpwYXNz", &[]),
    ] {
        let got: Vec<&str> = token_pieces(value.as_bytes()).collect();
        assert_eq!(got, want, "{value:?}");
    }
}

#[test]
fn sless_s_cookies_are_removed_however_they_are_joined() {
    for (fields, want) in [
        (&["a=1; sless_session=s; b=2"][..], Some("a=1; b=2")),
        (&["a=1;sless_session=s;b=2"], Some("a=1; b=2")),
        (&["a=1, sless_session=s"], Some("a=1")),
        (&["a=1,sless_session=s"], Some("a=1")),
        (&["sless_session=s, a=1"], Some("a=1")),
        (&["a=x, b=y, sless_session=s, c=z"], Some("a=x, b=y, c=z")),
        (&["a=1", "sless_session=s"], Some("a=1")),
        (
            &["sless_session=s", "a=1; __Host-sless_csrf=c"],
            Some("a=1"),
        ),
        (&["__Host-sless_session=s; a=1"], Some("a=1")),
        (&["__Secure-SLESS_csrf=c;a=1"], Some("a=1")),
        (&["__HOST-Sless_Session=s"], None),
        (&["SLESS_SESSION=s"], None),
        (&["sless_session=s; sless_sign_in=t"], None),
        (&["a=1;\tsless_session=s"], Some("a=1")),
        (&["a=1 ;  sless_session=s ; b=2"], Some("a=1; b=2")),
        (&["sless_session = s; a=1"], Some("a=1")),
        (&["sless_session"], None),
        // Joined by whitespace, as some parsers read it: the piece goes whole.
        (&["a=1 sless_session=s; b=2"], Some("b=2")),
        (&["a=1,2; sless_x=1; b=3"], Some("a=1,2; b=3")),
        (&["a=1, sless_session=s,"], Some("a=1")),
        // Nothing of sless's: one field as sent, several joined.
        (&["a=1,2;; b=3 "], Some("a=1,2;; b=3 ")),
        (
            &["slesssession=1; my_sless_session=2; x=sless_y"],
            Some("slesssession=1; my_sless_session=2; x=sless_y"),
        ),
        (&["a=1", "b=2"], Some("a=1; b=2")),
    ] {
        let sent: Vec<(&str, &[u8])> = fields.iter().map(|f| ("cookie", f.as_bytes())).collect();
        let h = forwarded_of(&sent, NOWHERE);
        let want: Vec<&str> = want.into_iter().collect();
        assert_eq!(values(&h, "cookie"), want, "{fields:?}");
    }
}

#[test]
fn the_caller_s_forwarding_headers_are_replaced_by_what_the_proxy_saw() {
    let lies: &[(&str, &[u8])] = &[
        ("x-forwarded-for", b"6.6.6.6"),
        ("X-Forwarded-For", b"7.7.7.7, 8.8.8.8"),
        ("forwarded", b"for=6.6.6.6;proto=https"),
        ("x-forwarded-host", b"bank.example"),
        ("x-forwarded-proto", b"https"),
        ("x-forwarded-port", b"443"),
        ("x-forwarded-prefix", b"/admin"),
        ("x-real-ip", b"6.6.6.6"),
        ("host", b"fn.test:8081"),
        ("x-kept", b"1"),
    ];
    let seen = |peer: &str, proto| Seen {
        peer: Some(peer.parse().unwrap()),
        proto,
    };
    for (seen, for_, forwarded) in [
        (
            seen("203.0.113.7", Proto::Http),
            "203.0.113.7",
            "for=203.0.113.7;host=\"fn.test:8081\";proto=http",
        ),
        (
            seen("2001:db8::1", Proto::Https),
            "2001:db8::1",
            "for=\"[2001:db8::1]\";host=\"fn.test:8081\";proto=https",
        ),
        // A v4 caller on a listener of both families.
        (
            seen("::ffff:203.0.113.7", Proto::Http),
            "203.0.113.7",
            "for=203.0.113.7;host=\"fn.test:8081\";proto=http",
        ),
    ] {
        let h = forwarded_of(lies, seen);
        let proto = seen.proto.as_str();
        assert_eq!(values(&h, "x-forwarded-for"), [for_]);
        assert_eq!(values(&h, "x-forwarded-host"), ["fn.test:8081"]);
        assert_eq!(values(&h, "x-forwarded-proto"), [proto]);
        assert_eq!(values(&h, "forwarded"), [forwarded]);
        for gone in [
            "x-forwarded-port",
            "x-forwarded-prefix",
            "x-real-ip",
            "host",
        ] {
            assert!(h.get(gone).is_none(), "{gone}");
        }
        assert_eq!(values(&h, "x-kept"), ["1"]);
    }

    // No peer known, no Host (HTTP/1.0): nothing of the caller's stands in.
    let h = forwarded_of(&lies[..8], NOWHERE);
    assert!(h.get("x-forwarded-for").is_none());
    assert!(h.get("x-forwarded-host").is_none());
    assert_eq!(values(&h, "x-forwarded-proto"), ["http"]);
    assert_eq!(values(&h, "forwarded"), ["proto=http"]);

    // A host that is a token stands bare; a quote in one is escaped.
    let h = forwarded_of(&[("host", b"fn.test")], NOWHERE);
    assert_eq!(values(&h, "forwarded"), ["host=fn.test;proto=http"]);
    let h = forwarded_of(&[("host", b"a\"b\\c")], NOWHERE);
    assert_eq!(values(&h, "forwarded"), ["host=\"a\\\"b\\\\c\";proto=http"]);
}

#[test]
fn the_functions_origin_says_the_scheme() {
    for (url, want) in [
        (None, Proto::Http),
        (Some("http://127.0.0.1:8081"), Proto::Http),
        (Some("https://fn.example.com"), Proto::Https),
        (Some("HTTPS://fn.example.com"), Proto::Https),
        (Some("https:"), Proto::Http),
    ] {
        assert_eq!(Proto::of(url), want, "{url:?}");
    }
}
