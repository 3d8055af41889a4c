//! Scaling out on `sless dev`: a step from 0 to `--callers` callers on a
//! function that takes 100 ms a call (python3.11, `concurrency` 1,
//! `max_instances` `--max`), with the autoscaler's own settings (a 60 s
//! stable window and a 6 s panic window, as Knative's).
//!
//! Measured, in one sitting:
//! - **one instance**: one caller for `--baseline` seconds: calls/s and
//!   p50, the proxy's overhead at one instance being p50 less 100 ms;
//! - **the step**: `--callers` callers for `--seconds` seconds, each
//!   calling again as soon as it is answered. Every call's end and
//!   status, and the instances the function has (its `GET`, every 250 ms).
//!   The ideal is the instances serving times 10 calls/s, up to `--max`
//!   times 10; the figure is the time from the step until the calls
//!   answered over one second reach 90% of the ideal at full scale
//!   (`--max` × 10 × 0.9), and the time until `--max` instances serve;
//!   p50/p99 during the ramp (the first 5 s) and after; calls failed;
//! - **down**: after the last call, the time until one instance is left
//!   (the autoscaler's scale-in over its stable window) and until none is
//!   (the function's idle window, `--idle` seconds).
//!
//! Knative's documented behaviour is printed beside it for comparison.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::sless_dev::{DevArgs, SlessDev};
use crate::{Server, percentile, wait_for};

#[derive(clap::Args)]
pub struct ScaleOutArgs {
    #[command(flatten)]
    dev: DevArgs,
    /// Callers of the step.
    #[arg(long, default_value_t = 64)]
    callers: usize,
    /// The function's max_instances.
    #[arg(long, default_value_t = 16)]
    max: u32,
    /// How long the step lasts, in seconds.
    #[arg(long, default_value_t = 20)]
    seconds: u64,
    /// How long one caller measures one instance, in seconds.
    #[arg(long, default_value_t = 5)]
    baseline: u64,
    /// The function's idle window (scale_to_zero_after_sec).
    #[arg(long, default_value_t = 120)]
    idle: u32,
}

/// The function: 100 ms a call.
const HANDLER: &str =
    "import time\n\ndef handle(event):\n    time.sleep(0.1)\n    return {\"ok\": True}\n";

/// One call: when it ended (since the step), how long it took, its status.
#[derive(Clone, Copy)]
struct Done {
    at: f64,
    ms: f64,
    ok: bool,
}

pub async fn run(server: &Server, args: ScaleOutArgs) -> anyhow::Result<serde_json::Value> {
    let dev = SlessDev::start(server, &args.dev).await?;
    let result = measure(&dev, &args).await;
    if result.is_err() {
        eprintln!(
            "sless dev's log ends:\n{}",
            crate::sless_dev::tail(&dev.log_path())
        );
    }
    dev.stop().await?;
    result
}

