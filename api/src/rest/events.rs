//! The audit log: who changed what, and when.
//!
//! - `GET /v1/namespaces/{ns}/events`: one page of the namespace's events,
//!   newest (or oldest) first, filtered by stream (or function), type,
//!   actor and time; `next` is the cursor of the page after.
//! - `GET /v1/events`: the same across namespaces (`namespace` narrows it),
//!   for admin tokens only: any other token gets 403 `forbidden`. The route
//!   names no namespace, so there is nothing to hide by answering 404.
//! - `GET /v1/namespaces/{ns}/events/stream`: a live tail as Server-Sent
//!   Events. Each event's `id` is where to resume after it (`Last-Event-ID`,
//!   or `after` on the first connection), its `event` the event type, its
//!   `data` the entry as the list shows it. A new tail starts at the
//!   watermark: with what commits from now on, and possibly a few events
//!   that committed just before while an older transaction still ran (never
//!   fewer: a gap is worse than a repeat). The tail reads in the log's
//!   watermark order (`sless_store::audit::tail`), so an event whose
//!   transaction commits late arrives late, never not at all. It polls every
//!   `POLL_EVERY`; it sends its resume point first, then again at least
//!   every `PROGRESS_EVERY` while filtered-out events move it on, so a
//!   reconnecting client need not read those again. A comment every
//!   `KEEP_ALIVE` keeps quiet connections open.
//!
//! The document describes each event of the tail as an `EventSource`
//! reads it ([`AuditTailEvent`], built by [`event_schema`], which the build
//! log's events share).
//!
//! The tail is the response body itself: no task is spawned for it, and it
//! stops when the client goes away (the body is dropped), when the
//! database fails (the client reconnects with its `Last-Event-ID`), or when
//! the server shuts down (`Tails::close`).
//!
//! Bad parameters are 422 `invalid-field` naming the parameter: an unknown
//! name, a repeated one (only `type` repeats), an empty value, one with a
//! NUL character (no text in the log holds one, nor can it), a `limit`
//! outside 1..=1000, a time that is not RFC 3339, `since` after `until`, an
//! `order` other than `newest`/`oldest`, a cursor this API did not give out.

use std::borrow::Cow;
use std::collections::VecDeque;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use axum::Json;
use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::{HeaderMap, HeaderName};
use axum::response::sse::{Event, KeepAlive, Sse};
use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::{Stream, StreamExt};
use serde_json::{Value, json};
use sless_api_types::EventEntry;
use sless_domain::{FunctionKey, FunctionName, Namespace};
use sless_store::PgPool;
use sless_store::audit::{self, Entry, Filter, Order, PageCursor};
use sless_store::eventlog::Checkpoint;
use tokio::sync::watch;
use tokio::time::Instant;
use utoipa::openapi::RefOr;
use utoipa::openapi::extensions::Extensions;
use utoipa::openapi::schema::{ObjectBuilder, Schema, Type};
use utoipa::{IntoParams, PartialSchema, ToSchema};

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::paging;
use crate::plumbing::path::{NamespacePath, PathParams};

/// The most `type` values one request may give.
pub const MAX_TYPES: usize = 50;
/// The longest value of any parameter.
pub const MAX_VALUE_LEN: usize = 512;
/// How often a tail looks for new events.
pub const POLL_EVERY: Duration = Duration::from_millis(250);
/// How often a tail reads while events are coming: for `BURST` after the
/// last one it sent (what one change causes — an upload's build and deploy —
/// comes in bursts, and its follower sees each step within this).
pub const BURST_POLL_EVERY: Duration = Duration::from_millis(20);
pub const BURST: Duration = Duration::from_secs(5);
/// The most events a tail reads at once; a full read is followed by the
/// next at once.
pub const TAIL_BATCH: u32 = 500;
/// How often, at least, a tail sends its resume point when filtered-out
/// events moved it on.
pub const PROGRESS_EVERY: Duration = Duration::from_secs(15);
/// A comment on a quiet tail, this often.
pub const KEEP_ALIVE: Duration = Duration::from_secs(15);
/// How long an `EventSource` waits before it reconnects.
pub const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// The header a reconnecting `EventSource` sends.
pub const LAST_EVENT_ID: HeaderName = HeaderName::from_static("last-event-id");

