//! The user commands of the `sless` binary: `login`, `deploy`, `ls`,
//! `invoke`, `logs`, ... — a command line over `sless-client`, the typed
//! client of the API. Human tables by default, `-o json` for scripts; a
//! live display only on a terminal. Exit codes (docs/cli.md): 0 ok, 1 the
//! function, job or build failed, 2 usage, 3 auth, 4 not found, 5 conflict
//! or precondition, 6 server or network.

mod commands;
mod deploy;
mod follow;
mod output;
pub mod profile;

use std::process::ExitCode;

use clap::{Args, Subcommand};

pub use output::Failure;

/// Options every user command takes.
#[derive(Args, Debug, Clone)]
pub struct Global {
    /// The profile of ~/.config/sless/config.toml to use (`SLESS_PROFILE`;
    /// default: the file's `default`, else `dev`).
    #[arg(long, global = true)]
    pub profile: Option<String>,
    /// The API's URL, over the profile's (`SLESS_ENDPOINT`).
    #[arg(long, global = true)]
    pub endpoint: Option<String>,
    /// A bearer token, over the profile's (`SLESS_TOKEN`).
    #[arg(long, global = true, hide_env_values = true)]
    pub token: Option<String>,
    /// `table` (default) for people, `json` for scripts: one JSON
    /// document, or one JSON line per event when following.
    #[arg(short = 'o', long = "output", global = true, value_enum, default_value_t = Format::Table)]
    pub output: Format,
    /// Print only what was asked for, and errors.
    #[arg(short, long, global = true)]
    pub quiet: bool,
}

#[derive(clap::ValueEnum, Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    Table,
    Json,
}

/// The user commands.
#[derive(Subcommand, Debug)]
pub enum UserCommand {
    /// Save an endpoint and token as a profile (~/.config/sless/config.toml,
    /// mode 0600), after checking them against the API.
    Login {
        #[arg(long)]
        endpoint: Option<String>,
        #[arg(long)]
        token: Option<String>,
        /// The profile to write (default: `default`); it becomes the default.
        #[arg(long = "as", value_name = "PROFILE")]
        name: Option<String>,
    },
    /// Create or update a function from a directory, upload it, and follow
    /// its build to Ready.
    Deploy(deploy::DeployArgs),
    /// List the namespace's functions.
    Ls,
    /// Show one function.
    Get { name: String },
    /// Call a function through its URL.
    Invoke(commands::InvokeArgs),
    /// What a function printed, oldest first: its last lines, or every
    /// line since a time, then (`--follow`) new ones as they are written.
    Logs(commands::LogsArgs),
    /// A function's invocation records and job runs, newest last; or one
    /// record with the lines its call printed.
    Invocations(commands::InvocationsArgs),
    /// A function's kept versions.
    Versions { name: String },
    /// A function's source: the file list, or one file's content.
    Source {
        name: String,
        /// The file to print.
        file: Option<String>,
        /// A version other than the live one.
        #[arg(long)]
        version: Option<u32>,
    },
    /// What changed between two versions.
    Diff { name: String, from: u32, to: u32 },
    /// Make an earlier version live again, and follow its deploy.
    Rollback {
        name: String,
        version: u32,
        /// Do not wait for the deploy.
        #[arg(long)]
        no_wait: bool,
    },
    /// Delete a function.
    Rm { name: String },
    /// A version's build log (the live version's by default).
    BuildLog {
        name: String,
        #[arg(long)]
        version: Option<u32>,
        /// Print lines as the build writes them, until it ends.
        #[arg(short, long)]
        follow: bool,
    },
    /// Triggers: http and cron.
    #[command(subcommand)]
    Trigger(commands::TriggerCommand),
    /// One-shot jobs.
    #[command(subcommand)]
    Job(commands::JobCommand),
    /// The namespace's audit log: who changed what, when.
    Events {
        #[arg(long)]
        function: Option<String>,
        /// Event types (repeat for several).
        #[arg(long = "type", value_name = "TYPE")]
        types: Vec<String>,
        /// Only those since this long ago (`10m`, `2h`, `1d`) or time.
        #[arg(long)]
        since: Option<String>,
        /// How many (newest; default 50).
        #[arg(long, default_value_t = 50)]
        limit: u32,
        /// Keep printing events as they commit.
        #[arg(short, long)]
        follow: bool,
    },
    /// Print a shell completion script.
    Completions {
        #[arg(value_enum)]
        shell: clap_complete::Shell,
    },
}

/// Runs a user command; prints its error and gives its exit code.
pub async fn run(
    command: UserCommand,
    global: Global,
    env: crate::config::Cli,
    cli: clap::Command,
) -> ExitCode {
    let out = output::Out::new(&global, &env);
    let result = dispatch(command, &global, &env, &out, cli).await;
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(failure) => out.fail(&failure),
    }
}

async fn dispatch(
    command: UserCommand,
    global: &Global,
    env: &crate::config::Cli,
    out: &output::Out,
    mut cli: clap::Command,
) -> Result<(), Failure> {
    if let UserCommand::Completions { shell } = command {
        clap_complete::generate(shell, &mut cli, "sless", &mut std::io::stdout());
        return Ok(());
    }
    if let UserCommand::Login {
        endpoint,
        token,
        name,
    } = command
    {
        return profile::login(global, env, out, endpoint, token, name).await;
    }
    let client = profile::client(global, env)?;
    match command {
        UserCommand::Deploy(args) => deploy::deploy(&client, out, args).await,
        UserCommand::Ls => commands::ls(&client, out).await,
        UserCommand::Get { name } => commands::get(&client, out, &name).await,
        UserCommand::Invoke(args) => commands::invoke(&client, out, args).await,
        UserCommand::Logs(args) => commands::logs(&client, out, args).await,
        UserCommand::Invocations(args) => commands::invocations(&client, out, args).await,
        UserCommand::Versions { name } => commands::versions(&client, out, &name).await,
        UserCommand::Source {
            name,
            file,
            version,
        } => commands::source(&client, out, &name, version, file.as_deref()).await,
        UserCommand::Diff { name, from, to } => commands::diff(&client, out, &name, from, to).await,
        UserCommand::Rollback {
            name,
            version,
            no_wait,
        } => deploy::rollback(&client, out, &name, version, no_wait).await,
        UserCommand::Rm { name } => commands::rm(&client, out, &name).await,
        UserCommand::BuildLog {
            name,
            version,
            follow,
        } => commands::build_log(&client, out, &name, version, follow).await,
        UserCommand::Trigger(t) => commands::trigger(&client, out, t).await,
        UserCommand::Job(j) => commands::job(&client, out, j).await,
        UserCommand::Events {
            function,
            types,
            since,
            limit,
            follow,
        } => {
            let filter = commands::EventsArgs {
                function,
                types,
                since,
                limit,
                follow,
            };
            commands::events(&client, out, filter).await
        }
        UserCommand::Login { .. } | UserCommand::Completions { .. } => {
            unreachable!("answered above")
        }
    }
}
