//! Deadlines: every request of the JSON API is answered within one,
//! counted from when its body has arrived (`Deadlines`, applied per route
//! by `within_deadline`), so a database or blob store that stops answering
//! turns into a 503, never into a request that hangs.

use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use axum::body::{Body, Bytes, HttpBody};
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use hyper::body::{Frame, SizeHint};
use tokio::sync::oneshot;

use crate::error::{ApiError, DatabaseUnavailable};

/// How long the API gives a request before it answers 503 itself.
///
/// The answer deadline counts from when the request body has fully arrived,
/// so a large upload over a slow link is not cut short by it; the body has
/// `body` to arrive. It bounds what the API waits on: the database (a
/// connection from the pool, which would wait up to
/// `sless_store::ACQUIRE_TIMEOUT`; a connection that stopped answering
/// mid-query, which sqlx would wait on forever) and the blob store. The
/// invoke proxy (`/fn`) is not bound by it: a function runs for its own
/// `timeout_sec`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Deadlines {
    /// To answer a request of the JSON API, `/readyz` or an upload.
    pub request: Duration,
    /// More time for an upload, per MiB of its body: checking, packing and
    /// storing an archive take time in proportion to its size (a 50 MiB
    /// upload gets 4 s + 50 s).
    pub upload_per_mib: Duration,
    /// For a request body to arrive (408 after that).
    pub body: Duration,
}

impl Default for Deadlines {
    fn default() -> Self {
        Deadlines {
            request: Duration::from_secs(4),
            upload_per_mib: Duration::from_secs(1),
            body: Duration::from_secs(60),
        }
    }
}

/// The deadlines of one route.
#[derive(Debug, Clone, Copy)]
pub(crate) struct RouteDeadline {
    pub(crate) answer: Duration,
    /// Added to `answer` per MiB of body.
    pub(crate) per_mib: Duration,
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
        })
    };
    let answer = next.run(Request::from_parts(parts, body));
    let clock = async {
        // Arrived, failed, or dropped unread by the handler: all start the clock.
        let Ok(received) = tokio::time::timeout(d.body, arrived).await else {
            return ApiError::new(
                StatusCode::REQUEST_TIMEOUT,
                "body-timeout",
                "Request body too slow",
                format!("the request body did not arrive within {:?}", d.body),
            );
        };
        let mib = received.unwrap_or(0) as f64 / (1024.0 * 1024.0);
        let deadline = d.answer + d.per_mib.mul_f64(mib);
        tokio::time::sleep(deadline).await;
        ApiError::unavailable(
            "deadline-exceeded",
            "Deadline exceeded",
            format!(
                "no answer within {deadline:?}; whether a command took effect is unknown: \
                 retry with the same Idempotency-Key to find out"
            ),
        )
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

/// A request body that reports when it has been read to the end (or
/// failed), and how many bytes it had.
struct Arrival {
    inner: Body,
    received: u64,
    arrived: Option<oneshot::Sender<u64>>,
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
        }
        if matches!(polled, Poll::Ready(None | Some(Err(_))))
            && let Some(tx) = self.arrived.take()
        {
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
                    per_mib: Duration::ZERO,
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
}
