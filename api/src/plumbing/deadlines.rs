//! Deadlines: every request of the JSON API is answered within one,
//! counted from when its body has arrived (`Deadlines`, applied per route
//! by `within_deadline`), so a database or blob store that stops answering
//! turns into a 503, never into a request that hangs. An upload's deadline
//! moves on while it progresses (`while_progressing`): a slow upload that
//! keeps going is not cut short, a stalled one is.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use tokio::sync::oneshot;

use crate::plumbing::error::{ApiError, DatabaseUnavailable};

/// How long the API gives a request before it answers 503 itself.
///
/// The answer deadline counts from when the request body has fully arrived;
/// the body has `body` to arrive. It bounds what the API waits on: the
/// database (a connection from the pool, which would wait up to
/// `sless_store::ACQUIRE_TIMEOUT`; a connection that stopped answering
/// mid-query, which sqlx would wait on forever) and the blob store. The
/// invoke proxy (`/fn`) is not bound by it: a function runs for its own
/// `timeout_sec`.
///
/// An upload is bound by progress instead: its body may take as long as
/// bytes keep coming, 408 once none came for `upload_idle`; then each step
/// of its work has `request` from the last one that progressed (every chunk
/// inflated while it is checked and packed counts), and storing its blobs
/// has `request` plus `upload_per_mib` per MiB stored. Waiting for its turn
/// at the upload gate counts against neither (the gate has its own wait).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// To answer a request of the JSON API, `/readyz` or an upload.
    pub request: Duration,
    /// More time for storing an upload's blobs, per MiB stored (a 50 MiB
    /// zip and its context get 4 s + about 100 s).
    pub upload_per_mib: Duration,
    /// For a request body to arrive (408 after that); for an upload, for
    /// its first byte.
    pub body: Duration,
    /// How long an upload's body may stall: 408 once no byte arrived for
    /// this long.
    pub upload_idle: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            request: Duration::from_secs(4),
            upload_per_mib: Duration::from_secs(1),
            body: Duration::from_secs(60),
            upload_idle: Duration::from_secs(30),
        }
    }
}

/// The deadlines of one route.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RouteDeadline {
    pub(crate) answer: Duration,
    pub(crate) body: Duration,
    pub(crate) database_only: bool,
}

/// Answers 503 when the route has not answered within its deadline after
/// the body arrived (408 when the body itself is late). The handler is
/// dropped: what it was waiting on is abandoned. A command it had already
/// committed stays committed, which is why a 503 means "unknown", and a
/// retry with the same `Idempotency-Key` tells.
pub(crate) async fn within_deadline(
    State(d): State<RouteDeadline>,
    req: Request,
    next: Next,
) -> Response {
    let (parts, body) = req.into_parts();
    let (arrived_tx, arrived) = oneshot::channel::<u64>();
    let body = if body.is_end_stream() {
        body // no body: the clock starts now (`arrived` sees the sender dropped)
    } else {
        Body::new(Arrival {
            inner: body,
            received: 0,
            arrived: Some(arrived_tx),
            progress: None,
        })
    };
    let answer = next.run(Request::from_parts(parts, body));
    let clock = async {
        // Arrived, failed, or dropped unread by the handler: all start the clock.
        if tokio::time::timeout(d.body, arrived).await.is_err() {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body-timeout",
                "Request body too slow",
                format!("the request body did not arrive within {:?}", d.body),
            );
        }
        tokio::time::sleep(d.answer).await;
        deadline_exceeded(&format!("{:?}", d.answer))
    };
    tokio::select! {
        res = answer => res,
        late = clock => {
            let mut res = late.into_response();
            if d.database_only && res.status() == StatusCode::SERVICE_UNAVAILABLE {
                res.extensions_mut().insert(DatabaseUnavailable);
            }
            res
        }
    }
}

fn deadline_exceeded(after: &str) -> ApiError {
    ApiError::unavailable(
        "deadline-exceeded",
        "Deadline exceeded",
        format!(
            "no answer within {after}; whether a command took effect is unknown: \
             retry with the same Idempotency-Key to find out"
        ),
    )
}

/// How an upload's work tells its deadline that it progresses (which never
/// moves it earlier). In the request's extensions of a route under
/// `while_progressing`.
#[derive(Clone)]
pub struct Progress(Arc<ProgressInner>);

struct ProgressInner {
    /// What the deadline is counted from.
    origin: std::time::Instant,
    /// The deadline, in µs after `origin`.
    deadline_us: AtomicU64,
    /// Bytes of body received so far.
    received: AtomicU64,
    /// How long each step has, from the last one that progressed.
    step: Duration,
    /// Told when the deadline was set anew (maybe earlier): the clock
    /// sleeping until the old one looks again.
    reset: tokio::sync::Notify,
}

