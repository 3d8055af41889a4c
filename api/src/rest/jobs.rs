//! `/v1/namespaces/{ns}/jobs`: one-shot runs of a function.
//!
//! A create folds the job's stream (`job/{ns}/{name}`), decides
//! (`sless_domain::job::decide`) and, in one transaction, appends
//! `JobRequested` and enqueues a `RunJob` work item keyed by the stream; a
//! worker runs it and appends how it went. A get reads the `jobs` read
//! model, and the log whenever the row is missing or behind it: a client
//! polling for `Succeeded` never sees an older status after a newer one.

use axum::extract::State;
use axum::http::{HeaderValue, StatusCode, header};
use chrono::{DateTime, Utc};
use serde_json::{Value, json};
use sless_api_types::CreateJob;
use sless_domain::job::{self, Job, JobCommand, JobEvent, JobSpec, JobStatus, Output};
use sless_domain::{Aggregate, DomainError, FunctionKey, JobName, Namespace};
use sless_store::eventlog::{self, Appended, Loaded};
use sless_store::jobs::{self as job_rows, JobRow};
use sless_store::queue;

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::command::{
    self, Answered, Current, Decided, Handler, Opened, Plan, RequestContext, Target,
};
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::json::parse_json;
use crate::plumbing::paging::{JobPages, PageRequest, Paged};
use crate::plumbing::path::{JobPath, NamespacePath, PathParams};
use crate::plumbing::quota::Demand;
use crate::rest::function;
use crate::rest::openapi::IdempotencyKey;

/// A job named in the path: a name that cannot be a job's is not found.
fn path_name(name: &str) -> ApiResult<JobName> {
    JobName::parse(name).map_err(|_| not_found(name))
}

fn not_found(name: &str) -> ApiError {
    ApiError::not_found(format!("job {name:?} not found"))
}

fn job_path(ns: &Namespace, name: &str) -> String {
    format!("/v1/namespaces/{ns}/jobs/{name}")
}

/// A job as its document shows it, from the read model or the log.
#[derive(Debug, Clone, Default)]
struct Doc {
    namespace: String,
    name: String,
    status: JobStatus,
    function: String,
    version: u32,
    input: Value,
    timeout_sec: u32,
    exit_code: Option<i32>,
    error: Option<String>,
    timed_out: bool,
    stdout: Option<Output>,
    stderr: Option<Output>,
    requested_at: Option<DateTime<Utc>>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    duration_ms: Option<u64>,
}

impl Doc {
    fn of_row(r: &JobRow) -> ApiResult<Doc> {
        let output = |text: &Option<String>, bytes: Option<u64>, truncated: bool| {
            text.as_ref().map(|t| Output {
                text: t.clone(),
                bytes: bytes.unwrap_or(t.len() as u64),
                truncated,
            })
        };
        Ok(Doc {
            namespace: r.namespace.clone(),
            name: r.name.clone(),
            status: JobStatus::parse(&r.status).ok_or_else(|| {
                ApiError::internal(format!("jobs read model: status {:?}", r.status))
            })?,
            function: r.function.clone(),
            version: r.version,
            input: r.input.clone(),
            timeout_sec: r.timeout_sec,
            exit_code: r.exit_code,
            error: r.error.clone(),
            timed_out: r.timed_out,
            stdout: output(&r.stdout, r.stdout_bytes, r.stdout_truncated),
            stderr: output(&r.stderr, r.stderr_bytes, r.stderr_truncated),
            requested_at: Some(r.requested_at),
            started_at: r.started_at,
            finished_at: r.finished_at,
            duration_ms: r.duration_ms,
        })
    }

    fn view(&self) -> Value {
        let output = |o: &Option<Output>| {
            o.as_ref()
                .map(|o| json!({ "text": o.text, "bytes": o.bytes, "truncated": o.truncated }))
        };
        json!({
            "namespace": self.namespace,
            "name": self.name,
            "status": self.status.as_str(),
            "function": self.function,
            "version": self.version,
            "input": self.input,
            "timeout_sec": self.timeout_sec,
            "exit_code": self.exit_code,
            "error": self.error,
            "timed_out": self.timed_out,
            "stdout": output(&self.stdout),
            "stderr": output(&self.stderr),
            "requested_at": self.requested_at,
            "started_at": self.started_at,
            "finished_at": self.finished_at,
            "duration_ms": self.duration_ms,
        })
    }
}

