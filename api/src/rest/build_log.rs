//! `GET /v1/namespaces/{ns}/functions/{name}/versions/{v}/build-log`: what
//! the build of a version printed (`sless_store::build_logs` has how the
//! workers write it down).
//!
//! - Plain (`text/plain`): the log as it is now. While the build runs, the
//!   lines so far; once it ended, the whole stored log. The header
//!   `Sless-Build-State` says `running`, `succeeded` or `failed`.
//! - Followed (`?follow=true`, or `Accept: text/event-stream`): Server-Sent
//!   Events. Every line printed so far, then each new one as it comes, as
//!   `event: line` with the line as `data` (its `id` says where to resume
//!   with `Last-Event-ID`); then one `event: end` with
//!   `{"outcome": "succeeded"|"failed", "error": …}`, and the stream ends.
//!   A follower that comes before the build started waits for it. When the
//!   build starts again (a retry), a line says so and the new attempt's
//!   log follows.
//!
//! A follower wakes on the workers' NOTIFY (one LISTEN per API process,
//! [`Watch`](crate::plumbing::watch::Watch)) and looks again every [`POLL_EVERY`] in case one was lost.
//! A version that was never built and is not the function's current one
//! has no build log: 404, as for one that does not exist or was pruned.
//! A line's carriage returns (a progress bar's redraws) keep only what
//! the last one left, as a terminal shows it.
//!
//! The document lists both answers of the one status: `text/plain`, a
//! string, and `text/event-stream`, each event as an `EventSource` reads
//! it ([`BuildLogEvent`]).

use std::borrow::Cow;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderValue, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use futures_util::StreamExt;
use sless_api_types::{BuildLogEnd, BuildOutcome};
use sless_domain::FunctionKey;
use sless_store::blobs;
use sless_store::build_logs::{self, BuildLog, Outcome};
use tokio::sync::broadcast;
use utoipa::openapi::RefOr;
use utoipa::openapi::schema::{OneOfBuilder, Schema};
use utoipa::{PartialSchema, ToSchema};
use uuid::Uuid;

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::path::{FunctionPath, PathParams};
use crate::plumbing::watch::woken;
use crate::rest::events::{
    KEEP_ALIVE, LAST_EVENT_ID, RECONNECT_AFTER, event_schema, json_data, string,
};
use crate::rest::function::{load, path_key};
use crate::rest::versions::{existing, version_of};

/// How often a follower looks again when no NOTIFY woke it.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// The header that says where the build is.
pub const BUILD_STATE: &str = "sless-build-state";

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/versions/{version}/build-log", operation_id = "getBuildLog", tag = "versions",
    summary = "What the version's build printed, or follow it live",
    description = "Plain: the log as it is now (the lines so far while the build runs), with the header \
        `Sless-Build-State` (`running`, `succeeded`, `failed`). With `follow=true` or `Accept: text/event-stream`: \
        Server-Sent Events, every line so far then each new one as `event: line` (the line as `data`), \
        then one `event: end` with `{\"outcome\": \"succeeded\"|\"failed\", \"error\": …}` when the build ends. \
        A follower that comes before the build started waits for it. 404 when the version was never built.",
    params(FunctionPath,
        ("version" = u32, Path, description = "The version number"),
        ("follow" = Option<bool>, Query, description = "Stream the log until the build ends"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume a followed log after this line")),
    responses(
        (status = 200, description = "The log: as it is now (`text/plain`), or followed as it is written \
            (`text/event-stream`)",
            headers(("Sless-Build-State" = inline(BuildState), description = "Where the build is (the plain answer)")),
            content((String = "text/plain"), (BuildLogEvent = "text/event-stream")))))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name, version)): PathParams<(String, String, String)>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Response> {
    let key = path_key(&caller, &ns, &name)?;
    let follow = follow_asked(query, &headers)?;
    let f = existing(&state, &key).await?;
    let v = version_of(&f, &key, &version)?.version;
    let (n, fname) = (key.namespace.as_str(), key.name.as_str());
    let log = build_logs::find(&state.pool, n, fname, v).await?;
    if log.is_none() && f.current_version != Some(v) {
        return Err(never_built(&key, v));
    }
    if follow {
        let resume = match headers.get(&LAST_EVENT_ID) {
            Some(id) => Some(id.to_str().ok().and_then(Resume::parse).ok_or_else(|| {
                ApiError::invalid(
                    "Last-Event-ID",
                    "Last-Event-ID is not a line id this API sent",
                )
            })?),
            None => None,
        };
        return Ok(followed(&state, key, v, resume).into_response());
    }
    let Some(log) = log else {
        return Err(ApiError::not_found(format!(
            "the build of version {v} of function {fname:?} has not started yet \
             (follow it with ?follow=true to wait for it)"
        )));
    };
    let text = match &log.ended {
        None => build_logs::chunks_after(&state.pool, log.attempt, 0)
            .await?
            .into_iter()
            .map(|c| c.text)
            .collect(),
        Some(_) => stored_text(&state, &key, v, &log).await?,
    };
    let mut response =
        ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], text).into_response();
    response.headers_mut().insert(
        BUILD_STATE,
        HeaderValue::from_static(state_of(&log).as_str()),
    );
    Ok(response)
}

