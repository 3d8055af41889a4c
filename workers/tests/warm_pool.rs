//! The local driver's warm pool: deploys and jobs take a started process,
//! which serves that function alone, as a uid of its own, with the build
//! read-only and the function's memory limit; the pool refills, replaces a
//! waiting process that dies, and ends its processes on shutdown.

use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use sless_domain::{FunctionKey, FunctionName, Namespace, Runtime};
use sless_sandbox::Identity;
use sless_testkit::eventually;
use sless_testkit::processes::{jailed_programs, mentioning, waiting_in_pool};
use sless_workers::driver::{Artifact, BuildRequest, DeployRequest, Driver, JobRequest};
use sless_workers::local::sandbox::TenantIds;
use sless_workers::local::{LocalDriver, LocalDriverConfig, WarmPool};

const DEADLINE: Duration = Duration::from_secs(20);
const TENANT: Identity = Identity {
    uid: 2_000_077,
    gid: 2_000_077,
};
const POOL_UIDS: (u32, u32) = (2_001_000_500, 100);

const PYTHON: &str = r#"
import os

def handle(event):
    try:
        open("/sless/function/code/new.txt", "w")
        wrote = "yes"
    except OSError as e:
        wrote = e.errno
    return {
        "uid": os.getuid(),
        "files": sorted(os.listdir("/sless/function/code")),
        "greeting": os.environ.get("GREETING"),
        "cwd": os.getcwd(),
        "wrote": wrote,
    }

def job(event):
    import resource
    return {"uid": os.getuid(), "input": event["json"], "greeting": os.environ.get("GREETING"),
            "cpu": resource.getrlimit(resource.RLIMIT_CPU)}
"#;

const NODE: &str =
    "exports.handle = () => ({ uid: process.getuid(), env: process.env.NODE_ENV });\n";

fn key(name: &str) -> FunctionKey {
    FunctionKey::new(
        Namespace::parse("pool-test").unwrap(),
        FunctionName::parse(name).unwrap(),
    )
}

fn driver(dir: &Path, python: u32, node: u32) -> LocalDriver {
    LocalDriver::new(LocalDriverConfig {
        python: std::env::var("SLESS_PYTHON").unwrap_or_else(|_| "python3".into()),
        env: std::env::vars().collect(),
        tenants: TenantIds::Shared(TENANT),
        warm_pool: WarmPool {
            python,
            node,
            uids: Some(POOL_UIDS),
        },
        ..LocalDriverConfig::new(dir)
    })
    .unwrap()
}