/// A job folded from its stream: the decider's state, and the document
/// with the times the log recorded (while the job exists).
#[derive(Debug, Clone, Default)]
struct Logged {
    state: Job,
    doc: Option<Doc>,
}

impl Logged {
    fn evolve(mut self, ns: &Namespace, name: &JobName, e: &JobEvent, at: DateTime<Utc>) -> Logged {
        self.state = self.state.evolve(e);
        let finish = |d: &mut Doc, stdout: &Output, stderr: &Output, ms: u64| {
            d.stdout = Some(stdout.clone());
            d.stderr = Some(stderr.clone());
            d.duration_ms = Some(ms);
            d.finished_at = Some(at);
        };
        match (e, self.doc.as_mut()) {
            (
                JobEvent::JobRequested {
                    function,
                    version,
                    input,
                    timeout_sec,
                    ..
                },
                _,
            ) => {
                self.doc = Some(Doc {
                    namespace: ns.to_string(),
                    name: name.to_string(),
                    function: function.to_string(),
                    version: *version,
                    input: input.clone(),
                    timeout_sec: *timeout_sec,
                    requested_at: Some(at),
                    ..Doc::default()
                })
            }
            (JobEvent::JobDeleted {}, _) => self.doc = None,
            (_, None) => {}
            (JobEvent::JobStarted { .. }, Some(d)) => d.started_at = Some(at),
            (
                JobEvent::JobSucceeded {
                    exit_code,
                    stdout,
                    stderr,
                    duration_ms,
                },
                Some(d),
            ) => {
                d.exit_code = Some(*exit_code);
                finish(d, stdout, stderr, *duration_ms);
            }
            (
                JobEvent::JobFailed {
                    exit_code,
                    error,
                    stdout,
                    stderr,
                    timed_out,
                    duration_ms,
                },
                Some(d),
            ) => {
                d.exit_code = *exit_code;
                d.error = Some(error.clone());
                d.timed_out = *timed_out;
                finish(d, stdout, stderr, *duration_ms);
            }
            (JobEvent::JobSkipped { reason }, Some(d)) => {
                d.error = Some(reason.clone());
                d.finished_at = Some(at);
            }
        }
        if let Some(d) = self.doc.as_mut() {
            d.status = self.state.status;
        }
        self
    }
}

impl Logged {
    /// The job as the events of its stream tell it.
    fn of(ns: &Namespace, name: &JobName, events: &[Loaded<JobEvent>]) -> Logged {
        events.iter().fold(Logged::default(), |j, e| {
            j.evolve(ns, name, &e.event, e.recorded_at)
        })
    }
}

/// The stream a command on job `name` changes.
fn target(ns: &Namespace, name: &JobName) -> Target {
    Target::of::<Job>(ns, &(ns.clone(), name.clone()), name.as_str())
}

/// Whether a string or a key of `v` holds a NUL character: events are
/// stored as `jsonb`, which has none.
fn holds_nul(v: &Value) -> bool {
    match v {
        Value::String(s) => s.contains('\0'),
        Value::Array(items) => items.iter().any(holds_nul),
        Value::Object(members) => members
            .iter()
            .any(|(k, v)| k.contains('\0') || holds_nul(v)),
        Value::Null | Value::Bool(_) | Value::Number(_) => false,
    }
}

/// The answer to a create of a name that is taken: 409 `already-exists`,
/// with the job that has it (`job`) and its status (`job_status`), so a
/// client can tell it is there and how it is doing.
fn exists_answer(doc: &Doc) -> ApiError {
    let mut e = ApiError::new(
        StatusCode::CONFLICT,
        "already-exists",
        "Already exists",
        format!(
            "job {:?} already exists ({}); delete it to run it again under this name",
            doc.name,
            doc.status.as_str()
        ),
    );
    let mut members = serde_json::Map::new();
    members.insert("job_status".into(), json!(doc.status.as_str()));
    members.insert("job".into(), doc.view());
    e.members = Some(Box::new(members));
    e
}

