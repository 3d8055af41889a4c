//! `sless_trigger`: an http or cron trigger of a function. `enabled`
//! changes in place (`PATCH`, with `If-Match`); any other change replaces
//! the trigger.

use sless_client::CreateTrigger;
use sless_client::types::TriggerView;
use sless_domain::trigger::{TriggerFields, TriggerSpec};

use super::{
    Applied, Change, Kind, Planned, api_diag, domain_diag, id, idempotency_key, identified,
    last_version, private_of, removed, stream_version_of,
};
use crate::api::Api;
use crate::diag::Diag;
use crate::schema::{Attr, Block, Mode};
use crate::value::{Type, Value};

/// Changing one of these makes another trigger.
const REPLACING: [&str; 5] = ["name", "function", "type", "schedule", "timezone"];

pub fn block() -> Block {
    use Mode::*;
    Block {
        description: "A trigger: calls of a function over HTTP (`http`) or on a schedule (`cron`).",
        attrs: vec![
            Attr::new("id", Type::String, Computed, "`namespace/name`."),
            Attr::new("name", Type::String, Required, "A DNS-1123 label."),
            Attr::new(
                "namespace",
                Type::String,
                Computed,
                "The namespace it lives in.",
            ),
            Attr::new("function", Type::String, Required, "The function it calls."),
            Attr::new("type", Type::String, Required, "`http` or `cron`."),
            Attr::new(
                "schedule",
                Type::String,
                Optional,
                "A cron trigger's schedule: five fields, e.g. `*/5 * * * *`.",
            ),
            Attr::new(
                "timezone",
                Type::String,
                OptionalComputed,
                "The IANA time zone a cron schedule is read in (default UTC).",
            ),
            Attr::new(
                "enabled",
                Type::Bool,
                OptionalComputed,
                "Whether it fires (default true); an http function with every trigger disabled answers 503.",
            ),
        ],
        blocks: vec![],
    }
}

fn fields(config: &Value) -> Option<TriggerFields<'_>> {
    let text = |name: &str| match config.get(name) {
        Value::Unknown => Err(()),
        v => Ok(v.as_str()),
    };
    Some(TriggerFields {
        name: text("name").ok()??,
        function: text("function").ok()??,
        kind: text("type").ok()??,
        schedule: text("schedule").ok()?,
        timezone: text("timezone").ok()?,
        enabled: config.get("enabled").as_bool(),
    })
}

pub fn validate(config: &Value) -> Vec<Diag> {
    match fields(config).map(TriggerSpec::parse) {
        Some(Err(e)) => vec![domain_diag(e, "Invalid trigger")],
        _ => vec![],
    }
}

pub fn plan(api: &Api, change: Change) -> Result<Planned, Diag> {
    let Change {
        prior,
        proposed,
        config,
        private,
    } = change;
    let mut planned = identified(api, proposed);
    if config.get("enabled").is_null() {
        planned.set("enabled", Value::Bool(true));
    }
    if config.get("timezone").is_null() {
        let tz = match planned.get("type") {
            Value::String(t) if t == "cron" => {
                Value::string(sless_domain::trigger::DEFAULT_TIMEZONE)
            }
            Value::String(_) => Value::Null,
            _ => Value::Unknown,
        };
        planned.set("timezone", tz);
    }
    // The schedule as the API keeps it (spaces around it trimmed) is the
    // same schedule.
    if let (Some(want), Some(had)) = (
        planned.get("schedule").as_str(),
        prior.get("schedule").as_str(),
    ) && want.trim_matches(' ') == had.trim_matches(' ')
    {
        planned.set("schedule", Value::string(had));
    }
    let replace = if prior.is_null() {
        vec![]
    } else {
        REPLACING
            .into_iter()
            .filter(|a| planned.get(a) != prior.get(a))
            .collect()
    };
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
    let client = &api.client;
    if planned.is_null() {
        return removed(
            client.delete_trigger(&name).await,
            prior,
            private,
            Kind::Trigger,
        );
    }
    let result = if prior.is_null() {
        create(api, &name, &planned).await
    } else {
        set_enabled(api, &name, &planned, stream_version_of(&private)).await
    };
    match result {
        Ok((view, version)) => Applied::ok(state_of(api, &view, &planned), private_of(version)),
        Err(d) => Applied::failed(prior, private, d),
    }
}

