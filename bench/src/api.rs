//! The control-plane API on `sless dev`: with `--items` functions created in
//! one namespace (through the API), wrk on `GET .../functions` and on
//! `GET .../functions/{name}` (a random one of them per request).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use futures_util::future::try_join_all;
use serde_json::json;

use crate::sless_dev::{DevArgs, SlessDev};
use crate::{Server, wait_for, wrk};

#[derive(clap::Args)]
pub struct ApiArgs {
    #[command(flatten)]
    dev: DevArgs,
    #[command(flatten)]
    load: wrk::Load,
    /// Functions in the namespace.
    #[arg(long, default_value_t = 1_000)]
    items: usize,
    /// Creates in flight while filling the namespace.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
}

pub async fn run(server: &Server, args: ApiArgs) -> anyhow::Result<serde_json::Value> {
    SlessDev::measured(server, &args.dev, async |dev| measure(dev, &args).await).await
}

pub fn name(i: usize) -> String {
    format!("f-{i:05}")
}

/// Creates `items` functions (`name(i)`), `concurrency` at a time; the
/// seconds it took.
pub async fn fill(dev: &SlessDev, items: usize, concurrency: usize) -> anyhow::Result<f64> {
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let creator = || async {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= items {
                return anyhow::Ok(());
            }
            dev.create(&name(i)).await?;
        }
    };
    try_join_all((0..concurrency.max(1)).map(|_| creator())).await?;
    Ok(started.elapsed().as_secs_f64())
}

async fn measure(dev: &SlessDev, args: &ApiArgs) -> anyhow::Result<serde_json::Value> {
    let create_s = fill(dev, args.items, args.concurrency).await?;
    let list_url = dev.v1("/functions");
    let items = args.items;
    let listed_bytes = wait_for(
        "every function in the list",
        Duration::from_secs(120),
        Duration::from_millis(50),
        || async {
            let body = dev
                .http
                .get(&list_url)
                .bearer_auth(&dev.token)
                .send()
                .await?
                .error_for_status()?
                .bytes()
                .await?;
            let list: serde_json::Value = serde_json::from_slice(&body)?;
            let n = list["items"].as_array().map_or(0, Vec::len);
            Ok((n == items).then_some(body.len()))
        },
    )
    .await?;
    eprintln!(
        "created {items} functions in {create_s:.1} s ({:.0}/s); the list is {listed_bytes} bytes",
        items as f64 / create_s
    );
    let auth = vec![format!("Authorization: Bearer {}", dev.token)];
    let list = wrk::measure("GET .../functions", &list_url, &args.load, &auth, "").await?;
    // One random function of the namespace per request.
    let pick = format!(
        "math.randomseed(os.time())\n\
         request = function()\n  \
           return wrk.format(nil, string.format(\"/v1/namespaces/{}/functions/f-%05d\", math.random(0, {})))\n\
         end",
        dev.namespace,
        items.saturating_sub(1)
    );
    let get_url = dev.v1(&format!("/functions/{}", name(0)));
    let get = wrk::measure(
        "GET .../functions/{name}",
        &get_url,
        &args.load,
        &auth,
        &pick,
    )
    .await?;
    Ok(json!({
        "bench": "api", "functions": items, "connections": args.load.connections,
        "duration_s": args.load.duration, "create_s": create_s,
        "creates_per_s": items as f64 / create_s, "list_bytes": listed_bytes,
        "list": list, "get": get,
    }))
}
