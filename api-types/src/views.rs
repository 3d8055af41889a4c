//! What the API answers: the documents of its routes, as it writes them
//! and as a client reads them.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

/// An error answer (RFC 9457), `application/problem+json`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Problem {
    /// `https://sless.dev/problems/{kind}`, stable per kind of error.
    #[serde(rename = "type")]
    #[schema(example = "https://sless.dev/problems/invalid-field")]
    pub kind: String,
    pub title: String,
    /// The HTTP status, repeated.
    pub status: u16,
    pub detail: String,
    /// The offending field of the request (a body member such as
    /// `env_vars.A`, a query parameter, or a header such as
    /// `Idempotency-Key`), when one is at fault.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub field: Option<String>,
    /// Only in the `already-exists` answer to a job create: the status of
    /// the job that has the name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job_status: Option<String>,
    /// Only in the `already-exists` answer to a job create: the job that
    /// has the name.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub job: Option<Box<JobView>>,
    /// Only in a `quota-exceeded` answer: the quota (`functions`,
    /// `versions`, `stored_bytes`, `triggers`, `running_jobs`,
    /// `uploads_per_minute`); and in the `invalid-field` answer of a
    /// `max_instances` past the namespace's `instances` quota.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub quota: Option<String>,
    /// Only in a `quota-exceeded` answer: the quota's limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub limit: Option<u64>,
    /// Only in a `quota-exceeded` answer: what the namespace uses now
    /// (bytes for `stored_bytes`; for `uploads_per_minute`, the uploads in
    /// the last minute).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub used: Option<u64>,
}

/// A function as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FunctionView {
    pub namespace: String,
    pub name: String,
    /// `python3.11`, `nodejs20` or `go1.23`.
    pub runtime: Option<String>,
    pub entrypoint: Option<String>,
    pub memory_mb: Option<u32>,
    pub timeout_sec: Option<u32>,
    pub env_vars: Option<BTreeMap<String, String>>,
    /// Seconds without a call after which it is scaled to zero (`0`:
    /// never); null: the platform's default.
    #[serde(default)]
    pub scale_to_zero_after_sec: Option<u32>,
    /// `Pending`, `Building`, `Ready`, `Failed` or `Deleted`. A function
    /// scaled to zero stays `Ready`, with `instances` 0.
    pub phase: String,
    /// How many instances serve, as the log says: what the autoscaler
    /// last decided, within `min_instances` and `max_instances`; 0 before
    /// its first deploy and while it is scaled to zero.
    #[serde(default)]
    pub instances: Option<u32>,
    /// Instances kept running however quiet it is.
    #[serde(default)]
    pub min_instances: Option<u32>,
    /// The most instances it scales out to.
    #[serde(default)]
    pub max_instances: Option<u32>,
    /// Calls one instance takes at once.
    #[serde(default)]
    pub concurrency: Option<u32>,
    /// Calls in flight now, summed over every API process (on average
    /// over the last moment); only in the answer of a function's `GET`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_flight: Option<f64>,
    /// The latest uploaded version, null before the first upload.
    pub version: Option<u32>,
    /// The version that runs, null while none does.
    pub deployed_version: Option<u32>,
    pub last_error: Option<String>,
    /// Where the function is invoked (`/fn/{ns}/{name}`).
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
    /// When the function last changed (a change of how many instances
    /// serve it is not one).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub updated_at: Option<String>,
    /// Position of the event a command appended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
    /// True when an update changed nothing.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<bool>,
    /// Where to follow an accepted change.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_url: Option<String>,
}

/// One page of the functions of a namespace, by name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FunctionList {
    pub items: Vec<FunctionView>,
    /// The `cursor` of the next page; null on the last.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// The answer to an upload: the version it made (or, for the same zip
/// again, the version it already is).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Uploaded {
    pub version: u32,
    /// Hex SHA-256 of the zip.
    pub sha256: String,
    /// Bytes of the zip.
    pub size: u64,
    /// Files in the zip.
    pub files: u64,
    /// Where to follow the build.
    pub status_url: String,
    /// Position of the event the upload appended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
    /// True when the zip is the current version's: nothing was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<bool>,
}

/// The answer to a delete: the function is on its way out.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Deleted {
    pub namespace: String,
    pub name: String,
    /// `Deleted`.
    pub phase: String,
    pub position: i64,
}

/// The answer to `ensure`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Ensured {
    pub namespace: String,
    /// False when the namespace existed already.
    pub created: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
}

