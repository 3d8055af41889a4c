//! The client against the real API (a router over a real PostgreSQL and S3,
//! on a loopback port), and against a bare socket where a server must
//! misbehave on purpose (drop a connection, answer 503, never answer).

use std::collections::BTreeSet;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sless_api::{AppState, Auth};
use sless_client::{
    Client, Config, CreateFunction, CreateJob, CreateTrigger, Error, EventFilter, Invoke, LogQuery,
    PageQuery, UpdateFunction,
};
use sless_testkit::{TestDb, TestS3};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const SECRET: &[u8] = b"sless-client-tests-shared-secret-0123456789";

/// An API over a fresh database and bucket, served on loopback.
struct Api {
    _db: TestDb,
    _s3: TestS3,
    url: String,
}

impl Api {
    async fn start() -> Api {
        let db = TestDb::new().await;
        let s3 = TestS3::new().await;
        let mut state = AppState::new(db.pool.clone(), s3.blobs(), Auth::hs256(SECRET, None, None));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let functions = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        state.fn_url = Some(format!("http://{}", functions.local_addr().unwrap()).into());
        let fn_app = sless_api::fn_router(state.clone());
        tokio::spawn(async move { axum::serve(listener, sless_api::router(state)).await });
        tokio::spawn(async move { axum::serve(functions, fn_app).await });
        Api {
            _db: db,
            _s3: s3,
            url,
        }
    }

    fn client(&self, sub: &str) -> Client {
        let token = sless_api::issue_hs256(SECRET, sub, Duration::from_secs(600));
        Client::new(&self.url, token).unwrap()
    }
}

fn hello_spec(name: &str) -> CreateFunction {
    CreateFunction {
        name: name.into(),
        runtime: "python3.11".into(),
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        min_instances: None,
        max_instances: None,
        concurrency: None,
    }
}

