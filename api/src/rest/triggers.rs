//! `/v1/namespaces/{ns}/triggers`: what makes a function run (an HTTP
//! route, a cron schedule).
//!
//! Commands fold the trigger's stream (`trigger/{ns}/{name}`), decide
//! (`sless_domain::trigger::decide`) and append, as functions' do. An http
//! trigger decides whether its function is served, and a cron trigger is a
//! CronJob of the function's on a driver that runs cron itself, so
//! creating, toggling or deleting one also asks for a reconcile of the
//! function, in the same transaction. Queries read the `triggers` read model, and the log when
//! the row is missing or behind it; a cron trigger's document carries its
//! next tick and its last runs (the `jobs` read model).

use axum::Json;
use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sless_api_types::{CreateTrigger, PatchTrigger};
use sless_domain::cron::Cron;
use sless_domain::trigger::{
    self, Trigger, TriggerCommand, TriggerEvent, TriggerFields, TriggerKind, TriggerSpec,
};
use sless_domain::{Aggregate, DomainError, FunctionKey, Namespace, TriggerName};
use sless_store::eventlog::{self, Appended, Loaded};
use sless_store::jobs::{self as job_rows, JobRow};
use sless_store::triggers::{self as rows, TriggerRow};

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::command::{
    self, Answered, Current, Decided, Handler, Opened, Plan, RequestContext, Target,
};
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::json::parse_json;
use crate::plumbing::paging::{PageQuery, PageRequest, Paged, TriggerPages};
use crate::plumbing::path::{NamespacePath, PathParams, TriggerPath};
use crate::plumbing::quota::Demand;
use crate::rest::function;
use crate::rest::openapi::IdempotencyKey;

/// How many of a cron trigger's runs its document shows.
pub const RUNS_SHOWN: i64 = 10;

/// A trigger named in the path: a name that cannot be a trigger's is not found.
fn path_name(name: &str) -> ApiResult<TriggerName> {
    TriggerName::parse(name).map_err(|_| not_found(name))
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("trigger {name:?} not found"))
}

fn trigger_path(ns: &Namespace, name: &str) -> String {
    format!("/v1/namespaces/{ns}/triggers/{name}")
}

/// A trigger as its document shows it, from the read model or the log.
#[derive(Debug, Clone)]
struct Doc {
    name: String,
    function: String,
    kind: TriggerKind,
    schedule: Option<String>,
    timezone: Option<String>,
    enabled: bool,
    created_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
}

impl Doc {
    fn of_row(r: &TriggerRow) -> Doc {
        Doc {
            name: r.name.clone(),
            function: r.function.clone(),
            kind: if r.kind == "cron" {
                TriggerKind::Cron
            } else {
                TriggerKind::Http
            },
            schedule: r.schedule.clone(),
            timezone: r.timezone.clone(),
            enabled: r.enabled,
            created_at: Some(r.created_at),
            updated_at: Some(r.updated_at),
        }
    }

    /// The document of `t` as the log has it, if it exists.
    fn of_log(t: &Logged) -> Option<Doc> {
        let spec = t.state.spec.as_ref()?;
        Some(Doc {
            name: spec.name.to_string(),
            function: spec.function.to_string(),
            kind: spec.kind,
            schedule: spec.schedule.as_ref().map(|s| s.cron.clone()),
            timezone: spec.schedule.as_ref().map(|s| s.timezone.clone()),
            enabled: spec.enabled,
            created_at: t.created_at,
            updated_at: t.updated_at,
        })
    }

    /// The JSON document; `runs` are its cron runs, newest first.
    fn view(&self, runs: &[JobRow], now: DateTime<Utc>) -> Value {
        let mut v = json!({
            "name": self.name,
            "function": self.function,
            "type": self.kind.as_str(),
            "schedule": self.schedule,
            "enabled": self.enabled,
            "created_at": self.created_at,
            "updated_at": self.updated_at,
        });
        if self.kind == TriggerKind::Cron {
            let next = match (&self.schedule, self.enabled) {
                (Some(s), true) => Cron::parse(s, self.timezone.as_deref().unwrap_or("UTC"))
                    .ok()
                    .and_then(|c| c.next_after(now)),
                _ => None,
            };
            v["timezone"] = json!(self.timezone);
            v["next_run_at"] = json!(next);
            v["runs"] = runs.iter().map(run_view).collect();
        }
        v
    }
}

/// One run of a cron trigger, as its document lists it.
fn run_view(r: &JobRow) -> Value {
    json!({
        "name": r.name,
        "scheduled_at": r.scheduled_at,
        "status": r.status,
        "exit_code": r.exit_code,
        "started_at": r.started_at,
        "finished_at": r.finished_at,
        "error": r.error,
    })
}

