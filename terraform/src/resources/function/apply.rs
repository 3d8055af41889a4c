//! Applying a planned change of a function: create (then upload and wait,
//! or delete again), update (spec in place, code only when it changed,
//! each with `If-Match`), or delete; and waiting until a version serves.

use std::time::Duration;

use sless_client::rollout::Step;
use sless_client::{CreateFunction, UpdateFunction};
use sless_domain::FunctionName;

use super::super::{
    Applied, Change, Kind, api_diag, domain_diag, idempotency_key, last_version, stream_version_of,
    timeout,
};
use super::{DEFAULT_BUILD_TIMEOUT_SEC, SPEC, block, read, redact, source, spec_of};
use crate::api::Api;
use crate::diag::Diag;
use crate::value::Value;

/// Lines of a build log shown with a failure.
const LOG_TAIL_LINES: usize = 30;

pub async fn apply(api: &Api, change: Change) -> Applied {
    let name = change.name();
    let Change {
        prior,
        proposed: planned,
        private,
        ..
    } = change;
    if planned.is_null() {
        return delete(api, &name, &prior, private).await;
    }
    let result = if prior.is_null() {
        create(api, &name, &planned).await
    } else {
        update(api, &name, &prior, &planned, &private).await
    };
    match result {
        Ok(applied) => applied,
        Err(d) => {
            let d = Diag {
                detail: redact(&planned, &d.detail),
                ..d
            };
            Applied::failed(prior, private, d)
        }
    }
}

async fn delete(api: &Api, name: &str, prior: &Value, private: Vec<u8>) -> Applied {
    let within = timeout(prior, "delete", Duration::from_secs(120));
    let client = api.client.clone();
    match tokio::time::timeout(within, client.delete_function(name)).await {
        Ok(Ok(_)) => Applied::ok(Value::Null, vec![]),
        Ok(Err(e)) if e.is_not_found() => Applied::ok(Value::Null, vec![]),
        Ok(Err(e)) => Applied::failed(
            prior.clone(),
            private,
            api_diag(&e, "The function was not deleted", &block()),
        ),
        Err(_) => Applied::failed(
            prior.clone(),
            private,
            Diag::error(
                "The function was not deleted",
                format!("no answer within {} s", within.as_secs()),
            ),
        ),
    }
}

/// The zip to upload, which must still be what the plan hashed.
fn zip_for(planned: &Value) -> Result<Vec<u8>, Diag> {
    let (bytes, sha) = source(planned)?
        .ok_or_else(|| Diag::attr("source_dir", "No source", "Set source_dir or code_path."))?;
    if let Some(want) = planned.get("code_hash").as_str()
        && want != sha
    {
        let attr = if planned.get("source_dir").is_null() {
            "code_path"
        } else {
            "source_dir"
        };
        return Err(Diag::attr(
            attr,
            "The source changed since the plan",
            format!(
                "the plan was made for code_hash {want}, but it is now {sha}: run terraform apply again"
            ),
        ));
    }
    Ok(bytes)
}

/// How long an apply waits for the build and start.
fn wait_limit(planned: &Value, op: &str) -> Duration {
    let build = planned
        .get("build_timeout_sec")
        .as_u32()
        .unwrap_or(DEFAULT_BUILD_TIMEOUT_SEC);
    timeout(planned, op, Duration::from_secs(u64::from(build)))
}

async fn create(api: &Api, name: &str, planned: &Value) -> Result<Applied, Diag> {
    let zip = zip_for(planned)?;
    let spec = spec_of(planned);
    let stream = stream_of(api, name)?;
    let after = last_version(api, stream).await?;
    let key_of = |command: &str| {
        idempotency_key(
            api,
            Kind::Function,
            command,
            &serde_json::json!({
                "spec": &spec,
                "code_hash": planned.get("code_hash").to_json(),
                "after": after,
            }),
        )
    };
    let client = &api.client;
    if let Err(e) = client
        .idempotency_key(key_of("create"))
        .create_function(&spec)
        .await
    {
        if e.status() != Some(409) {
            return Err(api_diag(&e, "The function was not created", &block()));
        }
        // A create of an apply that lost its answer: the function is the
        // one planned, and is taken on. Any other is not Terraform's.
        if !is_as_planned(api, name, &spec, planned).await {
            return Err(Diag::attr(
                "name",
                "The function exists already",
                format!(
                    "a function named {name:?} exists in namespace {} with another spec or code: \
                     import it (`terraform import sless_function.<address> {name}`) or choose another name",
                    api.namespace
                ),
            ));
        }
    }
    let outcome = upload_and_wait(api, name, planned, zip, key_of("upload"), None, "create").await;
    match outcome {
        Ok(()) => {
            let (state, private) = read(api, name, planned, &[]).await?;
            Ok(Applied::ok(state, private))
        }
        // Stopped by Terraform: the function goes on on the server, and the
        // next apply takes it on (it is as planned).
        Err(d) if *api.stop.borrow() => Err(Diag {
            detail: format!("{}; the next apply takes it on", d.detail),
            ..d
        }),
        Err(d) => {
            // Nothing half-made: the function goes again, and the state
            // records none.
            let _ = client.delete_function(name).await;
            Err(Diag {
                detail: format!(
                    "{}\n\nThe function was deleted again, so nothing is left half-made; fix the cause and apply again.",
                    d.detail
                ),
                ..d
            })
        }
    }
}

