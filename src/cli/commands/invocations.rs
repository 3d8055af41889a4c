//! `sless invocations`: a function's invocation records, oldest first,
//! each job run's output under it, optionally followed as new ones come;
//! or one record and the lines its call printed.

use std::collections::HashSet;
use std::time::Duration;

use clap::Args;
use sless_client::types::{InvocationView, InvocationWithLines};
use sless_client::{Client, PageQuery};

use super::logs::{Printer, invocation_id, short};
use super::since_time;
use crate::cli::output::{Failure, Out, or_dash};

#[derive(Args, Debug)]
pub struct InvocationsArgs {
    pub name: String,
    /// One record, with what its call printed: its id, or the 8
    /// characters `sless logs` shows of it.
    pub id: Option<String>,
    /// Keep printing new records as they come.
    #[arg(short, long)]
    pub follow: bool,
    /// Only those since this long ago (`10m`, `2h`, `1d`) or this RFC 3339
    /// time.
    #[arg(long, value_name = "WHEN", allow_hyphen_values = true)]
    pub since: Option<String>,
}

pub async fn invocations(client: &Client, out: &Out, args: InvocationsArgs) -> Result<(), Failure> {
    let Some(id) = args.id.as_deref() else {
        return list(client, out, &args.name, args.follow, args.since.as_deref()).await;
    };
    if args.follow || args.since.is_some() {
        return Err(Failure::usage(
            "--follow and --since list records; with an ID there is one record to show",
        ));
    }
    let id = invocation_id(client, &args.name, "ID", id).await?;
    let one = client.get_invocation(&args.name, &id).await?;
    if out.json() {
        out.document(&one);
        return Ok(());
    }
    print_one(out, &args.name, &one);
    Ok(())
}

/// One record, field by field, then its lines as `sless logs` shows them.
fn print_one(out: &Out, name: &str, one: &InvocationWithLines) {
    let i = &one.invocation;
    let field = |k: &str, v: String| println!("{:<12}{v}", format!("{k}:"));
    field("id", i.id.clone());
    field("started", i.started_at.clone());
    field("status", status(out, i.status));
    let cold = if i.cold { ", cold start" } else { "" };
    field("duration", format!("{:.1} ms{cold}", i.duration_ms));
    field("version", or_dash(i.version.map(|v| format!("v{v}"))));
    let call = match (&i.method, &i.path, &i.run) {
        (Some(m), Some(p), _) => format!("{} {m} {p}", i.origin),
        (_, _, Some(run)) => format!("{} {run}", i.origin),
        _ => i.origin.clone(),
    };
    field("call", call);
    field("request", i.request_id.clone());
    if let Some(e) = &i.error {
        field("error", out.paint("31", e));
    }
    let count = match one.more_lines {
        true => format!("the first {}", one.lines.len()),
        false => one.lines.len().to_string(),
    };
    field("lines", count);
    let mut printer = Printer::new(out);
    for l in &one.lines {
        printer.line(l);
    }
    if one.more_lines {
        out.note(&format!(
            "… the rest: sless logs {name} --invocation {} --tail 100000",
            i.id
        ));
    }
}

fn status(out: &Out, status: u16) -> String {
    let colour = match status {
        500.. => "31",
        400..=499 => "33",
        _ => return status.to_string(),
    };
    out.paint(colour, &status.to_string())
}

/// Invocation records oldest first, each job run's output under it;
/// `follow` goes on with new ones.
async fn list(
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
                print_record(client, out, i).await;
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

async fn print_record(client: &Client, out: &Out, i: &InvocationView) {
    let cold = if i.cold { " cold" } else { "" };
    let version = or_dash(i.version.map(|v| format!("v{v}")));
    let mut line = format!(
        "{} {} {} {:>8.1} ms {version} {}{cold}",
        i.started_at,
        short(&i.id),
        status(out, i.status),
        i.duration_ms,
        i.origin
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
