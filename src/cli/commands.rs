//! The user commands that read or change one thing: `ls`, `get`,
//! `invoke`, `logs`, `versions`, `source`, `diff`, `rm`, `build-log`,
//! `trigger ...`, `job ...`, `events`.

use std::collections::HashSet;
use std::io::{Read, Write};
use std::time::Duration;

use clap::{Args, Subcommand};
use sless_client::types::{EventEntry, FunctionView, InvocationView, JobView, TriggerView};
use sless_client::{
    BuildLogEvent, Client, CreateJob, CreateTrigger, EventFilter, Invoke, PageQuery,
};

use super::output::{Failure, Out, Table, code, or_dash};

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

#[derive(Subcommand, Debug)]
pub enum TriggerCommand {
    /// Create a trigger.
    Create {
        name: String,
        /// The function it runs.
        #[arg(long)]
        function: String,
        /// `http` or `cron`.
        #[arg(long = "type", default_value = "http")]
        kind: String,
        /// A cron schedule (five fields), for `--type cron`.
        #[arg(long)]
        schedule: Option<String>,
        /// The IANA time zone of the schedule (default UTC).
        #[arg(long)]
        timezone: Option<String>,
        /// Create it disabled.
        #[arg(long)]
        disabled: bool,
    },
    /// List the namespace's triggers.
    Ls,
    /// Show one trigger (a cron trigger with its next tick and last runs).
    Get { name: String },
    /// Enable a trigger.
    Enable { name: String },
    /// Disable a trigger.
    Disable { name: String },
    /// Delete a trigger.
    Rm { name: String },
}

#[derive(Subcommand, Debug)]
pub enum JobCommand {
    /// Run a function once, as a job.
    Run {
        /// The function.
        function: String,
        /// What the handler receives, as JSON.
        #[arg(long, default_value = "{}")]
        input: String,
        /// The job's name (default: the function's and the time).
        #[arg(long)]
        name: Option<String>,
        /// Seconds it may take (default: the function's timeout).
        #[arg(long)]
        timeout_sec: Option<u32>,
        /// Wait for it to end, print its output and exit with its status.
        #[arg(long)]
        wait: bool,
    },
    /// List the jobs (not cron runs: `trigger get`), by name.
    Ls,
    /// Show a job: its status and output.
    Get { name: String },
    /// Delete a job; a running one is stopped.
    Rm { name: String },
}