/// Ends every tail, for a server that shuts down: its graceful shutdown
/// waits for responses to end, and a tail would not by itself.
#[derive(Clone, Debug)]
pub struct Tails {
    stop: Arc<watch::Sender<bool>>,
}

impl Default for Tails {
    fn default() -> Self {
        Tails {
            stop: Arc::new(watch::Sender::new(false)),
        }
    }
}

impl Tails {
    /// Ends every tail now and every tail asked for from now on.
    pub fn close(&self) {
        self.stop.send_replace(true);
    }

    pub(crate) fn closed(&self) -> impl Future<Output = ()> + Send + use<> {
        let mut rx = self.stop.subscribe();
        async move {
            let _ = rx.wait_for(|closed| *closed).await;
        }
    }
}

/// One Server-Sent Event as the document describes a `text/event-stream`
/// answer: under OpenAPI 3.1 the media type's schema is that of each
/// event, with the fields an `EventSource` reads — `event` (its name),
/// `data` and `id` (the last one sent, when the event has none of its
/// own). Comments, and blocks without data (the retry interval, a resume
/// point), are not events. `id` is always documented, and required when
/// every event carries its own.
pub(crate) fn event_schema(
    event: ObjectBuilder,
    data: ObjectBuilder,
    id: &str,
    id_required: bool,
) -> ObjectBuilder {
    let event = ObjectBuilder::new()
        .schema_type(Type::Object)
        .property("event", event)
        .required("event")
        .property("data", data)
        .required("data")
        .property("id", string(id));
    if id_required {
        event.required("id")
    } else {
        event
    }
}

/// A string, described.
pub(crate) fn string(description: &str) -> ObjectBuilder {
    ObjectBuilder::new()
        .schema_type(Type::String)
        .description(Some(description))
}

/// An event's `data` that is a JSON document of the component `T`.
pub(crate) fn json_data<T: ToSchema>(description: &str) -> ObjectBuilder {
    // `contentSchema` (JSON Schema 2020-12, the dialect of OpenAPI 3.1)
    // has no field in utoipa's schema object; its extensions are written
    // beside the other members under the names they are given.
    let content_schema = json!({ "$ref": format!("#/components/schemas/{}", T::name()) });
    string(description)
        .content_media_type("application/json")
        .extensions(Some(Extensions::from_iter([(
            "contentSchema",
            content_schema,
        )])))
}

/// One event of the audit log's tail, as the document describes it
/// ([`event_schema`]): `event` is the event's type, `data` the entry as the
/// list shows it ([`EventEntry`], as JSON), and `id` where to resume after it.
pub struct AuditTailEvent;

impl PartialSchema for AuditTailEvent {
    fn schema() -> RefOr<Schema> {
        event_schema(
            string("The event's type (`FunctionUploaded`, ...), as `type` in `data`"),
            json_data::<EventEntry>("The entry, as the list shows it (JSON)"),
            "Where to resume after it (`Last-Event-ID`, or `after`)",
            true,
        )
        .description(Some("One event of the audit log's tail"))
        .into()
    }
}

impl ToSchema for AuditTailEvent {
    fn name() -> Cow<'static, str> {
        Cow::Borrowed("AuditTailEvent")
    }

    fn schemas(schemas: &mut Vec<(String, RefOr<Schema>)>) {
        schemas.push((EventEntry::name().into_owned(), EventEntry::schema()));
        EventEntry::schemas(schemas);
    }
}

/// The query parameters of the three routes, as given.
#[derive(Debug, Default)]
struct Params {
    namespace: Option<String>,
    stream: Option<String>,
    function: Option<String>,
    types: Vec<String>,
    actor: Option<String>,
    since: Option<String>,
    until: Option<String>,
    after: Option<String>,
    limit: Option<String>,
    order: Option<String>,
}

/// The stream filter of the three routes, as they document it.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct StreamFilter {
    /// One stream, exactly (`function/{ns}/{name}`)
    pub stream: Option<String>,
}

/// The function filter of a namespace's routes, as they document it.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct FunctionFilter {
    /// One function's stream, by name (not with `stream`)
    pub function: Option<String>,
}

