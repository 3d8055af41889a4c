//! `GET /openapi.json`: an OpenAPI 3.1 document that lists every route of
//! SEED.md's API, and nothing the router does not serve.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::Value;

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
    assert!(
        upload.2["requestBody"]["content"].get(ZIP).is_some(),
        "the upload takes a zip: {}",
        upload.2["requestBody"]
    );
    let invocations = ops
        .iter()
        .find(|(_, p, _)| p.ends_with("/invocations"))
        .expect("invocations");
    let params: Vec<(&str, &str)> = invocations.2["parameters"]
        .as_array()
        .expect("parameters")
        .iter()
        .map(|p| (p["name"].as_str().unwrap(), p["in"].as_str().unwrap()))
        .collect();
    for expected in [
        ("ns", "path"),
        ("name", "path"),
        ("limit", "query"),
        ("cursor", "query"),
    ] {
        assert!(params.contains(&expected), "{expected:?} in {params:?}");
    }
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
/// them: the routers' source adds none any other way.
#[test]
fn the_router_adds_routes_only_documented() {
    let src = include_str!("../../src/lib.rs");
    for router in ["pub fn router(", "pub fn fn_router(", "fn function_routes("] {
        let start = src.find(router).expect("the router function");
        let end = start + src[start..].find("\n}\n").expect("its end");
        let body = &src[start..end];
        for undocumented in [".route(", ".route_service(", ".nest_service(", ".merge("] {
            assert!(
                !body.contains(undocumented),
                "{router}: adds a route with `{undocumented}`, which the OpenAPI document does not see: \
                 use `.routes(routes!(handler))` with a `#[utoipa::path]` on the handler"
            );
        }
    }
}