/// One file of a function's source.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SourceFileView {
    pub path: String,
    pub size: u64,
    pub binary: bool,
    /// True when `content` holds only the start of the file, or nothing.
    pub truncated: bool,
    /// UTF-8 text content, left out for binary files and past the inline limit.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub content: Option<String>,
}

/// A function's current source.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct SourceView {
    pub namespace: String,
    pub name: String,
    pub version: u32,
    /// Hex SHA-256 of the uploaded zip.
    pub sha256: String,
    pub files: Vec<SourceFileView>,
    /// True when some files' content was left out.
    pub truncated: bool,
    pub inlined_bytes: u64,
    pub inline_limit: u64,
}

/// One kept version of a function's source.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionView {
    pub version: u32,
    /// Hex SHA-256 of the uploaded zip.
    pub sha256: String,
    /// Bytes of the zip.
    pub size: u64,
    /// Files in the zip.
    pub files: u32,
    /// The runtime its build context was packed for (absent for versions
    /// recorded before it was kept).
    pub runtime: Option<String>,
    /// The token subject that uploaded it.
    pub uploaded_by: Option<String>,
    pub uploaded_at: chrono::DateTime<chrono::Utc>,
    /// The version users want running.
    pub live: bool,
    /// The version that runs now.
    pub deployed: bool,
}

/// One page of a function's kept versions, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionList {
    pub namespace: String,
    pub name: String,
    pub live_version: Option<u32>,
    pub deployed_version: Option<u32>,
    /// How many versions are kept besides the live one.
    pub retention: usize,
    pub items: Vec<VersionView>,
    /// The `cursor` of the next page; null on the last.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// How one file differs between two versions.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct FileDiffView {
    pub path: String,
    /// `added`, `removed` or `modified`.
    pub change: String,
    /// Not UTF-8 text on either side: no diff shown.
    pub binary: bool,
    /// The unified diff (`--- a/path`, `+++ b/path`, hunks).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// A text file whose diff was left out for the answer's limit.
    pub truncated: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_before: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_after: Option<u64>,
}

/// What changed from one version to another.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct VersionDiff {
    pub namespace: String,
    pub name: String,
    pub from: u32,
    pub to: u32,
    /// The files that differ, by path.
    pub files: Vec<FileDiffView>,
    pub truncated: bool,
    pub diff_bytes: u64,
    pub diff_limit: u64,
}

/// How a build ended: the `data` of a followed build log's last event
/// (`event: end`).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct BuildLogEnd {
    pub outcome: BuildOutcome,
    /// Why it failed; null when it succeeded.
    pub error: Option<String>,
}

/// Whether a build made an image.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize, ToSchema)]
#[serde(rename_all = "lowercase")]
pub enum BuildOutcome {
    Succeeded,
    Failed,
}

/// One invocation record.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InvocationView {
    pub id: String,
    pub namespace: String,
    pub function: String,
    /// The deployed version that answered; null when none did.
    pub version: Option<u32>,
    pub started_at: String,
    pub duration_ms: f64,
    /// The HTTP status the caller got.
    pub status: u16,
    pub bytes_in: u64,
    pub bytes_out: u64,
    pub cold: bool,
    pub error: Option<String>,
    pub request_id: String,
    /// Where the call came from: `http` (through `/fn`), `job` or `cron`.
    pub origin: String,
    /// The run's stream for a job or cron run (`job/{ns}/{name}`,
    /// `cron/{ns}/{trigger}/{unix seconds}`); null for a call through `/fn`.
    pub run: Option<String>,
    /// A call through `/fn`: its method (null for runs, and for calls
    /// recorded before it was kept).
    #[serde(default)]
    pub method: Option<String>,
    /// A call through `/fn`: its path below the function, without the query.
    #[serde(default)]
    pub path: Option<String>,
    /// A call that found its function scaled to zero: how long it was held
    /// until an instance served; the first call is the rest of
    /// `duration_ms`. Null for every other call.
    #[serde(default)]
    pub activation_ms: Option<f64>,
    /// Of `activation_ms`, how long the worker took to start the instance
    /// (from `FunctionScaledUp` to `FunctionDeployed` in the log).
    #[serde(default)]
    pub instance_start_ms: Option<f64>,
}