/// The other filters of the three routes, as they document them.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventFilters {
    /// Event types; repeat for several (any matches)
    #[param(rename = "type", style = Form, explode)]
    pub types: Option<Vec<String>>,
    /// Who caused the event: a token's `sub`, or `system:<role>`
    pub actor: Option<String>,
    /// Recorded at or after (RFC 3339)
    #[param(format = DateTime)]
    pub since: Option<String>,
    /// Recorded before (RFC 3339)
    #[param(format = DateTime)]
    pub until: Option<String>,
}

/// The paging of the two lists, as they document it.
#[derive(IntoParams)]
#[into_params(parameter_in = Query)]
pub struct EventPaging {
    /// The `next` of the page before
    pub after: Option<String>,
    /// Entries per page (default 100)
    #[param(minimum = 1, maximum = 1000)]
    pub limit: Option<u32>,
    /// `newest` (default) or `oldest` first
    pub order: Option<String>,
}

const FILTERS: [&str; 6] = ["stream", "function", "type", "actor", "since", "until"];
const PAGING: [&str; 3] = ["after", "limit", "order"];

/// Reads the query string, refusing names outside `known`, repeats (but
/// of `type`), empty and overlong values.
fn params(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
    known: &[&str],
) -> ApiResult<Params> {
    let Query(pairs) = query
        .map_err(|e| ApiError::invalid("query", format!("the query string cannot be read: {e}")))?;
    let mut p = Params::default();
    for (key, value) in pairs {
        if !known.contains(&key.as_str()) {
            return Err(ApiError::invalid(
                &key,
                format!(
                    "unknown query parameter {key:?} (known: {})",
                    known.join(", ")
                ),
            ));
        }
        if value.is_empty() {
            return Err(ApiError::invalid(&key, format!("{key} must not be empty")));
        }
        if value.contains('\0') {
            return Err(ApiError::invalid(
                &key,
                format!("{key} must not contain a NUL character"),
            ));
        }
        if value.len() > MAX_VALUE_LEN {
            return Err(ApiError::invalid(
                &key,
                format!("{key} is longer than {MAX_VALUE_LEN} bytes"),
            ));
        }
        let slot = match key.as_str() {
            "type" => {
                if p.types.len() == MAX_TYPES {
                    return Err(ApiError::invalid(
                        "type",
                        format!("at most {MAX_TYPES} types may be given"),
                    ));
                }
                p.types.push(value);
                continue;
            }
            "namespace" => &mut p.namespace,
            "stream" => &mut p.stream,
            "function" => &mut p.function,
            "actor" => &mut p.actor,
            "since" => &mut p.since,
            "until" => &mut p.until,
            "after" => &mut p.after,
            "limit" => &mut p.limit,
            "order" => &mut p.order,
            _ => unreachable!("every known name has a slot"),
        };
        if slot.replace(value).is_some() {
            return Err(ApiError::invalid(
                &key,
                format!("{key} is given more than once"),
            ));
        }
    }
    Ok(p)
}

/// An RFC 3339 time.
fn time(field: &str, value: Option<&str>) -> ApiResult<Option<DateTime<Utc>>> {
    let Some(value) = value else { return Ok(None) };
    DateTime::parse_from_rfc3339(value)
        .map(|t| Some(t.with_timezone(&Utc)))
        .map_err(|e| {
            ApiError::invalid(
                field,
                format!(
                    "{field} must be an RFC 3339 time such as 2026-11-30T12:00:00Z \
                     (a + in an offset must be sent as %2B): {value:?}: {e}"
                ),
            )
        })
}

/// The filter the parameters ask for, within `namespace` when one is fixed.
fn filter(p: &Params, namespace: Option<Namespace>) -> ApiResult<Filter> {
    let stream = match (&p.function, &p.stream) {
        (Some(_), Some(_)) => {
            return Err(ApiError::invalid(
                "function",
                "give stream or function, not both",
            ));
        }
        (Some(name), None) => {
            let Some(ns) = &namespace else {
                return Err(ApiError::invalid(
                    "function",
                    "function needs a namespace: give namespace too, or a whole stream",
                ));
            };
            let name = FunctionName::parse(name).map_err(|_| {
                ApiError::invalid(
                    "function",
                    format!("{name:?} is not a function name (lower-case letters, digits and -)"),
                )
            })?;
            Some(FunctionKey::new(ns.clone(), name).stream())
        }
        (None, stream) => stream.clone(),
    };
    let since = time("since", p.since.as_deref())?;
    let until = time("until", p.until.as_deref())?;
    if let (Some(s), Some(u)) = (since, until)
        && s > u
    {
        return Err(ApiError::invalid(
            "until",
            format!("until ({u}) is before since ({s})"),
        ));
    }
    Ok(Filter {
        namespace: namespace.map(|ns| ns.to_string()),
        stream,
        types: p.types.clone(),
        actor: p.actor.clone(),
        since,
        until,
    })
}

