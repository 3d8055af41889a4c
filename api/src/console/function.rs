//! A function's page: its spec and the names of its environment (never the
//! values), how it scales (the instances serving, their bounds, the calls
//! one takes at once, the calls in flight now) with a chart of the
//! instances over the last hour (`scaling`), its triggers, a form that
//! calls it through `/fn` and shows the answer ("try it"), a form that
//! runs it as a job, its current source as a tree of files with numbered,
//! coloured lines (binary files marked), and the build log of its live
//! version (and of the failed one, when the last build failed).

mod scaling;

use axum::extract::State;
use axum::http::{HeaderMap, StatusCode};
use axum::response::{IntoResponse, Response};
use http_body_util::BodyExt;
use maud::{Markup, html};
use sless_api_types::{FunctionView, SourceFileView, SourceView};

use super::calls::{self, answered, api_json};
use super::highlight;
use super::page::{self, Page};
use super::session::Session;
use super::text::Text;
use crate::AppState;
use crate::plumbing::path::PathParams;

/// `GET /console/ns/{ns}/functions/{name}`.
#[derive(serde::Deserialize)]
pub struct Shown {
    /// The file of the source to show (default: the entrypoint's module).
    file: Option<String>,
}

pub async fn show(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name)): PathParams<(String, String)>,
    axum::extract::Query(shown): axum::extract::Query<Shown>,
) -> Response {
    let caller = session.caller.clone();
    let f: FunctionView = match crate::rest::functions::get(
        State(state.clone()),
        caller.clone(),
        PathParams((ns.clone(), name.clone())),
    )
    .await
    {
        Ok(answer) => match answered(answer) {
            Ok(f) => f,
            Err(r) => return r,
        },
        Err(e) => return page::failure(e),
    };
    // No source before the first upload.
    let source: Option<SourceView> = if f.version.is_some() {
        match api_json(crate::rest::source::get(
            State(state.clone()),
            caller.clone(),
            PathParams((ns.clone(), name.clone())),
        ))
        .await
        {
            Ok(s) => Some(s),
            Err(r) => return r,
        }
    } else {
        None
    };
    let live_log = match f.deployed_version {
        Some(v) => build_log(&state, &session, &ns, &name, v).await,
        None => None,
    };
    let failed_log = match (f.phase.as_str(), f.version) {
        ("Failed", Some(v)) if Some(v) != f.deployed_version => {
            build_log(&state, &session, &ns, &name, v).await
        }
        _ => None,
    };
    let triggers: Vec<sless_api_types::TriggerView> =
        match calls::all_triggers(&state, &caller, &ns).await {
            Ok(l) => l.into_iter().filter(|t| t.function == f.name).collect(),
            Err(r) => return r,
        };
    let history = match scaling::history(&state, &caller, &ns, &name).await {
        Ok(h) => h,
        Err(r) => return r,
    };
    let env_names: Vec<&String> = f.env_vars.iter().flat_map(|m| m.keys()).collect();
    let base = format!("/console/ns/{ns}/functions/{name}");
    let body = html! {
        h1 { (Text(&f.name)) " " (page::phase_of(&f)) }
        p.links {
            a href={ (base) "/versions" } { "Versions" } " · "
            a href={ (base) "/invocations" } { "Calls" } " · "
            a href={ (base) "/logs" } { "Logs" } " · "
            a href={ "/console/ns/" (ns) "/events?function=" (f.name) } { "Audit log" }
        }
        @if let Some(error) = &f.last_error {
            pre.error role="alert" { (Text(error)) }
        }
        dl.spec {
            dt { "Runtime" } dd { (Text(f.runtime.as_deref().unwrap_or("–"))) }
            dt { "Entrypoint" } dd { code { (Text(f.entrypoint.as_deref().unwrap_or("–"))) } }
            dt { "Memory" } dd { @if let Some(m) = f.memory_mb { (m) " MiB" } }
            dt { "Timeout" } dd { @if let Some(t) = f.timeout_sec { (t) " s" } }
            dt { "Version" } dd {
                @if let Some(v) = f.version { "v" (v) } @else { "none yet" }
                @if let Some(d) = f.deployed_version { " (v" (d) " runs)" }
            }
            dt { "Instances" } dd {
                @if let Some(n) = f.instances { (n) " serving" }
                @if f.instances == Some(0) && f.phase == "Ready" { " (scaled to zero: the next call starts it)" }
                @if let (Some(min), Some(max)) = (f.min_instances, f.max_instances) {
                    " " span.hint { "(min " (min) ", max " (max) ")" }
                }
            }
            dt { "Concurrency" } dd { @if let Some(c) = f.concurrency { (c) " calls at once per instance" } }
            dt { "In flight" } dd { @if let Some(n) = f.in_flight { (n) " calls now" } }
            dt { "URL" } dd.url { code { (Text(&f.url)) } button.copy type="button" data-copy=(f.url) { "Copy" } }
            dt { "Environment" } dd {
                @if env_names.is_empty() { "none" }
                @for name in &env_names { code { (Text(name)) } " " }
                @if !env_names.is_empty() { span.hint { "(values hidden)" } }
            }
        }
        h2 { "Instances" }
        @match &history {
            Some(steps) => (scaling::chart(steps, chrono::Utc::now())),
            None => p.hint { "Its history is too long to chart here." },
        }
        p.links {
            a href={ "/console/ns/" (ns) "/events?function=" (f.name) "&type=FunctionScaled&type=FunctionScaledToZero&type=FunctionScaledUp" } {
                "Scaling events"
            }
        }
        h2 { "Triggers" }
        @if triggers.is_empty() { p.hint { "None: calls through /fn are served while it has no http trigger." } }
        ul {
            @for t in &triggers {
                li {
                    a href={ "/console/ns/" (ns) "/triggers/" (t.name) } { (Text(&t.name)) }
                    " (" (Text(&t.kind)) @if let Some(s) = &t.schedule { ", " code { (Text(s)) } } ") "
                    span class={ "switch " (if t.enabled { "on" } else { "off" }) } { (if t.enabled { "on" } else { "off" }) }
                }
            }
        }
        h2 { "Try it" }
        form.try method="post" action={ (base) "/try" } {
            input type="hidden" name="csrf" value=(session.csrf);
            select name="method" aria-label="Method" {
                @for m in ["GET", "POST", "PUT", "DELETE"] { option value=(m) { (m) } }
            }
            input name="path" value="/" size="40" aria-label="Path and query";
            textarea name="body" rows="2" cols="60" placeholder="Body (JSON or text)" spellcheck="false" {}
            button type="submit" { "Send" }
        }
        h2 { "Run it once" }
        (super::runs::job_form(&session, &ns, &f.name))
        h2 { "Source" }
        @if let Some(s) = &source {
            p.hint { "Version " (s.version) ", sha256 " code { (s.sha256) } ", " (s.files.len()) " files" }
            @let open = open_file(s, f.entrypoint.as_deref(), shown.file.as_deref());
            div.source-view {
                nav.tree aria-label="Files" { (tree(&base, &s.files, open.map(|f| f.path.as_str()))) }
                @if let Some(file) = open { (file_view(file)) }
            }
        } @else {
            p { "No upload yet." }
        }
        @if let Some((v, log)) = &failed_log {
            h2 { "Build log of v" (v) " (failed)" }
            pre.log { (Text(log)) }
        }
        @if let Some((v, log)) = &live_log {
            h2 { "Build log of v" (v) " (live)" }
            pre.log { (Text(log)) }
        }
    };
    Page::of(&session, &ns, &f.name, body).into_response()
}

