//! The frame of every console page: the document, the navigation of the
//! signed-in namespace, and pages for refusals and failures. Pages are
//! written with maud, which escapes every value put into them.

use axum::http::StatusCode;
use axum::response::{Html, IntoResponse, Response};
use maud::{DOCTYPE, Markup, html};

use super::text::Text;
use crate::plumbing::error::ApiError;

/// A page to answer with.
pub struct Page {
    pub status: StatusCode,
    pub markup: Markup,
}

impl Page {
    /// A page without the signed-in navigation (sign-in, refusals).
    pub fn bare(title: &str, body: Markup) -> Page {
        Page {
            status: StatusCode::OK,
            markup: document(title, html! { main { (body) } }),
        }
    }
}

impl IntoResponse for Page {
    fn into_response(self) -> Response {
        (self.status, Html(self.markup.into_string())).into_response()
    }
}

pub(super) fn document(title: &str, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                title { (super::text::plain(title)) " · sless" }
                link rel="stylesheet" href=(super::assets::CSS_PATH);
                script src=(super::assets::JS_PATH) defer {}
            }
            body { (body) }
        }
    }
}

/// A refusal, as a page.
pub fn refused(status: StatusCode, title: &str, detail: &str) -> Response {
    let mut page = Page::bare(
        title,
        html! {
            h1 { (Text(title)) }
            p { (Text(detail)) }
            p { a href="/console" { "Back to the console" } }
        },
    );
    page.status = status;
    page.into_response()
}

/// An error of the API's, as a page with its status (another tenant's
/// namespace or function is a 404 like any that does not exist).
pub fn failure(e: ApiError) -> Response {
    let title = match e.status {
        StatusCode::NOT_FOUND => "Not found",
        StatusCode::UNAUTHORIZED | StatusCode::FORBIDDEN => "Not allowed",
        s if s.is_client_error() => "Refused",
        _ => "Something failed",
    };
    refused(e.status, title, &e.detail)
}

/// A phase, in colour and in words.
pub fn phase(phase: &str) -> Markup {
    let class = match phase {
        "Ready" => "ready",
        "Failed" => "failed",
        "Building" | "Pending" => "busy",
        _ => "other",
    };
    html! { span class={ "phase " (class) } { (phase) } }
}

/// A function's phase, and "scaled to zero" when it is Ready with nothing
/// running.
pub fn phase_of(f: &sless_api_types::FunctionView) -> Markup {
    let idle = f.phase == "Ready" && f.instances == Some(0);
    html! {
        (phase(&f.phase))
        @if idle { " " span class="idle" title="no call for its idle window: the next call starts it" { "scaled to zero" } }
    }
}

/// `s` percent-encoded for a URL: letters, digits and `-_.~` as they are,
/// and `/` too when `keep_slash` (a path of several segments).
pub fn encode(s: &str, keep_slash: bool) -> String {
    s.bytes()
        .map(|b| match b {
            b'a'..=b'z' | b'A'..=b'Z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b'/' if keep_slash => "/".to_owned(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}
