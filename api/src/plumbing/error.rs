//! The one place errors become HTTP answers: `application/problem+json`
//! documents (RFC 9457) with a stable `type` per kind of error.
//!
//! Every problem has `type` (`https://sless.dev/problems/{kind}`), `title`,
//! `status` and `detail`, and `field` when one field of the request is at
//! fault (a body member such as `env_vars` or `env_vars.A`, or a header
//! such as `Idempotency-Key`). The kinds, and what they mean:
//!
//! | kind | status | |
//! |---|---|---|
//! | `malformed-request` | 400 | the body is not JSON (or not readable) |
//! | `unauthorized` | 401 | no token, or a token that was refused |
//! | `forbidden` | 403 | a route for admin tokens only (the audit log of every namespace, replay, reconcile) |
//! | `not-found` | 404 | no such route, function, version, or another user's namespace |
//! | `method-not-allowed` | 405 | the route exists, not with this method |
//! | `body-timeout` | 408 | the body did not arrive in time |
//! | `already-exists` | 409 | create of a name that is taken |
//! | `version-conflict` | 409 | a concurrent change came first |
//! | `conflict` | 409 | the command does not fit the function's state now |
//! | `quota-exceeded` | 409 | the namespace is at a quota (functions, kept versions, stored bytes, triggers, running jobs); `quota`, `limit` and `used` say which |
//! | `payload-too-large` | 413 | a JSON body over its limit |
//! | `archive-too-large` | 413 | an upload over its limit |
//! | `unsupported-media-type` | 415 | an upload that is not `application/zip` |
//! | `invalid-field` | 422 | a field breaks a rule; `field` names it |
//! | `invalid-archive` | 422 | the zip breaks an archive rule |
//! | `idempotency-key-reused` | 422 | the key was used for another request |
//! | `quota-exceeded` | 429 | the namespace is at its upload rate (`quota` `uploads_per_minute`), with `Retry-After` |
//! | `internal` | 500 | a defect of ours |
//! | `not-implemented` | 501 | a valid request for something not built yet |
//! | `database-unavailable`, `blob-store-unavailable`, `deadline-exceeded` | 503 | retry later (`Retry-After`) |
//!
//! A dependency that cannot be reached or does not answer in time (the
//! database, the blob store) is a 503 with `Retry-After`, never a 500: the
//! request was not refused, and the same request may succeed later. With an
//! `Idempotency-Key`, retrying it is always safe.

use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde::Serialize;
use sless_domain::DomainError;
use sless_domain::archive::ArchiveError;

pub const PROBLEM_JSON: &str = "application/problem+json";

/// An error as the API answers it.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub status: StatusCode,
    /// Stable slug; the problem `type` is `https://sless.dev/problems/{kind}`.
    pub kind: &'static str,
    pub title: &'static str,
    pub detail: String,
    /// The offending field of the request, when there is one.
    pub field: Option<String>,
    /// Seconds after which a retry may succeed (`Retry-After`), for 503s
    /// and 429s.
    pub retry_after: Option<u32>,
    /// Members of the problem document beyond the standard ones (a
    /// quota's `quota`, `limit` and `used`); boxed, as most problems have none.
    pub members: Option<Box<serde_json::Map<String, serde_json::Value>>>,
}

/// The problem kind of a command that lost a race with a concurrent append
/// to its stream.
pub const VERSION_CONFLICT: &str = "version-conflict";

/// The problem kind of a command refused by one of its namespace's quotas.
pub const QUOTA_EXCEEDED: &str = "quota-exceeded";

/// The problem kind of a database that could not be reached in time.
pub const DATABASE_UNAVAILABLE: &str = "database-unavailable";

/// Marks a response that says the database was unavailable (a response
/// extension), for the breaker in front of the routes.
#[derive(Debug, Clone, Copy)]
pub struct DatabaseUnavailable;

/// `Retry-After` of a 503 for an unreachable dependency: about what it takes
/// a pool to notice a database is back.
pub const RETRY_AFTER_SECS: u32 = 2;

#[derive(Serialize)]
struct Problem<'a> {
    #[serde(rename = "type")]
    kind: String,
    title: &'a str,
    status: u16,
    detail: &'a str,
    #[serde(skip_serializing_if = "Option::is_none")]
    field: Option<&'a str>,
}

