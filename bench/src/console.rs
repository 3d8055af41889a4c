//! The web console's pages on `sless dev`, signed in: wrk on the namespace
//! page with `--items` functions (its first page of 50) and on a function
//! page whose source has `--files` files.

use std::io::Write;
use std::time::Duration;

use serde_json::json;
use sless_store::console::{self, Principal, Session};

use crate::sless_dev::{DevArgs, SlessDev};
use crate::{Server, wait_for, wrk};

#[derive(clap::Args)]
pub struct ConsoleArgs {
    #[command(flatten)]
    dev: DevArgs,
    #[command(flatten)]
    load: wrk::Load,
    /// Functions in the namespace.
    #[arg(long, default_value_t = 1_000)]
    items: usize,
    /// Files in the source of the function whose page is loaded.
    #[arg(long, default_value_t = 200)]
    files: usize,
    /// Creates in flight while filling the namespace.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
}

pub async fn run(server: &Server, args: ConsoleArgs) -> anyhow::Result<serde_json::Value> {
    SlessDev::measured(server, &args.dev, async |dev| measure(dev, &args).await).await
}

/// A zip of `files` small Python modules.
fn source(files: usize) -> anyhow::Result<Vec<u8>> {
    let mut zip = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let opts = zip::write::SimpleFileOptions::default();
    zip.start_file("handler.py", opts)?;
    zip.write_all(b"def handle(event):\n    return {\"ok\": True}\n")?;
    for i in 1..files {
        zip.start_file(format!("pkg/module_{i:03}.py"), opts)?;
        for line in 0..20 {
            writeln!(
                zip,
                "def f{line}(x):\n    # line {line}\n    return x * {line} + \"{i}\""
            )?;
        }
    }
    Ok(zip.finish()?.into_inner())
}

async fn measure(dev: &SlessDev, args: &ConsoleArgs) -> anyhow::Result<serde_json::Value> {
    let create_s = crate::api::fill(dev, args.items, args.concurrency).await?;
    dev.create("big").await?;
    dev.upload("big", source(args.files)?).await?;
    let source_url = dev.v1("/functions/big/source");
    wait_for(
        "the big function's source",
        Duration::from_secs(120),
        Duration::from_millis(100),
        || async {
            let res = dev
                .http
                .get(&source_url)
                .bearer_auth(&dev.token)
                .send()
                .await?;
            Ok(res.status().is_success().then_some(()))
        },
    )
    .await?;
    // Signed in as the token's user: a session of its own.
    let id = uuid::Uuid::new_v4().to_string();
    let session = Session {
        principal: Principal {
            sub: "dev".into(),
            namespace: dev.namespace.clone(),
            admin: false,
        },
        csrf: "bench".into(),
        expires_at: chrono::Utc::now() + chrono::Duration::hours(1),
    };
    console::create_session(&dev.pool, &id, &session).await?;
    let cookie = vec![format!("Cookie: __Host-sless_session={id}")];
    let page_url = format!("{}/console/ns/{}", dev.url, dev.namespace);
    let function_url = format!("{page_url}/functions/big");
    for url in [&page_url, &function_url] {
        let res = dev
            .http
            .get(url)
            .header("cookie", &cookie[0]["Cookie: ".len()..])
            .send()
            .await?;
        anyhow::ensure!(res.status().is_success(), "{url}: {}", res.status());
    }
    let namespace = wrk::measure("namespace page", &page_url, &args.load, &cookie, "").await?;
    let function = wrk::measure("function page", &function_url, &args.load, &cookie, "").await?;
    Ok(json!({
        "bench": "console", "functions": args.items, "files": args.files,
        "connections": args.load.connections, "duration_s": args.load.duration,
        "create_s": create_s, "namespace_page": namespace, "function_page": function,
    }))
}
