//! What the sandbox adds to starting a process: `--runs` starts of the same
//! program (the python interpreter running nothing, and `/bin/true`), each
//! run directly and in a jail of the local driver's kind (bwrap + setpriv,
//! PID/IPC/UTS/mount namespaces, the seccomp filter, its own cgroup with a
//! memory and a process limit), from spawn until it has exited.

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Instant;

use serde_json::json;
use sless_sandbox::{Identity, Jail, Limits, Mount, Prepared, Sandbox};

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
        let mut jailed = Vec::with_capacity(args.runs);
        for _ in 0..args.runs {
            let started = Instant::now();
            let status = Command::new(&program)
                .args(&argv)
                .stdout(Stdio::null())
                .status()?;
            anyhow::ensure!(status.success(), "{name}: {status}");
            direct.push(started.elapsed().as_secs_f64() * 1000.0);

            let mut jail = Jail::untrusted(
                Identity {
                    uid: 2_000_999_999,
                    gid: 2_000_999_999,
                },
                &program,
            );
            jail.args = argv.iter().map(Into::into).collect();
            jail.mounts = vec![Mount::same_path(prefix.clone())];
            jail.limits = Limits {
                memory_bytes: Some(128 << 20),
                processes: Some(256),
                file_bytes: Some(1 << 30),
                cpu_secs: None,
            };
            jail.label = "bench".into();
            let started = Instant::now();
            let Prepared {
                mut command,
                pending,
            } = sandbox.prepare(&jail)?;
            command.stdout(Stdio::null());
            let mut child = command.spawn()?;
            let jail_held = pending.spawned(Some(child.id()));
            let status = child.wait()?;
            drop(jail_held);
            anyhow::ensure!(status.success(), "{name} in a jail: {status}");
            jailed.push(started.elapsed().as_secs_f64() * 1000.0);
        }
        let (d, j) = (millis(&mut direct), millis(&mut jailed));
        let added =
            j["p50_ms"].as_f64().unwrap_or(f64::NAN) - d["p50_ms"].as_f64().unwrap_or(f64::NAN);
        eprintln!(
            "{name}: directly p50 {:.1} ms (p99 {:.1}), in a jail p50 {:.1} ms (p99 {:.1}): the sandbox adds {added:.1} ms",
            d["p50_ms"].as_f64().unwrap_or(f64::NAN),
            d["p99_ms"].as_f64().unwrap_or(f64::NAN),
            j["p50_ms"].as_f64().unwrap_or(f64::NAN),
            j["p99_ms"].as_f64().unwrap_or(f64::NAN),
        );
        figures.insert(
            name.to_owned(),
            json!({"direct": d, "jailed": j, "added_p50_ms": added}),
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
