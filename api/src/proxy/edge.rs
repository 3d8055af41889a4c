//! What crosses the proxy between a caller and a function, each way.
//!
//! Towards the function, a request loses what belongs to its connection
//! (hop-by-hop headers, `Host`), the credentials of this platform, and what
//! the caller says of where the call came from:
//!
//! - **`Authorization`**: a field value that carries a token signed by a
//!   configured key (`Auth::signed_here`, whatever its claims: an expired
//!   token is still this platform's) is removed whole, whatever its scheme
//!   and spelling. Its token-shaped pieces are found without regard to the
//!   scheme: every run of base64url characters and dots in the value (so a
//!   token is found after `Bearer`, `Token`, `JWT` or nothing, behind any
//!   whitespace, commas or `=`, beside a `Basic …` credential on the same
//!   line), and in each run every three consecutive dot-separated segments
//!   (`token_pieces`). The token must appear as it was issued: one
//!   encoded otherwise (percent-encoded, inside base64) is not looked for.
//!   At most `MAX_TOKEN_PIECES` pieces of a request's `Authorization`
//!   values are checked (each costs a signature check, and no client sends
//!   so many): a value with pieces past them is removed unchecked, and so
//!   is every value after it. Other values arrive as sent: Basic, a token
//!   of another issuer.
//! - **`Cookie`**: every cookie of sless's own (named `sless_…` in any case,
//!   also behind a `__Host-`, `__Secure-`, `__Http-` or `__Host-Http-` prefix: the console's session
//!   and sign-in cookies) is removed, from every `Cookie` field, whether
//!   cookies are joined by `;` or by `,` (which RFC 6265 does not allow in
//!   a cookie's value, and which intermediaries that fold header fields
//!   use), and whatever whitespace surrounds them. A piece between two
//!   separators goes when any of its whitespace-separated words is named so
//!   (`a=1 sless_session=s` as one piece goes whole). The other cookies are
//!   kept, in one `Cookie` field, as RFC 9113 §8.2.3 joins several.
//! - **`Forwarded`, `X-Forwarded-*`, `X-Real-IP`** as the caller sent them
//!   are dropped: the proxy says instead what it saw (`Seen`):
//!   `X-Forwarded-For` the address of the connection's peer,
//!   `X-Forwarded-Host` the `Host` the caller asked for, `X-Forwarded-Proto`
//!   the scheme of the functions' origin (`https` when `SLESS_FN_URL` says
//!   so, else `http`), and `Forwarded` (RFC 7239) the same three as `for`,
//!   `host` and `proto`. Behind an ingress, the peer is the ingress.
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
//!
//! A request with neither `Authorization` nor `Cookie`, and no forwarding
//! headers of its own, is not searched or rewritten: the proxy's part is
//! the four forwarding headers it writes, two of them small allocations
//! (`X-Forwarded-For`, `Forwarded`).

use std::io::Write as _;
use std::net::IpAddr;

use axum::body::Bytes;
use axum::http::{HeaderMap, HeaderName, HeaderValue, header};

use crate::plumbing::auth::Auth;

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

/// Cookies of this name prefix (in any case, also behind `__Host-`,
/// `__Secure-`, `__Http-` and `__Host-Http-`) are sless's own: the console's session and sign-in cookies.
pub const OWN_COOKIE_PREFIX: &str = "sless_";

/// The response headers a function may not send at all.
const DROPPED_RESPONSE_HEADERS: [&str; 2] = ["set-cookie2", "clear-site-data"];

/// At most this many token-shaped pieces of one request's `Authorization`
/// values are checked against the keys (a signature check each); a value
/// with pieces past them is removed unchecked.
pub const MAX_TOKEN_PIECES: usize = 16;

/// What the proxy saw of a call, which it tells the function in place of
/// what the caller said of it (`Forwarded`, `X-Forwarded-*`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Seen {
    /// The address of the connection's peer (`serve` puts it in the
    /// request's extensions); None for a request that came through no
    /// connection (a router driven in process).
    pub peer: Option<IpAddr>,
    /// The scheme callers reach the functions' origin with.
    pub proto: Proto,
}

/// The scheme of the functions' origin, as its callers reach it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Proto {
    Http,
    Https,
}

impl Proto {
    /// The scheme of the functions' origin `fn_url` (`SLESS_FN_URL`, or
    /// the address it listens on): `http` when it is not known, since
    /// sless itself serves plain HTTP.
    pub fn of(fn_url: Option<&str>) -> Proto {
        match fn_url.and_then(|u| u.get(..8)) {
            Some(scheme) if scheme.eq_ignore_ascii_case("https://") => Proto::Https,
            _ => Proto::Http,
        }
    }

    pub fn as_str(self) -> &'static str {
        match self {
            Proto::Http => "http",
            Proto::Https => "https",
        }
    }
}

const X_FORWARDED_FOR: HeaderName = HeaderName::from_static("x-forwarded-for");
const X_FORWARDED_HOST: HeaderName = HeaderName::from_static("x-forwarded-host");
const X_FORWARDED_PROTO: HeaderName = HeaderName::from_static("x-forwarded-proto");

