//! The namespace's functions: `ls`, `get` and `rm`.

use sless_client::Client;
use sless_client::types::FunctionView;

use crate::cli::output::{Failure, Out, Table, or_dash};

pub async fn ls(client: &Client, out: &Out) -> Result<(), Failure> {
    let list = client.list_functions().await?;
    if out.json() {
        out.document(&list);
        return Ok(());
    }
    let mut t = Table::new(&[
        "NAME",
        "PHASE",
        "VERSION",
        "LIVE",
        "RUNTIME",
        "MEMORY",
        "INSTANCES",
        "URL",
    ]);
    for f in &list.items {
        t.row(vec![
            f.name.clone(),
            out.phase(&f.phase),
            or_dash(f.version),
            or_dash(f.deployed_version),
            or_dash(f.runtime.clone()),
            or_dash(f.memory_mb.map(|m| format!("{m} MiB"))),
            instances_cell(f),
            f.url.clone(),
        ]);
    }
    t.print();
    Ok(())
}

pub async fn get(client: &Client, out: &Out, name: &str) -> Result<(), Failure> {
    let f = client.get_function(name).await?;
    if out.json() {
        out.document(&f.doc);
        return Ok(());
    }
    print_function(out, &f);
    Ok(())
}

fn print_function(out: &Out, f: &FunctionView) {
    let field = |k: &str, v: String| println!("{:<16}{v}", format!("{k}:"));
    field("name", f.name.clone());
    field("phase", out.phase(&f.phase));
    field("version", or_dash(f.version));
    field("deployed", or_dash(f.deployed_version));
    field("runtime", or_dash(f.runtime.clone()));
    field("entrypoint", or_dash(f.entrypoint.clone()));
    field("memory", or_dash(f.memory_mb.map(|m| format!("{m} MiB"))));
    field("timeout", or_dash(f.timeout_sec.map(|t| format!("{t} s"))));
    if let Some(n) = f.instances {
        let mut notes = Vec::new();
        if let (Some(min), Some(max)) = (f.min_instances, f.max_instances) {
            notes.push(format!("min {min}, max {max}"));
        }
        if n == 0 && f.phase == "Ready" {
            notes.push("scaled to zero: the next call starts it".to_owned());
        }
        let shown = match notes.is_empty() {
            true => n.to_string(),
            false => format!("{n} ({})", notes.join("; ")),
        };
        field("instances", shown);
    }
    if let Some(c) = f.concurrency {
        field(
            "concurrency",
            format!(
                "{c} call{} at once per instance",
                if c == 1 { "" } else { "s" }
            ),
        );
    }
    if let Some(n) = f.in_flight {
        field("in flight", format!("{n} calls now"));
    }
    field(
        "scale to zero",
        match (f.min_instances, f.scale_to_zero_after_sec) {
            (Some(min), _) if min > 0 => format!("never: min_instances keeps {min} running"),
            (_, Some(0)) => "never".to_owned(),
            (_, Some(s)) => format!("after {s} s without a call"),
            (_, None) => "after the server's default window".to_owned(),
        },
    );
    if let Some(env) = f.env_vars.as_ref().filter(|e| !e.is_empty()) {
        // Names only: values may be secrets.
        field("env", env.keys().cloned().collect::<Vec<_>>().join(", "));
    }
    field("url", f.url.clone());
    if let Some(at) = &f.updated_at {
        field("updated", at.clone());
    }
    if let Some(e) = &f.last_error {
        field("last error", out.paint("31", e));
    }
}

/// A list's cell of the instances serving and their bounds: `1 (0-10)`.
fn instances_cell(f: &FunctionView) -> String {
    match (f.instances, f.min_instances, f.max_instances) {
        (Some(n), Some(min), Some(max)) => format!("{n} ({min}-{max})"),
        (n, _, _) => or_dash(n),
    }
}

pub async fn rm(client: &Client, out: &Out, name: &str) -> Result<(), Failure> {
    let d = client.delete_function(name).await?;
    if out.json() {
        out.document(&d);
    } else {
        out.note(&format!("{name} deleted"));
    }
    Ok(())
}
