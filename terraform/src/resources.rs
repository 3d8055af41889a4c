//! The managed resources: `sless_function`, `sless_trigger`, `sless_job`.
//! Each module has the resource's schema and its validate, plan, apply,
//! read and import; this one names them and holds what they share.

pub mod function;
pub mod job;
pub mod trigger;

use sha2::{Digest, Sha256};
use sless_domain::DomainError;

use crate::api::Api;
use crate::diag::Diag;
use crate::schema::Block;
use crate::value::Value;

/// A resource type of this provider.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    Function,
    Trigger,
    Job,
}

/// A planned or applied change: the prior state (null for a create), the
/// proposed or planned one (null for a destroy), the configuration, and
/// the private data of the prior state or of the plan.
pub struct Change {
    pub prior: Value,
    pub proposed: Value,
    pub config: Value,
    pub private: Vec<u8>,
}

impl Change {
    /// The resource's name: the prior state's, else the planned one's.
    pub fn name(&self) -> String {
        self.prior
            .get("name")
            .as_str()
            .or(self.proposed.get("name").as_str())
            .unwrap_or_default()
            .to_owned()
    }
}

/// A plan: the state it leads to, the attributes whose change replaces
/// the resource, and private data for the apply.
pub struct Planned {
    pub state: Value,
    pub replace: Vec<&'static str>,
    pub private: Vec<u8>,
}

impl Planned {
    pub fn keep(state: Value, private: Vec<u8>) -> Planned {
        Planned {
            state,
            replace: vec![],
            private,
        }
    }
}

/// What an apply left: the state (null when nothing exists), its private
/// data, and the errors (an apply that failed may still have left state).
pub struct Applied {
    pub state: Value,
    pub private: Vec<u8>,
    pub diags: Vec<Diag>,
}

impl Applied {
    pub fn ok(state: Value, private: Vec<u8>) -> Applied {
        Applied {
            state,
            private,
            diags: vec![],
        }
    }

    pub fn failed(state: Value, private: Vec<u8>, diag: Diag) -> Applied {
        Applied {
            state,
            private,
            diags: vec![diag],
        }
    }
}

impl Kind {
    pub const ALL: [Kind; 3] = [Kind::Function, Kind::Trigger, Kind::Job];

    pub fn of(type_name: &str) -> Option<Kind> {
        Kind::ALL.into_iter().find(|k| k.name() == type_name)
    }

    pub fn name(self) -> &'static str {
        match self {
            Kind::Function => "sless_function",
            Kind::Trigger => "sless_trigger",
            Kind::Job => "sless_job",
        }
    }

    pub fn block(self) -> Block {
        match self {
            Kind::Function => function::block(),
            Kind::Trigger => trigger::block(),
            Kind::Job => job::block(),
        }
    }

    pub fn validate(self, config: &Value) -> Vec<Diag> {
        match self {
            Kind::Function => function::validate(config),
            Kind::Trigger => trigger::validate(config),
            Kind::Job => job::validate(config),
        }
    }

    pub async fn plan(self, api: &Api, change: Change) -> Result<Planned, Diag> {
        if change.proposed.is_null() {
            // A destroy: nothing to plan but its end.
            return Ok(Planned::keep(Value::Null, vec![]));
        }
        match self {
            Kind::Function => function::plan(api, change),
            Kind::Trigger => trigger::plan(api, change),
            Kind::Job => job::plan(api, change),
        }
    }

    pub async fn apply(self, api: &Api, change: Change) -> Applied {
        match self {
            Kind::Function => function::apply(api, change).await,
            Kind::Trigger => trigger::apply(api, change).await,
            Kind::Job => job::apply(api, change).await,
        }
    }

    /// The resource as it is now; null when it is gone.
    pub async fn read(
        self,
        api: &Api,
        state: &Value,
        private: &[u8],
    ) -> Result<(Value, Vec<u8>), Diag> {
        if state.is_null() {
            return Ok((Value::Null, vec![]));
        }
        let name = state.get("name").as_str().unwrap_or_default().to_owned();
        match self {
            Kind::Function => function::read(api, &name, state, private).await,
            Kind::Trigger => trigger::read(api, &name, state).await,
            Kind::Job => job::read(api, &name, state).await,
        }
    }

    /// The resource named by an import id: `name` or `namespace/name`.
    pub async fn import(self, api: &Api, id: &str) -> Result<(Value, Vec<u8>), Diag> {
        let name = import_name(api, self, id)?;
        let stub = Value::object([("name", Value::string(name.clone()))]);
        let (state, private) = self.read(api, &stub, &[]).await?;
        if state.is_null() {
            return Err(Diag::error(
                "Cannot import a resource that does not exist",
                format!(
                    "there is no {} named {name:?} in namespace {}",
                    self.noun(),
                    api.namespace
                ),
            ));
        }
        Ok((state, private))
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Function => "function",
            Kind::Trigger => "trigger",
            Kind::Job => "job",
        }
    }
}