/// A trigger folded from its stream, with the times the log recorded.
/// A trigger as its stream tells it, with when it was created and last changed.
#[derive(Debug, Clone, Default)]
struct Logged {
    state: Trigger,
    created_at: Option<DateTime<Utc>>,
    updated_at: Option<DateTime<Utc>>,
}

impl Logged {
    fn evolve(mut self, event: &TriggerEvent, at: DateTime<Utc>) -> Logged {
        if matches!(event, TriggerEvent::TriggerCreated { .. }) {
            self.created_at = Some(at);
        }
        self.updated_at = Some(at);
        self.state = self.state.evolve(event);
        self
    }

    fn of(events: &[Loaded<TriggerEvent>]) -> Logged {
        events
            .iter()
            .fold(Logged::default(), |t, e| t.evolve(&e.event, e.recorded_at))
    }

    fn after(&self, events: &[TriggerEvent]) -> Logged {
        let now = Utc::now();
        events.iter().fold(self.clone(), |t, e| t.evolve(e, now))
    }
}

async fn runs_of(state: &AppState, ns: &Namespace, doc: &Doc) -> ApiResult<Vec<JobRow>> {
    if doc.kind != TriggerKind::Cron {
        return Ok(vec![]);
    }
    Ok(job_rows::cron_runs(&state.pool, ns.as_str(), &doc.name, RUNS_SHOWN).await?)
}

/// The stream a command on trigger `name` changes.
fn target(ns: &Namespace, name: &TriggerName) -> Target {
    Target::of::<Trigger>(ns, &(ns.clone(), name.clone()), name.as_str())
}

/// The trigger's document after `events`, with its runs.
async fn doc_after(
    state: &AppState,
    ns: &Namespace,
    current: &Current<'_, Trigger>,
    events: &[TriggerEvent],
) -> ApiResult<(Doc, Vec<JobRow>)> {
    let after = Logged::of(current.events).after(events);
    let doc = Doc::of_log(&after).ok_or_else(|| ApiError::internal("a trigger without a spec"))?;
    let runs = runs_of(state, ns, &doc).await?;
    Ok((doc, runs))
}

/// The reconcile a trigger's change asks for: of its function.
fn reconcile_of(ns: &Namespace, spec: &TriggerSpec) -> String {
    FunctionKey::new(ns.clone(), spec.function.clone()).queue_key()
}

#[utoipa::path(get, path = "/namespaces/{ns}/triggers", operation_id = "listTriggers", tag = "triggers",
    summary = "List triggers, a page at a time, by name",
    description = "One page of the triggers, by name. When more follow, `next_cursor` is set and \
        a `Link: <…>; rel=\"next\"` header gives the next page's URL.",
    params(NamespacePath, TriggerPages),
    responses((status = 200, description = "One page of the namespace's triggers, by name", body = crate::rest::openapi::TriggerList)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
    asked: PageRequest,
) -> ApiResult<Paged> {
    let namespace = caller.namespace(&ns)?;
    let asked = asked.read()?;
    let Json(page) = page(&state, &namespace, &asked.query).await?;
    asked.json(&page, page["next_cursor"].as_str())
}

/// One page of a namespace's triggers (read with `query`) as the list
/// shows it: `items` and `next_cursor`.
pub(crate) async fn page(
    state: &AppState,
    namespace: &Namespace,
    query: &PageQuery,
) -> ApiResult<Json<Value>> {
    let (rows, next) = query
        .read(
            &format!("triggers/{namespace}"),
            |k| TriggerName::parse(k).is_ok(),
            async |after, fetch| {
                Ok(
                    rows::trigger_rows(&state.pool, namespace.as_str(), after.as_deref(), fetch)
                        .await?,
                )
            },
            |r| r.name.clone(),
        )
        .await?;
    let names: Vec<&str> = rows
        .iter()
        .filter(|r| r.kind == "cron")
        .map(|r| r.name.as_str())
        .collect();
    let mut runs = if names.is_empty() {
        Vec::new()
    } else {
        job_rows::cron_runs_in(&state.pool, namespace.as_str(), &names, RUNS_SHOWN).await?
    };
    let now = Utc::now();
    let items: Vec<Value> = rows
        .iter()
        .map(|r| {
            let mine: Vec<JobRow> = runs
                .extract_if(.., |j| j.trigger.as_deref() == Some(r.name.as_str()))
                .collect();
            Doc::of_row(r).view(&mine, now)
        })
        .collect();
    Ok(Json(json!({ "items": items, "next_cursor": next })))
}

