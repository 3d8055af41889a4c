//! `sless_function`: a function, its source from a directory (packed the
//! way `sless deploy` packs it) or a zip, and its spec.
//!
//! `code_hash` is the sha256 of the zip the function runs. The plan
//! computes it from `source_dir` (or `code_path`), so an edited file shows
//! as a change and an untouched tree as none; a refresh reads the live
//! version's from the server, so a rollback or an upload made elsewhere
//! shows as a change to apply. A function that is not Ready (its build
//! failed, say) is planned to become Ready: `phase` shows the change, and
//! the apply waits for it or reports why it cannot. An apply changes the
//! spec in place (`PUT`, with `If-Match`) and uploads only when the code
//! changed, then waits until the version serves. A create whose build or
//! start fails deletes the function again: the state records nothing
//! half-made.

mod apply;

use std::collections::BTreeMap;

use sless_client::CreateFunction;
use sless_client::types::{FunctionView, VersionList};
use sless_domain::spec::{self, MEMORY_MB_RANGE, Scaling, TIMEOUT_SEC_RANGE};
use sless_domain::{FunctionName, FunctionSpec, Runtime};

pub use apply::apply;

use super::{
    Change, Planned, api_diag, check_whole, domain_diag, id, identified, private_of,
    validate_timeouts,
};
use crate::api::Api;
use crate::diag::Diag;
use crate::schema::{Attr, Block, Mode, timeouts};
use crate::secret;
use crate::value::{Type, Value};

const DEFAULT_MEMORY_MB: u32 = 128;
const DEFAULT_TIMEOUT_SEC: u32 = 30;
const DEFAULT_BUILD_TIMEOUT_SEC: u32 = 300;

pub fn block() -> Block {
    use Mode::*;
    Block {
        description: "A function: its source, runtime and limits. Applies wait until it serves.",
        attrs: vec![
            Attr::new("id", Type::String, Computed, "`namespace/name`."),
            Attr::new(
                "name",
                Type::String,
                Required,
                "A DNS-1123 label; changing it replaces the function.",
            ),
            Attr::new(
                "namespace",
                Type::String,
                Computed,
                "The namespace it lives in.",
            ),
            Attr::new(
                "runtime",
                Type::String,
                Required,
                "`python3.11`, `nodejs20` or `go1.23`.",
            ),
            Attr::new(
                "entrypoint",
                Type::String,
                Required,
                "`module.function` (`package.Function` in Go).",
            ),
            Attr::new(
                "source_dir",
                Type::String,
                Optional,
                "A directory to pack and upload (`.slessignore` applies).",
            ),
            Attr::new(
                "code_path",
                Type::String,
                Optional,
                "A zip to upload, instead of `source_dir`.",
            ),
            Attr::new(
                "code_hash",
                Type::String,
                OptionalComputed,
                "Hex sha256 of the zip: computed from `source_dir` or `code_path` when not given.",
            ),
            Attr::new(
                "memory_mb",
                Type::Number,
                OptionalComputed,
                "Memory limit, 64 to 4096 (default 128).",
            ),
            Attr::new(
                "timeout_sec",
                Type::Number,
                OptionalComputed,
                "How long one call may take, 1 to 900 (default 30).",
            ),
            Attr::new(
                "env_vars",
                Type::Map(Box::new(Type::String)),
                Optional,
                "The function's environment.",
            )
            .sensitive(),
            Attr::new(
                "scale_to_zero_after_sec",
                Type::Number,
                OptionalComputed,
                "Seconds without a call after which the function is stopped; the next call starts it again. 0: never; unset: as the server has it (the platform's default on a new function).",
            ),
            Attr::new(
                "min_instances",
                Type::Number,
                OptionalComputed,
                "Instances kept running however quiet it is, at most max_instances; above 0 it is never scaled to zero. Unset: as the server has it (0 on a new function).",
            ),
            Attr::new(
                "max_instances",
                Type::Number,
                OptionalComputed,
                "The most instances it scales out to, 1 to 100 (the namespace's instance quota may bound it lower). Unset: as the server has it (10 on a new function).",
            ),
            Attr::new(
                "concurrency",
                Type::Number,
                OptionalComputed,
                "Calls one instance takes at once, 1 to 1000. Unset: as the server has it (on a new function the runtime's default: python3.11 10, nodejs20 50, go1.23 100).",
            ),
            Attr::new(
                "build_timeout_sec",
                Type::Number,
                OptionalComputed,
                "How long an apply waits for the build and start (default 300).",
            ),
            Attr::new(
                "version",
                Type::Number,
                Computed,
                "The function's current version.",
            ),
            Attr::new(
                "live_version",
                Type::Number,
                Computed,
                "The version users want running.",
            ),
            Attr::new(
                "sha256",
                Type::String,
                Computed,
                "Hex sha256 of the live version's zip.",
            ),
            Attr::new(
                "phase",
                Type::String,
                Computed,
                "`Pending`, `Building`, `Ready` or `Failed`.",
            ),
            Attr::new(
                "url",
                Type::String,
                Computed,
                "Where it is called (`/fn/{namespace}/{name}`).",
            ),
        ],
        blocks: vec![timeouts(&["create", "update", "delete"])],
    }
}

