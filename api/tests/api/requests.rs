//! Request builders for the methods `support` has none for, and the
//! problem check of a request that must write nothing.

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};

use super::support::*;

pub fn put_json(uri: &str, token: Option<&str>, body: &str) -> Request<Body> {
    request(Method::PUT, uri, token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

pub fn patch_json(uri: &str, token: Option<&str>, body: &str) -> Request<Body> {
    request(Method::PATCH, uri, token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

pub fn delete(uri: &str, token: Option<&str>) -> Request<Body> {
    request(Method::DELETE, uri, token)
        .body(Body::empty())
        .unwrap()
}

pub fn source_uri(ns: &str, name: &str) -> String {
    format!("/v1/namespaces/{ns}/functions/{name}/source")
}

/// Sends `req`, checks it gets the problem `kind` with `status` (and
/// `field`, when given), and that nothing was written.
pub async fn assert_refused(
    env: &Env,
    what: &str,
    req: Request<Body>,
    status: StatusCode,
    kind: &str,
    field: Option<&str>,
) -> Answer {
    let before = env.counts().await;
    let answer = env.send(req).await;
    answer.assert_problem(what, status, kind);
    if let Some(field) = field {
        assert_eq!(
            answer.field(),
            Some(field),
            "{what}: the offending field; {}",
            answer.body
        );
    }
    assert_eq!(env.counts().await, before, "{what}: nothing written");
    answer
}
