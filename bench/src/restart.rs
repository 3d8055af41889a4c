//! Restarting `sless dev` under load: `--functions` python functions, of
//! which `--warm` are called all the time by `--callers` callers and the
//! rest are at zero (an idle window of one second; one more caller goes
//! round a sample of them, so that some calls start a function from zero);
//! then `--restarts` restarts (SIGTERM, and `sless dev` again on the same
//! database, data directory and addresses).
//!
//! A caller sends a GET, and sends it again while its connection is
//! refused (nothing listens during the restart) or breaks before any
//! answer, as a load balancer in front would; a call failed when it was
//! answered with anything but 200. Measured: calls answered and failed,
//! the connections refused, and for each restart how long nothing
//! listened, and the longest call that spanned it (its hold, retries
//! included). Fission's published figure for an upgrade is printed beside.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use serde_json::json;

use crate::Server;
use crate::sless_dev::{DevArgs, SlessDev, python_zip};

#[derive(clap::Args)]
pub struct RestartArgs {
    #[command(flatten)]
    dev: DevArgs,
    /// Functions in all.
    #[arg(long, default_value_t = 20)]
    functions: usize,
    /// Of them, the ones called all the time (the rest are at zero).
    #[arg(long, default_value_t = 10)]
    warm: usize,
    /// Callers of the warm functions.
    #[arg(long, default_value_t = 8)]
    callers: usize,
    /// Restarts.
    #[arg(long, default_value_t = 5)]
    restarts: usize,
    /// Seconds of calls between two restarts.
    #[arg(long, default_value_t = 5)]
    between: u64,
}

/// One call: when it started and ended (since the load began), its
/// status (0: no answer), and the connections refused before it.
#[derive(Clone, Copy)]
struct Call {
    start: f64,
    end: f64,
    status: u16,
    refused: u32,
}

pub async fn run(server: &Server, args: RestartArgs) -> anyhow::Result<serde_json::Value> {
    let mut dev = SlessDev::start(server, &args.dev).await?;
    let result = measure(&mut dev, &args).await;
    if result.is_err() {
        eprintln!(
            "sless dev's log ends:\n{}",
            crate::sless_dev::tail(&dev.log_path())
        );
    }
    dev.stop().await?;
    result
}