/// The spec fields, in the order the API takes them.
const SPEC: [&str; 9] = [
    "runtime",
    "entrypoint",
    "memory_mb",
    "timeout_sec",
    "env_vars",
    "scale_to_zero_after_sec",
    "min_instances",
    "max_instances",
    "concurrency",
];

/// The scaling settings, as the API and the domain name them.
const SCALING: [&str; 3] = ["min_instances", "max_instances", "concurrency"];

/// The scaling settings of `v` (a configuration or a planned state); a
/// value unset or not known yet is left out.
fn scaling_of(v: &Value) -> Scaling {
    Scaling {
        min_instances: v.get("min_instances").as_u32(),
        max_instances: v.get("max_instances").as_u32(),
        concurrency: v.get("concurrency").as_u32(),
    }
}

pub fn validate(config: &Value) -> Vec<Diag> {
    let mut diags = Vec::new();
    let summary = "Invalid function";
    if let Some(name) = config.get("name").as_str()
        && let Err(e) = FunctionName::parse(name)
    {
        diags.push(domain_diag(e, summary));
    }
    let runtime = match config.get("runtime").as_str().map(str::parse::<Runtime>) {
        Some(Ok(r)) => Some(r),
        Some(Err(e)) => {
            diags.push(domain_diag(e, summary));
            None
        }
        None => None,
    };
    for name in [
        "memory_mb",
        "timeout_sec",
        "build_timeout_sec",
        "scale_to_zero_after_sec",
    ]
    .into_iter()
    .chain(SCALING)
    {
        diags.extend(check_whole(config, name));
    }
    let range = |name: &'static str, (lo, hi): (u32, u32)| {
        let n = config.get(name).as_u32()?;
        (!(lo..=hi).contains(&n)).then(|| {
            Diag::attr(
                name,
                summary,
                format!("{name} must be between {lo} and {hi} (got {n})"),
            )
        })
    };
    diags.extend(range("memory_mb", MEMORY_MB_RANGE));
    diags.extend(range("timeout_sec", TIMEOUT_SEC_RANGE));
    diags.extend(range("build_timeout_sec", (1, 86_400)));
    diags.extend(range(
        "scale_to_zero_after_sec",
        (0, sless_domain::spec::MAX_SCALE_TO_ZERO_AFTER_SEC),
    ));
    // The entrypoint's form depends on the runtime: checked by the
    // domain's own rule, with the other fields valid.
    if let (Some(runtime), Some(entrypoint)) = (runtime, config.get("entrypoint").as_str()) {
        let probe = FunctionSpec {
            runtime,
            entrypoint: entrypoint.to_owned(),
            memory_mb: DEFAULT_MEMORY_MB,
            timeout_sec: DEFAULT_TIMEOUT_SEC,
            env_vars: BTreeMap::new(),
            scale_to_zero_after_sec: None,
            scaling: Default::default(),
        };
        if let Err(e) = probe.validate() {
            diags.push(domain_diag(e, summary));
        }
    }
    // The scaling settings, by the domain's rule, as far as the
    // configuration alone decides: min_instances against a max_instances
    // it sets (unset, the max is the server's, which the plan knows).
    let mut scaling = scaling_of(config);
    if config.get("max_instances").is_null() || !config.get("max_instances").is_known() {
        scaling.min_instances = None;
    }
    if let Err(e) = scaling.validate() {
        diags.push(domain_diag(e, summary));
    }
    if let Some(env) = config.get("env_vars").as_string_map()
        && config.get("env_vars").is_known()
        && let Err(e) = spec::check_env("env_vars", &env)
    {
        diags.push(domain_diag(e, summary));
    }
    let (dir, zip) = (config.get("source_dir"), config.get("code_path"));
    match (dir.is_null(), zip.is_null()) {
        (true, true) => diags.push(Diag::attr(
            "source_dir",
            "No source",
            "Set source_dir (a directory to pack) or code_path (a zip).",
        )),
        (false, false) => diags.push(Diag::attr(
            "code_path",
            "Two sources",
            "Set source_dir or code_path, not both.",
        )),
        _ => {}
    }
    if !config.get("code_hash").is_null() && zip.is_null() {
        diags.push(Diag::attr(
            "code_hash",
            "code_hash goes with code_path",
            "With source_dir the hash is computed from the directory; set code_hash only with code_path.",
        ));
    }
    diags.extend(validate_timeouts(config, &["create", "update", "delete"]));
    diags
}