fn zip_of(files: &[(&str, &str)]) -> Vec<u8> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, content) in files {
        w.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(content.as_bytes()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// Calls the client method of one operation of the OpenAPI document:
/// `None` when the client has none.
async fn call(c: &Client, operation: &str) -> Option<Result<(), Error>> {
    let f = "covered";
    let r = match operation {
        "ensureNamespace" => c.ensure_namespace().await.map(drop),
        "listFunctions" => c.list_functions().await.map(drop),
        "createFunction" => c.create_function(&hello_spec("other")).await.map(drop),
        "getFunction" => c.get_function(f).await.map(drop),
        "updateFunction" => c
            .update_function(f, &UpdateFunction::default())
            .await
            .map(drop),
        "deleteFunction" => c.delete_function("other").await.map(drop),
        "uploadFunctionSource" => c
            .upload(f, zip_of(&[("handler.py", "def handle(e): pass\n")]))
            .await
            .map(drop),
        "getFunctionSource" => c.get_source(f).await.map(drop),
        "listFunctionVersions" => c.list_versions(f).await.map(drop),
        "getFunctionVersionSource" => c.get_version_source(f, 1).await.map(drop),
        "getFunctionVersionArchive" => c.get_version_archive(f, 1).await.map(drop),
        "diffFunctionVersions" => c.diff_versions(f, 1, 1).await.map(drop),
        "rollbackFunction" => c.rollback(f, 1).await.map(drop),
        "getBuildLog" => c.get_build_log(f, 1).await.map(drop),
        "listInvocations" => c.list_invocations(f, &PageQuery::default()).await.map(drop),
        "getFunctionLogs" => c.function_logs(f, &LogQuery::default()).await.map(drop),
        "getInvocation" => c
            .get_invocation(f, "00000000-0000-7000-8000-000000000000")
            .await
            .map(drop),
        "listTriggers" => c.list_triggers().await.map(drop),
        "listJobs" => c.list_jobs().await.map(drop),
        "createTrigger" => c
            .create_trigger(&CreateTrigger {
                name: "t".into(),
                function: f.into(),
                kind: "http".into(),
                schedule: None,
                timezone: None,
                enabled: None,
            })
            .await
            .map(drop),
        "getTrigger" => c.get_trigger("t").await.map(drop),
        "patchTrigger" => c.set_trigger_enabled("t", false).await.map(drop),
        "deleteTrigger" => c.delete_trigger("t").await.map(drop),
        "createJob" => c
            .create_job(&CreateJob {
                name: "j".into(),
                function: f.into(),
                input: serde_json::json!({}),
                timeout_sec: None,
            })
            .await
            .map(drop),
        "getJob" => c.get_job("j").await.map(drop),
        "deleteJob" => c.delete_job("j").await.map(drop),
        "listNamespaceEvents" => c.list_events(&EventFilter::default()).await.map(drop),
        "listEvents" => c.list_all_events(&EventFilter::default()).await.map(drop),
        "tailEvents" => c.tail_events(&EventFilter::default()).await.map(drop),
        "startReplay" => c.start_replay(false).await.map(drop),
        "getLastReplay" => c.last_replay().await.map(drop),
        "reconcileAllFunctions" => c.reconcile_all().await.map(drop),
        "healthz" => c.healthz().await.map(drop),
        "readyz" => c.readyz().await.map(drop),
        "getOpenApiDocument" => c.openapi().await.map(drop),
        // The functions' origin: one handler for every method and path.
        op if op.starts_with("invokeFunction") => c.invoke(f, &Invoke::default()).await.map(drop),
        _ => return None,
    };
    Some(r)
}

#[tokio::test]
async fn every_operation_of_the_openapi_document_has_a_client_method_that_reaches_its_route() {
    let api = Api::start().await;
    let c = api.client("alice");
    c.create_function(&hello_spec("covered")).await.unwrap();
    let doc = c.openapi().await.unwrap();
    let mut missing = BTreeSet::new();
    let mut unrouted = Vec::new();
    let mut seen = 0;
    for (path, item) in doc["paths"].as_object().unwrap() {
        for (method, op) in item.as_object().unwrap() {
            let Some(id) = op.get("operationId").and_then(|v| v.as_str()) else {
                continue;
            };
            seen += 1;
            match call(&c, id).await {
                None => {
                    missing.insert(format!("{id} ({method} {path})"));
                }
                // The route answered: whatever it said, it was this route,
                // not the fallback's 404 or a 405.
                Some(Err(Error::Api(p)))
                    if p.status == 405 || p.detail.starts_with("no route for") =>
                {
                    unrouted.push(format!("{id}: {p}"));
                }
                Some(_) => {}
            }
        }
    }
    assert!(seen > 30, "the document has {seen} operations");
    assert!(
        missing.is_empty(),
        "operations with no client method: {missing:#?}"
    );
    assert!(
        unrouted.is_empty(),
        "client methods that miss their route: {unrouted:#?}"
    );
}

#[tokio::test]
async fn problems_are_one_typed_error_with_status_kind_and_field() {
    let api = Api::start().await;
    let c = api.client("alice");
    let e = c.get_function("missing").await.unwrap_err();
    let p = e.problem().expect("an API problem");
    assert_eq!((p.status, p.kind()), (404, "not-found"), "{e}");
    assert!(e.is_not_found());

    let mut bad = hello_spec("hello");
    bad.memory_mb = 1;
    let e = c.create_function(&bad).await.unwrap_err();
    let p = e.problem().unwrap();
    assert_eq!(p.status, 422, "{e}");
    assert_eq!(p.field.as_deref(), Some("memory_mb"), "{e}");
    assert!(e.to_string().contains("memory_mb"), "{e}");

    // Another tenant's function is not found, as every route keeps it.
    c.create_function(&hello_spec("hello")).await.unwrap();
    let e = api.client("bob").get_function("hello").await.unwrap_err();
    assert_eq!(e.status(), Some(404));
    let bob_in_alice = Client::with_config(Config {
        namespace: Some(c.namespace().to_owned()),
        ..Config::new(
            &api.url,
            Some(sless_api::issue_hs256(
                SECRET,
                "bob",
                Duration::from_secs(60),
            )),
        )
    })
    .unwrap();
    let e = bob_in_alice.get_function("hello").await.unwrap_err();
    assert_eq!(e.status(), Some(404), "{e}");

    // A wrong token: 401, unauthorized.
    let stranger = Client::new(
        &api.url,
        sless_api::issue_hs256(
            b"another-secret-another-secret-0123",
            "alice",
            Duration::from_secs(60),
        ),
    )
    .unwrap();
    let e = stranger.list_functions().await.unwrap_err();
    assert_eq!(e.status(), Some(401), "{e}");
}

#[tokio::test]
async fn if_match_and_etags_make_a_concurrent_change_a_412_not_an_overwrite() {
    let api = Api::start().await;
    let c = api.client("alice");
    let created = c.create_function(&hello_spec("hello")).await.unwrap();
    let version = created
        .stream_version
        .expect("the create carries its version");
    let got = c.get_function("hello").await.unwrap();
    assert_eq!(got.stream_version, Some(version));

    let change = UpdateFunction {
        memory_mb: Some(256),
        ..UpdateFunction::default()
    };
    let changed = c
        .if_match(version)
        .update_function("hello", &change)
        .await
        .unwrap();
    assert!(changed.stream_version > Some(version));
    // The same precondition again is stale now.
    let change = UpdateFunction {
        memory_mb: Some(512),
        ..UpdateFunction::default()
    };
    let e = c
        .if_match(version)
        .update_function("hello", &change)
        .await
        .unwrap_err();
    let p = e.problem().unwrap();
    assert_eq!((p.status, p.kind()), (412, "precondition-failed"), "{e}");
    assert_eq!(
        p.etag,
        Some(format!("\"{}\"", changed.stream_version.unwrap()))
    );
}

#[tokio::test]
async fn a_callers_idempotency_key_answers_a_repeated_command_as_the_first() {
    let api = Api::start().await;
    let c = api.client("alice");
    let keyed = c.idempotency_key("create-hello-once");
    let first = keyed.create_function(&hello_spec("hello")).await.unwrap();
    let again = keyed.create_function(&hello_spec("hello")).await.unwrap();
    assert_eq!(first.position, again.position);
    // Without the key the same create is a conflict.
    let e = c.create_function(&hello_spec("hello")).await.unwrap_err();
    assert_eq!(e.status(), Some(409), "{e}");
}

#[tokio::test]
async fn the_tail_follows_the_audit_log_and_an_upload_shows_in_it() {
    let api = Api::start().await;
    let c = api.client("alice");
    let mut tail = c.tail_events(&EventFilter::default()).await.unwrap();
    c.create_function(&hello_spec("hello")).await.unwrap();
    let up = c
        .upload(
            "hello",
            zip_of(&[("handler.py", "def handle(e):\n    return 1\n")]),
        )
        .await
        .unwrap();
    assert_eq!(up.version, 1);
    let mut types = Vec::new();
    while types.len() < 2 {
        let e = tokio::time::timeout(Duration::from_secs(20), tail.next())
            .await
            .expect("the tail delivers within 20 s")
            .expect("the tail goes on")
            .unwrap();
        types.push(e.event_type);
    }
    assert_eq!(types, ["FunctionCreated", "FunctionUploaded"]);
    assert!(tail.last_id().is_some());
    // The same zip again: unchanged, no new version.
    let again = c
        .upload(
            "hello",
            zip_of(&[("handler.py", "def handle(e):\n    return 1\n")]),
        )
        .await
        .unwrap();
    assert_eq!((again.version, again.unchanged), (1, Some(true)));
}

/// What a bare server saw of each request: its request line and headers.
type Seen = Arc<Mutex<Vec<String>>>;

/// A server on a bare socket that answers the n-th connection with
/// `script[n]`: `None` drops it without an answer, `Some(text)` writes
/// the raw answer. Connections past the script are held open, unanswered.
async fn scripted(script: Vec<Option<String>>) -> (String, Seen) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", listener.local_addr().unwrap());
    let seen: Seen = Arc::default();
    let seen2 = seen.clone();
    tokio::spawn(async move {
        let mut script = script.into_iter();
        loop {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut head = Vec::new();
            let mut buf = [0u8; 4096];
            while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                match socket.read(&mut buf).await {
                    Ok(0) | Err(_) => break,
                    Ok(n) => head.extend_from_slice(&buf[..n]),
                }
            }
            seen2
                .lock()
                .unwrap()
                .push(String::from_utf8_lossy(&head).to_lowercase());
            match script.next() {
                Some(None) => drop(socket),
                Some(Some(answer)) => {
                    socket.write_all(answer.as_bytes()).await.ok();
                    socket.shutdown().await.ok();
                }
                None => {
                    tokio::spawn(async move {
                        let _held = socket;
                        std::future::pending::<()>().await
                    });
                }
            }
        }
    });
    (url, seen)
}

