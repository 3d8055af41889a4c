//! `GET /openapi.json`: an OpenAPI 3.1 document that lists every route of
//! SEED.md's API, and nothing the router does not serve.

use std::collections::BTreeMap;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};

use super::support::*;

const SUB: &str = "openapi@example.com";

/// Methods an OpenAPI path item can hold, as its members name them.
const METHODS: [&str; 7] = ["get", "put", "post", "delete", "options", "head", "patch"];

/// SEED.md's REST API, plus the proxy, health and the document itself.
const ROUTES: &[(&str, &str)] = &[
    ("post", "/v1/namespaces/{ns}/ensure"),
    ("get", "/v1/namespaces/{ns}/functions"),
    ("post", "/v1/namespaces/{ns}/functions"),
    ("get", "/v1/namespaces/{ns}/functions/{name}"),
    ("put", "/v1/namespaces/{ns}/functions/{name}"),
    ("delete", "/v1/namespaces/{ns}/functions/{name}"),
    ("post", "/v1/namespaces/{ns}/functions/{name}/upload"),
    ("get", "/v1/namespaces/{ns}/functions/{name}/source"),
    ("get", "/v1/namespaces/{ns}/functions/{name}/invocations"),
    ("get", "/v1/namespaces/{ns}/triggers"),
    ("post", "/v1/namespaces/{ns}/triggers"),
    ("get", "/v1/namespaces/{ns}/triggers/{name}"),
    ("patch", "/v1/namespaces/{ns}/triggers/{name}"),
    ("delete", "/v1/namespaces/{ns}/triggers/{name}"),
    ("get", "/v1/namespaces/{ns}/jobs"),
    ("post", "/v1/namespaces/{ns}/jobs"),
    ("get", "/v1/namespaces/{ns}/jobs/{name}"),
    ("delete", "/v1/namespaces/{ns}/jobs/{name}"),
    ("get", "/v1/namespaces/{ns}/events"),
    ("get", "/v1/namespaces/{ns}/events/stream"),
    ("get", "/v1/events"),
    ("get", "/healthz"),
    ("get", "/readyz"),
    ("get", "/openapi.json"),
];

async fn document(env: &Env) -> Value {
    let a = env.send(get("/openapi.json", None)).await;
    assert_eq!(a.status, StatusCode::OK, "{}", a.body);
    assert_eq!(a.content_type(), "application/json");
    a.body
}

/// The operations of the document: (method, path, operation).
fn operations(doc: &Value) -> Vec<(String, String, Value)> {
    let paths = doc["paths"].as_object().expect("paths");
    let mut out = Vec::new();
    for (path, item) in paths {
        for m in METHODS {
            if let Some(op) = item.get(m) {
                out.push((m.to_owned(), path.clone(), op.clone()));
            }
        }
    }
    out
}

/// `schema`, or the component it refers to.
fn resolve<'a>(doc: &'a Value, schema: &'a Value) -> &'a Value {
    match schema["$ref"].as_str() {
        Some(r) => {
            let name = r
                .strip_prefix("#/components/schemas/")
                .expect("a schema ref");
            &doc["components"]["schemas"][name]
        }
        None => schema,
    }
}

/// `path` with sample values for its parameters.
fn sample(path: &str, ns: &str) -> String {
    path.replace("{ns}", ns)
        .replace("{name}", "hello")
        .replace("{rest}", "some/where")
}

