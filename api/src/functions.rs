//! `/v1/namespaces/{ns}/functions`: create, list, get, update (PUT),
//! delete, upload.

use std::collections::BTreeMap;

use axum::Json;
use axum::body::Bytes;
use axum::extract::State;
use axum::extract::rejection::BytesRejection;
use axum::http::{HeaderMap, Method, StatusCode, Uri};
use serde::Deserialize;
use serde_json::json;
use sless_domain::archive;
use sless_domain::{
    Function, FunctionCommand, FunctionEvent, FunctionKey, FunctionName, FunctionSpec, Runtime,
    SourceVersion, UploadedSource, decide,
};
use sless_store::blobs;
use sless_store::readmodel;

use crate::AppState;
use crate::auth::Caller;
use crate::command::{self, Command, RequestContext};
use crate::error::{ApiError, ApiResult, QUOTA_EXCEEDED, VERSION_CONFLICT};
use crate::function::{
    function_not_found, function_path, load, path_key, view_of_row, view_of_state,
};
use crate::json::{Answer, parse_json};
use crate::path::PathParams;
use crate::quota::Demand;
use crate::versions::version_demand;

/// The body of `POST /v1/namespaces/{ns}/functions`.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateFunction {
    /// A DNS-1123 label of at most 40 characters, starting with a letter.
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub name: String,
    /// `python3.11`, `nodejs20` or `go1.23`.
    #[schema(pattern = r"^(python3\.11|nodejs20|go1\.23)$")]
    pub runtime: String,
    /// `module.function` (Python, Node.js) or `package.Function` (Go).
    #[schema(min_length = 3)]
    pub entrypoint: String,
    #[serde(default = "default_memory")]
    #[schema(minimum = 64, maximum = 4096)]
    pub memory_mb: u32,
    #[serde(default = "default_timeout")]
    #[schema(minimum = 1, maximum = 900)]
    pub timeout_sec: u32,
    #[serde(default)]
    pub env_vars: BTreeMap<String, String>,
}

fn default_memory() -> u32 {
    128
}
fn default_timeout() -> u32 {
    30
}

fn parse_name(name: &str) -> ApiResult<FunctionName> {
    FunctionName::parse(name).map_err(ApiError::from)
}

#[utoipa::path(post, path = "/namespaces/{ns}/functions", tag = "functions",
    summary = "Create a function",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, description = "Makes a retry of the same request safe: answered as the first time")),
    request_body = CreateFunction,
    responses((status = 201, description = "Created; upload its source next", body = crate::openapi::FunctionView)))]
pub async fn create(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Answer> {
    let namespace = caller.namespace(&ns)?;
    let body = body?;
    let ctx = RequestContext::new(caller, &headers, method.as_str(), uri.path(), &body)?;
    if let Some((status, body)) = ctx.replay(&state).await? {
        return Ok((status, Json(body)));
    }
    let req: CreateFunction = parse_json(&body)?;
    let name = parse_name(&req.name)?;
    let runtime: Runtime = req.runtime.parse()?;
    let spec = FunctionSpec {
        runtime,
        entrypoint: req.entrypoint,
        memory_mb: req.memory_mb,
        timeout_sec: req.timeout_sec,
        env_vars: req.env_vars,
    };
    let key = FunctionKey::new(namespace, name);
    let current = load(&state, &key).await?;
    let events = match decide(&current, FunctionCommand::Create { spec }) {
        Ok(events) => events,
        Err(e) => {
            return command::settle(&state, &ctx, e.into())
                .await
                .map(|(s, b)| (s, Json(b)));
        }
    };
    let after = events.iter().fold(current.clone(), Function::evolve);
    let cmd = Command::new(
        key.stream(),
        current.stream_version,
        command::new_events(&ctx, &key, &events),
    )
    .quota(Demand::function(key.namespace.clone()));
    let (status, body) = command::commit(&state, &ctx, cmd, |appended| {
        let mut view = view_of_state(state.fn_url.as_deref(), &key, &after);
        view["position"] = json!(appended.position);
        (StatusCode::CREATED, view)
    })
    .await?;
    Ok((status, Json(body)))
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions", tag = "functions",
    summary = "List the namespace's functions",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)")),
    responses((status = 200, description = "The functions", body = crate::openapi::FunctionList)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
) -> ApiResult<Json<serde_json::Value>> {
    let namespace = caller.namespace(&ns)?;
    let rows = readmodel::function_rows(&state.pool, namespace.as_str()).await?;
    let items: Vec<_> = rows
        .iter()
        .map(|r| view_of_row(state.fn_url.as_deref(), r))
        .collect();
    Ok(Json(json!({ "items": items })))
}

#[utoipa::path(get, path = "/namespaces/{ns}/functions/{name}", tag = "functions",
    summary = "Get a function",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The function")),
    responses((status = 200, description = "The function", body = crate::openapi::FunctionView)))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Json<serde_json::Value>> {
    let key = path_key(&caller, &ns, &name)?;
    if let Some(row) =
        readmodel::function_row(&state.pool, key.namespace.as_str(), key.name.as_str()).await?
    {
        return Ok(Json(view_of_row(state.fn_url.as_deref(), &row)));
    }
    // Not projected yet (just created, or created again): answer from the log.
    let f = load(&state, &key).await?;
    if !f.exists() {
        return Err(function_not_found(&key));
    }
    Ok(Json(view_of_state(state.fn_url.as_deref(), &key, &f)))
}