/// A raw HTTP/1.1 answer that closes its connection.
fn answer(status: &str, content_type: &str, extra: &str, body: &str) -> String {
    format!(
        "HTTP/1.1 {status}\r\ncontent-type: {content_type}\r\n{extra}connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
}

fn created() -> Option<String> {
    Some(answer("201 Created", "application/json", "", "{}"))
}

fn unavailable() -> Option<String> {
    Some(answer(
        "503 Service Unavailable",
        "application/problem+json",
        "retry-after: 0\r\n",
        r#"{"type":"https://sless.dev/problems/database-unavailable","title":"Service Unavailable","status":503,"detail":"try again"}"#,
    ))
}

fn healthy() -> Option<String> {
    Some(answer(
        "200 OK",
        "application/json",
        "",
        r#"{"status":"ok"}"#,
    ))
}

fn fast(url: &str) -> Config {
    Config {
        timeout: Duration::from_millis(500),
        backoff: Duration::from_millis(10),
        namespace: Some("sless-0123456789abcdef".into()),
        ..Config::new(url, Some("t".into()))
    }
}

fn header<'a>(request: &'a str, name: &str) -> Option<&'a str> {
    request
        .lines()
        .find_map(|l| l.strip_prefix(&format!("{name}: ")))
}

#[tokio::test]
async fn a_command_whose_connection_broke_is_sent_again_with_the_same_idempotency_key() {
    let (url, seen) = scripted(vec![None, created()]).await;
    let c = Client::with_config(fast(&url)).unwrap();
    let _ = c.create_function(&hello_spec("hello")).await;
    let seen = seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2, "{seen:#?}");
    let keys: Vec<_> = seen.iter().map(|r| header(r, "idempotency-key")).collect();
    assert!(keys[0].is_some_and(|k| !k.is_empty()), "{seen:#?}");
    assert_eq!(keys[0], keys[1]);
    // Each command of its own gets a key of its own.
    let (url, seen) = scripted(vec![created(), created()]).await;
    let c = Client::with_config(fast(&url)).unwrap();
    let _ = c.create_function(&hello_spec("a")).await;
    let _ = c.create_function(&hello_spec("b")).await;
    let seen = seen.lock().unwrap().clone();
    assert_ne!(
        header(&seen[0], "idempotency-key"),
        header(&seen[1], "idempotency-key")
    );
}

