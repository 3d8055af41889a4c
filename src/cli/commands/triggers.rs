//! `sless trigger ...`: the namespace's http and cron triggers.

use clap::Subcommand;
use sless_client::types::TriggerView;
use sless_client::{Client, CreateTrigger};

use crate::cli::output::{Failure, Out, Table, or_dash};

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
