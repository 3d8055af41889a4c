//! Running `wrk` (Debian's `/usr/bin/wrk`) and reading its figures from a
//! Lua `done()` callback, which sees the exact latency histogram.

use std::process::Stdio;

use serde::Serialize;

/// The load: connections, wrk threads, seconds, and an optional warm-up.
#[derive(clap::Args, Clone)]
pub struct Load {
    /// Open connections (wrk -c).
    #[arg(long, default_value_t = 32)]
    pub connections: u32,
    /// wrk threads (wrk -t).
    #[arg(long, default_value_t = 2)]
    pub threads: u32,
    /// Seconds of load per target.
    #[arg(long, default_value_t = 10)]
    pub duration: u64,
    /// Seconds of load before each measured run, not counted.
    #[arg(long, default_value_t = 2)]
    pub warmup: u64,
}

/// What one wrk run measured.
#[derive(Debug, Clone, Serialize)]
pub struct Figures {
    pub requests: u64,
    pub seconds: f64,
    pub req_per_s: f64,
    pub p50_ms: f64,
    pub p90_ms: f64,
    pub p99_ms: f64,
    pub max_ms: f64,
    pub mean_ms: f64,
    /// Answers other than 2xx/3xx.
    pub non_2xx: u64,
    /// Connect, read, write errors and timeouts.
    pub socket_errors: u64,
}

const DONE: &str = r#"
done = function(summary, latency, requests)
  local e = summary.errors
  io.write(string.format("SLESS_BENCH %d %d %.0f %.0f %.0f %.0f %.0f %d %d\n",
    summary.requests, summary.duration,
    latency:percentile(50), latency:percentile(90), latency:percentile(99),
    latency.max, latency.mean, e.status, e.connect + e.read + e.write + e.timeout))
end
"#;

/// Lua that paces each connection: after each answer it waits a random
/// (exponential) pause with a mean of `connections / rate` seconds, so the
/// requests arrive as an open load of about `rate` per second whatever the
/// target's speed, and latencies of two targets compare at the same load.
/// wrk counts a request's latency from its send, so the pause is not in it.
pub fn paced(rate: f64, connections: u32) -> String {
    let mean_ms = f64::from(connections) * 1000.0 / rate;
    format!(
        r#"
local threads = 0
setup = function(thread)
  threads = threads + 1
  thread:set("seed", threads)
end
init = function(args)
  math.randomseed(seed * 7919)
end
delay = function()
  return math.floor(-math.log(1 - math.random()) * {mean_ms:.3} + 0.5)
end
"#
    )
}

/// Runs wrk against `url` with `headers` ("Name: value"); `script` is Lua
/// placed before the `done` callback (e.g. a `request` function).
pub async fn run(
    url: &str,
    load: &Load,
    seconds: u64,
    headers: &[String],
    script: &str,
) -> anyhow::Result<Figures> {
    let mut lua = tempfile::Builder::new()
        .prefix("sless-bench-")
        .suffix(".lua")
        .tempfile()?;
    std::io::Write::write_all(&mut lua, format!("{script}\n{DONE}").as_bytes())?;
    let mut cmd = tokio::process::Command::new("wrk");
    cmd.args(["-c", &load.connections.to_string()])
        .args(["-t", &load.threads.min(load.connections).to_string()])
        .args(["-d", &format!("{seconds}s"), "--timeout", "10s", "-s"])
        .arg(lua.path());
    for h in headers {
        cmd.args(["-H", h]);
    }
    let out = cmd
        .arg(url)
        .stdin(Stdio::null())
        .output()
        .await
        .map_err(|e| anyhow::anyhow!("running wrk: {e}"))?;
    let text = String::from_utf8_lossy(&out.stdout);
    if !out.status.success() {
        anyhow::bail!(
            "wrk failed ({}): {text}{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let line = text
        .lines()
        .find_map(|l| l.strip_prefix("SLESS_BENCH "))
        .ok_or_else(|| anyhow::anyhow!("no figures from wrk: {text}"))?;
    let v: Vec<f64> = line
        .split_whitespace()
        .map(str::parse)
        .collect::<Result<_, _>>()?;
    anyhow::ensure!(v.len() == 9, "unexpected wrk figures: {line}");
    let seconds = v[1] / 1e6;
    let f = Figures {
        requests: v[0] as u64,
        seconds,
        req_per_s: v[0] / seconds,
        p50_ms: v[2] / 1000.0,
        p90_ms: v[3] / 1000.0,
        p99_ms: v[4] / 1000.0,
        max_ms: v[5] / 1000.0,
        mean_ms: v[6] / 1000.0,
        non_2xx: v[7] as u64,
        socket_errors: v[8] as u64,
    };
    if f.non_2xx > 0 || f.socket_errors > 0 {
        eprintln!(
            "warning: {url}: {} non-2xx answers, {} socket errors",
            f.non_2xx, f.socket_errors
        );
    }
    Ok(f)
}

/// A warm-up run (if any), then the measured run.
pub async fn measure(
    what: &str,
    url: &str,
    load: &Load,
    headers: &[String],
    script: &str,
) -> anyhow::Result<Figures> {
    if load.warmup > 0 {
        run(url, load, load.warmup, headers, script).await?;
    }
    let f = run(url, load, load.duration, headers, script).await?;
    eprintln!(
        "{what}: {:.0} req/s, p50 {:.3} ms, p99 {:.3} ms ({} requests, {} connections)",
        f.req_per_s, f.p50_ms, f.p99_ms, f.requests, load.connections
    );
    Ok(f)
}
