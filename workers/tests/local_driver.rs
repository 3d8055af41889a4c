//! The local driver against a real Python interpreter (`python3`, or
//! `SLESS_PYTHON`); nodejs20 and go1.23 are in `local_driver/runtimes.rs`.

#[path = "local_driver/runtimes.rs"]
mod runtimes;

use std::collections::BTreeMap;
use std::path::Path;
use std::time::{Duration, Instant};

use sless_domain::{FunctionKey, FunctionName, Namespace, Runtime};
use sless_workers::driver::{Artifact, BuildRequest, DeployRequest, Driver, DriverError};
use sless_workers::local::{LocalDriver, LocalDriverConfig};

const DEADLINE: Duration = Duration::from_secs(15);

fn key(name: &str) -> FunctionKey {
    FunctionKey::new(
        Namespace::parse("sless-test").unwrap(),
        FunctionName::parse(name).unwrap(),
    )
}

fn driver(dir: &Path, health_timeout: Duration) -> LocalDriver {
    LocalDriver::new(LocalDriverConfig {
        python: std::env::var("SLESS_PYTHON").unwrap_or_else(|_| "python3".into()),
        health_timeout,
        env: std::env::vars().collect(),
        ..LocalDriverConfig::new(dir)
    })
    .unwrap()
}

fn file_header(size: usize) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_size(size as u64);
    header.set_mode(0o644);
    header.set_entry_type(tar::EntryType::Regular);
    header
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
        .chain([("Dockerfile", "FROM python:3.11-slim\n")]);
    for (path, data) in all {
        let mut header = file_header(data.len());
        builder
            .append_data(&mut header, path, data.as_bytes())
            .unwrap();
    }
    builder.into_inner().unwrap().finish().unwrap()
}

/// A tar.gz with one entry whose name is written raw (bypassing the checks
/// of `tar::Builder`).
fn raw_context(name: &str, kind: tar::EntryType) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    let data = b"print('pwned')\n";
    let mut header = file_header(if kind == tar::EntryType::Regular {
        data.len()
    } else {
        0
    });
    header.set_entry_type(kind);
    header.as_old_mut().name[..name.len()].copy_from_slice(name.as_bytes());
    if matches!(kind, tar::EntryType::Symlink | tar::EntryType::Link) {
        header.set_link_name("/etc/passwd").unwrap();
    }
    header.set_cksum();
    let body: &[u8] = if kind == tar::EntryType::Regular {
        data
    } else {
        &[]
    };
    builder.append(&header, body).unwrap();
    builder.into_inner().unwrap().finish().unwrap()
}

fn sha(n: u32) -> String {
    format!("{n:064x}")
}

fn build_req(key: &FunctionKey, version: u32, sha: String, context: Vec<u8>) -> BuildRequest {
    BuildRequest {
        key: key.clone(),
        version,
        runtime: Runtime::Python311,
        context_key: format!("contexts/{sha}.tar.gz"),
        context_sha256: sha,
        context,
        built: None,
        log: Default::default(),
    }
}

fn deploy_req(key: &FunctionKey, version: u32, artifact: Artifact) -> DeployRequest {
    DeployRequest {
        key: key.clone(),
        version,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: BTreeMap::new(),
        artifact,
        instances: 1,
    }
}

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks whether the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

async fn eventually(what: &str, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < DEADLINE, "timed out waiting until {what}");
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
}

async fn get_text(url: &str) -> Option<String> {
    let resp = http().get(url).send().await.ok()?;
    resp.text().await.ok()
}

const RETURN_VERSION: &str =
    "def handle(event):\n    return 'v' + __import__('os').environ['SLESS_VERSION']\n";

#[tokio::test(flavor = "multi_thread")]
async fn builds_deploys_and_serves_a_python_function() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path(), Duration::from_secs(30));
    let k = key("hello");
    let code = "import os\n\ndef handle(event):\n    return {'hello': os.environ['GREETING'], 'path': event['path'], 'function': os.environ['SLESS_FUNCTION']}\n";
    let artifact = driver
        .build(build_req(&k, 1, sha(1), context(&[("handler.py", code)])))
        .await
        .unwrap();
    assert!(
        Path::new(&artifact.reference)
            .join("code/handler.py")
            .is_file()
    );
    assert!(
        Path::new(&artifact.reference)
            .join("code/Dockerfile")
            .is_file()
    );

    let mut req = deploy_req(&k, 1, artifact.clone());
    req.env_vars.insert("GREETING".into(), "world".into());
    let dep = driver.deploy(req.clone()).await.unwrap();
    assert_eq!(dep.version, 1);
    assert_eq!(dep.artifact, artifact);
    assert!(
        dep.endpoint.starts_with("http://127.0.0.1:"),
        "{}",
        dep.endpoint
    );

    let body: serde_json::Value = http()
        .get(format!("{}/some/path", dep.endpoint))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(
        body,
        serde_json::json!({"hello": "world", "path": "/some/path", "function": "sless-test/hello"})
    );
    assert_eq!(driver.status(&k).await, Some(dep.clone()));

    // Deploying the same thing again keeps the running process.
    let pid = driver.pid(&k).unwrap();
    assert_eq!(driver.deploy(req).await.unwrap(), dep);
    assert_eq!(driver.pid(&k), Some(pid));

    // The function writes its access log line after its answer; the
    // driver appends what it prints to the version's log.
    let log = dir.path().join("logs/sless-test/hello/v1.log");
    eventually("the call is in the function's log", async || {
        std::fs::read_to_string(&log).is_ok_and(|l| l.contains("GET /some/path 200"))
    })
    .await;
    driver.shutdown().await;
}