/// Makes a caller's request headers fit to forward to a function, telling
/// it what the proxy saw of the call.
pub fn request_headers(headers: &mut HeaderMap, auth: &Auth, seen: Seen) {
    strip_hop_by_hop(headers);
    let host = headers.remove(header::HOST);
    if headers.contains_key(header::AUTHORIZATION) {
        strip_own_tokens(headers, auth);
    }
    if headers.contains_key(header::COOKIE) {
        strip_own_cookies(headers);
    }
    forwarding(headers, host, seen);
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

/// Whether a cookie of this name is sless's own.
fn is_own_cookie(name: &str) -> bool {
    let name = name.trim();
    // Longest first: `__Host-Http-` before `__Host-`.
    let bare = ["__Host-Http-", "__Host-", "__Secure-", "__Http-"]
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

/// Removes every `Authorization` value that carries a token of this
/// platform's, in any spelling (`carries_own_token`).
fn strip_own_tokens(headers: &mut HeaderMap, auth: &Auth) {
    let mut budget = MAX_TOKEN_PIECES;
    let mut carries = |v: &HeaderValue| carries_own_token(v.as_bytes(), auth, &mut budget);
    let values = headers.get_all(header::AUTHORIZATION);
    let Some(first) = values.iter().position(&mut carries) else {
        return;
    };
    let kept: Vec<HeaderValue> = values
        .iter()
        .take(first)
        .cloned()
        .chain(
            values
                .iter()
                .skip(first + 1)
                .filter(|v| !carries(v))
                .cloned(),
        )
        .collect();
    headers.remove(header::AUTHORIZATION);
    for v in kept {
        headers.append(header::AUTHORIZATION, v);
    }
}

/// Whether an `Authorization` value holds a token signed by one of the
/// configured keys, among its `token_pieces`; also when checking it would
/// take more than the request's `budget` of pieces left.
fn carries_own_token(value: &[u8], auth: &Auth, budget: &mut usize) -> bool {
    token_pieces(value).any(|piece| {
        let Some(left) = budget.checked_sub(1) else {
            return true;
        };
        *budget = left;
        auth.signed_here(piece)
    })
}

/// The pieces of an `Authorization` value that are shaped like a compact
/// JWS, whatever the scheme or separators around them: in every run of
/// base64url characters and dots (anything else, whitespace, `,`, `=` and
/// `+`/`/` included, ends a run), every three consecutive non-empty
/// segments between dots.
fn token_pieces(value: &[u8]) -> impl Iterator<Item = &str> {
    value
        .split(|b| !is_base64url(*b) && *b != b'.')
        .flat_map(three_segments)
        // Base64url and dots are ASCII: always text.
        .filter_map(|piece| std::str::from_utf8(piece).ok())
}

fn is_base64url(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'-' || b == b'_'
}

/// Each three consecutive segments of a run of segments joined by dots
/// (`a.b.c.d`: `a.b.c` and `b.c.d`), none of them empty.
fn three_segments(run: &[u8]) -> impl Iterator<Item = &[u8]> {
    let starts = std::iter::once(0).chain(dot_positions(run).map(|i| i + 1));
    starts.filter_map(move |start| {
        let rest = &run[start..];
        let mut dots = dot_positions(rest);
        let (first, second) = (dots.next()?, dots.next()?);
        let end = dots.next().unwrap_or(rest.len());
        (first > 0 && second > first + 1 && end > second + 1).then(|| &rest[..end])
    })
}

fn dot_positions(s: &[u8]) -> impl Iterator<Item = usize> {
    s.iter()
        .enumerate()
        .filter(|(_, b)| **b == b'.')
        .map(|(i, _)| i)
}

/// Rewrites the `Cookie` fields without sless's own cookies, joined in one
/// field (a value that is not text is dropped whole: it cannot be told
/// apart). One field without any is left as sent.
fn strip_own_cookies(headers: &mut HeaderMap) {
    let values = headers.get_all(header::COOKIE);
    let one = values.iter().nth(1).is_none();
    if one
        && values.iter().all(|v| {
            v.to_str()
                .is_ok_and(|v| !v.split([';', ',']).any(names_own_cookie))
        })
    {
        return;
    }
    let kept: Vec<String> = values
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .map(|piece| {
            if !piece.split(',').any(names_own_cookie) {
                return piece.trim().to_owned();
            }
            // The others of a `,`-joined piece, with the separators they had.
            let others: Vec<&str> = piece
                .split(',')
                .filter(|c| !c.trim().is_empty() && !names_own_cookie(c))
                .collect();
            others.join(",").trim().to_owned()
        })
        .filter(|piece| !piece.is_empty())
        .collect();
    headers.remove(header::COOKIE);
    if let Ok(v) = HeaderValue::from_str(&kept.join("; "))
        && !kept.is_empty()
    {
        headers.insert(header::COOKIE, v);
    }
}

/// Whether a cookie of sless's own is named in this piece of a `Cookie`
/// value (between `;` or `,`): in any of its whitespace-separated words,
/// whose name is what comes before a `=`.
fn names_own_cookie(piece: &str) -> bool {
    piece
        .split(|c: char| c.is_ascii_whitespace())
        .any(|word| is_own_cookie(word.split_once('=').map_or(word, |(name, _)| name)))
}

/// Drops the forwarding headers a caller sent (`Forwarded`, every
/// `X-Forwarded-*`, `X-Real-IP`) and writes what the proxy saw instead.
fn forwarding(headers: &mut HeaderMap, host: Option<HeaderValue>, seen: Seen) {
    if headers.keys().any(is_forwarding) {
        let theirs: Vec<HeaderName> = headers
            .keys()
            .filter(|n| is_forwarding(n))
            .cloned()
            .collect();
        for name in theirs {
            headers.remove(name);
        }
    }
    let proto = seen.proto.as_str();
    // RFC 7239 §4: `for=192.0.2.1` or `for="[2001:db8::1]"`; a host
    // with a port, or anything but a token, quoted. Written by hand into a
    // buffer of the exact size, which becomes the value as it is: this
    // runs on every call.
    let mut ip_text = [0u8; 48];
    let ip = seen.peer.map(|ip| {
        let ip = ip.to_canonical();
        (ip, ip_as_text(ip, &mut ip_text))
    });
    let for_len = ip.map_or(0, |(ip, text)| {
        "for=;".len() + text.len() + if ip.is_ipv6() { "\"[]\"".len() } else { 0 }
    });
    let host_len = host
        .as_ref()
        .map_or(0, |h| "host=;".len() + quoted_len(h.as_bytes()));
    let mut forwarded = Vec::with_capacity(for_len + host_len + "proto=".len() + proto.len());
    if let Some((ip, text)) = ip {
        if let Ok(v) = HeaderValue::from_bytes(text) {
            headers.insert(X_FORWARDED_FOR, v);
        }
        forwarded.extend_from_slice(b"for=");
        if ip.is_ipv6() {
            forwarded.extend_from_slice(b"\"[");
            forwarded.extend_from_slice(text);
            forwarded.extend_from_slice(b"]\"");
        } else {
            forwarded.extend_from_slice(text);
        }
        forwarded.push(b';');
    }
    if let Some(host) = host {
        forwarded.extend_from_slice(b"host=");
        push_quoted_unless_token(host.as_bytes(), &mut forwarded);
        forwarded.push(b';');
        headers.insert(X_FORWARDED_HOST, host);
    }
    forwarded.extend_from_slice(b"proto=");
    forwarded.extend_from_slice(proto.as_bytes());
    headers.insert(X_FORWARDED_PROTO, HeaderValue::from_static(proto));
    debug_assert_eq!(forwarded.len(), forwarded.capacity());
    if let Ok(v) = HeaderValue::from_maybe_shared(Bytes::from(forwarded)) {
        headers.insert(header::FORWARDED, v);
    }
}

/// An address as text (`192.0.2.1`, `2001:db8::1`), in `buf`.
fn ip_as_text(ip: IpAddr, buf: &mut [u8; 48]) -> &[u8] {
    let mut len = 0;
    match ip {
        IpAddr::V4(v4) => {
            for (i, octet) in v4.octets().into_iter().enumerate() {
                if i > 0 {
                    buf[len] = b'.';
                    len += 1;
                }
                for (from, digit) in [(100, octet / 100), (10, octet / 10 % 10), (0, octet % 10)] {
                    if octet >= from {
                        buf[len] = b'0' + digit;
                        len += 1;
                    }
                }
            }
        }
        // Rare enough for the formatting machinery; 39 bytes at most.
        IpAddr::V6(v6) => {
            let mut out = &mut buf[..];
            let _ = write!(out, "{v6}");
            len = 48 - out.len();
        }
    }
    &buf[..len]
}

/// A caller's say of where its request came from, which the proxy replaces.
fn is_forwarding(name: &HeaderName) -> bool {
    let name = name.as_str();
    name == "forwarded" || name == "x-real-ip" || name.starts_with("x-forwarded-")
}

fn is_tchar(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b"!#$%&'*+-.^_`|~".contains(&b)
}

/// The length of `value` as `push_quoted_unless_token` writes it.
fn quoted_len(value: &[u8]) -> usize {
    if !value.is_empty() && value.iter().all(|b| is_tchar(*b)) {
        return value.len();
    }
    let escaped = value.iter().filter(|b| matches!(b, b'"' | b'\\')).count();
    value.len() + escaped + 2
}

/// `value` as an RFC 7239 value: as it is when it is a token (RFC 9110
/// §5.6.2), else a quoted string.
fn push_quoted_unless_token(value: &[u8], out: &mut Vec<u8>) {
    if !value.is_empty() && value.iter().all(|b| is_tchar(*b)) {
        out.extend_from_slice(value);
        return;
    }
    out.push(b'"');
    for b in value {
        if matches!(b, b'"' | b'\\') {
            out.push(b'\\');
        }
        out.push(*b);
    }
    out.push(b'"');
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
mod tests;
