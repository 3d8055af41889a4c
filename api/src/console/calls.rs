//! The console reads and changes through the API's own handlers: a read
//! is the route's JSON answer read back into the API's documents, a change
//! is the route's command, opened for the signed-in caller (the same
//! events, actor and request id as the REST API's).

use axum::Json;
use axum::body::Bytes;
use axum::http::{HeaderMap, Method};
use axum::response::Response;
use serde::de::DeserializeOwned;

use sless_api_types::{TriggerList, TriggerView};

use super::page;
use super::session::Session;
use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::command::{Opened, RequestContext};
use crate::plumbing::error::ApiResult;

/// A route's JSON answer, as the document `T`; an error as a page.
pub async fn api_json<T: DeserializeOwned>(
    answer: impl Future<Output = ApiResult<Json<serde_json::Value>>>,
) -> Result<T, Response> {
    let Json(value) = answer.await.map_err(page::failure)?;
    serde_json::from_value(value).map_err(|e| {
        page::failure(crate::plumbing::error::ApiError::internal(format!(
            "the console cannot read the API's answer: {e}"
        )))
    })
}

/// Every trigger of the namespace `ns` (every page), as the API lists them.
pub async fn all_triggers(
    state: &AppState,
    caller: &Caller,
    ns: &str,
) -> Result<Vec<TriggerView>, Response> {
    let list: TriggerList = api_json(async {
        let namespace = caller.namespace(ns)?;
        let items = crate::rest::triggers::all(state, &namespace).await?;
        Ok(Json(
            serde_json::json!({ "items": items, "next_cursor": null }),
        ))
    })
    .await?;
    Ok(list.items)
}

/// A command's answer body, as the document `T`.
pub fn answered<T: DeserializeOwned>(
    answer: crate::plumbing::command::Answered,
) -> Result<T, Response> {
    serde_json::from_value(answer.body).map_err(|e| {
        page::failure(crate::plumbing::error::ApiError::internal(format!(
            "the console cannot read the API's answer: {e}"
        )))
    })
}

/// The command request a form makes: `method path` with the JSON `body`,
/// by the session's caller, with the form request's headers (its request
/// id).
pub fn opened(
    session: &Session,
    headers: &HeaderMap,
    method: Method,
    path: &str,
    body: String,
) -> Result<Opened, Response> {
    let body = Bytes::from(body);
    let ctx = RequestContext::new(
        session.caller.clone(),
        headers,
        method.as_str(),
        path,
        &body,
    )
    .map_err(page::failure)?;
    Ok(Opened { ctx, body })
}

/// Waits, at most 2 s, until the read models show what a form's command
/// did (`shown` says whether they do), so the page it goes to shows it too.
pub async fn settle<F, Fut>(shown: F)
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    crate::plumbing::catch_up::until_shown(std::time::Duration::from_secs(2), shown).await;
}
