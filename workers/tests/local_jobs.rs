//! Jobs on the local driver: a function run once, to completion, with its
//! output captured. Python (`python3`, or `SLESS_PYTHON`) and Node.js
//! (`node`) are required; Go runs when a toolchain ≥ 1.21 is found
//! (`SLESS_GO`, else `go` on `PATH`), and otherwise the build's "no Go
//! toolchain" error is checked instead.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};
use sless_domain::{FunctionKey, FunctionName, Namespace, Runtime};
use sless_testkit::eventually;
use sless_workers::driver::{
    Artifact, BuildRequest, Driver, DriverError, JOB_OUTPUT_LIMIT, JobOutput, JobRequest,
};
use sless_workers::local::{LocalDriver, LocalDriverConfig};

const DEADLINE: Duration = Duration::from_secs(15);

const PYTHON_HANDLER: &str = r#"
import os
import subprocess
import sys
import time


class LedgerMismatch(Exception):
    pass


def intact(event):
    """Whether the input's blob is its pattern repeated, and how long the
    event's body was."""
    job = event["json"]
    return {"intact": job["blob"] == "0123456789" * job["repeat"], "body": len(event["body"])}


def echo(event):
    print("working on", event["method"])
    return {"ok": True, "input": event["json"]}


def loud(event):
    line = "x" * 1023 + "\n"
    for _ in range(1024):
        sys.stdout.write(line)
    print("to stderr", file=sys.stderr)
    return {"done": True}


def exit3(event):
    print("giving up")
    sys.exit(3)


def raises(event):
    raise LedgerMismatch("books do not balance")


def sleeper(event):
    """Starts a child and a daemon (double fork, new session), both named
    by the marker, then outlives any timeout."""
    marker = event["json"]["marker"]
    # `sh -c CMD NAME`: NAME is the shell's $0, so it is in its command line.
    subprocess.Popen(["sh", "-c", "sleep 300; true", marker + "-child"])
    if os.fork() == 0:
        os.setsid()
        if os.fork() == 0:
            os.execv("/bin/sh", ["sh", "-c", "sleep 300; true", marker + "-daemon"])
        os._exit(0)
    print("started", flush=True)
    time.sleep(300)
"#;

fn key(name: &str) -> FunctionKey {
    FunctionKey::new(
        Namespace::parse("sless-test").unwrap(),
        FunctionName::parse(name).unwrap(),
    )
}

fn driver(dir: &Path) -> Arc<LocalDriver> {
    let go_cache = std::env::var_os("GOCACHE")
        .map(PathBuf::from)
        .unwrap_or_else(|| std::env::temp_dir().join("sless-go-test-cache"));
    Arc::new(
        LocalDriver::new(LocalDriverConfig {
            python: std::env::var("SLESS_PYTHON").unwrap_or_else(|_| "python3".into()),
            go: std::env::var("SLESS_GO")
                .ok()
                .filter(|g| !g.trim().is_empty()),
            go_cache,
            env: std::env::vars().collect(),
            ..LocalDriverConfig::new(dir)
        })
        .unwrap(),
    )
}

