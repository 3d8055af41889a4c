//! Conditional requests: `If-Match` and `If-None-Match` against a stream's
//! version, which is what an aggregate's `ETag` is (`"<stream version>"`).
//!
//! `If-Match: "7"` turns a command's expected version into the client's: it
//! is applied only while the stream is at version 7, and answers 412 with
//! the current `ETag` otherwise, writing nothing. `If-Match: *` asks that the
//! thing exists; `If-None-Match: *` that it does not (create-only). Entity
//! tags compare strongly: a weak tag (`W/"7"`) never matches `If-Match`.

use axum::http::{HeaderMap, HeaderValue, StatusCode};

use crate::plumbing::error::{ApiError, ApiResult};

/// The `ETag` of a stream at `version`.
pub fn etag(version: u64) -> HeaderValue {
    HeaderValue::from_str(&format!("\"{version}\"")).expect("digits are a header value")
}

/// The entity tags a precondition header lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tags {
    /// `*`: any current representation.
    Any,
    /// The stream versions of the tags listed (weak ones are kept apart:
    /// they match only `If-None-Match`).
    Versions { strong: Vec<u64>, weak: Vec<u64> },
}

/// A request's preconditions on the stream it changes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Precondition {
    pub if_match: Option<Tags>,
    pub if_none_match: Option<Tags>,
}

impl Precondition {
    /// Reads `If-Match` and `If-None-Match`: 400 naming the header when one
    /// is not a list of entity tags or `*`.
    pub fn from_headers(headers: &HeaderMap) -> ApiResult<Precondition> {
        Ok(Precondition {
            if_match: tags_of(headers, "if-match", "If-Match")?,
            if_none_match: tags_of(headers, "if-none-match", "If-None-Match")?,
        })
    }

    /// True when the request names no precondition.
    pub fn is_none(&self) -> bool {
        self.if_match.is_none() && self.if_none_match.is_none()
    }

    /// Checks the preconditions against a stream at `version` whose
    /// aggregate `exists` (a deleted or never-created one does not).
    /// `what` names it in the refusal ("function \"hello\"").
    pub fn check(&self, what: &str, exists: bool, version: u64) -> ApiResult<()> {
        if let Some(tags) = &self.if_match {
            let holds = exists
                && match tags {
                    Tags::Any => true,
                    Tags::Versions { strong, .. } => strong.contains(&version),
                };
            if !holds {
                return Err(failed("If-Match", what, exists, version));
            }
        }
        if let Some(tags) = &self.if_none_match {
            let fails = exists
                && match tags {
                    Tags::Any => true,
                    Tags::Versions { strong, weak } => {
                        strong.contains(&version) || weak.contains(&version)
                    }
                };
            if fails {
                return Err(failed("If-None-Match", what, exists, version));
            }
        }
        Ok(())
    }
}

/// 412 for a precondition that does not hold, with the current `ETag`.
fn failed(header: &str, what: &str, exists: bool, version: u64) -> ApiError {
    let detail = match (header, exists) {
        ("If-Match", false) => format!("{what} does not exist; nothing was changed"),
        ("If-Match", true) => format!(
            "{what} is at version {version} (ETag \"{version}\"), not the one the request \
             names in If-Match; nothing was changed: read it again and retry"
        ),
        _ => format!(
            "{what} exists (ETag \"{version}\") and If-None-Match asks that it does not; \
             nothing was changed"
        ),
    };
    let mut e = ApiError::new(
        StatusCode::PRECONDITION_FAILED,
        PRECONDITION_FAILED,
        "Precondition failed",
        detail,
    )
    .with_field(header);
    if exists {
        e = e.with_etag(version);
    }
    e
}

/// The problem kind of a command whose `If-Match` or `If-None-Match` did
/// not hold.
pub const PRECONDITION_FAILED: &str = "precondition-failed";

