//! What happened: a function's last calls with a latency chart (p50 and
//! p99 per minute, inline SVG) and filters, and the namespace's audit log
//! with the API's filters, paged, and a live mode (`assets/console.js`
//! follows `events/stream`, the API's tail as the session's caller, and
//! adds each change at the top without a reload). A scaling event is also
//! said in words (`in_words`): from how many instances to how many, and
//! the autoscaler's reason.

use std::collections::BTreeMap;

use axum::extract::rejection::QueryRejection;
use axum::extract::{Query, State};
use axum::http::HeaderMap;
use axum::response::{IntoResponse, Response};
use chrono::{DateTime, Utc};
use maud::{Markup, html};
use sless_api_types::{EventPage, InvocationPage, InvocationView};
use sless_domain::FunctionEvent;

use super::calls::api_json;
use super::page::{self, Page};
use super::session::Session;
use super::text::Text;
use crate::AppState;
use crate::plumbing::path::PathParams;

type Params = Result<Query<Vec<(String, String)>>, QueryRejection>;

fn param<'a>(q: &'a [(String, String)], name: &str) -> Option<&'a str> {
    q.iter()
        .find(|(k, v)| k == name && !v.is_empty())
        .map(|(_, v)| v.as_str())
}

/// `GET /console/ns/{ns}/functions/{name}/invocations?status=&origin=`.
pub async fn invocations(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name)): PathParams<(String, String)>,
    query: Params,
) -> Response {
    let q = query.map(|Query(q)| q).unwrap_or_default();
    let page: InvocationPage = match api_json(crate::rest::invocations::list(
        State(state),
        session.caller.clone(),
        PathParams((ns.clone(), name.clone())),
        Ok(Query(vec![("limit".into(), "1000".into())])),
    ))
    .await
    {
        Ok(p) => p,
        Err(r) => return r,
    };
    let status = param(&q, "status");
    let origin = param(&q, "origin");
    let shown: Vec<&InvocationView> = page
        .items
        .iter()
        .filter(|i| status.is_none_or(|s| s.starts_with(&(i.status / 100).to_string())))
        .filter(|i| origin.is_none_or(|o| o == i.origin))
        .collect();
    let base = format!("/console/ns/{ns}/functions/{name}");
    let body = html! {
        p { a href=(base) { "← " (Text(&name)) } }
        h1 { "Calls of " (Text(&name)) }
        form.filters method="get" action={ (base) "/invocations" } {
            label for="status" { "Status" }
            select id="status" name="status" {
                option value="" { "any" }
                @for s in ["2xx", "4xx", "5xx"] { option value=(s) selected[status == Some(s)] { (s) } }
            }
            label for="origin" { "Origin" }
            select id="origin" name="origin" {
                option value="" { "any" }
                @for o in ["http", "job", "cron"] { option value=(o) selected[origin == Some(o)] { (o) } }
            }
            button type="submit" { "Filter" }
        }
        (latency_chart(&shown, Utc::now()))
        table.calls {
            thead { tr { th { "Time" } th { "Method" } th { "Path" } th { "Status" } th { "ms" } th { "Start" } th { "Origin" } th { "Error" } } }
            tbody {
                @for i in shown.iter().take(200) {
                    tr {
                        td { a href={ (base) "/invocations/" (page::encode(&i.id, false)) } { (i.started_at) } }
                        td { (Text(method_of(i))) }
                        td { code { (Text(path_of(i))) } }
                        td { (i.status) }
                        td.num { (format!("{:.1}", i.duration_ms)) }
                        td { (if i.cold { "cold" } else { "warm" }) }
                        td { (Text(&i.origin)) }
                        td { @if let Some(e) = &i.error { (Text(e)) } }
                    }
                }
            }
        }
        @if shown.is_empty() { p.hint { "No call." } }
    };
    Page::of(&session, &ns, &format!("Calls of {name}"), body).into_response()
}

/// A call's method, or what ran it (a job or cron run has none).
fn method_of(i: &InvocationView) -> &str {
    i.method.as_deref().unwrap_or(&i.origin)
}

/// A call's path, or the run's stream.
fn path_of(i: &InvocationView) -> &str {
    i.path.as_deref().or(i.run.as_deref()).unwrap_or("")
}

/// The `q`-quantile of sorted values.
fn quantile(sorted: &[f64], q: f64) -> f64 {
    let at = ((sorted.len() as f64 - 1.0) * q).round() as usize;
    sorted[at.min(sorted.len() - 1)]
}

