//! The OpenAPI 3.1 document of the HTTP surface, served at
//! `GET /openapi.json`.
//!
//! The document is generated from the router itself: every route is added
//! with `utoipa_axum::routes!`, which takes its path and methods from the
//! handler's `#[utoipa::path]`, so a route cannot be served without being
//! documented, nor documented without being served. What every route of a
//! kind shares is added here, in `finish`: the bearer scheme on `/v1`, the
//! problem documents (see `error`) each route can answer, and the `Link`
//! header of the paged lists. The parameters many routes take are
//! described once, by `IntoParams` types a route names in its `params`:
//! the path's (`path::FunctionPath` and its kin), a list's `limit` and
//! `cursor` (`paging::FunctionPages` …) and `IdempotencyKey`.
//!
//! Every operation has an `operationId` of its own, which client
//! generators name their calls after: the handler's `operation_id`, and
//! for the `/fn` routes (one handler for every method) that with the
//! method (`invokeFunctionPost`).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::Extension;
use axum::extract::State;
use axum::http::header;
use axum::response::IntoResponse;
use utoipa::openapi::header::{Header, HeaderBuilder};
use utoipa::openapi::path::{Operation, ParameterBuilder, ParameterIn, PathItem};
use utoipa::openapi::security::{HttpAuthScheme, HttpBuilder, SecurityRequirement, SecurityScheme};
use utoipa::openapi::{
    ContentBuilder, InfoBuilder, ObjectBuilder, OpenApi, Ref, RefOr, Required, ResponseBuilder,
    Type,
};
use utoipa::{IntoParams, ToSchema};

use crate::AppState;
use crate::plumbing::error::PROBLEM_JSON;

pub use sless_api_types::views::*;

/// The name of the bearer security scheme.
pub const BEARER: &str = "bearer";

/// The `Idempotency-Key` header of a command, as its route documents it
/// (`params(…, IdempotencyKey)`); `command::RequestContext` reads it.
#[derive(IntoParams)]
#[into_params(parameter_in = Header)]
pub struct IdempotencyKey {
    /// Makes a retry of the same request safe: answered as the first time
    #[param(rename = "Idempotency-Key", min_length = 1, max_length = 255)]
    pub key: Option<String>,
}

/// `GET /openapi.json`: this document.
///
/// Where the instance knows its functions' origin, the `/fn` operations'
/// server variable `fn_url` defaults to it.
#[utoipa::path(
    get,
    path = "/openapi.json",
    operation_id = "getOpenApiDocument",
    tag = "meta",
    responses((status = 200, description = "The OpenAPI 3.1 document of this API", content_type = "application/json")),
)]
pub async fn document(
    State(state): State<AppState>,
    Extension(doc): Extension<Arc<str>>,
) -> impl IntoResponse {
    let doc = match state.fn_url.as_deref() {
        Some(origin) => with_functions_origin(&doc, origin),
        None => doc.to_string(),
    };
    ([(header::CONTENT_TYPE, "application/json")], doc)
}

/// `doc` with the `/fn` paths' `fn_url` defaulting to `origin`. The
/// document is kept serialized, in its order: the variable is swapped as
/// it serializes.
fn with_functions_origin(doc: &str, origin: &str) -> String {
    let variable = |default: &str| {
        serde_json::to_string(&fn_url_variable(default)).expect("a server variable serializes")
    };
    doc.replace(&variable(FN_URL_DEFAULT), &variable(origin))
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
    // Query parameters: the paged lists' `limit` and `cursor`, the audit
    // log's filters, the build log's `follow` and `Last-Event-ID`, a
    // function's log's filters.
    if paged_list(method, path)
        || path.ends_with("/invocations")
        || path.ends_with("/events")
        || path.ends_with("/events/stream")
        || path.ends_with("/build-log")
        || path.ends_with("/logs")
    {
        add(422, &["invalid-field"]);
    }
    if path == "/v1/events" {
        add(403, &["forbidden"]);
    }
    p
}

/// True for the lists answered a page at a time with a `Link` to the next
/// (`paging::ListPage`).
fn paged_list(method: &str, path: &str) -> bool {
    method == "get"
        && ["/functions", "/triggers", "/jobs", "/versions"]
            .iter()
            .any(|p| path.ends_with(p))
}

/// The `Link` header of a paged list's page.
fn next_page_link(op: &mut Operation) {
    if let Some(RefOr::T(page)) = op.responses.responses.get_mut("200") {
        let link = string_header("`<URL>; rel=\"next\"`: the next page, when there is one");
        page.headers.insert("Link".into(), link);
    }
}

/// A header of an answer, a string.
fn string_header(description: &str) -> Header {
    HeaderBuilder::new()
        .schema(ObjectBuilder::new().schema_type(Type::String).build())
        .description(Some(description))
        .build()
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
    if status == 401 {
        r = r.header(
            "WWW-Authenticate",
            string_header("`Bearer`, with the reason a token was refused"),
        );
    }
    if status == 412 {
        r = r.header(
            "ETag",
            string_header("The stream version the thing is at now"),
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
/// on `/v1`, every route's problem answers, the paged lists' `Link`
/// header, an operation of its own for each method of a `/fn` route, and
/// OpenAPI's spelling of the proxy's wildcard segment.
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
            if path.starts_with("/fn/") {
                invoke_operation(method, op);
            }
            conditional(method, &path, op);
            if paged_list(method, &path) {
                next_page_link(op);
            }
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

/// One method of a `/fn` route, which one handler serves for every method
/// of `proxy::METHODS`: its operation id is the route's with the method
/// (`invokeFunction` and `post`: `invokeFunctionPost`), so that each is an
/// operation of its own, and its body is optional (the proxy passes on
/// whatever comes, nothing included).
fn invoke_operation(method: &str, op: &mut Operation) {
    let route = op
        .operation_id
        .take()
        .unwrap_or_else(|| "invoke".to_owned());
    // The methods are `operations`' names: lowercase ASCII.
    let (first, rest) = method.split_at(1);
    op.operation_id = Some(format!("{route}{}{rest}", first.to_ascii_uppercase()));
    if let Some(body) = op.request_body.as_mut() {
        body.required = Some(Required::False);
    }
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
        string_header(
            "The stream version, quoted (`\"7\"`): send it as `If-Match` to change \
             exactly this version",
        )
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
            &[crate::plumbing::command::precondition::PRECONDITION_FAILED],
        )),
    );
}

/// Where `/fn` is served: the functions' own origin, never the API's.
fn functions_origin() -> utoipa::openapi::server::Server {
    use utoipa::openapi::server::ServerBuilder;
    ServerBuilder::new()
        .url("{fn_url}")
        .description(Some(
            "The functions' origin (`fn_url` in `sless dev`'s dev.json; SLESS_FN_URL)",
        ))
        .parameter("fn_url", fn_url_variable(FN_URL_DEFAULT))
        .build()
}

/// `fn_url` where the instance does not know its functions' origin.
const FN_URL_DEFAULT: &str = "http://127.0.0.1:8081";

/// The `fn_url` server variable, defaulting to `default`.
fn fn_url_variable(default: &str) -> utoipa::openapi::server::ServerVariable {
    utoipa::openapi::server::ServerVariableBuilder::new()
        .default_value(default)
        .description(Some("The functions' origin, without a trailing slash"))
        .build()
}

/// A zip archive, as the body of an upload.
#[derive(ToSchema)]
#[schema(value_type = String, format = Binary)]
pub struct ZipArchive(pub Vec<u8>);
