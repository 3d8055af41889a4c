//! Cold starts on `sless dev`: a function scaled to zero, then called.
//!
//! For each runtime (python3.11, nodejs20) one function is deployed with no
//! idle window of its own (`scale_to_zero_after_sec: 0`); each round scales
//! it to zero by the same command the idle sweep appends
//! (`sless_store::scaling::decide_and_enqueue` with `ScaleToZero`), waits
//! until its process no longer accepts connections, and times one call
//! through `/fn` from send to the end of the answer. Beside it: warm calls
//! of the same function, the server's split of each cold call (held until
//! the instance served, and of that the worker's start, from the
//! invocation records), a job's run from its POST to `Succeeded`, and the
//! memory of everything `sless dev` started with `--functions` functions
//! running and then all scaled to zero.

use std::time::{Duration, Instant};

use serde_json::json;
use sless_domain::function::FunctionCommand;
use sless_domain::{FunctionKey, FunctionName, Namespace};
use sless_store::eventlog::Metadata;

use crate::sless_dev::{DevArgs, SlessDev};
use crate::{Server, percentile, wait_for};

#[derive(clap::Args)]
pub struct ColdArgs {
    #[command(flatten)]
    dev: DevArgs,
    /// Cold calls per runtime.
    #[arg(long, default_value_t = 50)]
    rounds: usize,
    /// Warm calls per runtime.
    #[arg(long, default_value_t = 200)]
    warm: usize,
    /// Jobs run one after another.
    #[arg(long, default_value_t = 10)]
    jobs: usize,
    /// Functions deployed for the memory figure (0: none).
    #[arg(long, default_value_t = 100)]
    functions: usize,
    /// Call as soon as the stopped process no longer listens, without
    /// waiting for the reconcile that stopped it: a call that comes right
    /// after a scale-down.
    #[arg(long)]
    right_after_stop: bool,
    /// Functions more, each scaled to zero as soon as it is Ready, for the
    /// memory of that many idle functions (0: none).
    #[arg(long, default_value_t = 0)]
    idle: usize,
}

const RUNTIMES: [(&str, &str, &str); 2] = [
    (
        "python3.11",
        "handler.py",
        "def handle(event):\n    return {\"message\": \"hello\"}\n",
    ),
    (
        "nodejs20",
        "handler.js",
        "exports.handle = async () => ({ message: \"hello\" });\n",
    ),
];

fn zip_of(file: &str, code: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    w.start_file(file, zip::write::SimpleFileOptions::default())?;
    w.write_all(code.as_bytes())?;
    Ok(w.finish()?.into_inner())
}

fn summary(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    json!({
        "n": ms.len(), "p50_ms": percentile(&ms, 50.0), "p99_ms": percentile(&ms, 99.0),
        "min_ms": percentile(&ms, 0.0), "max_ms": percentile(&ms, 100.0),
    })
}

fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

pub async fn run(server: &Server, args: ColdArgs) -> anyhow::Result<serde_json::Value> {
    let dev = SlessDev::start(server, &args.dev).await?;
    let result = measure(&dev, &args).await;
    if result.is_err() {
        eprintln!(
            "sless dev's log ends:\n{}",
            crate::sless_dev::tail(&dev.log_path())
        );
        let logs = dev.log_path().with_file_name("data/local/logs");
        for e in walkdir(&logs)
            .into_iter()
            .filter(|p| !p.to_string_lossy().contains("/builds/"))
        {
            eprintln!("{}:\n{}", e.display(), crate::sless_dev::tail(&e));
        }
    }
    dev.stop().await?;
    result
}

