//! What a function printed: its last lines, filtered by text, call and
//! stream, with a live mode (`assets/console.js` follows `logs/stream`,
//! the API's tail as the session's caller, from the last line shown, and
//! adds each new line at the bottom without a reload); and one call's page:
//! its invocation record and the lines it printed (a failed call's
//! traceback among them).

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use maud::{Markup, html};
use sless_api_types::{InvocationWithLines, LogLineView, LogPage};

use super::calls::api_json;
use super::page::{self, Page};
use super::session::Session;
use super::text::Text;
use crate::AppState;
use crate::plumbing::error::ApiError;
use crate::plumbing::path::PathParams;

type Params = Result<Query<Vec<(String, String)>>, QueryRejection>;

/// How many of the last lines the page shows.
const SHOWN: u32 = 200;

/// The filters the page takes, as the API takes them.
const FILTERS: [&str; 3] = ["q", "invocation", "stream"];

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter()
        .find(|(k, v)| k == name && !v.trim().is_empty())
        .map(|(_, v)| v.trim())
}

/// `GET /console/ns/{ns}/functions/{name}/logs?q=&invocation=&stream=`.
pub async fn show(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name)): PathParams<(String, String)>,
    query: Params,
) -> Response {
    let q = query.map(|Query(q)| q).unwrap_or_default();
    let filters: Vec<(String, String)> = FILTERS
        .iter()
        .filter_map(|f| Some((f.to_string(), param(&q, f)?.to_owned())))
        .collect();
    // Before the page: the live mode starts after the last line there was
    // then, or after the last one shown if that is later.
    let newest = match read(
        &state,
        &session,
        &ns,
        &name,
        vec![("limit".into(), "1".into())],
    )
    .await
    {
        Ok(p) => p,
        Err(r) => return r,
    };
    let mut asked = filters.clone();
    asked.push(("limit".into(), SHOWN.to_string()));
    let lines = match read(&state, &session, &ns, &name, asked).await {
        Ok(p) => p,
        Err(r) => return r,
    };
    let after = lines
        .items
        .first()
        .into_iter()
        .chain(newest.items.first())
        .map(|l| l.id)
        .max()
        .unwrap_or(0);
    let encoded: String = filters
        .iter()
        .map(|(k, v)| format!("&{k}={}", page::encode(v, false)))
        .collect();
    let base = format!("/console/ns/{ns}/functions/{name}");
    let stream = format!("{base}/logs/stream?cursor={after}{encoded}");
    let refresh = format!("{base}/logs?{}", encoded.trim_start_matches('&'));
    let chosen = param(&q, "stream");
    let body = html! {
        p { a href=(base) { "← " (Text(&name)) } }
        h1 { "Logs of " (Text(&name)) }
        p.links {
            a href={ (base) "/invocations" } { "Calls" } " · "
            a href=(refresh) { "Refresh" }
        }
        form.filters method="get" action={ (base) "/logs" } {
            label for="q" { "Text" }
            input id="q" name="q" value=(param(&q, "q").unwrap_or("")) size="20";
            label for="invocation" { "Call" }
            input id="invocation" name="invocation" value=(param(&q, "invocation").unwrap_or(""))
                size="38" placeholder="an invocation id";
            label for="stream" { "Stream" }
            select id="stream" name="stream" {
                option value="" { "any" }
                @for s in ["stdout", "stderr"] { option value=(s) selected[chosen == Some(s)] { (s) } }
            }
            button type="submit" { "Filter" }
        }
        @if lines.dropped > 0 {
            p.hint {
                (lines.dropped) " of its lines were not kept (over its budget of lines a second, "
                "or while sless could not keep up)."
            }
        }
        p.live {
            label {
                input type="checkbox" id="live-logs" data-stream=(stream) data-calls={ (base) "/invocations/" };
                " Live: add lines as they are written"
            }
        }
        (table(&base, lines.items.iter().rev()))
        @if lines.items.is_empty() { p.hint { "No line." } }
        @if lines.next_cursor.is_some() {
            p.hint { "The last " (SHOWN) " lines are shown; " code { "sless logs " (Text(&name)) " --tail N" } " reads further." }
        }
    };
    Page::of(&session, &ns, &format!("Logs of {name}"), body).into_response()
}

/// One page of the function's log, newest first, as the API answers it.
async fn read(
    state: &AppState,
    session: &Session,
    ns: &str,
    name: &str,
    query: Vec<(String, String)>,
) -> Result<LogPage, Response> {
    let answer = crate::rest::logs::get(
        State(state.clone()),
        session.caller.clone(),
        PathParams((ns.to_owned(), name.to_owned())),
        HeaderMap::new(),
        Ok(Query(query)),
    )
    .await
    .map_err(page::failure)?;
    let bytes = answer
        .into_body()
        .collect()
        .await
        .map_err(|e| page::failure(ApiError::internal(format!("reading the log failed: {e}"))))?
        .to_bytes();
    serde_json::from_slice(&bytes).map_err(|e| {
        page::failure(ApiError::internal(format!(
            "the console cannot read the API's answer: {e}"
        )))
    })
}

/// Lines as a table, in the order given: time, the call that printed
/// each (its short form, a link to its page), stream, the line.
fn table<'a>(base: &str, lines: impl Iterator<Item = &'a LogLineView>) -> Markup {
    html! {
        table.logs {
            thead { tr { th { "Time" } th { "Call" } th { "Stream" } th { "Line" } } }
            tbody id="log-lines" {
                @for l in lines {
                    tr class=[(l.stream == "stderr").then_some("stderr")] {
                        td.time { (time(&l.at)) }
                        td {
                            @if let Some(id) = &l.invocation {
                                a href={ (base) "/invocations/" (page::encode(id, false)) } title=(id) { code { (short(id)) } }
                            } @else { "–" }
                        }
                        td.stream { (Text(&l.stream)) }
                        td.line {
                            (Text(&l.line))
                            @if l.truncated { " " span.hint { "[cut at 16 KiB]" } }
                        }
                    }
                }
            }
        }
    }
}

