//! Both bodies of a call as they stream: counted (`Meter`), the request's
//! cut off past its limit (`Inbound`), and the answer's bounded, which
//! records the call when it ends (`Outbound`).
//!
//! The answer's body is bounded twice (`Bounds`): the whole call, head and
//! body, ends at the function's `timeout_sec` from its start, and a gap of
//! more than `ProxyLimits::idle_timeout` between two pieces of the body
//! ends it too. Ended so, the body stops with an error: the server closes
//! the caller's connection (a chunked answer lacks its last chunk, a sized
//! one its last bytes, so the caller can tell it was cut short), the
//! function's connection is dropped, and the record says why.

use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::BoxError;
use axum::body::{Body, Bytes, HttpBody};
use hyper::body::{Frame, SizeHint};

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
}

/// What is told once an answer's body ended: its status, the bytes sent,
/// and why it failed, if it did (a call, which records itself).
pub(super) trait Ends {
    fn ended(self, status: u16, sent: u64, failure: Option<Failure>);
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
                            super::admission::body_too_large(self.limit).detail,
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

/// The request body on its way to a function, which can be taken back
/// while none of it has been read ([`Reclaim`]): a request whose
/// connection was refused never reached the function, and goes whole to
/// an instance that serves.
pub(super) struct Unsent {
    slot: Arc<Mutex<Option<Body>>>,
    taken: Option<Body>,
    hint: SizeHint,
    end: bool,
}

/// Takes back the body of an [`Unsent`] that was never read.
pub(super) struct Reclaim(Arc<Mutex<Option<Body>>>);

impl Unsent {
    pub(super) fn new(body: Body) -> (Unsent, Reclaim) {
        let (hint, end) = (body.size_hint(), body.is_end_stream());
        let slot = Arc::new(Mutex::new(Some(body)));
        let unsent = Unsent {
            slot: slot.clone(),
            taken: None,
            hint,
            end,
        };
        (unsent, Reclaim(slot))
    }
}

impl Reclaim {
    /// The body, unless the request began to send it.
    pub(super) fn take(&self) -> Option<Body> {
        self.0.lock().unwrap().take()
    }
}

impl HttpBody for Unsent {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        if self.taken.is_none() {
            let taken = self.slot.lock().unwrap().take();
            self.taken = taken;
        }
        match &mut self.taken {
            Some(body) => Pin::new(body).poll_frame(cx),
            None => Poll::Ready(None),
        }
    }

    fn is_end_stream(&self) -> bool {
        match &self.taken {
            Some(body) => body.is_end_stream(),
            None => self.end,
        }
    }

    fn size_hint(&self) -> SizeHint {
        match &self.taken {
            Some(body) => body.size_hint(),
            None => self.hint,
        }
    }
}

/// How long an answer's body may take: in all (the call's deadline), and
/// between two of its pieces.
#[derive(Debug, Clone, Copy)]
pub(super) struct Bounds {
    /// When the call passes the function's `timeout_sec`.
    pub(super) deadline: tokio::time::Instant,
    pub(super) timeout: Duration,
    pub(super) idle: Duration,
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
pub(super) struct Outbound<B: HttpBody, E: Ends> {
    inner: B,
    sent: u64,
    status: u16,
    failure: Option<Failure>,
    call: Option<E>,
    /// None for an answer of ours (a problem document), which is whole.
    bounds: Option<Bounds>,
    /// Made the first time the body has to wait.
    timer: Option<Timer>,
}

impl<B: HttpBody, E: Ends> Outbound<B, E> {
    pub(super) fn new(
        inner: B,
        call: E,
        status: u16,
        failure: Option<Failure>,
        bounds: Option<Bounds>,
    ) -> Outbound<B, E> {
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
            call.ended(self.status, self.sent, failure);
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

impl<B, E> HttpBody for Outbound<B, E>
where
    B: HttpBody<Data = Bytes> + Unpin,
    E: Ends + Unpin,
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

impl<B: HttpBody, E: Ends> Drop for Outbound<B, E> {
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
