//! `GET /v1/namespaces/{ns}/functions/{name}/logs`: what a function printed
//! (`sless_store::function_logs`; the workers write it down).
//!
//! - A page (`application/json`, [`LogPage`]): the lines that match the
//!   filters (`since`, `until`, `invocation`, `stream`, `q`), newest first
//!   (or `order=oldest`), `limit` at a time; `next_cursor` goes on. The
//!   function's count of lines not kept comes with it (`dropped`).
//! - A tail (`?follow=true`, or `Accept: text/event-stream`): Server-Sent
//!   Events, one `event: line` per line with the line as JSON in `data`
//!   and its id as `id`, oldest first, as they are written. It starts after
//!   `cursor` (or `Last-Event-ID`), else at `since`, else after the last
//!   line there is now. Lines get their ids in commit order, so a tail
//!   resumed after a line's id misses and repeats nothing — a page read
//!   oldest first and followed from its last id neither.
//!
//! A follower wakes on the workers' NOTIFY ([`Watch`](crate::plumbing::watch::Watch))
//! and looks again every [`POLL_EVERY`] in case one was lost.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, header};
use axum::response::sse::{Event, KeepAlive, Sse};
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use futures_util::StreamExt;
use sless_api_types::{LogLineView, LogPage};
use sless_store::function_logs::{self, Filter, LogLine, Stream};
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::paging::{DEFAULT_PAGE, MAX_PAGE};
use crate::plumbing::path::{FunctionPath, PathParams};
use crate::plumbing::watch::woken;
use crate::rest::events::{KEEP_ALIVE, LAST_EVENT_ID, RECONNECT_AFTER};
use crate::rest::function::known_function;

/// How often a follower looks again when no NOTIFY woke it.
pub const POLL_EVERY: Duration = Duration::from_secs(1);

/// The most bytes of `q`.
const MAX_TEXT: usize = 256;

/// A line as the API shows it.
pub fn view(l: &LogLine) -> LogLineView {
    LogLineView {
        id: l.id,
        at: l.at.to_rfc3339_opts(chrono::SecondsFormat::Micros, true),
        version: l.version,
        instance: l.instance.clone(),
        invocation: l.invocation.map(|i| i.to_string()),
        stream: l.stream.as_str().to_owned(),
        line: l.line.clone(),
        truncated: l.truncated,
    }
}

/// What the query asks for.
struct Asked {
    filter: Filter,
    follow: Option<bool>,
}

fn time(name: &str, value: &str) -> ApiResult<DateTime<Utc>> {
    DateTime::parse_from_rfc3339(value)
        .map(|t| t.with_timezone(&Utc))
        .map_err(|_| {
            ApiError::invalid(
                name,
                format!("{name} is a time in RFC 3339 (2026-12-07T10:00:00Z), not {value:?}"),
            )
        })
}

fn cursor(name: &str, value: &str) -> ApiResult<i64> {
    value
        .parse::<i64>()
        .ok()
        .filter(|c| *c >= 0)
        .ok_or_else(|| {
            ApiError::invalid(
                name,
                format!("{name} is a line's id from this API (a whole number), not {value:?}"),
            )
        })
}

