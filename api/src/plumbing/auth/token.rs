//! What a token must look like before any key is tried.
//!
//! These checks cost no cryptography and keep hostile input away from it: a
//! token that is too long, not a compact JWS, whose header is not JSON, that
//! names another algorithm than the pinned one (`none` included, and HS256
//! signed with a public key as the HMAC secret), or whose key id is anything
//! but a short plain identifier is refused here. The key id is only ever a
//! key into a map of configured keys: never a path, never a query.

use serde::Deserialize;
use serde_json::Value;

use super::algorithm::TokenAlgorithm;

/// The longest token accepted, in bytes of its compact form.
pub const MAX_TOKEN_BYTES: usize = 8 * 1024;

/// The longest key id (`kid`) accepted, in characters.
pub const MAX_KID_CHARS: usize = 128;

/// One of the three parts of a compact JWS.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Segment {
    Header,
    Claims,
    Signature,
}

impl std::fmt::Display for Segment {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Segment::Header => "header",
            Segment::Claims => "claims segment",
            Segment::Signature => "signature",
        })
    }
}

/// Why a token was refused before its signature was checked. The text says
/// why without repeating the token.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Malformed {
    #[error("the token is longer than 8 KiB")]
    TooLong,
    #[error("the token is not three base64url segments separated by dots (a compact JWS)")]
    NotThreeSegments,
    #[error("the token's {0} is empty")]
    Empty(Segment),
    #[error("the token's {0} is not unpadded base64url")]
    NotBase64Url(Segment),
    #[error("the token's header is not a JSON object")]
    HeaderNotJson,
    #[error("the token's header names no algorithm (alg)")]
    NoAlgorithm,
    #[error("an unsigned token (alg none) is never accepted")]
    Unsigned,
    #[error("the token is signed with {found}, but this server accepts {pinned} only")]
    WrongAlgorithm { found: String, pinned: &'static str },
    #[error("the token's key id (kid) is not a plain identifier (1 to 128 of A-Z a-z 0-9 . _ -)")]
    BadKid,
    #[error(
        "the token's header lists critical extensions (crit), which this server does not implement"
    )]
    Critical,
}

/// What the checks learnt from a token's header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Inspected {
    /// The key id, a plain identifier, if the header names one.
    pub kid: Option<String>,
}

/// The header members the checks read. Duplicate members are an error
/// (serde refuses a field seen twice), so a header cannot say one `alg` to
/// these checks and another to the verifier.
#[derive(Deserialize)]
struct RawHeader {
    alg: Option<Value>,
    kid: Option<Value>,
    crit: Option<Value>,
}

/// Checks `token`'s shape and header against the pinned algorithm.
pub fn inspect(token: &str, pinned: TokenAlgorithm) -> Result<Inspected, Malformed> {
    if token.len() > MAX_TOKEN_BYTES {
        return Err(Malformed::TooLong);
    }
    let mut parts = token.split('.');
    let (Some(header), Some(claims), Some(signature), None) =
        (parts.next(), parts.next(), parts.next(), parts.next())
    else {
        return Err(Malformed::NotThreeSegments);
    };
    for (segment, text) in [
        (Segment::Header, header),
        (Segment::Claims, claims),
        (Segment::Signature, signature),
    ] {
        if text.is_empty() {
            return Err(Malformed::Empty(segment));
        }
        if !is_base64url(text) {
            return Err(Malformed::NotBase64Url(segment));
        }
    }
    let header = decode_base64url(header).ok_or(Malformed::NotBase64Url(Segment::Header))?;
    // serde would read a struct from a JSON array as well: insist on an object.
    if header.trim_ascii_start().first() != Some(&b'{') {
        return Err(Malformed::HeaderNotJson);
    }
    let raw: RawHeader = serde_json::from_slice(&header).map_err(|_| Malformed::HeaderNotJson)?;
    if raw.crit.is_some() {
        return Err(Malformed::Critical);
    }
    match raw.alg {
        None | Some(Value::Null) => return Err(Malformed::NoAlgorithm),
        Some(Value::String(alg)) if alg == pinned.name() => {}
        Some(Value::String(alg)) if alg.eq_ignore_ascii_case("none") => {
            return Err(Malformed::Unsigned);
        }
        Some(other) => {
            return Err(Malformed::WrongAlgorithm {
                found: shown_algorithm(&other),
                pinned: pinned.name(),
            });
        }
    }
    let kid = match raw.kid {
        None | Some(Value::Null) => None,
        Some(Value::String(kid)) if is_plain_kid(&kid) => Some(kid),
        Some(_) => return Err(Malformed::BadKid),
    };
    Ok(Inspected { kid })
}