/// A tar.gz of `(path, contents)` files plus a Dockerfile, like the API makes.
fn context(files: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let all = files
        .iter()
        .copied()
        .chain([("Dockerfile", "FROM scratch\n")]);
    for (path, data) in all {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_entry_type(tar::EntryType::Regular);
        builder
            .append_data(&mut header, path, data.as_bytes())
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

fn build_req(k: &FunctionKey, runtime: Runtime, n: u32, files: &[(&str, &str)]) -> BuildRequest {
    let sha = format!("{n:064x}");
    BuildRequest {
        key: k.clone(),
        version: 1,
        runtime,
        context_key: format!("contexts/{sha}.tar.gz"),
        context_sha256: sha,
        context: context(files),
        built: None,
        log: Default::default(),
    }
}

async fn python_function(driver: &LocalDriver, k: &FunctionKey) -> Artifact {
    driver
        .build(build_req(
            k,
            Runtime::Python311,
            1,
            &[("handler.py", PYTHON_HANDLER)],
        ))
        .await
        .unwrap()
}

/// The event of a job whose input is `input`.
fn job_event(input: &Value) -> Value {
    json!({
        "method": "JOB",
        "path": "/",
        "query": {},
        "headers": {},
        "body": input.to_string(),
        "json": input,
    })
}

fn job(
    k: &FunctionKey,
    run: &str,
    runtime: Runtime,
    entrypoint: &str,
    artifact: &Artifact,
    input: Value,
) -> JobRequest {
    JobRequest {
        key: k.clone(),
        run: run.into(),
        version: 1,
        runtime,
        entrypoint: entrypoint.into(),
        env_vars: BTreeMap::new(),
        memory_mb: 128,
        timeout: Duration::from_secs(30),
        artifact: artifact.clone(),
        event: job_event(&input),
        invocation: None,
    }
}

fn last_line(out: &JobOutput) -> Value {
    let line = out
        .stdout
        .text
        .trim_end()
        .lines()
        .last()
        .unwrap_or_default();
    serde_json::from_str(line).unwrap_or_else(|e| panic!("{line:?} is not JSON ({e}): {out:?}"))
}

/// Whether `pid` is a live process (a zombie is not).
fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state follows the command name, which is in parentheses.
        Ok(stat) => !matches!(
            stat.rsplit_once(") ")
                .and_then(|(_, rest)| rest.chars().next()),
            Some('Z' | 'X') | None
        ),
        Err(_) => false,
    }
}

/// The pids of processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    sless_testkit::processes::mentioning(needle)
        .into_iter()
        .map(|(pid, _)| pid)
        .filter(|pid| alive(*pid))
        .collect()
}

/// The (child, daemon) the `sleeper` handler started with `marker`.
fn sleeper_processes(marker: &str) -> Option<(u32, u32)> {
    let child = processes_mentioning(&format!("{marker}-child"));
    let daemon = processes_mentioning(&format!("{marker}-daemon"));
    Some((*child.first()?, *daemon.first()?))
}

/// A marker no other test uses.
fn marker(what: &str) -> String {
    format!("sless-job-{what}-{}", uuid::Uuid::new_v4().simple())
}

async fn gone(what: &str, pid: u32) {
    eventually(
        &format!("{what} (pid {pid}) is gone"),
        DEADLINE,
        || async move { (!alive(pid)).then_some(()) },
    )
    .await;
}

#[tokio::test]
async fn return_value_is_the_last_line_of_stdout() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("echo");
    let artifact = python_function(&driver, &k).await;
    let input = json!({"day": "2025-11-30", "n": [1, 2]});
    let run = "job/sless-test/nightly";
    let out = driver
        .run_job(job(
            &k,
            run,
            Runtime::Python311,
            "handler.echo",
            &artifact,
            input.clone(),
        ))
        .await
        .unwrap();
    assert_eq!(
        (out.exit_code, out.signal, out.timed_out),
        (Some(0), None, false),
        "{out:?}"
    );
    assert_eq!(last_line(&out), json!({"ok": true, "input": input}));
    assert!(out.stdout.text.starts_with("working on JOB\n"), "{out:?}");
    assert_eq!(out.stdout.bytes, out.stdout.text.len() as u64);
    assert!(!out.stdout.truncated);
    assert_eq!(out.stderr.text, "");

    let log =
        std::fs::read_to_string(dir.path().join("logs/jobs/job/sless-test/nightly.log")).unwrap();
    assert!(
        log.contains("[sless] run job/sless-test/nightly of version 1 started"),
        "{log}"
    );
    assert!(
        log.contains(r#"{"ok": true, "input": {"day": "2025-11-30", "n": [1, 2]}}"#),
        "{log}"
    );
    assert!(log.contains("exited with code 0"), "{log}");
}