/// The body of `PUT /v1/namespaces/{ns}/functions/{name}`: the fields to
/// change. A field left out keeps its value; `env_vars`, when given,
/// replaces the whole environment. `name`, when given, must be the path's.
#[derive(Debug, Deserialize, utoipa::ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateFunction {
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub name: Option<String>,
    #[schema(pattern = r"^(python3\.11|nodejs20|go1\.23)$")]
    pub runtime: Option<String>,
    #[schema(min_length = 3)]
    pub entrypoint: Option<String>,
    #[schema(minimum = 64, maximum = 4096)]
    pub memory_mb: Option<u32>,
    #[schema(minimum = 1, maximum = 900)]
    pub timeout_sec: Option<u32>,
    pub env_vars: Option<BTreeMap<String, String>>,
}

impl UpdateFunction {
    /// The spec `current` becomes with these changes.
    fn apply_to(self, current: &FunctionSpec) -> ApiResult<FunctionSpec> {
        let runtime = match self.runtime {
            Some(r) => r.parse::<Runtime>()?,
            None => current.runtime,
        };
        Ok(FunctionSpec {
            runtime,
            entrypoint: self
                .entrypoint
                .unwrap_or_else(|| current.entrypoint.clone()),
            memory_mb: self.memory_mb.unwrap_or(current.memory_mb),
            timeout_sec: self.timeout_sec.unwrap_or(current.timeout_sec),
            env_vars: self.env_vars.unwrap_or_else(|| current.env_vars.clone()),
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
        sha256: source.sha256.clone(),
        size: source.size,
        files: source.files,
        zip_key: source.zip_key.clone(),
        context_sha256,
        context_key,
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
#[utoipa::path(put, path = "/namespaces/{ns}/functions/{name}", tag = "functions",
    summary = "Change a function's spec; a deployed function is redeployed",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The function"), ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, description = "Makes a retry of the same request safe: answered as the first time")),
    request_body = UpdateFunction,
    responses(
        (status = 200, description = "Nothing changed (`unchanged`)", body = crate::openapi::FunctionView),
        (status = 202, description = "Accepted: the change is applied next", body = crate::openapi::FunctionView)))]
pub async fn update(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
    body: Result<Bytes, BytesRejection>,
) -> ApiResult<Answer> {
    let key = path_key(&caller, &ns, &name)?;
    let body = body?;
    let ctx = RequestContext::new(caller, &headers, method.as_str(), uri.path(), &body)?;
    if let Some((status, body)) = ctx.replay(&state).await? {
        return Ok((status, Json(body)));
    }
    let req: UpdateFunction = parse_json(&body)?;
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
    let mut current = load(&state, &key).await?;
    let Some(spec) = current.spec.clone().filter(|_| current.exists()) else {
        return Err(function_not_found(&key));
    };
    let spec = req.apply_to(&spec)?;
    // Refused before anything is stored for it.
    spec.validate()?;
    let mut rebuilt: Option<UploadedSource> = None;
    // The build contexts this request put in the store (not there before it).
    let mut written: Vec<String> = Vec::new();
    let mut tries = 0;
    loop {
        let needed = current.rebuild_for(&spec).cloned();
        let source = match needed {
            Some(v) if rebuilt.as_ref().is_some_and(|r| r.sha256 == v.sha256) => rebuilt.clone(),
            Some(v) => {
                // The version it makes counts against the quotas: checked
                // before its context is stored (and again at the commit).
                let mut next = vec![FunctionEvent::FunctionUploaded(SourceVersion {
                    version: current.next_version(),
                    ..v.clone()
                })];
                let (pruned, _) = crate::versions::retain(&state, &current, &mut next);
                let demand = version_demand(&key, &current, v.size, &pruned, false);
                if let Some((status, body)) = command::check_quota(&state, &ctx, &demand).await? {
                    return Ok((status, Json(body)));
                }
                let (source, stored) = rebuild_for_runtime(&state, &v, spec.runtime).await?;
                if stored {
                    written.push(source.context_key.clone());
                }
                rebuilt = Some(source);
                rebuilt.clone()
            }
            None => None,
        };
        let command = FunctionCommand::ChangeSpec {
            spec: spec.clone(),
            rebuilt: source,
        };
        let events = match decide(&current, command) {
            Ok(events) => events,
            Err(e) => {
                return command::settle(&state, &ctx, e.into())
                    .await
                    .map(|(s, b)| (s, Json(b)));
            }
        };
        if events.is_empty() {
            // Unless a concurrent retry of this very request made it so.
            if let Some((status, body)) = ctx.replay(&state).await? {
                return Ok((status, Json(body)));
            }
            let mut view = view_of_state(state.fn_url.as_deref(), &key, &current);
            view["unchanged"] = json!(true);
            return Ok((StatusCode::OK, Json(view)));
        }
        // A runtime change makes a new version: retention applies, and its
        // repacked context must still be stored when the events commit.
        let mut events = events;
        let (pruned, collect) = crate::versions::retain(&state, &current, &mut events);
        let demand = events.iter().find_map(|e| match e {
            FunctionEvent::FunctionUploaded(v) => {
                Some(version_demand(&key, &current, v.size, &pruned, false))
            }
            _ => None,
        });
        let blobs = events
            .iter()
            .filter_map(|e| match e {
                FunctionEvent::FunctionUploaded(v) => {
                    Some([v.zip_key.clone(), v.context_key.clone()])
                }
                _ => None,
            })
            .flatten()
            .collect();
        let after = events.iter().fold(current.clone(), Function::evolve);
        let cmd = Command {
            blobs,
            collect,
            quota: demand,
            ..Command::new(
                key.stream(),
                current.stream_version,
                command::new_events(&ctx, &key, &events),
            )
            .reconcile(key.queue_key())
        };
        let committed = command::commit(&state, &ctx, cmd, |appended| {
            let mut view = view_of_state(state.fn_url.as_deref(), &key, &after);
            view["position"] = json!(appended.position);
            view["status_url"] = json!(function_path(&key));
            (StatusCode::ACCEPTED, view)
        })
        .await;
        match committed {
            // Only a worker's events landed in between (a build starting,
            // say): decide again on the newer state. A change of the spec or
            // the source in between is a real conflict and stays one.
            Err(e) if e.kind == VERSION_CONFLICT && tries < 4 => {
                let newer = load(&state, &key).await?;
                let source_of = |f: &Function| f.current().map(|v| v.version);
                if !newer.exists()
                    || source_of(&newer) != source_of(&current)
                    || newer.spec != current.spec
                {
                    return Err(e);
                }
                tries += 1;
                current = newer;
            }
            // Another command took the quota's last place after our check.
            Err(e) if e.kind == QUOTA_EXCEEDED => {
                command::collect_unused(&state, &written).await?;
                return Err(e);
            }
            answer => {
                let (status, body) = answer?;
                return Ok((status, Json(body)));
            }
        }
    }
}

/// `DELETE /v1/namespaces/{ns}/functions/{name}`: appends `FunctionDeleted`
/// and asks a worker to remove what runs: 202 with the event's position.
/// The function is gone from list and get at once (404), its invoke URL
/// answers 404, and the name may be created again; the stream goes on, and
/// so do its version numbers.
#[utoipa::path(delete, path = "/namespaces/{ns}/functions/{name}", tag = "functions",
    summary = "Delete a function; its name may be created again",
    params(("ns" = String, Path, description = "The namespace: the caller's own (`sless-` and 16 hex digits)"), ("name" = String, Path, description = "The function"), ("Idempotency-Key" = Option<String>, Header, min_length = 1, max_length = 255, description = "Makes a retry of the same request safe: answered as the first time")),
    responses((status = 202, description = "Accepted: it stops running next", body = crate::openapi::Deleted)))]