#[tokio::test]
async fn the_document_is_openapi_3_1_and_lists_every_route() {
    let env = Env::new().await;
    let doc = document(&env).await;
    let version = doc["openapi"].as_str().unwrap_or_default();
    assert!(version.starts_with("3.1"), "openapi {version:?}");

    let ops = operations(&doc);
    let has = |m: &str, p: &str| ops.iter().any(|(om, op, _)| om == m && op == p);
    for (m, p) in ROUTES {
        assert!(has(m, p), "{m} {p} is not in the document");
    }
    // `ANY /fn/{namespace}/{name}[/...]`: every method, with and without a rest.
    for p in [
        "/fn/{ns}/{name}",
        "/fn/{ns}/{name}/",
        "/fn/{ns}/{name}/{rest}",
    ] {
        for m in METHODS {
            assert!(has(m, p), "{m} {p} is not in the document");
        }
        assert!(
            doc["paths"][p].get("trace").is_none(),
            "TRACE {p} is refused, not documented"
        );
    }

    let schemes = &doc["components"]["securitySchemes"]["bearer"];
    assert_eq!(schemes["type"], "http");
    assert_eq!(schemes["scheme"], "bearer");
    let problem = &doc["components"]["schemas"]["Problem"];
    for member in ["type", "title", "status", "detail", "field"] {
        assert!(
            problem["properties"].get(member).is_some(),
            "Problem has {member}: {problem}"
        );
    }

    for (m, p, op) in &ops {
        let secured = op["security"][0].get("bearer").is_some();
        assert_eq!(secured, p.starts_with("/v1/"), "{m} {p}: security");
        let responses = op["responses"].as_object().expect("responses");
        assert!(responses.contains_key("500"), "{m} {p}: 500");
        if p.starts_with("/v1/") {
            for status in ["401", "404", "503"] {
                assert!(responses.contains_key(status), "{m} {p}: {status}");
            }
            assert!(
                responses["401"]["headers"]
                    .get("WWW-Authenticate")
                    .is_some(),
                "{m} {p}: 401 carries WWW-Authenticate"
            );
        }
        if op.get("requestBody").is_some() && p.starts_with("/v1/") {
            for status in ["400", "413", "422"] {
                assert!(responses.contains_key(status), "{m} {p}: {status}");
            }
        }
        for (status, r) in responses {
            let s: u16 = status.parse().unwrap_or(0);
            if s >= 400 && !(p == "/readyz" && s == 503) {
                assert_eq!(
                    r["content"][PROBLEM_JSON]["schema"]["$ref"], "#/components/schemas/Problem",
                    "{m} {p} {status}: a problem document"
                );
            }
        }
    }
    let upload = ops
        .iter()
        .find(|(m, p, _)| m == "post" && p.ends_with("/upload"))
        .expect("upload");
    for content_type in [ZIP, "application/octet-stream"] {
        assert!(
            upload.2["requestBody"]["content"]
                .get(content_type)
                .is_some(),
            "the upload takes a zip as {content_type}: {}",
            upload.2["requestBody"]
        );
    }
    // Every paged list: `limit` and `cursor`, a 422 for bad ones, and a
    // page with `next_cursor`; those keyed by name or version also say
    // where the next page is in `Link`.
    for (path, link) in [
        ("/v1/namespaces/{ns}/functions/{name}/invocations", false),
        ("/v1/namespaces/{ns}/functions", true),
        ("/v1/namespaces/{ns}/triggers", true),
        ("/v1/namespaces/{ns}/jobs", true),
        ("/v1/namespaces/{ns}/functions/{name}/versions", true),
    ] {
        let (_, _, op) = ops
            .iter()
            .find(|(m, p, _)| m == "get" && p == path)
            .unwrap_or_else(|| panic!("GET {path}"));
        let params: Vec<(&str, &str)> = op["parameters"]
            .as_array()
            .expect("parameters")
            .iter()
            .map(|p| (p["name"].as_str().unwrap(), p["in"].as_str().unwrap()))
            .collect();
        let mut expected = vec![("ns", "path"), ("limit", "query"), ("cursor", "query")];
        if path.contains("{name}") {
            expected.push(("name", "path"));
        }
        for e in expected {
            assert!(params.contains(&e), "{path}: {e:?} in {params:?}");
        }
        let limit = op["parameters"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "limit")
            .unwrap();
        assert_eq!(
            (&limit["schema"]["minimum"], &limit["schema"]["maximum"]),
            (&json!(1), &json!(1000)),
            "{path}: {limit}"
        );
        assert!(op["responses"].get("422").is_some(), "{path}: 422");
        let ok = &op["responses"]["200"];
        assert_eq!(ok["headers"].get("Link").is_some(), link, "{path}: {ok}");
        let schema = resolve(&doc, &ok["content"]["application/json"]["schema"]);
        assert!(
            schema["properties"].get("next_cursor").is_some(),
            "{path}: next_cursor in {schema}"
        );
    }
}

/// Client generators name a call after its operation's `operationId`, and
/// OpenAPI requires them unique: two operations that share one become one
/// call of the generated client, doing one of the two.
#[tokio::test]
async fn every_operation_has_an_operation_id_of_its_own() {
    let env = Env::new().await;
    let doc = document(&env).await;
    let ops = operations(&doc);
    assert!(ops.len() > 30, "{} operations", ops.len());
    let mut by_id: BTreeMap<&str, Vec<String>> = BTreeMap::new();
    let mut without = Vec::new();
    for (m, p, op) in &ops {
        match op["operationId"].as_str() {
            Some(id) if !id.is_empty() => by_id.entry(id).or_default().push(format!("{m} {p}")),
            _ => without.push(format!("{m} {p}")),
        }
    }
    assert!(
        without.is_empty(),
        "operations without an operationId: {without:?}"
    );
    let shared: Vec<_> = by_id.iter().filter(|(_, ops)| ops.len() > 1).collect();
    assert!(
        shared.is_empty(),
        "operationIds shared by several operations: {shared:?}"
    );
    // camelCase: what generators turn into each language's own spelling.
    for id in by_id.keys() {
        assert!(
            id.starts_with(|c: char| c.is_ascii_lowercase())
                && id.chars().all(|c| c.is_ascii_alphanumeric()),
            "operationId {id:?} is not camelCase"
        );
    }
    for (m, p, id) in [
        ("get", "/v1/namespaces/{ns}/functions", "listFunctions"),
        (
            "post",
            "/v1/namespaces/{ns}/functions/{name}/upload",
            "uploadFunctionSource",
        ),
        ("get", "/fn/{ns}/{name}", "invokeFunctionGet"),
        ("post", "/fn/{ns}/{name}/{rest}", "invokeFunctionPathPost"),
    ] {
        assert_eq!(doc["paths"][p][m]["operationId"], id, "{m} {p}");
    }
}

