//! `/v1/namespaces/{ns}/functions`: create, list, get, update (PUT),
//! delete, upload.

use std::sync::Arc;

use axum::extract::State;
use axum::http::StatusCode;
use sless_api_types::{CreateFunction, Deleted, FunctionList, FunctionView, UpdateFunction};
use sless_domain::archive;
use sless_domain::{
    DomainError, Function, FunctionCommand, FunctionEvent, FunctionKey, FunctionName, FunctionSpec,
    Namespace, Phase, Runtime, Scaling, SourceVersion, UploadedSource,
};
use sless_store::eventlog::Appended;
use sless_store::readmodel::{self, FunctionRow};
use sless_store::{blobs, jobs as log};

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::catch_up;
use crate::plumbing::command::{
    self, Answered, Current, Decided, Handler, Opened, Plan, RequestContext,
};
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::json::parse_json;
use crate::plumbing::paging::{FunctionPages, PageQuery, PageRequest, Paged};
use crate::plumbing::path::{FunctionPath, NamespacePath, PathParams};
use crate::plumbing::quota::{self, Demand};
use crate::rest::function::{
    accepted, answer, function_not_found, load, path_key, target, unchanged, view_of_row,
    view_of_state,
};
use crate::rest::openapi::IdempotencyKey;
use crate::rest::versions::{retention, version_demand};

fn parse_name(name: &str) -> ApiResult<FunctionName> {
    FunctionName::parse(name).map_err(ApiError::from)
}

#[utoipa::path(post, path = "/namespaces/{ns}/functions", operation_id = "createFunction", tag = "functions",
    summary = "Create a function",
    params(NamespacePath, IdempotencyKey),
    request_body = CreateFunction,
    responses((status = 201, description = "Created; upload its source next", body = crate::rest::openapi::FunctionView)))]
pub async fn create(
    State(state): State<AppState>,
    PathParams(ns): PathParams<String>,
    opened: Opened,
) -> ApiResult<Answered> {
    let namespace = opened.caller().namespace(&ns)?;
    let req: CreateFunction = parse_json(&opened.body)?;
    let name = parse_name(&req.name)?;
    let runtime: Runtime = req.runtime.parse()?;
    let spec = FunctionSpec {
        runtime,
        entrypoint: req.entrypoint,
        memory_mb: req.memory_mb,
        timeout_sec: req.timeout_sec,
        env_vars: req.env_vars,
        scale_to_zero_after_sec: req.scale_to_zero_after_sec,
        scaling: Scaling {
            min_instances: req.min_instances,
            max_instances: req.max_instances,
            concurrency: req.concurrency,
        },
    };
    let key = FunctionKey::new(namespace, name);
    let mut create = Create {
        fn_url: state.fn_url.clone(),
        target: key,
        spec,
    };
    command::execute(&state, &opened.ctx, &target(&create.target), &mut create).await
}

/// `create`'s command.
struct Create {
    fn_url: Option<Arc<str>>,
    target: FunctionKey,
    spec: FunctionSpec,
}

impl Handler<Function> for Create {
    async fn decide(
        &mut self,
        state: &AppState,
        _: &RequestContext,
        current: Current<'_, Function>,
    ) -> ApiResult<Decided<Function>> {
        let spec = self.spec.clone();
        spec.validate()?;
        quota::instances(&state.quotas, &self.target.namespace, &spec)?;
        let events = current
            .state
            .decide(FunctionCommand::Create { spec })?
            .events;
        let quota = Demand::function(self.target.namespace.clone());
        Ok(Decided::Append(Plan::new(events).quota(quota)))
    }