pub async fn ls(client: &Client, out: &Out) -> Result<(), Failure> {
    let list = client.list_functions().await?;
    if out.json() {
        out.document(&list);
        return Ok(());
    }
    let mut t = Table::new(&[
        "NAME", "PHASE", "VERSION", "LIVE", "RUNTIME", "MEMORY", "URL",
    ]);
    for f in &list.items {
        t.row(vec![
            f.name.clone(),
            out.phase(&f.phase),
            or_dash(f.version),
            or_dash(f.deployed_version),
            or_dash(f.runtime.clone()),
            or_dash(f.memory_mb.map(|m| format!("{m} MiB"))),
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
        let scaled = n == 0 && f.phase == "Ready";
        field(
            "instances",
            if scaled {
                "0 (scaled to zero: the next call starts it)".to_owned()
            } else {
                n.to_string()
            },
        );
    }
    field(
        "scale to zero",
        match f.scale_to_zero_after_sec {
            Some(0) => "never".to_owned(),
            Some(s) => format!("after {s} s without a call"),
            None => "after the server's default window".to_owned(),
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

/// `10m`, `2h`, `1d`, `30s`, or an RFC 3339 time: the time that long ago.
fn since_time(since: &str) -> Result<chrono::DateTime<chrono::Utc>, Failure> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(since) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let (number, unit) = since.split_at(since.trim_end_matches(char::is_alphabetic).len());
    let n: i64 = number.parse().map_err(|_| {
        Failure::usage(format!(
            "--since {since:?} is not like 10m, 2h, 1d or a time"
        ))
    })?;
    let seconds = match unit {
        "s" => n,
        "m" | "" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => {
            return Err(Failure::usage(format!(
                "--since {since:?}: units are s, m, h, d"
            )));
        }
    };
    Ok(chrono::Utc::now() - chrono::Duration::seconds(seconds))
}

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

pub async fn versions(client: &Client, out: &Out, name: &str) -> Result<(), Failure> {
    let list = client.list_versions(name).await?;
    if out.json() {
        out.document(&list);
        return Ok(());
    }
    let mut t = Table::new(&["VERSION", "", "FILES", "SIZE", "UPLOADED", "BY", "SHA256"]);
    for v in &list.items {
        let mark = match (v.live, v.deployed) {
            (true, true) => out.paint("32", "live"),
            (true, false) => out.paint("33", "live (not running)"),
            (false, true) => "running".into(),
            (false, false) => String::new(),
        };
        t.row(vec![
            v.version.to_string(),
            mark,
            v.files.to_string(),
            super::deploy::size(v.size),
            v.uploaded_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            or_dash(v.uploaded_by.clone()),
            v.sha256.chars().take(12).collect(),
        ]);
    }
    t.print();
    Ok(())
}

pub async fn source(
    client: &Client,
    out: &Out,
    name: &str,
    version: Option<u32>,
    file: Option<&str>,
) -> Result<(), Failure> {
    let view = match version {
        Some(v) => client.get_version_source(name, v).await?,
        None => client.get_source(name).await?,
    };
    let Some(file) = file else {
        if out.json() {
            out.document(&view);
            return Ok(());
        }
        let mut t = Table::new(&["PATH", "SIZE", ""]);
        for f in &view.files {
            t.row(vec![
                f.path.clone(),
                super::deploy::size(f.size),
                if f.binary {
                    "binary".into()
                } else {
                    String::new()
                },
            ]);
        }
        out.note(&format!("{name} version {}:", view.version));
        t.print();
        return Ok(());
    };
    let Some(entry) = view.files.iter().find(|f| f.path == file) else {
        return Err(Failure::new(
            code::NOT_FOUND,
            format!("version {} of {name} has no file {file:?}", view.version),
        ));
    };
    let bytes = match (&entry.content, entry.truncated) {
        (Some(text), false) => text.clone().into_bytes(),
        // Not inlined (binary, or past the limit): from the zip itself.
        _ => {
            let zip = client.get_version_archive(name, view.version).await?;
            let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip))
                .map_err(|e| Failure::new(code::SERVER, format!("the version's zip: {e}")))?;
            let mut f = archive
                .by_name(file)
                .map_err(|e| Failure::new(code::SERVER, format!("{file} in the zip: {e}")))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)
                .map_err(|e| Failure::new(code::SERVER, format!("{file} in the zip: {e}")))?;
            buf
        }
    };
    if out.json() {
        out.document(&serde_json::json!({
            "path": file, "version": view.version,
            "content": String::from_utf8_lossy(&bytes),
        }));
    } else {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(&bytes);
        let _ = stdout.flush();
    }
    Ok(())
}

pub async fn diff(
    client: &Client,
    out: &Out,
    name: &str,
    from: u32,
    to: u32,
) -> Result<(), Failure> {
    let d = client.diff_versions(name, from, to).await?;
    if out.json() {
        out.document(&d);
        return Ok(());
    }
    if d.files.is_empty() {
        out.note(&format!(
            "versions {from} and {to} of {name} have the same files"
        ));
        return Ok(());
    }
    for f in &d.files {
        if f.binary {
            println!("{} {} (binary)", f.change, f.path);
            continue;
        }
        let Some(text) = &f.diff else {
            println!("{} {} (diff left out: too large)", f.change, f.path);
            continue;
        };
        for line in text.lines() {
            let painted = if line.starts_with("+++") || line.starts_with("---") {
                out.paint("1", line)
            } else if line.starts_with('+') {
                out.paint("32", line)
            } else if line.starts_with('-') {
                out.paint("31", line)
            } else if line.starts_with("@@") {
                out.paint("36", line)
            } else {
                line.to_owned()
            };
            println!("{painted}");
        }
    }
    if d.truncated {
        out.note("(the diff was cut at the API's limit)");
    }
    Ok(())
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

pub async fn build_log(
    client: &Client,
    out: &Out,
    name: &str,
    version: Option<u32>,
    follow: bool,
) -> Result<(), Failure> {
    let version = match version {
        Some(v) => v,
        None => {
            let list = client.list_versions(name).await?;
            list.live_version.ok_or_else(|| {
                Failure::new(code::NOT_FOUND, format!("{name} has no version yet"))
            })?
        }
    };
    if !follow {
        let log = client.get_build_log(name, version).await?;
        if out.json() {
            out.document(&serde_json::json!({ "name": name, "version": version, "log": log }));
        } else {
            print!("{log}");
        }
        return Ok(());
    }
    let mut stream = client.follow_build_log(name, version).await?;
    while let Some(event) = stream.next().await {
        match event? {
            BuildLogEvent::Line(line) => {
                if out.json() {
                    out.json_line(&serde_json::json!({ "line": line }));
                } else {
                    println!("{line}");
                    let _ = std::io::stdout().flush();
                }
            }
            BuildLogEvent::End { outcome, error } => {
                if out.json() {
                    out.json_line(&serde_json::json!({ "end": outcome, "error": error }));
                }
                if outcome == "failed" {
                    return Err(Failure::failed(format!(
                        "the build of {name} version {version} failed: {}",
                        error.unwrap_or_default()
                    )));
                }
                if outcome != "succeeded" {
                    return Err(Failure::new(
                        code::SERVER,
                        format!("the build log of {name} version {version} ended: {outcome}"),
                    ));
                }
            }
        }
    }
    Ok(())
}

pub async fn trigger(client: &Client, out: &Out, command: TriggerCommand) -> Result<(), Failure> {
    let shown = |t: &TriggerView| {
        if out.json() {
            out.document(t);
        } else {
            let state = if t.enabled { "enabled" } else { "disabled" };
            let schedule = t
                .schedule
                .as_ref()
                .map(|s| format!(" {s} ({})", t.timezone.as_deref().unwrap_or("UTC")))
                .unwrap_or_default();
            out.note(&format!(
                "trigger {} ({}{schedule}) of {}: {state}",
                t.name, t.kind, t.function
            ));
        }
    };
    match command {
        TriggerCommand::Create {
            name,
            function,
            kind,
            schedule,
            timezone,
            disabled,
        } => {
            let t = client
                .create_trigger(&CreateTrigger {
                    name,
                    function,
                    kind,
                    schedule,
                    timezone,
                    enabled: Some(!disabled),
                })
                .await?;
            shown(&t);
        }
        TriggerCommand::Ls => {
            let list = client.list_triggers().await?;
            if out.json() {
                out.document(&list);
                return Ok(());
            }
            let mut t = Table::new(&[
                "NAME", "TYPE", "FUNCTION", "ENABLED", "SCHEDULE", "NEXT RUN",
            ]);
            for tr in &list.items {
                t.row(vec![
                    tr.name.clone(),
                    tr.kind.clone(),
                    tr.function.clone(),
                    tr.enabled.to_string(),
                    or_dash(tr.schedule.clone()),
                    or_dash(tr.next_run_at.map(|t| t.to_rfc3339())),
                ]);
            }
            t.print();
        }
        TriggerCommand::Get { name } => {
            let t = client.get_trigger(&name).await?;
            shown(&t);
            if !out.json()
                && let Some(runs) = &t.runs
            {
                for r in runs {
                    println!(
                        "  {} {} {}",
                        r.scheduled_at.to_rfc3339(),
                        out.phase(&r.status),
                        r.error.as_deref().unwrap_or("")
                    );
                }
            }
        }
        TriggerCommand::Enable { name } => {
            shown(&client.set_trigger_enabled(&name, true).await?.doc)
        }
        TriggerCommand::Disable { name } => {
            shown(&client.set_trigger_enabled(&name, false).await?.doc)
        }
        TriggerCommand::Rm { name } => {
            let r = client.delete_trigger(&name).await?;
            if out.json() {
                out.document(&r);
            } else {
                out.note(&format!("trigger {name} deleted"));
            }
        }
    }
    Ok(())
}

/// A job name for a run of `function` now: `{function}-{yymmdd-hhmmss}`.
fn job_name(function: &str) -> String {
    let stamp = chrono::Utc::now().format("%y%m%d-%H%M%S").to_string();
    let keep = 40usize.saturating_sub(stamp.len() + 1);
    let base: String = function.chars().take(keep).collect();
    format!("{}-{stamp}", base.trim_end_matches('-'))
}

pub async fn job(client: &Client, out: &Out, command: JobCommand) -> Result<(), Failure> {
    match command {
        JobCommand::Run {
            function,
            input,
            name,
            timeout_sec,
            wait,
        } => {
            let input: serde_json::Value = serde_json::from_str(&input)
                .map_err(|e| Failure::usage(format!("--input is not JSON: {e}")))?;
            let name = name.unwrap_or_else(|| job_name(&function));
            let job = client
                .create_job(&CreateJob {
                    name: name.clone(),
                    function,
                    input,
                    timeout_sec,
                })
                .await?;
            if !wait {
                if out.json() {
                    out.document(&job.doc);
                } else {
                    out.note(&format!("job {name} is {}", job.status));
                }
                return Ok(());
            }
            let within = Duration::from_secs(u64::from(job.timeout_sec) + 600);
            let ended = client.wait_for_job(&name, within).await?;
            print_job(out, &ended);
            if ended.status != "Succeeded" {
                return Err(Failure::failed(format!(
                    "job {name} {}: {}",
                    ended.status.to_lowercase(),
                    ended
                        .error
                        .clone()
                        .or(ended.exit_code.map(|c| format!("exit code {c}")))
                        .unwrap_or_default()
                )));
            }
            Ok(())
        }
        JobCommand::Ls => {
            let list = client.list_jobs().await?;
            if out.json() {
                out.document(&list);
                return Ok(());
            }
            let mut t = Table::new(&["NAME", "STATUS", "FUNCTION", "VERSION", "REQUESTED", "EXIT"]);
            for j in &list.items {
                t.row(vec![
                    j.name.clone(),
                    out.phase(&j.status),
                    j.function.clone(),
                    format!("v{}", j.version),
                    or_dash(j.requested_at.map(|t| t.to_rfc3339())),
                    or_dash(j.exit_code),
                ]);
            }
            t.print();
            Ok(())
        }
        JobCommand::Get { name } => {
            let job = client.get_job(&name).await?;
            print_job(out, &job);
            Ok(())
        }
        JobCommand::Rm { name } => {
            let r = client.delete_job(&name).await?;
            if out.json() {
                out.document(&r);
            } else {
                out.note(&format!("job {name} deleted"));
            }
            Ok(())
        }
    }
}

fn print_job(out: &Out, job: &JobView) {
    if out.json() {
        out.document(job);
        return;
    }
    if !out.quiet {
        eprintln!(
            "job {} of {} (version {}): {}{}",
            job.name,
            job.function,
            job.version,
            out.phase(&job.status),
            job.duration_ms
                .map(|d| format!(" in {d} ms"))
                .unwrap_or_default()
        );
    }
    if let Some(o) = &job.stdout {
        print!("{}", o.text);
    }
    if let Some(e) = job.stderr.as_ref().filter(|e| !e.text.is_empty()) {
        eprint!("{}", e.text);
    }
}

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
        .unwrap_or_default();
    println!(
        "{} {:<20} {subject}{version} by {}{error}",
        e.time,
        out.paint("36", &e.event_type),
        e.actor.as_deref().unwrap_or("-"),
    );
}
