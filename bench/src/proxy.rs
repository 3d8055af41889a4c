//! The invoke proxy: wrk against one python function directly on its
//! loopback endpoint, through `/fn/{ns}/{name}` on `sless dev`, and through
//! a private nginx with a keepalive pool (the anchor), first each at full
//! speed, then the three paced at the same open load (their latencies like
//! for like); and the memory of the `sless dev` process, idle and after the
//! load.

use std::time::Duration;

use serde_json::json;

use crate::nginx::Nginx;
use crate::sless_dev::{DevArgs, Runs, Sandbox, SlessDev, python_zip};
use crate::{Server, wrk};

#[derive(clap::Args)]
pub struct ProxyArgs {
    #[command(flatten)]
    dev: DevArgs,
    #[command(flatten)]
    load: wrk::Load,
    /// With the function in the sandbox, without it (`--unsafe-no-sandbox`),
    /// or both one after the other (what the sandbox costs a call).
    #[arg(long, value_enum, default_value = "on")]
    sandbox: Sandbox,
    /// After the runs at full speed, the three targets again at the same
    /// open load: this fraction of the direct run's req/s (0: not run). Their
    /// latencies compare like for like, where the full-speed runs compare
    /// latencies at different rates.
    #[arg(long, default_value_t = 0.5)]
    paced: f64,
}

const FUNCTION: &str = "hello";

pub async fn run(server: &Server, args: ProxyArgs) -> anyhow::Result<serde_json::Value> {
    let mut figures =
        match SlessDev::measured_each(server, &args.dev, args.sandbox, "proxy", async |dev| {
            measure(dev, &args).await
        })
        .await?
        {
            Runs::One(figures) => return Ok(figures),
            Runs::Both(figures) => figures,
        };
    let direct = |k: &str| {
        figures[k]["direct"]["req_per_s"]
            .as_f64()
            .unwrap_or(f64::NAN)
    };
    let via = |k: &str| {
        figures[k]["via_sless"]["req_per_s"]
            .as_f64()
            .unwrap_or(f64::NAN)
    };
    let p99 = |k: &str| figures[k]["direct"]["p99_ms"].as_f64().unwrap_or(f64::NAN);
    eprintln!(
        "a function in the sandbox against one without: direct {:.2}x req/s (p99 {:+.2} ms), \
         through /fn {:.2}x req/s",
        direct("sandbox") / direct("no_sandbox"),
        p99("sandbox") - p99("no_sandbox"),
        via("sandbox") / via("no_sandbox"),
    );
    let (vs_direct, vs_via) = (
        direct("sandbox") / direct("no_sandbox"),
        via("sandbox") / via("no_sandbox"),
    );
    figures.insert("sandbox_vs_none_direct".into(), json!(vs_direct));
    figures.insert("sandbox_vs_none_via_sless".into(), json!(vs_via));
    figures.insert("bench".into(), json!("proxy"));
    Ok(serde_json::Value::Object(figures))
}

/// GETs `url` once and insists on a 200.
async fn check(http: &reqwest::Client, url: &str) -> anyhow::Result<()> {
    let res = http.get(url).send().await?;
    let status = res.status();
    anyhow::ensure!(
        status.as_u16() == 200,
        "{url}: {status} {}",
        res.text().await?
    );
    Ok(())
}

