//! What a call can fail with: one typed error, whose API variant is the
//! problem document (RFC 9457) the API answered.

use std::fmt;

use sless_api_types::Problem;

/// The error of every call of the client.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// The API answered with a problem document (or, from something in
    /// front of it, with an error status and no document).
    #[error("{0}")]
    Api(Box<ApiProblem>),
    /// No connection could be made, or it broke before an answer came.
    #[error("cannot reach {endpoint}: {message}")]
    Connect { endpoint: String, message: String },
    /// No answer within the client's timeout.
    #[error("{endpoint} did not answer within {seconds} s")]
    Timeout { endpoint: String, seconds: u64 },
    /// An answer that is not what the API documents.
    #[error("unexpected answer from {endpoint}: {message}")]
    Decode { endpoint: String, message: String },
    /// A call the client refuses before sending anything (a bad argument).
    #[error("{0}")]
    Invalid(String),
}

impl Error {
    /// The HTTP status of an API error.
    pub fn status(&self) -> Option<u16> {
        match self {
            Error::Api(p) => Some(p.status),
            _ => None,
        }
    }

    /// The problem document of an API error.
    pub fn problem(&self) -> Option<&ApiProblem> {
        match self {
            Error::Api(p) => Some(p),
            _ => None,
        }
    }

    /// True for an API error of this kind (`not-found`, `conflict`, ...:
    /// the last segment of the problem's `type`).
    pub fn is(&self, kind: &str) -> bool {
        self.problem().is_some_and(|p| p.kind() == kind)
    }

    /// True for a 404.
    pub fn is_not_found(&self) -> bool {
        self.status() == Some(404)
    }
}

/// A problem document, with the status it came with.
#[derive(Debug, Clone)]
pub struct ApiProblem {
    pub status: u16,
    /// `https://sless.dev/problems/{kind}`.
    pub type_url: String,
    pub title: String,
    pub detail: String,
    /// The request's field at fault, when one is.
    pub field: Option<String>,
    /// The `ETag` of the answer (a failed precondition carries the
    /// current one).
    pub etag: Option<String>,
    /// Seconds after which a retry may succeed (`Retry-After`).
    pub retry_after: Option<u64>,
    /// The whole document, when there was one.
    pub document: Option<Problem>,
}

impl ApiProblem {
    /// The kind: the last segment of `type` (`not-found`, `invalid-field`).
    pub fn kind(&self) -> &str {
        self.type_url.rsplit('/').next().unwrap_or(&self.type_url)
    }
}

impl fmt::Display for ApiProblem {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let detail = if self.detail.is_empty() {
            &self.title
        } else {
            &self.detail
        };
        write!(f, "{detail}")?;
        if let Some(field) = &self.field
            && !detail.contains(field.as_str())
        {
            write!(f, " (field {field})")?;
        }
        write!(f, " [{} {}]", self.status, self.kind())
    }
}

pub type Result<T, E = Error> = std::result::Result<T, E>;
