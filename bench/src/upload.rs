//! Upload→Ready on `sless dev` with the local driver: a python function
//! without dependencies uploaded `--items` times, one after another (new
//! versions of one function, each with different code, or each a new
//! function); from the POST of the upload to the API showing that version
//! deployed and Ready.

use std::time::{Duration, Instant};

use serde_json::json;

use crate::sless_dev::{DevArgs, Runs, Sandbox, SlessDev, python_zip};
use crate::{Server, percentile};

#[derive(clap::Args)]
pub struct UploadArgs {
    #[command(flatten)]
    dev: DevArgs,
    /// Uploads, one after another.
    #[arg(long, default_value_t = 20)]
    items: usize,
    /// Upload each to a new function instead of new versions of one.
    #[arg(long)]
    new_functions: bool,
    /// How often the API is asked whether the upload is Ready.
    #[arg(long, default_value_t = 5)]
    poll_ms: u64,
    /// With the sandbox, without it (`--unsafe-no-sandbox`), or both one
    /// after the other with the time the sandbox adds.
    #[arg(long, value_enum, default_value = "both")]
    sandbox: Sandbox,
}

pub async fn run(server: &Server, args: UploadArgs) -> anyhow::Result<serde_json::Value> {
    let mut figures = match SlessDev::measured_each(
        server,
        &args.dev,
        args.sandbox,
        "upload→Ready",
        async |dev| measure(dev, &args).await,
    )
    .await?
    {
        Runs::One(figures) => return Ok(figures),
        Runs::Both(figures) => figures,
    };
    let p50 = |k: &str| figures.get(k).and_then(|f| f["p50_ms"].as_f64());
    if let (Some(on), Some(off)) = (p50("sandbox"), p50("no_sandbox")) {
        eprintln!(
            "upload→Ready p50: {on:.0} ms in the sandbox, {off:.0} ms without: the sandbox adds {:.0} ms",
            on - off
        );
        figures.insert("sandbox_adds_p50_ms".into(), json!(on - off));
    }
    figures.insert("bench".into(), json!("upload-ready"));
    Ok(serde_json::Value::Object(figures))
}

fn summary(mut ms: Vec<f64>) -> serde_json::Value {
    ms.sort_by(f64::total_cmp);
    json!({
        "p50_ms": percentile(&ms, 50.0), "p99_ms": percentile(&ms, 99.0),
        "max_ms": percentile(&ms, 100.0), "min_ms": percentile(&ms, 0.0),
    })
}

async fn measure(dev: &SlessDev, args: &UploadArgs) -> anyhow::Result<serde_json::Value> {
    let mut ready_ms = Vec::new();
    let mut accepted_ms = Vec::new();
    if !args.new_functions {
        dev.create("up").await?;
    }
    for i in 0..args.items {
        let name = if args.new_functions {
            let name = format!("up-{i}");
            dev.create(&name).await?;
            name
        } else {
            "up".to_owned()
        };
        let zip = python_zip(&format!("upload {i}"))?;
        let posted = Instant::now();
        let version = dev.upload(&name, zip).await?;
        let accepted = posted.elapsed();
        let ready = dev
            .wait_ready(
                &name,
                version,
                Duration::from_secs(120),
                Duration::from_millis(args.poll_ms),
            )
            .await?;
        let ms = (ready - posted).as_secs_f64() * 1000.0;
        eprintln!(
            "upload {i} ({name} v{version}): accepted in {:.1} ms, Ready in {ms:.0} ms",
            accepted.as_secs_f64() * 1000.0
        );
        ready_ms.push(ms);
        accepted_ms.push(accepted.as_secs_f64() * 1000.0);
    }
    let ready = summary(ready_ms.clone());
    eprintln!(
        "upload→Ready over {} uploads: p50 {:.0} ms, p99 {:.0} ms, max {:.0} ms",
        args.items,
        ready["p50_ms"].as_f64().unwrap_or(f64::NAN),
        ready["p99_ms"].as_f64().unwrap_or(f64::NAN),
        ready["max_ms"].as_f64().unwrap_or(f64::NAN),
    );
    Ok(json!({
        "bench": "upload-ready", "uploads": args.items, "new_functions": args.new_functions,
        "poll_ms": args.poll_ms, "p50_ms": ready["p50_ms"], "p99_ms": ready["p99_ms"],
        "max_ms": ready["max_ms"], "min_ms": ready["min_ms"], "accepted": summary(accepted_ms),
        "samples_ms": ready_ms,
    }))
}
