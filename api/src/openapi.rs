//! The OpenAPI 3.1 document of the HTTP surface, served at
//! `GET /openapi.json`.
//!
//! The document is generated from the router itself: every route is added
//! with `utoipa_axum::routes!`, which takes its path and methods from the
//! handler's `#[utoipa::path]`, so a route cannot be served without being
//! documented, nor documented without being served. What every route of a
//! kind shares is added here, in `finish`: the bearer scheme on `/v1`, and
//! the problem documents (see `error`) each route can answer.

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::http::header;
use axum::response::IntoResponse;
use serde::Serialize;
use utoipa::ToSchema;
use utoipa::openapi::header::HeaderBuilder;
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, InfoBuilder, ObjectBuilder, OpenApi, Ref, RefOr, Required, ResponseBuilder,
    Type,
};

use crate::error::PROBLEM_JSON;

/// The name of the bearer security scheme.
pub const BEARER: &str = "bearer";

/// An error answer (RFC 9457), `application/problem+json`.
#[derive(Serialize, ToSchema)]
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
    /// `uploads_per_minute`).
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
#[derive(Serialize, ToSchema)]
pub struct FunctionView {
    pub namespace: String,
    pub name: String,
    /// `python3.11`, `nodejs20` or `go1.23`.
    pub runtime: Option<String>,
    pub entrypoint: Option<String>,
    pub memory_mb: Option<u32>,
    pub timeout_sec: Option<u32>,
    pub env_vars: Option<BTreeMap<String, String>>,
    /// `Pending`, `Building`, `Ready`, `Failed` or `Deleted`.
    pub phase: String,
    /// The latest uploaded version, null before the first upload.
    pub version: Option<u32>,
    /// The version that runs, null while none does.
    pub deployed_version: Option<u32>,
    pub last_error: Option<String>,
    /// Where the function is invoked (`/fn/{ns}/{name}`).
    pub url: String,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub created_at: Option<String>,
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

/// The functions of a namespace.
#[derive(Serialize, ToSchema)]
pub struct FunctionList {
    pub items: Vec<FunctionView>,
}

/// The answer to an upload: the version it made (or, for the same zip
/// again, the version it already is).
#[derive(Serialize, ToSchema)]
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
#[derive(Serialize, ToSchema)]
pub struct Deleted {
    pub namespace: String,
    pub name: String,
    /// `Deleted`.
    pub phase: String,
    pub position: i64,
}

/// The answer to `ensure`.
#[derive(Serialize, ToSchema)]
pub struct Ensured {
    pub namespace: String,
    /// False when the namespace existed already.
    pub created: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub position: Option<i64>,
}

/// One file of a function's source.
#[derive(Serialize, ToSchema)]
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
#[derive(Serialize, ToSchema)]
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
#[derive(Serialize, ToSchema)]
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

/// A function's kept versions, newest first.
#[derive(Serialize, ToSchema)]
pub struct VersionList {
    pub namespace: String,
    pub name: String,
    pub live_version: Option<u32>,
    pub deployed_version: Option<u32>,
    /// How many versions are kept besides the live one.
    pub retention: usize,
    pub items: Vec<VersionView>,
}

/// How one file differs between two versions.
#[derive(Serialize, ToSchema)]
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
#[derive(Serialize, ToSchema)]
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

/// One invocation record.
#[derive(Serialize, ToSchema)]
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
}

/// One page of invocation records, newest first.
#[derive(Serialize, ToSchema)]
pub struct InvocationPage {
    pub items: Vec<InvocationView>,
    /// The `cursor` of the next page; null on the last.
    pub next_cursor: Option<String>,
}

/// One event of the audit log.
#[derive(Serialize, ToSchema)]
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
#[derive(Serialize, ToSchema)]
pub struct EventPage {
    pub items: Vec<EventEntry>,
    /// The `after` of the next page; null on the last.
    pub next: Option<String>,
}

