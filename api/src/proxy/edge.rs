//! What crosses the proxy between a caller and a function, each way.
//!
//! Towards the function, a request loses what belongs to its connection
//! (hop-by-hop headers, `Host`) and the credentials of this platform: an
//! `Authorization` value that carries a token signed by a configured key
//! (`Auth::signed_here`, whatever its claims: an expired token is still
//! this platform's), and every cookie of sless's own (named `sless_…`,
//! also with a `__Host-` or `__Secure-` prefix: the console's session and
//! its CSRF cookie). The rest arrives as the caller sent it: another
//! `Authorization` (a token sless did not issue, Basic), other cookies.
//!
//! Towards the caller, an answer loses its hop-by-hop headers, and its
//! cookies are held to the function's own part of the functions' origin:
//! a `Set-Cookie` with a `Domain` attribute (which would widen it to every
//! host below that domain) or a name of sless's own is dropped, and one
//! that is kept gets the function's prefix in front of its `Path`
//! (`Path=/a` becomes `Path=/fn/{ns}/{name}/a`; none, or `Path=/`,
//! becomes `Path=/fn/{ns}/{name}`), as a reverse proxy maps a backend's
//! paths. Cookies do not tell ports apart: without this a function served
//! on `127.0.0.1:8081` could set a cookie for the API's `127.0.0.1:8080`.
//! `Set-Cookie2` and `Clear-Site-Data` (which clears the cookies of every
//! host of the domain, the console's sign-in included) are dropped.

use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::auth::Auth;

/// Headers that belong to one connection, not to the request (RFC 9110 §7.6.1).
const HOP_BY_HOP: [HeaderName; 8] = [
    header::CONNECTION,
    HeaderName::from_static("keep-alive"),
    header::PROXY_AUTHENTICATE,
    header::PROXY_AUTHORIZATION,
    header::TE,
    header::TRAILER,
    header::TRANSFER_ENCODING,
    header::UPGRADE,
];

/// Cookies of this name prefix (in any case, also behind `__Host-` and
/// `__Secure-`) are sless's own: the console's session and CSRF cookies.
pub const OWN_COOKIE_PREFIX: &str = "sless_";

/// The response headers a function may not send at all.
const DROPPED_RESPONSE_HEADERS: [&str; 2] = ["set-cookie2", "clear-site-data"];

/// Makes a caller's request headers fit to forward to a function.
pub fn request_headers(headers: &mut HeaderMap, auth: &Auth) {
    strip_hop_by_hop(headers);
    headers.remove(header::HOST);
    if headers.contains_key(header::AUTHORIZATION) {
        keep_only(headers, header::AUTHORIZATION, |v| {
            !bearer_token(v).is_some_and(|t| auth.signed_here(t))
        });
    }
    if headers.contains_key(header::COOKIE) {
        strip_own_cookies(headers);
    }
}

/// Makes a function's response headers fit to send to the caller, for the
/// function `name` of namespace `ns` (served under `/fn/{ns}/{name}`).
pub fn response_headers(headers: &mut HeaderMap, ns: &str, name: &str) {
    strip_hop_by_hop(headers);
    for dropped in DROPPED_RESPONSE_HEADERS {
        headers.remove(dropped);
    }
    if !headers.contains_key(header::SET_COOKIE) {
        return;
    }
    let prefix = format!("/fn/{ns}/{name}");
    let prefix = prefix.as_str();
    let kept: Vec<HeaderValue> = headers
        .get_all(header::SET_COOKIE)
        .iter()
        .filter_map(|v| scoped_set_cookie(v.to_str().ok()?, prefix))
        .filter_map(|v| HeaderValue::from_str(&v).ok())
        .collect();
    headers.remove(header::SET_COOKIE);
    for v in kept {
        headers.append(header::SET_COOKIE, v);
    }
}

/// Removes hop-by-hop headers, those named in `Connection` first.
fn strip_hop_by_hop(headers: &mut HeaderMap) {
    if headers.contains_key(header::CONNECTION) {
        let named: Vec<HeaderName> = headers
            .get_all(header::CONNECTION)
            .iter()
            .filter_map(|v| v.to_str().ok())
            .flat_map(|v| v.split(','))
            .filter_map(|t| HeaderName::from_bytes(t.trim().as_bytes()).ok())
            .collect();
        for h in named {
            headers.remove(h);
        }
    }
    for h in &HOP_BY_HOP {
        headers.remove(h);
    }
}

/// Keeps the values of `name` that `keep` says yes to.
fn keep_only(headers: &mut HeaderMap, name: HeaderName, keep: impl Fn(&HeaderValue) -> bool) {
    let kept: Vec<HeaderValue> = headers
        .get_all(&name)
        .iter()
        .filter(|v| keep(v))
        .cloned()
        .collect();
    headers.remove(&name);
    for v in kept {
        headers.append(&name, v);
    }
}

/// The token of `Bearer <token>` (scheme in any case).
fn bearer_token(value: &HeaderValue) -> Option<&str> {
    let (scheme, token) = value.to_str().ok()?.trim().split_once(' ')?;
    scheme
        .eq_ignore_ascii_case("bearer")
        .then(|| token.trim())
        .filter(|t| !t.is_empty())
}