fn stream_of(api: &Api, name: &str) -> Result<String, Diag> {
    let ns = sless_domain::Namespace::parse(&api.namespace)
        .map_err(|e| Diag::error("Invalid namespace", e.to_string()))?;
    let name = FunctionName::parse(name).map_err(|e| domain_diag(e, "Invalid function"))?;
    Ok(sless_domain::FunctionKey::new(ns, name).stream())
}

/// True when the function `name` has the planned spec, and no code or the
/// planned code.
async fn is_as_planned(api: &Api, name: &str, spec: &CreateFunction, planned: &Value) -> bool {
    let Ok(f) = api.client.get_function(name).await else {
        return false;
    };
    let same_spec = f.runtime.as_deref() == Some(spec.runtime.as_str())
        && f.entrypoint.as_deref() == Some(spec.entrypoint.as_str())
        && f.memory_mb == Some(spec.memory_mb)
        && f.timeout_sec == Some(spec.timeout_sec)
        && f.env_vars.clone().unwrap_or_default() == spec.env_vars
        && [
            (spec.min_instances, f.min_instances),
            (spec.max_instances, f.max_instances),
            (spec.concurrency, f.concurrency),
        ]
        .iter()
        .all(|(asked, has)| asked.is_none_or(|a| *has == Some(a)));
    if !same_spec {
        return false;
    }
    let Ok(versions) = api.client.list_versions(name).await else {
        return false;
    };
    match versions.live_version {
        None => true,
        Some(v) => versions.items.iter().any(|i| {
            i.version == v && planned.get("code_hash").as_str() == Some(i.sha256.as_str())
        }),
    }
}

/// Uploads `zip` and waits until the version it makes serves.
async fn upload_and_wait(
    api: &Api,
    name: &str,
    planned: &Value,
    zip: Vec<u8>,
    key: String,
    if_match: Option<u64>,
    op: &str,
) -> Result<(), Diag> {
    let client = &api.client;
    let tail = client
        .tail_function(name)
        .await
        .map_err(|e| api_diag(&e, "Cannot follow the function's build", &block()))?;
    let mut upload = client.idempotency_key(key);
    if let Some(v) = if_match {
        upload = upload.if_match(v);
    }
    let uploaded = upload.upload(name, zip).await.map_err(|e| {
        changed_elsewhere(&e).unwrap_or_else(|| api_diag(&e, "The upload failed", &block()))
    })?;
    let within = wait_limit(planned, op);
    wait(api, name, uploaded.version, None, tail, within).await
}

/// Waits until `version` serves; a failure or timeout as a diagnostic
/// with the function's error and the build log's last lines.
async fn wait(
    api: &Api,
    name: &str,
    version: u32,
    after: Option<i64>,
    tail: sless_client::EventStream,
    within: Duration,
) -> Result<(), Diag> {
    let client = &api.client;
    // Where the change got to, for a message if the wait ends early.
    let phase = std::sync::Mutex::new("queued");
    let waited = client.wait_for_version(name, version, after, tail, within, |s| {
        let mut p = phase.lock().unwrap();
        *p = match s {
            Step::Building => "building",
            Step::Deploying => "starting",
            _ => *p,
        };
    });
    let step = tokio::select! {
        step = waited => step,
        () = api.stopped() => {
            let tracked = phase.lock().unwrap().to_string();
            let now = phase_now(api, name, tracked).await;
            return Err(Diag::error(
                "Stopped",
                format!(
                    "Terraform stopped the apply while {name} version {version} was {now}; \
                     it goes on on the server (`sless get {name}`)"
                ),
            ));
        }
    };
    match step {
        Ok(Step::Ready) => Ok(()),
        Ok(Step::Failed {
            stage,
            error,
            log_tail,
        }) => {
            let what = stage.map(|s| s.as_str()).unwrap_or("build or start");
            let mut detail = format!("The {what} of {name} version {version} failed: {error}");
            let mut lines: Vec<String> = log_tail.lines().map(str::to_owned).collect();
            if lines.is_empty()
                && let Ok(log) = client.get_build_log(name, version).await
            {
                lines = log.lines().map(str::to_owned).collect();
            }
            let from = lines.len().saturating_sub(LOG_TAIL_LINES);
            if from < lines.len() && !error.contains(lines[lines.len() - 1].as_str()) {
                detail.push_str("\n\nThe build log's last lines:\n");
                detail.push_str(&lines[from..].join("\n"));
            }
            Err(Diag::error(format!("The {what} of {name} failed"), detail))
        }
        Ok(Step::Deleted) => Err(Diag::error(
            "The function was deleted",
            format!("{name} was deleted while Terraform waited for it"),
        )),
        Ok(other) => Err(Diag::error(
            "Unexpected end of the wait",
            format!("the wait for {name} ended at {other:?}"),
        )),
        Err(sless_client::Error::Timeout { .. }) => {
            let tracked = phase.lock().unwrap().to_string();
            let now = phase_now(api, name, tracked).await;
            Err(Diag::error(
                "Timed out waiting for the function",
                format!(
                    "{name} version {version} was not serving after {} s; it was {now} \
                     (the build goes on: raise build_timeout_sec or the timeouts block, \
                     and see `sless build-log {name} --version {version} --follow`)",
                    within.as_secs()
                ),
            ))
        }
        Err(e) => Err(api_diag(&e, "Cannot follow the function's build", &block())),
    }
}