/// One page of invocation records, newest first.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InvocationPage {
    pub items: Vec<InvocationView>,
    /// The `cursor` of the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// One event of the audit log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventEntry {
    /// The event's place in the log: later appends have larger positions.
    pub position: i64,
    pub namespace: String,
    /// The aggregate it belongs to (`function/{ns}/{name}`, `namespace/{ns}`).
    pub stream: String,
    /// Its number within the stream, from 1.
    pub version: i64,
    /// What happened (`FunctionCreated`, `FunctionUploaded`, ...).
    #[serde(rename = "type")]
    pub event_type: String,
    /// Who caused it: the token's `sub`, or `system:<role>` for sless itself.
    pub actor: Option<String>,
    /// The `X-Request-Id` of the request that caused it, if one did.
    pub request_id: Option<String>,
    /// When it was recorded (RFC 3339).
    pub time: String,
    /// The event's own fields.
    #[schema(value_type = Object)]
    pub data: serde_json::Value,
}

/// One page of the audit log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct EventPage {
    pub items: Vec<EventEntry>,
    /// The `after` of the next page; null on the last.
    pub next: Option<String>,
}

/// One run of a cron trigger.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TriggerRun {
    /// `{trigger}-{unix seconds of the tick}`.
    pub name: String,
    /// The tick it runs for.
    pub scheduled_at: chrono::DateTime<chrono::Utc>,
    /// `Pending`, `Running`, `Succeeded`, `Failed` or `Skipped` (the
    /// previous run was still going).
    pub status: String,
    pub exit_code: Option<i32>,
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    pub error: Option<String>,
}

/// A trigger as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TriggerView {
    pub name: String,
    /// The function it runs.
    pub function: String,
    /// `http` or `cron`.
    #[serde(rename = "type")]
    pub kind: String,
    /// A cron trigger's schedule; null for http.
    pub schedule: Option<String>,
    /// A cron trigger's IANA time zone (absent for http).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub timezone: Option<String>,
    pub enabled: bool,
    pub created_at: Option<chrono::DateTime<chrono::Utc>>,
    pub updated_at: Option<chrono::DateTime<chrono::Utc>>,
    /// A cron trigger's next tick; null while it is disabled.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_run_at: Option<chrono::DateTime<chrono::Utc>>,
    /// A cron trigger's last runs (up to 10), newest tick first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub runs: Option<Vec<TriggerRun>>,
    /// Position of the event a command appended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
    /// True when a toggle found it in that state already: nothing was written.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub unchanged: Option<bool>,
}

/// One page of the triggers of a namespace, by name.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct TriggerList {
    pub items: Vec<TriggerView>,
    /// The `cursor` of the next page; null on the last.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// One page of the jobs of a namespace, by name; each without its output
/// (`stdout`, `stderr`: get the job for them).
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobList {
    pub items: Vec<JobView>,
    /// The `cursor` of the next page; null on the last.
    #[serde(default)]
    pub next_cursor: Option<String>,
}

/// What a job printed on one stream, cut to a limit.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobOutput {
    pub text: String,
    /// Everything it printed, in bytes.
    pub bytes: u64,
    /// True when `text` holds only part of it.
    pub truncated: bool,
}

/// A one-shot job as the API shows it.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct JobView {
    pub namespace: String,
    pub name: String,
    /// `Pending`, `Running`, `Succeeded` or `Failed`.
    pub status: String,
    pub function: String,
    /// The function's version it runs (the current one when it was created).
    pub version: u32,
    pub input: serde_json::Value,
    pub timeout_sec: u32,
    pub exit_code: Option<i32>,
    pub error: Option<String>,
    pub timed_out: bool,
    /// Null until it ended.
    pub stdout: Option<JobOutput>,
    pub stderr: Option<JobOutput>,
    pub requested_at: Option<chrono::DateTime<chrono::Utc>>,
    pub started_at: Option<chrono::DateTime<chrono::Utc>>,
    pub finished_at: Option<chrono::DateTime<chrono::Utc>>,
    pub duration_ms: Option<u64>,
    /// Position of the event a create appended.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
    /// Where to poll it.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status_url: Option<String>,
}

/// The answer to a delete of a trigger or a job.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Removed {
    pub namespace: String,
    pub name: String,
    /// `true`.
    pub deleted: bool,
    pub position: i64,
}

/// `/healthz`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// `/readyz`.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct Readiness {
    /// `ready`, `not ready`, or `stopping` (the process drains: it
    /// finishes the calls it has and soon takes no new connection).
    pub status: String,
    /// `ok`, or what the database said.
    pub database: String,
    /// `current`, `behind` or `unknown`.
    pub migrations: String,
    /// Why it is not ready, when it is stopping.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reason: Option<String>,
}