/// `limit`, `order` and `after` of a page.
fn paging(p: &Params) -> ApiResult<(u32, Order, Option<i64>)> {
    let limit = paging::limit(p.limit.as_deref())?;
    let order = match &p.order {
        None => Order::default(),
        Some(o) => Order::parse(o).ok_or_else(|| {
            ApiError::invalid(
                "order",
                format!("order must be newest or oldest (got {o:?})"),
            )
        })?,
    };
    let after = match &p.after {
        None => None,
        Some(token) => {
            let c = PageCursor::decode(token).ok_or_else(|| {
                ApiError::invalid(
                    "after",
                    "after is not a cursor this API gave out: pass the next of the page before",
                )
            })?;
            if c.order != order {
                return Err(ApiError::invalid(
                    "after",
                    format!(
                        "this cursor pages {} first: ask with order={}",
                        c.order.as_str(),
                        c.order.as_str()
                    ),
                ));
            }
            Some(c.position)
        }
    };
    Ok((limit, order, after))
}

/// An entry as the API shows it.
pub fn view(e: &Entry) -> Value {
    json!({
        "position": e.position,
        "namespace": e.namespace,
        "stream": e.stream,
        "version": e.version,
        "type": e.event_type,
        "actor": e.actor,
        "request_id": e.request_id,
        "time": e.recorded_at.to_rfc3339_opts(SecondsFormat::Micros, true),
        "data": e.data,
    })
}

async fn page(state: &AppState, filter: &Filter, p: &Params) -> ApiResult<Json<Value>> {
    let (limit, order, after) = paging(p)?;
    let mut entries = audit::page(&state.pool, filter, order, after, limit + 1).await?;
    let next = paging::cut(&mut entries, limit, |e| {
        PageCursor {
            order,
            position: e.position,
        }
        .encode()
    });
    let items: Vec<Value> = entries.iter().map(view).collect();
    Ok(Json(json!({ "items": items, "next": next })))
}

/// `GET /v1/namespaces/{ns}/events`.
#[utoipa::path(get, path = "/namespaces/{ns}/events", operation_id = "listNamespaceEvents", tag = "events",
    summary = "The namespace's audit log, a page at a time",
    description = "Every event of the namespace: who (`actor`, the token's `sub` or `system:<role>`) \
        changed what (`stream`, `type`, `data`), when (`time`) and in which request (`request_id`). \
        Filters combine; `type` may be repeated (any of them). Page with `after` set to the `next` of \
        the page before.",
    params(NamespacePath,
        StreamFilter, FunctionFilter, EventFilters, EventPaging),
    responses((status = 200, description = "One page of entries", body = crate::rest::openapi::EventPage)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    let namespace = caller.namespace(&ns)?;
    let known = [&FILTERS[..], &PAGING[..]].concat();
    let p = params(query, &known)?;
    let filter = filter(&p, Some(namespace))?;
    page(&state, &filter, &p).await
}

/// `GET /v1/events`: every namespace's audit log, for admins.
#[utoipa::path(get, path = "/events", operation_id = "listEvents", tag = "events",
    summary = "The audit log of every namespace (admin tokens only)",
    description = "As `/v1/namespaces/{ns}/events`, across namespaces; `namespace` narrows it to one. \
        A token without the admin claim gets 403.",
    params(("namespace" = Option<String>, Query, description = "One namespace"),
        StreamFilter,
        ("function" = Option<String>, Query, description = "One function's stream, by name (needs `namespace`; not with `stream`)"),
        EventFilters, EventPaging),
    responses((status = 200, description = "One page of entries", body = crate::rest::openapi::EventPage)))]