/// p50 and p99 of the calls' durations for each of the last 60 minutes
/// that had calls, as two lines of an SVG chart.
pub fn latency_chart(calls: &[&InvocationView], now: DateTime<Utc>) -> Markup {
    let mut minutes: BTreeMap<i64, Vec<f64>> = BTreeMap::new();
    let this_minute = now.timestamp() / 60;
    for c in calls {
        let Ok(at) = DateTime::parse_from_rfc3339(&c.started_at) else {
            continue;
        };
        let m = at.timestamp() / 60;
        if this_minute - m < 60 {
            minutes.entry(m).or_default().push(c.duration_ms);
        }
    }
    let points: Vec<(i64, f64, f64)> = minutes
        .into_iter()
        .map(|(m, mut d)| {
            d.sort_by(f64::total_cmp);
            (m, quantile(&d, 0.5), quantile(&d, 0.99))
        })
        .collect();
    let (w, h, pad) = (600.0, 160.0, 30.0);
    let top = points.iter().map(|p| p.2).fold(1.0, f64::max) * 1.1;
    let x = |m: i64| pad + (w - 2.0 * pad) * ((59 - (this_minute - m)) as f64 / 59.0);
    let y = |v: f64| h - pad - (h - 2.0 * pad) * (v / top);
    let line = |pick: fn(&(i64, f64, f64)) -> f64| {
        points
            .iter()
            .map(|p| format!("{:.1},{:.1}", x(p.0), y(pick(p))))
            .collect::<Vec<_>>()
            .join(" ")
    };
    html! {
        figure.chart {
            svg viewBox=(format!("0 0 {w} {h}")) width="600" height="160" role="img"
                aria-label="Latency per minute, the last hour: p50 and p99" {
                line x1=(pad) y1=(h - pad) x2=(w - pad) y2=(h - pad) class="axis" {}
                line x1=(pad) y1=(pad) x2=(pad) y2=(h - pad) class="axis" {}
                text x="2" y=(pad + 4.0) class="label" { (format!("{top:.0} ms")) }
                text x=(pad) y=(h - 8.0) class="label" { "−60 min" }
                text x=(w - pad - 20.0) y=(h - 8.0) class="label" { "now" }
                polyline points=(line(|p| p.1)) class="p50" {}
                polyline points=(line(|p| p.2)) class="p99" {}
                @for p in &points {
                    circle cx=(format!("{:.1}", x(p.0))) cy=(format!("{:.1}", y(p.2))) r="2" class="p99" {}
                }
            }
            figcaption { span.p50 { "p50" } " and " span.p99 { "p99" } " per minute, the last hour (" (calls.len()) " calls)" }
        }
    }
}

/// The audit log's filters, as the API takes them.
const FILTERS: [&str; 5] = ["function", "type", "actor", "since", "until"];

/// `GET /console/ns/{ns}/events?function=&type=&actor=&since=&until=&after=`.
pub async fn events(
    State(state): State<AppState>,
    session: Session,
    PathParams(ns): PathParams<String>,
    query: Params,
) -> Response {
    let q = query.map(|Query(q)| q).unwrap_or_default();
    let page: EventPage = match api_json(crate::rest::events::list(
        State(state),
        session.caller.clone(),
        PathParams(ns.clone()),
        Ok(Query(q.clone())),
    ))
    .await
    {
        Ok(p) => p,
        Err(r) => return r,
    };
    let filters: Vec<(&str, &str)> = FILTERS
        .iter()
        .filter_map(|f| Some((*f, param(&q, f)?)))
        .collect();
    let encoded: String = filters
        .iter()
        .map(|(k, v)| format!("&{k}={}", page::encode(v, false)))
        .collect();
    let stream = format!(
        "/console/ns/{ns}/events/stream?{}",
        encoded.trim_start_matches('&')
    );
    let body = html! {
        h1 { "Audit log" }
        form.filters method="get" action={ "/console/ns/" (ns) "/events" } {
            @for f in FILTERS {
                label for=(f) { (f) }
                input id=(f) name=(f) value=(param(&q, f).unwrap_or("")) size="14"
                    placeholder=(if f == "since" || f == "until" { "2026-12-01T00:00:00Z" } else { "" });
            }
            button type="submit" { "Filter" }
        }
        p.live { label { input type="checkbox" id="live" data-stream=(stream); " Live: show changes as they happen" } }
        table.events {
            thead { tr { th { "Time" } th { "Type" } th { "Stream" } th { "Actor" } th { "Data" } } }
            tbody id="events" {
                @for e in &page.items {
                    tr {
                        td { (e.time) }
                        td { (Text(&e.event_type)) }
                        td { code { (Text(&e.stream)) } }
                        td { (Text(e.actor.as_deref().unwrap_or(""))) }
                        td {
                            @if let Some(words) = in_words(&e.event_type, &e.data) {
                                span.reason { (Text(&words)) } br;
                            }
                            code { (Text(&hide_env_values(&e.data).to_string())) }
                        }
                    }
                }
            }
        }
        @if let Some(next) = &page.next {
            nav.pages { a href={ "/console/ns/" (ns) "/events?after=" (page::encode(next, false)) (encoded) } rel="next" { "Older →" } }
        }
    };
    Page::of(&session, &ns, "Audit log", body).into_response()
}

/// A scaling event in words, over its data: how many instances serve
/// after it, and why. `assets/console.js` writes a live row's the same way.
pub fn in_words(event_type: &str, data: &serde_json::Value) -> Option<String> {
    match FunctionEvent::from_stored(event_type, data).ok()? {
        FunctionEvent::FunctionScaled {
            from,
            to,
            window,
            reason,
            ..
        } => Some(format!(
            "{from} → {to} instances ({} window): {reason}",
            window.as_str()
        )),
        FunctionEvent::FunctionScaledToZero { reason, .. } => {
            Some(format!("→ 0 instances: {reason}"))
        }
        FunctionEvent::FunctionScaledUp { reason } => Some(format!("started from zero: {reason}")),
        _ => None,
    }
}

