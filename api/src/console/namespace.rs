//! The namespace page: its functions (phase, live version, runtime,
//! memory, the instances serving and their bounds, the last upload and who
//! made it, the `/fn` URL, calls and errors in the last hour), paged at
//! 50, and its triggers with a switch each; and the switch's form.

use std::collections::HashMap;

use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use maud::html;
use serde::Deserialize;
use sless_api_types::FunctionView;
use sless_store::{invocations, readmodel};

use super::calls;
use super::page::{self, Page};
use super::session::Session;
use super::text::Text;
use crate::AppState;
use crate::plumbing::path::PathParams;

/// Functions shown on one page.
pub const PAGE_SIZE: usize = 50;

#[derive(Deserialize)]
pub struct Paging {
    page: Option<usize>,
}

/// `GET /console/ns/{ns}`.
pub async fn show(
    State(state): State<AppState>,
    session: Session,
    PathParams(ns): PathParams<String>,
    Query(paging): Query<Paging>,
) -> Response {
    let namespace = match session.caller.namespace(&ns) {
        Ok(n) => n,
        Err(e) => return page::failure(e),
    };
    // One page of rows, read as `GET .../functions` reads them (and shown
    // as it shows them).
    let total_pages = |total: usize| total.div_ceil(PAGE_SIZE).max(1);
    let wanted = paging.page.unwrap_or(1).max(1);
    let (mut rows, total) = match readmodel::function_rows_page(
        &state.pool,
        namespace.as_str(),
        (wanted - 1) * PAGE_SIZE,
        PAGE_SIZE,
    )
    .await
    {
        Ok(r) => r,
        Err(e) => return page::failure(e.into()),
    };
    let pages = total_pages(total);
    let at = wanted.min(pages);
    if at != wanted {
        rows = match readmodel::function_rows_page(
            &state.pool,
            namespace.as_str(),
            (at - 1) * PAGE_SIZE,
            PAGE_SIZE,
        )
        .await
        {
            Ok((r, _)) => r,
            Err(e) => return page::failure(e.into()),
        };
    }
    let shown: Vec<FunctionView> = rows
        .iter()
        .map(|r| crate::rest::function::view_of_row(state.fn_url.as_deref(), r))
        .collect();
    let triggers = match calls::all_triggers(&state, &session.caller, &ns).await {
        Ok(l) => l,
        Err(r) => return r,
    };
    let names: Vec<String> = shown.iter().map(|f| f.name.clone()).collect();
    let since = chrono::Utc::now() - chrono::Duration::hours(1);
    let counts: HashMap<String, invocations::Counts> =
        match invocations::counts_since(&state.pool, namespace.as_str(), &names, since).await {
            Ok(c) => c.into_iter().map(|c| (c.function.clone(), c)).collect(),
            Err(e) => return page::failure(e.into()),
        };
    let uploads: HashMap<String, readmodel::LiveUpload> =
        match readmodel::live_uploads(&state.pool, namespace.as_str(), &names).await {
            Ok(u) => u.into_iter().map(|u| (u.function.clone(), u)).collect(),
            Err(e) => return page::failure(e.into()),
        };
    let body = html! {
        h1 { "Functions" }
        @if total == 0 {
            p { "No function yet. Deploy one with " code { "sless deploy DIR" } " or Terraform." }
        } @else {
            table.functions {
                thead { tr {
                    th { "Name" } th { "Phase" } th { "Live" } th { "Runtime" } th { "Memory" } th { "Instances" }
                    th { "Last upload" } th { "Calls (1 h)" } th { "Errors (1 h)" } th { "URL" }
                } }
                tbody {
                    @for f in &shown {
                        @let upload = uploads.get(&f.name);
                        @let count = counts.get(&f.name);
                        tr {
                            td { a href={ "/console/ns/" (ns) "/functions/" (f.name) } { (Text(&f.name)) } }
                            td { (page::phase_of(f)) }
                            td { @if let Some(v) = f.deployed_version { "v" (v) } @else { "–" } }
                            td { (Text(f.runtime.as_deref().unwrap_or("–"))) }
                            td { @if let Some(m) = f.memory_mb { (m) " MiB" } }
                            td.num {
                                @if let Some(n) = f.instances { (n) }
                                @if let (Some(min), Some(max)) = (f.min_instances, f.max_instances) {
                                    " " span.hint { "(" (min) "–" (max) ")" }
                                }
                            }
                            td {
                                @if let Some(u) = upload {
                                    "v" (u.version) " · " (Text(u.uploaded_by.as_deref().unwrap_or("?"))) " · "
                                    time datetime=(u.uploaded_at.to_rfc3339()) { (u.uploaded_at.format("%Y-%m-%d %H:%M UTC")) }
                                }
                            }
                            td.num { (count.map_or(0, |c| c.calls)) }
                            td.num { (count.map_or(0, |c| c.errors)) }
                            td.url {
                                code { (Text(&f.url)) }
                                button.copy type="button" data-copy=(f.url) { "Copy" }
                            }
                        }
                    }
                }
            }
            @if pages > 1 {
                nav.pages {
                    @if at > 1 { a href={ "?page=" (at - 1) } rel="prev" { "← Previous" } }
                    span { "Page " (at) " of " (pages) }
                    @if at < pages { a href={ "?page=" (at + 1) } rel="next" { "Next →" } }
                }
            }
        }
        h2 { "Triggers" }
        @if triggers.is_empty() {
            p { "No trigger." }
        } @else {
            table.triggers {
                thead { tr { th { "Name" } th { "Function" } th { "Type" } th { "Schedule" } th { "Enabled" } } }
                tbody {
                    @for t in &triggers {
                        tr {
                            td { (Text(&t.name)) }
                            td { a href={ "/console/ns/" (ns) "/functions/" (t.function) } { (Text(&t.function)) } }
                            td { (Text(&t.kind)) }
                            td { @if let Some(s) = &t.schedule { code { (Text(s)) } " " (Text(t.timezone.as_deref().unwrap_or("UTC"))) } }
                            td {
                                form.toggle method="post" action={ "/console/ns/" (ns) "/triggers/" (t.name) } {
                                    input type="hidden" name="csrf" value=(session.csrf);
                                    input type="hidden" name="enabled" value=(if t.enabled { "false" } else { "true" });
                                    span class={ "switch " (if t.enabled { "on" } else { "off" }) } { (if t.enabled { "on" } else { "off" }) }
                                    button type="submit" { (if t.enabled { "Disable" } else { "Enable" }) }
                                }
                            }
                        }
                    }
                }
            }
        }
    };
    Page::of(&session, &ns, &format!("Functions of {ns}"), body).into_response()
}

