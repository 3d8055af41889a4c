//! Jails on this machine, with the real bwrap and setpriv (sless runs as
//! root here, as the sandbox needs).

use std::io::Read;
use std::path::PathBuf;
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};

use sless_sandbox::{Identity, Jail, Mount, Prepared, Sandbox, Sandboxed};

const TENANT: Identity = Identity {
    uid: 2_000_123,
    gid: 2_000_123,
};

fn sandbox() -> Sandbox {
    Sandbox::locate().expect("bwrap and setpriv are installed (scripts/test installs bubblewrap)")
}

struct Ran {
    status: ExitStatus,
    stdout: String,
    stderr: String,
    sandboxed: Sandboxed,
}

fn shell(script: &str) -> Jail {
    let mut jail = Jail::untrusted(TENANT, "/bin/sh");
    jail.args = vec!["-c".into(), script.into()];
    jail.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    jail.label = "test".into();
    jail
}

fn run(sandbox: &Sandbox, jail: &Jail) -> Ran {
    let Prepared {
        mut command,
        pending,
    } = sandbox.prepare(jail).unwrap();
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut sandboxed = pending.spawned(Some(child.id()));
    let _ = sandboxed.sandbox_pid();
    let mut stdout = String::new();
    let mut stderr = String::new();
    child
        .stdout
        .take()
        .unwrap()
        .read_to_string(&mut stdout)
        .unwrap();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    let status = child.wait().unwrap();
    Ran {
        status,
        stdout,
        stderr,
        sandboxed,
    }
}

fn private_dir(name: &str) -> tempfile::TempDir {
    // Private to root, as `mktemp -d` makes a data directory.
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::Builder::new()
        .prefix(name)
        .permissions(std::fs::Permissions::from_mode(0o700))
        .tempdir()
        .unwrap();
    let meta = std::fs::metadata(dir.path()).unwrap();
    assert_eq!(meta.permissions().mode() & 0o777, 0o700);
    dir
}

#[test]
fn the_machine_check_passes() {
    sandbox().check().unwrap();
}

#[test]
fn a_jail_runs_as_its_user_without_capabilities_in_namespaces_of_its_own() {
    let s = sandbox();
    let ran = run(
        &s,
        &shell(
            "id -u; id -g; id -G; grep -E '^Cap(Prm|Eff|Bnd|Amb):|^NoNewPrivs:' /proc/self/status; \
             echo pid=$$; hostname; ls /proc | grep -cE '^[0-9]+$'",
        ),
    );
    assert!(ran.status.success(), "{}", ran.stderr);
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_eq!(lines[0], "2000123");
    assert_eq!(lines[1], "2000123");
    assert_eq!(lines[2], "2000123", "no supplementary groups");
    for cap in &lines[3..7] {
        assert!(cap.ends_with("0000000000000000"), "{cap}");
    }
    assert_eq!(lines[7], "NoNewPrivs:\t1");
    assert_eq!(
        lines[8], "pid=2",
        "the shell is the first process after init"
    );
    assert_eq!(lines[9], "sless");
    let visible: u32 = lines[10].parse().unwrap();
    assert!(
        visible <= 4,
        "only the jail's processes are visible: {visible}"
    );
}

#[test]
fn a_jail_sees_only_the_system_and_its_own_mounts() {
    let s = sandbox();
    let data = private_dir("sless-jail-data-");
    let own = data.path().join("builds/ns-a/f/sha");
    let other = data.path().join("builds/ns-b/g/sha");
    std::fs::create_dir_all(&own).unwrap();
    std::fs::create_dir_all(&other).unwrap();
    std::fs::write(own.join("mine.txt"), "mine").unwrap();
    std::fs::write(other.join("theirs.txt"), "theirs").unwrap();
    std::fs::write(data.path().join("secrets.json"), "{\"jwt\": \"x\"}").unwrap();
    let mut jail = shell(&format!(
        "cat /sless/function/mine.txt; echo; \
         for p in /etc/shadow /root /home {data} {data}/secrets.json {other} /sys/fs/cgroup; do \
           if test -e $p; then echo \"visible $p\"; fi; done; \
         grep -c . /etc/passwd; \
         touch /sless/function/x 2>/dev/null && echo wrote-own-build; \
         touch /usr/x /etc/x /x 2>/dev/null && echo wrote-system; \
         touch /tmp/x && echo wrote-tmp",
        data = data.path().display(),
        other = other.display(),
    ));
    jail.mounts = vec![Mount::ReadOnly {
        source: own.clone(),
        dest: PathBuf::from("/sless/function"),
    }];
    let ran = run(&s, &jail);
    assert!(ran.status.success(), "{}", ran.stderr);
    assert_eq!(
        ran.stdout, "mine\n3\nwrote-tmp\n",
        "the jail saw or wrote more than its own: {}",
        ran.stderr
    );
}