fn asked(query: Result<Query<Vec<(String, String)>>, QueryRejection>) -> ApiResult<Asked> {
    let Query(pairs) = query
        .map_err(|e| ApiError::invalid("query", format!("the query string cannot be read: {e}")))?;
    let mut filter = Filter {
        newest_first: true,
        limit: DEFAULT_PAGE,
        ..Filter::default()
    };
    let mut follow = None;
    let mut seen: Vec<String> = Vec::new();
    for (key, value) in pairs {
        if seen.contains(&key) {
            return Err(ApiError::invalid(
                &key,
                format!("{key:?} is given more than once"),
            ));
        }
        match key.as_str() {
            "since" => filter.since = Some(time("since", &value)?),
            "until" => filter.until = Some(time("until", &value)?),
            "invocation" => {
                filter.invocation = Some(Uuid::try_parse(&value).map_err(|_| {
                    ApiError::invalid(
                        "invocation",
                        format!("invocation is an invocation record's id, not {value:?}"),
                    )
                })?);
            }
            "stream" => {
                filter.stream = Some(Stream::parse(&value).ok_or_else(|| {
                    ApiError::invalid(
                        "stream",
                        format!("stream is stdout or stderr, not {value:?}"),
                    )
                })?);
            }
            "q" => {
                if value.is_empty() || value.len() > MAX_TEXT {
                    return Err(ApiError::invalid(
                        "q",
                        format!("q is the text to look for, 1 to {MAX_TEXT} bytes"),
                    ));
                }
                filter.text = Some(value);
            }
            "limit" => filter.limit = crate::plumbing::paging::limit(Some(&value))?,
            "cursor" => filter.cursor = Some(cursor("cursor", &value)?),
            "order" => {
                filter.newest_first = match value.as_str() {
                    "newest" => true,
                    "oldest" => false,
                    _ => {
                        return Err(ApiError::invalid(
                            "order",
                            format!("order is newest or oldest, not {value:?}"),
                        ));
                    }
                };
            }
            "follow" => {
                follow = Some(match value.as_str() {
                    "true" | "1" => true,
                    "false" | "0" => false,
                    _ => {
                        return Err(ApiError::invalid(
                            "follow",
                            format!("follow is true or false, not {value:?}"),
                        ));
                    }
                });
            }
            _ => {
                return Err(ApiError::invalid(
                    &key,
                    format!(
                        "unknown parameter {key:?} (known: since, until, invocation, stream, \
                         q, limit, cursor, order, follow)"
                    ),
                ));
            }
        }
        seen.push(key);
    }
    if let (Some(since), Some(until)) = (filter.since, filter.until)
        && since >= until
    {
        return Err(ApiError::invalid("until", "until must come after since"));
    }
    Ok(Asked { filter, follow })
}

/// Whether the `Accept` header asks for an event stream.
fn wants_events(headers: &HeaderMap) -> bool {
    headers
        .get_all(header::ACCEPT)
        .iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(','))
        .any(|t| t.split(';').next().unwrap_or_default().trim() == "text/event-stream")
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}/logs", operation_id = "getFunctionLogs", tag = "functions",
    summary = "What the function printed, a page at a time or followed live",
    description = "A page (JSON): the lines that match, newest first (`order=oldest` for oldest first), \
        with `next_cursor` and the count of lines not kept (`dropped`). Followed (`follow=true` or \
        `Accept: text/event-stream`): Server-Sent Events, each line as `event: line` with the line as JSON \
        in `data` and its id as `id`, oldest first; it starts after `cursor` (or `Last-Event-ID`), else at \
        `since`, else with the next line written. A tail resumed after a line's id misses and repeats none. \
        Lines are kept for the namespace's retention (7 days unless the operator set another) and cut at 16 KiB.",
    params(FunctionPath,
        ("since" = Option<String>, Query, description = "Lines read at or after this time (RFC 3339)"),
        ("until" = Option<String>, Query, description = "Lines read before this time (RFC 3339)"),
        ("invocation" = Option<String>, Query, description = "Only what this call printed (an invocation record's id)"),
        ("stream" = Option<String>, Query, description = "`stdout` or `stderr`"),
        ("q" = Option<String>, Query, description = "Lines containing this text, ignoring case"),
        ("limit" = Option<u32>, Query, description = "Lines per page, 1 to 1000 (100)"),
        ("cursor" = Option<String>, Query, description = "A page: the `next_cursor` of the last one. A tail: the id of the last line seen"),
        ("order" = Option<String>, Query, description = "`newest` (the default) or `oldest` first"),
        ("follow" = Option<bool>, Query, description = "Follow the log as Server-Sent Events"),
        ("Last-Event-ID" = Option<String>, Header, description = "Resume a tail after this line")),
    responses(
        (status = 200, description = "A page of lines (JSON), or, followed, the lines as they are written",
            content((LogPage = "application/json"), (LogTailEvent = "text/event-stream")))))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Response> {
    let Asked { mut filter, follow } = asked(query)?;
    let key = known_function(&state, &caller, &ns, &name).await?;
    filter.namespace = key.namespace.to_string();
    filter.function = key.name.to_string();
    if follow.unwrap_or_else(|| wants_events(&headers)) {
        if let Some(id) = headers.get(&LAST_EVENT_ID) {
            filter.cursor = Some(cursor("Last-Event-ID", id.to_str().unwrap_or_default())?);
        }
        if filter.cursor.is_none() && filter.since.is_none() {
            filter.cursor = Some(
                function_logs::last_id(&state.pool, &filter.namespace, &filter.function).await?,
            );
        }
        filter.newest_first = false;
        filter.limit = MAX_PAGE;
        return Ok(followed(&state, filter).into_response());
    }
    let limit = filter.limit;
    filter.limit = limit + 1;
    let mut lines = function_logs::page(&state.pool, &filter).await?;
    let next_cursor = crate::plumbing::paging::cut(&mut lines, limit, |l| l.id.to_string());
    let dropped = function_logs::dropped(&state.pool, &filter.namespace, &filter.function).await?;
    Ok(Json(LogPage {
        items: lines.iter().map(view).collect(),
        next_cursor,
        dropped,
    })
    .into_response())
}