/// The file to show: the one asked for, else the entrypoint's module,
/// else the first file.
fn open_file<'a>(
    source: &'a SourceView,
    entrypoint: Option<&str>,
    asked: Option<&str>,
) -> Option<&'a SourceFileView> {
    let module = entrypoint
        .and_then(|e| e.split('.').next())
        .unwrap_or_default();
    asked
        .and_then(|p| source.files.iter().find(|f| f.path == p))
        .or_else(|| {
            source.files.iter().find(|f| {
                f.path
                    .rsplit_once('.')
                    .map_or(f.path.as_str(), |(stem, _)| stem)
                    == module
            })
        })
        .or(source.files.first())
}

/// The source's paths as a tree of folders, each file a link that shows it.
fn tree(base: &str, files: &[SourceFileView], open: Option<&str>) -> Markup {
    // Files sorted by path: a folder's files come together, so each one
    // opens the folders it is in that the one before was not in.
    let mut paths: Vec<&SourceFileView> = files.iter().collect();
    paths.sort_by(|a, b| a.path.cmp(&b.path));
    let mut out = String::new();
    let mut folders: Vec<&str> = Vec::new();
    for file in paths {
        let parts: Vec<&str> = file.path.split('/').collect();
        let (dirs, leaf) = parts.split_at(parts.len() - 1);
        let same = folders.iter().zip(dirs).take_while(|(a, b)| a == b).count();
        for _ in same..folders.len() {
            out.push_str("</ul></li>");
        }
        folders.truncate(same);
        for dir in &dirs[same..] {
            out.push_str(
                &html! { li.dir { span { (Text(dir)) "/" } } }
                    .into_string()
                    .replace("</li>", "<ul>"),
            );
            folders.push(dir);
        }
        let link = html! {
            li {
                a href={ (base) "?file=" (page::encode(&file.path, true)) "#source" }
                  aria-current=[(open == Some(file.path.as_str())).then_some("true")] {
                    (Text(leaf[0]))
                }
                @if file.binary { " " span.hint { "(binary)" } }
            }
        };
        out.push_str(&link.into_string());
    }
    for _ in 0..folders.len() {
        out.push_str("</ul></li>");
    }
    html! { ul.tree { (maud::PreEscaped(out)) } }
}

