//! `sless logs`: a function's invocation records, each job run's output
//! under it, optionally followed as new ones come.

use std::collections::HashSet;
use std::time::Duration;

use sless_client::types::InvocationView;
use sless_client::{Client, PageQuery};

use super::since_time;
use crate::cli::output::{Failure, Out, or_dash};

/// `sless logs NAME`: invocation records oldest first, each job run's
/// output under it; `--follow` goes on with new ones.
pub async fn logs(
    client: &Client,
    out: &Out,
    name: &str,
    follow: bool,
    since: Option<&str>,
) -> Result<(), Failure> {
    let since = since.map(since_time).transpose()?;
    let mut seen = HashSet::new();
    let mut first = true;
    loop {
        let page = client.list_invocations(name, &PageQuery::default()).await?;
        let mut fresh: Vec<&InvocationView> = page
            .items
            .iter()
            .filter(|i| !seen.contains(&i.id))
            .filter(|i| {
                since.is_none_or(|s| {
                    chrono::DateTime::parse_from_rfc3339(&i.started_at).is_ok_and(|t| t >= s)
                })
            })
            .collect();
        fresh.reverse();
        if out.json() && !follow && first {
            let items: Vec<_> = fresh.iter().collect();
            out.document(&serde_json::json!({ "items": items }));
            return Ok(());
        }
        for i in fresh {
            seen.insert(i.id.clone());
            if out.json() {
                out.json_line(i);
            } else {
                print_invocation(client, out, i).await;
            }
        }
        for i in &page.items {
            seen.insert(i.id.clone());
        }
        first = false;
        if !follow {
            return Ok(());
        }
        // Invocation records are written off the request path, a batch at
        // a time; they are read again at that pace.
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}

async fn print_invocation(client: &Client, out: &Out, i: &InvocationView) {
    let status = if i.status >= 500 {
        out.paint("31", &i.status.to_string())
    } else if i.status >= 400 {
        out.paint("33", &i.status.to_string())
    } else {
        i.status.to_string()
    };
    let cold = if i.cold { " cold" } else { "" };
    let version = or_dash(i.version.map(|v| format!("v{v}")));
    let mut line = format!(
        "{} {status} {:>8.1} ms {version} {}{cold}",
        i.started_at, i.duration_ms, i.origin
    );
    if let Some(e) = &i.error {
        line.push_str(&format!(" error: {e}"));
    }
    println!("{line}");
    // A job's run: its output under it.
    let job = i
        .run
        .as_deref()
        .filter(|r| r.starts_with("job/"))
        .and_then(|r| r.rsplit('/').next());
    if let Some(job) = job
        && let Ok(j) = client.get_job(job).await
    {
        for (stream, text) in [("stdout", &j.stdout), ("stderr", &j.stderr)] {
            if let Some(o) = text {
                for l in o.text.lines() {
                    println!("  {} {l}", out.paint("2", stream));
                }
            }
        }
    }
}
