//! What every API test needs: a database, an S3 server and the router over
//! them, requests driven with `oneshot` (no socket), tokens, zips and the
//! counts of what the system has written.

use std::io::{Cursor, Write};
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode, header};
use http_body_util::BodyExt;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use sha2::{Digest, Sha256};
use sless_api::{AppState, Auth};
use sless_domain::{FunctionKey, FunctionName, Namespace};
use sless_testkit::{TestDb, TestS3};
use sqlx::Row;
use tower::ServiceExt;
use zip::write::SimpleFileOptions;

pub const SECRET: &[u8] = b"sless-api-tests-shared-secret-0123456789";
pub const PROBLEM_JSON: &str = "application/problem+json";
pub const ZIP: &str = "application/zip";

/// One test's world: a fresh database, its own S3 server, and the app.
pub struct Env {
    pub db: TestDb,
    pub s3: TestS3,
    pub app: Router,
}

impl Env {
    pub async fn new() -> Env {
        let db = TestDb::new().await;
        let s3 = TestS3::new().await;
        let app = app_on(&db, &s3, Auth::hs256(SECRET, None, None));
        Env { db, s3, app }
    }

    /// A new `AppState` and router on the same database and bucket: what a
    /// restarted API process would be.
    pub fn restarted(&self) -> Router {
        app_on(&self.db, &self.s3, Auth::hs256(SECRET, None, None))
    }

    pub async fn send(&self, req: Request<Body>) -> Answer {
        send(&self.app, req).await
    }

    /// `POST /v1/namespaces/{ns(sub)}/functions` with a minimal valid spec.
    pub async fn create(&self, sub: &str, name: &str) -> Answer {
        let body = spec(name);
        self.send(post_json(
            &functions_uri(&ns(sub)),
            Some(&token(sub)),
            &body.to_string(),
        ))
        .await
    }

    pub async fn upload(&self, sub: &str, name: &str, zip: &[u8]) -> Answer {
        self.send(post_zip(
            &upload_uri(&ns(sub), name),
            Some(&token(sub)),
            zip.to_vec(),
            ZIP,
        ))
        .await
    }

    /// Applies every pending event to the read models.
    pub async fn catch_up(&self) {
        sless_projector::catch_up(&self.db.pool)
            .await
            .expect("projector catch-up");
    }

    /// How much the system has written: events, work items, S3 keys.
    pub async fn counts(&self) -> Counts {
        let events: i64 = sqlx::query_scalar("select count(*) from events")
            .fetch_one(&self.db.pool)
            .await
            .unwrap();
        let work_items: i64 = sqlx::query_scalar("select count(*) from work_items")
            .fetch_one(&self.db.pool)
            .await
            .unwrap();
        let idempotency_keys: i64 = sqlx::query_scalar("select count(*) from idempotency_keys")
            .fetch_one(&self.db.pool)
            .await
            .unwrap();
        let blobs_in_flight: i64 = sqlx::query_scalar("select count(*) from blobs_in_flight")
            .fetch_one(&self.db.pool)
            .await
            .unwrap();
        let blobs = self
            .s3
            .blobs()
            .list("")
            .await
            .expect("listing S3 keys")
            .len();
        Counts {
            events,
            work_items,
            idempotency_keys,
            blobs,
            blobs_in_flight,
        }
    }

    /// Waits until a request waits for a stream's lock (another
    /// transaction holds it), with a deadline.
    pub async fn until_a_request_waits_for_a_stream_lock(&self) {
        sless_testkit::eventually(
            "a request to wait for the stream's lock",
            std::time::Duration::from_secs(10),
            || async {
                let waiting: i64 = sqlx::query_scalar(
                    "select count(*) from pg_locks where locktype = 'advisory' and not granted",
                )
                .fetch_one(&self.db.pool)
                .await
                .unwrap();
                (waiting > 0).then_some(())
            },
        )
        .await;
    }

    /// The keys recorded in flight (stored ahead of their event, which has
    /// not committed), sorted.
    pub async fn blobs_in_flight(&self) -> Vec<String> {
        sqlx::query_scalar("select key from blobs_in_flight order by key")
            .fetch_all(&self.db.pool)
            .await
            .unwrap()
    }

