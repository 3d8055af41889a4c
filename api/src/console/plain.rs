//! The seed's plain-text routes, kept: `GET /funcs/{ns}` (a namespace's
//! functions, one line each: name, phase, version, URL) and
//! `GET /funcs/{ns}/source/{fn}` (a function's files), for curl with a
//! bearer token, with the API's tenancy (another tenant's namespace is
//! 404). A browser (`Accept: text/html`) is sent to the console's page of
//! the same thing. Unlike the seed's, no token is taken from the URL.

use axum::extract::State;
use axum::http::{HeaderMap, header};
use axum::response::{IntoResponse, Redirect, Response};
use sless_api_types::SourceView;

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::ApiError;
use crate::plumbing::paging::PageQuery;
use crate::plumbing::path::PathParams;
use crate::rest::function::function_url;

fn wants_html(headers: &HeaderMap) -> bool {
    headers
        .get(header::ACCEPT)
        .and_then(|a| a.to_str().ok())
        .is_some_and(|a| a.contains("text/html"))
}

fn text(body: String) -> Response {
    ([(header::CONTENT_TYPE, "text/plain; charset=utf-8")], body).into_response()
}

fn read<T: serde::de::DeserializeOwned>(value: serde_json::Value) -> Result<T, Response> {
    serde_json::from_value(value).map_err(|e| ApiError::internal(e.to_string()).into_response())
}

fn problem(e: ApiError) -> Response {
    e.into_response()
}

/// `GET /funcs/{ns}`.
pub async fn list(
    State(state): State<AppState>,
    headers: HeaderMap,
    PathParams(ns): PathParams<String>,
) -> Response {
    if wants_html(&headers) {
        return Redirect::to(&format!("/console/ns/{}", super::page::encode(&ns, false)))
            .into_response();
    }
    answer(async {
        let caller = caller(&state, &headers).await?;
        let namespace = caller.namespace(&ns).map_err(problem)?;
        // Every function, a page at a time.
        let mut out = String::new();
        let mut query = PageQuery::largest();
        loop {
            let (rows, next) = crate::rest::functions::rows_page(&state, &namespace, &query)
                .await
                .map_err(problem)?;
            for r in &rows {
                let version = r
                    .current_version
                    .map_or("-".to_owned(), |v| format!("v{v}"));
                let url = function_url(state.fn_url.as_deref(), &r.namespace, &r.name);
                let phase = r.phase.as_str();
                out.push_str(&format!("{} {phase} {version} {url}\n", r.name));
            }
            match next {
                Some(c) => query = query.after(c),
                None => break,
            }
        }
        Ok(out)
    })
    .await
}

/// `GET /funcs/{ns}/source/{fn}`.
pub async fn source(
    State(state): State<AppState>,
    headers: HeaderMap,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> Response {
    if wants_html(&headers) {
        return Redirect::to(&format!(
            "/console/ns/{}/functions/{}",
            super::page::encode(&ns, false),
            super::page::encode(&name, false)
        ))
        .into_response();
    }
    answer(async {
        let caller = caller(&state, &headers).await?;
        let axum::Json(source) =
            crate::rest::source::get(State(state), caller, PathParams((ns, name)))
                .await
                .map_err(problem)?;
        let source: SourceView = read(source)?;
        let mut out = String::new();
        for file in source.files {
            out.push_str(&format!("=== {} ({} bytes) ===\n", file.path, file.size));
            match (&file.content, file.binary) {
                (_, true) => out.push_str("(binary)\n"),
                (Some(content), _) => {
                    out.push_str(content);
                    if !content.ends_with('\n') {
                        out.push('\n');
                    }
                }
                (None, _) => out.push_str("(too large to show)\n"),
            }
        }
        Ok(out)
    })
    .await
}

/// The bearer token's caller, as the API takes it.
async fn caller(state: &AppState, headers: &HeaderMap) -> Result<Caller, Response> {
    let mut parts = axum::http::Request::builder()
        .body(())
        .expect("an empty request")
        .into_parts()
        .0;
    parts.headers = headers.clone();
    <Caller as axum::extract::FromRequestParts<AppState>>::from_request_parts(&mut parts, state)
        .await
        .map_err(IntoResponse::into_response)
}

async fn answer(body: impl Future<Output = Result<String, Response>>) -> Response {
    match body.await {
        Ok(text_body) => text(text_body),
        Err(refused) => refused,
    }
}