#[test]
fn tmp_is_bounded() {
    let s = sandbox();
    let mut jail = shell(
        "head -c 3145728 /dev/zero > /tmp/big 2>/dev/null && echo wrote-3m; rm -f /tmp/big; \
         head -c 3145728 /dev/zero > /dev/shm/big 2>/dev/null && echo wrote-shm; \
         head -c 1048576 /dev/zero > /tmp/small && echo wrote-1m",
    );
    jail.tmp_bytes = 2 << 20;
    let ran = run(&s, &jail);
    assert_eq!(ran.stdout, "wrote-1m\n", "{}", ran.stderr);
}

#[test]
fn new_user_namespaces_are_refused() {
    let s = sandbox();
    let ran = run(
        &s,
        &shell("unshare --user --map-root-user id -u 2>&1; echo exit=$?"),
    );
    assert!(
        ran.stdout.contains("Operation not permitted") && ran.stdout.contains("exit=1"),
        "{}",
        ran.stdout
    );
}

#[test]
fn memory_past_the_limit_is_killed_and_counted() {
    let s = sandbox();
    if !s.limits_mechanism().cgroups() {
        panic!("this machine has writable cgroups; the test expects them");
    }
    let mut jail = Jail::untrusted(TENANT, "/usr/bin/python3");
    jail.args = vec![
        "-c".into(),
        "x = bytearray(200 << 20)\nx[::4096] = b'x' * len(x[::4096])\nprint('survived')".into(),
    ];
    jail.limits.memory_bytes = Some(64 << 20);
    jail.label = "oom".into();
    let ran = run(&s, &jail);
    assert!(!ran.status.success());
    assert_eq!(
        ran.status.code(),
        Some(128 + libc::SIGKILL),
        "{}",
        ran.stderr
    );
    assert!(!ran.stdout.contains("survived"));
    let group = ran.sandboxed.cgroup.as_ref().unwrap();
    assert!(group.oom_kills() >= 1, "the kill was counted");
    assert!(group.memory_peak().unwrap() <= 64 << 20);
}

#[test]
fn processes_are_bounded() {
    let s = sandbox();
    let mut jail = Jail::untrusted(TENANT, "/usr/bin/python3");
    jail.args = vec![
        "-c".into(),
        "import os, signal\n\
         kids = []\n\
         for _ in range(60):\n    \
             try:\n        pid = os.fork()\n    \
             except OSError:\n        break\n    \
             if pid == 0:\n        signal.pause()\n        os._exit(0)\n    \
             kids.append(pid)\n\
         print(len(kids))\n\
         for k in kids:\n    os.kill(k, signal.SIGKILL)\n"
            .into(),
    ];
    jail.limits.processes = Some(20);
    let ran = run(&s, &jail);
    let started: u32 = ran.stdout.trim().parse().expect(&ran.stderr);
    assert!(started < 20, "at most the limit ran: {started}");
    assert!(started >= 10, "it could start some: {started}");
}

#[test]
fn files_past_the_size_limit_cannot_be_written() {
    let s = sandbox();
    let mut jail =
        shell("head -c 2097152 /dev/zero > /tmp/big 2>/dev/null; echo $?; stat -c %s /tmp/big");
    jail.limits.file_bytes = Some(1 << 20);
    let ran = run(&s, &jail);
    let lines: Vec<&str> = ran.stdout.lines().collect();
    assert_ne!(lines[0], "0", "the write failed");
    assert_eq!(lines[1], "1048576");
}

#[test]
fn everything_a_program_starts_ends_with_it() {
    let s = sandbox();
    let marker = format!("sless-jail-daemon-{}", std::process::id());
    // A daemon the classic way: fork, setsid, fork again, outlive the parent.
    let mut jail = Jail::untrusted(TENANT, "/usr/bin/python3");
    jail.args = vec![
        "-c".into(),
        format!(
            "import os, time\n\
             if os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        \
             os.execv('/bin/sh', ['sh', '-c', 'sleep 300; true', '{marker}'])\n    os._exit(0)\n\
             def alive():\n    \
                 return [p for p in os.listdir('/proc') if p.isdigit() and '{marker}' in open('/proc/%s/cmdline' % p).read()]\n\
             deadline = time.monotonic() + 5\n\
             while not alive() and time.monotonic() < deadline:\n    time.sleep(0.01)\n\
             print('parent done', len(alive()) > 0)"
        )
        .into(),
    ];
    let ran = run(&s, &jail);
    assert_eq!(
        ran.stdout, "parent done True\n",
        "the daemon ran: {}",
        ran.stderr
    );
    eventually(
        "the daemon ends with its program",
        Duration::from_secs(5),
        || processes_mentioning(&marker).is_empty(),
    );
}