#[tokio::test]
async fn a_mebibyte_of_output_is_cut_in_the_middle() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("loud");
    let artifact = python_function(&driver, &k).await;
    let run = "cron/sless-test/loud/1764470400";
    let out = driver
        .run_job(job(
            &k,
            run,
            Runtime::Python311,
            "handler.loud",
            &artifact,
            json!(null),
        ))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{:?}", out.stderr);
    let printed = 1024 * 1024 + "{\"done\": true}\n".len() as u64;
    assert_eq!(out.stdout.bytes, printed);
    assert!(out.stdout.truncated);
    let text = &out.stdout.text;
    let marker = format!(
        "\n… {} bytes omitted …\n",
        thousands(printed - JOB_OUTPUT_LIMIT as u64)
    );
    assert!(
        text.contains(&marker),
        "no {marker:?} in the captured output"
    );
    assert_eq!(text.len(), JOB_OUTPUT_LIMIT + marker.len());
    assert!(text.starts_with("xxxx"));
    assert!(text.ends_with("\n{\"done\": true}\n"));
    assert_eq!(last_line(&out), json!({"done": true}));
    assert_eq!(out.stderr.text, "to stderr\n");
    assert!(!out.stderr.truncated);

    // The log keeps everything.
    let log = dir
        .path()
        .join("logs/jobs/cron/sless-test/loud/1764470400.log");
    assert!(std::fs::metadata(log).unwrap().len() > printed);
}

fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::new();
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[tokio::test]
async fn exit_code_and_exceptions_are_reported() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("failing");
    let artifact = python_function(&driver, &k).await;

    let out = driver
        .run_job(job(
            &k,
            "job/sless-test/three",
            Runtime::Python311,
            "handler.exit3",
            &artifact,
            json!({}),
        ))
        .await
        .unwrap();
    assert_eq!((out.exit_code, out.timed_out), (Some(3), false), "{out:?}");
    assert_eq!(out.stdout.text, "giving up\n");

    let out = driver
        .run_job(job(
            &k,
            "job/sless-test/raise",
            Runtime::Python311,
            "handler.raises",
            &artifact,
            json!({}),
        ))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(1), "{out:?}");
    assert!(
        out.stderr
            .text
            .contains("Traceback (most recent call last)"),
        "{out:?}"
    );
    assert!(
        out.stderr
            .text
            .contains("LedgerMismatch: books do not balance"),
        "{out:?}"
    );
    assert_eq!(out.stdout.text, "");
}

#[tokio::test]
async fn an_entrypoint_that_cannot_load_exits_3() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("unloadable");
    let artifact = python_function(&driver, &k).await;
    let out = driver
        .run_job(job(
            &k,
            "job/sless-test/missing",
            Runtime::Python311,
            "nosuchmodule.handle",
            &artifact,
            json!({}),
        ))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(3), "{out:?}");
    assert!(out.stderr.text.contains("ModuleNotFoundError"), "{out:?}");
    assert!(
        out.stderr.text.contains("cannot load entrypoint"),
        "{out:?}"
    );
}

#[tokio::test]
async fn a_run_past_its_timeout_is_stopped_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("slow");
    let artifact = python_function(&driver, &k).await;
    let marker = marker("slow");
    let mut req = job(
        &k,
        "job/sless-test/slow",
        Runtime::Python311,
        "handler.sleeper",
        &artifact,
        json!({"marker": marker}),
    );
    req.timeout = Duration::from_secs(3);
    let started = std::time::Instant::now();
    let out = driver.run_job(req).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    assert_eq!(out.exit_code, None, "{out:?}");
    assert_eq!(out.signal, Some(libc::SIGTERM), "{out:?}");
    assert!(out.duration >= Duration::from_secs(3), "{out:?}");
    assert!(
        started.elapsed() < Duration::from_secs(12),
        "{:?}",
        started.elapsed()
    );
    let log =
        std::fs::read_to_string(dir.path().join("logs/jobs/job/sless-test/slow.log")).unwrap();
    assert!(log.contains("stopped after its timeout of 3s"), "{log}");
    let function: u32 = log
        .split_once("started (pid ")
        .and_then(|(_, rest)| rest.split_once(')'))
        .and_then(|(pid, _)| pid.parse().ok())
        .unwrap_or_else(|| panic!("no pid in the log: {log}"));
    gone("the function", function).await;
    // On a loaded machine the interpreter may not even have started the
    // handler within the timeout; when it did, its child and its daemon
    // went with it.
    if out.stdout.text.contains("started") {
        eventually("the child and the daemon are gone", DEADLINE, || {
            let left = processes_mentioning(&marker);
            async move { left.is_empty().then_some(()) }
        })
        .await;
    } else {
        eprintln!("the function was stopped before it started its child");
    }
}

