//! Sending one call: the headers every call carries, the retries, the
//! timeouts, and answers turned into documents or [`Error`]s.

use std::time::Duration;

use reqwest::header::{HeaderMap, HeaderValue};
use reqwest::{Method, Response, StatusCode};
use serde::Serialize;
use serde::de::DeserializeOwned;
use sless_api_types::Problem;

use crate::error::{ApiProblem, Error, Result};
use crate::{Client, Tagged};

/// What a call sends.
pub(crate) enum Body {
    Empty,
    Json(Vec<u8>),
    Bytes {
        bytes: bytes::Bytes,
        content_type: &'static str,
    },
    /// Bytes whose content type is among the call's headers.
    Raw(bytes::Bytes),
}

impl Body {
    pub(crate) fn json(value: &impl Serialize) -> Result<Body> {
        serde_json::to_vec(value)
            .map(Body::Json)
            .map_err(|e| Error::Invalid(format!("cannot encode the request: {e}")))
    }
}

/// One call, before it is sent.
pub(crate) struct Call<'a> {
    pub method: Method,
    /// A path on the API (`/v1/...`) or a whole URL (a function's).
    pub target: &'a str,
    pub query: Vec<(&'static str, String)>,
    pub headers: HeaderMap,
    pub body: Body,
    /// Whether the answer is a stream read for as long as the server
    /// sends it (no timeout for the whole answer).
    pub streaming: bool,
    /// Whether an error status is the caller's to see (the invoke of a
    /// function: its answer is the function's, whatever the status).
    pub any_status: bool,
}

