//! `POST /v1/namespaces/{ns}/ensure`: makes sure a namespace exists.
//!
//! Idempotent, and 200 whether the namespace is new or not. The first call
//! appends `NamespaceEnsured` to the namespace's stream (`namespace/{ns}`);
//! every later one appends nothing. Recording it once gives the audit log
//! who asked for the namespace first and when, and gives a driver that
//! must create something per namespace (a Kubernetes Namespace) an event to
//! converge on, while a client that calls `ensure` before every apply costs
//! one read and writes nothing.
//!
//! A token may ensure its own namespace only (an admin token any); another
//! namespace is 404 like everywhere else.

use axum::extract::{Request, State};
use axum::http::StatusCode;
use serde_json::json;
use sless_domain::namespace::{NamespaceCommand, NamespaceState};
use sless_domain::{Aggregate, Namespace};
use sless_store::eventlog::Appended;

use crate::AppState;
use crate::plumbing::command::{
    self, Answered, Current, Decided, Handler, Plan, RequestContext, Target, opening,
};
use crate::plumbing::error::ApiResult;
use crate::plumbing::path::{NamespacePath, PathParams};

#[utoipa::path(post, path = "/namespaces/{ns}/ensure", operation_id = "ensureNamespace", tag = "namespaces",
    summary = "Create the namespace if it does not exist (idempotent)",
    params(NamespacePath),
    responses((status = 200, description = "The namespace exists", body = crate::rest::openapi::Ensured)))]
pub async fn ensure(
    State(state): State<AppState>,
    PathParams(ns): PathParams<String>,
    req: Request,
) -> Result<Answered, axum::response::Response> {
    use axum::response::IntoResponse;
    let (mut head, _) = req.into_parts();
    let caller = opening::caller_of(&mut head, &state).await?;
    let run = async {
        let namespace = caller.namespace(&ns)?;
        let mut ctx = RequestContext::new(
            caller,
            &head.headers,
            head.method.as_str(),
            head.uri.path(),
            b"",
        )?;
        // Idempotent by nature: an Idempotency-Key adds nothing to keep.
        ctx.idempotency = None;
        let target = Target::of::<NamespaceState>(&namespace, &namespace, namespace.as_str());
        command::execute(&state, &ctx, &target, &mut Ensure { namespace }).await
    };
    run.await.map_err(IntoResponse::into_response)
}

/// `ensure`'s command.
struct Ensure {
    namespace: Namespace,
}

impl Handler<NamespaceState> for Ensure {
    async fn decide(
        &mut self,
        _: &AppState,
        _: &RequestContext,
        current: Current<'_, NamespaceState>,
    ) -> ApiResult<Decided<NamespaceState>> {
        let events = current.state.decide(NamespaceCommand::Ensure)?;
        if events.is_empty() {
            let body = json!({ "namespace": self.namespace, "created": false });
            return Ok(Decided::Unchanged(Answered::new(StatusCode::OK, body)));
        }
        Ok(Decided::Append(Plan::new(events)))
    }

    fn answer(&self, _: &NamespaceState, appended: Appended) -> Answered {
        let body = json!({
            "namespace": self.namespace,
            "created": true,
            "position": appended.position,
        });
        Answered::new(StatusCode::OK, body)
    }

    /// A concurrent call ensured it first: it exists, which is all we ask.
    fn depends_on(&self, _: &NamespaceState, _: &NamespaceState) -> bool {
        false
    }
}
