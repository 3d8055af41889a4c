//! A worker killed (SIGKILL) at any moment of its jails' setup leaves no
//! jail behind: the keeper between it and bwrap ends each one.
//!
//! The test runs its own binary again as a "worker" (selected by
//! [`WORKER_ROLE`]) that starts jails in a loop from a thread, and kills
//! it at moments spread over a jail's setup. The worker uses resource
//! limits, not cgroups: a stale cgroup's processes would be killed by the
//! next sandbox that looks (cgroup.rs), which would hide a jail that
//! outlived its worker.

use std::io::{BufRead, BufReader, Write};
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use sless_sandbox::{Identity, Jail, Network, Prepared, Sandbox, SandboxOptions};

/// Set (to the run's marker) in the environment of the worker.
const WORKER_ROLE: &str = "SLESS_SANDBOX_TEST_WORKER";
/// A uid of this test's own: no other test's jail runs as it.
const TENANT: Identity = Identity {
    uid: 2_000_457,
    gid: 2_000_457,
};
const ROUNDS: usize = 200;
/// How long after the worker's first spawn it is killed, by round: from
/// at once to past a whole setup (a few milliseconds).
const DELAYS_US: [u64; 10] = [0, 50, 150, 300, 500, 800, 1200, 2000, 3500, 6000];

#[test]
fn a_worker_killed_during_200_jail_setups_leaves_no_jail() {
    if let Ok(marker) = std::env::var(WORKER_ROLE) {
        worker(&marker);
    }
    let marker = format!(
        "sless-keeper-test-{}-{}",
        std::process::id(),
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos()
    );
    let exe = std::env::current_exe().unwrap();
    let mut spawned = 0;
    for round in 0..ROUNDS {
        let mut worker = Command::new(&exe)
            // The marker is also a filter that matches no test: it puts
            // the marker in the command line of the worker's keepers.
            .args([
                "--exact",
                "a_worker_killed_during_200_jail_setups_leaves_no_jail",
                "--nocapture",
                "--test-threads=1",
                &marker,
            ])
            .env(WORKER_ROLE, &marker)
            .env("SLESS_TEST_ROUND", round.to_string())
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let mut out = BufReader::new(worker.stdout.take().unwrap());
        let mut line = String::new();
        while out.read_line(&mut line).unwrap() > 0 && !line.contains("spawned") {
            line.clear();
        }
        assert!(line.contains("spawned"), "the worker spawned no jail");
        spawned += 1;
        let jitter = (round as u64 * 37) % 50;
        std::thread::sleep(Duration::from_micros(
            DELAYS_US[round % DELAYS_US.len()] + jitter,
        ));
        worker.kill().unwrap();
        worker.wait().unwrap();
    }
    assert_eq!(spawned, ROUNDS);

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let left = leftovers(&marker);
        if left.is_empty() {
            break;
        }
        if Instant::now() >= deadline {
            for (pid, _) in &left {
                // SAFETY: kill(2) of the leftovers found, so that a failed
                // run does not leave them running.
                unsafe { libc::kill(*pid as i32, libc::SIGKILL) };
            }
            panic!(
                "{} processes of jails outlived their killed worker: {left:#?}",
                left.len()
            );
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// The processes of this run's jails: by marker (their keepers, bwrap,
/// the program), owner (bwrap's and slirp4netns's environment) or uid.
fn leftovers(marker: &str) -> Vec<(u32, String)> {
    let mut found = sless_testkit::processes::mentioning(marker);
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let status = std::fs::read_to_string(entry.path().join("status")).unwrap_or_default();
        let uid = format!("Uid:\t{}\t", TENANT.uid);
        if status.lines().any(|l| l.starts_with(&uid)) && !status.contains("State:\tZ") {
            found.push((pid, status.lines().next().unwrap_or("").to_owned()));
        }
    }
    found.sort();
    found.dedup_by_key(|(pid, _)| *pid);
    found
}

/// The worker: starts jails in a loop from a thread (as the local driver
/// does) until it is killed, saying on stdout once the first is spawned.
/// Every third round's jails have a network of their own going out
/// through slirp4netns, started as soon as they are spawned.
fn worker(marker: &str) -> ! {
    let round: usize = std::env::var("SLESS_TEST_ROUND")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0);
    let sandbox = Sandbox::with_options(&SandboxOptions {
        rlimits_only: true,
        ..SandboxOptions::default()
    })
    .unwrap();
    let marker = marker.to_owned();
    let spawner = std::thread::spawn(move || {
        let mut jails = Vec::new();
        loop {
            let mut jail = Jail::untrusted(TENANT, "/bin/sh");
            // `sh -c CMD NAME`: NAME is the shell's $0, in its command line.
            jail.args = vec!["-c".into(), "sleep 300; true".into(), marker.clone().into()];
            jail.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
            jail.owner = Some(marker.clone());
            if round % 3 == 2 {
                jail.network = Network::Outbound;
            }
            let Prepared {
                mut command,
                pending,
            } = sandbox.prepare(&jail).unwrap();
            command.stdin(Stdio::null()).stdout(Stdio::null());
            let child = command.spawn().unwrap();
            let mut sandboxed = pending.spawned(Some(child.id()));
            if jails.is_empty() {
                let mut out = std::io::stdout().lock();
                writeln!(out, "spawned").unwrap();
                out.flush().unwrap();
            }
            let _ = sandboxed.start();
            jails.push((child, sandboxed));
            if jails.len() >= 20 {
                // Enough: hold them until killed.
                loop {
                    std::thread::park();
                }
            }
        }
    });
    let _ = spawner.join();
    std::process::exit(1)
}