    fn answer(&self, after: &Function, appended: Appended) -> Answered {
        let view = FunctionView {
            position: Some(appended.position),
            ..view_of_state(self.fn_url.as_deref(), &self.target, after)
        };
        answer(StatusCode::CREATED, &view)
    }
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions", operation_id = "listFunctions", tag = "functions",
    summary = "List the namespace's functions, a page at a time, by name",
    description = "One page of the functions, by name. When more follow, `next_cursor` is set and \
        a `Link: <…>; rel=\"next\"` header gives the next page's URL; the last page has \
        `next_cursor` null and no `Link`.",
    params(NamespacePath, FunctionPages),
    responses((status = 200, description = "One page of functions", body = crate::rest::openapi::FunctionList)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
    asked: PageRequest,
) -> ApiResult<Paged> {
    let namespace = caller.namespace(&ns)?;
    let asked = asked.read()?;
    let query = &asked.query;
    let list = format!("functions/{namespace}");
    let page = state
        .pages
        .page(&state.pool, &list, query, async || {
            let (rows, next) = rows_page(&state, &namespace, query).await?;
            let fn_url = state.fn_url.as_deref();
            let page = FunctionList {
                items: rows.iter().map(|r| view_of_row(fn_url, r)).collect(),
                next_cursor: next.clone(),
            };
            // About 400 bytes a function, written once.
            let mut body = Vec::with_capacity(64 + rows.len() * 512);
            serde_json::to_writer(&mut body, &page)
                .map_err(|e| ApiError::internal(format!("the list cannot be written: {e}")))?;
            Ok((body, next))
        })
        .await?;
    Ok(asked.answer(page.body.clone(), page.next.as_deref()))
}

/// One page of a namespace's functions (read with `query`), and the
/// `next_cursor` when more follow.
pub(crate) async fn rows_page(
    state: &AppState,
    namespace: &Namespace,
    query: &PageQuery,
) -> ApiResult<(Vec<FunctionRow>, Option<String>)> {
    query
        .read(
            &format!("functions/{namespace}"),
            |k| FunctionName::parse(k).is_ok(),
            async |after, fetch| {
                Ok(readmodel::function_rows_after(
                    &state.pool,
                    namespace.as_str(),
                    after.as_deref(),
                    fetch,
                )
                .await?)
            },
            |r| r.name.clone(),
        )
        .await
}

/// How long a read of a function waits for the read model to show the
/// function's last event.
const READ_YOUR_WRITES: std::time::Duration = std::time::Duration::from_secs(1);

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}", operation_id = "getFunction", tag = "functions",
    summary = "Get a function",
    params(FunctionPath),
    responses((status = 200, description = "The function", body = crate::rest::openapi::FunctionView)))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Answered> {
    let key = path_key(&caller, &ns, &name)?;
    let row_of = || readmodel::function_row(&state.pool, key.namespace.as_str(), key.name.as_str());
    if let Some(mut row) = row_of().await? {
        let version = log::log_version(&state.pool, &key.stream()).await?;
        // A client reads what it has just done: a row behind the log is
        // given a moment to catch up. The answer comes from the row, as the
        // invoke proxy sees it, so a function shown Ready here is served
        // there.
        if row.stream_version < version {
            catch_up::until_shown(READ_YOUR_WRITES, || async {
                matches!(row_of().await, Ok(Some(r)) if r.stream_version >= version)
            })
            .await;
            if let Some(r) = row_of().await? {
                row = r;
            }
        }
        // A delete the read model has not applied yet is a 404 already.
        if row.stream_version < version && !load(&state, &key).await?.exists() {
            return Err(function_not_found(&key));
        }
        let view = with_in_flight(&state, &key, view_of_row(state.fn_url.as_deref(), &row)).await?;
        return Ok(answer(StatusCode::OK, &view).etag(version));
    }
    // Not projected yet (just created, or created again): answer from the log.
    let f = load(&state, &key).await?;
    if !f.exists() {
        return Err(function_not_found(&key));
    }
    let view = with_in_flight(
        &state,
        &key,
        view_of_state(state.fn_url.as_deref(), &key, &f),
    )
    .await?;
    Ok(answer(StatusCode::OK, &view).etag(f.stream_version))
}

/// A function's view with its calls in flight now, summed over every API
/// process (a measurement, not part of its state: its ETag stays the
/// stream's version).
async fn with_in_flight(
    state: &AppState,
    key: &FunctionKey,
    view: FunctionView,
) -> ApiResult<FunctionView> {
    let in_flight =
        sless_store::scaling::in_flight(&state.pool, key.namespace.as_str(), key.name.as_str())
            .await?;
    Ok(FunctionView {
        in_flight: Some((in_flight * 100.0).round() / 100.0),
        ..view
    })
}

/// The spec `current` becomes with the changes of `update`.
fn apply_update(update: &UpdateFunction, current: &FunctionSpec) -> ApiResult<FunctionSpec> {
    {
        let runtime = match &update.runtime {
            Some(r) => r.parse::<Runtime>()?,
            None => current.runtime,
        };
        Ok(FunctionSpec {
            runtime,
            entrypoint: update
                .entrypoint
                .clone()
                .unwrap_or_else(|| current.entrypoint.clone()),
            memory_mb: update.memory_mb.unwrap_or(current.memory_mb),
            timeout_sec: update.timeout_sec.unwrap_or(current.timeout_sec),
            env_vars: update
                .env_vars
                .clone()
                .unwrap_or_else(|| current.env_vars.clone()),
            scale_to_zero_after_sec: update
                .scale_to_zero_after_sec
                .or(current.scale_to_zero_after_sec),
            scaling: Scaling {
                min_instances: update.min_instances.or(current.scaling.min_instances),
                max_instances: update.max_instances.or(current.scaling.max_instances),
                concurrency: update.concurrency.or(current.scaling.concurrency),
            },
        })
    }
}