/// The function's phase as the server says it now (lowercase, as a
/// message says it), else `tracked`.
async fn phase_now(api: &Api, name: &str, tracked: String) -> String {
    match api.client.get_function(name).await {
        Ok(f) => f.doc.phase.to_lowercase(),
        Err(_) => tracked,
    }
}

/// A 412: the function changed since Terraform last read it.
fn changed_elsewhere(e: &sless_client::Error) -> Option<Diag> {
    (e.status() == Some(412)).then(|| {
        Diag::error(
            "The function changed outside Terraform",
            format!(
                "{e}\nIt changed since Terraform last read it, so this apply would overwrite \
                 that change: run terraform plan (or apply) again to see it first."
            ),
        )
    })
}

async fn update(
    api: &Api,
    name: &str,
    prior: &Value,
    planned: &Value,
    private: &[u8],
) -> Result<Applied, Diag> {
    let client = &api.client;
    let mut expected = stream_version_of(private);
    let spec_changed = SPEC.iter().any(|a| planned.get(a) != prior.get(a));
    let code_changed = planned.get("code_hash") != prior.get("code_hash");
    let key_of = |command: &str| {
        idempotency_key(
            api,
            Kind::Function,
            command,
            &serde_json::json!({
                "spec": spec_of(planned),
                "code_hash": planned.get("code_hash").to_json(),
                "after": expected,
            }),
        )
    };
    let (update_key, upload_key) = (key_of("update"), key_of("upload"));
    let zip = if code_changed {
        Some(zip_for(planned)?)
    } else {
        None
    };
    let mut target = prior.get("live_version").as_u32();
    // The spec change's event: the redeploy it causes comes after it.
    let mut after = None;
    let tail = client
        .tail_function(name)
        .await
        .map_err(|e| api_diag(&e, "Cannot follow the function", &block()))?;
    let result = async {
        if spec_changed {
            let change = changed_fields(prior, planned);
            let mut c = client.idempotency_key(update_key);
            if let Some(v) = expected {
                c = c.if_match(v);
            }
            let updated = c.update_function(name, &change).await.map_err(|e| {
                changed_elsewhere(&e)
                    .unwrap_or_else(|| api_diag(&e, "The function was not changed", &block()))
            })?;
            expected = updated.stream_version.or(expected);
            target = updated.version.or(target);
            if updated.unchanged != Some(true) {
                after = updated.position;
            }
        }
        match zip {
            Some(zip) => {
                drop(tail);
                upload_and_wait(api, name, planned, zip, upload_key, expected, "update").await
            }
            None => match target {
                Some(v) => wait(api, name, v, after, tail, wait_limit(planned, "update")).await,
                None => Ok(()),
            },
        }
    }
    .await;
    // The state is what the server says now, whatever happened.
    let (state, private) = read(api, name, planned, &[]).await?;
    Ok(match result {
        Ok(()) => Applied::ok(state, private),
        Err(d) => Applied::failed(state, private, d),
    })
}

/// The fields of the spec that the plan changes.
pub(super) fn changed_fields(prior: &Value, planned: &Value) -> UpdateFunction {
    let new = spec_of(planned);
    let changed = |a: &str| planned.get(a) != prior.get(a);
    UpdateFunction {
        name: None,
        runtime: changed("runtime").then(|| new.runtime.clone()),
        entrypoint: changed("entrypoint").then(|| new.entrypoint.clone()),
        memory_mb: changed("memory_mb").then_some(new.memory_mb),
        timeout_sec: changed("timeout_sec").then_some(new.timeout_sec),
        env_vars: changed("env_vars").then(|| new.env_vars.clone()),
        scale_to_zero_after_sec: changed("scale_to_zero_after_sec")
            .then_some(new.scale_to_zero_after_sec)
            .flatten(),
        min_instances: changed("min_instances")
            .then_some(new.min_instances)
            .flatten(),
        max_instances: changed("max_instances")
            .then_some(new.max_instances)
            .flatten(),
        concurrency: changed("concurrency").then_some(new.concurrency).flatten(),
    }
}