/// The `/fn` operations, one per method of one handler: each named for
/// its method, tagged `invoke` (a generator can leave them out), on the
/// functions' origin, with a body of bytes that may be left out.
#[tokio::test]
async fn the_invoke_operations_are_tagged_and_take_any_body_as_bytes() {
    let env = Env::new().await;
    let doc = document(&env).await;
    let invoke: Vec<_> = operations(&doc)
        .into_iter()
        .filter(|(_, p, _)| p.starts_with("/fn/"))
        .collect();
    assert_eq!(invoke.len(), 3 * METHODS.len());
    for (m, p, op) in &invoke {
        assert_eq!(op["tags"], json!(["invoke"]), "{m} {p}");
        let id = op["operationId"].as_str().unwrap_or_default();
        assert!(
            id.to_ascii_lowercase().ends_with(m.as_str()),
            "{m} {p}: the operationId {id:?} names the method"
        );
        let body = &op["requestBody"];
        assert_eq!(body["required"], false, "{m} {p}: {body}");
        let schema = resolve(&doc, &body["content"]["application/octet-stream"]["schema"]);
        assert_eq!(
            (&schema["type"], &schema["format"]),
            (&json!("string"), &json!("binary")),
            "{m} {p}: bytes, {body}"
        );
        assert!(
            body["description"]
                .as_str()
                .is_some_and(|d| d.contains("any content type")),
            "{m} {p}: says any content type is passed through: {body}"
        );
        assert_eq!(
            doc["paths"][p]["servers"][0]["url"], "{fn_url}",
            "{p} is on the functions' origin"
        );
    }
}

/// A version's zip is documented as `application/zip` and, for clients
/// that take bytes of any kind, `application/octet-stream`: each is what
/// the route answers when asked for it with `Accept`, and a zip without.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_archive_is_served_as_each_media_type_the_document_lists() {
    let env = Env::new().await;
    let doc = document(&env).await;
    let path = "/v1/namespaces/{ns}/functions/{name}/versions/{version}/archive";
    let listed: Vec<&str> = doc["paths"][path]["get"]["responses"]["200"]["content"]
        .as_object()
        .expect("the archive's content")
        .keys()
        .map(String::as_str)
        .collect();
    assert_eq!(listed.len(), 2, "{listed:?}");
    assert!(listed.contains(&ZIP), "{listed:?}");

    assert_eq!(env.create(SUB, "hello").await.status, StatusCode::CREATED);
    let zip = handler_zip("v1");
    assert_eq!(
        env.upload(SUB, "hello", &zip).await.status,
        StatusCode::ACCEPTED
    );
    let uri = path
        .replace("{ns}", &ns(SUB))
        .replace("{name}", "hello")
        .replace("{version}", "1");
    for media_type in &listed {
        assert_eq!(
            archive_as(&env, &uri, Some(media_type), &zip).await,
            *media_type,
            "Accept {media_type}"
        );
    }
    assert_eq!(
        archive_as(&env, &uri, None, &zip).await,
        ZIP,
        "without Accept"
    );
    assert_eq!(archive_as(&env, &uri, Some("*/*"), &zip).await, ZIP);
    assert_eq!(
        archive_as(
            &env,
            &uri,
            Some("application/zip, application/octet-stream;q=0.5"),
            &zip
        )
        .await,
        ZIP
    );
}

/// GETs the archive at `uri` with `accept`, checks it is `zip`, and
/// returns its content type.
async fn archive_as(env: &Env, uri: &str, accept: Option<&str>, zip: &[u8]) -> String {
    use tower::ServiceExt;
    let mut req = request(Method::GET, uri, Some(&token(SUB)));
    if let Some(accept) = accept {
        req = req.header(header::ACCEPT, accept);
    }
    let res = env
        .app
        .clone()
        .oneshot(req.body(Body::empty()).unwrap())
        .await
        .unwrap();
    assert_eq!(res.status(), StatusCode::OK, "Accept {accept:?}");
    let ct = res.headers()[header::CONTENT_TYPE]
        .to_str()
        .unwrap()
        .to_owned();
    let body = http_body_util::BodyExt::collect(res.into_body())
        .await
        .unwrap()
        .to_bytes();
    assert_eq!(&body[..], zip, "Accept {accept:?}: the zip as uploaded");
    ct
}