/// The zip a configuration names: packed from `source_dir`, or read from
/// `code_path`. `Ok(None)` while the path is unknown.
fn source(config: &Value) -> Result<Option<(Vec<u8>, String)>, Diag> {
    if let Some(dir) = config.get("source_dir").as_str() {
        let packed = sless_client::package::zip_dir(
            std::path::Path::new(dir),
            &sless_client::package::PackLimits::default(),
        )
        .map_err(|e| {
            Diag::attr(
                "source_dir",
                "The source directory cannot be packed",
                format!("{dir}: {e}"),
            )
        })?;
        return Ok(Some((packed.bytes, packed.sha256)));
    }
    if let Some(path) = config.get("code_path").as_str() {
        let bytes = std::fs::read(path).map_err(|e| {
            Diag::attr(
                "code_path",
                "The zip cannot be read",
                format!("{path}: {e}"),
            )
        })?;
        let sha = sha256_hex(&bytes);
        return Ok(Some((bytes, sha)));
    }
    Ok(None)
}

fn sha256_hex(bytes: &[u8]) -> String {
    use sha2::Digest;
    hex::encode(sha2::Sha256::digest(bytes))
}

/// The hash the configuration asks for: given, or of its source.
fn wanted_hash(config: &Value) -> Result<Value, Diag> {
    match config.get("code_hash") {
        Value::String(s) => return Ok(Value::string(s.clone())),
        Value::Unknown => return Ok(Value::Unknown),
        _ => {}
    }
    if matches!(config.get("source_dir"), Value::Unknown)
        || matches!(config.get("code_path"), Value::Unknown)
    {
        return Ok(Value::Unknown);
    }
    Ok(match source(config)? {
        Some((_, sha)) => Value::string(sha),
        None => Value::Unknown,
    })
}

pub fn plan(api: &Api, change: Change) -> Result<Planned, Diag> {
    let Change {
        prior,
        proposed,
        config,
        private,
    } = change;
    let mut planned = identified(api, proposed);
    for (attr, default) in [
        ("memory_mb", DEFAULT_MEMORY_MB),
        ("timeout_sec", DEFAULT_TIMEOUT_SEC),
        ("build_timeout_sec", DEFAULT_BUILD_TIMEOUT_SEC),
    ] {
        if config.get(attr).is_null() {
            planned.set(attr, Value::int(default));
        }
    }
    planned.set("code_hash", wanted_hash(&config)?);
    // Unset: as the server has it (a new function: the default, null).
    if config.get("scale_to_zero_after_sec").is_null() {
        let kept = if prior.is_null() {
            Value::Null
        } else {
            prior.get("scale_to_zero_after_sec").clone()
        };
        planned.set("scale_to_zero_after_sec", kept);
    }
    // Unset: as the server has it. A new function's are the server's
    // defaults, and so is the concurrency of one whose runtime changes
    // (its default is the runtime's): known after the apply.
    let runtime_changed = planned.get("runtime") != prior.get("runtime");
    for attr in SCALING {
        if config.get(attr).is_null() {
            let kept = if prior.is_null() || (attr == "concurrency" && runtime_changed) {
                Value::Unknown
            } else {
                prior.get(attr).clone()
            };
            planned.set(attr, kept);
        }
    }
    // What the function's scaling will be, checked whole (a min_instances
    // above the max_instances the server has is refused here, not by the
    // apply).
    if let Err(e) = scaling_of(&planned).validate() {
        return Err(domain_diag(e, "Invalid function"));
    }

    if prior.is_null() {
        for attr in ["version", "live_version", "sha256", "phase", "url"] {
            planned.set(attr, Value::Unknown);
        }
        return Ok(Planned::keep(planned, private));
    }
    let mut replace = Vec::new();
    if planned.get("name") != prior.get("name") {
        replace.push("name");
    }
    let code_changed = planned.get("code_hash") != prior.get("code_hash");
    let spec_changed = SPEC.iter().any(|a| planned.get(a) != prior.get(a));
    if code_changed {
        for attr in ["version", "live_version", "sha256", "phase"] {
            planned.set(attr, Value::Unknown);
        }
    } else if spec_changed {
        for attr in ["version", "live_version", "sha256"] {
            planned.set(attr, prior.get(attr).clone());
        }
        planned.set("phase", Value::Unknown);
    } else {
        for attr in ["version", "live_version", "sha256", "phase"] {
            planned.set(attr, prior.get(attr).clone());
        }
        // Not serving what it should (a failed build, a change under
        // way): the apply makes it Ready, or says why it cannot.
        if prior.get("phase").as_str() != Some("Ready") {
            planned.set("phase", Value::string("Ready"));
        }
    }
    planned.set("url", prior.get("url").clone());
    Ok(Planned {
        state: planned,
        replace,
        private,
    })
}