/// A key id a token may carry: 1 to 128 of `[A-Za-z0-9._-]`.
pub fn is_plain_kid(kid: &str) -> bool {
    (1..=MAX_KID_CHARS).contains(&kid.len())
        && kid
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
}

/// How a refused `alg` is named in the answer: its value when it is a
/// short plain name such as `HS256`, never anything longer or stranger.
fn shown_algorithm(alg: &Value) -> String {
    match alg {
        Value::String(s)
            if (1..=16).contains(&s.len())
                && s.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-') =>
        {
            s.clone()
        }
        _ => "an algorithm it does not know".into(),
    }
}

fn sextet(b: u8) -> Option<u32> {
    Some(match b {
        b'A'..=b'Z' => b - b'A',
        b'a'..=b'z' => b - b'a' + 26,
        b'0'..=b'9' => b - b'0' + 52,
        b'-' => 62,
        b'_' => 63,
        _ => return None,
    } as u32)
}

fn is_base64url(s: &str) -> bool {
    s.len() % 4 != 1 && s.bytes().all(|b| sextet(b).is_some()) && trailing_bits_are_zero(s)
}

/// The bits past the last whole byte must be zero: each byte string has one
/// encoding, as base64 decoders used for JWTs require.
fn trailing_bits_are_zero(s: &str) -> bool {
    let Some(last) = s.bytes().last().and_then(sextet) else {
        return true;
    };
    match s.len() % 4 {
        2 => last & 0b1111 == 0,
        3 => last & 0b11 == 0,
        _ => true,
    }
}