/// Every trigger of a namespace, a page at a time, as the list shows them.
pub(crate) async fn all(state: &AppState, namespace: &Namespace) -> ApiResult<Vec<Value>> {
    let mut items = Vec::new();
    let mut query = PageQuery::largest();
    loop {
        let Json(mut page) = page(state, namespace, &query).await?;
        if let Value::Array(more) = page["items"].take() {
            items.extend(more);
        }
        match page["next_cursor"].as_str() {
            Some(c) => query = query.after(c.to_owned()),
            None => return Ok(items),
        }
    }
}

/// `POST /v1/namespaces/{ns}/triggers`: appends `TriggerCreated`; 201 with
/// the trigger. The function must exist; a name that is taken is 409, and
/// so is a namespace at its triggers quota.
#[utoipa::path(post, path = "/namespaces/{ns}/triggers", operation_id = "createTrigger", tag = "triggers",
    summary = "Create a trigger",
    params(NamespacePath, IdempotencyKey),
    request_body = CreateTrigger,
    responses((status = 201, description = "Created", body = crate::rest::openapi::TriggerView,
        headers(("Location" = String, description = "The trigger's URL")))))]
pub async fn create(
    State(state): State<AppState>,
    PathParams(ns): PathParams<String>,
    opened: Opened,
) -> ApiResult<Answered> {
    let namespace = opened.caller().namespace(&ns)?;
    let req: CreateTrigger = parse_json(&opened.body)?;
    let spec = TriggerSpec::parse(TriggerFields {
        name: &req.name,
        function: &req.function,
        kind: &req.kind,
        schedule: req.schedule.as_deref(),
        timezone: req.timezone.as_deref(),
        enabled: req.enabled,
    })?;
    let function = FunctionKey::new(namespace.clone(), spec.function.clone());
    if !function::load(&state, &function).await?.exists() {
        return Err(ApiError::invalid(
            "function",
            format!(
                "there is no function {:?} in namespace {namespace}: create it first",
                spec.function.as_str()
            ),
        ));
    }
    let target = target(&namespace, &spec.name);
    let mut create = Create {
        namespace,
        spec,
        shown: None,
    };
    command::execute(&state, &opened.ctx, &target, &mut create).await
}

/// `create`'s command.
struct Create {
    namespace: Namespace,
    spec: TriggerSpec,
    shown: Option<(Doc, Vec<JobRow>)>,
}

impl Handler<Trigger> for Create {
    async fn decide(
        &mut self,
        state: &AppState,
        _: &RequestContext,
        current: Current<'_, Trigger>,
    ) -> ApiResult<Decided<Trigger>> {
        let events = current
            .state
            .decide(TriggerCommand::Create(self.spec.clone()))?;
        self.shown = Some(doc_after(state, &self.namespace, &current, &events).await?);
        let plan = Plan::new(events)
            .reconcile(reconcile_of(&self.namespace, &self.spec))
            .quota(Demand::trigger(self.namespace.clone()));
        Ok(Decided::Append(plan))
    }

    fn answer(&self, _: &Trigger, appended: Appended) -> Answered {
        let (doc, runs) = self.shown.as_ref().expect("decided before answered");
        let mut view = doc.view(runs, Utc::now());
        view["position"] = json!(appended.position);
        let location = trigger_path(&self.namespace, self.spec.name.as_str());
        Answered::new(StatusCode::CREATED, view).header(
            header::LOCATION,
            HeaderValue::from_str(&location).expect("a path of names is a header value"),
        )
    }

    /// Decided again, a concurrent create of the name is a 409.
    fn depends_on(&self, _: &Trigger, _: &Trigger) -> bool {
        false
    }
}

#[utoipa::path(get, path = "/namespaces/{ns}/triggers/{name}", operation_id = "getTrigger", tag = "triggers",
    summary = "Get a trigger (a cron trigger with its next tick and last runs)",
    params(TriggerPath),
    responses((status = 200, description = "The trigger", body = crate::rest::openapi::TriggerView)))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Answered> {
    let namespace = caller.namespace(&ns)?;
    let name = path_name(&name)?;
    let stream = trigger::stream(&namespace, &name);
    let row = rows::trigger_row(&state.pool, namespace.as_str(), name.as_str()).await?;
    let version = job_rows::log_version(&state.pool, &stream).await?;
    let doc = match row {
        Some(row) if row.stream_version >= version => Doc::of_row(&row),
        // Not projected yet, or behind the log: answer from the log.
        _ => {
            let events = eventlog::events_of::<Trigger>(&state.pool, &stream).await?;
            Doc::of_log(&Logged::of(&events)).ok_or_else(|| not_found(name.as_str()))?
        }
    };
    let runs = runs_of(&state, &namespace, &doc).await?;
    Ok(Answered::new(StatusCode::OK, doc.view(&runs, Utc::now())).etag(version))
}