async fn measure(dev: &SlessDev, args: &ColdArgs) -> anyhow::Result<serde_json::Value> {
    let mut figures = serde_json::Map::new();
    for (runtime, file, code) in RUNTIMES {
        let name = format!("cold-{}", runtime.replace('.', "-"));
        deploy(dev, &name, runtime, &zip_of(file, code)?).await?;
        let url = format!("{}/fn/{}/{name}", dev.fn_url, dev.namespace);
        let mut warm = Vec::new();
        for _ in 0..args.warm {
            warm.push(ms(call(dev, &url).await?));
        }
        let mut cold = Vec::new();
        for _ in 0..args.rounds {
            to_zero(dev, &name, !args.right_after_stop).await?;
            pool_filled(dev).await?;
            cold.push(ms(call(dev, &url).await?));
        }
        let (held, start) = split(dev, &name).await?;
        let (cold, warm, held, start) =
            (summary(cold), summary(warm), summary(held), summary(start));
        eprintln!(
            "{runtime}: cold call p50 {:.1} ms p99 {:.1} ms ({} rounds; held p50 {:.1} ms, instance start p50 {:.1} ms); warm call p50 {:.2} ms p99 {:.2} ms",
            cold["p50_ms"].as_f64().unwrap_or(f64::NAN),
            cold["p99_ms"].as_f64().unwrap_or(f64::NAN),
            args.rounds,
            held["p50_ms"].as_f64().unwrap_or(f64::NAN),
            start["p50_ms"].as_f64().unwrap_or(f64::NAN),
            warm["p50_ms"].as_f64().unwrap_or(f64::NAN),
            warm["p99_ms"].as_f64().unwrap_or(f64::NAN),
        );
        figures.insert(
            runtime.to_owned(),
            json!({ "cold": cold, "warm": warm, "held": held, "instance_start": start }),
        );
    }
    if args.jobs > 0 {
        let jobs = summary(jobs(dev, "cold-python3-11", args.jobs).await?);
        eprintln!(
            "hello job, POST to Succeeded: p50 {:.1} ms p99 {:.1} ms ({} jobs)",
            jobs["p50_ms"].as_f64().unwrap_or(f64::NAN),
            jobs["p99_ms"].as_f64().unwrap_or(f64::NAN),
            args.jobs
        );
        figures.insert("job".into(), jobs);
    }
    if args.functions > 0 {
        figures.insert("memory".into(), memory(dev, args.functions).await?);
    }
    if args.idle > 0 {
        figures.insert("memory_idle".into(), memory_idle(dev, args.idle).await?);
    }
    figures.insert("bench".into(), json!("cold-start"));
    Ok(serde_json::Value::Object(figures))
}

/// Creates and deploys `name`, never scaled to zero by the sweep.
async fn deploy(dev: &SlessDev, name: &str, runtime: &str, zip: &[u8]) -> anyhow::Result<()> {
    let res = dev
        .http
        .post(dev.v1("/functions"))
        .bearer_auth(&dev.token)
        .json(
            &json!({ "name": name, "runtime": runtime, "entrypoint": "handler.handle",
                       "scale_to_zero_after_sec": 0 }),
        )
        .send()
        .await?;
    if res.status().as_u16() != 201 {
        anyhow::bail!("create {name}: {} {}", res.status(), res.text().await?);
    }
    let version = dev.upload(name, zip.to_vec()).await?;
    dev.wait_ready(
        name,
        version,
        Duration::from_secs(300),
        Duration::from_millis(20),
    )
    .await?;
    Ok(())
}

/// One call through `/fn`, to the end of its answer.
async fn call(dev: &SlessDev, url: &str) -> anyhow::Result<Duration> {
    let sent = Instant::now();
    let res = dev.http.get(url).send().await?;
    let status = res.status();
    let body = res.bytes().await?;
    if status.as_u16() != 200 {
        anyhow::bail!("{url}: {status} {}", String::from_utf8_lossy(&body));
    }
    Ok(sent.elapsed())
}