/// The router's own answer to a path or method it does not serve.
fn unrouted(a: &Answer) -> bool {
    let no_such_route = a.status == StatusCode::NOT_FOUND
        && a.body["detail"]
            .as_str()
            .is_some_and(|d| d.starts_with("no route for"));
    no_such_route || a.status == StatusCode::METHOD_NOT_ALLOWED
}

fn request_for(method: &str, uri: &str, token: &str) -> Request<Body> {
    let method = Method::from_bytes(method.to_uppercase().as_bytes()).unwrap();
    request(method, uri, Some(token))
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from("{}"))
        .unwrap()
}

/// `send`, except that an event stream (which does not end) is answered
/// with its status and headers only.
async fn send_unless_endless(env: &Env, req: Request<Body>) -> Answer {
    use tower::ServiceExt;
    let res = env.app.clone().oneshot(req).await.unwrap();
    if res
        .headers()
        .get(header::CONTENT_TYPE)
        .is_some_and(|v| v == "text/event-stream")
    {
        return Answer {
            status: res.status(),
            headers: res.headers().clone(),
            body: Value::Null,
        };
    }
    let (parts, body) = res.into_parts();
    let bytes = http_body_util::BodyExt::collect(body)
        .await
        .unwrap()
        .to_bytes();
    Answer {
        status: parts.status,
        headers: parts.headers,
        body: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    }
}

#[tokio::test]
async fn every_documented_operation_is_routed_and_no_other_method_is() {
    let env = Env::new().await;
    let doc = document(&env).await;
    let ns = ns(SUB);
    let tok = token(SUB);
    let ops = operations(&doc);
    assert!(ops.len() > 30, "{} operations", ops.len());
    for (m, p, _) in &ops {
        let uri = sample(p, &ns);
        let a = send_unless_endless(&env, request_for(m, &uri, &tok)).await;
        assert!(
            !unrouted(&a),
            "{m} {p} is documented but not routed: {} {}",
            a.status,
            a.body
        );
    }
    // A method the document does not list for a path is not served either
    // (HEAD goes with GET).
    let paths = doc["paths"].as_object().unwrap();
    for (p, item) in paths {
        for m in METHODS {
            if item.get(m).is_some() || (m == "head" && item.get("get").is_some()) {
                continue;
            }
            let a = env.send(request_for(m, &sample(p, &ns), &tok)).await;
            let what = format!("{m} {p}, which the document does not list");
            if m == "head" {
                // No body to carry the problem.
                assert_eq!(a.status, StatusCode::METHOD_NOT_ALLOWED, "{what}");
            } else {
                a.assert_problem(&what, StatusCode::METHOD_NOT_ALLOWED, "method-not-allowed");
            }
        }
    }
}

/// Routes are added to the routers only with `routes!`, which documents
/// them: the routers' source adds none any other way. The exceptions are
/// the console's pages (`console::routes()`: HTML for browsers under
/// `/console` and the seed's plain text under `/funcs`, none of them an
/// operation of the API), which `console_routes_are_pages_outside_the_api`
/// checks, and `/metrics` (`metrics::routes()`: Prometheus's text, for
/// admin tokens, docs/observability.md).
#[test]
fn the_router_adds_routes_only_documented() {
    let src = include_str!("../../src/lib.rs");
    for router in ["pub fn router(", "pub fn fn_router(", "fn function_routes("] {
        let start = src.find(router).expect("the router function");
        let end = start + src[start..].find("\n}\n").expect("its end");
        let body = src[start..end]
            .replace(".merge(console::routes())", "")
            .replace(".merge(metrics::routes())", "");
        let body = body.as_str();
        for undocumented in [".route(", ".route_service(", ".nest_service(", ".merge("] {
            assert!(
                !body.contains(undocumented),
                "{router}: adds a route with `{undocumented}`, which the OpenAPI document does not see: \
                 use `.routes(routes!(handler))` with a `#[utoipa::path]` on the handler"
            );
        }
    }
}

/// The console's routes are pages outside the API: none under `/v1`, and
/// none in the OpenAPI document.
#[test]
fn console_routes_are_pages_outside_the_api() {
    let src = include_str!("../../src/console.rs");
    let routes: Vec<&str> = src
        .split(".route(")
        .skip(1)
        .filter_map(|r| r.split('"').nth(1))
        .collect();
    assert!(routes.len() > 10, "{routes:?}");
    for r in &routes {
        assert!(
            r.starts_with("/console") || r.starts_with("/funcs/"),
            "{r} is not a console page"
        );
    }
}