#[test]
fn a_jail_dies_with_the_thread_that_spawned_it() {
    let s = sandbox();
    let marker = format!("sless-jail-orphan-{}", std::process::id());
    let mut jail = shell("sleep 300; true");
    // `sh -c CMD NAME`: NAME is the shell's $0, in its command line.
    jail.args.push(marker.clone().into());
    let s2 = s.clone();
    let marker2 = marker.clone();
    let spawned = std::thread::spawn(move || {
        let Prepared {
            mut command,
            pending,
        } = s2.prepare(&jail).unwrap();
        command.stdin(Stdio::null()).stdout(Stdio::null());
        let child = command.spawn().unwrap();
        let mut sandboxed = pending.spawned(Some(child.id()));
        let pid = sandboxed.sandbox_pid();
        // The thread ends once the program runs.
        running_as_tenant(&mut sandboxed);
        eventually("the program runs", Duration::from_secs(5), || {
            !processes_mentioning(&marker2).is_empty()
        });
        (pid, sandboxed, child)
    });
    let (pid, _sandboxed, mut bwrap) = spawned.join().unwrap();
    assert!(pid.is_some());
    eventually(
        "the jail ends with its spawner",
        Duration::from_secs(5),
        || processes_mentioning(&marker).is_empty(),
    );
    let status = bwrap.wait().unwrap();
    use std::os::unix::process::ExitStatusExt;
    assert_eq!(
        status.signal(),
        Some(libc::SIGKILL),
        "bwrap got its parent-death signal"
    );
}

#[test]
fn the_program_pid_is_the_child_of_the_jails_init() {
    let s = sandbox();
    let Prepared {
        mut command,
        pending,
    } = s.prepare(&shell("read line; echo got $line")).unwrap();
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    let mut sandboxed = pending.spawned(Some(child.id()));
    let init = sandboxed.sandbox_pid().unwrap();
    let program = running_as_tenant(&mut sandboxed);
    assert_ne!(init, program);
    // SIGTERM to the program ends the jail.
    // SAFETY: kill(2) of a pid we just read.
    unsafe { libc::kill(program as i32, libc::SIGTERM) };
    let status = child.wait().unwrap();
    assert_eq!(status.code(), Some(128 + libc::SIGTERM));
}

#[test]
fn a_service_sees_all_of_etc_and_writes_only_its_own_directory() {
    let s = sandbox();
    let dir = private_dir("sless-jail-service-");
    let mut jail = Jail::service(
        Identity {
            uid: 65534,
            gid: 65534,
        },
        "/bin/sh",
    );
    jail.args = vec![
        "-c".into(),
        format!(
            "echo $$ > {d}/inside/pid; test -r /etc/passwd && echo etc; echo ok > {d}/inside/written",
            d = dir.path().display()
        )
        .into(),
    ];
    jail.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
    // nobody writes into its own directory inside a directory private to
    // root (0700), which it could not reach without the sandbox.
    let inside = dir.path().join("inside");
    std::fs::create_dir(&inside).unwrap();
    std::os::unix::fs::chown(&inside, Some(65534), Some(65534)).unwrap();
    jail.mounts = vec![Mount::ReadWrite {
        source: inside.clone(),
        dest: inside.clone(),
    }];
    let ran = run(&s, &jail);
    assert!(ran.status.success(), "{}", ran.stderr);
    assert_eq!(ran.stdout, "etc\n");
    let pid = std::fs::read_to_string(dir.path().join("inside/pid")).unwrap();
    assert_eq!(pid.trim(), "2", "the program follows the jail's init");
    assert!(dir.path().join("inside/written").exists());
}

#[test]
fn a_jail_never_runs_as_root() {
    let s = sandbox();
    let jail = Jail::untrusted(Identity { uid: 0, gid: 0 }, "/bin/true");
    assert!(s.prepare(&jail).is_err());
}