#[tokio::test]
async fn dropping_the_run_stops_it_with_its_children() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("cancelled");
    let artifact = python_function(&driver, &k).await;
    let marker = marker("cancelled");
    let req = job(
        &k,
        "job/sless-test/cancelled",
        Runtime::Python311,
        "handler.sleeper",
        &artifact,
        json!({"marker": marker}),
    );
    let run = tokio::spawn({
        let driver = driver.clone();
        async move { driver.run_job(req).await }
    });
    let (child, daemon) = eventually(
        "the function started its child and daemon",
        DEADLINE,
        || {
            let found = sleeper_processes(&marker);
            async move { found }
        },
    )
    .await;
    assert!(alive(child) && alive(daemon));
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    gone("the function's child", child).await;
    gone("the function's daemon", daemon).await;
}

#[tokio::test]
async fn a_node_function_runs_as_a_job() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("node-job");
    let handler = "exports.handle = async (event) => {\n  console.log('node says hi');\n  return { ok: true, input: event.json, runtime: 'node' };\n};\n";
    let artifact = driver
        .build(build_req(
            &k,
            Runtime::Nodejs20,
            2,
            &[("handler.js", handler)],
        ))
        .await
        .unwrap();
    let out = driver
        .run_job(job(
            &k,
            "job/sless-test/node",
            Runtime::Nodejs20,
            "handler.handle",
            &artifact,
            json!({"n": 7}),
        ))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        last_line(&out),
        json!({"ok": true, "input": {"n": 7}, "runtime": "node"})
    );
    assert!(out.stdout.text.starts_with("node says hi\n"), "{out:?}");
}

#[tokio::test]
async fn a_go_function_runs_as_a_job_when_there_is_a_toolchain() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("go-job");
    let handler = "package handler\n\nimport \"fmt\"\n\ntype Event struct {\n\tJSON any `json:\"json\"`\n}\n\nfunc Handle(e Event) (map[string]any, error) {\n\tfmt.Print(\"go says hi\")\n\treturn map[string]any{\"ok\": true, \"input\": e.JSON}, nil\n}\n";
    let built = driver
        .build(build_req(&k, Runtime::Go123, 3, &[("handler.go", handler)]))
        .await;
    let artifact = match built {
        Ok(artifact) => artifact,
        Err(DriverError::Build { message, .. }) if message.contains("no Go toolchain") => {
            assert!(
                std::env::var("SLESS_GO").is_err(),
                "SLESS_GO is set: {message}"
            );
            return;
        }
        Err(e) => panic!("go build: {e:?}"),
    };
    let out = driver
        .run_job(job(
            &k,
            "job/sless-test/go",
            Runtime::Go123,
            "handler.Handle",
            &artifact,
            json!([1]),
        ))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(out.stdout.text, "go says hi\n{\"input\":[1],\"ok\":true}\n");
}

#[tokio::test]
async fn a_run_without_its_build_is_our_error() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("unbuilt");
    let artifact = Artifact {
        reference: dir
            .path()
            .join("builds/nowhere")
            .to_string_lossy()
            .into_owned(),
    };
    let err = driver
        .run_job(job(
            &k,
            "job/sless-test/unbuilt",
            Runtime::Python311,
            "handler.echo",
            &artifact,
            json!({}),
        ))
        .await
        .unwrap_err();
    assert!(
        matches!(err, DriverError::Infra(ref m) if m.contains("not a finished local build")),
        "{err:?}"
    );
}

/// Just under the 64 KiB limit on a job's input (`sless_domain::job::MAX_INPUT_BYTES`),
/// the input reaches the handler whole: through a file in its sandbox, not
/// one environment string.
#[tokio::test]
async fn an_input_just_under_the_apis_limit_arrives_whole() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path());
    let k = key("big-input");
    let artifact = python_function(&driver, &k).await;
    let repeat = 6_500;
    let input = json!({"blob": "0123456789".repeat(repeat), "repeat": repeat});
    let body = input.to_string().len();
    let limit = sless_domain::job::MAX_INPUT_BYTES;
    assert!(body <= limit && body > limit - 2_000, "{body} bytes");
    let out = driver
        .run_job(job(
            &k,
            "job/sless-test/big-input",
            Runtime::Python311,
            "handler.intact",
            &artifact,
            input,
        ))
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(last_line(&out), json!({"intact": true, "body": body}));
}
