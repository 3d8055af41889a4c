//! What a request must be to be forwarded, checked before any lookup: a
//! path that can name a user's function and a suffix meant for it, header
//! fields and a declared body within `ProxyLimits`.

use std::time::Duration;

use axum::http::{HeaderMap, StatusCode};

use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::request_id::X_REQUEST_ID;

/// The limits a request must stay within to be forwarded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProxyLimits {
    /// Request body bytes (default 6 MiB).
    pub max_body_bytes: u64,
    /// Request header fields, each value of a repeated one counted, but not
    /// `X-Request-Id` (default 64; at most the API's own limit,
    /// `serve::MAX_REQUEST_HEADERS`).
    pub max_headers: usize,
    /// Request header bytes, names and values, but not `X-Request-Id`
    /// (default 16 KiB).
    pub max_header_bytes: usize,
    /// The longest gap between two pieces of a function's answer body
    /// (default 10 s); the whole call is bounded by the function's
    /// `timeout_sec` besides.
    pub idle_timeout: Duration,
    /// How long a call to a function scaled to zero is held for an
    /// instance to start (default 30 s).
    pub activation_timeout: Duration,
    /// Calls held at once, per function and API process, while an
    /// instance starts (default 100); one more is refused at once.
    pub activation_queue: usize,
}

impl Default for ProxyLimits {
    fn default() -> Self {
        ProxyLimits {
            max_body_bytes: 6 * 1024 * 1024,
            max_headers: 64,
            max_header_bytes: 16 * 1024,
            idle_timeout: Duration::from_secs(10),
            activation_timeout: Duration::from_secs(30),
            activation_queue: 100,
        }
    }
}

/// True for a user's namespace: `sless-` and 16 lowercase hex digits.
pub(super) fn is_user_namespace(ns: &str) -> bool {
    ns.strip_prefix("sless-").is_some_and(|hex| {
        hex.len() == 16 && hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    })
}

/// `/fn/{ns}/{name}{suffix}` of the raw path: the suffix is `""` or starts
/// with `/`, exactly as it came (percent-encoding untouched).
pub(super) fn split_path(path: &str) -> Option<(&str, &str, &str)> {
    let rest = path.strip_prefix("/fn/")?;
    let (ns, rest) = rest.split_once('/')?;
    let (name, suffix) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    Some((ns, name, suffix))
}

/// Percent-decodes for checking, not forwarding (`%zz` stays as it is).
fn percent_decoded(s: &str) -> Vec<u8> {
    let b = s.as_bytes();
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let hex = |c: u8| (c as char).to_digit(16);
        if b[i] == b'%'
            && let (Some(h), Some(l)) = (
                b.get(i + 1).copied().and_then(hex),
                b.get(i + 2).copied().and_then(hex),
            )
        {
            out.push((h * 16 + l) as u8);
            i += 3;
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    out
}

/// Refuses suffixes that are not for the function: the wrapper's own paths
/// and dot-segments, percent-encoded or not.
pub(super) fn check_suffix(suffix: &str) -> ApiResult<()> {
    if !suffix.contains(['.', '%', '_']) {
        return Ok(()); // the usual case, and nothing to decode
    }
    if percent_decoded(suffix).starts_with(b"/__sless") {
        return Err(ApiError::not_found("paths under /__sless are reserved"));
    }
    for segment in suffix.split('/') {
        if matches!(percent_decoded(segment).as_slice(), b"." | b"..") {
            return Err(ApiError::new(
                StatusCode::BAD_REQUEST,
                "invalid-path",
                "Invalid path",
                format!("the path {suffix:?} has a dot-segment ({segment:?}); send it resolved"),
            )
            .with_field("path"));
        }
    }
    Ok(())
}

/// Checks the request's header fields against the limits. `X-Request-Id`
/// is not counted: it is bounded on its own (`request_id::request_id`),
/// and may have been added by the API itself.
pub(super) fn check_headers(headers: &HeaderMap, limits: &ProxyLimits) -> ApiResult<()> {
    let too_large = |detail: String| {
        ApiError::new(
            StatusCode::REQUEST_HEADER_FIELDS_TOO_LARGE,
            "headers-too-large",
            "Request headers too large",
            detail,
        )
    };
    let (mut count, mut bytes) = (0, 0);
    for (name, value) in headers {
        if name != X_REQUEST_ID {
            count += 1;
            bytes += name.as_str().len() + value.len();
        }
    }
    if count > limits.max_headers {
        return Err(too_large(format!(
            "the request has {count} header fields; the limit is {}",
            limits.max_headers
        )));
    }
    if bytes > limits.max_header_bytes {
        return Err(too_large(format!(
            "the request's header fields have {bytes} bytes; the limit is {}",
            limits.max_header_bytes
        )));
    }
    Ok(())
}

pub(super) fn body_too_large(limit: u64) -> ApiError {
    ApiError::new(
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
        "Request body too large",
        format!("the request body is larger than the limit of {limit} bytes"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_path_splits_into_namespace_name_and_the_raw_suffix() {
        assert_eq!(split_path("/fn/a/b"), Some(("a", "b", "")));
        assert_eq!(split_path("/fn/a/b/"), Some(("a", "b", "/")));
        assert_eq!(split_path("/fn/a/b/c%2Fd/e"), Some(("a", "b", "/c%2Fd/e")));
        assert_eq!(split_path("/fn/a"), None);
        assert_eq!(split_path("/v1/a/b"), None);
    }

    #[test]
    fn only_sless_and_sixteen_lowercase_hex_digits_is_a_namespace() {
        assert!(is_user_namespace("sless-ffd1f598c169b0ae"));
        for bad in [
            "sless-ffd1f598c169b0a",
            "sless-ffd1f598c169b0aef",
            "sless-FFD1F598C169B0AE",
            "sless-ffd1f598c169b0ag",
            "default",
            "kube-system",
            "xsless-ffd1f598c169b0ae",
            "",
        ] {
            assert!(!is_user_namespace(bad), "{bad:?}");
        }
    }
}
