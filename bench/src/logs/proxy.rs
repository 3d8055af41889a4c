//! The proxy with a function that prints a line per call against one that
//! prints nothing.

use std::time::Duration;

use serde_json::json;
use sless_store::function_logs;

use super::*;
use crate::sless_dev::SlessDev;
use crate::{cpu, wrk};

/// A python function that answers `{"ok": true}`, printing a line per call
/// first when `prints`.
fn handler_zip(prints: bool) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    let body = if prints {
        "def handle(event):\n    print(\"called\", flush=True)\n    return {\"ok\": True}\n"
    } else {
        "def handle(event):\n    return {\"ok\": True}\n"
    };
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    w.start_file("handler.py", zip::write::SimpleFileOptions::default())?;
    w.write_all(body.as_bytes())?;
    Ok(w.finish()?.into_inner())
}

/// Creates and uploads both functions and waits until they are Ready;
/// their versions.
pub(super) async fn deploy(dev: &SlessDev) -> anyhow::Result<(u32, u32)> {
    // One instance that takes every connection's call at once, as the
    // proxy benchmark's.
    let spec = json!({"max_instances": 1, "concurrency": 1000});
    let mut versions = Vec::new();
    for (name, prints) in [(QUIET, false), (PRINTING, true)] {
        dev.create_with(name, spec.clone()).await?;
        let version = dev.upload(name, handler_zip(prints)?).await?;
        versions.push((name, version));
    }
    for &(name, version) in &versions {
        dev.wait_ready(
            name,
            version,
            Duration::from_secs(180),
            Duration::from_millis(50),
        )
        .await?;
    }
    Ok((versions[0].1 as u32, versions[1].1 as u32))
}

/// CPU microseconds a call took, by process, over one measured run.
#[derive(Debug, Clone, Copy, Default, serde::Serialize)]
struct CallCpu {
    /// The `sless dev` process: the proxy, the worker reading the
    /// function's output and shipping it.
    sless_dev_us: f64,
    /// The processes `sless dev` started (the function's instance, in
    /// its sandbox, and the idle others).
    function_us: f64,
    /// The PostgreSQL server, every database.
    postgres_us: f64,
    /// The whole machine, whatever ran on it.
    machine_busy_us: f64,
}

impl CallCpu {
    fn mean(cpus: &[CallCpu]) -> CallCpu {
        let n = cpus.len().max(1) as f64;
        let sum = |pick: fn(&CallCpu) -> f64| cpus.iter().map(pick).sum::<f64>() / n;
        CallCpu {
            sless_dev_us: sum(|c| c.sless_dev_us),
            function_us: sum(|c| c.function_us),
            postgres_us: sum(|c| c.postgres_us),
            machine_busy_us: sum(|c| c.machine_busy_us),
        }
    }
}