pub async fn delete(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
    method: Method,
    uri: Uri,
    headers: HeaderMap,
) -> ApiResult<Answer> {
    let key = path_key(&caller, &ns, &name)?;
    let ctx = RequestContext::new(caller, &headers, method.as_str(), uri.path(), b"")?;
    if let Some((status, body)) = ctx.replay(&state).await? {
        return Ok((status, Json(body)));
    }
    let mut tries = 0;
    loop {
        let current = load(&state, &key).await?;
        let events = match decide(&current, FunctionCommand::Delete) {
            Ok(events) => events,
            Err(e) => {
                // A concurrent retry of this very request may have deleted it.
                if let Some((status, body)) = ctx.replay(&state).await? {
                    return Ok((status, Json(body)));
                }
                return Err(match e {
                    sless_domain::DomainError::NotFound(_) => function_not_found(&key),
                    e => e.into(),
                });
            }
        };
        let cmd = Command::new(
            key.stream(),
            current.stream_version,
            command::new_events(&ctx, &key, &events),
        )
        .reconcile(key.queue_key());
        let committed = command::commit(&state, &ctx, cmd, |appended| {
            let body = json!({
                "namespace": key.namespace,
                "name": key.name,
                "phase": "Deleted",
                "position": appended.position,
            });
            (StatusCode::ACCEPTED, body)
        })
        .await;
        match committed {
            // Whatever landed in between, a function that still exists is
            // still to be deleted.
            Err(e) if e.status == StatusCode::CONFLICT && tries < 4 => tries += 1,
            answer => {
                let (status, body) = answer?;
                return Ok((status, Json(body)));
            }
        }
    }
}