/// One event of a followed log, as the document describes it
/// (`events::event_schema`): `event: line`, the line ([`LogLineView`]) as
/// JSON in `data`, and its id in `id`.
pub struct LogTailEvent;

impl utoipa::PartialSchema for LogTailEvent {
    fn schema() -> utoipa::openapi::RefOr<utoipa::openapi::schema::Schema> {
        use crate::rest::events::{event_schema, json_data, string};
        event_schema(
            string("A line of the log").enum_values(Some(["line"])),
            json_data::<LogLineView>("The line (JSON)"),
            "The line's id: where to resume after it (`Last-Event-ID`)",
            true,
        )
        .into()
    }
}

impl utoipa::ToSchema for LogTailEvent {
    fn name() -> std::borrow::Cow<'static, str> {
        std::borrow::Cow::Borrowed("LogTailEvent")
    }

    fn schemas(
        schemas: &mut Vec<(
            String,
            utoipa::openapi::RefOr<utoipa::openapi::schema::Schema>,
        )>,
    ) {
        use utoipa::PartialSchema;
        schemas.push((LogLineView::name().into_owned(), LogLineView::schema()));
        LogLineView::schemas(schemas);
    }
}

/// One tail: the filter, moved on past each line sent.
struct Follower {
    _following: sless_telemetry::Following,
    state: AppState,
    filter: Filter,
    /// `{namespace}/{function}`, as the workers' NOTIFY names it.
    payload: String,
    wake: broadcast::Receiver<String>,
    pending: VecDeque<Event>,
}

fn followed(
    state: &AppState,
    filter: Filter,
) -> Sse<impl futures_util::Stream<Item = Result<Event, Infallible>> + use<>> {
    let follower = Follower {
        _following: state.metrics.follow(sless_telemetry::Tail::FunctionLog),
        payload: format!("{}/{}", filter.namespace, filter.function),
        wake: state.function_logs.subscribe(&state.pool),
        state: state.clone(),
        filter,
        pending: VecDeque::from([Event::default().retry(RECONNECT_AFTER).comment("following")]),
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
            match function_logs::page(&self.state.pool, &self.filter).await {
                Ok(lines) if lines.is_empty() => self.wait().await,
                Ok(lines) => {
                    for l in &lines {
                        let data = serde_json::to_string(&view(l)).unwrap_or_default();
                        self.pending.push_back(
                            Event::default()
                                .event("line")
                                .id(l.id.to_string())
                                .data(data),
                        );
                    }
                    self.filter.cursor = lines.last().map(|l| l.id).or(self.filter.cursor);
                }
                Err(e) => {
                    // The client reconnects with the last line's id.
                    tracing::warn!(error = %e, "following a function's log failed; ending it");
                    return None;
                }
            }
        }
    }

    /// Until a NOTIFY for this function, or [`POLL_EVERY`].
    async fn wait(&mut self) {
        let payload = &self.payload;
        woken(&mut self.wake, POLL_EVERY, |p| {
            p == "*" || p.lines().any(|l| l == payload)
        })
        .await;
    }
}