/// One run of a cron trigger.
#[derive(Serialize, ToSchema)]
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
#[derive(Serialize, ToSchema)]
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

/// The triggers of a namespace, by name.
#[derive(Serialize, ToSchema)]
pub struct TriggerList {
    pub items: Vec<TriggerView>,
}

/// What a job printed on one stream, cut to a limit.
#[derive(Serialize, ToSchema)]
pub struct JobOutput {
    pub text: String,
    /// Everything it printed, in bytes.
    pub bytes: u64,
    /// True when `text` holds only part of it.
    pub truncated: bool,
}

/// A one-shot job as the API shows it.
#[derive(Serialize, ToSchema)]
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
#[derive(Serialize, ToSchema)]
pub struct Removed {
    pub namespace: String,
    pub name: String,
    /// `true`.
    pub deleted: bool,
    pub position: i64,
}

/// `/healthz`.
#[derive(Serialize, ToSchema)]
pub struct Health {
    /// `ok`.
    pub status: String,
}

/// `/readyz`.
#[derive(Serialize, ToSchema)]
pub struct Readiness {
    /// `ready` or `not ready`.
    pub status: String,
    /// `ok`, or what the database said.
    pub database: String,
    /// `current`, `behind` or `unknown`.
    pub migrations: String,
}

/// `GET /openapi.json`: this document.
#[utoipa::path(
    get,
    path = "/openapi.json",
    tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json")),
)]
pub async fn document(Extension(doc): Extension<Arc<str>>) -> impl IntoResponse {
    (
        [(header::CONTENT_TYPE, "application/json")],
        doc.to_string(),
    )
}

/// The problems a route can answer: the kinds, by status.
fn problems(method: &str, path: &str, has_body: bool) -> BTreeMap<u16, Vec<&'static str>> {
    let mut p: BTreeMap<u16, Vec<&'static str>> = BTreeMap::new();
    let mut add = |status: u16, kinds: &[&'static str]| {
        p.entry(status).or_default().extend_from_slice(kinds);
    };
    add(500, &["internal"]);
    // `serve::limit_headers` and `serve::one_host` answer before any route.
    add(431, &["headers-too-large"]);
    add(400, &["malformed-request"]);
    if path == "/healthz" || path == "/openapi.json" {
        return p;
    }
    add(503, &["database-unavailable"]);
    if path == "/readyz" {
        add(503, &["deadline-exceeded"]);
        return p;
    }
    if path.starts_with("/fn/") {
        add(400, &["invalid-path"]);
        add(404, &["not-found"]);
        add(413, &["payload-too-large"]);
        add(502, &["function-unreachable", "bad-upstream-response"]);
        add(503, &["function-not-ready", "trigger-disabled"]);
        add(504, &["function-timeout"]);
        return p;
    }
    // /v1: every route needs a token, and names a namespace (another
    // user's is not found) and mostly a function.
    add(401, &["unauthorized"]);
    add(404, &["not-found"]);
    add(503, &["deadline-exceeded"]);
    if path.starts_with("/v1/admin/") {
        add(403, &["forbidden"]);
        if path.ends_with("/replay") {
            add(501, &["not-implemented"]);
            if method == "post" {
                add(409, &["conflict"]);
            }
        }
        if has_body {
            add(400, &["malformed-request"]);
            add(408, &["body-timeout"]);
            add(413, &["payload-too-large"]);
            add(422, &["invalid-field"]);
        }
        return p;
    }
    let upload = path.ends_with("/upload");
    if upload {
        add(503, &["blob-store-unavailable", "uploads-busy"]);
        add(413, &["archive-too-large"]);
        add(415, &["unsupported-media-type"]);
        add(422, &["invalid-archive"]);
    }
    if path.ends_with("/source")
        || path.ends_with("/archive")
        || path.contains("/diff/")
        || method == "put"
    {
        add(503, &["blob-store-unavailable"]);
    }
    if has_body || upload {
        add(400, &["malformed-request"]);
        add(408, &["body-timeout"]);
        add(413, &["payload-too-large"]);
        add(422, &["invalid-field"]);
    }
    if method != "get" {
        add(409, &["version-conflict", "conflict"]);
        add(422, &["idempotency-key-reused"]);
        let create = method == "post"
            && (path.ends_with("/functions")
                || path.ends_with("/triggers")
                || path.ends_with("/jobs"));
        if create {
            add(409, &["already-exists"]);
        }
        // What adds to a namespace's usage (a runtime change makes a version).
        let function_put = method == "put" && path.ends_with("/functions/{name}");
        if create || upload || function_put {
            add(409, &["quota-exceeded"]);
        }
        if upload {
            add(429, &["quota-exceeded"]);
        }
    }
    if path.ends_with("/invocations")
        || path.ends_with("/events")
        || path.ends_with("/events/stream")
    {
        add(422, &["invalid-field"]);
    }
    if path == "/v1/events" {
        add(403, &["forbidden"]);
    }
    p
}

