//! One call through the proxy: both bodies as they stream, the bounds on
//! the answer's, and the call's invocation record.
//!
//! The answer's body is bounded twice (`Bounds`): the whole call, head and
//! body, ends at the function's `timeout_sec` from its start, and a gap of
//! more than `ProxyLimits::idle_timeout` between two pieces of the body
//! ends it too. Ended so, the body stops with an error: the server closes
//! the caller's connection (a chunked answer lacks its last chunk, a sized
//! one its last bytes, so the caller can tell it was cut short), the
//! function's connection is dropped, and the record says why.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::{Duration, Instant};

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use hyper::body::{Frame, SizeHint};
use sless_store::invocations::{Invocation, id_for};

use crate::error::ApiError;
use crate::invocations::Recorder;

/// Why a call failed: the detail and the short kind its record keeps.
#[derive(Debug, Clone)]
pub struct Failure {
    pub detail: String,
    pub kind: &'static str,
}

impl Failure {
    pub fn new(kind: &'static str, detail: impl Into<String>) -> Failure {
        Failure {
            detail: detail.into(),
            kind,
        }
    }

    /// The failure a problem answer stands for: its kind shortened (`oom`
    /// for a function killed for memory).
    fn of(e: &ApiError) -> Failure {
        let kind = match e.kind {
            crate::crashes::OUT_OF_MEMORY => "oom",
            crate::crashes::CRASHED => "crashed",
            other => other.strip_prefix("function-").unwrap_or(other),
        };
        Failure::new(kind, e.detail.clone())
    }
}

/// What a call's bodies counted while they streamed.
#[derive(Default)]
pub struct Meter {
    pub bytes_in: AtomicU64,
    /// The request body went past the limit.
    pub too_large: AtomicBool,
    /// The request body could not be read: its framing is broken (a bad
    /// chunk size), or the caller went away in the middle of it.
    pub unreadable: AtomicBool,
}

/// The request body, counted, and cut off with an error once it passes the
/// limit (the bytes past it are never forwarded).
pub struct Inbound {
    pub inner: Body,
    pub limit: u64,
    pub meter: Arc<Meter>,
}

impl HttpBody for Inbound {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        match &polled {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    let n = data.len() as u64;
                    let total = self.meter.bytes_in.fetch_add(n, Ordering::Relaxed) + n;
                    if total > self.limit {
                        self.meter.too_large.store(true, Ordering::Relaxed);
                        return Poll::Ready(Some(Err(axum::Error::new(
                            super::body_too_large(self.limit).detail,
                        ))));
                    }
                }
            }
            Poll::Ready(Some(Err(_))) => self.meter.unreadable.store(true, Ordering::Relaxed),
            _ => {}
        }
        polled
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

/// One call to an existing function, to be recorded once it is answered.
pub struct Call {
    pub recorder: Recorder,
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
        let (parts, body) = res.into_parts();
        let status = parts.status.as_u16();
        let body = Outbound::new(body, self, status, None, Some(bounds));
        Response::from_parts(parts, Body::new(body))
    }

    /// A problem instead of the function's answer, recorded likewise.
    pub fn refuse(self, e: ApiError) -> Response {
        let failure = Failure::of(&e);
        let (parts, body) = e.into_response().into_parts();
        let status = parts.status.as_u16();
        let body = Outbound::new(body, self, status, Some(failure), None);
        Response::from_parts(parts, Body::new(body))
    }

    fn record(self, status: u16, bytes_out: u64, failure: Option<Failure>) {
        let (error, error_kind) = match failure {
            Some(f) => (Some(f.detail), Some(f.kind.to_owned())),
            None => (None, None),
        };
        let record = Invocation {
            id: id_for(self.started_at),
            namespace: self.namespace,
            function: self.function,
            version: self.version,
            started_at: self.started_at,
            duration: self.started.elapsed(),
            status,
            bytes_in: self.meter.bytes_in.load(Ordering::Relaxed),
            bytes_out,
            cold: self.cold,
            error,
            error_kind,
            request_id: self.request_id,
            origin: "http".into(),
            run: None,
        };
        self.recorder.record(record);
    }
}

/// How long an answer's body may take: in all (the call's deadline), and
/// between two of its pieces.
#[derive(Debug, Clone, Copy)]
struct Bounds {
    /// When the call passes the function's `timeout_sec`.
    deadline: tokio::time::Instant,
    timeout: Duration,
    idle: Duration,
}

/// The timer of a body that had to wait: one sleep, set to whichever of
/// the two bounds comes first.
struct Timer {
    bounds: Bounds,
    last_piece: tokio::time::Instant,
    sleep: Pin<Box<tokio::time::Sleep>>,
}

