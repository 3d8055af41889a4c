//! The nodejs20 and go1.23 runtimes on `sless dev`: upload, Ready, and a
//! first invoke through `/fn/...`. Go builds with `SLESS_GO` or `go` on
//! `PATH` when it is Go 1.21 or later; without one, the upload must end in
//! the build's clear "no Go toolchain" error.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::{Client, Proc, processes_mentioning, sless, zip_dir};

const NO_TOOLCHAIN: &str = "no Go toolchain ≥ 1.21 found (set SLESS_GO or install Go)";

async fn start_dev(dir: &Path) -> (Proc, Client) {
    let mut cmd = sless();
    cmd.args([
        "dev",
        "--data-dir",
        dir.to_str().unwrap(),
        "--listen",
        "127.0.0.1:0",
    ]);
    // Go builds share the tests' cache: a cold one compiles the standard
    // library's HTTP server first.
    let go_cache = std::env::var_os("GOCACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("sless-go-test-cache"));
    cmd.env_remove("DATABASE_URL")
        .env_remove("S3_ENDPOINT")
        .env_remove("S3_BUCKET")
        .env("GOCACHE", go_cache);
    let proc = Proc::spawn(cmd, &dir.with_extension("log"));
    let info: serde_json::Value =
        sless_testkit::eventually("dev.json", Duration::from_secs(90), || async {
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

/// Whether the driver will find a Go toolchain of at least 1.21.
fn go_toolchain_exists() -> bool {
    let go = std::env::var("SLESS_GO")
        .ok()
        .filter(|g| !g.trim().is_empty())
        .unwrap_or_else(|| "go".into());
    let Ok(out) = std::process::Command::new(go)
        .args(["env", "GOVERSION"])
        .env("GOTOOLCHAIN", "local")
        .output()
    else {
        return false;
    };
    let version = String::from_utf8_lossy(&out.stdout);
    version
        .trim()
        .strip_prefix("go1.")
        .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|minor| minor.parse::<u32>().ok())
        .is_some_and(|minor| minor >= 21)
}

/// Creates `name` for `runtime` and uploads the example directory; returns
/// when the upload was accepted.
async fn create_and_upload(c: &Client, name: &str, runtime: &str, entrypoint: &str) {
    let res = c
        .create(json!({"name": name, "runtime": runtime, "entrypoint": entrypoint}))
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let example = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("examples")
        .join(name);
    let res = c.upload(name, zip_dir(&example)).await;
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
}

async fn greet(c: &Client, name: &str) -> serde_json::Value {
    let url = format!("{}/fn/{}/{name}/greet?name=e2e", c.fn_url, c.namespace);
    let res = c.http.get(&url).send().await.unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sless_dev_runs_node_and_go_functions() {
    let dir = sless_testkit::scratch_dir("runtimes").join("data");
    let (mut proc, c) = start_dev(&dir).await;

    let started = Instant::now();
    create_and_upload(&c, "hello-node", "nodejs20", "handler.handle").await;
    let f = c.wait_ready("hello-node", Duration::from_secs(120)).await;
    println!("nodejs20 upload to Ready: {:?}", started.elapsed());
    assert_eq!(f["version"], 1);
    let answer = greet(&c, "hello-node").await;
    assert_eq!(
        answer,
        json!({"message": "hello, e2e", "method": "GET", "path": "/greet"})
    );

    let started = Instant::now();
    create_and_upload(&c, "hello-go", "go1.23", "handler.Handle").await;
    if go_toolchain_exists() {
        let f = c.wait_ready("hello-go", Duration::from_secs(600)).await;
        println!("go1.23 upload to Ready: {:?}", started.elapsed());
        assert_eq!(f["version"], 1);
        let answer = greet(&c, "hello-go").await;
        assert_eq!(
            answer,
            json!({"message": "hello, e2e", "method": "GET", "path": "/greet"})
        );
    } else {
        let f = sless_testkit::eventually(
            "hello-go to fail for want of a Go toolchain",
            Duration::from_secs(120),
            || async {
                let f = c.function("hello-go").await;
                (f["phase"] == "Failed").then_some(f)
            },
        )
        .await;
        println!(
            "go1.23: no toolchain; the build failed with {}",
            f["last_error"]
        );
        assert!(f["last_error"].to_string().contains(NO_TOOLCHAIN), "{f}");
    }

    proc.signal(libc::SIGTERM);
    let status = proc.wait_exit(Duration::from_secs(60)).await;
    assert!(status.success(), "sless dev exited with {status}");
    let left = processes_mentioning(dir.to_str().unwrap());
    assert!(left.is_empty(), "processes left running: {left:?}");
}
