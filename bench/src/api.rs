//! The control-plane API on `sless dev`: with `--items` functions created in
//! one namespace (through the API), wrk on a 100-row page of the list
//! (`GET .../functions?limit=100`), on a 1000-row page (`?limit=1000`, the
//! largest) and on `GET .../functions/{name}` (a random one of them per
//! request).

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
    let listed = wait_for(
        "every function in the list",
        Duration::from_secs(120),
        Duration::from_millis(50),
        || async {
            let (n, first_bytes) = count_pages(dev, &list_url).await?;
            Ok((n == items).then_some(first_bytes))
        },
    )
    .await?;
    eprintln!(
        "created {items} functions in {create_s:.1} s ({:.0}/s); the 1000-row page is {listed} bytes",
        items as f64 / create_s
    );
    let auth = vec![format!("Authorization: Bearer {}", dev.token)];
    let page_100 = wrk::measure(
        "GET .../functions?limit=100",
        &format!("{list_url}?limit=100"),
        &args.load,
        &auth,
        "",
    )
    .await?;
    let page_1000 = wrk::measure(
        "GET .../functions?limit=1000",
        &format!("{list_url}?limit=1000"),
        &args.load,
        &auth,
        "",
    )
    .await?;
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
        "creates_per_s": items as f64 / create_s, "page_1000_bytes": listed,
        "page_100": page_100, "page_1000": page_1000, "get": get,
    }))
}

/// How many functions the list shows, every page of 1000 followed (by
/// `next_cursor`), and the bytes of the first page.
async fn count_pages(dev: &SlessDev, list_url: &str) -> anyhow::Result<(usize, usize)> {
    let (mut n, mut first_bytes) = (0, None);
    let mut cursor: Option<String> = None;
    loop {
        let mut req = dev.http.get(list_url).query(&[("limit", "1000")]);
        if let Some(c) = &cursor {
            req = req.query(&[("cursor", c)]);
        }
        let body = req
            .bearer_auth(&dev.token)
            .send()
            .await?
            .error_for_status()?
            .bytes()
            .await?;
        first_bytes.get_or_insert(body.len());
        let page: serde_json::Value = serde_json::from_slice(&body)?;
        n += page["items"].as_array().map_or(0, Vec::len);
        match page["next_cursor"].as_str() {
            Some(c) => cursor = Some(c.to_owned()),
            None => return Ok((n, first_bytes.unwrap_or(0))),
        }
    }
}
