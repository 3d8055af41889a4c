//! Which instance takes a call: the ready one with the fewest calls in
//! flight from this API process, as long as it has fewer than the
//! function's `concurrency`. When every instance is at its concurrency
//! the call waits, in arrival order, for a place: one frees when a call
//! ends, or the autoscaler adds instances (the proxy reads where they
//! serve as the read model has it). At most `ProxyLimits::activation_queue`
//! calls of a function wait, each at most until its
//! `activation_timeout`, the same hold as a start from zero; past either
//! it gets 429 `function-busy` with `Retry-After`.
//!
//! A function whose endpoint is the one address of all its instances (a
//! Service, on a cluster) is one place of `concurrency` times its
//! instances. Each API process counts its own calls: with several, an
//! instance may be given up to their number times its concurrency.

use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use tokio::sync::Notify;

use super::endpoints::Target;
use crate::AppState;
use crate::plumbing::error::{ApiError, ApiResult};

/// The problem kind of a call that found every instance busy.
pub const BUSY: &str = "function-busy";

/// How often a waiting call reads again where the function serves.
const LOOK_AGAIN: Duration = Duration::from_millis(50);

/// The calls this process has at each instance, and those that wait.
#[derive(Default)]
pub struct Spread {
    inner: Mutex<Inner>,
    /// Rung when a place frees or the head of a queue leaves it.
    freed: Notify,
}

#[derive(Default)]
struct Inner {
    /// Calls in flight at each instance endpoint.
    busy: HashMap<String, u32>,
    /// The tickets of the calls that wait, by function, oldest first.
    waiting: HashMap<String, VecDeque<u64>>,
    next_ticket: u64,
    /// Instances that refused a connection, and when: passed over for
    /// `DOWN_FOR` (an instance that died takes no new call while the log
    /// catches up with its replacement).
    down: HashMap<String, Instant>,
}

/// How long an instance that refused a connection is passed over: longer
/// than a call waits for the read model to move on from it (`forward`).
const DOWN_FOR: Duration = Duration::from_secs(5);

/// A call's place at an instance, until dropped.
pub struct Slot {
    spread: Arc<Spread>,
    endpoint: String,
}

impl Drop for Slot {
    fn drop(&mut self) {
        {
            let mut inner = self.spread.inner.lock().unwrap();
            if let Some(n) = inner.busy.get_mut(&self.endpoint) {
                *n = n.saturating_sub(1);
                if *n == 0 {
                    inner.busy.remove(&self.endpoint);
                }
            }
        }
        self.spread.freed.notify_waiters();
    }
}

/// A waiting call's place in its function's queue, left when dropped.
struct Ticket<'a> {
    spread: &'a Spread,
    function: &'a str,
    id: u64,
}

impl Drop for Ticket<'_> {
    fn drop(&mut self) {
        let mut inner = self.spread.inner.lock().unwrap();
        if let Some(q) = inner.waiting.get_mut(self.function) {
            q.retain(|t| *t != self.id);
            if q.is_empty() {
                inner.waiting.remove(self.function);
            }
        }
        drop(inner);
        self.spread.freed.notify_waiters();
    }
}

impl Inner {
    /// The least busy instance of `target` with room, taken.
    fn take(&mut self, target: &Target) -> Option<String> {
        self.down.retain(|_, at| at.elapsed() < DOWN_FOR);
        let up = |e: &String| !self.down.contains_key(e);
        let any_up = target.instances.iter().any(|(e, _)| up(e));
        let (endpoint, _) = target
            .instances
            .iter()
            .filter(|(e, _)| !any_up || up(e))
            .map(|(e, room)| (e, self.busy.get(e).copied().unwrap_or(0), *room))
            .filter(|(_, busy, room)| busy < room)
            .min_by_key(|(_, busy, _)| *busy)
            .map(|(e, busy, _)| (e.clone(), busy))?;
        *self.busy.entry(endpoint.clone()).or_default() += 1;
        Some(endpoint)
    }
}