/// Scales `name` to zero as the idle sweep does, and waits until its
/// process no longer takes connections (and, when `settled`, until the
/// reconcile that stopped it is done).
async fn to_zero(dev: &SlessDev, name: &str, settled: bool) -> anyhow::Result<()> {
    let endpoint = dev.endpoint(name).await?;
    let key = FunctionKey::new(
        Namespace::parse(&dev.namespace)?,
        FunctionName::parse(name)?,
    );
    let decided = sless_store::scaling::decide_and_enqueue(
        &dev.pool,
        &key,
        FunctionCommand::ScaleToZero {
            reason: "sless-bench cold-start".into(),
        },
        Metadata {
            actor: "system:bench".into(),
            ..Default::default()
        },
    )
    .await?;
    if decided.appended.is_none() {
        anyhow::bail!("{name} was not scaled to zero (not serving?)");
    }
    let addr = endpoint
        .trim_start_matches("http://")
        .trim_end_matches('/')
        .to_owned();
    // Stopped: its port closed and the reconcile that stopped it done (a
    // reconcile asked for meanwhile waits for it, and for the worker's
    // next look at the queue).
    let queue_key = key.queue_key();
    wait_for(
        &format!("{name}'s process to stop"),
        Duration::from_secs(60),
        Duration::from_millis(5),
        || {
            let addr = addr.clone();
            let queue_key = queue_key.clone();
            async move {
                let closed = tokio::net::TcpStream::connect(&addr).await.is_err();
                let busy: bool =
                    sqlx::query_scalar("select exists(select 1 from work_items where key = $1)")
                        .bind(&queue_key)
                        .fetch_one(&dev.pool)
                        .await?;
                Ok((closed && (!busy || !settled)).then_some(()))
            }
        },
    )
    .await
}

/// Waits until the warm pool has its processes ready again (the default
/// two per runtime, each started half a second ago or more, so its
/// interpreter has loaded), as it has when calls are an idle window apart:
/// the pool refills a quarter of a second after a process was taken.
async fn pool_filled(dev: &SlessDev) -> anyhow::Result<()> {
    let needle = dev.data_dir().to_string_lossy().into_owned();
    wait_for(
        "the warm pool to be full",
        Duration::from_secs(30),
        Duration::from_millis(5),
        || {
            let needle = needle.clone();
            async move {
                let waiting = sless_testkit::processes::waiting_in_pool(&needle);
                let settled = waiting
                    .iter()
                    .all(|(pid, _)| age(*pid).is_some_and(|a| a >= Duration::from_millis(500)));
                Ok((waiting.len() >= 4 && settled).then_some(()))
            }
        },
    )
    .await
}

/// How long ago `pid` started.
fn age(pid: u32) -> Option<Duration> {
    let ticks: f64 = crate::cpu::stat_fields(pid)?.get(22 - 3)?.parse().ok()?;
    let uptime: f64 = std::fs::read_to_string("/proc/uptime")
        .ok()?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let hz = crate::cpu::clock_ticks();
    Some(Duration::from_secs_f64((uptime - ticks / hz).max(0.0)))
}

/// The server's split of the cold calls: how long each was held, and the
/// instance's start, from the invocation records.
async fn split(dev: &SlessDev, name: &str) -> anyhow::Result<(Vec<f64>, Vec<f64>)> {
    // Records are written in batches a moment after each call.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let rows: Vec<(Option<i64>, Option<i64>)> = sqlx::query_as(
        "select activation_us, instance_start_us from invocations
         where namespace = $1 and function = $2 and activation_us is not null",
    )
    .bind(&dev.namespace)
    .bind(name)
    .fetch_all(&dev.pool)
    .await?;
    let us = |v: Option<i64>| v.map(|us| us as f64 / 1000.0);
    Ok((
        rows.iter().filter_map(|r| us(r.0)).collect(),
        rows.iter().filter_map(|r| us(r.1)).collect(),
    ))
}

/// `n` jobs of `function` with an input, one after another: POST to
/// `Succeeded`, polled every 5 ms.
async fn jobs(dev: &SlessDev, function: &str, n: usize) -> anyhow::Result<Vec<f64>> {
    let mut took = Vec::new();
    for i in 0..n {
        let name = format!("bench-job-{i}");
        pool_filled(dev).await?;
        let posted = Instant::now();
        let res = dev
            .http
            .post(dev.v1("/jobs"))
            .bearer_auth(&dev.token)
            .json(&json!({ "name": name, "function": function, "input": {"n": i} }))
            .send()
            .await?;
        if !res.status().is_success() {
            anyhow::bail!("job {name}: {} {}", res.status(), res.text().await?);
        }
        let done = wait_for(
            &format!("job {name}"),
            Duration::from_secs(60),
            Duration::from_millis(5),
            || async {
                let job: serde_json::Value = dev
                    .http
                    .get(dev.v1(&format!("/jobs/{name}")))
                    .bearer_auth(&dev.token)
                    .send()
                    .await?
                    .json()
                    .await?;
                match job["status"].as_str() {
                    Some("Succeeded") => Ok(Some(Instant::now())),
                    Some("Failed") => anyhow::bail!("job {name} failed: {job}"),
                    _ => Ok(None),
                }
            },
        )
        .await?;
        took.push(ms(done - posted));
    }
    Ok(took)
}

