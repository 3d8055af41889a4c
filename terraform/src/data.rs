//! The data sources: `sless_function` (one function, with its versions)
//! and `sless_functions` (the namespace's functions).

use crate::api::Api;
use crate::diag::Diag;
use crate::resources::{api_diag, domain_diag, id};
use crate::schema::{Attr, Block, Mode};
use crate::value::{Type, Value};

pub const NAMES: [&str; 2] = ["sless_function", "sless_functions"];

fn version_type() -> Type {
    Type::Object(vec![
        ("version", Type::Number),
        ("sha256", Type::String),
        ("size", Type::Number),
        ("files", Type::Number),
        ("runtime", Type::String),
        ("uploaded_by", Type::String),
        ("uploaded_at", Type::String),
        ("live", Type::Bool),
        ("deployed", Type::Bool),
    ])
}

/// What a function shows, in both data sources.
const FUNCTION_FIELDS: [(&str, Type); 15] = [
    ("runtime", Type::String),
    ("entrypoint", Type::String),
    ("memory_mb", Type::Number),
    ("timeout_sec", Type::Number),
    ("min_instances", Type::Number),
    ("max_instances", Type::Number),
    ("concurrency", Type::Number),
    ("instances", Type::Number),
    ("phase", Type::String),
    ("version", Type::Number),
    ("deployed_version", Type::Number),
    ("last_error", Type::String),
    ("url", Type::String),
    ("created_at", Type::String),
    ("updated_at", Type::String),
];

fn summary_type() -> Type {
    let mut fields = vec![("name", Type::String)];
    fields.extend(FUNCTION_FIELDS.iter().cloned());
    Type::Object(fields)
}

pub fn block(name: &str) -> Option<Block> {
    use Mode::*;
    match name {
        "sless_function" => {
            let mut attrs = vec![
                Attr::new("name", Type::String, Required, "The function's name."),
                Attr::new("id", Type::String, Computed, "`namespace/name`."),
                Attr::new("namespace", Type::String, Computed, "Its namespace."),
                Attr::new(
                    "live_version",
                    Type::Number,
                    Computed,
                    "The version users want running.",
                ),
                Attr::new(
                    "versions",
                    Type::List(Box::new(version_type())),
                    Computed,
                    "Its kept versions, newest first.",
                ),
            ];
            attrs.extend(
                FUNCTION_FIELDS
                    .iter()
                    .map(|(n, t)| Attr::new(n, t.clone(), Computed, "")),
            );
            Some(Block {
                description: "One function, with its versions.",
                attrs,
                blocks: vec![],
            })
        }
        "sless_functions" => Some(Block {
            description: "The functions of the provider's namespace.",
            attrs: vec![
                Attr::new("namespace", Type::String, Computed, "The namespace."),
                Attr::new(
                    "names",
                    Type::List(Box::new(Type::String)),
                    Computed,
                    "Their names, in order.",
                ),
                Attr::new(
                    "functions",
                    Type::List(Box::new(summary_type())),
                    Computed,
                    "Each function.",
                ),
            ],
            blocks: vec![],
        }),
        _ => None,
    }
}

pub fn validate(type_name: &str, config: &Value) -> Vec<Diag> {
    if block(type_name).is_none() {
        return vec![Diag::error(
            "Unknown type",
            format!("terraform-provider-sless has no data source {type_name:?}"),
        )];
    }
    match config
        .get("name")
        .as_str()
        .map(sless_domain::FunctionName::parse)
    {
        Some(Err(e)) => vec![domain_diag(e, "Invalid function name")],
        _ => vec![],
    }
}

fn fields_of(f: &sless_client::types::FunctionView) -> Vec<(&'static str, Value)> {
    let text = |v: &Option<String>| Value::opt(v.clone(), Value::String);
    vec![
        ("runtime", text(&f.runtime)),
        ("entrypoint", text(&f.entrypoint)),
        ("memory_mb", Value::opt(f.memory_mb, Value::int)),
        ("timeout_sec", Value::opt(f.timeout_sec, Value::int)),
        ("min_instances", Value::opt(f.min_instances, Value::int)),
        ("max_instances", Value::opt(f.max_instances, Value::int)),
        ("concurrency", Value::opt(f.concurrency, Value::int)),
        ("instances", Value::opt(f.instances, Value::int)),
        ("phase", Value::string(f.phase.clone())),
        ("version", Value::opt(f.version, Value::int)),
        (
            "deployed_version",
            Value::opt(f.deployed_version, Value::int),
        ),
        ("last_error", text(&f.last_error)),
        ("url", Value::string(f.url.clone())),
        ("created_at", text(&f.created_at)),
        ("updated_at", text(&f.updated_at)),
    ]
}

pub async fn read(api: &Api, type_name: &str, config: &Value) -> Result<Value, Diag> {
    let client = &api.client;
    let attrs = block(type_name).unwrap_or_else(|| block("sless_function").unwrap());
    if type_name == "sless_functions" {
        let list = client
            .list_functions()
            .await
            .map_err(|e| api_diag(&e, "Cannot list the functions", &attrs))?;
        let mut items = list.items;
        items.sort_by(|a, b| a.name.cmp(&b.name));
        let functions = items
            .iter()
            .map(|f| {
                let mut fields = vec![("name", Value::string(f.name.clone()))];
                fields.extend(fields_of(f));
                Value::object(fields)
            })
            .collect();
        return Ok(Value::object([
            ("namespace", Value::string(api.namespace.clone())),
            (
                "names",
                Value::List(
                    items
                        .iter()
                        .map(|f| Value::string(f.name.clone()))
                        .collect(),
                ),
            ),
            ("functions", Value::List(functions)),
        ]));
    }
    let name = config.get("name").as_str().unwrap_or_default();
    let f = client.get_function(name).await.map_err(|e| {
        if e.is_not_found() {
            Diag::attr(
                "name",
                "No such function",
                format!(
                    "there is no function named {name:?} in namespace {}",
                    api.namespace
                ),
            )
        } else {
            api_diag(&e, "Cannot read the function", &attrs)
        }
    })?;
    let versions = client
        .list_versions(name)
        .await
        .map_err(|e| api_diag(&e, "Cannot read the function's versions", &attrs))?;
    let mut fields = vec![
        ("name", Value::string(f.name.clone())),
        ("id", id(api, &f.name)),
        ("namespace", Value::string(api.namespace.clone())),
        (
            "live_version",
            Value::opt(versions.live_version, Value::int),
        ),
        (
            "versions",
            Value::List(
                versions
                    .items
                    .iter()
                    .map(|v| {
                        Value::object([
                            ("version", Value::int(v.version)),
                            ("sha256", Value::string(v.sha256.clone())),
                            ("size", Value::Number(v.size as f64)),
                            ("files", Value::int(v.files)),
                            ("runtime", Value::opt(v.runtime.clone(), Value::String)),
                            (
                                "uploaded_by",
                                Value::opt(v.uploaded_by.clone(), Value::String),
                            ),
                            ("uploaded_at", Value::string(v.uploaded_at.to_rfc3339())),
                            ("live", Value::Bool(v.live)),
                            ("deployed", Value::Bool(v.deployed)),
                        ])
                    })
                    .collect(),
            ),
        ),
    ];
    fields.extend(fields_of(&f));
    Ok(Value::object(fields))
}