impl<'a> Call<'a> {
    pub(crate) fn new(method: Method, target: &'a str) -> Call<'a> {
        Call {
            method,
            target,
            query: Vec::new(),
            headers: HeaderMap::new(),
            body: Body::Empty,
            streaming: false,
            any_status: false,
        }
    }

    pub(crate) fn get(target: &'a str) -> Call<'a> {
        Call::new(Method::GET, target)
    }

    pub(crate) fn query(mut self, name: &'static str, value: impl ToString) -> Call<'a> {
        self.query.push((name, value.to_string()));
        self
    }

    pub(crate) fn query_opt(self, name: &'static str, value: Option<impl ToString>) -> Call<'a> {
        match value {
            Some(v) => self.query(name, v),
            None => self,
        }
    }

    pub(crate) fn body(mut self, body: Body) -> Call<'a> {
        self.body = body;
        self
    }
}

impl Client {
    /// `/v1/namespaces/{ns}{rest}`.
    pub(crate) fn in_namespace(&self, rest: &str) -> String {
        format!("/v1/namespaces/{}{rest}", self.inner.namespace)
    }

    /// Sends a call, trying again as the crate's doc says, and answers
    /// the response of a success (or of any status, for `any_status`).
    pub(crate) async fn send(&self, call: Call<'_>) -> Result<Response> {
        let url = if call.target.starts_with("http://") || call.target.starts_with("https://") {
            call.target.to_owned()
        } else {
            format!("{}{}", self.inner.endpoint, call.target)
        };
        let is_get = call.method == Method::GET || call.method == Method::HEAD;
        let command = !is_get && call.target.starts_with("/v1/");
        let mut headers = call.headers;
        if let Some(token) = &self.inner.token
            && !call.any_status
        {
            let value = HeaderValue::from_str(&format!("Bearer {token}"))
                .map_err(|_| Error::Invalid("the token holds characters a header cannot".into()))?;
            headers.insert(reqwest::header::AUTHORIZATION, value);
        }
        if command {
            // One key for every try: a retry is answered as the first was.
            let key = self
                .once
                .idempotency_key
                .clone()
                .unwrap_or_else(|| uuid::Uuid::new_v4().to_string());
            headers.insert(
                "idempotency-key",
                HeaderValue::from_str(&key)
                    .map_err(|_| Error::Invalid(format!("{key:?} cannot be an Idempotency-Key")))?,
            );
            if let Some(tag) = &self.once.if_match {
                headers.insert(
                    reqwest::header::IF_MATCH,
                    HeaderValue::from_str(tag).expect("a quoted number is a header value"),
                );
            }
        }
        let mut attempt = 0;
        loop {
            let mut request = self
                .inner
                .http
                .request(call.method.clone(), &url)
                .headers(headers.clone());
            if !call.query.is_empty() {
                request = request.query(&call.query);
            }
            if !call.streaming {
                request = request.timeout(self.inner.timeout);
            }
            request = match &call.body {
                Body::Empty => request,
                Body::Json(bytes) => request
                    .header(reqwest::header::CONTENT_TYPE, "application/json")
                    .body(bytes.clone()),
                Body::Bytes {
                    bytes,
                    content_type,
                } => request
                    .header(reqwest::header::CONTENT_TYPE, *content_type)
                    .body(bytes.clone()),
                Body::Raw(bytes) => request.body(bytes.clone()),
            };
            let retry = attempt < self.inner.retries;
            attempt += 1;
            match request.send().await {
                Ok(response) if call.any_status || response.status().is_success() => {
                    return Ok(response);
                }
                Ok(response) => {
                    let status = response.status();
                    if retry && is_get && status.is_server_error() {
                        let wait = retry_after(&response).unwrap_or(self.pause(attempt));
                        tokio::time::sleep(wait.min(Duration::from_secs(5))).await;
                        continue;
                    }
                    return Err(problem_of(response).await);
                }
                Err(e) if e.is_timeout() => {
                    // A command that timed out may have been applied; its
                    // retry with the same key would say so, but the wait
                    // was the caller's whole budget.
                    if retry && is_get {
                        continue;
                    }
                    return Err(Error::Timeout {
                        endpoint: self.inner.endpoint.clone(),
                        seconds: self.inner.timeout.as_secs(),
                    });
                }
                Err(e) if e.is_connect() || e.is_request() => {
                    if retry {
                        tokio::time::sleep(self.pause(attempt)).await;
                        continue;
                    }
                    return Err(Error::Connect {
                        endpoint: origin_of(&url),
                        message: root_cause(&e),
                    });
                }
                Err(e) => {
                    return Err(Error::Decode {
                        endpoint: origin_of(&url),
                        message: root_cause(&e),
                    });
                }
            }
        }
    }

    fn pause(&self, attempt: u32) -> Duration {
        let factor = 1u32 << attempt.saturating_sub(1).min(5);
        (self.inner.backoff * factor).min(Duration::from_secs(2))
    }

    /// Sends a call and reads its JSON answer.
    pub(crate) async fn json<T: DeserializeOwned>(&self, call: Call<'_>) -> Result<T> {
        Ok(self.tagged(call).await?.doc)
    }

    /// Sends a call and reads its JSON answer with its `ETag`.
    pub(crate) async fn tagged<T: DeserializeOwned>(&self, call: Call<'_>) -> Result<Tagged<T>> {
        let response = self.send(call).await?;
        let stream_version = etag_version(response.headers());
        let endpoint = origin_of(response.url().as_str());
        let bytes = response.bytes().await.map_err(|e| Error::Connect {
            endpoint: endpoint.clone(),
            message: root_cause(&e),
        })?;
        let doc = serde_json::from_slice(&bytes).map_err(|e| Error::Decode {
            endpoint,
            message: format!("the document does not read: {e}"),
        })?;
        Ok(Tagged {
            doc,
            stream_version,
        })
    }

    /// Sends a call and reads its answer's bytes.
    pub(crate) async fn bytes(&self, call: Call<'_>) -> Result<bytes::Bytes> {
        let response = self.send(call).await?;
        let endpoint = origin_of(response.url().as_str());
        response.bytes().await.map_err(|e| Error::Connect {
            endpoint,
            message: root_cause(&e),
        })
    }
}

/// The stream version in an `ETag: "7"`.
fn etag_version(headers: &HeaderMap) -> Option<u64> {
    let tag = headers.get(reqwest::header::ETAG)?.to_str().ok()?;
    tag.trim_matches('"').parse().ok()
}

fn retry_after(response: &Response) -> Option<Duration> {
    let v = response.headers().get(reqwest::header::RETRY_AFTER)?;
    v.to_str()
        .ok()?
        .trim()
        .parse()
        .ok()
        .map(Duration::from_secs)
}

/// The error of an answer with an error status.
pub(crate) async fn problem_of(response: Response) -> Error {
    let status = response.status();
    let headers = response.headers().clone();
    let etag = headers
        .get(reqwest::header::ETAG)
        .and_then(|v| v.to_str().ok())
        .map(str::to_owned);
    let retry_after = headers
        .get(reqwest::header::RETRY_AFTER)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.trim().parse().ok());
    let bytes = response.bytes().await.unwrap_or_default();
    let document: Option<Problem> = serde_json::from_slice(&bytes).ok();
    let problem = match document {
        Some(p) => ApiProblem {
            status: status.as_u16(),
            type_url: p.kind.clone(),
            title: p.title.clone(),
            detail: p.detail.clone(),
            field: p.field.clone(),
            etag,
            retry_after,
            document: Some(p),
        },
        None => {
            let text = String::from_utf8_lossy(&bytes);
            let text = text.trim();
            let reason = status.canonical_reason().unwrap_or("error");
            ApiProblem {
                status: status.as_u16(),
                type_url: kind_of_status(status).into(),
                title: reason.into(),
                detail: if text.is_empty() {
                    format!("{} {reason}", status.as_u16())
                } else {
                    text.chars().take(500).collect()
                },
                field: None,
                etag,
                retry_after,
                document: None,
            }
        }
    };
    Error::Api(Box::new(problem))
}

/// A kind for an error answer that came without a document.
fn kind_of_status(status: StatusCode) -> &'static str {
    match status.as_u16() {
        401 => "unauthorized",
        403 => "forbidden",
        404 => "not-found",
        409 => "conflict",
        412 => "precondition-failed",
        _ if status.is_server_error() => "server-error",
        _ => "client-error",
    }
}

/// `scheme://host:port` of a URL.
pub(crate) fn origin_of(url: &str) -> String {
    match reqwest::Url::parse(url) {
        Ok(u) => match u.port() {
            Some(port) => format!("{}://{}:{port}", u.scheme(), u.host_str().unwrap_or("")),
            None => format!("{}://{}", u.scheme(), u.host_str().unwrap_or("")),
        },
        Err(_) => url.to_owned(),
    }
}

/// The innermost cause of an error: what went wrong, without the
/// layers that each say "error sending request".
pub(crate) fn root_cause(e: &(dyn std::error::Error + 'static)) -> String {
    let mut cause = e;
    while let Some(next) = cause.source() {
        cause = next;
    }
    cause.to_string()
}