impl ApiError {
    pub fn new(
        status: StatusCode,
        kind: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> ApiError {
        ApiError {
            status,
            kind,
            title,
            detail: detail.into(),
            field: None,
            retry_after: None,
            members: None,
        }
    }

    /// With the stream version the thing is at (a failed precondition's):
    /// the problem's `etag` member, and its `ETag` header.
    pub fn with_etag(mut self, version: u64) -> ApiError {
        self.members
            .get_or_insert_with(Default::default)
            .insert("etag".into(), format!("\"{version}\"").into());
        self
    }

    /// The version `with_etag` gave, if any.
    pub fn etag(&self) -> Option<u64> {
        let tag = self.members.as_ref()?.get("etag")?.as_str()?;
        tag.trim_matches('"').parse().ok()
    }

    pub fn with_field(mut self, field: impl Into<String>) -> ApiError {
        self.field = Some(field.into());
        self
    }

    pub fn unauthorized(detail: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::UNAUTHORIZED,
            "unauthorized",
            "Missing or invalid token",
            detail,
        )
    }

    /// 403: a route that names no namespace, for admin tokens only.
    pub fn forbidden(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::FORBIDDEN, "forbidden", "Forbidden", detail)
    }

    pub fn not_found(detail: impl Into<String>) -> ApiError {
        ApiError::new(StatusCode::NOT_FOUND, "not-found", "Not found", detail)
    }

    pub fn invalid(field: &str, detail: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::UNPROCESSABLE_ENTITY,
            "invalid-field",
            "Invalid request field",
            detail,
        )
        .with_field(field)
    }

    /// 501: a valid request for something sless does not do yet; `detail`
    /// says which issue brings it.
    pub fn not_implemented(detail: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::NOT_IMPLEMENTED,
            "not-implemented",
            "Not implemented",
            detail,
        )
    }

    pub fn method_not_allowed(detail: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::METHOD_NOT_ALLOWED,
            "method-not-allowed",
            "Method not allowed",
            detail,
        )
    }

    pub fn malformed(detail: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::BAD_REQUEST,
            "malformed-request",
            "Malformed request body",
            detail,
        )
    }

    pub fn internal(detail: impl Into<String>) -> ApiError {
        ApiError::new(
            StatusCode::INTERNAL_SERVER_ERROR,
            "internal",
            "Internal error",
            detail,
        )
    }

    /// 503: a dependency could not be reached or did not answer in time.
    pub fn unavailable(
        kind: &'static str,
        title: &'static str,
        detail: impl Into<String>,
    ) -> ApiError {
        ApiError {
            retry_after: Some(RETRY_AFTER_SECS),
            ..ApiError::new(StatusCode::SERVICE_UNAVAILABLE, kind, title, detail)
        }
    }

    /// 503: the database could not be reached or did not answer in time.
    pub fn database_unavailable(e: &sqlx::Error) -> ApiError {
        ApiError::unavailable(
            DATABASE_UNAVAILABLE,
            "Database unavailable",
            format!(
                "the database could not be reached or did not answer in time ({e}); retry later"
            ),
        )
    }

    pub fn body(&self) -> serde_json::Value {
        let mut body = serde_json::to_value(Problem {
            kind: format!("https://sless.dev/problems/{}", self.kind),
            title: self.title,
            status: self.status.as_u16(),
            detail: &self.detail,
            field: self.field.as_deref(),
        })
        .expect("problems serialize");
        if let (Some(object), Some(members)) = (body.as_object_mut(), &self.members) {
            for (name, value) in members.iter() {
                object.entry(name.clone()).or_insert_with(|| value.clone());
            }
        }
        body
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        if self.status == StatusCode::SERVICE_UNAVAILABLE {
            tracing::warn!(kind = self.kind, detail = %self.detail, "request failed: unavailable");
        } else if self.status.is_server_error() {
            tracing::error!(status = %self.status, detail = %self.detail, "request failed");
        }
        let mut res = (self.status, axum::Json(self.body())).into_response();
        res.headers_mut()
            .insert(header::CONTENT_TYPE, HeaderValue::from_static(PROBLEM_JSON));
        if self.kind == DATABASE_UNAVAILABLE {
            res.extensions_mut().insert(DatabaseUnavailable);
        }
        if let Some(secs) = self.retry_after {
            res.headers_mut()
                .insert(header::RETRY_AFTER, HeaderValue::from(secs));
        }
        if let Some(tag) = self.members.as_ref().and_then(|m| m.get("etag")?.as_str())
            && let Ok(tag) = HeaderValue::from_str(tag)
        {
            res.headers_mut().insert(header::ETAG, tag);
        }
        res
    }
}

