//! The audit log: pages of it, and its live tail.

use sless_api_types::{EventEntry, EventPage};

use crate::Client;
use crate::error::{Error, Result};
use crate::http::Call;
use crate::sse::{Resuming, SseEvent, SseReader, Tail};

/// The audit log's filters; they combine.
#[derive(Debug, Clone, Default)]
pub struct EventFilter {
    /// One function's stream, by name.
    pub function: Option<String>,
    /// One stream exactly (`function/{ns}/{name}`, `job/{ns}/{name}`).
    pub stream: Option<String>,
    /// Event types (any of them).
    pub types: Vec<String>,
    /// Who caused it: a token's `sub`, or `system:<role>`.
    pub actor: Option<String>,
    /// Recorded at or after (RFC 3339).
    pub since: Option<String>,
    /// Recorded before (RFC 3339).
    pub until: Option<String>,
    /// Pages: the `next` of the page before; the tail: resume after it.
    pub after: Option<String>,
    /// Entries per page (the API's default: 100).
    pub limit: Option<u32>,
    /// `newest` (the API's default) or `oldest` first.
    pub order: Option<String>,
    /// Only for [`Client::list_all_events`]: one namespace.
    pub namespace: Option<String>,
}

impl EventFilter {
    fn apply<'a>(&self, mut call: Call<'a>, paging: bool) -> Call<'a> {
        call = call
            .query_opt("function", self.function.clone())
            .query_opt("stream", self.stream.clone())
            .query_opt("actor", self.actor.clone())
            .query_opt("since", self.since.clone())
            .query_opt("until", self.until.clone())
            .query_opt("after", self.after.clone());
        for t in &self.types {
            call = call.query("type", t);
        }
        if paging {
            call = call
                .query_opt("limit", self.limit)
                .query_opt("order", self.order.clone())
                .query_opt("namespace", self.namespace.clone());
        }
        call
    }
}

/// The audit log as it is written.
pub struct EventStream(Resuming<EventTail>);

/// What the audit log's tail is opened with.
struct EventTail(EventFilter);

impl Tail for EventTail {
    fn counts(&self, _: &SseEvent) -> bool {
        true
    }

    async fn reopen(&self, client: &Client, after: Option<&str>) -> Result<SseReader> {
        let mut filter = self.0.clone();
        filter.after = after.map(str::to_owned).or(filter.after);
        client.open_tail(&filter).await
    }
}

impl EventStream {
    /// The next event, as it commits. A stream that breaks is taken up
    /// again after the last event read, so none is skipped or repeated.
    pub async fn next(&mut self) -> Option<Result<EventEntry>> {
        let e = match self.0.next().await? {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        Some(serde_json::from_str(&e.data).map_err(|err| Error::Decode {
            endpoint: self.0.client.endpoint().to_owned(),
            message: format!("an audit log event does not read: {err}"),
        }))
    }

    /// The next event before `deadline`: [`Error::Timeout`] (naming
    /// `within`, the whole wait) once it has passed, [`Error::Connect`]
    /// when the API ended the stream.
    pub async fn next_by(
        &mut self,
        deadline: tokio::time::Instant,
        within: std::time::Duration,
    ) -> Result<EventEntry> {
        match tokio::time::timeout_at(deadline, self.next()).await {
            Err(_) => Err(Error::Timeout {
                endpoint: self.0.client.endpoint().to_owned(),
                seconds: within.as_secs(),
            }),
            Ok(None) => Err(Error::Connect {
                endpoint: self.0.client.endpoint().to_owned(),
                message: "the audit log's stream ended".into(),
            }),
            Ok(Some(event)) => event,
        }
    }

    /// Where the stream is: the id to resume after.
    pub fn last_id(&self) -> Option<&str> {
        self.0.last_id()
    }
}

impl Client {
    /// `GET /events`: one page of the namespace's audit log.
    pub async fn list_events(&self, filter: &EventFilter) -> Result<EventPage> {
        let path = self.in_namespace("/events");
        let mut filter = filter.clone();
        filter.namespace = None;
        self.json(filter.apply(Call::get(&path), true)).await
    }

    /// `GET /v1/events`: every namespace's audit log (admin tokens only).
    pub async fn list_all_events(&self, filter: &EventFilter) -> Result<EventPage> {
        self.json(filter.apply(Call::get("/v1/events"), true)).await
    }

    /// `GET /events/stream`: what commits from now on (or after
    /// `filter.after`), as it commits.
    pub async fn tail_events(&self, filter: &EventFilter) -> Result<EventStream> {
        let reader = self.open_tail(filter).await?;
        let tail = EventTail(filter.clone());
        Ok(EventStream(Resuming::new(
            self.clone(),
            tail,
            reader,
            filter.after.clone(),
        )))
    }

    async fn open_tail(&self, filter: &EventFilter) -> Result<SseReader> {
        let path = self.in_namespace("/events/stream");
        let mut call = filter.apply(Call::get(&path), false);
        call.streaming = true;
        call.headers.insert(
            reqwest::header::ACCEPT,
            reqwest::header::HeaderValue::from_static("text/event-stream"),
        );
        Ok(SseReader::new(self.send(call).await?))
    }
}