impl Timer {
    fn next_wake(&self) -> tokio::time::Instant {
        self.bounds.deadline.min(self.last_piece + self.bounds.idle)
    }

    /// Ready with the failure once a bound has passed.
    fn poll_passed(&mut self, cx: &mut Context<'_>, sent: u64) -> Poll<Failure> {
        loop {
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            let now = tokio::time::Instant::now();
            if now >= self.bounds.deadline {
                return Poll::Ready(Failure::new(
                    "timeout",
                    format!(
                        "the answer was cut short after {sent} bytes: the call passed the function's timeout of {}s",
                        self.bounds.timeout.as_secs()
                    ),
                ));
            }
            if now >= self.last_piece + self.bounds.idle {
                return Poll::Ready(Failure::new(
                    "stalled",
                    format!(
                        "the answer was cut short after {sent} bytes: the function sent nothing more for {}s",
                        self.bounds.idle.as_secs_f64()
                    ),
                ));
            }
            let wake = self.next_wake();
            self.sleep.as_mut().reset(wake);
        }
    }
}

/// The answer's body, counted and bounded; records the call when it ends,
/// fails, is cut short, or is dropped unfinished (the client went away).
struct Outbound<B: HttpBody> {
    inner: B,
    sent: u64,
    status: u16,
    failure: Option<Failure>,
    call: Option<Call>,
    /// None for an answer of ours (a problem document), which is whole.
    bounds: Option<Bounds>,
    /// Made the first time the body has to wait.
    timer: Option<Timer>,
}

impl<B: HttpBody> Outbound<B> {
    fn new(
        inner: B,
        call: Call,
        status: u16,
        failure: Option<Failure>,
        bounds: Option<Bounds>,
    ) -> Outbound<B> {
        Outbound {
            inner,
            sent: 0,
            status,
            failure,
            call: Some(call),
            bounds,
            timer: None,
        }
    }

    fn finish(&mut self, failure: Option<Failure>) {
        if let Some(call) = self.call.take() {
            let failure = self.failure.take().or(failure);
            call.record(self.status, self.sent, failure);
        }
    }

    /// Pending, or the failure once the body waited past a bound.
    fn poll_bounds(&mut self, cx: &mut Context<'_>) -> Poll<Failure> {
        let Some(bounds) = self.bounds else {
            return Poll::Pending;
        };
        let timer = self.timer.get_or_insert_with(|| {
            let last_piece = tokio::time::Instant::now();
            let wake = bounds.deadline.min(last_piece + bounds.idle);
            Timer {
                bounds,
                last_piece,
                sleep: Box::pin(tokio::time::sleep_until(wake)),
            }
        });
        timer.poll_passed(cx, self.sent)
    }
}

impl<B> HttpBody for Outbound<B>
where
    B: HttpBody<Data = Bytes> + Unpin,
    B::Error: Into<BoxError>,
{
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        match Pin::new(&mut self.inner).poll_frame(cx) {
            Poll::Ready(Some(Ok(frame))) => {
                if let Some(data) = frame.data_ref() {
                    self.sent += data.len() as u64;
                }
                if let Some(timer) = self.timer.as_mut() {
                    timer.last_piece = tokio::time::Instant::now();
                }
                if self.inner.is_end_stream() {
                    self.finish(None);
                }
                Poll::Ready(Some(Ok(frame)))
            }
            Poll::Ready(Some(Err(e))) => {
                let e: BoxError = e.into();
                let detail = format!(
                    "the answer was cut short after {} bytes: the function's connection broke off ({e})",
                    self.sent
                );
                self.finish(Some(Failure::new("broken", detail)));
                Poll::Ready(Some(Err(e)))
            }
            Poll::Ready(None) => {
                self.finish(None);
                Poll::Ready(None)
            }
            Poll::Pending => match self.poll_bounds(cx) {
                Poll::Pending => Poll::Pending,
                Poll::Ready(failure) => {
                    let e: BoxError = failure.detail.clone().into();
                    self.finish(Some(failure));
                    self.bounds = None; // what follows is never polled
                    Poll::Ready(Some(Err(e)))
                }
            },
        }
    }

    fn is_end_stream(&self) -> bool {
        self.inner.is_end_stream()
    }

    fn size_hint(&self) -> SizeHint {
        self.inner.size_hint()
    }
}

impl<B: HttpBody> Drop for Outbound<B> {
    fn drop(&mut self) {
        if self.call.is_some() {
            // Dropped before its end was read: fine when there was nothing
            // left to read (a HEAD, a 204), else the client went away.
            let failure = (!self.inner.is_end_stream()).then(|| {
                let detail = format!(
                    "the client went away after {} bytes of the answer",
                    self.sent
                );
                Failure::new("client-gone", detail)
            });
            self.finish(failure);
        }
    }
}