/// Decodes unpadded base64url (RFC 4648 §5); None if `s` is not that.
pub fn decode_base64url(s: &str) -> Option<Vec<u8>> {
    if !is_base64url(s) {
        return None;
    }
    let mut out = Vec::with_capacity(s.len() * 3 / 4);
    let (mut acc, mut bits) = (0u32, 0u32);
    for b in s.bytes() {
        acc = (acc << 6) | sextet(b)?;
        bits += 6;
        if bits >= 8 {
            bits -= 8;
            out.push((acc >> bits) as u8);
            acc &= (1 << bits) - 1;
        }
    }
    Some(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn b64(bytes: &[u8]) -> String {
        const ALPHABET: &[u8; 64] =
            b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
        let mut out = String::new();
        for chunk in bytes.chunks(3) {
            let b = [
                chunk[0],
                chunk.get(1).copied().unwrap_or(0),
                chunk.get(2).copied().unwrap_or(0),
            ];
            let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
            for i in 0..=chunk.len() {
                out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
            }
        }
        out
    }

    fn with_header(header: &str) -> String {
        format!("{}.{}.c2ln", b64(header.as_bytes()), b64(b"{}"))
    }

    #[test]
    fn base64url_decodes_the_rfc_4648_vectors_and_nothing_else() {
        let cases: [(&str, &[u8]); 8] = [
            ("", b""),
            ("Zg", b"f"),
            ("Zm8", b"fo"),
            ("Zm9v", b"foo"),
            ("Zm9vYg", b"foob"),
            ("Zm9vYmE", b"fooba"),
            ("Zm9vYmFy", b"foobar"),
            ("-_-_", &[0xfb, 0xff, 0xbf]),
        ];
        for (text, want) in cases {
            assert_eq!(decode_base64url(text).as_deref(), Some(want), "{text}");
        }
        // "Zh" and "Zm9" are non-canonical spellings of "f" and "fo": bits
        // past the last byte that are not zero.
        for bad in ["Zg==", "Zm9v+", "Zm9v/", "Z", "Zm9vY", "Zh", "Zm9", "Zm é"] {
            assert_eq!(decode_base64url(bad), None, "{bad:?}");
        }
    }

    #[test]
    fn a_well_formed_token_of_the_pinned_algorithm_passes_with_its_kid() {
        let token = with_header(r#"{"alg":"RS256","typ":"JWT","kid":"key-2025.a_1"}"#);
        assert_eq!(
            inspect(&token, TokenAlgorithm::Rs256),
            Ok(Inspected {
                kid: Some("key-2025.a_1".into())
            })
        );
        let token = with_header(r#"{"alg":"ES256"}"#);
        assert_eq!(
            inspect(&token, TokenAlgorithm::Es256),
            Ok(Inspected { kid: None })
        );
    }

    #[test]
    fn malformed_tokens_are_refused_for_their_reason() {
        let rs = TokenAlgorithm::Rs256;
        let long_kid = format!(r#"{{"alg":"RS256","kid":"{}"}}"#, "k".repeat(129));
        let cases: Vec<(&str, String, Malformed)> = vec![
            ("two segments", "YQ.YQ".into(), Malformed::NotThreeSegments),
            (
                "four segments",
                "YQ.YQ.YQ.YQ".into(),
                Malformed::NotThreeSegments,
            ),
            ("no dots", "YWJj".into(), Malformed::NotThreeSegments),
            (
                "empty signature",
                format!("{}.YQ.", b64(br#"{"alg":"RS256"}"#)),
                Malformed::Empty(Segment::Signature),
            ),
            (
                "empty header",
                ".YQ.YQ".into(),
                Malformed::Empty(Segment::Header),
            ),
            (
                "padding",
                format!("{}.YQ==.YQ", b64(br#"{"alg":"RS256"}"#)),
                Malformed::NotBase64Url(Segment::Claims),
            ),
            (
                "standard alphabet",
                format!("{}.YQ.a+b/", b64(br#"{"alg":"RS256"}"#)),
                Malformed::NotBase64Url(Segment::Signature),
            ),
            (
                "header not JSON",
                with_header("not json"),
                Malformed::HeaderNotJson,
            ),
            (
                "header a JSON array",
                with_header(r#"["RS256"]"#),
                Malformed::HeaderNotJson,
            ),
            (
                "alg twice",
                with_header(r#"{"alg":"none","alg":"RS256"}"#),
                Malformed::HeaderNotJson,
            ),
            (
                "no alg",
                with_header(r#"{"typ":"JWT"}"#),
                Malformed::NoAlgorithm,
            ),
            (
                "alg none",
                with_header(r#"{"alg":"none"}"#),
                Malformed::Unsigned,
            ),
            (
                "alg NONE",
                with_header(r#"{"alg":"NONE"}"#),
                Malformed::Unsigned,
            ),
            (
                "alg HS256",
                with_header(r#"{"alg":"HS256"}"#),
                Malformed::WrongAlgorithm {
                    found: "HS256".into(),
                    pinned: "RS256",
                },
            ),
            (
                "alg rs256 (case matters)",
                with_header(r#"{"alg":"rs256"}"#),
                Malformed::WrongAlgorithm {
                    found: "rs256".into(),
                    pinned: "RS256",
                },
            ),
            (
                "alg not a string",
                with_header(r#"{"alg":["RS256"]}"#),
                Malformed::WrongAlgorithm {
                    found: "an algorithm it does not know".into(),
                    pinned: "RS256",
                },
            ),
            (
                "alg with markup is not repeated",
                with_header(r#"{"alg":"<script>"}"#),
                Malformed::WrongAlgorithm {
                    found: "an algorithm it does not know".into(),
                    pinned: "RS256",
                },
            ),
            (
                "kid a path",
                with_header(r#"{"alg":"RS256","kid":"../../etc/passwd"}"#),
                Malformed::BadKid,
            ),
            (
                "kid SQL",
                with_header(r#"{"alg":"RS256","kid":"x' or '1'='1"}"#),
                Malformed::BadKid,
            ),
            (
                "kid empty",
                with_header(r#"{"alg":"RS256","kid":""}"#),
                Malformed::BadKid,
            ),
            (
                "kid a number",
                with_header(r#"{"alg":"RS256","kid":7}"#),
                Malformed::BadKid,
            ),
            (
                "kid of 129 characters",
                with_header(&long_kid),
                Malformed::BadKid,
            ),
            (
                "crit",
                with_header(r#"{"alg":"RS256","crit":["exp"],"exp":1}"#),
                Malformed::Critical,
            ),
            (
                "over 8 KiB",
                format!("{}.{}.YQ", b64(br#"{"alg":"RS256"}"#), "A".repeat(8 * 1024)),
                Malformed::TooLong,
            ),
        ];
        for (what, token, want) in cases {
            assert_eq!(inspect(&token, rs), Err(want), "{what}");
        }
        // The longest kid and the longest token still pass.
        let kid = format!(r#"{{"alg":"RS256","kid":"{}"}}"#, "k".repeat(128));
        assert!(inspect(&with_header(&kid), rs).is_ok());
        let head = b64(br#"{"alg":"RS256"}"#);
        let fill = "A".repeat(MAX_TOKEN_BYTES - head.len() - 2 - 4);
        let longest = format!("{head}.{fill}.YWJj");
        assert_eq!(longest.len(), MAX_TOKEN_BYTES);
        assert!(inspect(&longest, rs).is_ok());
    }
}
