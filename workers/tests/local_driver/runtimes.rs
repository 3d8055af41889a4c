//! nodejs20 and go1.23 on the local driver: `node` and `npm` from `PATH`;
//! Go from `SLESS_GO` or `PATH` when it is at least 1.21 (without one, the
//! Go tests check the build's "no Go toolchain" error instead).

use std::path::{Path, PathBuf};
use std::time::Duration;

use serde_json::{Value, json};
use sless_domain::{FunctionKey, Runtime};
use sless_workers::driver::{Artifact, BuildRequest, DeployRequest, Driver, DriverError};
use sless_workers::local::{LocalDriver, LocalDriverConfig};

use super::{build_req, context, deploy_req, http, key, sha};

const NO_TOOLCHAIN: &str = "no Go toolchain ≥ 1.21 found (set SLESS_GO or install Go)";

/// A driver whose Go builds share one cache across tests and runs (`GOCACHE`
/// if set): a cold cache compiles the standard library's HTTP server once.
fn driver(dir: &Path) -> LocalDriver {
    let go_cache = std::env::var_os("GOCACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("sless-go-test-cache"));
    LocalDriver::new(LocalDriverConfig {
        health_timeout: Duration::from_secs(30),
        go: std::env::var("SLESS_GO")
            .ok()
            .filter(|g| !g.trim().is_empty()),
        go_cache,
        env: std::env::vars().collect(),
        ..LocalDriverConfig::new(dir)
    })
    .unwrap()
}

/// The Go toolchain the driver finds (`SLESS_GO`, else `go` on `PATH`), if
/// it is Go 1.21 or later.
fn go_toolchain() -> Option<String> {
    let go = std::env::var("SLESS_GO")
        .ok()
        .filter(|g| !g.trim().is_empty())
        .unwrap_or_else(|| "go".into());
    let out = std::process::Command::new(&go)
        .args(["env", "GOVERSION"])
        .env("GOTOOLCHAIN", "local")
        .output()
        .ok()?;
    let version = String::from_utf8_lossy(&out.stdout);
    let minor: u32 = version
        .trim()
        .strip_prefix("go1.")?
        .split(|c: char| !c.is_ascii_digit())
        .next()?
        .parse()
        .ok()?;
    (minor >= 21).then_some(go)
}

fn req_for(runtime: Runtime, k: &FunctionKey, n: u32, files: &[(&str, &str)]) -> BuildRequest {
    BuildRequest {
        runtime,
        ..build_req(k, 1, sha(n), context(files))
    }
}

fn deploy_as(
    runtime: Runtime,
    k: &FunctionKey,
    version: u32,
    entrypoint: &str,
    artifact: Artifact,
) -> DeployRequest {
    DeployRequest {
        runtime,
        entrypoint: entrypoint.into(),
        ..deploy_req(k, version, artifact)
    }
}

/// GET `url`: status, content type and body.
async fn get(url: &str) -> (u16, String, String) {
    let res = http().get(url).send().await.unwrap();
    let status = res.status().as_u16();
    let content_type = res
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, content_type, res.text().await.unwrap())
}

