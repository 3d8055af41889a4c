//! A typed client of the sless REST API (`Client`), and the deterministic
//! packaging of a function's directory into the zip it uploads
//! (`package`).
//!
//! Every call answers the API's own documents (`sless_api_types`, the
//! types the API writes) or one [`Error`], whose API variant is the
//! problem document the API answered. Calls are made with:
//! - an `Idempotency-Key` on every command (POST, PUT, PATCH, DELETE),
//!   the same across the client's own retries, so a retried command is
//!   answered as the first try was and never applied twice;
//! - retries with backoff when no answer came (the connection was refused
//!   or broke), for every call; a GET is also retried on a 5xx answer,
//!   after its `Retry-After` when it has one;
//! - a timeout per call (`Config::timeout`), except the streams (the
//!   audit log's tail, a followed build log and a function's followed
//!   log, `logs`), which end when the server ends them.
//!
//! A list call (`list_functions`, `list_triggers`, `list_versions`,
//! `list_jobs`)
//! answers the whole list, following the API's pages; its `_page` variant
//! reads one page (`PageQuery`).
//!
//! `If-Match` and a caller's own idempotency key are set for one call
//! with [`Client::if_match`] and [`Client::idempotency_key`], which give a
//! copy of the client with that option:
//! `client.if_match(7).update_function("hello", &change)`.

pub mod error;
pub mod package;
pub mod rollout;

mod events;
mod functions;
mod http;
mod jobs;
mod logs;
mod meta;
mod pages;
mod sse;
mod triggers;

use std::ops::Deref;
use std::sync::Arc;
use std::time::Duration;

pub use error::{ApiProblem, Error, Result};
pub use events::{EventFilter, EventStream};
pub use functions::{BuildLogEvent, BuildLogStream, Invoke, Invoked};
pub use logs::{LogQuery, LogStream};
pub use pages::PageQuery;
pub use sless_api_types as types;
pub use sless_api_types::{
    CreateFunction, CreateJob, CreateTrigger, PatchTrigger, Rollback, UpdateFunction,
};

/// How to reach an API, and how patiently.
#[derive(Debug, Clone)]
pub struct Config {
    /// The API's base URL (`http://127.0.0.1:8080`), without `/v1`.
    pub endpoint: String,
    /// A bearer token; `None` for the routes that need none.
    pub token: Option<String>,
    /// The namespace to act in; `None`: the token's own
    /// (`sless-` + the first 8 bytes of sha256 of its `sub`, in hex).
    pub namespace: Option<String>,
    /// How long one try of a call may take, answer included.
    pub timeout: Duration,
    /// How long making a connection may take.
    pub connect_timeout: Duration,
    /// How many times a call is tried again (see the crate's doc).
    pub retries: u32,
    /// The first pause between tries; it doubles each time, to at most 2 s.
    pub backoff: Duration,
}

impl Config {
    pub fn new(endpoint: impl Into<String>, token: Option<String>) -> Config {
        Config {
            endpoint: endpoint.into(),
            token,
            namespace: None,
            timeout: Duration::from_secs(60),
            connect_timeout: Duration::from_secs(5),
            retries: 3,
            backoff: Duration::from_millis(100),
        }
    }
}

/// A client of one API, as one token. Cheap to clone.
#[derive(Clone)]
pub struct Client {
    inner: Arc<Inner>,
    /// Options for the next call only.
    once: Once,
}

struct Inner {
    http: reqwest::Client,
    endpoint: String,
    token: Option<String>,
    namespace: String,
    timeout: Duration,
    retries: u32,
    backoff: Duration,
}

#[derive(Clone, Default)]
struct Once {
    idempotency_key: Option<String>,
    if_match: Option<String>,
}

impl Client {
    /// A client with the default timeouts and retries.
    pub fn new(endpoint: impl Into<String>, token: impl Into<String>) -> Result<Client> {
        Client::with_config(Config::new(endpoint, Some(token.into())))
    }

    pub fn with_config(config: Config) -> Result<Client> {
        let endpoint = config.endpoint.trim_end_matches('/').to_owned();
        if !(endpoint.starts_with("http://") || endpoint.starts_with("https://")) {
            return Err(Error::Invalid(format!(
                "the endpoint {endpoint:?} is not an http:// or https:// URL"
            )));
        }
        let namespace = match (&config.namespace, &config.token) {
            (Some(ns), _) => sless_domain::Namespace::parse(ns)
                .map_err(|_| Error::Invalid(format!("{ns:?} is not a namespace name")))?
                .to_string(),
            (None, Some(token)) => namespace_of_token(token)?,
            (None, None) => String::new(),
        };
        let http = reqwest::Client::builder()
            .connect_timeout(config.connect_timeout)
            .user_agent(concat!("sless-client/", env!("CARGO_PKG_VERSION")))
            .build()
            .map_err(|e| Error::Invalid(format!("cannot make an HTTP client: {e}")))?;
        Ok(Client {
            inner: Arc::new(Inner {
                http,
                endpoint,
                token: config.token,
                namespace,
                timeout: config.timeout,
                retries: config.retries,
                backoff: config.backoff,
            }),
            once: Once::default(),
        })
    }

    /// The API's base URL.
    pub fn endpoint(&self) -> &str {
        &self.inner.endpoint
    }

    /// The namespace calls act in.
    pub fn namespace(&self) -> &str {
        &self.inner.namespace
    }

    /// A copy whose next command sends `If-Match: "<version>"`: the
    /// command is refused (412 `precondition-failed`, with the current
    /// version) unless its aggregate is at that version.
    pub fn if_match(&self, version: u64) -> Client {
        let mut c = self.clone();
        c.once.if_match = Some(format!("\"{version}\""));
        c
    }

    /// A copy whose commands send this `Idempotency-Key` (by default each
    /// command gets a new random one).
    pub fn idempotency_key(&self, key: impl Into<String>) -> Client {
        let mut c = self.clone();
        c.once.idempotency_key = Some(key.into());
        c
    }
}

/// A document with the version of its aggregate's stream (its `ETag`),
/// what `If-Match` takes.
#[derive(Debug, Clone)]
pub struct Tagged<T> {
    pub doc: T,
    /// The stream version the answer carried (its `ETag`), if it carried one.
    pub stream_version: Option<u64>,
}

impl<T> Deref for Tagged<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.doc
    }
}

/// The namespace a token acts in: from its `sub`, as the API computes it.
/// The token is not verified here (the API does that).
pub fn namespace_of_token(token: &str) -> Result<String> {
    use base64::Engine;
    let bad = || {
        Error::Invalid(
            "the token is not a JWT (three base64url parts, a JSON payload with a \"sub\")".into(),
        )
    };
    let payload = token.split('.').nth(1).ok_or_else(bad)?;
    let bytes = base64::engine::general_purpose::URL_SAFE_NO_PAD
        .decode(payload.trim_end_matches('='))
        .map_err(|_| bad())?;
    let claims: serde_json::Value = serde_json::from_slice(&bytes).map_err(|_| bad())?;
    let sub = claims.get("sub").and_then(|s| s.as_str()).ok_or_else(bad)?;
    Ok(sless_domain::Namespace::for_subject(sub).to_string())
}