fn request(planned: &Value) -> CreateTrigger {
    let text = |n: &str| planned.get(n).as_str().map(str::to_owned);
    CreateTrigger {
        name: text("name").unwrap_or_default(),
        function: text("function").unwrap_or_default(),
        kind: text("type").unwrap_or_default(),
        schedule: text("schedule"),
        timezone: text("timezone"),
        enabled: planned.get("enabled").as_bool(),
    }
}

async fn create(
    api: &Api,
    name: &str,
    planned: &Value,
) -> Result<(TriggerView, Option<u64>), Diag> {
    let req = request(planned);
    let stream = stream_of(api, name)?;
    let after = last_version(api, stream).await?;
    let key = idempotency_key(
        api,
        Kind::Trigger,
        "create",
        &serde_json::json!({ "trigger": &req, "after": after }),
    );
    match api.client.idempotency_key(key).create_trigger(&req).await {
        Ok(t) => Ok((t.doc, t.stream_version)),
        Err(e) if e.status() == Some(409) => {
            // One made by an apply that lost its answer is taken on, with
            // `enabled` set as planned; any other is not Terraform's.
            let existing = api
                .client
                .get_trigger(name)
                .await
                .map_err(|e| api_diag(&e, "Cannot read the trigger", &block()))?;
            let same = existing.function == req.function
                && existing.kind == req.kind
                && existing.schedule == req.schedule
                && existing.timezone == req.timezone;
            if !same {
                return Err(Diag::attr(
                    "name",
                    "The trigger exists already",
                    format!(
                        "a trigger named {name:?} exists in namespace {} for another function or schedule: \
                         import it (`terraform import sless_trigger.<address> {name}`) or choose another name",
                        api.namespace
                    ),
                ));
            }
            set_enabled(api, name, planned, existing.stream_version).await
        }
        Err(e) => Err(api_diag(&e, "The trigger was not created", &block())),
    }
}

fn stream_of(api: &Api, name: &str) -> Result<String, Diag> {
    let ns = sless_domain::Namespace::parse(&api.namespace)
        .map_err(|e| Diag::error("Invalid namespace", e.to_string()))?;
    let name =
        sless_domain::TriggerName::parse(name).map_err(|e| domain_diag(e, "Invalid trigger"))?;
    Ok(sless_domain::trigger::stream(&ns, &name))
}

async fn set_enabled(
    api: &Api,
    name: &str,
    planned: &Value,
    expected: Option<u64>,
) -> Result<(TriggerView, Option<u64>), Diag> {
    let enabled = planned.get("enabled").as_bool().unwrap_or(true);
    let mut c = api.client.clone();
    if let Some(v) = expected {
        c = c.if_match(v);
    }
    match c.set_trigger_enabled(name, enabled).await {
        Ok(t) => Ok((t.doc, t.stream_version)),
        Err(e) if e.status() == Some(412) => Err(Diag::error(
            "The trigger changed outside Terraform",
            format!("{e}\nRun terraform plan (or apply) again to see the change first."),
        )),
        Err(e) => Err(api_diag(&e, "The trigger was not changed", &block())),
    }
}

pub async fn read(api: &Api, name: &str, state: &Value) -> Result<(Value, Vec<u8>), Diag> {
    match api.client.get_trigger(name).await {
        Ok(t) => Ok((state_of(api, &t.doc, state), private_of(t.stream_version))),
        Err(e) if e.is_not_found() => Ok((Value::Null, vec![])),
        Err(e) => Err(api_diag(&e, "Cannot read the trigger", &block())),
    }
}

/// The trigger as the server has it; a schedule written with spaces
/// around it keeps its text (the API trims them).
fn state_of(api: &Api, t: &TriggerView, prior: &Value) -> Value {
    let schedule = match (prior.get("schedule").as_str(), &t.schedule) {
        (Some(had), Some(now)) if had.trim_matches(' ') == now => Some(had.to_owned()),
        _ => t.schedule.clone(),
    };
    Value::object([
        ("id", id(api, &t.name)),
        ("name", Value::string(t.name.clone())),
        ("namespace", Value::string(api.namespace.clone())),
        ("function", Value::string(t.function.clone())),
        ("type", Value::string(t.kind.clone())),
        ("schedule", Value::opt(schedule, Value::String)),
        ("timezone", Value::opt(t.timezone.clone(), Value::String)),
        ("enabled", Value::Bool(t.enabled)),
    ])
}
