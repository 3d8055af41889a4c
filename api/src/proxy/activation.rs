//! Calls to a function scaled to zero. The call is held while an instance
//! starts: the first held call of this API process asks for one (appends
//! `FunctionScaledUp` with a reconcile, in one transaction, expecting the
//! stream version it decided on, so concurrent first calls, on one replica
//! or several, cause one start) and watches the read model until the
//! function has an endpoint again; the calls held for the function are
//! then let through in the order they came. A call is held at most
//! `ProxyLimits::activation_timeout` from its start, and at most
//! `ProxyLimits::activation_queue` calls per function are held; past
//! either it gets 503 `function-activating` with `Retry-After`. When the
//! start fails the held calls get 503 `function-activation-failed` with
//! the function's error, and so do the calls of the next
//! `RETRY_AFTER_FAILURE`; the first call after it tries again.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::http::StatusCode;
use sless_domain::function::FunctionCommand;
use sless_domain::{FunctionKey, FunctionName, Namespace, Phase};
use sless_store::eventlog::Metadata;
use sless_store::{readmodel, scaling};
use tokio::sync::oneshot;

use super::endpoints::Target;
use crate::AppState;
use crate::plumbing::error::{ApiError, ApiResult};

/// How often an activation looks at the read model: first, and at most.
const POLL: Duration = Duration::from_millis(5);
const POLL_AT_MOST: Duration = Duration::from_millis(100);

/// The problem kinds of a held call that got no instance.
pub const ACTIVATING: &str = "function-activating";
pub const ACTIVATION_FAILED: &str = "function-activation-failed";

/// The activations under way in this process, by `ns/name`.
#[derive(Default)]
pub struct Activations {
    running: Mutex<HashMap<String, Arc<Activation>>>,
}

struct Activation {
    held: AtomicUsize,
    calls: Mutex<Calls>,
}

/// The calls an activation holds, oldest first, until it ends.
enum Calls {
    Held(VecDeque<oneshot::Sender<Ended>>),
    Ended(Ended),
}

impl Activation {
    /// Tells the held calls how it ended, oldest first; a call that comes
    /// later learns it at once.
    fn end(&self, ended: Ended) {
        let held = match std::mem::replace(
            &mut *self.calls.lock().unwrap(),
            Calls::Ended(ended.clone()),
        ) {
            Calls::Held(held) => held,
            Calls::Ended(_) => VecDeque::new(),
        };
        for call in held {
            let _ = call.send(ended.clone()); // a call that gave up is gone
        }
    }
}

#[derive(Clone)]
enum Ended {
    Serving {
        target: Arc<Target>,
        instance_start: Option<Duration>,
    },
    Failed(String),
}

/// A held call's instance.
pub(super) struct Activated {
    pub target: Arc<Target>,
    /// How long the call was held.
    pub held: Duration,
    /// How long the worker took to start the instance, as the log says.
    pub instance_start: Option<Duration>,
}

/// Counts a held call until it is let go.
struct Holding(Arc<Activation>);

