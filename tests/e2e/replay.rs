//! Replay and reconcile as an operator uses them: every API answer is the
//! same after the read models are lost and replayed; `sless replay` and its
//! exit codes; `--data-dir` on a running and a stopped `sless dev`; the
//! admin routes.

use std::path::Path;
use std::process::Output;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode, header};
use serde_json::{Value, json};
use sless_api::{AppState, Auth};
use sless_domain::{FunctionEvent, Namespace};
use sless_projector::replay::{self, Mode};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_testkit::{TestDb, TestS3};
use tower::ServiceExt;

use crate::{Client, Proc, processes_mentioning, sless, zip_files};

const SECRET: &[u8] = b"sless-replay-tests-shared-secret-0123456789";
const USERS: [&str; 3] = ["ana@example.com", "ben@example.com", "cy@example.com"];

async fn send(
    app: &axum::Router,
    method: Method,
    uri: &str,
    token: &str,
    body: Body,
) -> (StatusCode, Value) {
    let mut req = Request::builder()
        .method(method)
        .uri(uri)
        .header(header::AUTHORIZATION, format!("Bearer {token}"));
    if uri.ends_with("/upload") {
        req = req.header(header::CONTENT_TYPE, "application/zip");
    } else {
        req = req.header(header::CONTENT_TYPE, "application/json");
    }
    let res = app.clone().oneshot(req.body(body).unwrap()).await.unwrap();
    let status = res.status();
    let bytes = axum::body::to_bytes(res.into_body(), 1 << 20)
        .await
        .unwrap();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

fn token(auth: &Auth, sub: &str, admin: bool) -> String {
    auth.issue(sub, Duration::from_secs(3600), admin).unwrap()
}

/// A worker's event, appended as a worker would.
async fn worker_event(db: &TestDb, ns: &str, name: &str, event: FunctionEvent) {
    let stream = format!("function/{ns}/{name}");
    let at = eventlog::read_stream(&db.pool, &stream)
        .await
        .unwrap()
        .len() as u64;
    let mut tx = db.pool.begin().await.unwrap();
    let new = NewEvent {
        event_type: event.type_name().into(),
        namespace: ns.into(),
        data: event.data(),
        metadata: Metadata::system("worker", 1),
    };
    eventlog::append(&mut tx, &stream, at, &[new])
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// Every query answer of every user: lists, each function (deleted ones
/// are 404), each source.
async fn answers(app: &axum::Router, auth: &Auth) -> Vec<(String, StatusCode, Value)> {
    let mut all = Vec::new();
    for sub in USERS {
        let t = token(auth, sub, false);
        let base = format!("/v1/namespaces/{}/functions", Namespace::for_subject(sub));
        let (status, list) = send(app, Method::GET, &base, &t, Body::empty()).await;
        all.push((base.clone(), status, list));
        for i in 0..12 {
            for path in [format!("{base}/f{i}"), format!("{base}/f{i}/source")] {
                let (status, body) = send(app, Method::GET, &path, &t, Body::empty()).await;
                all.push((path, status, body));
            }
        }
    }
    all
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_api_answer_is_the_same_after_the_read_models_are_lost_and_replayed() {
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let auth = Auth::hs256(SECRET, None, None);
    let app = sless_api::router(AppState::new(db.pool.clone(), s3.blobs(), auth.clone()));
    for (u, sub) in USERS.iter().enumerate() {
        let t = token(&auth, sub, false);
        let ns = Namespace::for_subject(sub).to_string();
        let base = format!("/v1/namespaces/{ns}/functions");
        for i in 0..12 {
            let name = format!("f{i}");
            let spec = json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle",
                              "env_vars": {"USER": u.to_string()}});
            let (status, _) =
                send(&app, Method::POST, &base, &t, Body::from(spec.to_string())).await;
            assert_eq!(status, StatusCode::CREATED);
            if i % 4 == 3 {
                continue; // nothing uploaded
            }
            for v in 1..=(i % 3 + 1) {
                let zip = zip_files(&[(
                    "handler.py",
                    &format!("# {sub} {i} {v}\ndef handle(e):\n    return {v}\n"),
                )]);
                let (status, body) = send(
                    &app,
                    Method::POST,
                    &format!("{base}/{name}/upload"),
                    &t,
                    Body::from(zip),
                )
                .await;
                assert_eq!(status, StatusCode::ACCEPTED, "{body}");
            }
            let version = (i % 3 + 1) as u32;
            worker_event(&db, &ns, &name, FunctionEvent::BuildStarted { version }).await;
            if i % 5 == 0 {
                let failed = FunctionEvent::BuildFailed {
                    version,
                    error: "pip install failed".into(),
                    log_tail: "no such package".into(),
                };
                worker_event(&db, &ns, &name, failed).await;
                continue;
            }
            let built = FunctionEvent::BuildSucceeded {
                version,
                artifact: format!("local:{i}"),
            };
            worker_event(&db, &ns, &name, built).await;
            let deployed = FunctionEvent::FunctionDeployed {
                version,
                endpoint: format!("http://127.0.0.1:{}", 30_000 + i),
                node: None,
                instances: vec![],
            };
            worker_event(&db, &ns, &name, deployed).await;
            if i % 4 == 1 {
                let change = json!({"memory_mb": 256});
                let (status, _) = send(
                    &app,
                    Method::PUT,
                    &format!("{base}/{name}"),
                    &t,
                    Body::from(change.to_string()),
                )
                .await;
                assert_eq!(status, StatusCode::ACCEPTED);
            }
        }
        for deleted in ["f6", "f11"] {
            let (status, _) = send(
                &app,
                Method::DELETE,
                &format!("{base}/{deleted}"),
                &t,
                Body::empty(),
            )
            .await;
            assert_eq!(status, StatusCode::ACCEPTED);
        }
    }
    sless_projector::catch_up(&db.pool).await.unwrap();
    let before = answers(&app, &auth).await;
    let ok = before
        .iter()
        .filter(|(_, s, _)| *s == StatusCode::OK)
        .count();
    assert!(ok > 50, "mostly found: {ok}");
    assert!(
        before
            .iter()
            .any(|(p, _, b)| p.ends_with("/f0") && b["phase"] == "Failed")
    );
    assert!(
        before
            .iter()
            .any(|(p, _, b)| p.ends_with("/f1") && b["memory_mb"] == 256)
    );

    // The read models are lost; the API answers from what is left.
    sqlx::query("truncate functions, function_versions")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_ne!(answers(&app, &auth).await, before);

    let outcome = replay::replay(&db.pool, Mode::Replay, "test", |_| {})
        .await
        .unwrap();
    assert_eq!(outcome.differing(), ["functions", "function_versions"]);
    assert_eq!(answers(&app, &auth).await, before, "every answer as before");

    // Corrupted rather than lost: the same.
    sqlx::query("update functions set phase = 'Ready', last_error = null where phase = 'Failed'")
        .execute(&db.pool)
        .await
        .unwrap();
    sqlx::query("delete from functions where name = 'f2'")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_ne!(answers(&app, &auth).await, before);
    replay::replay(&db.pool, Mode::Replay, "test", |_| {})
        .await
        .unwrap();
    assert_eq!(answers(&app, &auth).await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_admin_routes_are_for_admin_tokens_only() {
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let auth = Auth::hs256(SECRET, None, None);
    let app = sless_api::router(AppState::new(db.pool.clone(), s3.blobs(), auth.clone()));
    let user = token(&auth, "ana@example.com", false);
    let admin = token(&auth, "ops@example.com", true);
    for (method, uri) in [
        (Method::POST, "/v1/admin/replay"),
        (Method::GET, "/v1/admin/replay"),
        (Method::POST, "/v1/admin/reconcile"),
    ] {
        let (status, body) = send(&app, method.clone(), uri, &user, Body::empty()).await;
        assert_eq!(status, StatusCode::FORBIDDEN, "{method} {uri}");
        assert_eq!(body["type"], "https://sless.dev/problems/forbidden");
        assert_eq!(body["detail"], format!("{uri} is for admin tokens only"));
    }
    // Without a way to replay in this process: 501, nothing written.
    let (status, _) = send(
        &app,
        Method::POST,
        "/v1/admin/replay",
        &admin,
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::NOT_IMPLEMENTED);
    let (status, body) = send(
        &app,
        Method::POST,
        "/v1/admin/replay",
        &admin,
        Body::from(r#"{"verify": "yes"}"#),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert_eq!(body["field"], "verify");
    let (status, body) = send(
        &app,
        Method::POST,
        "/v1/admin/replay",
        &admin,
        Body::from(r#"{"verfy": true}"#),
    )
    .await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{body}");
    let runs: i64 = sqlx::query_scalar("select count(*) from replays")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(runs, 0);

    let (status, body) = send(
        &app,
        Method::POST,
        "/v1/admin/reconcile",
        &admin,
        Body::empty(),
    )
    .await;
    assert_eq!(status, StatusCode::ACCEPTED);
    assert_eq!(body, json!({"enqueued": 0}));
}

fn run(args: &[&str], database_url: Option<&str>) -> Output {
    let mut cmd = sless();
    cmd.args(args);
    match database_url {
        Some(url) => cmd.env("DATABASE_URL", url),
        None => cmd.env_remove("DATABASE_URL"),
    };
    cmd.output().unwrap()
}

fn text(out: &Output) -> String {
    format!(
        "stdout:\n{}\nstderr:\n{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sless_replay_exits_0_when_equal_1_when_a_read_model_differs_and_2_when_it_fails() {
    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let auth = Auth::hs256(SECRET, None, None);
    let app = sless_api::router(AppState::new(db.pool.clone(), s3.blobs(), auth.clone()));
    let t = token(&auth, USERS[0], false);
    let base = format!(
        "/v1/namespaces/{}/functions",
        Namespace::for_subject(USERS[0])
    );
    for i in 0..5 {
        let spec =
            json!({"name": format!("g{i}"), "runtime": "nodejs20", "entrypoint": "index.handler"});
        let (status, _) = send(&app, Method::POST, &base, &t, Body::from(spec.to_string())).await;
        assert_eq!(status, StatusCode::CREATED);
    }
    sless_projector::catch_up(&db.pool).await.unwrap();

    let out = run(&["replay", "--verify"], Some(&db.url));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("replayed 5 events"), "{stdout}");
    assert!(
        stdout.contains("verified: every read model equals its rebuild"),
        "{stdout}"
    );
    assert!(String::from_utf8_lossy(&out.stderr).contains("events/s, ETA"));

    sqlx::query("update functions set memory_mb = 1 where name = 'g3'")
        .execute(&db.pool)
        .await
        .unwrap();
    let out = run(&["replay", "--verify"], Some(&db.url));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("these read models differ from their rebuild: functions"),
        "{stdout}"
    );
    let memory: i32 = sqlx::query_scalar("select memory_mb from functions where name = 'g3'")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(memory, 1, "--verify changes nothing");

    let out = run(&["replay"], Some(&db.url));
    assert_eq!(out.status.code(), Some(1), "{}", text(&out));
    assert!(
        String::from_utf8_lossy(&out.stdout)
            .contains("these differed from the old ones: functions")
    );
    let out = run(&["replay", "--verify"], Some(&db.url));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let out = run(&["replay"], Some(&db.url));
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));

    // No database: 2, and says so.
    let out = run(
        &["replay", "--verify"],
        Some("postgres://nobody:x@127.0.0.1:1/none"),
    );
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("nothing was changed"));
}

async fn start_dev(dir: &Path, log: &str) -> (Proc, Client) {
    let _ = std::fs::remove_file(dir.join("dev.json"));
    let mut cmd = sless();
    cmd.args([
        "dev",
        "--data-dir",
        dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    cmd.env_remove("DATABASE_URL")
        .env_remove("S3_ENDPOINT")
        .env_remove("S3_BUCKET");
    let proc = Proc::spawn(cmd, &dir.with_extension(log));
    let info: Value = sless_testkit::eventually("dev.json", Duration::from_secs(90), || async {
        let text = std::fs::read_to_string(dir.join("dev.json")).ok()?;
        serde_json::from_str(&text).ok()
    })
    .await;
    let client = Client {
        url: info["url"].as_str().unwrap().to_owned(),
        fn_url: info["fn_url"].as_str().unwrap().to_owned(),
        token: info["token"].as_str().unwrap().to_owned(),
        namespace: info["namespace"].as_str().unwrap().to_owned(),
        http: reqwest::Client::new(),
    };
    (proc, client)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn replay_and_reconcile_act_on_a_running_and_a_stopped_dev_instance() {
    let dir = sless_testkit::scratch_dir("replay-dev").join("data");
    let (mut proc, c) = start_dev(&dir, "log1").await;
    let data_dir = dir.to_str().unwrap();
    for name in ["a", "b"] {
        let res = c
            .create(json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle"}))
            .await;
        assert_eq!(res.status(), 201);
    }
    sless_testkit::eventually(
        "the projector to show both",
        Duration::from_secs(30),
        || async {
            let list: Value = c.list_as(&c.token).await.json().await.ok()?;
            (list["items"].as_array()?.len() == 2).then_some(())
        },
    )
    .await;

    // Running: the command uses the instance's server.
    let out = run(&["replay", "--verify", "--data-dir", data_dir], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert!(String::from_utf8_lossy(&out.stderr).contains("using the running instance's database"));

    // The admin routes, in the instance's own process.
    let out = run(
        &["token", "--data-dir", data_dir, "--sub", "ops", "--admin"],
        None,
    );
    assert!(out.status.success());
    let admin = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let replay_url = format!("{}/v1/admin/replay", c.url);
    let res = c
        .http
        .post(&replay_url)
        .bearer_auth(&c.token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 403, "not for a user's token");
    let res = c
        .http
        .post(&replay_url)
        .bearer_auth(&admin)
        .json(&json!({}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    assert_eq!(res.headers()["location"], "/v1/admin/replay");
    let started: Value = res.json().await.unwrap();
    assert_eq!(started["mode"], "replay");
    assert_eq!(started["requested_by"], "api:ops");
    let done: Value =
        sless_testkit::eventually("the replay to end", Duration::from_secs(60), || async {
            let run: Value = c
                .http
                .get(&replay_url)
                .bearer_auth(&admin)
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (run["state"] != "running").then_some(run)
        })
        .await;
    assert_eq!(done["id"], started["id"]);
    assert_eq!(done["state"], "equal", "{done}");
    assert_eq!(done["checksums"]["functions"]["rebuilt_rows"], 2);
    let res = c
        .http
        .post(format!("{}/v1/admin/reconcile", c.url))
        .bearer_auth(&admin)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202);
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"enqueued": 2}));

    proc.signal(libc::SIGTERM);
    assert!(proc.wait_exit(Duration::from_secs(60)).await.success());

    // Stopped: the command starts the instance's database and stops it after.
    let out = run(&["replay", "--data-dir", data_dir], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.contains("the rebuilt read models are live now"),
        "{stdout}"
    );
    assert!(
        String::from_utf8_lossy(&out.stderr).contains("starting the stopped instance's database")
    );
    let out = run(&["reconcile", "--data-dir", data_dir], None);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout).trim(),
        "enqueued a reconcile for 2 functions"
    );
    assert!(
        processes_mentioning(data_dir).is_empty(),
        "the database was stopped again"
    );

    // The instance starts on the replayed tables.
    let (mut proc, c) = start_dev(&dir, "log2").await;
    let list: Value = c.list_as(&c.token).await.json().await.unwrap();
    assert_eq!(list["items"].as_array().unwrap().len(), 2);
    let out = run(&["replay", "--data-dir", "/nonexistent/sless"], None);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out));
    proc.signal(libc::SIGTERM);
    assert!(proc.wait_exit(Duration::from_secs(60)).await.success());
}
