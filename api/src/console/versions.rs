//! A function's versions: who uploaded each and when, the diff of any two
//! (unified or side by side, per file), a version's zip, and rolling back
//! to a version after a confirmation.

use axum::extract::{Query, State};
use axum::http::{HeaderMap, Method};
use axum::response::{IntoResponse, Redirect, Response};
use maud::{Markup, html};
use serde::Deserialize;
use sless_api_types::{FileDiffView, VersionDiff, VersionList};

use super::calls::{self, api_json};
use super::page::{self, Page};
use super::session::Session;
use super::text::Text;
use crate::AppState;
use crate::plumbing::paging::PageQuery;
use crate::plumbing::path::PathParams;

#[derive(Deserialize)]
pub struct Picked {
    from: Option<u32>,
    to: Option<u32>,
    /// `split` for side by side; unified otherwise.
    view: Option<String>,
}

/// `GET /console/ns/{ns}/functions/{name}/versions`.
pub async fn show(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name)): PathParams<(String, String)>,
    Query(picked): Query<Picked>,
) -> Response {
    // Every kept version (retention bounds them), a page at a time.
    let mut query = PageQuery::largest();
    let mut list: Option<VersionList> = None;
    loop {
        let page: VersionList = match api_json(async {
            let key = crate::rest::function::path_key(&session.caller, &ns, &name)?;
            crate::rest::versions::page(&state, &key, &query).await
        })
        .await
        {
            Ok(l) => l,
            Err(r) => return r,
        };
        let next = page.next_cursor.clone();
        match &mut list {
            Some(l) => l.items.extend(page.items),
            None => list = Some(page),
        }
        match next {
            Some(c) => query = query.after(c),
            None => break,
        }
    }
    let list = list.expect("one page at least");
    let diff: Option<VersionDiff> = match (picked.from, picked.to) {
        (Some(a), Some(b)) => match api_json(crate::rest::versions::diff(
            State(state.clone()),
            session.caller.clone(),
            PathParams((ns.clone(), name.clone(), a.to_string(), b.to_string())),
        ))
        .await
        {
            Ok(d) => Some(d),
            Err(r) => return r,
        },
        _ => None,
    };
    let split = picked.view.as_deref() == Some("split");
    let base = format!("/console/ns/{ns}/functions/{name}");
    let newest = list.items.first().map(|v| v.version);
    let older = list.items.get(1).map(|v| v.version);
    let body = html! {
        p { a href=(base) { "← " (Text(&name)) } }
        h1 { "Versions of " (Text(&name)) }
        table.versions {
            thead { tr { th { "Version" } th { "Uploaded" } th { "By" } th { "Files" } th { "sha256" } th {} th {} } }
            tbody {
                @for v in &list.items {
                    tr {
                        td {
                            "v" (v.version)
                            @if v.live { " " span.phase.ready { "live" } }
                            @if v.deployed && !v.live { " " span.phase.other { "runs" } }
                        }
                        td { time datetime=(v.uploaded_at.to_rfc3339()) { (v.uploaded_at.format("%Y-%m-%d %H:%M:%S UTC")) } }
                        td { (Text(v.uploaded_by.as_deref().unwrap_or("?"))) }
                        td.num { (v.files) }
                        td { code { (v.sha256.get(..12).unwrap_or(&v.sha256)) } }
                        td { a href={ (base) "/versions/" (v.version) "/archive" } download { "zip" } }
                        td {
                            @if !v.live {
                                a href={ (base) "/rollback?version=" (v.version) } { "Roll back to v" (v.version) }
                            }
                        }
                    }
                }
            }
        }
        h2 { "Compare" }
        form.compare method="get" action={ (base) "/versions" } {
            label for="from" { "From" }
            select id="from" name="from" {
                @for v in &list.items {
                    option value=(v.version) selected[picked.from.or(older) == Some(v.version)] { "v" (v.version) }
                }
            }
            label for="to" { "to" }
            select id="to" name="to" {
                @for v in &list.items {
                    option value=(v.version) selected[picked.to.or(newest) == Some(v.version)] { "v" (v.version) }
                }
            }
            label { input type="radio" name="view" value="unified" checked[!split]; " unified" }
            label { input type="radio" name="view" value="split" checked[split]; " side by side" }
            button type="submit" { "Show the diff" }
        }
        @if let Some(d) = &diff {
            h3 { "v" (d.from) " → v" (d.to) }
            @if d.files.is_empty() { p { "The same files." } }
            @for file in &d.files { (file_diff(file, split)) }
            @if d.truncated { p.hint { "The diff was cut at " (d.diff_limit) " bytes." } }
        }
    };
    Page::of(&session, &ns, &format!("Versions of {name}"), body).into_response()
}