/// Packs the files of `source` again for `runtime` (the build context's
/// Dockerfile and install step depend on it) and stores the new context:
/// the source of the version a runtime change makes, and whether the
/// context was stored now (not there before).
async fn rebuild_for_runtime(
    state: &AppState,
    source: &SourceVersion,
    runtime: Runtime,
) -> ApiResult<(UploadedSource, bool)> {
    let old = state.blobs.get(&source.context_key).await?;
    let limits = state.limits;
    let context = tokio::task::spawn_blocking(move || {
        sless_domain::source::read_context(&old, &limits).map(|files| files.build_context(runtime))
    })
    .await
    .map_err(|e| ApiError::internal(format!("repacking the source: {e}")))?
    .map_err(|e| ApiError::internal(format!("the stored build context cannot be read: {e}")))?;
    let context_sha256 = archive::sha256_hex(&context);
    let context_key = blobs::context_key(&context_sha256);
    // Recorded first, as an upload's blobs are (`sless_store::orphans`).
    sless_store::orphans::record_in_flight(&state.pool, &[&context_key]).await?;
    let stored = state
        .blobs
        .put_if_absent(&context_key, context, "application/gzip")
        .await?;
    let rebuilt = UploadedSource {
        context_sha256,
        context_key,
        ..UploadedSource::from(source)
    };
    Ok((rebuilt, stored))
}

/// `PUT /v1/namespaces/{ns}/functions/{name}`: changes the spec.
///
/// Appends `FunctionSpecChanged` (the whole new spec) and asks a worker to
/// redeploy: 202 with the event's position. A runtime change also packs the
/// current source again for the new runtime, which becomes the next version
/// (`FunctionUploaded` in the same append) and is built before it deploys.
/// A spec that changes nothing answers 200 and appends nothing.
#[utoipa::path(put, path = "/namespaces/{ns}/functions/{name}", operation_id = "updateFunction", tag = "functions",
    summary = "Change a function's spec; a deployed function is redeployed",
    params(FunctionPath, IdempotencyKey),
    request_body = UpdateFunction,
    responses(
        (status = 200, description = "Nothing changed (`unchanged`)", body = crate::rest::openapi::FunctionView),
        (status = 202, description = "Accepted: the change is applied next", body = crate::rest::openapi::FunctionView)))]
pub async fn update(
    State(state): State<AppState>,
    PathParams((ns, name)): PathParams<(String, String)>,
    opened: Opened,
) -> ApiResult<Answered> {
    let key = path_key(opened.caller(), &ns, &name)?;
    let req: UpdateFunction = parse_json(&opened.body)?;
    if let Some(n) = &req.name
        && n != key.name.as_str()
    {
        return Err(ApiError::invalid(
            "name",
            format!(
                "the body names {n:?} but the path names {:?}; a function cannot be renamed",
                key.name.as_str()
            ),
        ));
    }
    let mut change = ChangeSpec {
        fn_url: state.fn_url.clone(),
        target: key,
        req,
        rebuilt: None,
        written: Vec::new(),
    };
    command::execute(&state, &opened.ctx, &target(&change.target), &mut change).await
}

/// `update`'s command.
struct ChangeSpec {
    fn_url: Option<Arc<str>>,
    target: FunctionKey,
    req: UpdateFunction,
    /// The current source packed again for a new runtime, once it is.
    rebuilt: Option<UploadedSource>,
    /// The build contexts this request put in the store (not there before it).
    written: Vec<String>,
}

impl ChangeSpec {
    /// The source of the version a runtime change makes, when `spec` needs
    /// one: packed and stored once, checked against the quotas before.
    async fn rebuilt_for(
        &mut self,
        state: &AppState,
        current: &Function,
        spec: &FunctionSpec,
    ) -> ApiResult<Option<UploadedSource>> {
        let Some(v) = current.rebuild_for(spec).cloned() else {
            return Ok(None);
        };
        if let Some(r) = self.rebuilt.as_ref().filter(|r| r.sha256 == v.sha256) {
            return Ok(Some(r.clone()));
        }
        // The version it makes counts against the quotas (less what
        // retention prunes with it): checked before its context is stored
        // (and again at the commit). Decided ahead on the source as it is:
        // the context packed for the new runtime differs only in its
        // digest, which neither reads.
        let ahead = current.decide(FunctionCommand::ChangeSpec {
            spec: spec.clone(),
            rebuilt: Some(UploadedSource::from(&v)),
            retention: retention(state),
        })?;
        let demand = version_demand(&self.target, v.size, &ahead.pruned, false);
        command::check_quota(state, &demand).await?;
        let (source, stored) = rebuild_for_runtime(state, &v, spec.runtime).await?;
        if stored {
            self.written.push(source.context_key.clone());
        }
        self.rebuilt = Some(source.clone());
        Ok(Some(source))
    }
}

