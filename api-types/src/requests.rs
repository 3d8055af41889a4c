//! The bodies of the API's commands: what a client sends, as the API
//! reads it.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// The body of `POST /v1/namespaces/{ns}/functions`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
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
    /// Seconds without a call after which the function is stopped (scaled
    /// to zero); the next call starts it again. `0`: never. Left out: the
    /// platform's default.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 604800)]
    pub scale_to_zero_after_sec: Option<u32>,
    /// Instances kept running however quiet it is (provisioned
    /// concurrency); above 0 it is never scaled to zero. Left out: 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 100)]
    pub min_instances: Option<u32>,
    /// The most instances it scales out to, at most the namespace's
    /// instance quota. Left out: 10.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 100)]
    pub max_instances: Option<u32>,
    /// Calls one instance takes at once (`1`: one at a time). Left out:
    /// the runtime's default (python3.11 10, nodejs20 50, go1.23 100).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub concurrency: Option<u32>,
}

/// The body of `PUT /v1/namespaces/{ns}/functions/{name}`: the fields to
/// change. A field left out keeps its value; `env_vars`, when given,
/// replaces the whole environment. `name`, when given, must be the path's.
#[derive(Debug, Clone, Default, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct UpdateFunction {
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub name: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(pattern = r"^(python3\.11|nodejs20|go1\.23)$")]
    pub runtime: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(min_length = 3)]
    pub entrypoint: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 64, maximum = 4096)]
    pub memory_mb: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 900)]
    pub timeout_sec: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub env_vars: Option<BTreeMap<String, String>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 604800)]
    pub scale_to_zero_after_sec: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 0, maximum = 100)]
    pub min_instances: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 100)]
    pub max_instances: Option<u32>,
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 1000)]
    pub concurrency: Option<u32>,
}

/// The body of `POST /v1/namespaces/{ns}/triggers`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateTrigger {
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub name: String,
    /// The function it runs.
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub function: String,
    /// `http` or `cron`.
    #[serde(rename = "type")]
    #[schema(pattern = r"^(http|cron)$")]
    pub kind: String,
    /// A cron trigger's schedule (five fields), required for `cron`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule: Option<String>,
    /// The IANA time zone a cron schedule is read in (default UTC).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    /// Default true.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub enabled: Option<bool>,
}

/// The body of `PATCH /v1/namespaces/{ns}/triggers/{name}`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct PatchTrigger {
    pub enabled: bool,
}

/// The body of `POST /v1/namespaces/{ns}/jobs`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct CreateJob {
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub name: String,
    /// The function it runs.
    #[schema(pattern = r"^[a-z]([-a-z0-9]{0,38}[a-z0-9])?$")]
    pub function: String,
    /// What the handler receives as `json` (and as JSON text in `body`).
    #[serde(default)]
    pub input: serde_json::Value,
    /// How long the run may take, in seconds (default: the function's `timeout_sec`).
    #[serde(skip_serializing_if = "Option::is_none")]
    #[schema(minimum = 1, maximum = 86400)]
    pub timeout_sec: Option<u32>,
}

/// The body of `POST .../rollback`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
#[serde(deny_unknown_fields)]
pub struct Rollback {
    /// The version to make live again.
    #[schema(minimum = 1)]
    pub version: u32,
}

/// The memory a function gets when its create leaves it out.
pub fn default_memory() -> u32 {
    128
}

/// The timeout a function gets when its create leaves it out.
pub fn default_timeout() -> u32 {
    30
}