async fn measure(dev: &SlessDev, args: &ProxyArgs) -> anyhow::Result<serde_json::Value> {
    // Idle: started, nothing asked of it yet. The pause is the condition measured.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let idle = dev.memory()?;
    // One instance that takes every connection's call at once: the
    // proxy's own cost, as the direct calls see the same process.
    dev.create_with(FUNCTION, json!({"max_instances": 1, "concurrency": 1000}))
        .await?;
    let version = dev.upload(FUNCTION, python_zip("proxy")?).await?;
    dev.wait_ready(
        FUNCTION,
        version,
        Duration::from_secs(120),
        Duration::from_millis(20),
    )
    .await?;
    let ready = dev.memory()?;
    let endpoint = dev.endpoint(FUNCTION).await?;
    let upstream = endpoint
        .strip_prefix("http://")
        .ok_or_else(|| anyhow::anyhow!("endpoint {endpoint} is not http://"))?
        .trim_end_matches('/')
        .to_owned();
    let nginx = Nginx::start(&upstream).await?;
    let direct_url = format!("http://{upstream}/");
    let sless_url = format!("{}/fn/{}/{FUNCTION}/", dev.fn_url, dev.namespace);
    let nginx_url = format!("{}/", nginx.url);
    let result = async {
        for url in [&direct_url, &sless_url, &nginx_url] {
            check(&dev.http, url).await?;
        }
        let load = &args.load;
        let direct = wrk::measure("direct", &direct_url, load, &[], "").await?;
        let via_sless = wrk::measure("via sless /fn", &sless_url, load, &[], "").await?;
        let after_load = dev.memory()?;
        let via_nginx = wrk::measure("via nginx", &nginx_url, load, &[], "").await?;
        let paced = if args.paced > 0.0 {
            let rate = args.paced * direct.req_per_s;
            let pace = wrk::paced(rate, load.connections);
            let mut runs = Vec::new();
            for (what, url) in [
                ("direct, paced", &direct_url),
                ("via sless /fn, paced", &sless_url),
                ("via nginx, paced", &nginx_url),
            ] {
                runs.push(wrk::measure(what, url, load, &[], &pace).await?);
            }
            let [d, s, n] = <[wrk::Figures; 3]>::try_from(runs).expect("three runs");
            eprintln!(
                "at about {rate:.0} req/s each: added p50 {:.3} ms, added p99 {:.3} ms \
                 through sless; added p50 {:.3} ms, added p99 {:.3} ms through nginx",
                s.p50_ms - d.p50_ms,
                s.p99_ms - d.p99_ms,
                n.p50_ms - d.p50_ms,
                n.p99_ms - d.p99_ms,
            );
            json!({
                "rate": rate, "direct": d, "via_sless": s, "via_nginx": n,
                "added_p50_ms": s.p50_ms - d.p50_ms, "added_p99_ms": s.p99_ms - d.p99_ms,
                "nginx_added_p50_ms": n.p50_ms - d.p50_ms, "nginx_added_p99_ms": n.p99_ms - d.p99_ms,
            })
        } else {
            serde_json::Value::Null
        };
        anyhow::Ok((direct, via_sless, via_nginx, after_load, paced))
    }
    .await;
    nginx.stop().await?;
    let (direct, via_sless, via_nginx, after_load, paced) = result?;

    let vs_direct = via_sless.req_per_s / direct.req_per_s;
    let vs_nginx = via_sless.req_per_s / via_nginx.req_per_s;
    let added_p50 = via_sless.p50_ms - direct.p50_ms;
    let added_p99 = via_sless.p99_ms - direct.p99_ms;
    eprintln!(
        "via sless / direct: {vs_direct:.2}x req/s, added p50 {added_p50:.3} ms, added p99 {added_p99:.3} ms; \
         via sless / via nginx: {vs_nginx:.2}x req/s (nginx / direct {:.2}x, added p99 {:.3} ms)",
        via_nginx.req_per_s / direct.req_per_s,
        via_nginx.p99_ms - direct.p99_ms,
    );
    eprintln!(
        "sless dev memory: idle {} KiB (peak {}), function ready {} KiB, after the proxy load {} KiB (peak {}); \
         of which its own (anonymous) {} / {} / {} KiB, mapped files {} / {} / {} KiB",
        idle.rss_kib,
        idle.peak_kib,
        ready.rss_kib,
        after_load.rss_kib,
        after_load.peak_kib,
        idle.anon_kib,
        ready.anon_kib,
        after_load.anon_kib,
        idle.file_kib,
        ready.file_kib,
        after_load.file_kib,
    );
    Ok(json!({
        "bench": "proxy", "connections": args.load.connections, "threads": args.load.threads,
        "duration_s": args.load.duration, "direct": direct, "via_sless": via_sless,
        "via_nginx": via_nginx, "sless_vs_direct": vs_direct, "sless_vs_nginx": vs_nginx,
        "nginx_vs_direct": via_nginx.req_per_s / direct.req_per_s,
        "added_p50_ms": added_p50, "added_p99_ms": added_p99,
        "nginx_added_p50_ms": via_nginx.p50_ms - direct.p50_ms,
        "nginx_added_p99_ms": via_nginx.p99_ms - direct.p99_ms,
        "paced": paced,
        "memory_kib": { "idle": idle, "function_ready": ready, "after_proxy_load": after_load },
    }))
}