fn file_view(file: &SourceFileView) -> Markup {
    html! {
        section.file id="source" {
            h3 { code { (Text(&file.path)) } " " span.hint { (file.size) " bytes" } }
            @if file.binary {
                p.hint { "Binary file: not shown." }
            } @else if let Some(content) = &file.content {
                (highlight::source(&file.path, content))
                @if file.truncated { p.hint { "Only the start of the file is shown." } }
            } @else {
                p.hint { "Too large to show here." }
            }
        }
    }
}

/// Version `v`'s build log, as `GET .../versions/{v}/build-log` answers it.
async fn build_log(
    state: &AppState,
    session: &Session,
    ns: &str,
    name: &str,
    v: u32,
) -> Option<(u32, String)> {
    let answer = crate::rest::build_log::get(
        State(state.clone()),
        session.caller.clone(),
        PathParams((ns.to_owned(), name.to_owned(), v.to_string())),
        HeaderMap::new(),
        Ok(axum::extract::Query(Vec::new())),
    )
    .await
    .ok()?;
    if answer.status() != StatusCode::OK {
        return None;
    }
    let bytes = answer.into_body().collect().await.ok()?.to_bytes();
    Some((v, String::from_utf8_lossy(&bytes).into_owned()))
}

#[derive(serde::Deserialize)]
pub struct TryForm {
    #[serde(default)]
    csrf: String,
    #[serde(default)]
    method: String,
    #[serde(default)]
    path: String,
    #[serde(default)]
    body: String,
}

/// The most of an answer's body a "try it" shows.
const TRY_SHOWN: usize = 64 * 1024;