/// Keys whose object in an event's data is an environment (a function's
/// `env_vars`, a job's `env`): the audit page shows its names, never its
/// values, as the function's page does.
const ENVIRONMENTS: [&str; 2] = ["env_vars", "env"];

/// What an environment's value is shown as.
pub const HIDDEN: &str = "(hidden)";

/// `data` with the value of every variable of every environment in it,
/// at any depth, replaced by [`HIDDEN`].
pub fn hide_env_values(data: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value;
    match data {
        Value::Object(map) => Value::Object(
            map.iter()
                .map(|(k, v)| {
                    let shown = match v {
                        Value::Object(env) if ENVIRONMENTS.contains(&k.as_str()) => Value::Object(
                            env.keys()
                                .map(|name| (name.clone(), Value::from(HIDDEN)))
                                .collect(),
                        ),
                        other => hide_env_values(other),
                    };
                    (k.clone(), shown)
                })
                .collect(),
        ),
        Value::Array(items) => Value::Array(items.iter().map(hide_env_values).collect()),
        other => other.clone(),
    }
}

/// `GET /console/ns/{ns}/events/stream`: the API's tail, as the session's
/// caller (Server-Sent Events).
pub async fn stream(
    State(state): State<AppState>,
    session: Session,
    PathParams(ns): PathParams<String>,
    headers: HeaderMap,
    query: Params,
) -> Response {
    match crate::rest::events::tail(
        State(state),
        session.caller.clone(),
        PathParams(ns),
        headers,
        query,
    )
    .await
    {
        Ok(sse) => sse.into_response(),
        Err(e) => page::failure(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(at: &str, ms: f64) -> InvocationView {
        InvocationView {
            id: String::new(),
            namespace: String::new(),
            function: String::new(),
            version: None,
            started_at: at.into(),
            duration_ms: ms,
            status: 200,
            bytes_in: 0,
            bytes_out: 0,
            cold: false,
            error: None,
            request_id: String::new(),
            origin: "http".into(),
            run: None,
            method: Some("GET".into()),
            path: Some("/".into()),
            activation_ms: None,
            instance_start_ms: None,
        }
    }

    #[test]
    fn environments_keep_their_names_and_lose_their_values_at_any_depth() {
        let data = serde_json::json!({
            "spec": {"env_vars": {"API_KEY": "s3cret", "MODE": "prod"}, "memory_mb": 128},
            "jobs": [{"env": {"TOKEN": "t0ken"}}],
            "env_vars": "not an environment",
        });
        let shown = hide_env_values(&data);
        assert_eq!(
            shown,
            serde_json::json!({
                "spec": {"env_vars": {"API_KEY": HIDDEN, "MODE": HIDDEN}, "memory_mb": 128},
                "jobs": [{"env": {"TOKEN": HIDDEN}}],
                "env_vars": "not an environment",
            })
        );
    }

    #[test]
    fn scaling_events_are_said_in_words_and_others_are_not() {
        let cases = [
            (
                "FunctionScaled",
                serde_json::json!({"from": 1, "to": 4, "observed": 2.75, "window": "panic", "reason": "a burst"}),
                Some("1 → 4 instances (panic window): a burst"),
            ),
            (
                "FunctionScaledToZero",
                serde_json::json!({"version": 2, "reason": "no call for 300 s"}),
                Some("→ 0 instances: no call for 300 s"),
            ),
            (
                "FunctionScaledUp",
                serde_json::json!({"reason": "a call"}),
                Some("started from zero: a call"),
            ),
            (
                "FunctionDeployed",
                serde_json::json!({"version": 1, "endpoint": "http://x"}),
                None,
            ),
            ("FunctionScaled", serde_json::json!({"to": 4}), None),
        ];
        for (event_type, data, want) in cases {
            assert_eq!(
                in_words(event_type, &data).as_deref(),
                want,
                "{event_type} {data}"
            );
        }
    }

    #[test]
    fn the_chart_has_a_point_per_minute_with_calls_and_ignores_older_ones() {
        let now = DateTime::parse_from_rfc3339("2026-12-04T12:00:30Z")
            .unwrap()
            .to_utc();
        let calls = [
            call("2026-12-04T12:00:01Z", 10.0),
            call("2026-12-04T12:00:02Z", 30.0),
            call("2026-12-04T11:58:00Z", 5.0),
            call("2026-12-04T10:00:00Z", 999.0),
        ];
        let refs: Vec<&InvocationView> = calls.iter().collect();
        let svg = latency_chart(&refs, now).into_string();
        assert_eq!(svg.matches("<circle").count(), 2, "{svg}");
        assert!(
            svg.contains("33 ms"),
            "the scale follows p99 (30 ms, +10%): {svg}"
        );
        assert!(!svg.contains("999"), "{svg}");
    }
}