fn file_diff(file: &FileDiffView, split: bool) -> Markup {
    html! {
        details.file open {
            summary { code { (Text(&file.path)) } " " span.hint { (Text(&file.change)) } }
            @if file.binary {
                p.hint { "Binary: no diff shown." }
            } @else if let Some(diff) = &file.diff {
                @if split { (side_by_side(diff)) } @else { (unified(diff)) }
            } @else if file.truncated {
                p.hint { "Left out: the diff is too large." }
            }
        }
    }
}

fn line_class(line: &str) -> &'static str {
    if line.starts_with("+++") || line.starts_with("---") {
        "head"
    } else if line.starts_with('+') {
        "add"
    } else if line.starts_with('-') {
        "del"
    } else if line.starts_with("@@") {
        "hunk"
    } else {
        "same"
    }
}

fn unified(diff: &str) -> Markup {
    html! {
        pre.diff {
            @for line in diff.lines() {
                span class=(line_class(line)) { (Text(line)) "\n" }
            }
        }
    }
}

/// The unified diff as two columns: unchanged lines on both sides, a run
/// of removed lines beside the run of added lines that follows it.
fn side_by_side(diff: &str) -> Markup {
    let mut rows: Vec<(Option<&str>, Option<&str>)> = Vec::new();
    let mut removed: Vec<&str> = Vec::new();
    let mut added: Vec<&str> = Vec::new();
    fn flush<'a>(
        rows: &mut Vec<(Option<&'a str>, Option<&'a str>)>,
        removed: &mut Vec<&'a str>,
        added: &mut Vec<&'a str>,
    ) {
        for i in 0..removed.len().max(added.len()) {
            rows.push((removed.get(i).copied(), added.get(i).copied()));
        }
        removed.clear();
        added.clear();
    }
    for line in diff.lines() {
        match line_class(line) {
            "head" => {}
            "del" => removed.push(&line[1..]),
            "add" => added.push(&line[1..]),
            "hunk" => {
                flush(&mut rows, &mut removed, &mut added);
                rows.push((Some(line), Some(line)));
            }
            _ => {
                flush(&mut rows, &mut removed, &mut added);
                let text = line.strip_prefix(' ').unwrap_or(line);
                rows.push((Some(text), Some(text)));
            }
        }
    }
    flush(&mut rows, &mut removed, &mut added);
    html! {
        table.split {
            @for (left, right) in &rows {
                @let hunk = left.is_some_and(|l| l.starts_with("@@"));
                tr class=(if hunk { "hunk" } else { "" }) {
                    td class=(if left.is_some() && left != right { "del" } else { "" }) { code { (Text(left.unwrap_or(""))) } }
                    td class=(if right.is_some() && left != right { "add" } else { "" }) { code { (Text(right.unwrap_or(""))) } }
                }
            }
        }
    }
}