fn context(files: &[(&str, &str)]) -> Vec<u8> {
    let mut builder = tar::Builder::new(flate2::write::GzEncoder::new(
        Vec::new(),
        flate2::Compression::fast(),
    ));
    for (path, data) in files
        .iter()
        .copied()
        .chain([("Dockerfile", "FROM scratch\n")])
    {
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

async fn build(d: &LocalDriver, k: &FunctionKey, runtime: Runtime, file: (&str, &str)) -> Artifact {
    let sha = format!("{:064x}", rand_n());
    d.build(BuildRequest {
        key: k.clone(),
        version: 1,
        runtime,
        context_key: format!("contexts/{sha}.tar.gz"),
        context_sha256: sha,
        context: context(&[file]),
        built: None,
        log: Default::default(),
    })
    .await
    .unwrap()
}

fn rand_n() -> u64 {
    u64::from(std::process::id()) << 32 | u64::from(rand_u32())
}

fn rand_u32() -> u32 {
    uuid::Uuid::new_v4().as_u128() as u32
}

fn deploy(
    k: &FunctionKey,
    runtime: Runtime,
    artifact: &Artifact,
    env: &[(&str, &str)],
) -> DeployRequest {
    DeployRequest {
        key: k.clone(),
        version: 1,
        runtime,
        entrypoint: "handler.handle".into(),
        memory_mb: 96,
        timeout_sec: 30,
        env_vars: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        artifact: artifact.clone(),
        instances: 1,
    }
}

async fn call(endpoint: &str) -> Value {
    reqwest::Client::builder()
        .no_proxy()
        .build()
        .unwrap()
        .get(format!("{endpoint}/"))
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap()
}

/// The waiting processes' pids, once there are `n`.
async fn waiting(dir: &Path, n: usize) -> Vec<u32> {
    let needle = dir.to_str().unwrap().to_owned();
    eventually(&format!("{n} waiting processes"), DEADLINE, || {
        let needle = needle.clone();
        async move {
            let mut pids: Vec<u32> = waiting_in_pool(&needle).into_iter().map(|p| p.0).collect();
            pids.sort_unstable();
            (pids.len() == n).then_some(pids)
        }
    })
    .await
}

fn in_pool_range(uid: &Value) -> bool {
    uid.as_u64().is_some_and(|u| {
        (u64::from(POOL_UIDS.0)..u64::from(POOL_UIDS.0 + POOL_UIDS.1)).contains(&u)
    })
}

/// The memory limit of the cgroup `pid` is in: the directory of the
/// memory hierarchy whose `cgroup.procs` lists it.
fn memory_max(pid: u32) -> String {
    fn find(dir: &Path, pid: &str, depth: u32) -> Option<std::path::PathBuf> {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        if procs.lines().any(|l| l == pid) {
            return Some(dir.to_path_buf());
        }
        if depth == 0 {
            return None;
        }
        std::fs::read_dir(dir)
            .ok()?
            .flatten()
            .filter(|e| e.file_type().is_ok_and(|t| t.is_dir()))
            .find_map(|e| find(&e.path(), pid, depth - 1))
    }
    // cgroup v1's memory hierarchy, or the v2 tree.
    let (root, file) = match Path::new("/sys/fs/cgroup/memory").is_dir() {
        true => ("/sys/fs/cgroup/memory", "memory.limit_in_bytes"),
        false => ("/sys/fs/cgroup", "memory.max"),
    };
    let dir = find(Path::new(root), &pid.to_string(), 8).expect("its cgroup");
    std::fs::read_to_string(dir.join(file))
        .unwrap()
        .trim()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_takes_a_waiting_process_that_then_serves_that_function_alone() {
    let dir = tempfile::tempdir().unwrap();
    let d = driver(dir.path(), 2, 0);
    let before = waiting(dir.path(), 2).await;
    let uids: Vec<u32> = before
        .iter()
        .map(|pid| {
            let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
            let line = status
                .lines()
                .find(|l| l.starts_with("Uid:"))
                .unwrap()
                .to_owned();
            line.split_whitespace().nth(1).unwrap().parse().unwrap()
        })
        .collect();
    assert_ne!(
        uids[0], uids[1],
        "each waiting process has a uid of its own"
    );
    let needle = dir.path().to_str().unwrap();
    assert_eq!(
        mentioning(needle),
        vec![],
        "waiting sandboxes run no function"
    );

    let k = key("pooled");
    let artifact = build(&d, &k, Runtime::Python311, ("handler.py", PYTHON)).await;
    let deployed = d
        .deploy(deploy(
            &k,
            Runtime::Python311,
            &artifact,
            &[("GREETING", "hi")],
        ))
        .await
        .unwrap();
    let got = call(&deployed.endpoint).await;
    assert!(
        in_pool_range(&got["uid"]),
        "runs as a pool uid, not {TENANT:?}: {got}"
    );
    assert_eq!(
        got["files"],
        json!(["Dockerfile", "handler.py"]),
        "its own build: {got}"
    );
    assert_eq!(got["greeting"], "hi", "its own environment: {got}");
    assert_eq!(got["cwd"], "/sless/function/code", "{got}");
    assert_eq!(got["wrote"], libc::EROFS, "the build is read-only: {got}");

    // The function's process is one of those that waited, held to its
    // memory_mb.
    let programs = jailed_programs(dir.path().to_str().unwrap());
    assert_eq!(programs.len(), 1, "{programs:?}");
    let program = programs[0].0;
    assert!(before.contains(&program), "{program} was one of {before:?}");
    assert_eq!(mentioning(needle).len(), 1, "the function's sandbox");
    assert_eq!(memory_max(program), (96u64 << 20).to_string());

    // The pool refills with new processes; the taken one is never handed
    // out again: once removed, it is gone.
    let after = waiting(dir.path(), 2).await;
    assert!(!after.contains(&program), "{after:?}");
    d.remove(&k).await.unwrap();
    assert!(
        std::fs::metadata(format!("/proc/{program}")).is_err(),
        "the specialised process ended with its function"
    );
    assert_eq!(waiting(dir.path(), 2).await, after, "the waiting ones stay");

    d.shutdown().await;
    waiting(dir.path(), 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn instances_take_the_waiting_processes_and_the_rest_start_cold() {
    let dir = tempfile::tempdir().unwrap();
    let d = driver(dir.path(), 2, 0);
    let before = waiting(dir.path(), 2).await;
    let k = key("pooled-many");
    let artifact = build(&d, &k, Runtime::Python311, ("handler.py", PYTHON)).await;
    let deployed = d
        .deploy(DeployRequest {
            instances: 3,
            ..deploy(&k, Runtime::Python311, &artifact, &[("GREETING", "hi")])
        })
        .await
        .unwrap();
    assert_eq!(deployed.ready, 3);
    let mut pooled = 0;
    for endpoint in &deployed.instances {
        let got = call(endpoint).await;
        assert_eq!(got["greeting"], "hi", "{endpoint}: {got}");
        assert_eq!(got["files"], json!(["Dockerfile", "handler.py"]), "{got}");
        if in_pool_range(&got["uid"]) {
            pooled += 1;
        } else {
            assert_eq!(got["uid"], TENANT.uid, "started cold: {got}");
        }
    }
    assert_eq!(pooled, 2, "each waiting process serves an instance");
    // Each instance is a sandbox of its own, held to the function's
    // memory_mb; two of them waited in the pool.
    let programs = jailed_programs(dir.path().to_str().unwrap());
    assert_eq!(programs.len(), 3, "{programs:?}");
    for (program, _) in &programs {
        assert_eq!(memory_max(*program), (96u64 << 20).to_string());
    }
    let taken = programs.iter().filter(|(p, _)| before.contains(p)).count();
    assert_eq!(taken, 2, "{programs:?} {before:?}");
    d.shutdown().await;
    waiting(dir.path(), 0).await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_waiting_process_that_dies_is_replaced() {
    let dir = tempfile::tempdir().unwrap();
    let d = driver(dir.path(), 1, 0);
    let first = waiting(dir.path(), 1).await;
    // SAFETY: kill(2) of a process this test's driver started.
    unsafe { libc::kill(first[0] as i32, libc::SIGKILL) };
    let needle = dir.path().to_str().unwrap().to_owned();
    let replaced = eventually("another waiting process", DEADLINE, || {
        let needle = needle.clone();
        let first = first[0];
        async move {
            let pids: Vec<u32> = waiting_in_pool(&needle).into_iter().map(|p| p.0).collect();
            (pids.len() == 1 && pids[0] != first).then(|| pids[0])
        }
    })
    .await;
    assert_eq!(d.warm(Runtime::Python311), 1, "{replaced}");

    // The one that died is not handed to a deploy.
    let k = key("after-a-death");
    let artifact = build(&d, &k, Runtime::Python311, ("handler.py", PYTHON)).await;
    let deployed = d
        .deploy(deploy(&k, Runtime::Python311, &artifact, &[]))
        .await
        .unwrap();
    assert!(in_pool_range(&call(&deployed.endpoint).await["uid"]));
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_function_setting_what_the_interpreter_reads_at_start_starts_cold() {
    let dir = tempfile::tempdir().unwrap();
    let d = driver(dir.path(), 1, 0);
    let before = waiting(dir.path(), 1).await;
    let k = key("cold");
    let artifact = build(&d, &k, Runtime::Python311, ("handler.py", PYTHON)).await;
    let deployed = d
        .deploy(deploy(
            &k,
            Runtime::Python311,
            &artifact,
            &[("PYTHONHASHSEED", "0")],
        ))
        .await
        .unwrap();
    let got = call(&deployed.endpoint).await;
    assert_eq!(
        got["uid"], TENANT.uid,
        "started cold, as its namespace: {got}"
    );
    assert_eq!(
        waiting(dir.path(), 1).await,
        before,
        "the pool was not used"
    );
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_job_runs_in_a_waiting_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = driver(dir.path(), 1, 0);
    let before = waiting(dir.path(), 1).await;
    let k = key("pooled-job");
    let artifact = build(&d, &k, Runtime::Python311, ("handler.py", PYTHON)).await;
    let input = json!({"n": 7, "big": "x".repeat(20_000)});
    let out = d
        .run_job(JobRequest {
            key: k.clone(),
            run: "run-1".into(),
            version: 1,
            runtime: Runtime::Python311,
            entrypoint: "handler.job".into(),
            env_vars: BTreeMap::from([("GREETING".to_owned(), "hello".to_owned())]),
            memory_mb: 128,
            timeout: Duration::from_secs(30),
            artifact,
            event: json!({"method": "JOB", "path": "/", "query": {}, "headers": {},
                          "body": input.to_string(), "json": input}),
            invocation: None,
        })
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let line = out
        .stdout
        .text
        .trim_end()
        .lines()
        .last()
        .unwrap_or_default();
    let last: Value = serde_json::from_str(line).unwrap_or_else(|e| panic!("{e}: {line:.300}"));
    assert!(in_pool_range(&last["uid"]), "{last}");
    assert_eq!(last["input"], input);
    assert_eq!(last["greeting"], "hello");
    assert_eq!(last["cpu"], json!([31, 36]), "its timeout as CPU time");
    let after = waiting(dir.path(), 1).await;
    assert_ne!(
        after, before,
        "the waiting process ran the job and another waits now"
    );
    d.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_node_function_takes_a_waiting_node_process() {
    let dir = tempfile::tempdir().unwrap();
    let d = driver(dir.path(), 0, 1);
    waiting(dir.path(), 1).await;
    let k = key("pooled-node");
    let artifact = build(&d, &k, Runtime::Nodejs20, ("handler.js", NODE)).await;
    let deployed = d
        .deploy(deploy(&k, Runtime::Nodejs20, &artifact, &[]))
        .await
        .unwrap();
    let got = call(&deployed.endpoint).await;
    assert!(in_pool_range(&got["uid"]), "{got}");
    assert_eq!(got["env"], "production", "{got}");
    d.shutdown().await;
    waiting(dir.path(), 0).await;
}
