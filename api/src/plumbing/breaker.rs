//! The breaker: while the database is unavailable, the routes that need it
//! answer 503 at once instead of queueing for the connection pool
//! (`Breaker`, applied by `shed_while_unavailable`).

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};

use crate::plumbing::error::{ApiError, DATABASE_UNAVAILABLE, DatabaseUnavailable};

/// Sheds load while the database is unavailable.
///
/// Without it, every request that arrives during an outage waits for a pool
/// connection until its deadline, and when the database comes back the
/// queue of waiters is so long that each one gets a connection slot with too
/// little of its own time left to open a connection: the pool does not
/// recover while the load lasts. So once `TRIP_AFTER` answers in a row found
/// the database unavailable (a database error that says so, or a missed
/// deadline on a route that waits on nothing else), the breaker opens:
/// requests are answered 503 at once, except one let through every
/// `PROBE_EVERY` to find out whether the database is back (with the pool
/// nearly to itself, it has its whole deadline to connect). The first answer
/// from the database closes it.
#[derive(Debug, Default)]
pub struct Breaker {
    state: Mutex<BreakerState>,
}

#[derive(Debug, Default)]
struct BreakerState {
    /// "Database unavailable" answers since the last other answer.
    failures: u32,
    /// `None` while closed.
    open: Option<Open>,
}

#[derive(Debug, Clone, Copy)]
struct Open {
    since: Instant,
    last_probe: Instant,
}

impl Breaker {
    /// How often a request is let through while the breaker is open.
    pub const PROBE_EVERY: Duration = Duration::from_millis(500);
    /// "Database unavailable" answers in a row that open the breaker.
    pub const TRIP_AFTER: u32 = 3;

    fn state(&self) -> std::sync::MutexGuard<'_, BreakerState> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Whether a request may go on now.
    fn admit(&self) -> bool {
        match self.state().open.as_mut() {
            None => true,
            Some(o) if o.last_probe.elapsed() >= Self::PROBE_EVERY => {
                o.last_probe = Instant::now();
                true
            }
            Some(_) => false,
        }
    }

    /// Records how a request admitted at `admitted` ended: the database was
    /// unavailable, it answered (an answer below 500 other than 401/403,
    /// which come before any query), or neither can be told.
    fn record(&self, admitted: Instant, res: &Response) {
        let unavailable = res.extensions().get::<DatabaseUnavailable>().is_some();
        let answered = !res.status().is_server_error()
            && !matches!(
                res.status(),
                StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN
            );
        if !unavailable && !answered {
            return;
        }
        let mut state = self.state();
        if unavailable {
            state.failures += 1;
            if state.open.is_none() && state.failures >= Self::TRIP_AFTER {
                tracing::warn!("the database is unavailable; shedding requests until it answers");
                let now = Instant::now();
                state.open = Some(Open {
                    since: now,
                    last_probe: now,
                });
            }
            return;
        }
        match state.open {
            // Only a request admitted since the outage began tells that it ended.
            Some(o) if admitted < o.since => {}
            Some(o) => {
                tracing::info!(after = ?o.since.elapsed(), "the database answers again");
                *state = BreakerState::default();
            }
            None => state.failures = 0,
        }
    }

    /// True while requests are being shed.
    pub fn is_open(&self) -> bool {
        self.state().open.is_some()
    }
}

pub(crate) async fn shed_while_unavailable(
    State(breaker): State<Arc<Breaker>>,
    req: Request,
    next: Next,
) -> Response {
    if !breaker.admit() {
        return ApiError::unavailable(
            DATABASE_UNAVAILABLE,
            "Database unavailable",
            "the database is unavailable; requests are refused until it answers again: retry later",
        )
        .into_response();
    }
    let admitted = Instant::now();
    let res = next.run(req).await;
    breaker.record(admitted, &res);
    res
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(status: StatusCode, database_unavailable: bool) -> Response {
        let mut res = status.into_response();
        if database_unavailable {
            res.extensions_mut().insert(DatabaseUnavailable);
        }
        res
    }

    #[test]
    fn breaker_opens_after_unavailable_answers_in_a_row_and_closes_on_an_answer_from_the_database()
    {
        let b = Breaker::default();
        let down = answer(StatusCode::SERVICE_UNAVAILABLE, true);
        let before = Instant::now();
        for _ in 1..Breaker::TRIP_AFTER {
            b.record(Instant::now(), &down);
        }
        assert!(!b.is_open(), "one short of tripping");
        b.record(Instant::now(), &answer(StatusCode::CREATED, false));
        for _ in 1..Breaker::TRIP_AFTER {
            b.record(Instant::now(), &down);
        }
        assert!(!b.is_open(), "an answer in between starts the count again");
        b.record(Instant::now(), &down);
        assert!(b.is_open());
        assert!(!b.admit(), "shed at once");

        // Neither a 5xx of something else nor a 401 tells the database is back,
        // nor does an answer to a request admitted before the breaker opened.
        b.record(Instant::now(), &answer(StatusCode::BAD_GATEWAY, false));
        b.record(Instant::now(), &answer(StatusCode::UNAUTHORIZED, false));
        b.record(before, &answer(StatusCode::OK, false));
        assert!(b.is_open());

        b.record(Instant::now(), &answer(StatusCode::NOT_FOUND, false));
        assert!(!b.is_open());
        assert!(b.admit());
    }

    #[tokio::test]
    async fn an_open_breaker_lets_one_probe_through_per_interval() {
        let b = Breaker::default();
        for _ in 0..Breaker::TRIP_AFTER {
            b.record(
                Instant::now(),
                &answer(StatusCode::SERVICE_UNAVAILABLE, true),
            );
        }
        assert!(!b.admit());
        tokio::time::sleep(Breaker::PROBE_EVERY).await;
        assert!(b.admit(), "the probe");
        assert!(!b.admit(), "and only the probe");
    }
}
