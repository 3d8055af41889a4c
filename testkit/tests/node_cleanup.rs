//! A real node leaves nothing behind when the test process that started it
//! is killed: not its programs, not containerd's shims, not a container,
//! not a mount, not the bridge, not the cgroup, not its directory; and the
//! next node may start only once all of that is gone (the reaper holds the
//! lock until then).
//!
//! A binary of its own: its test starts a child process of this binary
//! that starts the node and a pod, kills that child with SIGKILL, and
//! looks. The cluster tier: runs with `SLESS_TEST_CLUSTER=1`.

use std::io::{BufRead, BufReader};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sless_testkit::kube::{BRIDGE, Cluster, NODE_CGROUP, NODE_LOCK};

const DEADLINE: Duration = Duration::from_secs(120);
const CHILD: &str = "SLESS_TEST_NODE_CHILD";

/// The child's part: a node with a running pod; says where the node is,
/// then waits to be killed.
fn child() {
    let cluster = Cluster::shared();
    let pod = format!(
        "apiVersion: v1\nkind: Pod\nmetadata: {{name: left, namespace: default}}\nspec:\n  \
         containers:\n  - name: c\n    image: {}\n",
        cluster.image("pause")
    );
    let plane = cluster.plane();
    plane.kubectl_ok(&["apply", "-f", "-"], Some(&pod));
    plane.kubectl_ok(
        &[
            "wait",
            "--for=condition=Ready",
            "pod/left",
            "--timeout=120s",
        ],
        None,
    );
    println!("node-dir {}", cluster.dir().display());
    loop {
        std::thread::park();
    }
}

/// Whether any process's command line names `needle`.
fn processes_naming(needle: &str) -> Vec<String> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        if let Ok(cmdline) = std::fs::read(entry.path().join("cmdline")) {
            let text = String::from_utf8_lossy(&cmdline).replace('\0', " ");
            if text.contains(needle) {
                found.push(text);
            }
        }
    }
    found
}

/// Whether the node's lock is free (the reaper has finished).
fn lock_free() -> bool {
    let Ok(file) = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(NODE_LOCK)
    else {
        return false;
    };
    // SAFETY: flock on a descriptor this function owns; it is released
    // when `file` is dropped.
    unsafe { libc::flock(file.as_raw_fd(), libc::LOCK_EX | libc::LOCK_NB) == 0 }
}

#[test]
fn a_killed_test_process_leaves_nothing_of_its_node() {
    if std::env::var_os(CHILD).is_some() {
        child();
    }
    if !std::env::var("SLESS_TEST_CLUSTER").is_ok_and(|v| v == "1") {
        eprintln!("the cluster tier runs with SLESS_TEST_CLUSTER=1 (scripts/test-cluster)");
        return;
    }
    let mut child = Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "a_killed_test_process_leaves_nothing_of_its_node",
            "--nocapture",
        ])
        .env(CHILD, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .unwrap();
    let mut dir = None;
    for line in BufReader::new(child.stdout.take().unwrap()).lines() {
        let line = line.unwrap();
        if let Some(d) = line.strip_prefix("node-dir ") {
            dir = Some(PathBuf::from(d));
            break;
        }
    }
    let dir = dir.expect("the child started a node");
    let dir_text = dir.display().to_string();
    assert!(
        !processes_naming(&dir_text).is_empty(),
        "the node runs before the kill"
    );
    assert!(Path::new("/sys/class/net").join(BRIDGE).exists());

    child.kill().unwrap();
    child.wait().unwrap();
    let started = Instant::now();
    while !lock_free() {
        assert!(
            started.elapsed() < DEADLINE,
            "the reaper still holds the node's lock after {DEADLINE:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    eprintln!("the node was cleaned away in {:?}", started.elapsed());

    assert_eq!(processes_naming(&dir_text), Vec::<String>::new());
    let mounts = std::fs::read_to_string("/proc/mounts").unwrap();
    let left: Vec<&str> = mounts.lines().filter(|l| l.contains(&dir_text)).collect();
    assert_eq!(left, Vec::<&str>::new(), "mounts left");
    assert!(!dir.exists(), "{} is left", dir.display());
    assert!(
        !Path::new("/sys/class/net").join(BRIDGE).exists(),
        "the bridge {BRIDGE} is left"
    );
    let cgroup = Path::new("/sys/fs/cgroup/pids").join(NODE_CGROUP);
    assert!(!cgroup.exists(), "{} is left", cgroup.display());
    let rules = std::process::Command::new("iptables-save")
        .output()
        .unwrap();
    let rules = String::from_utf8_lossy(&rules.stdout);
    let left: Vec<&str> = rules
        .lines()
        .filter(|l| l.contains("sless-test-") || l.contains("KUBE-"))
        .collect();
    assert_eq!(left, Vec::<&str>::new(), "iptables rules left");
}
