//! `sless invoke`: a call of a function through its URL, printed like
//! curl prints an answer.

use std::io::{Read, Write};

use clap::Args;
use sless_client::{Client, Invoke};

use crate::cli::output::{Failure, Out};

#[derive(Args, Debug)]
pub struct InvokeArgs {
    pub name: String,
    /// The body: text, or `@file` (`@-`: stdin).
    #[arg(short = 'd', long = "data")]
    pub data: Option<String>,
    /// The method (default GET, or POST with a body).
    #[arg(short = 'X', long = "request")]
    pub method: Option<String>,
    /// The path the function sees, with its query (`/items?x=1`).
    #[arg(long, default_value = "/")]
    pub path: String,
    /// A header, `K: V` (repeat).
    #[arg(short = 'H', long = "header", value_name = "K:V")]
    pub headers: Vec<String>,
    /// Print the status and headers before the body.
    #[arg(short, long)]
    pub include: bool,
}

pub async fn invoke(client: &Client, out: &Out, args: InvokeArgs) -> Result<(), Failure> {
    let body = match args.data.as_deref() {
        None => Vec::new(),
        Some("@-") => {
            let mut buf = Vec::new();
            std::io::stdin()
                .read_to_end(&mut buf)
                .map_err(|e| Failure::usage(format!("cannot read stdin: {e}")))?;
            buf
        }
        Some(d) if d.starts_with('@') => std::fs::read(&d[1..])
            .map_err(|e| Failure::usage(format!("cannot read {}: {e}", &d[1..])))?,
        Some(d) => d.as_bytes().to_vec(),
    };
    let mut headers = Vec::new();
    for h in &args.headers {
        let (k, v) = h
            .split_once(':')
            .ok_or_else(|| Failure::usage(format!("-H {h:?} is not K:V")))?;
        headers.push((k.trim().to_owned(), v.trim().to_owned()));
    }
    let method = args
        .method
        .clone()
        .unwrap_or_else(|| if body.is_empty() { "GET" } else { "POST" }.into());
    let path = if args.path.starts_with('/') {
        args.path.clone()
    } else {
        format!("/{}", args.path)
    };
    let answer = client
        .invoke(
            &args.name,
            &Invoke {
                method,
                path,
                headers,
                body,
            },
        )
        .await?;
    if out.json() {
        let text = String::from_utf8_lossy(&answer.body).into_owned();
        let json: Option<serde_json::Value> = serde_json::from_slice(&answer.body).ok();
        out.document(&serde_json::json!({
            "status": answer.status,
            "headers": answer.headers.iter().map(|(k, v)| serde_json::json!([k, v])).collect::<Vec<_>>(),
            "body": text,
            "json": json,
        }));
    } else {
        let mut stdout = std::io::stdout().lock();
        if args.include {
            let _ = writeln!(stdout, "HTTP {}", answer.status);
            for (k, v) in &answer.headers {
                let _ = writeln!(stdout, "{k}: {v}");
            }
            let _ = writeln!(stdout);
        }
        let _ = stdout.write_all(&answer.body);
        if out.terminal && !answer.body.ends_with(b"\n") {
            let _ = writeln!(stdout);
        }
        let _ = stdout.flush();
    }
    if answer.status >= 400 {
        return Err(Failure::failed(format!(
            "{} answered {}",
            args.name, answer.status
        )));
    }
    Ok(())
}
