//! What the sandbox adds to starting a process: `--runs` starts of the same
//! program (the python interpreter running nothing, and `/bin/true`), each
//! run directly and in a jail of the local driver's kind (bwrap + setpriv,
//! PID/IPC/UTS/mount namespaces, the seccomp filter, its own cgroup with a
//! memory and a process limit), from spawn until it has exited; and in a
//! jail with a network of its own: only its loopback, or going out through
//! slirp4netns (started, and ready, before the program runs).

use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;
use sless_sandbox::{Identity, Jail, Limits, Mount, Network, Prepared, Sandbox};

use crate::percentile;

#[derive(clap::Args)]
pub struct JailArgs {
    /// Starts of each program, each way.
    #[arg(long, default_value_t = 50)]
    runs: usize,
    /// The python interpreter (its installation is shown to the jail).
    #[arg(long, default_value = "python3")]
    python: String,
}

/// The interpreter itself and its installation (sys.executable, base_prefix).
fn python_paths(python: &str) -> anyhow::Result<(PathBuf, PathBuf)> {
    let out = Command::new(python)
        .args([
            "-c",
            "import sys; print(sys.executable); print(sys.base_prefix)",
        ])
        .output()?;
    let text = String::from_utf8(out.stdout)?;
    let mut lines = text.lines();
    let exe = PathBuf::from(lines.next().unwrap_or(python));
    let prefix = PathBuf::from(lines.next().unwrap_or("/usr"));
    Ok((exe, prefix))
}

fn millis(samples: &mut [f64]) -> serde_json::Value {
    samples.sort_by(f64::total_cmp);
    json!({"p50_ms": percentile(samples, 50.0), "p99_ms": percentile(samples, 99.0)})
}

/// Starts `program` in a jail with `network` and waits for its end: ms.
fn jailed(
    sandbox: &Sandbox,
    program: &Path,
    argv: &[&str],
    prefix: &Path,
    network: Network,
) -> anyhow::Result<f64> {
    let mut jail = Jail::untrusted(
        Identity {
            uid: 2_000_999_999,
            gid: 2_000_999_999,
        },
        program,
    );
    jail.args = argv.iter().map(Into::into).collect();
    jail.mounts = vec![Mount::same_path(prefix)];
    jail.limits = Limits {
        memory_bytes: Some(128 << 20),
        processes: Some(256),
        file_bytes: Some(1 << 30),
        cpu_secs: None,
    };
    jail.label = "bench".into();
    jail.network = network;
    let started = Instant::now();
    let Prepared {
        mut command,
        pending,
    } = sandbox.prepare(&jail)?;
    command.stdout(Stdio::null());
    let mut child = command.spawn()?;
    let mut jail_held = pending.spawned(Some(child.id()));
    jail_held.start()?;
    let status = child.wait()?;
    drop(jail_held);
    anyhow::ensure!(
        status.success(),
        "{} in a jail ({network:?}): {status}",
        program.display()
    );
    Ok(started.elapsed().as_secs_f64() * 1000.0)
}

fn p50(figures: &serde_json::Value) -> f64 {
    figures["p50_ms"].as_f64().unwrap_or(f64::NAN)
}

fn p99(figures: &serde_json::Value) -> f64 {
    figures["p99_ms"].as_f64().unwrap_or(f64::NAN)
}

pub fn run(args: JailArgs) -> anyhow::Result<serde_json::Value> {
    let sandbox = Sandbox::locate()?;
    let (python, prefix) = python_paths(&args.python)?;
    let programs: [(&str, PathBuf, Vec<&str>); 2] = [
        ("python3 -c pass", python, vec!["-c", "pass"]),
        ("/bin/true", PathBuf::from("/bin/true"), vec![]),
    ];
    let mut figures = serde_json::Map::new();
    for (name, program, argv) in programs {
        let mut direct = Vec::with_capacity(args.runs);
        let mut host = Vec::with_capacity(args.runs);
        let mut loopback = Vec::with_capacity(args.runs);
        let mut outbound = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            let started = Instant::now();
            let status = Command::new(&program)
                .args(&argv)
                .stdout(Stdio::null())
                .status()?;
            anyhow::ensure!(status.success(), "{name}: {status}");
            direct.push(started.elapsed().as_secs_f64() * 1000.0);
            host.push(jailed(&sandbox, &program, &argv, &prefix, Network::Host)?);
            loopback.push(jailed(
                &sandbox,
                &program,
                &argv,
                &prefix,
                Network::Loopback,
            )?);
            outbound.push(jailed(
                &sandbox,
                &program,
                &argv,
                &prefix,
                Network::Outbound,
            )?);
        }
        let d = millis(&mut direct);
        let j = millis(&mut host);
        let l = millis(&mut loopback);
        let o = millis(&mut outbound);
        let added = p50(&j) - p50(&d);
        eprintln!(
            "{name}: directly p50 {:.1} ms (p99 {:.1}), in a jail p50 {:.1} ms (p99 {:.1}): the sandbox adds {added:.1} ms; \
             its own loopback p50 {:.1} ms (p99 {:.1}), out through slirp4netns p50 {:.1} ms (p99 {:.1})",
            p50(&d),
            p99(&d),
            p50(&j),
            p99(&j),
            p50(&l),
            p99(&l),
            p50(&o),
            p99(&o),
        );
        figures.insert(
            name.to_owned(),
            json!({"direct": d, "jailed": j, "added_p50_ms": added, "loopback": l, "outbound": o}),
        );
    }
    figures.insert("bench".into(), json!("jail"));
    figures.insert("runs".into(), json!(args.runs));
    figures.insert(
        "limits".into(),
        json!(format!("{:?}", sandbox.limits_mechanism())),
    );
    Ok(serde_json::Value::Object(figures))
}