/// Memory of everything `sless dev` started (itself, its PostgreSQL and S3
/// server, function processes and their jails), in KiB.
fn tree_rss_kib(root: u32) -> u64 {
    let mut parent = std::collections::HashMap::new();
    let mut rss = std::collections::HashMap::new();
    for entry in std::fs::read_dir("/proc").into_iter().flatten().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        let Ok(status) = std::fs::read_to_string(entry.path().join("status")) else {
            continue;
        };
        let field = |key: &str| {
            status
                .lines()
                .find_map(|l| l.strip_prefix(key))
                .and_then(|v| v.split_whitespace().next())
                .and_then(|v| v.parse::<u64>().ok())
        };
        if let Some(ppid) = field("PPid:") {
            parent.insert(pid, ppid as u32);
        }
        rss.insert(pid, field("VmRSS:").unwrap_or(0));
    }
    let under = |mut pid: u32| {
        while pid > 1 {
            if pid == root {
                return true;
            }
            pid = parent.get(&pid).copied().unwrap_or(0);
        }
        false
    };
    rss.iter()
        .filter(|(pid, _)| under(**pid))
        .map(|(_, kib)| kib)
        .sum()
}

/// `n` python functions deployed and called once: the memory of all of it
/// running, then with every function scaled to zero.
async fn memory(dev: &SlessDev, n: usize) -> anyhow::Result<serde_json::Value> {
    let before = tree_rss_kib(dev.pid());
    let zip = zip_of(RUNTIMES[0].1, RUNTIMES[0].2)?;
    for i in 0..n {
        deploy(dev, &format!("mem-{i}"), "python3.11", &zip).await?;
    }
    let running = tree_rss_kib(dev.pid());
    for i in 0..n {
        to_zero(dev, &format!("mem-{i}"), true).await?;
    }
    let idle = tree_rss_kib(dev.pid());
    let mib = |kib: u64| kib as f64 / 1024.0;
    eprintln!(
        "memory of everything sless dev started: {:.0} MiB with 2 functions, {:.0} MiB with {n} more running, {:.0} MiB with them scaled to zero ({:.1} MiB a running function)",
        mib(before),
        mib(running),
        mib(idle),
        mib(running.saturating_sub(idle)) / n as f64
    );
    Ok(json!({
        "functions": n, "base_mib": mib(before), "running_mib": mib(running),
        "idle_mib": mib(idle),
        "per_running_function_mib": mib(running.saturating_sub(idle)) / n as f64,
    }))
}

fn walkdir(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    let mut out = Vec::new();
    for e in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let p = e.path();
        if p.is_dir() {
            out.extend(walkdir(&p));
        } else {
            out.push(p);
        }
    }
    out
}

/// `n` more python functions, each scaled to zero once Ready: the memory of
/// everything `sless dev` started with all of them idle.
async fn memory_idle(dev: &SlessDev, n: usize) -> anyhow::Result<serde_json::Value> {
    let before = tree_rss_kib(dev.pid());
    let zip = zip_of(RUNTIMES[0].1, RUNTIMES[0].2)?;
    let started = Instant::now();
    for i in 0..n {
        let name = format!("idle-{i}");
        deploy(dev, &name, "python3.11", &zip).await?;
        to_zero(dev, &name, true).await?;
        if (i + 1) % 100 == 0 {
            eprintln!(
                "{} functions deployed and scaled to zero in {:.0} s: {:.0} MiB",
                i + 1,
                started.elapsed().as_secs_f64(),
                tree_rss_kib(dev.pid()) as f64 / 1024.0
            );
        }
    }
    let idle = tree_rss_kib(dev.pid());
    let mib = |kib: u64| kib as f64 / 1024.0;
    eprintln!(
        "memory of everything sless dev started: {:.0} MiB before, {:.0} MiB with {n} more functions scaled to zero",
        mib(before),
        mib(idle)
    );
    Ok(json!({ "functions": n, "before_mib": mib(before), "idle_mib": mib(idle) }))
}