fn reason(status: u16) -> &'static str {
    axum::http::StatusCode::from_u16(status)
        .ok()
        .and_then(|s| s.canonical_reason())
        .unwrap_or("Error")
}

fn problem_response(status: u16, kinds: &[&str]) -> utoipa::openapi::Response {
    let mut kinds: Vec<&str> = kinds.to_vec();
    kinds.dedup();
    let mut r = ResponseBuilder::new()
        .description(format!(
            "{}: a problem document of kind {}",
            reason(status),
            kinds.join(", ")
        ))
        .content(
            PROBLEM_JSON,
            ContentBuilder::new()
                .schema(Some(Ref::from_schema_name("Problem")))
                .build(),
        );
    let string = || ObjectBuilder::new().schema_type(Type::String).build();
    if status == 401 {
        r = r.header(
            "WWW-Authenticate",
            HeaderBuilder::new()
                .schema(string())
                .description(Some("`Bearer`, with the reason a token was refused"))
                .build(),
        );
    }
    if status == 412 {
        r = r.header(
            "ETag",
            HeaderBuilder::new()
                .schema(string())
                .description(Some("The stream version the thing is at now"))
                .build(),
        );
    }
    if status == 503 || status == 429 {
        r = r.header(
            "Retry-After",
            HeaderBuilder::new()
                .schema(ObjectBuilder::new().schema_type(Type::Integer).build())
                .description(Some("Seconds after which a retry may succeed"))
                .build(),
        );
    }
    r.build()
}