pub async fn list_all(
    State(state): State<AppState>,
    caller: Caller,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Json<Value>> {
    if !caller.admin {
        return Err(ApiError::forbidden(
            "the audit log of every namespace is for admin tokens; \
             read your own at /v1/namespaces/{ns}/events",
        ));
    }
    let known = [&["namespace"][..], &FILTERS[..], &PAGING[..]].concat();
    let p = params(query, &known)?;
    let namespace = p
        .namespace
        .as_deref()
        .map(|ns| {
            Namespace::parse(ns).map_err(|_| {
                ApiError::invalid("namespace", format!("{ns:?} is not a namespace name"))
            })
        })
        .transpose()?;
    let filter = filter(&p, namespace)?;
    page(&state, &filter, &p).await
}

/// `GET /v1/namespaces/{ns}/events/stream`.
#[utoipa::path(get, path = "/namespaces/{ns}/events/stream", operation_id = "tailEvents", tag = "events",
    summary = "Follow the namespace's audit log live (Server-Sent Events)",
    description = "Each event's `id` is where to resume after it, its `event` the event type and its \
        `data` the entry as the list shows it. Starts with what commits from now on (and possibly a few \
        events that committed just before, while an older transaction was still running), or after \
        the id in `Last-Event-ID` (sent by a reconnecting `EventSource`) or `after`. Events arrive in commit \
        order, none skipped. Takes the list's filters.",
    params(NamespacePath,
        ("Last-Event-ID" = Option<String>, Header, description = "Resume after this event id"),
        ("after" = Option<String>, Query, description = "Resume after this event id (when `Last-Event-ID` is not sent)"),
        StreamFilter, FunctionFilter, EventFilters),
    responses((status = 200, description = "An endless stream of events", content_type = "text/event-stream", body = AuditTailEvent)))]