impl Drop for Holding {
    fn drop(&mut self) {
        self.0.held.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Holds a call to `ns/name`, which has no instance, until one serves. The
/// first call held asks for the instance: its request id is the cause the
/// log records.
pub(super) async fn activate(
    state: &AppState,
    ns: &str,
    name: &str,
    request_id: &str,
    started: Instant,
) -> ApiResult<Activated> {
    let limits = state.http.limits;
    let activation = {
        let mut running = state.activations.running.lock().unwrap();
        running
            .entry(format!("{ns}/{name}"))
            .or_insert_with(|| {
                let a = Arc::new(Activation {
                    held: AtomicUsize::new(0),
                    calls: Mutex::new(Calls::Held(VecDeque::new())),
                });
                tokio::spawn(drive(
                    state.clone(),
                    ns.to_owned(),
                    name.to_owned(),
                    request_id.to_owned(),
                    a.clone(),
                ));
                a
            })
            .clone()
    };
    if activation.held.fetch_add(1, Ordering::SeqCst) >= limits.activation_queue {
        activation.held.fetch_sub(1, Ordering::SeqCst);
        return Err(activating(
            name,
            format!(
                "{} calls already wait for its instance to start; try again shortly",
                limits.activation_queue
            ),
        ));
    }
    let _holding = Holding(activation.clone());
    let told = {
        let mut calls = activation.calls.lock().unwrap();
        match &mut *calls {
            Calls::Ended(ended) => Err(ended.clone()),
            Calls::Held(held) => {
                let (tell, told) = oneshot::channel();
                held.push_back(tell);
                Ok(told)
            }
        }
    };
    let deadline = tokio::time::Instant::from_std(started + limits.activation_timeout);
    let outcome = match told {
        Err(ended) => Ok(Some(ended)),
        Ok(told) => tokio::time::timeout_at(deadline, async { told.await.ok() }).await,
    };
    let outcome = match outcome {
        Ok(Some(o)) => o,
        Ok(None) | Err(_) => {
            return Err(activating(
                name,
                format!(
                    "its instance did not start within {:.1} s; it goes on starting, try again shortly",
                    limits.activation_timeout.as_secs_f64()
                ),
            ));
        }
    };
    match outcome {
        Ended::Failed(why) => {
            let mut e = failed(name, &why);
            e.retry_after = Some(RETRY_AFTER_FAILURE.as_secs() as u32);
            Err(e)
        }
        Ended::Serving {
            target,
            instance_start,
        } => Ok(Activated {
            target,
            held: started.elapsed(),
            instance_start,
        }),
    }
}

/// How long after a failed start from zero the next call tries again.
pub const RETRY_AFTER_FAILURE: Duration = Duration::from_secs(5);

/// A call to a function whose start from zero failed at `at`: refused with
/// the error until `RETRY_AFTER_FAILURE` has passed, then let through to
/// try again.
pub(super) fn after_failure(
    name: &str,
    error: &str,
    at: chrono::DateTime<chrono::Utc>,
) -> ApiResult<()> {
    let since = (chrono::Utc::now() - at).to_std().unwrap_or_default();
    let Some(left) = RETRY_AFTER_FAILURE.checked_sub(since) else {
        return Ok(());
    };
    let mut e = failed(name, error);
    e.retry_after = Some(left.as_secs_f64().ceil().max(1.0) as u32);
    Err(e)
}

fn failed(name: &str, why: &str) -> ApiError {
    ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ACTIVATION_FAILED,
        "Function failed to start",
        format!("function {name:?} was scaled to zero and failed to start again: {why}"),
    )
}

/// 503 `function-activating`, to be tried again in a second.
fn activating(name: &str, why: String) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::SERVICE_UNAVAILABLE,
        ACTIVATING,
        "Function starting",
        format!(
            "function {name:?} has no instance serving (it was scaled to zero, or what ran it stopped): {why}"
        ),
    );
    e.retry_after = Some(1);
    e
}

/// Asks for an instance and watches the read model until it serves, the
/// start fails, or the activation timeout passes; then tells the held
/// calls and leaves the registry, so the next call starts afresh.
async fn drive(
    state: AppState,
    ns: String,
    name: String,
    request_id: String,
    activation: Arc<Activation>,
) {
    let deadline = tokio::time::Instant::now() + state.http.limits.activation_timeout;
    let ended = ask_and_watch(&state, &ns, &name, &request_id, deadline).await;
    // After a failed or slow start the next call reads the function again.
    if !matches!(ended, Some(Ended::Serving { .. })) {
        state.endpoints.forget(&ns, &name);
    }
    state
        .activations
        .running
        .lock()
        .unwrap()
        .remove(&format!("{ns}/{name}"));
    // Too slow (None): the held calls are told so as their own time runs out.
    if let Some(ended) = ended {
        activation.end(ended);
    }
}