fn never_built(key: &FunctionKey, v: u32) -> ApiError {
    ApiError::not_found(format!(
        "version {v} of function {:?} was never built, so it has no build log",
        key.name.as_str()
    ))
}

/// Where a build is: the plain answer's `Sless-Build-State`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ToSchema)]
#[schema(rename_all = "lowercase")]
pub enum BuildState {
    Running,
    Succeeded,
    Failed,
}

impl BuildState {
    fn as_str(self) -> &'static str {
        match self {
            BuildState::Running => "running",
            BuildState::Succeeded => "succeeded",
            BuildState::Failed => "failed",
        }
    }
}

fn state_of(log: &BuildLog) -> BuildState {
    match log.ended.as_ref().map(|end| end.outcome) {
        None => BuildState::Running,
        Some(Outcome::Succeeded) => BuildState::Succeeded,
        Some(Outcome::Failed) => BuildState::Failed,
    }
}

/// Whether the log is to be followed: `follow=true|false` (the only
/// parameter), or an `Accept` that asks for an event stream.
fn follow_asked(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    headers: &HeaderMap,
) -> ApiResult<bool> {
    let Query(pairs) = query
        .map_err(|e| ApiError::invalid("query", format!("the query string cannot be read: {e}")))?;
    let mut follow = None;
    for (k, v) in pairs {
        if k != "follow" {
            return Err(ApiError::invalid(
                &k,
                format!("unknown parameter {k:?}; this route takes `follow`"),
            ));
        }
        if follow.is_some() {
            return Err(ApiError::invalid("follow", "`follow` is given twice"));
        }
        follow = Some(match v.as_str() {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => {
                return Err(ApiError::invalid(
                    "follow",
                    format!("`follow` is true or false, not {v:?}"),
                ));
            }
        });
    }
    let streams = headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.split(';').next().unwrap_or_default().trim() == "text/event-stream");
    Ok(follow.unwrap_or(streams))
}

/// The stored log of an ended build ("" when none was stored: its worker
/// died, taking what it had printed with it).
async fn stored_text(
    state: &AppState,
    key: &FunctionKey,
    v: u32,
    log: &BuildLog,
) -> ApiResult<String> {
    if !log.stored {
        return Ok(String::new());
    }
    let object = blobs::build_log_key(key.namespace.as_str(), key.name.as_str(), v);
    let bytes = state.blobs.get(&object).await?;
    Ok(String::from_utf8_lossy(&bytes).into_owned())
}

/// Where a reconnecting follower was: the attempt and how many of its
/// lines it had (`{attempt}.{lines}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Resume {
    attempt: Uuid,
    lines: u64,
}

impl Resume {
    fn parse(id: &str) -> Option<Resume> {
        let (attempt, lines) = id.split_once('.')?;
        Some(Resume {
            attempt: attempt.parse().ok()?,
            lines: lines.parse().ok()?,
        })
    }

    fn id(self) -> String {
        format!("{}.{}", self.attempt, self.lines)
    }
}

/// One follower: which attempt it reads and how far.
struct Follower {
    /// Counted in the metrics while it follows.
    _following: sless_telemetry::Following,
    state: AppState,
    key: FunctionKey,
    version: u32,
    wake: broadcast::Receiver<String>,
    payload: String,
    /// The attempt being read, and how many of its lines were seen.
    at: Option<Resume>,
    /// Lines of that attempt to read but not send (a resume).
    skip: u64,
    /// The chunks read so far, and the bytes of them taken as lines.
    seq: i32,
    taken: usize,
    /// Text after the last line end read.
    partial: String,
    pending: VecDeque<Event>,
    ended: bool,
}