fn spec_of(state: &Value) -> CreateFunction {
    CreateFunction {
        name: state.get("name").as_str().unwrap_or_default().to_owned(),
        runtime: state.get("runtime").as_str().unwrap_or_default().to_owned(),
        entrypoint: state
            .get("entrypoint")
            .as_str()
            .unwrap_or_default()
            .to_owned(),
        memory_mb: state.get("memory_mb").as_u32().unwrap_or(DEFAULT_MEMORY_MB),
        timeout_sec: state
            .get("timeout_sec")
            .as_u32()
            .unwrap_or(DEFAULT_TIMEOUT_SEC),
        env_vars: state.get("env_vars").as_string_map().unwrap_or_default(),
        scale_to_zero_after_sec: state.get("scale_to_zero_after_sec").as_u32(),
        min_instances: state.get("min_instances").as_u32(),
        max_instances: state.get("max_instances").as_u32(),
        concurrency: state.get("concurrency").as_u32(),
    }
}

/// Messages may quote what the API or a build printed: the environment's
/// values are taken out of them.
fn redact(state: &Value, text: &str) -> String {
    let env = state.get("env_vars").as_string_map().unwrap_or_default();
    secret::redact_all(text, env.values().map(String::as_str))
}

/// The function as the server has it, over `state` (whose settings of
/// this provider's own, `source_dir`, `code_path`, `build_timeout_sec`
/// and `timeouts`, are kept). Null when it does not exist.
pub async fn read(
    api: &Api,
    name: &str,
    state: &Value,
    _private: &[u8],
) -> Result<(Value, Vec<u8>), Diag> {
    let client = &api.client;
    let f = match client.get_function(name).await {
        Ok(f) => f,
        Err(e) if e.is_not_found() => return Ok((Value::Null, vec![])),
        Err(e) => return Err(api_diag(&e, "Cannot read the function", &block())),
    };
    if f.phase == "Deleted" {
        return Ok((Value::Null, vec![]));
    }
    let versions = match client.list_versions(name).await {
        Ok(v) => v,
        Err(e) if e.is_not_found() => return Ok((Value::Null, vec![])),
        Err(e) => {
            return Err(api_diag(
                &e,
                "Cannot read the function's versions",
                &block(),
            ));
        }
    };
    let private = private_of(f.stream_version);
    Ok((state_of(api, &f.doc, &versions, state), private))
}

pub fn state_of(api: &Api, f: &FunctionView, versions: &VersionList, prior: &Value) -> Value {
    let sha_of = |v: Option<u32>| {
        v.and_then(|v| versions.items.iter().find(|i| i.version == v))
            .map(|i| i.sha256.clone())
    };
    let live_sha = sha_of(versions.live_version);
    let env = f.env_vars.clone().unwrap_or_default();
    let env_vars =
        if env.is_empty() && !matches!(prior.get("env_vars"), Value::Map(m) if m.is_empty()) {
            Value::Null
        } else {
            Value::string_map(&env)
        };
    let mut s = prior.clone();
    s.set("id", id(api, &f.name));
    s.set("name", Value::string(f.name.clone()));
    s.set("namespace", Value::string(f.namespace.clone()));
    s.set("runtime", Value::opt(f.runtime.clone(), Value::String));
    s.set(
        "entrypoint",
        Value::opt(f.entrypoint.clone(), Value::String),
    );
    s.set("memory_mb", Value::opt(f.memory_mb, Value::int));
    s.set("timeout_sec", Value::opt(f.timeout_sec, Value::int));
    s.set("env_vars", env_vars);
    s.set(
        "scale_to_zero_after_sec",
        Value::opt(f.scale_to_zero_after_sec, Value::int),
    );
    s.set("min_instances", Value::opt(f.min_instances, Value::int));
    s.set("max_instances", Value::opt(f.max_instances, Value::int));
    s.set("concurrency", Value::opt(f.concurrency, Value::int));
    s.set("code_hash", Value::opt(live_sha.clone(), Value::String));
    if s.get("build_timeout_sec").is_null() {
        s.set("build_timeout_sec", Value::int(DEFAULT_BUILD_TIMEOUT_SEC));
    }
    s.set("version", Value::opt(f.version, Value::int));
    s.set(
        "live_version",
        Value::opt(versions.live_version, Value::int),
    );
    s.set("sha256", Value::opt(live_sha, Value::String));
    s.set("phase", Value::string(f.phase.clone()));
    s.set("url", Value::string(f.url.clone()));
    s
}

#[cfg(test)]
mod tests;
