//! Every route of the REST API (SEED.md's list) with a token of its own
//! namespace (2xx), a token of
//! another namespace (404, nothing written) and no token (401, nothing
//! written).

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::json;

use super::support::*;

const ALICE: &str = "alice-routes@example.com";
const BOB: &str = "bob-routes@example.com";

struct Route {
    method: Method,
    /// Below `/v1/namespaces/{ns}`.
    path: &'static str,
    body: Option<(&'static str, Vec<u8>)>,
    /// What its own namespace's token gets.
    own: &'static [StatusCode],
    /// Also acceptable from the other two (a route still answering 501
    /// before it looks at the caller).
    or: Option<StatusCode>,
}

const OK: &[StatusCode] = &[StatusCode::OK];

fn json_body(v: serde_json::Value) -> Option<(&'static str, Vec<u8>)> {
    Some(("application/json", v.to_string().into_bytes()))
}

/// SEED.md's REST API, in its order.
fn routes() -> Vec<Route> {
    let route = |method: Method, path, body, own| Route {
        method,
        path,
        body,
        own,
        or: None,
    };
    vec![
        route(Method::POST, "/ensure", None, OK),
        route(Method::GET, "/functions", None, OK),
        route(
            Method::POST,
            "/functions",
            json_body(spec("fresh")),
            &[StatusCode::CREATED],
        ),
        route(Method::GET, "/functions/hello", None, OK),
        route(
            Method::PUT,
            "/functions/hello",
            json_body(json!({ "memory_mb": 256 })),
            &[StatusCode::ACCEPTED],
        ),
        route(
            Method::DELETE,
            "/functions/doomed",
            None,
            &[StatusCode::ACCEPTED],
        ),
        route(
            Method::POST,
            "/functions/hello/upload",
            Some((ZIP, handler_zip("v2"))),
            &[StatusCode::ACCEPTED],
        ),
        route(Method::GET, "/functions/hello/source", None, OK),
        Route {
            // Answers 501 until invocation records are kept.
            or: Some(StatusCode::NOT_IMPLEMENTED),
            ..route(
                Method::GET,
                "/functions/hello/invocations",
                None,
                &[StatusCode::OK, StatusCode::NOT_IMPLEMENTED],
            )
        },
        route(Method::GET, "/triggers", None, OK),
        route(
            Method::POST,
            "/triggers",
            json_body(json!({
                "name": "nightly", "function": "hello", "type": "cron",
                "schedule": "0 3 * * *", "timezone": "Europe/Berlin"
            })),
            &[StatusCode::CREATED],
        ),
        route(Method::GET, "/triggers/nightly", None, OK),
        route(
            Method::PATCH,
            "/triggers/nightly",
            json_body(json!({ "enabled": false })),
            OK,
        ),
        route(
            Method::DELETE,
            "/triggers/nightly",
            None,
            &[StatusCode::ACCEPTED],
        ),
        route(
            Method::POST,
            "/jobs",
            json_body(json!({ "name": "once", "function": "hello", "input": { "mode": "full" } })),
            &[StatusCode::ACCEPTED],
        ),
        route(Method::GET, "/jobs/once", None, OK),
        route(Method::DELETE, "/jobs/once", None, &[StatusCode::ACCEPTED]),
    ]
}

fn request_for(r: &Route, ns: &str, token: Option<&str>) -> Request<Body> {
    let mut b = request(
        r.method.clone(),
        &format!("/v1/namespaces/{ns}{}", r.path),
        token,
    );
    let body = match &r.body {
        Some((ct, bytes)) => {
            b = b.header(header::CONTENT_TYPE, *ct);
            Body::from(bytes.clone())
        }
        None => Body::empty(),
    };
    b.body(body).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_route_answers_its_own_namespace_hides_others_and_needs_a_token() {
    let env = Env::new().await;
    let alice_ns = ns(ALICE);
    for name in ["hello", "doomed"] {
        assert_eq!(env.create(ALICE, name).await.status, StatusCode::CREATED);
    }
    let up = env.upload(ALICE, "hello", &handler_zip("v1")).await;
    assert_eq!(up.status, StatusCode::ACCEPTED, "{}", up.body);
    env.catch_up().await;
    let routes = routes();
    assert_eq!(routes.len(), 17, "SEED.md lists 17 routes under /v1");

    let before = env.counts().await;
    for r in &routes {
        let what = format!("{} {} without a token", r.method, r.path);
        let answer = env.send(request_for(r, &alice_ns, None)).await;
        match r.or {
            Some(s) if answer.status == s => {}
            _ => answer.assert_problem(&what, StatusCode::UNAUTHORIZED, "unauthorized"),
        }

        let what = format!("{} {} with another namespace's token", r.method, r.path);
        let answer = env.send(request_for(r, &alice_ns, Some(&token(BOB)))).await;
        match r.or {
            Some(s) if answer.status == s => {}
            _ => answer.assert_problem(&what, StatusCode::NOT_FOUND, "not-found"),
        }
    }
    assert_eq!(env.counts().await, before, "refused requests wrote nothing");

    let alice = token(ALICE);
    for r in &routes {
        let what = format!("{} {} with its own token", r.method, r.path);
        let before = env.counts().await;
        let answer = env.send(request_for(r, &alice_ns, Some(&alice))).await;
        assert!(
            r.own.contains(&answer.status),
            "{what}: {} not in {:?}: {}",
            answer.status,
            r.own,
            answer.body
        );
        if answer.status == StatusCode::NOT_IMPLEMENTED {
            answer.assert_problem(&what, StatusCode::NOT_IMPLEMENTED, "not-implemented");
            assert_eq!(env.counts().await, before, "{what}: a 501 writes nothing");
        } else {
            assert!(
                answer.content_type().starts_with("application/json"),
                "{what}: {}",
                answer.content_type()
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_routes_and_methods_answer_problem_documents() {
    let env = Env::new().await;
    let tok = token(ALICE);
    let ns = ns(ALICE);
    let missing = env.send(get("/v1/nothing/here", Some(&tok))).await;
    missing.assert_problem("unknown route", StatusCode::NOT_FOUND, "not-found");
    let wrong = env
        .send(
            request(Method::PATCH, &functions_uri(&ns), Some(&tok))
                .body(Body::empty())
                .unwrap(),
        )
        .await;
    wrong.assert_problem(
        "PATCH on the functions list",
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    );
    let jobs = env
        .send(
            request(
                Method::PATCH,
                &format!("/v1/namespaces/{ns}/jobs"),
                Some(&tok),
            )
            .body(Body::empty())
            .unwrap(),
        )
        .await;
    jobs.assert_problem(
        "PATCH on the jobs list",
        StatusCode::METHOD_NOT_ALLOWED,
        "method-not-allowed",
    );
}