fn tags_of(headers: &HeaderMap, name: &str, shown: &str) -> ApiResult<Option<Tags>> {
    let values: Vec<&HeaderValue> = headers.get_all(name).iter().collect();
    if values.is_empty() {
        return Ok(None);
    }
    let bad = |detail: String| {
        Err(ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed-request",
            "Malformed request",
            detail,
        )
        .with_field(shown))
    };
    let mut strong = Vec::new();
    let mut weak = Vec::new();
    let mut any = false;
    for value in values {
        let Ok(text) = value.to_str() else {
            return bad(format!("{shown} is not text"));
        };
        for item in text.split(',').map(str::trim).filter(|s| !s.is_empty()) {
            if item == "*" {
                any = true;
                continue;
            }
            let (is_weak, quoted) = match item.strip_prefix("W/") {
                Some(rest) => (true, rest),
                None => (false, item),
            };
            let Some(inner) = quoted
                .strip_prefix('"')
                .and_then(|s| s.strip_suffix('"'))
                .filter(|s| !s.contains('"'))
            else {
                return bad(format!(
                    "{shown} must be * or a list of entity tags such as \"3\" (got {item:?})"
                ));
            };
            // A well-formed tag that is no stream version of ours matches nothing.
            if let Ok(v) = inner.parse::<u64>() {
                if is_weak {
                    weak.push(v);
                } else {
                    strong.push(v);
                }
            }
        }
    }
    if any {
        return Ok(Some(Tags::Any));
    }
    Ok(Some(Tags::Versions { strong, weak }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pre(pairs: &[(&'static str, &'static str)]) -> ApiResult<Precondition> {
        let mut h = HeaderMap::new();
        for (k, v) in pairs {
            h.append(*k, HeaderValue::from_static(v));
        }
        Precondition::from_headers(&h)
    }

    #[test]
    fn the_preconditions_hold_or_fail_as_the_rfc_says() {
        // (headers, exists, version, holds)
        type Case<'a> = (&'a [(&'a str, &'a str)], bool, u64, bool);
        let cases: &[Case] = &[
            (&[], true, 3, true),
            (&[], false, 0, true),
            (&[("if-match", "\"3\"")], true, 3, true),
            (&[("if-match", "\"2\"")], true, 3, false),
            (&[("if-match", "\"2\", \"3\"")], true, 3, true),
            (
                &[("if-match", "\"2\""), ("if-match", "\"3\"")],
                true,
                3,
                true,
            ),
            (&[("if-match", "W/\"3\"")], true, 3, false),
            (&[("if-match", "\"3\"")], false, 3, false),
            (&[("if-match", "*")], true, 3, true),
            (&[("if-match", "*")], false, 0, false),
            (&[("if-match", "\"abc\"")], true, 3, false),
            (&[("if-none-match", "*")], false, 0, true),
            (&[("if-none-match", "*")], false, 4, true),
            (&[("if-none-match", "*")], true, 1, false),
            (&[("if-none-match", "\"1\"")], true, 2, true),
            (&[("if-none-match", "W/\"2\"")], true, 2, false),
        ];
        for (headers, exists, version, holds) in cases {
            let p = pre(headers).unwrap();
            let got = p.check("function \"f\"", *exists, *version);
            assert_eq!(
                got.is_ok(),
                *holds,
                "{headers:?} exists={exists} v={version}"
            );
            if let Err(e) = got {
                assert_eq!(e.status, StatusCode::PRECONDITION_FAILED);
                assert_eq!(e.kind, PRECONDITION_FAILED);
                assert_eq!(e.etag(), exists.then_some(*version), "{headers:?}");
            }
        }
    }

    #[test]
    fn a_precondition_that_is_no_entity_tag_is_a_400_naming_its_header() {
        for (name, value, shown) in [
            ("if-match", "3", "If-Match"),
            ("if-match", "\"3", "If-Match"),
            ("if-none-match", "W/3", "If-None-Match"),
            ("if-match", "\"a\"b\"", "If-Match"),
        ] {
            let e = pre(&[(name, value)]).unwrap_err();
            assert_eq!(e.status, StatusCode::BAD_REQUEST, "{value}");
            assert_eq!(e.field.as_deref(), Some(shown));
        }
    }
}