/// `POST /v1/namespaces/{ns}/jobs`: appends `JobRequested` for the
/// function's current version and enqueues its run; 202 with the job. A
/// namespace with its quota of jobs pending or running gets 409.
#[utoipa::path(post, path = "/namespaces/{ns}/jobs", operation_id = "createJob", tag = "jobs",
    summary = "Create a one-shot job",
    params(NamespacePath, IdempotencyKey),
    request_body = CreateJob,
    responses((status = 202, description = "Accepted: it runs next (`Pending`)", body = crate::rest::openapi::JobView,
        headers(("Location" = String, description = "The job's URL, to poll")))))]
pub async fn create(
    State(state): State<AppState>,
    PathParams(ns): PathParams<String>,
    opened: Opened,
) -> ApiResult<Answered> {
    let namespace = opened.caller().namespace(&ns)?;
    let req: CreateJob = parse_json(&opened.body)?;
    if holds_nul(&req.input) {
        return Err(ApiError::invalid(
            "input",
            "the input holds a NUL character (\\u0000), which the log cannot store",
        ));
    }
    let spec = JobSpec::parse(&req.name, &req.function, req.input, req.timeout_sec)?;
    let key = FunctionKey::new(namespace.clone(), spec.function.clone());
    let function = function::load(&state, &key).await?;
    let Some(fspec) = function.spec.as_ref().filter(|_| function.exists()) else {
        return Err(ApiError::invalid(
            "function",
            format!(
                "there is no function {:?} in namespace {namespace}: create it first",
                key.name.as_str()
            ),
        ));
    };
    let Some(version) = function.current_version else {
        return Err(DomainError::Conflict(format!(
            "function {:?} has no code yet: upload it first (POST {}/upload)",
            key.name.as_str(),
            function::function_path(&key)
        ))
        .into());
    };
    let command = JobCommand::Request {
        function: spec.function.clone(),
        version,
        input: spec.input.clone(),
        timeout_sec: spec.timeout_sec.unwrap_or(fspec.timeout_sec),
        cron: None,
    };
    let target = target(&namespace, &spec.name);
    let mut create = Create {
        namespace,
        name: spec.name,
        command,
        shown: None,
    };
    command::execute(&state, &opened.ctx, &target, &mut create).await
}

/// `create`'s command.
struct Create {
    namespace: Namespace,
    name: JobName,
    command: JobCommand,
    shown: Option<Doc>,
}

impl Handler<Job> for Create {
    async fn decide(
        &mut self,
        _: &AppState,
        _: &RequestContext,
        current: Current<'_, Job>,
    ) -> ApiResult<Decided<Job>> {
        let logged = Logged::of(&self.namespace, &self.name, current.events);
        let events = match current.state.decide(self.command.clone()) {
            Ok(events) => events,
            Err(DomainError::AlreadyExists(_)) if logged.doc.is_some() => {
                return Err(exists_answer(logged.doc.as_ref().expect("checked")));
            }
            Err(e) => return Err(e.into()),
        };
        let now = Utc::now();
        let after = events
            .iter()
            .fold(logged, |j, e| j.evolve(&self.namespace, &self.name, e, now));
        self.shown = Some(
            after
                .doc
                .ok_or_else(|| ApiError::internal("a requested job"))?,
        );
        let stream = job::stream(&self.namespace, &self.name);
        let plan = Plan::new(events)
            .work(queue::RUN_JOB, stream)
            .quota(Demand::job(self.namespace.clone()));
        Ok(Decided::Append(plan))
    }

    fn answer(&self, _: &Job, appended: Appended) -> Answered {
        let doc = self.shown.as_ref().expect("decided before answered");
        let mut view = doc.view();
        view["position"] = json!(appended.position);
        let location = job_path(&self.namespace, self.name.as_str());
        view["status_url"] = json!(location);
        Answered::new(StatusCode::ACCEPTED, view).header(
            header::LOCATION,
            HeaderValue::from_str(&location).expect("a path of names is a header value"),
        )
    }

    /// Decided again, a concurrent create of the name is a 409.
    fn depends_on(&self, _: &Job, _: &Job) -> bool {
        false
    }
}

/// `GET /v1/namespaces/{ns}/jobs`: one page of the jobs users asked for,
/// by name, from the read model (cron runs are listed with their trigger).
/// A row leaves out the job's output: get the job for it.
#[utoipa::path(get, path = "/namespaces/{ns}/jobs", operation_id = "listJobs", tag = "jobs",
    summary = "List jobs, a page at a time, by name (without their output)",
    description = "One page of the jobs, by name, each without `stdout` and `stderr` (get the job \
        for them). When more follow, `next_cursor` is set and a `Link: <…>; rel=\"next\"` header \
        gives the next page's URL.",
    params(NamespacePath, JobPages),
    responses((status = 200, description = "One page of jobs", body = crate::rest::openapi::JobList)))]