async fn measure(dev: &SlessDev, args: &ScaleOutArgs) -> anyhow::Result<serde_json::Value> {
    let name = "step";
    let res = dev
        .http
        .post(dev.v1("/functions"))
        .bearer_auth(&dev.token)
        .json(&json!({
            "name": name, "runtime": "python3.11", "entrypoint": "handler.handle",
            "concurrency": 1, "max_instances": args.max,
            "scale_to_zero_after_sec": args.idle,
        }))
        .send()
        .await?;
    if res.status().as_u16() != 201 {
        anyhow::bail!("create {name}: {} {}", res.status(), res.text().await?);
    }
    let zip = python_zip_of(HANDLER)?;
    let version = dev.upload(name, zip).await?;
    dev.wait_ready(
        name,
        version,
        Duration::from_secs(300),
        Duration::from_millis(50),
    )
    .await?;
    let url = format!("{}/fn/{}/{name}", dev.fn_url, dev.namespace);

    // One instance, one caller.
    let one = load(dev, &url, 1, Duration::from_secs(args.baseline)).await?;
    let mut one_ms: Vec<f64> = one.calls.iter().map(|d| d.ms).collect();
    one_ms.sort_by(f64::total_cmp);
    let one_rate = one.calls.len() as f64 / args.baseline as f64;
    let one_p50 = percentile(&one_ms, 50.0);
    eprintln!(
        "one instance, one caller: {one_rate:.1} calls/s, p50 {one_p50:.1} ms (the proxy and the wrapper: {:.1} ms over the 100 ms)",
        one_p50 - 100.0
    );
    // Back to one instance before the step: the baseline's own panic may
    // have added one.
    wait_for(
        "one instance before the step",
        Duration::from_secs(300),
        Duration::from_millis(250),
        || async { Ok((instances(dev, name).await? <= 1).then_some(())) },
    )
    .await?;

    // The step.
    let step = load(dev, &url, args.callers, Duration::from_secs(args.seconds)).await?;
    let ended = Instant::now();
    let full = args.max as f64 * 10.0;
    let window = 1.0;
    let mut at: Vec<f64> = step.calls.iter().filter(|d| d.ok).map(|d| d.at).collect();
    at.sort_by(f64::total_cmp);
    let reached = at.iter().enumerate().find_map(|(i, t)| {
        let from = at.partition_point(|x| *x < t - window);
        ((i + 1 - from) as f64 >= 0.9 * full * window).then_some(*t)
    });
    let max_at = step
        .instances
        .iter()
        .find(|(_, n)| *n >= args.max as i64)
        .map(|(t, _)| *t);
    let ramp: Vec<f64> = sorted(step.calls.iter().filter(|d| d.at <= 5.0).map(|d| d.ms));
    let after: Vec<f64> = sorted(step.calls.iter().filter(|d| d.at > 5.0).map(|d| d.ms));
    let failed = step.calls.iter().filter(|d| !d.ok).count();
    let last_5s = step
        .calls
        .iter()
        .filter(|d| d.ok && d.at > args.seconds as f64 - 5.0 && d.at <= args.seconds as f64)
        .count() as f64
        / 5.0;
    eprintln!(
        "step to {} callers (max {} instances, ideal {full:.0} calls/s): 90% of ideal after {}, {} instances after {}; ramp (0-5 s) p50 {:.0} ms p99 {:.0} ms; after p50 {:.0} ms p99 {:.0} ms; last 5 s {last_5s:.1} calls/s; {} calls, {failed} failed",
        args.callers,
        args.max,
        secs(reached),
        args.max,
        secs(max_at),
        percentile(&ramp, 50.0),
        percentile(&ramp, 99.0),
        percentile(&after, 50.0),
        percentile(&after, 99.0),
        step.calls.len(),
    );

    // Down.
    let to_one = wait_for(
        "one instance after the step",
        Duration::from_secs(600),
        Duration::from_millis(250),
        || async { Ok((instances(dev, name).await? <= 1).then(|| ended.elapsed())) },
    )
    .await?;
    let to_zero = wait_for(
        "no instance after the step",
        Duration::from_secs(600),
        Duration::from_millis(250),
        || async { Ok((instances(dev, name).await? == 0).then(|| ended.elapsed())) },
    )
    .await?;
    eprintln!(
        "after the last call: one instance after {:.1} s, none after {:.1} s (idle window {} s)",
        to_one.as_secs_f64(),
        to_zero.as_secs_f64(),
        args.idle
    );
    let decisions: i64 = sqlx::query_scalar(
        "select count(*) from events where type = 'FunctionScaled' and stream like '%/step'",
    )
    .fetch_one(&dev.pool)
    .await?;
    eprintln!("FunctionScaled events: {decisions}");
    eprintln!(
        "Knative (documented): panic window 6 s (10% of the 60 s stable window), panic at 200% of capacity, \
         scale-to-zero grace 30 s after the stable window says 0; its activator buffers calls while it scales"
    );
    Ok(json!({
        "bench": "scale-out",
        "one_instance": { "calls_per_s": one_rate, "p50_ms": one_p50 },
        "step": {
            "callers": args.callers, "max_instances": args.max,
            "to_90pct_of_ideal_s": reached, "to_max_instances_s": max_at,
            "ramp_p50_ms": percentile(&ramp, 50.0), "ramp_p99_ms": percentile(&ramp, 99.0),
            "after_p50_ms": percentile(&after, 50.0), "after_p99_ms": percentile(&after, 99.0),
            "last_5s_calls_per_s": last_5s, "calls": step.calls.len(), "failed": failed,
        },
        "down": { "to_one_s": to_one.as_secs_f64(), "to_zero_s": to_zero.as_secs_f64(), "idle_window_s": args.idle },
        "function_scaled_events": decisions,
    }))
}

fn python_zip_of(code: &str) -> anyhow::Result<Vec<u8>> {
    use std::io::Write;
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    w.start_file("handler.py", zip::write::SimpleFileOptions::default())?;
    w.write_all(code.as_bytes())?;
    Ok(w.finish()?.into_inner())
}

fn sorted(v: impl Iterator<Item = f64>) -> Vec<f64> {
    let mut v: Vec<f64> = v.collect();
    v.sort_by(f64::total_cmp);
    v
}

fn secs(t: Option<f64>) -> String {
    t.map_or("never".to_owned(), |t| format!("{t:.1} s"))
}

async fn instances(dev: &SlessDev, name: &str) -> anyhow::Result<i64> {
    Ok(dev.function(name).await?["instances"].as_i64().unwrap_or(0))
}

/// What a load saw: every call, and the instances over time.
struct Seen {
    calls: Vec<Done>,
    instances: Vec<(f64, i64)>,
}

/// `callers` callers calling `url` again and again for `length`.
async fn load(dev: &SlessDev, url: &str, callers: usize, length: Duration) -> anyhow::Result<Seen> {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(callers)
        .build()?;
    let start = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let tasks: Vec<_> = (0..callers)
        .map(|_| {
            let (http, url, stop) = (http.clone(), url.to_owned(), stop.clone());
            tokio::spawn(async move {
                let mut done = Vec::new();
                while !stop.load(Ordering::Relaxed) {
                    let sent = Instant::now();
                    let ok = match http.get(&url).send().await {
                        Ok(res) => {
                            let ok = res.status().as_u16() == 200;
                            ok && res.bytes().await.is_ok()
                        }
                        Err(_) => false,
                    };
                    done.push(Done {
                        at: start.elapsed().as_secs_f64(),
                        ms: sent.elapsed().as_secs_f64() * 1000.0,
                        ok,
                    });
                }
                done
            })
        })
        .collect();
    let mut seen = Vec::new();
    while start.elapsed() < length {
        seen.push((start.elapsed().as_secs_f64(), instances(dev, "step").await?));
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    stop.store(true, Ordering::Relaxed);
    let mut calls = Vec::new();
    for t in tasks {
        calls.extend(t.await?);
    }
    Ok(Seen {
        calls,
        instances: seen,
    })
}
