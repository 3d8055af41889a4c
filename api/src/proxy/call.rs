//! One call through the proxy and its invocation record: the function and
//! version it reached, when it started and how long it took, the status
//! and bytes each way, whether it was cold, and why it failed
//! (`body::Failure`),
//! recorded once its answer has been sent or abandoned (`body::Outbound`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use sless_store::invocations::Invocation;

use super::body::{Bounds, Ends, Failure, Meter, Outbound};
use crate::plumbing::error::ApiError;
use crate::plumbing::recorder::Recorder;

/// The failure a problem answer stands for: its kind shortened (`oom` for
/// a function killed for memory).
fn failure_of(e: &ApiError) -> Failure {
    let kind = match e.kind {
        crate::proxy::crashes::OUT_OF_MEMORY => "oom",
        crate::proxy::crashes::CRASHED => "crashed",
        other => other.strip_prefix("function-").unwrap_or(other),
    };
    Failure::new(kind, e.detail.clone())
}

/// The header that carries a call's invocation record id: to the function
/// (whose runtime wrapper marks what the call prints with it) and back to
/// the caller. A caller's own is replaced.
pub const INVOCATION_ID: axum::http::HeaderName =
    axum::http::HeaderName::from_static("sless-invocation-id");

/// One call to an existing function, to be recorded once it is answered.
pub struct Call {
    /// Its invocation record's id (`id_for(started_at)`), which the
    /// function gets as `Sless-Invocation-Id` (and marks what it prints
    /// with) and the caller gets back.
    pub id: uuid::Uuid,
    pub recorder: Recorder,
    pub metrics: Arc<sless_telemetry::Metrics>,
    pub meter: Arc<Meter>,
    pub started: Instant,
    pub started_at: DateTime<Utc>,
    pub namespace: String,
    pub function: String,
    pub version: Option<u32>,
    /// The function's `timeout_sec`, which bounds the whole call.
    pub timeout: Duration,
    pub cold: bool,
    pub request_id: String,
    /// What was asked: the method, and the path below the function.
    pub method: String,
    pub path: String,
    /// Held for an instance of a function scaled to zero: for how long,
    /// and how long the worker took to start it.
    pub activation: Option<(Duration, Option<Duration>)>,
    /// Counts the call in flight until it is recorded or abandoned.
    pub _calling: super::load::Calling,
    /// Its place at an instance, until it is recorded or abandoned.
    pub slot: Option<super::spread::Slot>,
}

impl Call {
    /// The function's answer, streamed back within its bounds (the call's
    /// timeout from its start, and `idle` between two pieces of the body)
    /// and recorded when it is sent.
    pub fn answer<B>(self, res: axum::http::Response<B>, idle: Duration) -> Response
    where
        B: HttpBody<Data = Bytes> + Send + Unpin + 'static,
        B::Error: Into<BoxError>,
    {
        let bounds = Bounds {
            deadline: tokio::time::Instant::from_std(self.started + self.timeout),
            timeout: self.timeout,
            idle,
        };
        let (mut parts, body) = res.into_parts();
        self.identify(&mut parts.headers);
        let status = parts.status.as_u16();
        let body = Outbound::new(body, self, status, None, Some(bounds));
        Response::from_parts(parts, Body::new(body))
    }

    /// A problem instead of the function's answer, recorded likewise.
    pub fn refuse(self, e: ApiError) -> Response {
        let failure = failure_of(&e);
        let (mut parts, body) = e.into_response().into_parts();
        self.identify(&mut parts.headers);
        let status = parts.status.as_u16();
        let body = Outbound::new(body, self, status, Some(failure), None);
        Response::from_parts(parts, Body::new(body))
    }

    /// Tells the caller which record (and which lines) the call has.
    fn identify(&self, headers: &mut axum::http::HeaderMap) {
        if let Ok(v) = axum::http::HeaderValue::from_str(&self.id.to_string()) {
            headers.insert(INVOCATION_ID, v);
        }
    }

    fn record(self, status: u16, bytes_out: u64, failure: Option<Failure>) {
        let duration = self.started.elapsed();
        self.metrics.invocation(
            &self.namespace,
            &self.function,
            status,
            "http",
            duration.as_secs_f64(),
            self.cold,
        );
        // The proxy's own answers (the function's are never a `Failure`).
        if failure.is_some() && matches!(status, 413 | 502 | 503 | 504) {
            self.metrics
                .proxy_errors
                .get_or_create(&sless_telemetry::StatusLabels { status })
                .inc();
        }
        let (error, error_kind) = match failure {
            Some(f) => (Some(f.detail), Some(f.kind.to_owned())),
            None => (None, None),
        };
        let record = Invocation {
            id: self.id,
            namespace: self.namespace,
            function: self.function,
            version: self.version,
            started_at: self.started_at,
            duration,
            status,
            bytes_in: self.meter.bytes_in.load(Ordering::Relaxed),
            bytes_out,
            cold: self.cold,
            error,
            error_kind,
            request_id: self.request_id,
            origin: "http".into(),
            run: None,
            method: Some(self.method),
            path: Some(self.path),
            activation: self.activation.map(|(held, _)| held),
            instance_start: self.activation.and_then(|(_, start)| start),
        };
        self.recorder.record(record);
    }
}

/// A call is recorded once its answer's body ended.
impl Ends for Call {
    fn ended(self, status: u16, sent: u64, failure: Option<Failure>) {
        self.record(status, sent, failure);
    }
}
