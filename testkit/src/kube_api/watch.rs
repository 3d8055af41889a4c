//! WATCH: newline-delimited JSON events over a chunked response.

use std::collections::HashMap;
use std::convert::Infallible;
use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::http::{StatusCode, header};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};
use tokio::sync::{broadcast, mpsc};
use tokio::time::{Instant, sleep_until};

use super::FakeKube;
use super::resources::{ApiError, ResourceType, Target};
use super::select::Selector;
use super::store::{Event, EventType};

/// How often a watch that allows bookmarks gets one.
const BOOKMARK_EVERY: Duration = Duration::from_secs(2);
/// How long a watch lasts without `timeoutSeconds`.
const DEFAULT_TIMEOUT: Duration = Duration::from_secs(1800);

/// What one watch sends.
struct Filter {
    rt: &'static ResourceType,
    namespace: Option<String>,
    selector: Selector,
}

impl Filter {
    /// The event this watcher sees for a change, if any. An object that
    /// stops matching the selector is DELETED for it, one that starts
    /// matching is ADDED.
    fn view<'a>(&self, ev: &'a Event) -> Option<(EventType, &'a Value)> {
        if ev.rt != self.rt
            || self
                .namespace
                .as_ref()
                .is_some_and(|ns| *ns != ev.namespace)
        {
            return None;
        }
        let now = self.selector.matches(&ev.object);
        let before = ev.previous.as_ref().map(|p| self.selector.matches(p));
        let kind = match (ev.kind, before, now) {
            (EventType::Modified, Some(true), true) => EventType::Modified,
            (EventType::Modified, Some(false), true) => EventType::Added,
            (EventType::Modified, Some(true), false) => EventType::Deleted,
            (kind, None, true) => kind,
            _ => return None,
        };
        Some((kind, &ev.object))
    }
}

fn line(v: &Value) -> Bytes {
    let mut s = serde_json::to_vec(v).expect("JSON values serialize");
    s.push(b'\n');
    Bytes::from(s)
}

fn event_line(kind: EventType, obj: &Value) -> Bytes {
    line(&json!({"type": kind.as_str(), "object": obj}))
}

fn error_line(e: &ApiError) -> Bytes {
    line(&json!({"type": "ERROR", "object": e.status()}))
}

fn bookmark_line(rt: &ResourceType, rv: u64, initial_events_end: bool) -> Bytes {
    let mut meta = json!({"resourceVersion": rv.to_string()});
    if initial_events_end {
        meta["annotations"] = json!({"k8s.io/initial-events-end": "true"});
    }
    line(&json!({
        "type": "BOOKMARK",
        "object": {"kind": rt.kind, "apiVersion": rt.api_version(), "metadata": meta},
    }))
}

fn streaming(rx: mpsc::Receiver<Bytes>) -> Response {
    let stream = futures_util::stream::unfold(rx, |mut rx| async move {
        rx.recv().await.map(|b| (Ok::<_, Infallible>(b), rx))
    });
    (
        StatusCode::OK,
        [(header::CONTENT_TYPE, "application/json")],
        Body::from_stream(stream),
    )
        .into_response()
}

/// Answers `?watch=true` on a collection path.
pub fn serve(
    kube: &FakeKube,
    t: &Target,
    params: &HashMap<String, String>,
) -> Result<Response, ApiError> {
    let param = |n: &str| params.get(n).map(String::as_str).filter(|s| !s.is_empty());
    let filter = Filter {
        rt: t.rt,
        namespace: t.namespace.clone(),
        selector: Selector::parse(param("labelSelector"), param("fieldSelector"))?,
    };
    let from = match param("resourceVersion") {
        Some(rv) => Some(
            rv.parse::<u64>()
                .map_err(|_| ApiError::bad_request(format!("invalid resourceVersion {rv:?}")))?,
        ),
        None => None,
    };
    let timeout = match param("timeoutSeconds") {
        Some(s) => Duration::from_secs(
            s.parse()
                .map_err(|_| ApiError::bad_request(format!("invalid timeoutSeconds {s:?}")))?,
        ),
        None => DEFAULT_TIMEOUT,
    };
    let bookmarks = param("allowWatchBookmarks") == Some("true");
    let initial_events = param("sendInitialEvents") == Some("true");
    let (tx, rx) = mpsc::channel::<Bytes>(256);
    // A resourceVersion the history no longer reaches is an ERROR event in a
    // successful response, as the API server sends it.
    let start = match kube.store().watch(
        t.rt,
        t.namespace.as_deref(),
        if initial_events { None } else { from },
    ) {
        Ok(start) => start,
        Err(e) => {
            tx.try_send(error_line(&e)).expect("an empty channel");
            return Ok(streaming(rx));
        }
    };
    tokio::spawn(async move {
        let deadline = Instant::now() + timeout;
        let mut last_rv = start.rv;
        for ev in &start.replay {
            last_rv = last_rv.max(ev.rv);
            if let Some((kind, obj)) = filter.view(ev)
                && tx.send(event_line(kind, obj)).await.is_err()
            {
                return;
            }
        }
        if initial_events
            && tx
                .send(bookmark_line(filter.rt, last_rv, true))
                .await
                .is_err()
        {
            return;
        }
        let mut live = start.live;
        let mut ticks = tokio::time::interval_at(Instant::now() + BOOKMARK_EVERY, BOOKMARK_EVERY);
        loop {
            let next: Bytes = tokio::select! {
                _ = sleep_until(deadline) => return,
                _ = tx.closed() => return,
                _ = ticks.tick(), if bookmarks => bookmark_line(filter.rt, last_rv, false),
                ev = live.recv() => match ev {
                    Ok(ev) => {
                        last_rv = last_rv.max(ev.rv);
                        match filter.view(&ev) {
                            Some((kind, obj)) => event_line(kind, obj),
                            None => continue,
                        }
                    }
                    Err(broadcast::error::RecvError::Lagged(_)) => {
                        let _ = tx.send(error_line(&ApiError::expired("the watch fell too far behind"))).await;
                        return;
                    }
                    Err(broadcast::error::RecvError::Closed) => return,
                },
            };
            if tx.send(next).await.is_err() {
                return;
            }
        }
    });
    Ok(streaming(rx))
}