impl Progress {
    fn new(step: Duration, first: Duration) -> Progress {
        let progress = Progress(Arc::new(ProgressInner {
            origin: std::time::Instant::now(),
            deadline_us: AtomicU64::new(0),
            received: AtomicU64::new(0),
            step,
            reset: tokio::sync::Notify::new(),
        }));
        progress.set(first);
        progress
    }

    /// `d` from now, in µs after `origin`.
    fn us_after(&self, d: Duration) -> u64 {
        (self.0.origin.elapsed() + d).as_micros() as u64
    }

    /// The deadline is `d` from now, earlier or later than it was.
    fn set(&self, d: Duration) {
        self.0
            .deadline_us
            .store(self.us_after(d), Ordering::Relaxed);
        self.0.reset.notify_one();
    }

    /// The work went on: the next step has its full time from now.
    pub fn advanced(&self) {
        self.allow(Duration::ZERO);
    }

    /// A step that takes `more` than a usual one begins now (storing
    /// blobs: `more` in proportion to their size).
    pub fn allow(&self, more: Duration) {
        let at = self.us_after(self.0.step + more);
        self.0.deadline_us.fetch_max(at, Ordering::Relaxed);
    }

    fn deadline(&self) -> tokio::time::Instant {
        let us = self.0.deadline_us.load(Ordering::Relaxed);
        tokio::time::Instant::from_std(self.0.origin + Duration::from_micros(us))
    }

    fn received(&self) -> u64 {
        self.0.received.load(Ordering::Relaxed)
    }
}

/// The deadline of a route whose work reports its progress (uploads): the
/// body has `body` for its first byte, then may take as long as bytes keep
/// coming (408 once none came for `idle`); from when it arrived, each step
/// of the work has `answer` from the last progress (`Progress`), 503 after
/// that. The handler finds its `Progress` in the request's extensions.
pub(crate) async fn while_progressing(
    State((d, idle)): State<(RouteDeadline, Duration)>,
    req: Request,
    next: Next,
) -> Response {
    let (mut parts, body) = req.into_parts();
    let progress = Progress::new(d.answer, d.body);
    parts.extensions.insert(progress.clone());
    let (arrived_tx, mut arrived) = oneshot::channel::<u64>();
    let body = Body::new(Arrival {
        inner: body,
        received: 0,
        arrived: Some(arrived_tx),
        progress: Some((progress.clone(), idle)),
    });
    let answer = next.run(Request::from_parts(parts, body));
    let clock = async {
        let mut has_arrived = false;
        loop {
            tokio::select! {
                // Arrived or failed (`Arrival` set the deadline), or
                // dropped unread by the handler.
                read = &mut arrived, if !has_arrived => {
                    has_arrived = true;
                    if read.is_err() {
                        progress.set(d.answer);
                    }
                }
                // A body chunk moved it, maybe earlier than the sleep below.
                () = progress.0.reset.notified() => {}
                () = tokio::time::sleep_until(progress.deadline()) => {
                    if tokio::time::Instant::now() < progress.deadline() {
                        continue; // it progressed meanwhile
                    }
                    if has_arrived {
                        return deadline_exceeded(&format!("{:?} of the last progress", d.answer));
                    }
                    return body_stalled(progress.received(), d.body, idle);
                }
            }
        }
    };
    tokio::select! {
        res = answer => res,
        late = clock => late.into_response(),
    }
}

/// 408 for an upload whose body stopped coming.
fn body_stalled(received: u64, first: Duration, idle: Duration) -> ApiError {
    let detail = if received == 0 {
        format!("no byte of the request body arrived within {first:?}")
    } else {
        format!(
            "the request body stalled: no byte arrived for {idle:?} after {received} bytes; \
             nothing was stored: send it again"
        )
    };
    ApiError::new(
        StatusCode::REQUEST_TIMEOUT,
        "body-timeout",
        "Request body too slow",
        detail,
    )
}

/// A request body that reports when it has been read to the end (or
/// failed), and how many bytes it had; with `progress`, each chunk moves
/// the deadline to `idle` from then.
struct Arrival {
    inner: Body,
    received: u64,
    arrived: Option<oneshot::Sender<u64>>,
    progress: Option<(Progress, Duration)>,
}

