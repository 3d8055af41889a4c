//! A Python client generated from `GET /openapi.json`, used against the
//! real `sless dev`: the document is one a client generator
//! (openapi-python-client, from PyPI) turns into a client that runs a
//! function's life — create, upload, get, list, wait for Ready, versions,
//! a second upload, a rollback — with nothing but the generated code
//! (`python_client_flow.py`).
//!
//! The test installs the generator itself (`scripts/ensure-openapi-python-client`,
//! into a venv under `${XDG_CACHE_HOME:-~/.cache}/sless-ci`), so `cargo test`
//! alone runs it; the first run needs PyPI.

use std::path::{Path, PathBuf};
use std::process::Output;
use std::time::Duration;

use tokio::process::Command;

use crate::dev::{start_dev, stop_dev};

/// What the generator may say about a `/v1` operation and still have made
/// it whole: the upload's body is documented as `application/zip` and as
/// `application/octet-stream`; the generator writes no call for the first
/// (it knows JSON, forms, multipart and octet-stream only) and the upload
/// call for the second, which sends the same bytes. Anything else it says
/// fails the test.
const TOLERATED: &[(&str, &str)] = &[(
    "WARNING parsing POST /v1/namespaces/{ns}/functions/{name}/upload within functions.",
    "Unsupported content type application/zip",
)];

/// Runs `cmd` to its end within `deadline`.
async fn run(what: &str, cmd: &mut Command, deadline: Duration) -> Output {
    cmd.kill_on_drop(true).stdin(std::process::Stdio::null());
    match tokio::time::timeout(deadline, cmd.output()).await {
        Ok(out) => out.unwrap_or_else(|e| panic!("{what}: could not start: {e}")),
        Err(_) => panic!("{what}: not done within {deadline:?}"),
    }
}

fn text(out: &Output) -> String {
    format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    )
}

/// What the generator said about the document: the lines of its warnings
/// and errors (each a header, `WARNING parsing GET /x within tag.`, then
/// its detail; the part of the document it is about, indented JSON, left
/// out), from its summary line to its closing "If you believe this was a
/// mistake" line. None when it had nothing to say; the ones `TOLERATED`
/// taken out.
fn complaints(output: &str) -> Vec<&str> {
    let mut lines = output.lines().map(str::trim_end);
    if !lines
        .by_ref()
        .any(|l| l.contains(" encountered while generating"))
    {
        return Vec::new();
    }
    let mut said: Vec<&str> = lines
        .take_while(|l| !l.starts_with("If you believe this was a mistake"))
        .filter(|l| {
            !l.is_empty() && !l.starts_with(|c: char| c.is_whitespace() || "{}[]".contains(c))
        })
        .collect();
    for (header, detail) in TOLERATED {
        if let Some(at) = said
            .windows(2)
            .position(|w| w[0] == *header && w[1] == *detail)
        {
            said.drain(at..at + 2);
        }
    }
    said
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_generated_python_client_runs_a_function_through_its_versions() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let scratch = sless_testkit::scratch_dir("python-client");
    let dir = scratch.join("data");
    let (proc, c) = start_dev(&dir, "log").await;

    let ensure = run(
        "scripts/ensure-openapi-python-client",
        &mut Command::new(root.join("scripts/ensure-openapi-python-client")),
        Duration::from_secs(600),
    )
    .await;
    assert!(
        ensure.status.success(),
        "installing openapi-python-client: {}",
        text(&ensure)
    );
    let generator = PathBuf::from(String::from_utf8(ensure.stdout).unwrap().trim());
    assert!(generator.is_file(), "{generator:?} is not the generator");
    let venv_bin = generator.parent().unwrap().to_owned();

    let document = c
        .http
        .get(format!("{}/openapi.json", c.url))
        .send()
        .await
        .unwrap();
    assert_eq!(document.status(), 200);
    let document_path = scratch.join("openapi.json");
    std::fs::write(&document_path, document.bytes().await.unwrap()).unwrap();

    // `--meta none`: the package alone, importable from its parent. The
    // venv's bin on PATH gives the generator its formatter (ruff).
    let package = scratch.join("client").join("sless_client");
    let path = format!(
        "{}:{}",
        venv_bin.display(),
        std::env::var("PATH").unwrap_or_default()
    );
    let generated = run(
        "openapi-python-client generate",
        Command::new(&generator)
            .arg("generate")
            .arg("--path")
            .arg(&document_path)
            .arg("--output-path")
            .arg(&package)
            .args(["--meta", "none"])
            .env("PATH", &path),
        Duration::from_secs(300),
    )
    .await;
    let said = text(&generated);
    println!("openapi-python-client said:\n{said}");
    assert!(generated.status.success(), "the generator failed:\n{said}");
    let complaints = complaints(&said);
    assert!(
        complaints.is_empty(),
        "the generator skipped or could not parse part of the document: {complaints:#?}"
    );
    for module in [
        "api/functions/create_function.py",
        "api/functions/upload_function_source.py",
        "api/versions/rollback_function.py",
        "api/invoke/invoke_function_get.py",
    ] {
        assert!(package.join(module).is_file(), "{module} was not generated");
    }

    let flow = run(
        "python_client_flow.py",
        Command::new(venv_bin.join("python"))
            .arg(root.join("tests/e2e/python_client_flow.py"))
            .arg(package.parent().unwrap())
            .arg(root.join("examples/hello-python"))
            .env("SLESS_URL", &c.url)
            .env("SLESS_FN_URL", &c.fn_url)
            .env("SLESS_TOKEN", &c.token)
            .env("SLESS_NAMESPACE", &c.namespace),
        Duration::from_secs(600),
    )
    .await;
    println!("python_client_flow.py said:\n{}", text(&flow));
    assert!(
        flow.status.success(),
        "the generated client's flow failed ({}):\n{}",
        flow.status,
        text(&flow)
    );

    stop_dev(proc, &dir).await;
}