/// Waits until the jail's program runs as the tenant; its pid.
fn running_as_tenant(sandboxed: &mut Sandboxed) -> u32 {
    let deadline = Instant::now() + Duration::from_secs(5);
    loop {
        if let Some(p) = sandboxed.program_pid()
            && std::fs::read_to_string(format!("/proc/{p}/status"))
                .is_ok_and(|s| s.contains("Uid:\t2000123"))
        {
            return p;
        }
        assert!(
            Instant::now() < deadline,
            "the program never ran as the tenant"
        );
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Waits until `done`, checking every 5 ms; fails naming `what` after
/// `within`.
fn eventually(what: &str, within: Duration, mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + within;
    while !done() {
        assert!(Instant::now() < deadline, "timed out waiting until {what}");
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Processes whose command line mentions `needle`.
fn processes_mentioning(needle: &str) -> Vec<u32> {
    sless_testkit::processes::mentioning(needle)
        .into_iter()
        .map(|(pid, _)| pid)
        .collect()
}

#[test]
fn a_running_jail_is_shown_a_directory_read_only_and_held_to_a_new_memory_limit() {
    use std::io::Write;
    let s = sandbox();
    let data = private_dir("sless-jail-later-");
    let empty = data.path().join("empty");
    let code = data.path().join("code");
    std::fs::create_dir_all(&empty).unwrap();
    std::fs::create_dir_all(code.join("sub")).unwrap();
    std::fs::write(code.join("sub/later.txt"), "shown later").unwrap();
    // Waits for a line, then reads what it was shown, tries to write it,
    // and allocates 100 MiB (past the limit set meanwhile, not the first).
    let mut jail = Jail::untrusted(TENANT, "/usr/bin/python3");
    jail.args = vec![
        "-c".into(),
        "import os, sys\n\
         print(sorted(os.listdir('/sless/function')), flush=True)\n\
         sys.stdin.readline()\n\
         print(open('/sless/function/sub/later.txt').read(), flush=True)\n\
         try:\n    open('/sless/function/x', 'w')\nexcept OSError as e:\n    print('refused', e.errno, flush=True)\n\
         x = bytearray(100 << 20)\nx[::4096] = b'x' * len(x[::4096])\nprint('survived', flush=True)"
            .into(),
    ];
    jail.mounts = vec![Mount::ReadOnly {
        source: empty,
        dest: PathBuf::from("/sless/function"),
    }];
    jail.limits.memory_bytes = Some(256 << 20);
    jail.label = "later".into();
    let Prepared {
        mut command,
        pending,
    } = s.prepare(&jail).unwrap();
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = command.spawn().unwrap();
    let mut sandboxed = pending.spawned(Some(child.id()));
    let mut stdout = std::io::BufReader::new(child.stdout.take().unwrap());
    let mut first = String::new();
    std::io::BufRead::read_line(&mut stdout, &mut first).unwrap();
    assert_eq!(first, "[]\n", "the jail starts with an empty directory");

    sandboxed
        .mount_read_only(&code, std::path::Path::new("/sless/function"))
        .unwrap();
    sandboxed.limit_memory(64 << 20).unwrap();
    child.stdin.take().unwrap().write_all(b"go\n").unwrap();
    let mut rest = String::new();
    stdout.read_to_string(&mut rest).unwrap();
    let status = child.wait().unwrap();
    let mut stderr = String::new();
    child
        .stderr
        .take()
        .unwrap()
        .read_to_string(&mut stderr)
        .unwrap();
    assert_eq!(
        rest,
        format!("shown later\nrefused {}\n", libc::EROFS),
        "{stderr}"
    );
    if s.limits_mechanism().cgroups() {
        assert_eq!(status.code(), Some(128 + libc::SIGKILL), "{stderr}");
        assert!(sandboxed.cgroup.as_ref().unwrap().oom_kills() >= 1);
    } else {
        assert!(!status.success(), "{stderr}");
    }
    // sless's own view is unchanged.
    assert!(
        !std::fs::read_to_string("/proc/self/mountinfo")
            .unwrap()
            .contains("/sless/function"),
        "the mount stays in the jail"
    );
}

/// A keeper is a fork of its owner; it must not hold on to the owner's
/// memory (a long-lived jail's keeper would come to own its owner's heap
/// as it was, copy on write).
#[test]
fn a_keeper_holds_none_of_its_owners_heap() {
    // 128 MiB of the owner's, touched, alive while the jail runs.
    let heap = vec![7u8; 128 << 20];
    let sandbox = sandbox();
    let Prepared {
        mut command,
        pending,
    } = sandbox.prepare(&shell("read line")).unwrap();
    command
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null());
    let mut child = command.spawn().unwrap();
    let keeper = child.id();
    let mut sandboxed = pending.spawned(Some(keeper));
    assert!(sandboxed.sandbox_pid().is_some(), "the jail runs");
    let rss_kib = || -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{keeper}/status")).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    };
    // The keeper lets go right after it started bwrap, before it waits.
    eventually(
        "the keeper holds less than 32 MiB of its owner's 128 MiB",
        Duration::from_secs(10),
        || rss_kib() < 32 << 10,
    );
    assert_eq!(heap[heap.len() - 1], 7, "the owner's memory is its own");
    sandboxed.kill();
    let _ = child.wait();
}