fn json_of(body: &str) -> Value {
    serde_json::from_str(body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

fn build_dir_entries(dir: &Path, name: &str) -> Vec<String> {
    std::fs::read_dir(dir.join("builds/sless-test").join(name))
        .map(|entries| {
            entries
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect()
        })
        .unwrap_or_default()
}

// -- nodejs20 -----------------------------------------------------------------

const NODE_HANDLER: &str = r#"
exports.handle = async (event) => {
  switch (event.path) {
    case '/text':
      return 'hello ' + (event.query.name || 'world');
    case '/json':
      return { method: event.method, json: event.json, function: process.env.SLESS_FUNCTION, greeting: process.env.GREETING };
    case '/created':
      return { statusCode: 201, headers: { 'X-Made': 'yes' }, body: { id: 7 } };
    case '/throw':
      throw new RangeError('out of range');
    case '/later':
      await new Promise((resolve) => setTimeout(resolve, 10));
      return ['awaited', event.method];
  }
  return { statusCode: 404, body: 'no route' };
};
"#;

#[tokio::test(flavor = "multi_thread")]
async fn builds_deploys_and_serves_a_node_function() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("node-hello");
    let artifact = driver
        .build(req_for(
            Runtime::Nodejs20,
            &k,
            40,
            &[("handler.js", NODE_HANDLER)],
        ))
        .await
        .unwrap();
    let code = Path::new(&artifact.reference).join("code");
    assert!(code.join("handler.js").is_file());
    assert!(
        !code.join("node_modules").exists(),
        "npm ran without a package.json"
    );

    let mut req = deploy_as(Runtime::Nodejs20, &k, 1, "handler.handle", artifact);
    req.env_vars.insert("GREETING".into(), "hi".into());
    let dep = driver.deploy(req).await.unwrap();
    let url = |path: &str| format!("{}{path}", dep.endpoint);

    let (status, content_type, body) = get(&url("/text?name=node")).await;
    assert_eq!(
        (status, content_type.as_str(), body.as_str()),
        (200, "text/plain; charset=utf-8", "hello node")
    );

    let res = http()
        .post(url("/json"))
        .json(&json!({"n": 1}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert_eq!(
        res.json::<Value>().await.unwrap(),
        json!({"method": "POST", "json": {"n": 1}, "function": "sless-test/node-hello", "greeting": "hi"})
    );

    let res = http().get(url("/created")).send().await.unwrap();
    assert_eq!(res.status(), 201);
    assert_eq!(res.headers()["x-made"], "yes");
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"id": 7}));

    let (status, content_type, body) = get(&url("/throw")).await;
    assert_eq!((status, content_type.as_str()), (500, "application/json"));
    let err = json_of(&body);
    assert_eq!(err["error"], "RangeError");
    assert_eq!(err["message"], "out of range");
    assert!(
        err["traceback"].as_str().unwrap().contains("handler.js"),
        "{err}"
    );

    // The function keeps serving, and awaits what it returns.
    let (status, _, body) = get(&url("/later")).await;
    assert_eq!((status, json_of(&body)), (200, json!(["awaited", "GET"])));
    let pid = driver.pid(&k).unwrap();
    assert_eq!(driver.restarts(&k), 0);
    assert_eq!(get(&url("/text")).await.2, "hello world");
    assert_eq!(driver.pid(&k), Some(pid));

    let log =
        std::fs::read_to_string(dir.path().join("logs/sless-test/node-hello/v1.log")).unwrap();
    assert!(log.contains("GET /throw 500"), "{log}");
    assert!(log.contains("RangeError: out of range"), "{log}");
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn package_json_dependencies_are_installed_with_npm() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("node-deps");
    let handler = "const { greet } = require('greet');\n\
                   exports.handle = (event) => greet(event.query.name || 'npm');\n";
    let package = r#"{"name": "fn", "version": "1.0.0", "private": true, "dependencies": {"greet": "file:greet"}}"#;
    let greet_package = r#"{"name": "greet", "version": "1.0.0", "main": "index.js"}"#;
    let greet = "exports.greet = (name) => 'greetings, ' + name;\n";
    let files = [
        ("handler.js", handler),
        ("package.json", package),
        ("greet/package.json", greet_package),
        ("greet/index.js", greet),
    ];
    let artifact = driver
        .build(req_for(Runtime::Nodejs20, &k, 41, &files))
        .await
        .unwrap();
    let code = Path::new(&artifact.reference).join("code");
    assert!(code.join("node_modules/greet/index.js").is_file());
    let lock = std::fs::read_to_string(code.join("package-lock.json")).unwrap();

    let dep = driver
        .deploy(deploy_as(
            Runtime::Nodejs20,
            &k,
            1,
            "handler.handle",
            artifact,
        ))
        .await
        .unwrap();
    assert_eq!(
        get(&format!("{}/?name=ada", dep.endpoint)).await.2,
        "greetings, ada"
    );
    driver.shutdown().await;

    // With a lockfile the build runs `npm ci`, which refuses a lockfile that
    // does not match package.json (here: it lacks the dependency).
    let stale_lock = lock.replace("greet", "other");
    let failed = driver
        .build(req_for(
            Runtime::Nodejs20,
            &k,
            42,
            &[
                ("handler.js", handler),
                ("package.json", package),
                ("package-lock.json", &stale_lock),
                ("greet/package.json", greet_package),
                ("greet/index.js", greet),
            ],
        ))
        .await;
    match failed {
        Err(DriverError::Build { message, log_tail }) => {
            assert!(message.starts_with("npm ci failed (exit "), "{message}");
            assert!(log_tail.contains("npm"), "{log_tail}");
        }
        other => panic!("expected a build error, got {other:?}"),
    }

    let broken = driver
        .build(req_for(
            Runtime::Nodejs20,
            &k,
            43,
            &[
                ("handler.js", handler),
                ("package.json", "{\"name\": broken"),
            ],
        ))
        .await;
    match broken {
        Err(DriverError::Build { message, log_tail }) => {
            assert!(
                message.starts_with("npm install failed (exit "),
                "{message}"
            );
            assert!(log_tail.contains("EJSONPARSE"), "{log_tail}");
        }
        other => panic!("expected a build error, got {other:?}"),
    }
    // Only the good build is left.
    assert_eq!(build_dir_entries(dir.path(), "node-deps"), vec![sha(41)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_module_that_fails_to_load_fails_the_deploy() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("node-broken");
    let artifact = driver
        .build(req_for(
            Runtime::Nodejs20,
            &k,
            44,
            &[("handler.js", "require('no-such-module-anywhere');\n")],
        ))
        .await
        .unwrap();
    match driver
        .deploy(deploy_as(
            Runtime::Nodejs20,
            &k,
            1,
            "handler.handle",
            artifact,
        ))
        .await
    {
        Err(DriverError::Deploy { message, log_tail }) => {
            assert!(message.contains("exited with code 3"), "{message}");
            assert!(log_tail.contains("no-such-module-anywhere"), "{log_tail}");
        }
        other => panic!("expected a deploy error, got {other:?}"),
    }
    assert_eq!(driver.status(&k).await, None);
}

// -- go1.23 -------------------------------------------------------------------

const GO_HANDLER: &str = r#"package handler

import (
	"context"
	"errors"
	"os"
)

type Event struct {
	Method  string            `json:"method"`
	Path    string            `json:"path"`
	Query   map[string]string `json:"query"`
	Headers map[string]string `json:"headers"`
	Body    string            `json:"body"`
	JSON    any               `json:"json"`
}

func Handle(ctx context.Context, event Event) (any, error) {
	switch event.Path {
	case "/text":
		return "hello " + event.Query["name"], nil
	case "/json":
		return map[string]any{"method": event.Method, "json": event.JSON, "function": os.Getenv("SLESS_FUNCTION")}, nil
	case "/created":
		return map[string]any{"statusCode": 201, "headers": map[string]string{"X-Made": "yes"}, "body": map[string]int{"id": 7}}, nil
	case "/error":
		return nil, errors.New("no such order")
	case "/panic":
		var orders map[string]int
		orders["x"] = 1
	}
	return map[string]any{"statusCode": 404, "body": "no route"}, nil
}

// Plain takes the event as a map and returns only a value.
func Plain(event map[string]any) string {
	return "plain " + event["method"].(string)
}
"#;

/// Checks the build's answer when there is no Go toolchain; true if there is
/// one.
async fn toolchain_or_its_absence(driver: &LocalDriver, dir: &Path, n: u32) -> bool {
    if go_toolchain().is_some() {
        return true;
    }
    let k = key("go-none");
    match driver
        .build(req_for(
            Runtime::Go123,
            &k,
            n,
            &[("handler.go", GO_HANDLER)],
        ))
        .await
    {
        Err(DriverError::Build { message, .. }) => assert_eq!(message, NO_TOOLCHAIN),
        other => panic!("expected the no-toolchain error, got {other:?}"),
    }
    assert!(build_dir_entries(dir, "go-none").is_empty());
    false
}

#[tokio::test(flavor = "multi_thread")]
async fn builds_deploys_and_serves_a_go_function() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    if !toolchain_or_its_absence(&driver, dir.path(), 50).await {
        return;
    }
    let k = key("go-hello");
    // No go.mod: the build writes one.
    let artifact = driver
        .build(req_for(
            Runtime::Go123,
            &k,
            51,
            &[("handler.go", GO_HANDLER)],
        ))
        .await
        .unwrap();
    let build = Path::new(&artifact.reference);
    assert!(build.join("bin/function").is_file());
    assert!(!build.join("gobuild").exists(), "the Go work tree was kept");
    let log = std::fs::read_to_string(build.join("build.log")).unwrap();
    assert!(
        log.contains("package handler (function) exports Handle, Plain"),
        "{log}"
    );

    let dep = driver
        .deploy(deploy_as(
            Runtime::Go123,
            &k,
            1,
            "handler.Handle",
            artifact.clone(),
        ))
        .await
        .unwrap();
    let url = |path: &str| format!("{}{path}", dep.endpoint);

    let (status, content_type, body) = get(&url("/text?name=go")).await;
    assert_eq!(
        (status, content_type.as_str(), body.as_str()),
        (200, "text/plain; charset=utf-8", "hello go")
    );
    let res = http()
        .put(url("/json"))
        .json(&json!({"n": [1, 2]}))
        .send()
        .await
        .unwrap();
    assert_eq!(
        res.json::<Value>().await.unwrap(),
        json!({"method": "PUT", "json": {"n": [1, 2]}, "function": "sless-test/go-hello"})
    );
    let res = http().get(url("/created")).send().await.unwrap();
    assert_eq!(res.status(), 201);
    assert_eq!(res.headers()["x-made"], "yes");
    assert_eq!(res.json::<Value>().await.unwrap(), json!({"id": 7}));

    let (status, _, body) = get(&url("/error")).await;
    let err = json_of(&body);
    assert_eq!((status, &err["error"]), (500, &json!("errors.errorString")));
    assert_eq!(err["message"], "no such order");

    let (status, _, body) = get(&url("/panic")).await;
    let err = json_of(&body);
    assert_eq!(status, 500);
    assert_eq!(err["message"], "assignment to entry in nil map");
    assert!(
        err["traceback"].as_str().unwrap().contains("handler.go"),
        "{err}"
    );

    // Still the same process, still serving.
    let pid = driver.pid(&k).unwrap();
    assert_eq!(get(&url("/text?name=again")).await.2, "hello again");
    assert_eq!((driver.pid(&k), driver.restarts(&k)), (Some(pid), 0));

    // The same build serves another exported function of the package.
    let plain = driver
        .deploy(deploy_as(
            Runtime::Go123,
            &k,
            2,
            "handler.Plain",
            artifact.clone(),
        ))
        .await
        .unwrap();
    assert_eq!(get(&format!("{}/x", plain.endpoint)).await.2, "plain GET");

    // An entrypoint the package does not export fails the deploy.
    match driver
        .deploy(deploy_as(
            Runtime::Go123,
            &k,
            3,
            "handler.Missing",
            artifact,
        ))
        .await
    {
        Err(DriverError::Deploy { message, log_tail }) => {
            assert!(message.contains("exited with code 3"), "{message}");
            assert!(
                log_tail.contains("has no exported function Missing (it has: Handle, Plain)"),
                "{log_tail}"
            );
        }
        other => panic!("expected a deploy error, got {other:?}"),
    }
    assert_eq!(driver.status(&k).await, Some(plain));
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn go_builds_fail_clearly() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    if !toolchain_or_its_absence(&driver, dir.path(), 60).await {
        return;
    }
    let k = key("go-bad");
    const GO_MOD: &str = "module example.com/bad\n\ngo 1.21\n";
    type Files = &'static [(&'static str, &'static str)];
    let cases: [(Files, &str, &str); 3] = [
        (
            &[
                ("go.mod", GO_MOD),
                ("main.go", "package main\n\nfunc main() {}\n"),
            ],
            "the function's package is `package main`",
            "",
        ),
        (
            &[
                ("go.mod", GO_MOD),
                (
                    "handler.go",
                    "package handler\n\nfunc Handle(e map[string]any) (any, error) { return undefinedThing, nil }\n",
                ),
            ],
            "go build failed (exit 1)",
            "undefined: undefinedThing",
        ),
        (
            &[("handler.py", "def handle(event):\n    return 'py'\n")],
            "the function's files are not a Go package (go list failed)",
            "no Go files",
        ),
    ];
    for (n, (files, message_part, tail_part)) in cases.into_iter().enumerate() {
        match driver
            .build(req_for(Runtime::Go123, &k, 61 + n as u32, files))
            .await
        {
            Err(DriverError::Build { message, log_tail }) => {
                assert!(message.contains(message_part), "{message}");
                assert!(log_tail.contains(tail_part), "{message}: {log_tail}");
            }
            other => panic!("{message_part}: expected a build error, got {other:?}"),
        }
    }
    assert!(build_dir_entries(dir.path(), "go-bad").is_empty());
}

#[tokio::test(flavor = "multi_thread")]
async fn a_missing_or_old_go_toolchain_fails_the_build_clearly() {
    let dir = tempfile::tempdir().unwrap();
    // A `go` that reports version 1.19, like Debian's golang-go.
    let old_go = dir.path().join("old-go");
    std::fs::write(&old_go, "#!/bin/sh\necho go1.19.8\n").unwrap();
    let mut perms = std::fs::metadata(&old_go).unwrap().permissions();
    std::os::unix::fs::PermissionsExt::set_mode(&mut perms, 0o755);
    std::fs::set_permissions(&old_go, perms).unwrap();

    let cases = [
        (
            dir.path().join("no-such-go").to_string_lossy().into_owned(),
            "cannot be run",
        ),
        (
            old_go.to_string_lossy().into_owned(),
            "is go1.19.8, older than go1.21",
        ),
    ];
    let k = key("go-old");
    for (n, (go, why)) in cases.into_iter().enumerate() {
        let driver = LocalDriver::new(LocalDriverConfig {
            go: Some(go.clone()),
            env: std::env::vars().collect(),
            ..LocalDriverConfig::new(dir.path().join("data"))
        })
        .unwrap();
        match driver
            .build(req_for(
                Runtime::Go123,
                &k,
                70 + n as u32,
                &[("handler.go", GO_HANDLER)],
            ))
            .await
        {
            Err(DriverError::Build { message, log_tail }) => {
                assert_eq!(message, NO_TOOLCHAIN);
                assert!(log_tail.contains(&format!("SLESS_GO={go}")), "{log_tail}");
                assert!(log_tail.contains(why), "{log_tail}");
            }
            other => panic!("{go}: expected a build error, got {other:?}"),
        }
    }
    assert!(build_dir_entries(&dir.path().join("data"), "go-old").is_empty());
}
