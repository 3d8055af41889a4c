//! The request id every answer carries (`X-Request-Id`): the client's when
//! it sent a sane one, else a new time-ordered UUID, written back into the
//! request so that what runs later (event metadata, the function behind
//! the proxy, the invocation record) sees the same id.

use axum::extract::Request;
use axum::http::{HeaderMap, HeaderName, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;

/// The header that carries a request's id.
pub const X_REQUEST_ID: HeaderName = HeaderName::from_static("x-request-id");

/// The longest request id kept from a client.
pub const MAX_REQUEST_ID_LEN: usize = 128;

/// The request's id: the client's `X-Request-Id` when it sent exactly one
/// that is sane (1–128 visible ASCII characters), else a new UUIDv7. It is
/// written back into `headers`, so what runs later (event metadata, the
/// function behind the proxy) sees the same id.
pub fn request_id(headers: &mut HeaderMap) -> HeaderValue {
    let mut given = headers.get_all(&X_REQUEST_ID).iter();
    if let (Some(v), None) = (given.next(), given.next())
        && (1..=MAX_REQUEST_ID_LEN).contains(&v.len())
        && v.as_bytes().iter().all(|b| b.is_ascii_graphic())
    {
        return v.clone();
    }
    let id = HeaderValue::try_from(new_request_id()).expect("a uuid is a header value");
    headers.insert(X_REQUEST_ID, id.clone());
    id
}

/// A new request id: a UUIDv7 (time-ordered) whose random bits come from
/// the thread's generator in user space, not a `getrandom` call per request.
pub fn new_request_id() -> String {
    let ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default()
        .as_millis() as u64;
    uuid::Builder::from_unix_timestamp_millis(ms, &rand::random())
        .into_uuid()
        .to_string()
}

/// Middleware: gives every request an id (`request_id`) and every answer
/// the `X-Request-Id` header with it.
pub async fn with_request_id(mut req: Request, next: Next) -> Response {
    use tracing::Instrument;
    let id = request_id(req.headers_mut());
    // What is logged while the request runs says which request, and whose.
    let namespace = namespace_of(req.uri().path());
    let span = tracing::info_span!(
        "request",
        request_id = id.to_str().unwrap_or_default(),
        namespace,
        otel.name = tracing::field::Empty,
        otel.kind = "server",
        http.route = tracing::field::Empty,
        http.response.status_code = tracing::field::Empty,
        faas.name = tracing::field::Empty,
        faas.version = tracing::field::Empty,
        faas.coldstart = tracing::field::Empty,
        trace_id = tracing::field::Empty,
        span_id = tracing::field::Empty,
    );
    // With traces on, the request continues its caller's trace.
    let traceparent = req
        .headers()
        .get("traceparent")
        .and_then(|v| v.to_str().ok());
    sless_telemetry::trace::continue_from(&span, traceparent);
    let mut res = next.run(req).instrument(span.clone()).await;
    if sless_telemetry::trace::enabled() {
        span.record("http.response.status_code", res.status().as_u16());
    }
    res.headers_mut().insert(X_REQUEST_ID, id);
    res
}

/// The namespace a path names: `/v1/namespaces/{ns}/...`, `/fn/{ns}/...`.
fn namespace_of(path: &str) -> &str {
    let rest = path
        .strip_prefix("/v1/namespaces/")
        .or_else(|| path.strip_prefix("/fn/"))
        .unwrap_or_default();
    rest.split('/').next().unwrap_or_default()
}

#[cfg(test)]
mod tests {
    #[test]
    fn request_ids_are_time_ordered_v7_uuids_and_differ() {
        let ids: Vec<uuid::Uuid> = (0..1000)
            .map(|_| super::new_request_id().parse().expect("a uuid"))
            .collect();
        assert!(ids.iter().all(|id| id.get_version_num() == 7));
        let distinct: std::collections::HashSet<_> = ids.iter().collect();
        assert_eq!(distinct.len(), ids.len());
        let (first, last) = (ids[0].get_timestamp(), ids[999].get_timestamp());
        let ms = |t: Option<uuid::Timestamp>| t.expect("a v7 timestamp").to_unix();
        assert!(ms(first) <= ms(last));
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        assert!(now.abs_diff(ms(last).0) <= 5, "the id's time is now");
    }
}