impl Handler<Function> for ChangeSpec {
    async fn decide(
        &mut self,
        state: &AppState,
        _: &RequestContext,
        current: Current<'_, Function>,
    ) -> ApiResult<Decided<Function>> {
        let current = current.state;
        let Some(spec) = current.spec.as_ref().filter(|_| current.exists()) else {
            return Err(function_not_found(&self.target));
        };
        let spec = apply_update(&self.req, spec)?;
        // Refused before anything is stored for it.
        spec.validate()?;
        quota::instances(&state.quotas, &self.target.namespace, &spec)?;
        let rebuilt = self.rebuilt_for(state, current, &spec).await?;
        let retention = retention(state);
        let decision = current.decide(FunctionCommand::ChangeSpec {
            spec,
            rebuilt,
            retention,
        })?;
        if decision.events.is_empty() {
            let answer = unchanged(self.fn_url.as_deref(), &self.target, current);
            return Ok(Decided::Unchanged(answer));
        }
        // A runtime change makes a new version: it counts against the
        // quotas, and its repacked context must still be stored when the
        // events commit.
        let mut plan = Plan::new(Vec::new()).reconcile(self.target.queue_key());
        for e in &decision.events {
            if let FunctionEvent::FunctionUploaded(v) = e {
                let demand = version_demand(&self.target, v.size, &decision.pruned, false);
                plan = plan.quota(demand);
                plan.blobs
                    .extend([v.zip_key.clone(), v.context_key.clone()]);
            }
        }
        plan.collect = decision.pruned_blobs();
        plan.events = decision.events;
        Ok(Decided::Append(plan))
    }

    fn answer(&self, after: &Function, appended: Appended) -> Answered {
        accepted(self.fn_url.as_deref(), &self.target, after, appended)
    }

    /// Only a worker's events in between (a build starting, say) leave the
    /// change as it was decided; a change of the spec or the source in
    /// between is a real conflict.
    fn depends_on(&self, before: &Function, now: &Function) -> bool {
        let source_of = |f: &Function| f.current().map(|v| v.version);
        !now.exists() || source_of(now) != source_of(before) || now.spec != before.spec
    }

    fn stored(&self) -> &[String] {
        &self.written
    }
}

/// `DELETE /v1/namespaces/{ns}/functions/{name}`: appends `FunctionDeleted`
/// and asks a worker to remove what runs: 202 with the event's position.
/// The function is gone from list and get at once (404), its invoke URL
/// answers 404, and the name may be created again; the stream goes on, and
/// so do its version numbers.
#[utoipa::path(delete, path = "/namespaces/{ns}/functions/{name}", operation_id = "deleteFunction", tag = "functions",
    summary = "Delete a function; its name may be created again",
    params(FunctionPath, IdempotencyKey),
    responses((status = 202, description = "Accepted: it stops running next", body = crate::rest::openapi::Deleted)))]
pub async fn delete(
    State(state): State<AppState>,
    PathParams((ns, name)): PathParams<(String, String)>,
    opened: Opened,
) -> ApiResult<Answered> {
    let key = path_key(opened.caller(), &ns, &name)?;
    let mut delete = Delete { target: key };
    command::execute(&state, &opened.ctx, &target(&delete.target), &mut delete).await
}

/// `delete`'s command.
struct Delete {
    target: FunctionKey,
}

impl Handler<Function> for Delete {
    async fn decide(
        &mut self,
        _: &AppState,
        _: &RequestContext,
        current: Current<'_, Function>,
    ) -> ApiResult<Decided<Function>> {
        let events = current
            .state
            .decide(FunctionCommand::Delete)
            .map_err(|e| match e {
                DomainError::NotFound(_) => function_not_found(&self.target),
                e => e.into(),
            })?
            .events;
        Ok(Decided::Append(
            Plan::new(events).reconcile(self.target.queue_key()),
        ))
    }

    fn answer(&self, _: &Function, appended: Appended) -> Answered {
        let deleted = Deleted {
            namespace: self.target.namespace.to_string(),
            name: self.target.name.to_string(),
            phase: Phase::Deleted.as_str().to_owned(),
            position: appended.position,
        };
        let body = serde_json::to_value(deleted).expect("a delete's answer is JSON");
        Answered::new(StatusCode::ACCEPTED, body)
    }

    /// Whatever landed in between, a function that still exists is still
    /// to be deleted.
    fn depends_on(&self, _: &Function, _: &Function) -> bool {
        false
    }
}
