//! Triggers and jobs: a trigger's page (a cron trigger's next runs in its
//! time zone and its last runs with their status), the form that runs a
//! function once as a job, and a job's page, which shows its output when
//! it ends (while it runs, the page asks the browser to load it again each
//! second: no script needed).

use axum::extract::State;
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use chrono::Utc;
use maud::{Markup, html};
use serde::Deserialize;
use sless_api_types::{JobView, TriggerView};
use sless_domain::cron::Cron;

use super::calls::{self, answered};
use super::page::{self, Page};
use super::session::Session;
use super::text::Text;
use crate::AppState;
use crate::plumbing::path::PathParams;

/// How many of a cron trigger's next runs are shown.
const NEXT_RUNS: usize = 5;

/// `GET /console/ns/{ns}/triggers/{name}`.
pub async fn trigger(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> Response {
    let t: TriggerView = match crate::rest::triggers::get(
        State(state),
        session.caller.clone(),
        PathParams((ns.clone(), name.clone())),
    )
    .await
    {
        Ok(a) => match answered(a) {
            Ok(t) => t,
            Err(r) => return r,
        },
        Err(e) => return page::failure(e),
    };
    let zone = t.timezone.clone().unwrap_or_else(|| "UTC".into());
    let next: Vec<String> = match (&t.schedule, t.enabled) {
        (Some(schedule), true) => match Cron::parse(schedule, &zone) {
            Ok(cron) => {
                let tz = cron.timezone();
                let mut at = Utc::now();
                let mut out = Vec::new();
                while out.len() < NEXT_RUNS {
                    let Some(n) = cron.next_after(at) else { break };
                    out.push(n.with_timezone(&tz).format("%Y-%m-%d %H:%M %Z").to_string());
                    at = n;
                }
                out
            }
            Err(_) => Vec::new(),
        },
        _ => Vec::new(),
    };
    let body = html! {
        p { a href={ "/console/ns/" (ns) "/functions/" (t.function) } { "← " (Text(&t.function)) } }
        h1 { "Trigger " (Text(&t.name)) }
        dl.spec {
            dt { "Type" } dd { (Text(&t.kind)) }
            dt { "Function" } dd { (Text(&t.function)) }
            @if let Some(s) = &t.schedule { dt { "Schedule" } dd { code { (Text(s)) } " in " (Text(&zone)) } }
            dt { "Enabled" } dd {
                form.toggle method="post" action={ "/console/ns/" (ns) "/triggers/" (t.name) } {
                    input type="hidden" name="csrf" value=(session.csrf);
                    input type="hidden" name="enabled" value=(if t.enabled { "false" } else { "true" });
                    span class={ "switch " (if t.enabled { "on" } else { "off" }) } { (if t.enabled { "on" } else { "off" }) }
                    " "
                    button type="submit" { (if t.enabled { "Disable" } else { "Enable" }) }
                }
            }
        }
        @if t.schedule.is_some() {
            h2 { "Next runs" }
            @if next.is_empty() { p.hint { "None while it is disabled." } }
            ul { @for n in &next { li { (n) } } }
            h2 { "Last runs" }
            @let runs = t.runs.clone().unwrap_or_default();
            @if runs.is_empty() { p.hint { "None yet." } }
            @else {
                table {
                    thead { tr { th { "Tick" } th { "Status" } th { "Exit" } th { "Error" } } }
                    tbody {
                        @for r in &runs {
                            tr {
                                td { (r.scheduled_at.format("%Y-%m-%d %H:%M:%S UTC")) }
                                td { (page::phase(&r.status)) }
                                td { @if let Some(c) = r.exit_code { (c) } }
                                td { @if let Some(e) = &r.error { (Text(e)) } }
                            }
                        }
                    }
                }
            }
        }
    };
    Page::of(&session, &ns, &format!("Trigger {name}"), body).into_response()
}

/// The form on a function's page that runs it once.
pub fn job_form(session: &Session, ns: &str, function: &str) -> Markup {
    html! {
        form.job method="post" action={ "/console/ns/" (ns) "/jobs" } {
            input type="hidden" name="csrf" value=(session.csrf);
            input type="hidden" name="function" value=(function);
            label for="job-input" { "Input (JSON)" }
            textarea id="job-input" name="input" rows="3" cols="60" spellcheck="false" { "{}" }
            button type="submit" { "Run as a job" }
        }
    }
}

#[derive(Deserialize)]
pub struct JobForm {
    #[serde(default)]
    csrf: String,
    function: String,
    #[serde(default)]
    input: String,
}

/// `POST /console/ns/{ns}/jobs`: the API's job command, named after the
/// function and the time.
pub async fn run_job(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    PathParams(ns): PathParams<String>,
    axum::Form(form): axum::Form<JobForm>,
) -> Response {
    if let Err(refused) = session.check(&form.csrf) {
        return refused;
    }
    let text = if form.input.trim().is_empty() {
        "null"
    } else {
        form.input.trim()
    };
    let input: serde_json::Value = match serde_json::from_str(text) {
        Ok(v) => v,
        Err(e) => {
            return page::refused(
                axum::http::StatusCode::UNPROCESSABLE_ENTITY,
                "The input is not JSON",
                &format!("{e}. Go back and write it as JSON, e.g. {{\"name\": \"you\"}}."),
            );
        }
    };
    let name = format!(
        "{}-{}",
        form.function.chars().take(24).collect::<String>(),
        Utc::now().format("%Y%m%d%H%M%S%3f")
    );
    let body = serde_json::json!({ "name": name, "function": form.function, "input": input });
    let path = format!("/v1/namespaces/{ns}/jobs");
    let opened = match calls::opened(&session, &headers, Method::POST, &path, body.to_string()) {
        Ok(o) => o,
        Err(r) => return r,
    };
    match crate::rest::jobs::create(State(state), PathParams(ns.clone()), opened).await {
        Ok(_) => Redirect::to(&format!("/console/ns/{ns}/jobs/{name}")).into_response(),
        Err(e) => page::failure(e),
    }
}

/// `GET /console/ns/{ns}/jobs/{name}`.
pub async fn job(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> Response {
    let j: JobView = match crate::rest::jobs::get(
        State(state),
        session.caller.clone(),
        PathParams((ns.clone(), name.clone())),
    )
    .await
    {
        Ok(a) => match answered(a) {
            Ok(j) => j,
            Err(r) => return r,
        },
        Err(e) => return page::failure(e),
    };
    let ended = j.status == "Succeeded" || j.status == "Failed";
    let body = html! {
        p { a href={ "/console/ns/" (ns) "/functions/" (j.function) } { "← " (Text(&j.function)) } }
        h1 { "Job " (Text(&j.name)) " " (page::phase(&j.status)) }
        dl.spec {
            dt { "Function" } dd { (Text(&j.function)) " v" (j.version) }
            dt { "Input" } dd { code { (Text(&j.input.to_string())) } }
            @if let Some(c) = j.exit_code { dt { "Exit code" } dd { (c) } }
            @if let Some(ms) = j.duration_ms { dt { "Took" } dd { (ms) " ms" } }
            @if let Some(e) = &j.error { dt { "Error" } dd.error { (Text(e)) } }
        }
        @if !ended { p.hint { "Running: this page loads again until it ends." } }
        @if let Some(out) = &j.stdout { h2 { "Output" } pre.log { (Text(&out.text)) } }
        @if let Some(err) = &j.stderr { @if !err.text.is_empty() { h2 { "Errors" } pre.log { (Text(&err.text)) } } }
    };
    let mut res = Page::of(&session, &ns, &format!("Job {name}"), body).into_response();
    if !ended {
        res.headers_mut()
            .insert("refresh", axum::http::HeaderValue::from_static("1"));
    }
    res
}