/// The name in an import id, whose namespace (if it names one) must be the
/// provider's.
fn import_name(api: &Api, kind: Kind, id: &str) -> Result<String, Diag> {
    let name = match id.split_once('/') {
        None => id,
        Some((ns, name)) if ns == api.namespace => name,
        Some((ns, _)) => {
            return Err(Diag::error(
                "Another namespace",
                format!(
                    "the id {id:?} names namespace {ns:?}, but the provider acts in {}; \
                     import with the name alone, or configure the provider for {ns:?}",
                    api.namespace
                ),
            ));
        }
    };
    if name.is_empty() {
        return Err(Diag::error(
            "Invalid import id",
            format!(
                "import a {} by its name, or by namespace/name: `terraform import {}.<address> <name>`",
                kind.noun(),
                kind.name()
            ),
        ));
    }
    Ok(name.to_owned())
}

/// The id of a resource in state: `namespace/name`.
pub fn id(api: &Api, name: &str) -> Value {
    Value::string(format!("{}/{name}", api.namespace))
}

/// `planned` with its `id` and `namespace` set.
pub fn identified(api: &Api, mut planned: Value) -> Value {
    let id = match planned.get("name").as_str() {
        Some(n) => id(api, n),
        None => Value::Unknown,
    };
    planned.set("id", id);
    planned.set("namespace", Value::string(api.namespace.clone()));
    planned
}

/// What a delete left: nothing, also when the resource was gone already;
/// on another error, the prior state and the error.
pub fn removed<T>(
    result: sless_client::Result<T>,
    prior: Value,
    private: Vec<u8>,
    kind: Kind,
) -> Applied {
    match result {
        Ok(_) => Applied::ok(Value::Null, vec![]),
        Err(e) if e.is_not_found() => Applied::ok(Value::Null, vec![]),
        Err(e) => {
            let summary = format!("The {} was not deleted", kind.noun());
            Applied::failed(prior, private, api_diag(&e, &summary, &kind.block()))
        }
    }
}

/// A domain rule broken, as a diagnostic on the attribute it is about.
pub fn domain_diag(e: DomainError, summary: &str) -> Diag {
    match e {
        DomainError::Invalid { field, detail } => Diag::attr(field, summary, detail),
        other => Diag::error(summary, other.to_string()),
    }
}

/// An API error, on the attribute the problem names when the resource has
/// one of that name.
pub fn api_diag(e: &sless_client::Error, summary: &str, attrs: &Block) -> Diag {
    let detail = e.to_string();
    match e.problem().and_then(|p| p.field.as_deref()) {
        Some(field) if attrs.attr(field).is_some() => Diag::attr(field, summary, detail),
        _ => Diag::error(summary, detail),
    }
}

/// The `Idempotency-Key` of a command of an apply: the same for the same
/// resource, command, planned values and point of the resource's stream
/// (`planned` holds it), so an apply retried after it lost its answer is
/// answered as the first was and changes nothing twice, while the same
/// values applied again after the stream moved on (a function deleted and
/// made again) are a new command.
pub fn idempotency_key(
    api: &Api,
    kind: Kind,
    command: &str,
    planned: &serde_json::Value,
) -> String {
    let mut h = Sha256::new();
    for part in [
        kind.name(),
        api.namespace.as_str(),
        command,
        &planned.to_string(),
    ] {
        h.update(part.as_bytes());
        h.update([0]);
    }
    format!("terraform-{}", &hex::encode(h.finalize())[..40])
}