/// `GET .../versions/{v}/archive`: the zip, as the API serves it.
pub async fn archive(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name, v)): PathParams<(String, String, String)>,
) -> Response {
    let mut headers = HeaderMap::new();
    headers.insert(
        axum::http::header::ACCEPT,
        axum::http::HeaderValue::from_static("application/zip"),
    );
    match crate::rest::versions::archive(
        State(state),
        session.caller.clone(),
        PathParams((ns, name.clone(), v.clone())),
        headers,
    )
    .await
    {
        Ok(mut res) => {
            let disposition = format!("attachment; filename=\"{name}-v{v}.zip\"");
            if let Ok(value) = axum::http::HeaderValue::from_str(&disposition) {
                res.headers_mut()
                    .insert(axum::http::header::CONTENT_DISPOSITION, value);
            }
            res
        }
        Err(e) => page::failure(e),
    }
}

#[derive(Deserialize)]
pub struct RollbackQuery {
    version: u32,
}

/// `GET .../rollback?version=`: the confirmation.
pub async fn confirm_rollback(
    session: Session,
    PathParams((ns, name)): PathParams<(String, String)>,
    Query(q): Query<RollbackQuery>,
) -> Response {
    if let Err(e) = session.caller.namespace(&ns) {
        return page::failure(e);
    }
    let base = format!("/console/ns/{ns}/functions/{name}");
    let body = html! {
        h1 { "Roll " (Text(&name)) " back to v" (q.version) "?" }
        p { "Version " (q.version) " becomes live again: it is built if needed and started, and calls go to it once it serves." }
        form method="post" action={ (base) "/rollback" } {
            input type="hidden" name="csrf" value=(session.csrf);
            input type="hidden" name="version" value=(q.version);
            button type="submit" { "Roll back to v" (q.version) }
            " "
            a href={ (base) "/versions" } { "Cancel" }
        }
    };
    Page::of(&session, &ns, "Roll back", body).into_response()
}

#[derive(Deserialize)]
pub struct RollbackForm {
    #[serde(default)]
    csrf: String,
    version: u32,
}

/// `POST .../rollback`: the API's rollback command.
pub async fn rollback(
    State(state): State<AppState>,
    session: Session,
    headers: HeaderMap,
    PathParams((ns, name)): PathParams<(String, String)>,
    axum::Form(form): axum::Form<RollbackForm>,
) -> Response {
    if let Err(refused) = session.check(&form.csrf) {
        return refused;
    }
    let path = format!("/v1/namespaces/{ns}/functions/{name}/rollback");
    let body = serde_json::json!({ "version": form.version }).to_string();
    let opened = match calls::opened(&session, &headers, Method::POST, &path, body) {
        Ok(o) => o,
        Err(r) => return r,
    };
    match crate::rest::versions::rollback(
        State(state.clone()),
        PathParams((ns.clone(), name.clone())),
        opened,
    )
    .await
    {
        Ok(_) => {
            calls::settle(|| async {
                crate::rest::functions::get(
                    State(state.clone()),
                    session.caller.clone(),
                    PathParams((ns.clone(), name.clone())),
                )
                .await
                .ok()
                .and_then(|a| calls::answered::<sless_api_types::FunctionView>(a).ok())
                .is_some_and(|f| f.version == Some(form.version))
            })
            .await;
            Redirect::to(&format!("/console/ns/{ns}/functions/{name}")).into_response()
        }
        Err(e) => page::failure(e),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn side_by_side_pairs_removed_and_added_runs() {
        let diff = "--- a/h.py\n+++ b/h.py\n@@ -1,3 +1,3 @@\n keep\n-old1\n-old2\n+new1\n tail\n";
        let html = side_by_side(diff).into_string();
        assert!(
            html.contains(
                r#"<td class="del"><code>old1</code></td><td class="add"><code>new1</code></td>"#
            ),
            "{html}"
        );
        assert!(
            html.contains(
                r#"<td class="del"><code>old2</code></td><td class=""><code></code></td>"#
            ),
            "{html}"
        );
        assert_eq!(html.matches("<code>keep</code>").count(), 2, "{html}");
    }
}