    /// The events of one function's stream, in version order.
    pub async fn stream(&self, sub: &str, name: &str) -> Vec<Event> {
        let stream = stream_of(sub, name);
        let rows = sqlx::query(
            "select position, version, type, namespace, data, metadata from events where stream = $1 order by version",
        )
        .bind(&stream)
        .fetch_all(&self.db.pool)
        .await
        .unwrap();
        rows.into_iter()
            .map(|r| Event {
                position: r.get("position"),
                version: r.get::<i32, _>("version") as i64,
                event_type: r.get("type"),
                namespace: r.get("namespace"),
                data: r.get("data"),
                metadata: r.get("metadata"),
            })
            .collect()
    }

    /// The `data` of a stream's events of one type.
    pub async fn events_of_type(&self, sub: &str, name: &str, event_type: &str) -> Vec<Value> {
        self.stream(sub, name)
            .await
            .into_iter()
            .filter(|e| e.event_type == event_type)
            .map(|e| e.data)
            .collect()
    }

    /// Work items as (kind, key, state).
    pub async fn work_items(&self) -> Vec<(String, String, String)> {
        sqlx::query("select kind, key, state from work_items order by id")
            .fetch_all(&self.db.pool)
            .await
            .unwrap()
            .into_iter()
            .map(|r| (r.get("kind"), r.get("key"), r.get("state")))
            .collect()
    }
}

pub fn app_on(db: &TestDb, s3: &TestS3, auth: Auth) -> Router {
    both_origins(AppState::new(db.pool.clone(), s3.blobs(), auth))
}