/// The version of the last event of `stream` (0 when it has none): where
/// the resource's history stands, deleted ones included.
pub async fn last_version(api: &Api, stream: String) -> Result<i64, Diag> {
    let filter = sless_client::EventFilter {
        stream: Some(stream),
        limit: Some(1),
        order: Some("newest".into()),
        ..sless_client::EventFilter::default()
    };
    let page = api
        .client
        .list_events(&filter)
        .await
        .map_err(|e| Diag::error("Cannot read the resource's history", e.to_string()))?;
    Ok(page.items.first().map(|e| e.version).unwrap_or(0))
}

/// The time allowed by the `timeouts` block for `op`, else `default`.
pub fn timeout(state: &Value, op: &str, default: std::time::Duration) -> std::time::Duration {
    state
        .get("timeouts")
        .get(op)
        .as_str()
        .and_then(crate::schema::parse_duration)
        .unwrap_or(default)
}

/// Errors in a `timeouts` block's durations.
pub fn validate_timeouts(config: &Value, ops: &[&str]) -> Vec<Diag> {
    ops.iter()
        .filter_map(|op| {
            let text = config.get("timeouts").get(op).as_str()?;
            crate::schema::parse_duration(text).is_none().then(|| {
                Diag::error(
                    "Invalid duration",
                    format!("{text:?} is not a duration: write it as 30s, 5m or 1h30m"),
                )
                .at(&["timeouts", op])
            })
        })
        .collect()
}

/// The private data kept with a resource's state: the version of its
/// stream when it was last read or changed (what `If-Match` sends).
pub fn private_of(stream_version: Option<u64>) -> Vec<u8> {
    match stream_version {
        Some(v) => serde_json::json!({ "stream_version": v })
            .to_string()
            .into_bytes(),
        None => Vec::new(),
    }
}

pub fn stream_version_of(private: &[u8]) -> Option<u64> {
    serde_json::from_slice::<serde_json::Value>(private)
        .ok()?
        .get("stream_version")?
        .as_u64()
}

/// A whole number attribute that is set but not one.
pub fn check_whole(config: &Value, name: &'static str) -> Option<Diag> {
    let v = config.get(name);
    match v {
        Value::Number(_) if v.as_u32().is_none() => Some(Diag::attr(
            name,
            "Invalid number",
            format!("{name} must be a whole number"),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn api() -> Api {
        let mut cfg = sless_client::Config::new("http://127.0.0.1:1", Some("t".into()));
        cfg.namespace = Some("sless-0123456789abcdef".into());
        Api {
            client: sless_client::Client::with_config(cfg).unwrap(),
            namespace: "sless-0123456789abcdef".into(),
            endpoint: "http://127.0.0.1:1".into(),
            stop: tokio::sync::watch::channel(false).1,
        }
    }

    #[test]
    fn an_idempotency_key_is_the_same_for_the_same_command_and_differs_for_any_other() {
        let api = api();
        let planned = serde_json::json!({"spec": {"name": "f"}, "after": 0});
        let key = idempotency_key(&api, Kind::Function, "create", &planned);
        assert_eq!(
            key,
            idempotency_key(&api, Kind::Function, "create", &planned)
        );
        assert!(key.starts_with("terraform-") && key.len() == 50, "{key}");
        let others = [
            idempotency_key(&api, Kind::Job, "create", &planned),
            idempotency_key(&api, Kind::Function, "upload", &planned),
            idempotency_key(
                &api,
                Kind::Function,
                "create",
                &serde_json::json!({"spec": {"name": "f"}, "after": 3}),
            ),
        ];
        for other in others {
            assert_ne!(key, other);
        }
    }

    #[test]
    fn an_import_id_is_a_name_or_the_providers_namespace_and_a_name() {
        let api = api();
        assert_eq!(import_name(&api, Kind::Function, "hello").unwrap(), "hello");
        assert_eq!(
            import_name(&api, Kind::Function, "sless-0123456789abcdef/hello").unwrap(),
            "hello"
        );
        let other = import_name(&api, Kind::Trigger, "sless-ffffffffffffffff/hello").unwrap_err();
        assert!(other.detail.contains("sless-ffffffffffffffff"), "{other:?}");
        assert!(import_name(&api, Kind::Job, "").is_err());
    }
}