fn operations(item: &mut PathItem) -> [(&'static str, Option<&mut Operation>); 8] {
    [
        ("get", item.get.as_mut()),
        ("put", item.put.as_mut()),
        ("post", item.post.as_mut()),
        ("delete", item.delete.as_mut()),
        ("options", item.options.as_mut()),
        ("head", item.head.as_mut()),
        ("patch", item.patch.as_mut()),
        ("trace", item.trace.as_mut()),
    ]
}

/// Completes the document the router collected: info, the bearer scheme
/// on `/v1`, every route's problem answers, and OpenAPI's spelling of the
/// proxy's wildcard segment.
pub fn finish(mut doc: OpenApi) -> OpenApi {
    doc.info = InfoBuilder::new()
        .title("sless")
        .version(env!("CARGO_PKG_VERSION"))
        .description(Some(
            "The sless control plane: functions, their source, invocations and the audit log \
             under `/v1` (bearer token), the public invoke proxy under `/fn` (on the functions' \
             own origin, `fn_url`; on the API's origin `/fn/...` answers 308 to it), and health.",
        ))
        .build();
    let components = doc.components.get_or_insert_with(Default::default);
    components.security_schemes.insert(
        BEARER.to_owned(),
        SecurityScheme::Http(
            HttpBuilder::new()
                .scheme(HttpAuthScheme::Bearer)
                .bearer_format("JWT")
                .build(),
        ),
    );
    components.schemas.insert(
        "Problem".to_owned(),
        <Problem as utoipa::PartialSchema>::schema(),
    );
    let paths = std::mem::take(&mut doc.paths.paths);
    for (path, mut item) in paths {
        let path = path.replace("{*rest}", "{rest}");
        if path.starts_with("/fn/") {
            item.servers = Some(vec![functions_origin()]);
        }
        for (method, op) in operations(&mut item) {
            let Some(op) = op else { continue };
            if path.starts_with("/v1/") {
                op.security = Some(vec![SecurityRequirement::new(BEARER, Vec::<String>::new())]);
            }
            if path.starts_with("/fn/")
                && let Some(body) = op.request_body.as_mut()
            {
                // The proxy passes on whatever comes, nothing included.
                body.required = Some(Required::False);
            }
            conditional(method, &path, op);
            let has_body = op.request_body.is_some();
            for (status, kinds) in problems(method, &path, has_body) {
                // A route's own description of a status (readyz's 503) stays.
                op.responses
                    .responses
                    .entry(status.to_string())
                    .or_insert_with(|| RefOr::T(problem_response(status, &kinds)));
            }
        }
        doc.paths.paths.insert(path, item);
    }
    doc
}

/// What a route does with entity tags: a function, trigger or job is
/// answered with its `ETag` (the stream version), its commands take
/// `If-Match`, its creates `If-None-Match: *`, and a precondition that does
/// not hold is 412 (`command::precondition`).
fn conditional(method: &str, path: &str, op: &mut Operation) {
    let one = ["/functions/{name}", "/triggers/{name}", "/jobs/{name}"]
        .iter()
        .any(|p| path.ends_with(p));
    let create = method == "post"
        && ["/functions", "/triggers", "/jobs"]
            .iter()
            .any(|p| path.ends_with(p));
    let command = match method {
        "put" | "patch" | "delete" => one,
        "post" => path.ends_with("/upload") || path.ends_with("/rollback"),
        _ => false,
    };
    let string = || ObjectBuilder::new().schema_type(Type::String).build();
    let etag = || {
        HeaderBuilder::new()
            .schema(string())
            .description(Some(
                "The stream version, quoted (`\"7\"`): send it as `If-Match` to change \
                 exactly this version",
            ))
            .build()
    };
    if (method == "get" && one) || command || create {
        for (status, r) in op.responses.responses.iter_mut() {
            if let (true, RefOr::T(r)) = (status.starts_with('2'), r) {
                r.headers.insert("ETag".into(), etag());
            }
        }
    }
    let header = |name: &str, description: &str| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Header)
            .required(Required::False)
            .schema(Some(string()))
            .description(Some(description))
            .build()
    };
    let param = if command {
        header(
            "If-Match",
            "Apply only while the stream is at this ETag (`\"7\"`), or exists (`*`); \
             otherwise 412 and nothing is written",
        )
    } else if create {
        header(
            "If-None-Match",
            "`*`: create only; 412 when the name exists already",
        )
    } else {
        return;
    };
    op.parameters.get_or_insert_with(Vec::new).push(param);
    op.responses.responses.insert(
        "412".into(),
        RefOr::T(problem_response(
            412,
            &[crate::command::precondition::PRECONDITION_FAILED],
        )),
    );
}

/// Where `/fn` is served: the functions' own origin, never the API's.
fn functions_origin() -> utoipa::openapi::server::Server {
    use utoipa::openapi::server::{ServerBuilder, ServerVariableBuilder};
    ServerBuilder::new()
        .url("{fn_url}")
        .description(Some(
            "The functions' origin (`fn_url` in `sless dev`'s dev.json; SLESS_FN_URL)",
        ))
        .parameter(
            "fn_url",
            ServerVariableBuilder::new()
                .default_value("http://127.0.0.1:8081")
                .description(Some("The functions' origin, without a trailing slash")),
        )
        .build()
}

/// A zip archive, as the body of an upload.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ZipArchive(pub Vec<u8>);

/// Any body, passed on as it is.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct AnyBody(pub Vec<u8>);
