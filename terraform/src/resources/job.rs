//! `sless_job`: one run of a function with an input. A job runs once:
//! any change but `wait` makes another run. A job of the same name with
//! the same input is taken on (an apply that lost its answer); one with
//! another input is an error, not a second run.

use std::time::Duration;

use sless_client::CreateJob;
use sless_client::types::JobView;
use sless_domain::job::JobSpec;

use super::{
    Applied, Change, Kind, Planned, api_diag, check_whole, domain_diag, id, idempotency_key,
    identified, last_version, private_of, removed, timeout,
};
use crate::api::Api;
use crate::diag::Diag;
use crate::schema::{Attr, Block, Mode, timeouts};
use crate::value::{Type, Value};

/// Changing one of these makes another run.
const REPLACING: [&str; 4] = ["name", "function", "input", "timeout_sec"];
/// How long a create waits when neither the job nor `timeouts` say.
const DEFAULT_WAIT: Duration = Duration::from_secs(15 * 60);

pub fn block() -> Block {
    use Mode::*;
    Block {
        description: "A one-shot run of a function with an input.",
        attrs: vec![
            Attr::new("id", Type::String, Computed, "`namespace/name`."),
            Attr::new("name", Type::String, Required, "A DNS-1123 label."),
            Attr::new(
                "namespace",
                Type::String,
                Computed,
                "The namespace it lives in.",
            ),
            Attr::new("function", Type::String, Required, "The function it runs."),
            Attr::new(
                "input",
                Type::String,
                Optional,
                "JSON the handler receives (`jsonencode(...)`); key order and spacing make no difference.",
            ),
            Attr::new(
                "timeout_sec",
                Type::Number,
                Optional,
                "How long the run may take (default: the function's timeout).",
            ),
            Attr::new(
                "wait",
                Type::Bool,
                OptionalComputed,
                "Whether apply waits for the run to end (default true); a run that fails fails the apply.",
            ),
            Attr::new(
                "status",
                Type::String,
                Computed,
                "`Pending`, `Running`, `Succeeded` or `Failed`.",
            ),
            Attr::new(
                "exit_code",
                Type::Number,
                Computed,
                "The run's exit code, once it ended.",
            ),
            Attr::new(
                "output",
                Type::String,
                Computed,
                "What the run printed on stdout: the handler's return value.",
            ),
            Attr::new(
                "stderr",
                Type::String,
                Computed,
                "What the run printed on stderr.",
            ),
            Attr::new(
                "version",
                Type::Number,
                Computed,
                "The function's version it ran.",
            ),
        ],
        blocks: vec![timeouts(&["create"])],
    }
}

/// The input as JSON, when it is set and known.
fn input_json(text: &str) -> Result<serde_json::Value, Diag> {
    serde_json::from_str(text).map_err(|e| {
        Diag::attr(
            "input",
            "Invalid input",
            format!("input is not JSON ({e}): write it with jsonencode(...)"),
        )
    })
}

/// True when two inputs are the same JSON.
fn same_input(a: &Value, b: &Value) -> bool {
    match (a.as_str(), b.as_str()) {
        (Some(a), Some(b)) => match (input_json(a), input_json(b)) {
            (Ok(a), Ok(b)) => a == b,
            _ => a == b,
        },
        _ => a == b,
    }
}

pub fn validate(config: &Value) -> Vec<Diag> {
    let mut diags: Vec<Diag> = check_whole(config, "timeout_sec").into_iter().collect();
    let input = match config.get("input") {
        Value::String(s) => match input_json(s) {
            Ok(j) => Some(j),
            Err(d) => {
                diags.push(d);
                return diags;
            }
        },
        Value::Unknown => return diags,
        _ => Some(serde_json::Value::Null),
    };
    if let (Some(name), Some(function), Some(input)) = (
        config.get("name").as_str(),
        config.get("function").as_str(),
        input,
    ) && let Err(e) = JobSpec::parse(name, function, input, config.get("timeout_sec").as_u32())
    {
        diags.push(domain_diag(e, "Invalid job"));
    }
    diags.extend(super::validate_timeouts(config, &["create"]));
    diags
}

pub fn plan(api: &Api, change: Change) -> Result<Planned, Diag> {
    let Change {
        prior,
        proposed,
        config,
        private,
    } = change;
    let mut planned = identified(api, proposed);
    if config.get("wait").is_null() {
        planned.set("wait", Value::Bool(true));
    }
    // The same JSON written otherwise is the same input.
    if !prior.is_null() && same_input(planned.get("input"), prior.get("input")) {
        planned.set("input", prior.get("input").clone());
    }
    let replace: Vec<&'static str> = if prior.is_null() {
        vec![]
    } else {
        REPLACING
            .into_iter()
            .filter(|a| planned.get(a) != prior.get(a))
            .collect()
    };
    let computed = ["status", "exit_code", "output", "stderr", "version"];
    for attr in computed {
        let v = if prior.is_null() || !replace.is_empty() {
            Value::Unknown
        } else {
            prior.get(attr).clone()
        };
        planned.set(attr, v);
    }
    Ok(Planned {
        state: planned,
        replace,
        private,
    })
}

pub async fn apply(api: &Api, change: Change) -> Applied {
    let name = change.name();
    let Change {
        prior,
        proposed: planned,
        private,
        ..
    } = change;
    if planned.is_null() {
        return removed(
            api.client.delete_job(&name).await,
            prior,
            private,
            Kind::Job,
        );
    }
    if !prior.is_null() {
        // Only `wait` changes in place, which asks nothing of the server.
        let mut state = prior.clone();
        state.set("wait", planned.get("wait").clone());
        return Applied::ok(state, private);
    }
    match create(api, &name, &planned).await {
        Ok(applied) => applied,
        Err(d) => Applied::failed(Value::Null, vec![], d),
    }
}