/// CPU seconds a process spent so far (utime + stime), 0 when it is gone.
fn process_cpu(pid: u32) -> f64 {
    let Some(f) = cpu::stat_fields(pid) else {
        return 0.0;
    };
    let t = |n: usize| {
        f.get(n - 3)
            .and_then(|v| v.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    (t(14) + t(15)) / cpu::clock_ticks()
}

/// Every process here: its pid and its parent's.
fn processes() -> Vec<(u32, u32)> {
    let Ok(dir) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    dir.flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter_map(|pid| Some((pid, cpu::stat_fields(pid)?.get(1)?.parse().ok()?)))
        .collect()
}

/// CPU seconds spent so far by the processes under `root`, not itself:
/// for `sless dev`, the functions' instances, their sandboxes and the
/// runtimes' pools. Only the function under load spends much of it.
fn descendants_cpu(root: u32) -> f64 {
    let all = processes();
    let mut under = vec![root];
    let mut i = 0;
    while i < under.len() {
        let parent = under[i];
        under.extend(all.iter().filter(|(_, pp)| *pp == parent).map(|(p, _)| *p));
        i += 1;
    }
    under[1..].iter().map(|&pid| process_cpu(pid)).sum()
}

/// The postmaster of the server at `url`, when it runs here: the
/// `postgres` process started with `-p {port}` whose parent is not one.
/// (The private cluster runs in a sandbox's PID namespace, so the pid a
/// backend reports names nothing here.)
fn postmaster_at(url: &str) -> Option<u32> {
    let port = url.split('/').nth(2)?.rsplit_once(':')?.1;
    let comm = |pid: u32| std::fs::read_to_string(format!("/proc/{pid}/comm")).unwrap_or_default();
    processes()
        .into_iter()
        .find(|&(pid, parent)| {
            comm(pid).trim() == "postgres"
                && comm(parent).trim() != "postgres"
                && std::fs::read(format!("/proc/{pid}/cmdline")).is_ok_and(|c| {
                    let args: Vec<&[u8]> = c.split(|b| *b == 0).collect();
                    args.windows(2)
                        .any(|w| w[0] == b"-p" && w[1] == port.as_bytes())
                })
        })
        .map(|(pid, _)| pid)
}

/// A warm-up run, then the measured run of wrk against `url`, with the
/// CPU each side spent per call during it.
async fn measured_run(
    dev: &SlessDev,
    what: &str,
    url: &str,
    load: &wrk::Load,
    postmaster: Option<u32>,
) -> anyhow::Result<(wrk::Figures, CallCpu)> {
    if load.warmup > 0 {
        wrk::run(url, load, load.warmup, &[], "").await?;
    }
    let (dev_before, fn_before) = (process_cpu(dev.pid()), descendants_cpu(dev.pid()));
    let mark = cpu::Mark::now(postmaster);
    let f = wrk::run(url, load, load.duration, &[], "").await?;
    let spent = mark.since(postmaster);
    let per_call = |s: f64| s * 1e6 / f.requests.max(1) as f64;
    let cpu = CallCpu {
        sless_dev_us: per_call(process_cpu(dev.pid()) - dev_before),
        function_us: per_call(descendants_cpu(dev.pid()) - fn_before),
        postgres_us: per_call(spent.postgres_s),
        machine_busy_us: per_call(spent.machine_busy_s),
    };
    eprintln!(
        "{what}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms ({} requests); CPU per call: sless dev \
         {:.1} µs, the function {:.1} µs, PostgreSQL {:.1} µs, the machine {:.1} µs ({:.0}% busy)",
        f.req_per_s,
        f.p50_ms,
        f.p99_ms,
        f.requests,
        cpu.sless_dev_us,
        cpu.function_us,
        cpu.postgres_us,
        cpu.machine_busy_us,
        spent.machine_busy_share * 100.0,
    );
    Ok((f, cpu))
}

pub(super) async fn proxy(dev: &SlessDev, args: &LogsArgs) -> anyhow::Result<serde_json::Value> {
    let url = |name: &str| format!("{}/fn/{}/{name}/", dev.fn_url, dev.namespace);
    for name in [QUIET, PRINTING] {
        let res = dev.http.get(url(name)).send().await?;
        let status = res.status();
        anyhow::ensure!(
            status.as_u16() == 200,
            "{name}: {status} {}",
            res.text().await?
        );
    }
    let postmaster = postmaster_at(dev.db_url());
    let (mut quiet, mut printing) = (Vec::new(), Vec::new());
    let (mut quiet_cpu, mut printing_cpu) = (Vec::new(), Vec::new());
    for round in 1..=args.rounds.max(1) {
        for (name, runs, cpus) in [
            (QUIET, &mut quiet, &mut quiet_cpu),
            (PRINTING, &mut printing, &mut printing_cpu),
        ] {
            let what = format!("{name}, round {round}");
            let (figures, cpu) =
                measured_run(dev, &what, &url(name), &args.load, postmaster).await?;
            runs.push(figures);
            cpus.push(cpu);
        }
    }
    let mean = |runs: &[wrk::Figures], pick: fn(&wrk::Figures) -> f64| {
        runs.iter().map(pick).sum::<f64>() / runs.len() as f64
    };
    let (q, p) = (
        mean(&quiet, |r| r.req_per_s),
        mean(&printing, |r| r.req_per_s),
    );
    let (q99, p99) = (mean(&quiet, |r| r.p99_ms), mean(&printing, |r| r.p99_ms));
    // What sless dev's worker kept of each function's lines, and dropped.
    let mut lines = serde_json::Map::new();
    for name in [QUIET, PRINTING] {
        let kept: i64 = sqlx::query_scalar(
            "select count(*) from function_logs where namespace = $1 and function = $2",
        )
        .bind(&dev.namespace)
        .bind(name)
        .fetch_one(&dev.pool)
        .await?;
        let dropped = function_logs::dropped(&dev.pool, &dev.namespace, name).await?;
        let calls: u64 = match name {
            QUIET => quiet.iter().map(|r| r.requests).sum(),
            _ => printing.iter().map(|r| r.requests).sum(),
        };
        eprintln!(
            "{name}: {calls} calls measured (and the warm-ups), {kept} lines kept, {dropped} dropped"
        );
        lines.insert(
            name.to_owned(),
            json!({ "calls_measured": calls, "kept": kept, "dropped": dropped }),
        );
    }
    let per_round: Vec<f64> = quiet
        .iter()
        .zip(&printing)
        .map(|(q, p)| p.req_per_s / q.req_per_s)
        .collect();
    eprintln!(
        "printing / quiet: {:.3}x req/s ({p:.0} against {q:.0}; each round {per_round:.3?}), \
         p99 {p99:.2} against {q99:.2} ms",
        p / q
    );
    let cpu_mean = |cpus: &[CallCpu]| CallCpu::mean(cpus);
    let (qc, pc) = (cpu_mean(&quiet_cpu), cpu_mean(&printing_cpu));
    eprintln!(
        "CPU per call, printing − quiet: sless dev {:+.1} µs ({:.1} against {:.1}), the function \
         {:+.1} µs ({:.1} against {:.1}), PostgreSQL {:+.1} µs ({:.1} against {:.1})",
        pc.sless_dev_us - qc.sless_dev_us,
        pc.sless_dev_us,
        qc.sless_dev_us,
        pc.function_us - qc.function_us,
        pc.function_us,
        qc.function_us,
        pc.postgres_us - qc.postgres_us,
        pc.postgres_us,
        qc.postgres_us,
    );
    Ok(json!({
        "connections": args.load.connections, "duration_s": args.load.duration,
        "quiet": quiet, "printing": printing, "quiet_req_per_s": q, "printing_req_per_s": p,
        "quiet_p99_ms": q99, "printing_p99_ms": p99, "printing_vs_quiet": p / q,
        "printing_vs_quiet_each_round": per_round, "quiet_cpu": quiet_cpu,
        "printing_cpu": printing_cpu, "quiet_cpu_mean": qc, "printing_cpu_mean": pc,
        "lines": lines,
        "budget_lines_per_sec": std::env::var("SLESS_LOG_LINES_PER_SEC").ok()
            .and_then(|v| v.parse::<u64>().ok()).unwrap_or(1_000),
    }))
}