/// A function's socket is sless's: bound before its process starts and
/// handed to it, kept while the process is down. After a crash nobody can
/// take the port (a squatter would receive every call to the function),
/// and a call made meanwhile waits for the restarted process.
#[tokio::test(flavor = "multi_thread")]
async fn a_crashed_functions_port_stays_sless_and_its_calls_wait_for_the_restart() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path(), Duration::from_secs(30));
    let k = key("fragile");
    // Each start of the process has a mark of its own (a pid in a jail is
    // always the same).
    let code = "import os\n\nSTART = os.urandom(8).hex()\n\ndef handle(event):\n    if event['path'] == '/crash':\n        os._exit(7)\n    return 'the function ' + START\n";
    let artifact = driver
        .build(build_req(&k, 1, sha(2), context(&[("handler.py", code)])))
        .await
        .unwrap();
    let dep = driver.deploy(deploy_req(&k, 1, artifact)).await.unwrap();
    let first = get_text(&dep.endpoint).await.unwrap();
    assert!(first.starts_with("the function "), "{first}");
    let port: u16 = dep.endpoint.rsplit(':').next().unwrap().parse().unwrap();
    let pid = driver.pid(&k).unwrap();

    assert_eq!(get_text(&format!("{}/crash", dep.endpoint)).await, None);
    eventually("the process is down", async || driver.pid(&k).is_none()).await;
    // Down, its port is still held: another process cannot bind it.
    let squatter = std::net::TcpListener::bind(("127.0.0.1", port));
    assert!(
        squatter.is_err(),
        "the port of a crashed function was free to take"
    );
    // A call made while it is down waits in the socket's backlog and is
    // answered by the restarted process, on the same endpoint.
    let again = get_text(&dep.endpoint).await.unwrap();
    assert!(
        again.starts_with("the function ") && again != first,
        "{again}"
    );
    assert_eq!(driver.restarts(&k), 1);
    assert_ne!(driver.pid(&k), Some(pid));
    assert_eq!(driver.status(&k).await, Some(dep));
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn builds_are_cached_by_context_sha() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path(), Duration::from_secs(30));
    let k = key("cached");
    let first = driver
        .build(build_req(
            &k,
            1,
            sha(7),
            context(&[("handler.py", RETURN_VERSION)]),
        ))
        .await
        .unwrap();
    let log = Path::new(&first.reference).join("build.log");
    let mtime = std::fs::metadata(&log).unwrap().modified().unwrap();

    // Not even looked at: the build exists.
    let started = Instant::now();
    let second = driver
        .build(build_req(&k, 2, sha(7), b"not a tar.gz".to_vec()))
        .await
        .unwrap();
    assert_eq!(second, first);
    assert!(started.elapsed() < Duration::from_secs(1));
    assert_eq!(std::fs::metadata(&log).unwrap().modified().unwrap(), mtime);

    // Only the finished build is there, no temporary directories.
    let entries: Vec<_> = std::fs::read_dir(dir.path().join("builds/sless-test/cached"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(entries, vec![sha(7)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn an_import_failure_fails_the_deploy_with_the_traceback() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path(), Duration::from_secs(30));
    let k = key("broken");
    let code = "x = 1 / 0\n\ndef handle(event):\n    return x\n";
    let artifact = driver
        .build(build_req(&k, 1, sha(2), context(&[("handler.py", code)])))
        .await
        .unwrap();
    match driver.deploy(deploy_req(&k, 1, artifact)).await {
        Err(DriverError::Deploy { message, log_tail }) => {
            assert!(message.contains("exited with code 3"), "{message}");
            assert!(log_tail.contains("ZeroDivisionError"), "{log_tail}");
        }
        other => panic!("expected a deploy error, got {other:?}"),
    }
    assert_eq!(driver.status(&k).await, None);
    assert_eq!(driver.pid(&k), None);
}

#[tokio::test(flavor = "multi_thread")]
async fn a_function_that_never_gets_healthy_times_out() {
    let dir = tempfile::tempdir().unwrap();
    // Long enough for the interpreter to start and print even when the
    // machine is busy.
    let driver = driver(dir.path(), Duration::from_secs(3));
    let k = key("slow");
    let code = "import time\nprint('warming up')\ntime.sleep(60)\n\ndef handle(event):\n    return 'late'\n";
    let artifact = driver
        .build(build_req(&k, 1, sha(3), context(&[("handler.py", code)])))
        .await
        .unwrap();
    match driver.deploy(deploy_req(&k, 1, artifact)).await {
        Err(DriverError::Deploy { message, log_tail }) => {
            assert!(message.contains("not healthy within 3 s"), "{message}");
            assert!(log_tail.contains("warming up"), "{log_tail}");
        }
        other => panic!("expected a deploy error, got {other:?}"),
    }
    assert_eq!(driver.status(&k).await, None);
}

#[tokio::test(flavor = "multi_thread")]
async fn unsafe_build_contexts_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path(), Duration::from_secs(30));
    let k = key("evil");
    let cases = [
        (
            "../evil.py",
            tar::EntryType::Regular,
            "unsafe path: ../evil.py",
        ),
        ("code/../../evil.py", tar::EntryType::Regular, "unsafe path"),
        (
            "/tmp/evil.py",
            tar::EntryType::Regular,
            "unsafe path: /tmp/evil.py",
        ),
        (
            "link.py",
            tar::EntryType::Symlink,
            "neither a file nor a directory",
        ),
        (
            "hard.py",
            tar::EntryType::Link,
            "neither a file nor a directory",
        ),
    ];
    for (n, (name, kind, why)) in cases.into_iter().enumerate() {
        let req = build_req(&k, 1, sha(100 + n as u32), raw_context(name, kind));
        match driver.build(req).await {
            Err(DriverError::Build { message, .. }) => {
                assert!(message.contains(why), "{name}: {message}")
            }
            other => panic!("{name}: expected a build error, got {other:?}"),
        }
    }
    assert!(!dir.path().join("builds/sless-test/evil.py").exists());
    assert!(!dir.path().join("builds/sless-test/evil/evil.py").exists());
    let left: Vec<_> = std::fs::read_dir(dir.path().join("builds/sless-test/evil"))
        .unwrap()
        .collect();
    assert!(left.is_empty(), "{left:?}");
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_process_is_restarted() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path(), Duration::from_secs(30));
    let k = key("phoenix");
    let artifact = driver
        .build(build_req(
            &k,
            1,
            sha(4),
            context(&[("handler.py", RETURN_VERSION)]),
        ))
        .await
        .unwrap();
    let dep = driver.deploy(deploy_req(&k, 1, artifact)).await.unwrap();
    assert_eq!(get_text(&dep.endpoint).await.as_deref(), Some("v1"));
    let pid = driver.pid(&k).unwrap();
    assert_eq!(driver.restarts(&k), 0);

    // SAFETY: kills the function process this test started.
    assert_eq!(unsafe { libc::kill(pid as i32, libc::SIGKILL) }, 0);
    eventually("the function was restarted and answers again", async || {
        driver.restarts(&k) == 1
            && driver.pid(&k).is_some_and(|p| p != pid)
            && get_text(&dep.endpoint).await.as_deref() == Some("v1")
    })
    .await;
    assert_eq!(driver.status(&k).await, Some(dep));
    let log = std::fs::read_to_string(dir.path().join("logs/sless-test/phoenix/v1.log")).unwrap();
    assert!(log.contains("killed by signal 9"), "{log}");
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_version_replaces_the_old_one_once_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path(), Duration::from_secs(30));
    let k = key("versions");
    let ctx = context(&[("handler.py", RETURN_VERSION)]);
    let a1 = driver
        .build(build_req(&k, 1, sha(5), ctx.clone()))
        .await
        .unwrap();
    let v1 = driver.deploy(deploy_req(&k, 1, a1)).await.unwrap();
    assert_eq!(get_text(&v1.endpoint).await.as_deref(), Some("v1"));
    let pid1 = driver.pid(&k).unwrap();

    // A broken v2 leaves v1 running.
    let broken = context(&[("handler.py", "raise ImportError('nope')\n")]);
    let bad = driver
        .build(build_req(&k, 2, sha(6), broken))
        .await
        .unwrap();
    assert!(driver.deploy(deploy_req(&k, 2, bad)).await.is_err());
    assert_eq!(driver.pid(&k), Some(pid1));
    assert_eq!(driver.status(&k).await, Some(v1.clone()));

    let a2 = driver.build(build_req(&k, 2, sha(8), ctx)).await.unwrap();
    let v2 = driver.deploy(deploy_req(&k, 2, a2)).await.unwrap();
    assert_eq!(v2.version, 2);
    assert_eq!(get_text(&v2.endpoint).await.as_deref(), Some("v2"));
    assert_eq!(driver.status(&k).await, Some(v2));
    eventually("the v1 process is gone", async || !alive(pid1)).await;
    assert_ne!(driver.pid(&k), Some(pid1));
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn requirements_are_installed_with_pip() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path(), Duration::from_secs(30));
    let k = key("deps");

    let nothing = "# nothing to install\n--no-index\n";
    let ok = driver
        .build(build_req(
            &k,
            1,
            sha(9),
            context(&[
                ("handler.py", RETURN_VERSION),
                ("requirements.txt", nothing),
            ]),
        ))
        .await
        .unwrap();
    assert!(Path::new(&ok.reference).join("deps").is_dir());
    assert!(Path::new(&ok.reference).join(".complete").is_file());

    let missing = "--no-index\nnonexistent-package-xyz==1.0\n";
    let failed = driver
        .build(build_req(
            &k,
            2,
            sha(10),
            context(&[
                ("handler.py", RETURN_VERSION),
                ("requirements.txt", missing),
            ]),
        ))
        .await;
    match failed {
        Err(DriverError::Build { message, log_tail }) => {
            assert_eq!(message, "pip install failed (exit 1)");
            assert!(log_tail.contains("nonexistent-package-xyz"), "{log_tail}");
        }
        other => panic!("expected a build error, got {other:?}"),
    }
    let left: Vec<_> = std::fs::read_dir(dir.path().join("builds/sless-test/deps"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    assert_eq!(left, vec![sha(9)]);
}

#[tokio::test(flavor = "multi_thread")]
async fn remove_and_shutdown_stop_the_processes() {
    let dir = tempfile::tempdir().unwrap();
    let driver = driver(dir.path(), Duration::from_secs(30));
    let mut pids = Vec::new();
    for (n, name) in ["one", "two", "three"].into_iter().enumerate() {
        let k = key(name);
        let ctx = context(&[("handler.py", RETURN_VERSION)]);
        let artifact = driver
            .build(build_req(&k, 1, sha(20 + n as u32), ctx))
            .await
            .unwrap();
        driver.deploy(deploy_req(&k, 1, artifact)).await.unwrap();
        pids.push(driver.pid(&k).unwrap());
    }

    driver.remove(&key("one")).await.unwrap();
    eventually("the removed function's process is gone", async || {
        !alive(pids[0])
    })
    .await;
    assert_eq!(driver.status(&key("one")).await, None);
    assert_eq!(driver.pid(&key("one")), None);
    driver.remove(&key("one")).await.unwrap(); // nothing runs: still fine
    assert!(alive(pids[1]) && alive(pids[2]));

    driver.shutdown().await;
    eventually("every process is gone", async || {
        pids.iter().all(|&pid| !alive(pid))
    })
    .await;
    assert_eq!(driver.status(&key("two")).await, None);
}

/// Set for the re-executed test binary in `functions_die_with_a_killed_worker`.
const CHILD_ENV: &str = "SLESS_TEST_PDEATHSIG_CHILD_DIR";

#[tokio::test(flavor = "multi_thread")]
async fn functions_die_with_a_killed_worker() {
    let dir = tempfile::tempdir().unwrap();
    // Run `worker_that_gets_killed` in a separate process that deploys a
    // function and then kills itself with SIGKILL.
    let output = tokio::process::Command::new(std::env::current_exe().unwrap())
        .args(["--exact", "worker_that_gets_killed", "--nocapture"])
        .env(CHILD_ENV, dir.path())
        .output()
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let pid: u32 = stdout
        .lines()
        .find_map(|l| l.strip_prefix("FUNCTION_PID="))
        .unwrap_or_else(|| {
            panic!(
                "no pid from the worker: {stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        })
        .parse()
        .unwrap();
    eventually("the function of the killed worker is gone", async || {
        !alive(pid)
    })
    .await;
}

/// Only does something when run by `functions_die_with_a_killed_worker`.
#[tokio::test(flavor = "multi_thread")]
async fn worker_that_gets_killed() {
    let Some(dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let driver = driver(Path::new(&dir), Duration::from_secs(30));
    let k = key("orphan");
    let ctx = context(&[("handler.py", RETURN_VERSION)]);
    let artifact = driver.build(build_req(&k, 1, sha(30), ctx)).await.unwrap();
    driver.deploy(deploy_req(&k, 1, artifact)).await.unwrap();
    let pid = driver.pid(&k).unwrap();
    println!("FUNCTION_PID={pid}");
    use std::io::Write;
    std::io::stdout().flush().unwrap();
    // SAFETY: the test process kills itself, as kill -9 of a worker would.
    unsafe {
        libc::kill(libc::getpid(), libc::SIGKILL);
    }
}