fn followed(
    state: &AppState,
    key: FunctionKey,
    version: u32,
    resume: Option<Resume>,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>> + use<>> {
    let follower = Follower {
        _following: state.metrics.follow(sless_telemetry::Tail::BuildLog),
        wake: state.build_logs.subscribe(&state.pool),
        payload: build_logs::payload(key.namespace.as_str(), key.name.as_str(), version),
        state: state.clone(),
        key,
        version,
        at: resume.map(|r| Resume { lines: 0, ..r }),
        skip: resume.map_or(0, |r| r.lines),
        seq: 0,
        taken: 0,
        partial: String::new(),
        pending: VecDeque::from([Event::default().retry(RECONNECT_AFTER).comment("following")]),
        ended: false,
    };
    let events =
        futures_util::stream::unfold(follower, Follower::next).take_until(state.tails.closed());
    Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE))
}

impl Follower {
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Follower)> {
        loop {
            if let Some(event) = self.pending.pop_front() {
                return Some((Ok(event), self));
            }
            if self.ended {
                return None;
            }
            match self.read().await {
                Ok(true) => continue,
                Ok(false) => self.wait().await,
                Err(e) => {
                    // The client reconnects with the last line's id.
                    tracing::warn!(error = %e.detail, "following a build log failed; ending it");
                    return None;
                }
            }
        }
    }

    /// Reads what is new; false when there was nothing.
    async fn read(&mut self) -> ApiResult<bool> {
        let (ns, name) = (self.key.namespace.as_str(), self.key.name.as_str());
        let Some(log) = build_logs::find(&self.state.pool, ns, name, self.version).await? else {
            // Not started yet: still coming, unless the function moved on.
            let f = load(&self.state, &self.key).await?;
            if !f.exists() || f.current_version != Some(self.version) {
                let error = never_built(&self.key, self.version).detail;
                self.end(BuildOutcome::Failed, Some(error));
                return Ok(true);
            }
            return Ok(false);
        };
        if self.at.map(|r| r.attempt) != Some(log.attempt) {
            // A resume of another attempt, or a retry while following:
            // this attempt's log is read from its beginning.
            if self.at.is_some_and(|r| r.lines > 0) || self.skip > 0 {
                self.pending.push_back(
                    Event::default()
                        .event("line")
                        .data("sless: the build started again; its log follows"),
                );
            }
            self.at = Some(Resume {
                attempt: log.attempt,
                lines: 0,
            });
            self.skip = 0;
            self.seq = 0;
            self.taken = 0;
            self.partial.clear();
        }
        match &log.ended {
            None => {
                let chunks =
                    build_logs::chunks_after(&self.state.pool, log.attempt, self.seq).await?;
                let Some(last) = chunks.last() else {
                    return Ok(false);
                };
                self.seq = last.seq;
                let text: String = chunks.into_iter().map(|c| c.text).collect();
                self.lines(&text, false);
                Ok(true)
            }
            Some(end) => {
                let text = stored_text(&self.state, &self.key, self.version, &log).await?;
                // The stored log is the chunks put together: what was read
                // of them is its beginning.
                let rest = text.get(self.taken..).unwrap_or_default().to_owned();
                self.lines(&rest, true);
                let outcome = match end.outcome {
                    Outcome::Succeeded => BuildOutcome::Succeeded,
                    Outcome::Failed => BuildOutcome::Failed,
                };
                self.end(outcome, end.error.clone());
                Ok(true)
            }
        }
    }

    /// Turns `text` (following what was read) into line events; `last`:
    /// nothing follows it, so a line without its end is a line too.
    fn lines(&mut self, text: &str, last: bool) {
        self.taken += text.len();
        self.partial.push_str(text);
        let mut whole: Vec<String> = Vec::new();
        while let Some(end) = self.partial.find('\n') {
            whole.push(self.partial[..end].to_owned());
            self.partial.drain(..=end);
        }
        if last && !self.partial.is_empty() {
            whole.push(std::mem::take(&mut self.partial));
        }
        for line in whole {
            self.line(&line);
        }
    }

    /// A line of the attempt being read.
    fn line(&mut self, line: &str) {
        let Some(at) = self.at.as_mut() else {
            return;
        };
        at.lines += 1;
        if self.skip > 0 {
            self.skip -= 1;
            return;
        }
        let id = at.id();
        self.pending
            .push_back(Event::default().event("line").id(id).data(shown(line)));
    }

    fn end(&mut self, outcome: BuildOutcome, error: Option<String>) {
        let data = serde_json::to_string(&BuildLogEnd { outcome, error })
            .expect("a build's end serializes");
        self.pending
            .push_back(Event::default().event("end").data(data));
        self.ended = true;
    }

    /// Until a NOTIFY for this version, or [`POLL_EVERY`].
    async fn wait(&mut self) {
        let payload = &self.payload;
        woken(&mut self.wake, POLL_EVERY, |p| p == payload).await;
    }
}