async fn ask_and_watch(
    state: &AppState,
    ns: &str,
    name: &str,
    request_id: &str,
    deadline: tokio::time::Instant,
) -> Option<Ended> {
    let (Ok(namespace), Ok(function)) = (Namespace::parse(ns), FunctionName::parse(name)) else {
        return Some(Ended::Failed("not a function's name".into()));
    };
    let key = FunctionKey::new(namespace, function);
    let asked = scaling::decide_and_enqueue(
        &state.pool,
        &key,
        FunctionCommand::Activate {
            reason: format!("a call to /fn/{ns}/{name}"),
        },
        Metadata::caused_by_request("proxy", request_id),
    )
    .await;
    let since = match asked {
        Ok(decided) => decided.version,
        Err(e) => {
            tracing::warn!(function = %key.queue_key(), error = %e, "asking for an instance failed");
            return Some(Ended::Failed(format!(
                "the platform could not ask for an instance: {e}"
            )));
        }
    };
    let mut poll = Poll(POLL);
    while tokio::time::Instant::now() < deadline {
        match readmodel::function_row(&state.pool, ns, name).await {
            Ok(Some(row)) if row.endpoint.is_some() && !row.idle => {
                // Read once for every held call (and the calls after them).
                state.endpoints.forget(ns, name);
                let target = match state.endpoints.get(&state.pool, ns, name).await {
                    Ok(Some(t)) => t,
                    Ok(None) => return Some(Ended::Failed("it was deleted".into())),
                    Err(_) => continue,
                };
                // Where it served refused a call: held until the log names
                // an instance that serves.
                if !state.spread.any_up(&target) {
                    tokio::time::sleep(poll.next()).await;
                    continue;
                }
                let instance_start = scaling::last_start(&state.pool, &key.stream())
                    .await
                    .ok()
                    .flatten();
                return Some(Ended::Serving {
                    target,
                    instance_start,
                });
            }
            // A failure after the ask (not the one a retried start found).
            Ok(Some(row)) if row.phase == Phase::Failed && row.stream_version > since => {
                return Some(Ended::Failed(
                    row.last_error
                        .unwrap_or_else(|| "its deploy failed".to_owned()),
                ));
            }
            Ok(None) => return Some(Ended::Failed("it was deleted".into())),
            _ => {}
        }
        tokio::time::sleep(poll.next()).await;
    }
    None
}

/// How often an activation looks at the read model: often at first (a
/// start takes a moment), then less (a worker that is gone takes a lease
/// to be found out).
struct Poll(Duration);

impl Poll {
    fn next(&mut self) -> Duration {
        let now = self.0;
        self.0 = (self.0 * 3 / 2).min(POLL_AT_MOST);
        now
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(flavor = "current_thread")]
    async fn held_calls_are_let_go_in_the_order_they_came_and_one_that_left_holds_up_none() {
        let activation = Activation {
            held: AtomicUsize::new(0),
            calls: Mutex::new(Calls::Held(VecDeque::new())),
        };
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut tasks = Vec::new();
        for n in 0..6 {
            let (tell, told) = oneshot::channel();
            if let Calls::Held(held) = &mut *activation.calls.lock().unwrap() {
                held.push_back(tell);
            }
            if n == 2 {
                drop(told); // this caller went away
                continue;
            }
            let order = order.clone();
            tasks.push(tokio::spawn(async move {
                if told.await.is_ok() {
                    order.lock().unwrap().push(n);
                }
            }));
        }
        tokio::task::yield_now().await;
        activation.end(Ended::Failed("x".into()));
        for task in tasks {
            task.await.unwrap();
        }
        assert_eq!(*order.lock().unwrap(), vec![0, 1, 3, 4, 5]);
        assert!(
            matches!(
                &*activation.calls.lock().unwrap(),
                Calls::Ended(Ended::Failed(_))
            ),
            "a call that comes after the end learns it at once"
        );
    }
}