/// A line's time as the page shows it: UTC, to the millisecond.
fn time(at: &str) -> String {
    chrono::DateTime::parse_from_rfc3339(at)
        .map(|t| t.to_utc().format("%Y-%m-%d %H:%M:%S%.3f").to_string())
        .unwrap_or_else(|_| at.to_owned())
}

/// The short form of an invocation id, as `sless logs` shows it: its last
/// 8 characters (its first ones are its time, alike for a minute's calls).
fn short(id: &str) -> &str {
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}

/// `GET /console/ns/{ns}/functions/{name}/logs/stream`: the API's tail of
/// the function's log, as the session's caller (Server-Sent Events), from
/// `cursor` or `Last-Event-ID`.
pub async fn stream(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name)): PathParams<(String, String)>,
    headers: HeaderMap,
    query: Params,
) -> Response {
    let q = query.map(|Query(q)| q).unwrap_or_default();
    let mut asked: Vec<(String, String)> = FILTERS
        .iter()
        .chain(&["cursor"])
        .filter_map(|f| Some((f.to_string(), param(&q, f)?.to_owned())))
        .collect();
    asked.push(("follow".into(), "true".into()));
    match crate::rest::logs::get(
        State(state),
        session.caller.clone(),
        PathParams((ns, name)),
        headers,
        Ok(Query(asked)),
    )
    .await
    {
        Ok(sse) => sse,
        Err(e) => page::failure(e),
    }
}

/// `GET /console/ns/{ns}/functions/{name}/invocations/{id}`: one call's
/// record and what it printed.
pub async fn invocation(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name, id)): PathParams<(String, String, String)>,
) -> Response {
    let one: InvocationWithLines = match api_json(crate::rest::invocations::get(
        State(state),
        session.caller.clone(),
        PathParams((ns.clone(), name.clone(), id.clone())),
    ))
    .await
    {
        Ok(one) => one,
        Err(r) => return r,
    };
    let i = &one.invocation;
    let base = format!("/console/ns/{ns}/functions/{name}");
    let failed = i.status >= 500 || i.error.is_some();
    let body = html! {
        p { a href={ (base) "/invocations" } { "← Calls of " (Text(&name)) } }
        h1 { "Call " code { (short(&i.id)) } " " span class={ "phase " (if failed { "failed" } else { "ready" }) } { (i.status) } }
        dl.spec {
            dt { "Id" } dd { code { (Text(&i.id)) } }
            dt { "Started" } dd { (Text(&i.started_at)) }
            dt { "Status" } dd { (i.status) }
            dt { "Took" } dd { (format!("{:.1}", i.duration_ms)) " ms" @if i.cold { " (cold start)" } }
            dt { "Version" } dd { @if let Some(v) = i.version { "v" (v) } @else { "–" } }
            dt { "Call" } dd {
                (Text(&i.origin)) " "
                @if let (Some(m), Some(p)) = (&i.method, &i.path) { (Text(m)) " " code { (Text(p)) } }
                @else if let Some(run) = &i.run { code { (Text(run)) } }
            }
            dt { "Request" } dd { code { (Text(&i.request_id)) } }
            @if let Some(e) = &i.error { dt { "Error" } dd { pre.error { (Text(e)) } } }
        }
        h2 { "What it printed" }
        @if one.lines.is_empty() {
            p.hint { "Nothing (or not yet: lines are kept a moment after they are printed)." }
        } @else {
            (table(&base, one.lines.iter()))
        }
        @if one.more_lines {
            p { a href={ (base) "/logs?invocation=" (page::encode(&i.id, false)) } { "Its last lines →" } " " span.hint { "(only the first " (one.lines.len()) " are shown here)" } }
        }
    };
    Page::of(
        &session,
        &ns,
        &format!("Call {} of {name}", short(&i.id)),
        body,
    )
    .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(id: i64, stream: &str, text: &str, call: Option<&str>) -> LogLineView {
        LogLineView {
            id,
            at: "2026-12-07T10:00:01.234567Z".into(),
            version: Some(1),
            instance: "127.0.0.1:1".into(),
            invocation: call.map(str::to_owned),
            stream: stream.into(),
            line: text.into(),
            truncated: false,
        }
    }

    #[test]
    fn lines_are_escaped_marked_and_linked_to_their_call() {
        let call = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
        let lines = [
            line(1, "stdout", "<script>alert(1)</script>", Some(call)),
            line(2, "stderr", "bad \u{202e}txt.exe", None),
        ];
        let html = table("/console/ns/n/functions/f", lines.iter()).into_string();
        assert!(
            html.contains("&lt;script&gt;alert(1)&lt;/script&gt;") && !html.contains("<script>"),
            "{html}"
        );
        assert!(html.contains("&lt;U+202E&gt;"), "{html}");
        assert!(
            html.contains(&format!(
                r#"<a href="/console/ns/n/functions/f/invocations/{call}" title="{call}"><code>2e3f4a5b</code></a>"#
            )),
            "{html}"
        );
        assert!(html.contains(r#"<tr class="stderr">"#), "{html}");
        assert!(html.contains("2026-12-07 10:00:01.234"), "{html}");
        assert_eq!(html.matches("<tr").count(), 3, "{html}");
    }
}