async fn create(api: &Api, name: &str, planned: &Value) -> Result<Applied, Diag> {
    let input = match planned.get("input").as_str() {
        Some(text) => input_json(text)?,
        None => serde_json::Value::Null,
    };
    let req = CreateJob {
        name: name.to_owned(),
        function: planned
            .get("function")
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        input,
        timeout_sec: planned.get("timeout_sec").as_u32(),
    };
    let ns = sless_domain::Namespace::parse(&api.namespace)
        .map_err(|e| Diag::error("Invalid namespace", e.to_string()))?;
    let job_name = sless_domain::JobName::parse(name).map_err(|e| domain_diag(e, "Invalid job"))?;
    let after = last_version(api, sless_domain::job::stream(&ns, &job_name)).await?;
    let key = idempotency_key(
        api,
        Kind::Job,
        "create",
        &serde_json::json!({ "job": &req, "after": after }),
    );
    let client = &api.client;
    let created = match client.idempotency_key(key).create_job(&req).await {
        Ok(j) => j,
        Err(e) if e.status() == Some(409) => {
            let existing = client
                .get_job(name)
                .await
                .map_err(|e| api_diag(&e, "Cannot read the job", &block()))?;
            if existing.function != req.function || existing.input != req.input {
                return Err(Diag::attr(
                    "name",
                    "The job exists already, with another input",
                    format!(
                        "a job named {name:?} exists in namespace {} for function {:?} with input {}; \
                         a job runs once: choose another name for another run, or delete that one \
                         (`sless job rm {name}`)",
                        api.namespace, existing.function, existing.input
                    ),
                ));
            }
            existing
        }
        Err(e) => return Err(api_diag(&e, "The job was not created", &block())),
    };
    let mut job = created.doc;
    if planned.get("wait").as_bool().unwrap_or(true) {
        let default = match job.timeout_sec {
            0 => DEFAULT_WAIT,
            t => Duration::from_secs(u64::from(t) + 60),
        };
        let within = timeout(planned, "create", default);
        let waited = tokio::select! {
            waited = client.wait_for_job(name, within) => waited,
            () = api.stopped() => {
                return Ok(Applied::failed(
                    state_of(api, &job, planned),
                    vec![],
                    Diag::error(
                        "Stopped",
                        format!("Terraform stopped the apply while the job {name} ran; it goes on (`sless job get {name}`)"),
                    ),
                ));
            }
        };
        job = match waited {
            Ok(j) => j,
            Err(sless_client::Error::Timeout { .. }) => {
                let state = state_of(api, &job, planned);
                return Ok(Applied::failed(
                    state,
                    vec![],
                    Diag::error(
                        "Timed out waiting for the job",
                        format!(
                            "the job {name} had not ended after {} s (it goes on: see `sless job get {name}`)",
                            within.as_secs()
                        ),
                    ),
                ));
            }
            Err(e) => return Err(api_diag(&e, "Cannot follow the job", &block())),
        };
    }
    let state = state_of(api, &job, planned);
    if job.status == "Failed" {
        let stderr = job
            .stderr
            .as_ref()
            .map(|o| o.text.as_str())
            .unwrap_or_default();
        let tail: Vec<&str> = stderr.lines().rev().take(30).collect();
        let tail: Vec<&str> = tail.into_iter().rev().collect();
        return Ok(Applied::failed(
            state,
            private_of(created.stream_version),
            Diag::error(
                format!("The job {name} failed"),
                format!(
                    "{} (exit code {})\n{}",
                    job.error.clone().unwrap_or_else(|| "it failed".into()),
                    job.exit_code
                        .map(|c| c.to_string())
                        .unwrap_or_else(|| "none".into()),
                    tail.join("\n")
                ),
            ),
        ));
    }
    Ok(Applied::ok(state, private_of(created.stream_version)))
}

pub async fn read(api: &Api, name: &str, state: &Value) -> Result<(Value, Vec<u8>), Diag> {
    match api.client.get_job(name).await {
        Ok(j) => Ok((state_of(api, &j.doc, state), private_of(j.stream_version))),
        Err(e) if e.is_not_found() => Ok((Value::Null, vec![])),
        Err(e) => Err(api_diag(&e, "Cannot read the job", &block())),
    }
}

/// The job as the server has it, over `prior` (its input's text and the
/// provider's own `wait` and `timeouts` are kept).
fn state_of(api: &Api, j: &JobView, prior: &Value) -> Value {
    let server_input = if j.input.is_null() {
        Value::Null
    } else {
        Value::string(j.input.to_string())
    };
    let input = if same_input(prior.get("input"), &server_input) {
        prior.get("input").clone()
    } else {
        server_input
    };
    let mut s = prior.clone();
    s.set("id", id(api, &j.name));
    s.set("name", Value::string(j.name.clone()));
    s.set("namespace", Value::string(api.namespace.clone()));
    s.set("function", Value::string(j.function.clone()));
    s.set("input", input);
    if s.get("wait").is_null() {
        s.set("wait", Value::Bool(true));
    }
    // A timeout the configuration left out (the function's) stays out.
    if !prior.get("timeout_sec").is_null() {
        s.set("timeout_sec", Value::int(j.timeout_sec));
    }
    s.set("status", Value::string(j.status.clone()));
    s.set("exit_code", Value::opt(j.exit_code, Value::int));
    s.set(
        "output",
        Value::opt(j.stdout.as_ref().map(|o| o.text.clone()), Value::String),
    );
    s.set(
        "stderr",
        Value::opt(j.stderr.as_ref().map(|o| o.text.clone()), Value::String),
    );
    s.set("version", Value::int(j.version));
    s
}