pub async fn list(
    State(state): State<AppState>,
    caller: Caller,
    PathParams(ns): PathParams<String>,
    asked: PageRequest,
) -> ApiResult<Paged> {
    let namespace = caller.namespace(&ns)?;
    let asked = asked.read()?;
    let (rows, next) = asked
        .query
        .read(
            &format!("jobs/{namespace}"),
            |k| JobName::parse(k).is_ok(),
            async |after, fetch| {
                Ok(
                    job_rows::job_rows(&state.pool, namespace.as_str(), after.as_deref(), fetch)
                        .await?,
                )
            },
            |r| r.name.clone(),
        )
        .await?;
    let items = rows
        .iter()
        .map(|r| {
            let doc = Doc::of_row(r)?;
            Ok(Doc {
                stdout: None,
                stderr: None,
                ..doc
            }
            .view())
        })
        .collect::<ApiResult<Vec<Value>>>()?;
    let page = json!({ "items": items, "next_cursor": next });
    asked.json(&page, next.as_deref())
}

#[utoipa::path(get, path = "/namespaces/{ns}/jobs/{name}", operation_id = "getJob", tag = "jobs",
    summary = "Get a job (status, output)",
    params(JobPath),
    responses((status = 200, description = "The job", body = crate::rest::openapi::JobView)))]
pub async fn get(
    State(state): State<AppState>,
    caller: Caller,
    PathParams((ns, name)): PathParams<(String, String)>,
) -> ApiResult<Answered> {
    let namespace = caller.namespace(&ns)?;
    let name = path_name(&name)?;
    let stream = job::stream(&namespace, &name);
    let row = job_rows::job_row(&state.pool, namespace.as_str(), name.as_str()).await?;
    let version = job_rows::log_version(&state.pool, &stream).await?;
    let doc = match row {
        Some(row) if row.stream == stream && row.stream_version >= version => Doc::of_row(&row)?,
        // Not projected yet, or behind the log: the log has it all.
        _ => {
            let events = eventlog::events_of::<Job>(&state.pool, &stream).await?;
            Logged::of(&namespace, &name, &events)
                .doc
                .ok_or_else(|| not_found(name.as_str()))?
        }
    };
    Ok(Answered::new(StatusCode::OK, doc.view()).etag(version))
}

/// `DELETE /v1/namespaces/{ns}/jobs/{name}`: appends `JobDeleted`; a
/// running job is stopped by the worker running it. 202; the name is free again.
#[utoipa::path(delete, path = "/namespaces/{ns}/jobs/{name}", operation_id = "deleteJob", tag = "jobs",
    summary = "Delete a job; a running one is stopped",
    params(JobPath, IdempotencyKey),
    responses((status = 202, description = "Deleted: a running job stops next", body = crate::rest::openapi::Removed)))]
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
    name: JobName,
}

impl Handler<Job> for Delete {
    async fn decide(
        &mut self,
        _: &AppState,
        _: &RequestContext,
        current: Current<'_, Job>,
    ) -> ApiResult<Decided<Job>> {
        let events = current
            .state
            .decide(JobCommand::Delete)
            .map_err(|e| match e {
                DomainError::NotFound(_) => not_found(self.name.as_str()),
                e => e.into(),
            })?;
        Ok(Decided::Append(Plan::new(events)))
    }

    fn answer(&self, _: &Job, appended: Appended) -> Answered {
        Answered::removed(&self.namespace, self.name.as_str(), appended)
    }

    /// A worker's events in between (the job started): a job that still
    /// exists is still to be deleted.
    fn depends_on(&self, _: &Job, _: &Job) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_nul_anywhere_in_an_input_is_found() {
        for held in [json!("a\0"), json!({"a": ["b", "\0"]}), json!({"\0": 1})] {
            assert!(holds_nul(&held), "{held}");
        }
        for clean in [json!(null), json!({"a": [1, "b", true]}), json!("\\u0000")] {
            assert!(!holds_nul(&clean), "{clean}");
        }
    }
}