/// One event of a followed build log, as the document describes it
/// (`events::event_schema`): a `line` (its `id` says where to resume after
/// it), or the `end`, whose `data` is a [`BuildLogEnd`] as JSON.
pub struct BuildLogEvent;

impl PartialSchema for BuildLogEvent {
    fn schema() -> RefOr<Schema> {
        let line = event_schema(
            string("A line of the log").enum_values(Some(["line"])),
            string("The line, as a terminal shows it"),
            "Where to resume after the line (`Last-Event-ID`)",
            false,
        );
        let end = event_schema(
            string("The build ended; the stream ends after it").enum_values(Some(["end"])),
            json_data::<BuildLogEnd>("How it ended (JSON)"),
            "The last line's (an `EventSource` keeps the last id sent)",
            false,
        );
        OneOfBuilder::new()
            .item(line)
            .item(end)
            .description(Some("One event of a followed build log"))
            .into()
    }
}

impl ToSchema for BuildLogEvent {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("BuildLogEvent")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((BuildLogEnd::name().into_owned(), BuildLogEnd::schema()));
        BuildLogEnd::schemas(schemas);
    }
}

/// A line as a terminal shows it: what the last carriage return left
/// (a line ending in CR LF keeps what came before the CR).
fn shown(line: &str) -> &str {
    let line = line.strip_suffix('\r').unwrap_or(line);
    match line.rfind('\r') {
        Some(cr) => &line[cr + 1..],
        None => line,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Both answers of 200, each with its schema: the plain log first
    /// (client generators take the first text type listed), then its
    /// events; and the plain answer's header.
    #[test]
    fn the_log_is_documented_as_plain_text_and_as_events() {
        use utoipa::Path;
        let op = __path_get::operation();
        let Some(RefOr::T(ok)) = op.responses.responses.get("200") else {
            panic!("no 200 in {:?}", op.responses.responses.keys());
        };
        let types: Vec<&str> = ok.content.keys().map(String::as_str).collect();
        assert_eq!(types, ["text/plain", "text/event-stream"]);
        let ok = serde_json::to_value(ok).unwrap();
        assert_eq!(ok["content"]["text/plain"]["schema"]["type"], "string");
        assert_eq!(
            ok["content"]["text/event-stream"]["schema"]["$ref"],
            "#/components/schemas/BuildLogEvent"
        );
        assert_eq!(
            ok["headers"]["Sless-Build-State"]["schema"]["enum"],
            serde_json::json!(["running", "succeeded", "failed"])
        );
    }

    /// A `line` or the `end`, told apart by `event`; the end's `data` is
    /// a `BuildLogEnd`, which is what `end` sends.
    #[test]
    fn an_event_is_a_line_or_the_end_with_its_outcome() {
        let schema = serde_json::to_value(BuildLogEvent::schema()).unwrap();
        let events: Vec<_> = schema["oneOf"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["properties"]["event"]["enum"].clone())
            .collect();
        assert_eq!(
            events,
            [serde_json::json!(["line"]), serde_json::json!(["end"])]
        );
        let end = &schema["oneOf"][1]["properties"]["data"];
        assert_eq!(end["contentMediaType"], "application/json");
        assert_eq!(
            end["contentSchema"]["$ref"],
            "#/components/schemas/BuildLogEnd"
        );
        let data = BuildLogEnd {
            outcome: BuildOutcome::Failed,
            error: Some("exit 1".into()),
        };
        assert_eq!(
            serde_json::to_value(data).unwrap(),
            serde_json::json!({"outcome": "failed", "error": "exit 1"})
        );
    }

    #[test]
    fn a_line_shows_what_its_last_carriage_return_left() {
        assert_eq!(shown("Collecting six"), "Collecting six");
        assert_eq!(shown("done\r"), "done");
        assert_eq!(shown(" 10%\r 50%\r100%"), "100%");
        assert_eq!(shown(""), "");
    }

    #[test]
    fn a_resume_id_reads_back() {
        let r = Resume {
            attempt: Uuid::now_v7(),
            lines: 42,
        };
        assert_eq!(Resume::parse(&r.id()), Some(r));
        for bad in [
            "",
            "42",
            "x.1",
            &format!("{}.x", r.attempt),
            &format!("{}.-1", r.attempt),
        ] {
            assert_eq!(Resume::parse(bad), None, "{bad:?}");
        }
    }
}
