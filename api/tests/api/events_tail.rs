//! The audit log's live tail, `GET /v1/namespaces/{ns}/events/stream`:
//! Server-Sent Events in commit order, resumable, ended at shutdown.

use std::time::Duration;

use serde_json::Value;

use super::events::{ALICE, BOB, append, append_in, events_uri};
use super::sse;
use super::support::*;

/// One message of the tail, its data parsed.
#[derive(Debug, Default, Clone)]
struct Message {
    id: Option<String>,
    event: Option<String>,
    data: Option<Value>,
}

impl From<sse::Message> for Message {
    fn from(m: sse::Message) -> Message {
        Message {
            id: m.id,
            event: m.event,
            data: m.data.map(|d| serde_json::from_str(&d).expect("JSON data")),
        }
    }
}

struct Tail(sse::Stream);

impl Tail {
    /// Opens the tail at `uri`; the answer must be a 200 event stream.
    async fn open(env: &Env, uri: &str, last_event_id: Option<&str>) -> Tail {
        Tail::open_on(&env.app, uri, last_event_id).await
    }

    async fn open_on(app: &axum::Router, uri: &str, last_event_id: Option<&str>) -> Tail {
        Tail(sse::Stream::open(app, uri, ALICE, last_event_id).await)
    }

    /// The next message; None when the stream has ended.
    async fn message(&mut self) -> Option<Message> {
        self.0.next().await.map(Message::from)
    }

    /// The next message that carries an event (not only an id).
    async fn event(&mut self) -> Message {
        loop {
            let m = self.message().await.expect("the tail goes on");
            if m.data.is_some() {
                return m;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tail_delivers_events_in_commit_order_and_resumes_after_the_last_id() {
    let env = Env::new().await;
    append(
        &env,
        ALICE,
        &stream_of(ALICE, "before"),
        &["FunctionCreated"],
        ALICE,
    )
    .await;
    let uri = events_uri(&ns(ALICE), "/stream");
    let mut tail = Tail::open(&env, &uri, None).await;
    let first = tail.message().await.unwrap();
    assert!(
        first.id.is_some() && first.data.is_none(),
        "first its resume point: {first:?}"
    );

    // A takes the smaller position, B commits first; A's transaction stays
    // open a while (the tail polls several times meanwhile), then commits.
    let mut a = env.db.pool.begin().await.unwrap();
    let pa = append_in(&mut a, ALICE, &stream_of(ALICE, "a"), &["AHappened"], ALICE).await;
    let pb = append(&env, ALICE, &stream_of(ALICE, "b"), &["BHappened"], ALICE).await;
    assert!(pa[0] < pb[0]);
    tokio::time::sleep(Duration::from_secs(1)).await;
    // A tail that starts now may begin with events that committed just
    // before it, while an older transaction in the cluster (another test's)
    // still ran: the one before the tail, here. Never with A or B yet.
    let mut early = Vec::new();
    while let Some(m) = tail.0.try_next().map(Message::from) {
        if m.data.is_some() {
            early.push(m.event.clone().unwrap());
        }
    }
    assert!(
        early.iter().all(|t| t == "FunctionCreated"),
        "B is held back while A is open: {early:?}"
    );
    a.commit().await.unwrap();

    let mut ea = tail.event().await;
    if ea.event.as_deref() == Some("FunctionCreated") && early.is_empty() {
        ea = tail.event().await;
    }
    let eb = tail.event().await;
    assert_eq!(
        (ea.event.as_deref(), eb.event.as_deref()),
        (Some("AHappened"), Some("BHappened")),
        "in commit order, nothing skipped"
    );
    assert_eq!(ea.data.as_ref().unwrap()["position"], pa[0]);
    assert_eq!(eb.data.as_ref().unwrap()["position"], pb[0]);
    assert_eq!(ea.data.as_ref().unwrap()["actor"], ALICE);
    drop(tail); // the client goes away

    // Another namespace's events are not the tail's.
    append(&env, BOB, &stream_of(BOB, "c"), &["BobsHappened"], BOB).await;
    append(
        &env,
        ALICE,
        &stream_of(ALICE, "c"),
        &["CHappened", "DHappened"],
        ALICE,
    )
    .await;

    let b_id = eb.id.clone().unwrap();
    let mut resumed = Tail::open(&env, &uri, Some(&b_id)).await;
    let got = [resumed.event().await, resumed.event().await];
    let got: Vec<&str> = got.iter().map(|m| m.event.as_deref().unwrap()).collect();
    assert_eq!(got, ["CHappened", "DHappened"], "only what came after B");

    // `after` does the same for a first connection; Last-Event-ID wins over it.
    let a_id = ea.id.clone().unwrap();
    let mut from_a = Tail::open(&env, &format!("{uri}?after={a_id}"), None).await;
    assert_eq!(from_a.event().await.event.as_deref(), Some("BHappened"));
    let mut both = Tail::open(&env, &format!("{uri}?after={a_id}"), Some(&b_id)).await;
    assert_eq!(both.event().await.event.as_deref(), Some("CHappened"));

    // Filters apply to the tail too.
    let mut filtered = Tail::open(
        &env,
        &format!("{uri}?type=DHappened&function=c"),
        Some(&a_id),
    )
    .await;
    let d = filtered.event().await;
    assert_eq!(d.event.as_deref(), Some("DHappened"));
    assert_eq!(
        d.data.as_ref().unwrap()["stream"],
        stream_of(ALICE, "c").as_str()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tails_end_when_the_server_shuts_down() {
    let env = Env::new().await;
    let state = sless_api::AppState::new(
        env.db.pool.clone(),
        env.s3.blobs(),
        sless_api::Auth::hs256(SECRET, None, None),
    );
    let tails = state.tails.clone();
    let app = sless_api::router(state);
    let uri = events_uri(&ns(ALICE), "/stream");
    let mut tail = Tail::open_on(&app, &uri, None).await;
    assert!(tail.message().await.is_some());
    tails.close();
    assert!(tail.message().await.is_none(), "the stream ends");
    // A tail asked for afterwards ends at once.
    let mut late = Tail::open_on(&app, &uri, None).await;
    assert!(late.message().await.is_none());
}
