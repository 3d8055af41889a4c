//! `sless job ...`: one-shot jobs: run (and wait for) one, list, show and
//! delete them.

use std::time::Duration;

use clap::Subcommand;
use sless_client::types::JobView;
use sless_client::{Client, CreateJob};

use crate::cli::output::{Failure, Out, Table, or_dash};

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