async fn measure(dev: &mut SlessDev, args: &RestartArgs) -> anyhow::Result<serde_json::Value> {
    let warm = args.warm.min(args.functions);
    let names: Vec<String> = (0..args.functions).map(|i| format!("f{i}")).collect();
    let deploying = Instant::now();
    for (i, name) in names.iter().enumerate() {
        let spec = match i < warm {
            true => json!({}),
            false => json!({"scale_to_zero_after_sec": 1}),
        };
        dev.create_with(name, spec).await?;
        dev.upload(name, python_zip(name)?).await?;
    }
    for name in &names {
        dev.wait_ready(
            name,
            1,
            Duration::from_secs(900),
            Duration::from_millis(100),
        )
        .await?;
    }
    eprintln!(
        "{} functions deployed in {:.1} s",
        names.len(),
        deploying.elapsed().as_secs_f64()
    );
    // The idle ones at zero before the first restart.
    crate::wait_for(
        "the idle functions to be at zero",
        Duration::from_secs(300),
        Duration::from_millis(250),
        || async {
            let serving: i64 = sqlx::query_scalar(
                "select count(*) from functions where endpoint is not null and name <> all($1)",
            )
            .bind(&names[..warm])
            .fetch_one(&dev.pool)
            .await?;
            Ok((serving == 0).then_some(()))
        },
    )
    .await?;

    let url = |name: &String| format!("{}/fn/{}/{name}", dev.fn_url, dev.namespace);
    let mut lists: Vec<Vec<String>> = (0..args.callers)
        .map(|i| {
            names[..warm]
                .iter()
                .skip(i % warm.max(1))
                .step_by(args.callers.min(warm).max(1))
                .map(url)
                .collect()
        })
        .collect();
    if warm < names.len() {
        lists.push(names[warm..].iter().step_by(7).map(url).collect());
    }
    let began = Instant::now();
    let stop = Arc::new(AtomicBool::new(false));
    let callers: Vec<_> = lists
        .into_iter()
        .map(|urls| tokio::spawn(caller(urls, began, stop.clone())))
        .collect();

    let mut downs = Vec::new();
    tokio::time::sleep(Duration::from_secs(args.between)).await;
    for _ in 0..args.restarts {
        let stopping = began.elapsed().as_secs_f64();
        dev.terminate().await?;
        let stopped = began.elapsed().as_secs_f64();
        let announced = dev.start_again().await?;
        downs.push((stopping, stopped, announced));
        tokio::time::sleep(Duration::from_secs(args.between)).await;
    }
    stop.store(true, Ordering::SeqCst);
    let mut calls = Vec::new();
    for c in callers {
        calls.extend(c.await?);
    }

    let failed = calls.iter().filter(|c| c.status != 200).count();
    let refused: u32 = calls.iter().map(|c| c.refused).sum();
    let mut per_restart = Vec::new();
    for (i, (stopping, stopped, announced)) in downs.iter().enumerate() {
        // The calls under way at some moment from the SIGTERM until the
        // new process announced itself.
        let until = stopped + announced.as_secs_f64();
        let spanning: Vec<&Call> = calls
            .iter()
            .filter(|c| c.start <= until && c.end >= *stopping)
            .collect();
        let longest = spanning
            .iter()
            .map(|c| (c.end - c.start) * 1000.0)
            .fold(0.0, f64::max);
        let failed_here = spanning.iter().filter(|c| c.status != 200).count();
        eprintln!(
            "restart {}: stopped in {:.2} s, announced {:.2} s after its start; {} calls spanned it, {failed_here} failed, the longest {longest:.0} ms",
            i + 1,
            stopped - stopping,
            announced.as_secs_f64(),
            spanning.len(),
        );
        per_restart.push(json!({
            "stop_s": stopped - stopping, "announced_s": announced.as_secs_f64(),
            "calls": spanning.len(), "failed": failed_here, "longest_ms": longest,
        }));
    }
    let pct = 100.0 * failed as f64 / calls.len().max(1) as f64;
    eprintln!(
        "{} functions ({warm} warm), {} restarts: {} calls, {failed} failed ({pct:.2}%), {refused} connections refused while nothing listened (sent again)",
        names.len(),
        args.restarts,
        calls.len()
    );
    eprintln!(
        "Fission (published, RFC-0028): 146 failed requests, 4.0%, during an upgrade of its router"
    );
    Ok(json!({
        "bench": "restart",
        "functions": names.len(), "warm": warm, "restarts": args.restarts,
        "calls": calls.len(), "failed": failed, "failed_pct": pct, "refused": refused,
        "per_restart": per_restart,
    }))
}

/// Calls `urls` round and round until `stop`, each call as the module says.
async fn caller(urls: Vec<String>, began: Instant, stop: Arc<AtomicBool>) -> Vec<Call> {
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(60))
        .build()
        .expect("a client");
    let mut calls = Vec::new();
    for url in urls.iter().cycle() {
        if stop.load(Ordering::SeqCst) {
            break;
        }
        let start = began.elapsed().as_secs_f64();
        let mut refused = 0;
        let status = loop {
            match http.get(url).send().await {
                Ok(res) => {
                    let status = res.status().as_u16();
                    let _ = res.bytes().await;
                    break status;
                }
                Err(e) if !e.is_timeout() && began.elapsed().as_secs_f64() - start < 60.0 => {
                    refused += u32::from(e.is_connect());
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
                Err(_) => break 0,
            }
        };
        calls.push(Call {
            start,
            end: began.elapsed().as_secs_f64(),
            status,
            refused,
        });
    }
    calls
}