#[tokio::test]
async fn a_get_is_tried_again_on_a_5xx_and_a_command_is_not() {
    let (url, seen) = scripted(vec![unavailable(), healthy()]).await;
    let c = Client::with_config(fast(&url)).unwrap();
    assert_eq!(c.healthz().await.unwrap().status, "ok");
    assert_eq!(seen.lock().unwrap().len(), 2);

    let (url, seen) = scripted(vec![unavailable(), created()]).await;
    let c = Client::with_config(fast(&url)).unwrap();
    let e = c.create_function(&hello_spec("hello")).await.unwrap_err();
    let p = e.problem().unwrap();
    assert_eq!(
        (p.status, p.kind(), p.retry_after),
        (503, "database-unavailable", Some(0))
    );
    assert_eq!(
        seen.lock().unwrap().len(),
        1,
        "a command is not sent again on a 5xx"
    );
}

#[tokio::test]
async fn a_server_that_never_answers_is_a_timeout_and_a_closed_port_names_the_endpoint() {
    let (url, _) = scripted(vec![]).await;
    let c = Client::with_config(Config {
        retries: 0,
        ..fast(&url)
    })
    .unwrap();
    let started = std::time::Instant::now();
    let e = c.list_functions().await.unwrap_err();
    assert!(matches!(e, Error::Timeout { .. }), "{e}");
    assert!(started.elapsed() < Duration::from_secs(5));

    let closed = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let c = Client::with_config(fast(&url)).unwrap();
    let e = c.list_functions().await.unwrap_err();
    assert!(matches!(e, Error::Connect { .. }), "{e}");
    assert!(e.to_string().contains(&url), "{e}");
}

#[test]
fn the_namespace_is_the_tokens_as_the_api_computes_it() {
    let token = sless_api::issue_hs256(SECRET, "alice", Duration::from_secs(60));
    assert_eq!(
        sless_client::namespace_of_token(&token).unwrap(),
        sless_domain::Namespace::for_subject("alice").to_string()
    );
    assert!(sless_client::namespace_of_token("not-a-token").is_err());
    assert!(Client::new("ftp://example", token).is_err());
}