/// Whether a cookie of this name is sless's own.
fn is_own_cookie(name: &str) -> bool {
    let name = name.trim();
    let bare = ["__Host-", "__Secure-"]
        .iter()
        .find_map(|p| strip_prefix_ignore_case(name, p))
        .unwrap_or(name);
    strip_prefix_ignore_case(bare, OWN_COOKIE_PREFIX).is_some()
}

fn strip_prefix_ignore_case<'a>(s: &'a str, prefix: &str) -> Option<&'a str> {
    let head = s.get(..prefix.len())?;
    head.eq_ignore_ascii_case(prefix)
        .then(|| &s[prefix.len()..])
}

/// Rewrites the `Cookie` headers without sless's own cookies (a value
/// that is not text is dropped whole: it cannot be told apart).
fn strip_own_cookies(headers: &mut HeaderMap) {
    let kept: Vec<String> = headers
        .get_all(header::COOKIE)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(str::trim)
        .filter(|pair| !pair.is_empty())
        .filter(|pair| !is_own_cookie(pair.split_once('=').map_or(*pair, |(n, _)| n)))
        .map(str::to_owned)
        .collect();
    headers.remove(header::COOKIE);
    if let Ok(v) = HeaderValue::from_str(&kept.join("; "))
        && !kept.is_empty()
    {
        headers.insert(header::COOKIE, v);
    }
}

/// A function's `Set-Cookie`, scoped to its `prefix`; None when it may not
/// be set at all (a `Domain`, a name of sless's own, no name).
fn scoped_set_cookie(value: &str, prefix: &str) -> Option<String> {
    let mut parts = value.split(';');
    let pair = parts.next()?.trim();
    let (name, _) = pair.split_once('=')?;
    if name.trim().is_empty() || is_own_cookie(name) {
        return None;
    }
    let mut out = pair.to_owned();
    let mut path = None;
    for attr in parts.map(str::trim).filter(|a| !a.is_empty()) {
        let (key, val) = attr
            .split_once('=')
            .map_or((attr, ""), |(k, v)| (k.trim(), v.trim()));
        if key.eq_ignore_ascii_case("domain") {
            if !val.is_empty() {
                return None;
            }
            continue; // an empty Domain is ignored by browsers (RFC 6265 §5.2.3)
        }
        if key.eq_ignore_ascii_case("path") {
            path = Some(val);
            continue;
        }
        out.push_str("; ");
        out.push_str(attr);
    }
    // A Path that does not start with '/' is the default path (RFC 6265 §5.2.4).
    let scoped = match path.filter(|p| p.starts_with('/')) {
        None | Some("/") => prefix.to_owned(),
        Some(p) => format!("{prefix}{p}"),
    };
    out.push_str("; Path=");
    out.push_str(&scoped);
    Some(out)
}

#[cfg(test)]
mod tests {
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

    #[test]
    fn a_request_keeps_other_cookies_and_other_authorization() {
        let auth = Auth::hs256(b"edge-tests-secret-0123456789abcdef", None, None);
        let ours = crate::auth::issue_hs256(
            b"edge-tests-secret-0123456789abcdef",
            "someone",
            std::time::Duration::from_secs(60),
        );
        let theirs = crate::auth::issue_hs256(
            b"another-issuer-secret-0123456789abcd",
            "someone",
            std::time::Duration::from_secs(60),
        );
        let mut h = HeaderMap::new();
        h.append(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("bearer {ours}")).unwrap(),
        );
        h.append(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {theirs}")).unwrap(),
        );
        h.append(
            header::COOKIE,
            HeaderValue::from_static("a=1; sless_session=s; b=2"),
        );
        h.append(
            header::COOKIE,
            HeaderValue::from_static("__Host-sless_csrf=c"),
        );
        h.insert(header::HOST, HeaderValue::from_static("127.0.0.1:8081"));
        request_headers(&mut h, &auth);
        let auths: Vec<_> = h.get_all(header::AUTHORIZATION).iter().collect();
        assert_eq!(
            auths,
            [&HeaderValue::from_str(&format!("Bearer {theirs}")).unwrap()]
        );
        assert_eq!(h.get(header::COOKIE).unwrap(), "a=1; b=2");
        assert!(h.get(header::HOST).is_none());

        // Expired, or for another audience: still this platform's credential.
        let expired = jsonwebtoken::encode(
            &jsonwebtoken::Header::default(),
            &serde_json::json!({"sub": "someone", "exp": 1, "aud": "elsewhere"}),
            &jsonwebtoken::EncodingKey::from_secret(b"edge-tests-secret-0123456789abcdef"),
        )
        .unwrap();
        let mut h = HeaderMap::new();
        h.insert(
            header::AUTHORIZATION,
            HeaderValue::from_str(&format!("Bearer {expired}")).unwrap(),
        );
        request_headers(&mut h, &auth);
        assert!(h.get(header::AUTHORIZATION).is_none());

        let mut only_ours = HeaderMap::new();
        only_ours.insert(header::COOKIE, HeaderValue::from_static("sless_session=s"));
        request_headers(&mut only_ours, &auth);
        assert!(only_ours.get(header::COOKIE).is_none());
    }
}
