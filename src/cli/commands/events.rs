//! `sless events`: the namespace's audit log, listed or followed.

use std::io::Write;

use sless_client::types::EventEntry;
use sless_client::{Client, EventFilter};

use super::since_time;
use crate::cli::output::{Failure, Out};

/// `sless events`' arguments.
pub struct EventsArgs {
    pub function: Option<String>,
    pub types: Vec<String>,
    pub since: Option<String>,
    pub limit: u32,
    pub follow: bool,
}

pub async fn events(client: &Client, out: &Out, args: EventsArgs) -> Result<(), Failure> {
    let since = args
        .since
        .as_deref()
        .map(since_time)
        .transpose()?
        .map(|t| t.to_rfc3339());
    let filter = EventFilter {
        function: args.function,
        types: args.types,
        since,
        limit: Some(args.limit),
        ..EventFilter::default()
    };
    if args.follow {
        let mut tail = client.tail_events(&filter).await?;
        while let Some(e) = tail.next().await {
            let e = e?;
            if out.json() {
                out.json_line(&e);
            } else {
                print_event(out, &e);
                let _ = std::io::stdout().flush();
            }
        }
        return Ok(());
    }
    let page = client.list_events(&filter).await?;
    if out.json() {
        out.document(&page);
        return Ok(());
    }
    for e in page.items.iter().rev() {
        print_event(out, e);
    }
    Ok(())
}

fn print_event(out: &Out, e: &EventEntry) {
    let version = e
        .data
        .get("version")
        .and_then(|v| v.as_u64())
        .map(|v| format!(" v{v}"))
        .unwrap_or_default();
    let what = e.stream.splitn(3, '/').collect::<Vec<_>>();
    let subject = match what.as_slice() {
        [kind, _, name] => format!("{kind} {name}"),
        _ => e.stream.clone(),
    };
    let error = e
        .data
        .get("error")
        .and_then(|v| v.as_str())
        .map(|s| format!(" — {}", s.lines().next().unwrap_or("")))
        .or_else(|| why(&e.data))
        .unwrap_or_default();
    println!(
        "{} {:<20} {subject}{version} by {}{error}",
        e.time,
        out.paint("36", &e.event_type),
        e.actor.as_deref().unwrap_or("-"),
    );
}

/// Why sless did it, for the events that say: a scale's counts, window and
/// reason (`FunctionScaled`), or the reason alone (scaling to zero and
/// back, a stop).
fn why(data: &serde_json::Value) -> Option<String> {
    let reason = data.get("reason")?.as_str()?;
    Some(
        match (data.get("from"), data.get("to"), data.get("window")) {
            (Some(from), Some(to), Some(window)) => format!(
                " — {from} → {to} instances ({} window): {reason}",
                window.as_str().unwrap_or("?")
            ),
            _ => format!(" — {reason}"),
        },
    )
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    #[test]
    fn a_scale_says_its_counts_window_and_reason_and_others_their_reason() {
        let scaled = json!({"from": 1, "to": 4, "window": "panic", "observed": 3.2,
                            "reason": "3.2 calls in flight over the last 6 s"});
        assert_eq!(
            super::why(&scaled).unwrap(),
            " — 1 → 4 instances (panic window): 3.2 calls in flight over the last 6 s"
        );
        let idle = json!({"version": 2, "reason": "no call for 900 s"});
        assert_eq!(super::why(&idle).unwrap(), " — no call for 900 s");
        assert_eq!(super::why(&json!({"version": 2})), None);
    }
}