impl From<DomainError> for ApiError {
    fn from(e: DomainError) -> ApiError {
        match e {
            DomainError::Invalid { field, detail } => ApiError::invalid(field, detail),
            DomainError::AlreadyExists(what) => ApiError::new(
                StatusCode::CONFLICT,
                "already-exists",
                "Already exists",
                format!("{what} already exists"),
            ),
            DomainError::NotFound(what) => ApiError::not_found(format!("{what} not found")),
            DomainError::Conflict(detail) => {
                ApiError::new(StatusCode::CONFLICT, "conflict", "Conflict", detail)
            }
        }
    }
}

impl From<ArchiveError> for ApiError {
    fn from(e: ArchiveError) -> ApiError {
        match e {
            ArchiveError::TooLarge { .. } => ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "archive-too-large",
                "Archive too large",
                e.to_string(),
            ),
            _ => ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "invalid-archive",
                "Invalid archive",
                e.to_string(),
            )
            .with_field("body"),
        }
    }
}

impl From<sless_store::Error> for ApiError {
    fn from(e: sless_store::Error) -> ApiError {
        match e {
            sless_store::Error::Conflict { .. } => ApiError::new(
                StatusCode::CONFLICT,
                VERSION_CONFLICT,
                "Concurrent change",
                format!("{e}; another request changed it first: read it again and retry"),
            ),
            sless_store::Error::Db(e) => ApiError::from(e),
            sless_store::Error::Blob(detail) => ApiError::unavailable(
                "blob-store-unavailable",
                "Blob store unavailable",
                format!("the blob store failed ({detail}); retry later"),
            ),
            other => ApiError::internal(other.to_string()),
        }
    }
}

impl From<axum::extract::rejection::BytesRejection> for ApiError {
    fn from(r: axum::extract::rejection::BytesRejection) -> ApiError {
        if r.status() == StatusCode::PAYLOAD_TOO_LARGE {
            ApiError::new(
                StatusCode::PAYLOAD_TOO_LARGE,
                "payload-too-large",
                "Request body too large",
                r.body_text(),
            )
        } else {
            ApiError::malformed(r.body_text())
        }
    }
}

/// A path segment that cannot be decoded (percent-encoded bytes that are
/// not UTF-8, say) names nothing that exists.
impl From<axum::extract::rejection::PathRejection> for ApiError {
    fn from(r: axum::extract::rejection::PathRejection) -> ApiError {
        ApiError::not_found(format!("no such resource: {}", r.body_text()))
    }
}

impl From<sqlx::Error> for ApiError {
    fn from(e: sqlx::Error) -> ApiError {
        if sless_store::is_unavailable(&e) {
            ApiError::database_unavailable(&e)
        } else {
            ApiError::internal(format!("database: {e}"))
        }
    }
}

pub type ApiResult<T> = Result<T, ApiError>;

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_unreachable_database_is_a_503_with_retry_after_marked_for_the_breaker() {
        for e in [
            sqlx::Error::PoolTimedOut,
            sqlx::Error::Io(std::io::Error::from(std::io::ErrorKind::ConnectionReset)),
        ] {
            let res = ApiError::from(sless_store::Error::Db(e)).into_response();
            assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
            assert_eq!(res.headers()[header::RETRY_AFTER], "2");
            assert_eq!(res.headers()[header::CONTENT_TYPE], PROBLEM_JSON);
            assert!(res.extensions().get::<DatabaseUnavailable>().is_some());
        }
    }

    #[test]
    fn a_failing_blob_store_is_a_503_but_not_the_databases_fault() {
        let res = ApiError::from(sless_store::Error::Blob("put x: timeout".into())).into_response();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(res.headers().contains_key(header::RETRY_AFTER));
        assert!(res.extensions().get::<DatabaseUnavailable>().is_none());
    }

    #[test]
    fn other_database_errors_stay_500s() {
        let e = ApiError::from(sqlx::Error::RowNotFound);
        assert_eq!(e.status, StatusCode::INTERNAL_SERVER_ERROR);
        assert_eq!(e.retry_after, None);
    }
}