/// Both origins over one state, for requests driven with `oneshot`:
/// `/fn/...` goes to the functions' router, everything else to the API's.
/// (The binary serves them on two listeners; `origins.rs` checks that the
/// API's router serves no function, and tests/e2e/edge.rs the listeners.)
pub fn both_origins(state: AppState) -> Router {
    let functions = sless_api::fn_router(state.clone());
    let api = sless_api::router(state);
    Router::new().fallback_service(tower::service_fn(move |req: Request<Body>| {
        let origin = if req.uri().path().starts_with("/fn/") {
            functions.clone()
        } else {
            api.clone()
        };
        origin.oneshot(req)
    }))
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Counts {
    pub events: i64,
    pub work_items: i64,
    pub idempotency_keys: i64,
    pub blobs: usize,
    /// Records of blobs stored ahead of their event (`blobs_in_flight`).
    pub blobs_in_flight: i64,
}

#[derive(Debug, Clone)]
pub struct Event {
    pub position: i64,
    pub version: i64,
    pub event_type: String,
    pub namespace: String,
    pub data: Value,
    pub metadata: Value,
}

/// An HTTP answer, its body parsed as JSON (a string when it is not JSON).
#[derive(Debug, Clone)]
pub struct Answer {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub body: Value,
}

impl Answer {
    pub fn content_type(&self) -> &str {
        self.headers
            .get(header::CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    /// Asserts a problem document: the status, its content type, and a
    /// `type` ending in `/{kind}`. `what` names the case in failures.
    #[track_caller]
    pub fn assert_problem(&self, what: &str, status: StatusCode, kind: &str) {
        assert_eq!(self.status, status, "{what}: status; body {}", self.body);
        assert_eq!(
            self.content_type(),
            PROBLEM_JSON,
            "{what}: content type; body {}",
            self.body
        );
        let ty = self.body["type"].as_str().unwrap_or_default();
        assert!(
            ty.ends_with(&format!("/{kind}")),
            "{what}: problem type {ty:?} should end in /{kind}; body {}",
            self.body
        );
        assert_eq!(
            self.body["status"],
            status.as_u16(),
            "{what}: the problem's status member"
        );
        assert!(
            self.body["detail"].as_str().is_some_and(|d| !d.is_empty()),
            "{what}: a human detail; body {}",
            self.body
        );
    }

    /// The problem's offending field, if it names one.
    pub fn field(&self) -> Option<&str> {
        self.body["field"].as_str()
    }
}

pub async fn send(app: &Router, req: Request<Body>) -> Answer {
    let res = app
        .clone()
        .oneshot(req)
        .await
        .expect("the router is infallible");
    let status = res.status();
    let headers = res.headers().clone();
    let bytes = res
        .into_body()
        .collect()
        .await
        .expect("reading the body")
        .to_bytes();
    let body = if bytes.is_empty() {
        Value::Null
    } else {
        serde_json::from_slice(&bytes)
            .unwrap_or_else(|_| Value::String(String::from_utf8_lossy(&bytes).into_owned()))
    };
    Answer {
        status,
        headers,
        body,
    }
}

pub fn ns(sub: &str) -> String {
    Namespace::for_subject(sub).to_string()
}

pub fn stream_of(sub: &str, name: &str) -> String {
    FunctionKey::new(
        Namespace::for_subject(sub),
        FunctionName::parse(name).unwrap(),
    )
    .stream()
}

pub fn functions_uri(ns: &str) -> String {
    format!("/v1/namespaces/{ns}/functions")
}

pub fn function_uri(ns: &str, name: &str) -> String {
    format!("/v1/namespaces/{ns}/functions/{name}")
}

pub fn upload_uri(ns: &str, name: &str) -> String {
    format!("/v1/namespaces/{ns}/functions/{name}/upload")
}

/// A valid token for `sub`, for an hour.
pub fn token(sub: &str) -> String {
    sless_api::issue_hs256(SECRET, sub, Duration::from_secs(3600))
}

pub fn now() -> i64 {
    chrono::Utc::now().timestamp()
}

/// Signs any claims with HS256 and `secret`.
pub fn sign(claims: &Value, secret: &[u8]) -> String {
    sign_with(Algorithm::HS256, claims, secret)
}

pub fn sign_with(alg: Algorithm, claims: &Value, secret: &[u8]) -> String {
    jsonwebtoken::encode(&Header::new(alg), claims, &EncodingKey::from_secret(secret)).unwrap()
}

/// Unpadded base64url (RFC 4648 §5), as JWTs use it.
pub fn b64url(bytes: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::new();
    for chunk in bytes.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (b[0] as u32) << 16 | (b[1] as u32) << 8 | b[2] as u32;
        for i in 0..=chunk.len() {
            out.push(ALPHABET[(n >> (18 - 6 * i)) as usize & 63] as char);
        }
    }
    out
}

pub fn request(method: Method, uri: &str, token: Option<&str>) -> axum::http::request::Builder {
    let b = Request::builder().method(method).uri(uri);
    match token {
        Some(t) => b.header(header::AUTHORIZATION, format!("Bearer {t}")),
        None => b,
    }
}

pub fn get(uri: &str, token: Option<&str>) -> Request<Body> {
    request(Method::GET, uri, token)
        .body(Body::empty())
        .unwrap()
}

pub fn post_json(uri: &str, token: Option<&str>, body: &str) -> Request<Body> {
    request(Method::POST, uri, token)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(body.to_owned()))
        .unwrap()
}

pub fn post_zip(
    uri: &str,
    token: Option<&str>,
    body: Vec<u8>,
    content_type: &str,
) -> Request<Body> {
    let mut b = request(Method::POST, uri, token);
    if !content_type.is_empty() {
        b = b.header(header::CONTENT_TYPE, content_type);
    }
    b.body(Body::from(body)).unwrap()
}

/// The smallest valid create body.
pub fn spec(name: &str) -> Value {
    json!({ "name": name, "runtime": "python3.11", "entrypoint": "handler.handle" })
}

/// A zip of regular files, deflated.
pub fn zip_of(files: &[(&str, &[u8])]) -> Vec<u8> {
    zip_with(|w| {
        for (path, data) in files {
            w.start_file(*path, SimpleFileOptions::default()).unwrap();
            w.write_all(data).unwrap();
        }
    })
}

/// A zip built by `build`, for entries `zip_of` cannot make.
pub fn zip_with(build: impl FnOnce(&mut zip::ZipWriter<Cursor<Vec<u8>>>)) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    build(&mut w);
    w.finish().unwrap().into_inner()
}

/// A small valid function source.
pub fn handler_zip(greeting: &str) -> Vec<u8> {
    let code = format!("def handle(req):\n    return {greeting:?}\n");
    zip_of(&[("handler.py", code.as_bytes()), ("lib/util.py", b"X = 1\n")])
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// Sends `head` (a request's head, ending in an empty line) on a fresh
/// connection to `addr` and reads the whole answer, within 10 s.
pub async fn raw_exchange(addr: &str, head: &str) -> String {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(head.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(
        std::time::Duration::from_secs(10),
        tcp.read_to_end(&mut raw),
    )
    .await
    .expect("an answer within 10 s")
    .unwrap();
    String::from_utf8_lossy(&raw).into_owned()
}