/// `PATCH /v1/namespaces/{ns}/triggers/{name}` `{"enabled": bool}`:
/// appends `TriggerToggled`, or nothing when it is in that state already;
/// 200 with the trigger either way.
#[utoipa::path(patch, path = "/namespaces/{ns}/triggers/{name}", operation_id = "patchTrigger", tag = "triggers",
    summary = "Enable or disable a trigger",
    params(TriggerPath, IdempotencyKey),
    request_body = PatchTrigger,
    responses((status = 200, description = "The trigger as it is now (`unchanged` when it was in that state already)", body = crate::rest::openapi::TriggerView)))]
pub async fn patch(
    State(state): State<AppState>,
    PathParams((ns, name)): PathParams<(String, String)>,
    opened: Opened,
) -> ApiResult<Answered> {
    let namespace = opened.caller().namespace(&ns)?;
    let name = path_name(&name)?;
    let req: PatchTrigger = parse_json(&opened.body)?;
    let target = target(&namespace, &name);
    let mut toggle = Toggle {
        namespace,
        name,
        enabled: req.enabled,
        shown: None,
    };
    command::execute(&state, &opened.ctx, &target, &mut toggle).await
}

/// `patch`'s command.
struct Toggle {
    namespace: Namespace,
    name: TriggerName,
    enabled: bool,
    shown: Option<(Doc, Vec<JobRow>)>,
}

impl Handler<Trigger> for Toggle {
    async fn decide(
        &mut self,
        state: &AppState,
        _: &RequestContext,
        current: Current<'_, Trigger>,
    ) -> ApiResult<Decided<Trigger>> {
        let Some(spec) = current.state.spec.clone() else {
            return Err(not_found(self.name.as_str()));
        };
        let enabled = self.enabled;
        let events = current.state.decide(TriggerCommand::Toggle { enabled })?;
        let (doc, runs) = doc_after(state, &self.namespace, &current, &events).await?;
        if events.is_empty() {
            let mut view = doc.view(&runs, Utc::now());
            view["unchanged"] = json!(true);
            return Ok(Decided::Unchanged(Answered::new(StatusCode::OK, view)));
        }
        self.shown = Some((doc, runs));
        let plan = Plan::new(events).reconcile(reconcile_of(&self.namespace, &spec));
        Ok(Decided::Append(plan))
    }

    fn answer(&self, _: &Trigger, appended: Appended) -> Answered {
        let (doc, runs) = self.shown.as_ref().expect("decided before answered");
        let mut view = doc.view(runs, Utc::now());
        view["position"] = json!(appended.position);
        Answered::new(StatusCode::OK, view)
    }

    fn depends_on(&self, _: &Trigger, _: &Trigger) -> bool {
        false
    }
}

/// `DELETE /v1/namespaces/{ns}/triggers/{name}`: appends `TriggerDeleted`;
/// 202 (an http trigger's function is reconciled next). The name is free again.
#[utoipa::path(delete, path = "/namespaces/{ns}/triggers/{name}", operation_id = "deleteTrigger", tag = "triggers",
    summary = "Delete a trigger",
    params(TriggerPath, IdempotencyKey),
    responses((status = 202, description = "Deleted", body = crate::rest::openapi::Removed)))]
pub async fn delete(
    State(state): State<AppState>,
    PathParams((ns, name)): PathParams<(String, String)>,
    opened: Opened,
) -> ApiResult<Answered> {
    let namespace = opened.caller().namespace(&ns)?;
    let name = path_name(&name)?;
    let target = target(&namespace, &name);
    let mut delete = Delete { namespace, name };
    command::execute(&state, &opened.ctx, &target, &mut delete).await
}

/// `delete`'s command.
struct Delete {
    namespace: Namespace,
    name: TriggerName,
}

impl Handler<Trigger> for Delete {
    async fn decide(
        &mut self,
        _: &AppState,
        _: &RequestContext,
        current: Current<'_, Trigger>,
    ) -> ApiResult<Decided<Trigger>> {
        let events = current
            .state
            .decide(TriggerCommand::Delete)
            .map_err(|e| match e {
                DomainError::NotFound(_) => not_found(self.name.as_str()),
                e => e.into(),
            })?;
        let spec = current
            .state
            .spec
            .as_ref()
            .ok_or_else(|| not_found(self.name.as_str()))?;
        let plan = Plan::new(events).reconcile(reconcile_of(&self.namespace, spec));
        Ok(Decided::Append(plan))
    }

    fn answer(&self, _: &Trigger, appended: Appended) -> Answered {
        Answered::removed(&self.namespace, self.name.as_str(), appended)
    }

    fn depends_on(&self, _: &Trigger, _: &Trigger) -> bool {
        false
    }
}