pub async fn tail(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
    headers: HeaderMap,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<Sse<impl Stream<Item = Result<Event, Infallible>> + use<>>> {
    let namespace = caller.namespace(&ns)?;
    let known = [&FILTERS[..], &["after"][..]].concat();
    let p = params(query, &known)?;
    let filter = filter(&p, Some(namespace))?;
    let last_event_id = match headers.get(&LAST_EVENT_ID) {
        Some(v) => {
            let v = v.to_str().map_err(|_| {
                ApiError::invalid("Last-Event-ID", "Last-Event-ID is not an id this API sent")
            })?;
            // An empty one is what a client that has none may send.
            (!v.is_empty()).then(|| v.to_owned())
        }
        None => None,
    };
    let resume = match (last_event_id, &p.after) {
        (Some(id), _) => Some(("Last-Event-ID", id)),
        (None, Some(after)) => Some(("after", after.clone())),
        (None, None) => None,
    };
    let start = match resume {
        Some((field, id)) => audit::decode_checkpoint(&id).ok_or_else(|| {
            ApiError::invalid(field, format!("{field} is not an event id this API sent"))
        })?,
        None => {
            let mut conn = state.pool.acquire().await?;
            audit::tail_start(&mut conn).await?
        }
    };
    let tailer = Tailer {
        _following: state.metrics.follow(sless_telemetry::Tail::Audit),
        pool: state.pool.clone(),
        filter,
        at: start,
        announced: None,
        announced_at: Instant::now(),
        pending: VecDeque::new(),
        read_at_once: true,
        // A client that starts following is often about to cause events.
        sent_at: Some(Instant::now()),
    };
    let events =
        futures_util::stream::unfold(tailer, Tailer::next).take_until(state.tails.closed());
    Ok(Sse::new(events).keep_alive(KeepAlive::new().interval(KEEP_ALIVE)))
}

/// One client's tail: where it is, and what it has read but not sent.
struct Tailer {
    /// Counted in the metrics while it follows.
    _following: sless_telemetry::Following,
    pool: PgPool,
    filter: Filter,
    /// Where the next read starts.
    at: Checkpoint,
    /// The resume point last sent, None before the first.
    announced: Option<Checkpoint>,
    announced_at: Instant,
    pending: VecDeque<Entry>,
    /// Read without waiting first (the start, or after a full read).
    read_at_once: bool,
    /// When the last event was sent, or the tail started (reads come faster
    /// for `BURST` after).
    sent_at: Option<Instant>,
}

impl Tailer {
    /// The next event to send; None ends the stream.
    async fn next(mut self) -> Option<(Result<Event, Infallible>, Tailer)> {
        loop {
            if let Some(e) = self.pending.pop_front() {
                let event = sse_event(&e);
                self.announced = Some(e.checkpoint());
                self.announced_at = Instant::now();
                self.sent_at = Some(self.announced_at);
                return Some((Ok(event), self));
            }
            let moved_on = self.announced != Some(self.at);
            if moved_on
                && (self.announced.is_none() || self.announced_at.elapsed() >= PROGRESS_EVERY)
            {
                // An id with no data: the client's Last-Event-ID moves on, no
                // event is dispatched.
                let first = self.announced.is_none();
                self.announced = Some(self.at);
                self.announced_at = Instant::now();
                let event = Event::default().id(audit::encode_checkpoint(self.at));
                let event = if first {
                    event.retry(RECONNECT_AFTER).comment("tailing")
                } else {
                    event.comment("progress")
                };
                return Some((Ok(event), self));
            }
            if !std::mem::take(&mut self.read_at_once) {
                let busy = self.sent_at.is_some_and(|at| at.elapsed() < BURST);
                tokio::time::sleep(if busy { BURST_POLL_EVERY } else { POLL_EVERY }).await;
            }
            match self.read().await {
                Ok(tail) => {
                    self.read_at_once = tail.entries.len() >= TAIL_BATCH as usize;
                    self.at = tail.next;
                    self.pending.extend(tail.entries);
                }
                Err(e) => {
                    // The client reconnects after `RECONNECT_AFTER` with the
                    // last id it got, and the request says what is wrong.
                    tracing::warn!(error = %e, "an audit log tail failed; ending it");
                    return None;
                }
            }
        }
    }

    async fn read(&self) -> sless_store::Result<audit::Tail> {
        let mut conn = self.pool.acquire().await?;
        audit::tail(&mut conn, &self.filter, self.at, TAIL_BATCH).await
    }
}

fn sse_event(e: &Entry) -> Event {
    let event = Event::default()
        .id(audit::encode_checkpoint(e.checkpoint()))
        .data(view(e).to_string());
    // An event name cannot hold a line break; types sless writes never do.
    if e.event_type.contains(['\n', '\r']) {
        event
    } else {
        event.event(&e.event_type)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What an `EventSource` reads of each event: its type as `event`, the
    /// entry as JSON in `data`, and an `id` on every one.
    #[test]
    fn a_tail_event_is_documented_as_an_event_source_reads_it() {
        let schema = serde_json::to_value(AuditTailEvent::schema()).unwrap();
        assert_eq!(schema["required"], json!(["event", "data", "id"]));
        let data = &schema["properties"]["data"];
        assert_eq!(data["type"], "string");
        assert_eq!(data["contentMediaType"], "application/json");
        assert_eq!(
            data["contentSchema"]["$ref"],
            "#/components/schemas/EventEntry"
        );
        let mut named = Vec::new();
        AuditTailEvent::schemas(&mut named);
        let names: Vec<&str> = named.iter().map(|(name, _)| name.as_str()).collect();
        assert!(names.contains(&"EventEntry"), "{names:?}");
    }

    /// PostgreSQL's text cannot hold a NUL, so no filter with one reaches it.
    #[test]
    fn a_value_with_a_nul_is_refused_naming_its_parameter() {
        for (name, value) in [
            ("type", "Function\0Created"),
            ("actor", "\0"),
            ("stream", "a\0"),
        ] {
            let query = Ok(Query(vec![(name.to_owned(), value.to_owned())]));
            let refused = params(query, &FILTERS).unwrap_err();
            assert_eq!(refused.kind, "invalid-field", "{name}");
            assert_eq!(refused.field.as_deref(), Some(name));
        }
        let fine = Ok(Query(vec![(
            "type".to_owned(),
            "FunctionCreated".to_owned(),
        )]));
        assert_eq!(params(fine, &FILTERS).unwrap().types, ["FunctionCreated"]);
    }
}