/// What a call was given: the target it is sent to, the instance, its place.
pub(super) struct Placed {
    pub target: Arc<Target>,
    pub endpoint: String,
    pub slot: Slot,
}

impl Spread {
    /// Passes over `endpoint` for a moment: it refused a connection.
    pub(super) fn down(&self, endpoint: &str) {
        let mut inner = self.inner.lock().unwrap();
        if inner.down.len() > 10_000 {
            inner.down.clear();
        }
        inner.down.insert(endpoint.to_owned(), Instant::now());
    }

    /// True when an instance of `target` has not refused a connection of
    /// late: one a call may be sent to.
    pub(super) fn any_up(&self, target: &Target) -> bool {
        let mut inner = self.inner.lock().unwrap();
        inner.down.retain(|_, at| at.elapsed() < DOWN_FOR);
        target
            .instances
            .iter()
            .any(|(e, _)| !inner.down.contains_key(e))
    }

    /// Finds the call of `ns/name` (started at `started`) an instance of
    /// `target`, waiting for one as the module says.
    pub(super) async fn place(
        self: &Arc<Self>,
        state: &AppState,
        ns: &str,
        name: &str,
        mut target: Arc<Target>,
        started: Instant,
    ) -> ApiResult<Placed> {
        let limits = state.http.limits;
        let function = format!("{ns}/{name}");
        let deadline = started + limits.activation_timeout;
        let mut ticket: Option<Ticket<'_>> = None;
        loop {
            let freed = self.freed.notified();
            let mut freed = std::pin::pin!(freed);
            freed.as_mut().enable();
            {
                let mut inner = self.inner.lock().unwrap();
                let first = match &ticket {
                    None => !inner.waiting.contains_key(&function),
                    Some(t) => inner.waiting.get(&function).and_then(|q| q.front()) == Some(&t.id),
                };
                if first && let Some(endpoint) = inner.take(&target) {
                    let slot = Slot {
                        spread: self.clone(),
                        endpoint: endpoint.clone(),
                    };
                    drop(inner);
                    drop(ticket); // the next in line looks
                    return Ok(Placed {
                        target,
                        endpoint,
                        slot,
                    });
                }
                if ticket.is_none() {
                    let queue = inner.waiting.entry(function.clone()).or_default();
                    if queue.len() >= limits.activation_queue {
                        return Err(busy(
                            name,
                            &target,
                            format!(
                                "{} calls already wait for one of its instances",
                                limits.activation_queue
                            ),
                        ));
                    }
                    inner.next_ticket += 1;
                    let id = inner.next_ticket;
                    inner
                        .waiting
                        .get_mut(&function)
                        .expect("just made")
                        .push_back(id);
                    ticket = Some(Ticket {
                        spread: self,
                        function: &function,
                        id,
                    });
                }
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(busy(
                    name,
                    &target,
                    format!(
                        "no instance had room within {:.1} s",
                        limits.activation_timeout.as_secs_f64()
                    ),
                ));
            }
            tokio::select! {
                _ = freed => {}
                _ = tokio::time::sleep(LOOK_AGAIN.min(left)) => {
                    // Instances the autoscaler added serve here too.
                    if let Ok(Some(now)) = state.endpoints.get(&state.pool, ns, name).await
                        && now.endpoint.is_ok()
                    {
                        target = now;
                    }
                }
            }
        }
    }
}

/// 429 `function-busy`: every instance is at its concurrency.
fn busy(name: &str, target: &Target, why: String) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::TOO_MANY_REQUESTS,
        BUSY,
        "Function busy",
        format!(
            "every instance of function {name:?} has its concurrency of {} calls in flight ({} of at most {} instances serve), and {why}; try again shortly",
            target.concurrency, target.serving, target.max_instances
        ),
    );
    e.retry_after = Some(1);
    e
}