#[derive(Deserialize)]
pub struct ToggleForm {
    #[serde(default)]
    csrf: String,
    /// `true` or `false`.
    #[serde(default)]
    enabled: String,
}

/// `POST /console/ns/{ns}/triggers/{name}`: the switch, through the same
/// command as `PATCH /v1/namespaces/{ns}/triggers/{name}`.
pub async fn toggle(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    PathParams((ns, name)): PathParams<(String, String)>,
    axum::Form(form): axum::Form<ToggleForm>,
) -> Response {
    if let Err(refused) = session.check(&form.csrf) {
        return refused;
    }
    let body = serde_json::json!({ "enabled": form.enabled == "true" }).to_string();
    let path = format!("/v1/namespaces/{ns}/triggers/{name}");
    let opened = match calls::opened(&session, &headers, Method::PATCH, &path, body) {
        Ok(o) => o,
        Err(r) => return r,
    };
    let enabled = form.enabled == "true";
    match crate::rest::triggers::patch(
        State(state.clone()),
        PathParams((ns.clone(), name.clone())),
        opened,
    )
    .await
    {
        Ok(_) => {
            calls::settle(|| async {
                calls::all_triggers(&state, &session.caller, &ns)
                    .await
                    .is_ok_and(|l| l.iter().any(|t| t.name == name && t.enabled == enabled))
            })
            .await;
            Redirect::to(&format!("/console/ns/{ns}")).into_response()
        }
        Err(e) => page::failure(e),
    }
}