/// `POST .../try`: one call of the function through the invoke proxy (in
/// this process, as a caller's call goes: it is recorded as one), and its
/// answer shown.
pub async fn try_it(
    State(state): State<AppState>,
    session: Session,
    PathParams((ns, name)): PathParams<(String, String)>,
    axum::Form(form): axum::Form<TryForm>,
) -> Response {
    use tower::ServiceExt;
    if let Err(refused) = session.check(&form.csrf) {
        return refused;
    }
    if let Err(e) = session.caller.namespace(&ns) {
        return page::failure(e);
    }
    let method = match form.method.as_str() {
        m @ ("GET" | "POST" | "PUT" | "DELETE") => m,
        _ => "GET",
    };
    let path = if form.path.starts_with('/') {
        form.path.clone()
    } else {
        format!("/{}", form.path)
    };
    let uri = format!("/fn/{ns}/{name}{path}");
    let req = axum::http::Request::builder()
        .method(method)
        .uri(&uri)
        .header(axum::http::header::CONTENT_TYPE, "application/json")
        .body(axum::body::Body::from(form.body.clone()));
    let req = match req {
        Ok(r) => r,
        Err(_) => {
            return page::refused(
                StatusCode::UNPROCESSABLE_ENTITY,
                "Not a path",
                "The path is not one a request can have.",
            );
        }
    };
    let answer = match crate::fn_router(state).oneshot(req).await {
        Ok(a) => a,
        Err(never) => match never {},
    };
    let status = answer.status();
    let headers: Vec<(String, String)> = answer
        .headers()
        .iter()
        .map(|(k, v)| {
            (
                k.to_string(),
                String::from_utf8_lossy(v.as_bytes()).into_owned(),
            )
        })
        .collect();
    let bytes = answer
        .into_body()
        .collect()
        .await
        .map(|b| b.to_bytes())
        .unwrap_or_default();
    let shown = String::from_utf8_lossy(&bytes[..bytes.len().min(TRY_SHOWN)]).into_owned();
    let back = format!("/console/ns/{ns}/functions/{name}");
    let body = html! {
        p { a href=(back) { "← " (Text(&name)) } }
        h1 { (method) " " code { (Text(&path)) } }
        p { "Status " strong { (status.as_u16()) } " " (status.canonical_reason().unwrap_or("")) }
        h2 { "Headers" }
        table { tbody { @for (k, v) in &headers { tr { td { code { (Text(k)) } } td { code { (Text(v)) } } } } } }
        h2 { "Body" }
        pre.log { (Text(&shown)) }
        @if bytes.len() > TRY_SHOWN { p.hint { "Only the first " (TRY_SHOWN) " of " (bytes.len()) " bytes are shown." } }
    };
    Page::of(&session, &ns, &format!("Try {name}"), body).into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn file(path: &str) -> SourceFileView {
        SourceFileView {
            path: path.into(),
            size: 1,
            binary: false,
            truncated: false,
            content: Some("x".into()),
        }
    }

    #[test]
    fn the_tree_nests_folders_and_escapes_names() {
        let files = ["pkg/sub/c.py", "a.py", "pkg/b.py", "z/<x>.py"].map(file);
        let html = tree("/base", &files, Some("pkg/b.py")).into_string();
        assert_eq!(
            html.matches("<ul").count(),
            html.matches("</ul>").count(),
            "{html}"
        );
        assert_eq!(
            html.matches("<li").count(),
            html.matches("</li>").count(),
            "{html}"
        );
        assert!(html.contains(r#"<li class="dir"><span>pkg/</span><ul><li><a href="/base?file=pkg/b.py#source" aria-current="true">b.py</a></li><li class="dir"><span>sub/</span><ul>"#), "{html}");
        assert!(
            html.contains("&lt;x&gt;.py") && html.contains("%3Cx%3E.py"),
            "{html}"
        );
        assert!(!html.contains("<x>"), "{html}");
    }

    #[test]
    fn the_entrypoints_module_is_shown_first() {
        let source = SourceView {
            namespace: String::new(),
            name: String::new(),
            version: 1,
            sha256: String::new(),
            files: ["a.py", "handler.py"].map(file).to_vec(),
            truncated: false,
            inlined_bytes: 0,
            inline_limit: 0,
        };
        let open =
            |asked| open_file(&source, Some("handler.handle"), asked).map(|f| f.path.clone());
        assert_eq!(open(None).as_deref(), Some("handler.py"));
        assert_eq!(open(Some("a.py")).as_deref(), Some("a.py"));
        assert_eq!(open(Some("missing")).as_deref(), Some("handler.py"));
    }
}