impl HttpBody for Arrival {
    type Data = Bytes;
    type Error = axum::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<Frame<Bytes>, axum::Error>>> {
        let polled = Pin::new(&mut self.inner).poll_frame(cx);
        if let Poll::Ready(Some(Ok(frame))) = &polled
            && let Some(data) = frame.data_ref()
        {
            self.received += data.len() as u64;
            if let Some((progress, idle)) = &self.progress {
                progress.0.received.store(self.received, Ordering::Relaxed);
                progress.set(*idle);
            }
        }
        if matches!(polled, Poll::Ready(None | Some(Err(_))))
            && let Some(tx) = self.arrived.take()
        {
            // The work's first step has its time from now, before the
            // handler sees the end of the body.
            if let Some((progress, _)) = &self.progress {
                progress.set(progress.0.step);
            }
            let _ = tx.send(self.received);
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

#[cfg(test)]
mod tests {
    use std::future::Future;
    use std::time::Instant;

    use axum::Router;
    use axum::body::Body;
    use axum::http::Request;
    use axum::middleware;
    use axum::routing::post;
    use tower::ServiceExt;

    use super::*;

    /// A body of three 3-byte chunks, 200 ms apart.
    struct Trickle {
        left: u32,
        sleep: Pin<Box<tokio::time::Sleep>>,
    }

    impl HttpBody for Trickle {
        type Data = Bytes;
        type Error = std::convert::Infallible;

        fn poll_frame(
            mut self: Pin<&mut Self>,
            cx: &mut Context<'_>,
        ) -> Poll<Option<Result<Frame<Bytes>, Self::Error>>> {
            if self.left == 0 {
                return Poll::Ready(None);
            }
            if self.sleep.as_mut().poll(cx).is_pending() {
                return Poll::Pending;
            }
            self.left -= 1;
            let next = tokio::time::Instant::now() + Duration::from_millis(200);
            self.sleep.as_mut().reset(next);
            Poll::Ready(Some(Ok(Frame::data(Bytes::from_static(b"abc")))))
        }
    }

    fn slow_route(answer: Duration, handler_takes: Duration) -> Router {
        Router::new()
            .route(
                "/",
                post(move |body: Bytes| async move {
                    tokio::time::sleep(handler_takes).await;
                    format!("{} bytes", body.len())
                }),
            )
            .route_layer(middleware::from_fn_with_state(
                RouteDeadline {
                    answer,
                    body: Duration::from_secs(5),
                    database_only: true,
                },
                within_deadline,
            ))
    }

    #[tokio::test]
    async fn a_route_past_its_deadline_answers_503_and_says_the_database_did_not_answer() {
        let app = slow_route(Duration::from_millis(100), Duration::from_secs(30));
        let started = Instant::now();
        let res = app
            .oneshot(Request::post("/").body(Body::from("x")).unwrap())
            .await
            .unwrap();
        assert!(
            started.elapsed() < Duration::from_secs(2),
            "{:?}",
            started.elapsed()
        );
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        assert!(res.headers().contains_key(axum::http::header::RETRY_AFTER));
        assert!(res.extensions().get::<DatabaseUnavailable>().is_some());
    }

    #[tokio::test]
    async fn the_deadline_counts_from_when_the_body_has_arrived() {
        // The body takes 600 ms to arrive; the route has 300 ms after that.
        let app = slow_route(Duration::from_millis(300), Duration::from_millis(50));
        let trickle = Trickle {
            left: 3,
            sleep: Box::pin(tokio::time::sleep(Duration::from_millis(200))),
        };
        let res = app
            .oneshot(Request::post("/").body(Body::new(trickle)).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
        let body = axum::body::to_bytes(res.into_body(), 1024).await.unwrap();
        assert_eq!(&body[..], b"9 bytes");
    }

    /// A route under `while_progressing` whose handler reads the body, then
    /// works `steps` times for 100 ms, telling of its progress after each
    /// when `tells`.
    fn progressing_route(answer: Duration, steps: u32, tells: bool) -> Router {
        Router::new()
            .route(
                "/",
                post(move |req: Request<Body>| async move {
                    let progress = req.extensions().get::<Progress>().cloned().unwrap();
                    let body = axum::body::to_bytes(req.into_body(), 1024).await.unwrap();
                    for _ in 0..steps {
                        tokio::time::sleep(Duration::from_millis(100)).await;
                        if tells {
                            progress.advanced();
                        }
                    }
                    format!("{} bytes", body.len())
                }),
            )
            .route_layer(middleware::from_fn_with_state(
                (
                    RouteDeadline {
                        answer,
                        body: Duration::from_secs(5),
                        database_only: false,
                    },
                    Duration::from_secs(5),
                ),
                while_progressing,
            ))
    }

    #[tokio::test]
    async fn work_that_tells_of_its_progress_outlasts_its_step_deadline() {
        // 1.5 s of work, 300 ms per step.
        let app = progressing_route(Duration::from_millis(300), 15, true);
        let res = app
            .oneshot(Request::post("/").body(Body::from("abc")).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::OK);
    }

    #[tokio::test]
    async fn work_that_stops_progressing_gets_503_a_step_after_its_last_progress() {
        let app = progressing_route(Duration::from_millis(300), 15, false);
        let started = Instant::now();
        let res = app
            .oneshot(Request::post("/").body(Body::from("abc")).unwrap())
            .await
            .unwrap();
        assert_eq!(res.status(), StatusCode::SERVICE_UNAVAILABLE);
        let took = started.elapsed();
        assert!(took < Duration::from_millis(1200), "{took:?}");
        let body = axum::body::to_bytes(res.into_body(), 4096).await.unwrap();
        let body = String::from_utf8_lossy(&body);
        assert!(body.contains("deadline-exceeded"), "{body}");
    }
}
