//! Opening a command request, the same for every route that changes state:
//! who asks (a bad token is 401; another tenant's namespace in the path is
//! 404, before anything else is looked at), the body within the route's
//! limit, the `RequestContext` (request id, trace context, `Idempotency-Key`,
//! preconditions) and, when the key was used before, that request's answer,
//! sent again as it was.

use axum::body::Bytes;
use axum::extract::{FromRequest, FromRequestParts, RawPathParams, Request};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};

use super::RequestContext;
use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::ApiError;

/// A command request, opened. As an extractor it takes the body, so it
/// comes last among a handler's arguments; its rejection is either a
/// problem document or the replayed answer of an earlier request with the
/// same `Idempotency-Key`.
pub struct Opened {
    pub ctx: RequestContext,
    pub body: Bytes,
}

impl Opened {
    /// The caller.
    pub fn caller(&self) -> &Caller {
        &self.ctx.caller
    }
}

impl FromRequest<AppState> for Opened {
    type Rejection = Response;

    async fn from_request(req: Request, state: &AppState) -> Result<Opened, Response> {
        let (mut parts, body) = req.into_parts();
        let caller = caller_of(&mut parts, state).await?;
        let head = parts.clone();
        let body = Bytes::from_request(Request::from_parts(parts, body), state)
            .await
            .map_err(|r| ApiError::from(r).into_response())?;
        open(state, caller, &head, body).await
    }
}

/// The caller of a request whose path may name a namespace: 404 when it is
/// not one the caller may use.
pub async fn caller_of(parts: &mut Parts, state: &AppState) -> Result<Caller, Response> {
    let caller = Caller::from_request_parts(parts, state)
        .await
        .map_err(IntoResponse::into_response)?;
    if let Ok(params) = RawPathParams::from_request_parts(parts, state).await
        && let Some((_, ns)) = params.iter().find(|(name, _)| *name == "ns")
    {
        caller.namespace(ns).map_err(IntoResponse::into_response)?;
    }
    Ok(caller)
}

/// Opens a request whose body was read already (an upload reads its own
/// after waiting for its turn).
pub async fn open(
    state: &AppState,
    caller: Caller,
    head: &Parts,
    body: Bytes,
) -> Result<Opened, Response> {
    let ctx = RequestContext::new(
        caller,
        &head.headers,
        head.method.as_str(),
        head.uri.path(),
        &body,
    )
    .map_err(IntoResponse::into_response)?;
    match ctx.replay(state).await {
        Ok(None) => Ok(Opened { ctx, body }),
        Ok(Some(answer)) => Err(answer.into_response()),
        Err(e) => Err(e.into_response()),
    }
}
