//! The `sless` binary: wires the crates into roles. `sless dev` runs every
//! role in one process with embedded PostgreSQL and S3; `sless api`,
//! `worker`, `projector` and `migrate` run one role each for scale;
//! `replay` and `reconcile` are operations (see `ops`). The rest are the
//! user commands (`deploy`, `ls`, `invoke`, ...), a command line over the
//! typed client of the API (see `cli`).

mod cli;
mod config;
mod drivers;
mod embedded;
mod manifests;
mod metrics;
mod ops;
mod serve;

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::{CommandFactory, Parser, Subcommand};

#[derive(Parser)]
#[command(name = "sless", version, about = "Event-sourced serverless functions")]
struct Cli {
    #[command(subcommand)]
    command: Command,
    #[command(flatten)]
    global: cli::Global,
}

#[derive(Subcommand)]
enum Command {
    /// Run everything on this machine: API, projector, worker with the local
    /// driver, and (unless DATABASE_URL / S3_ENDPOINT are set) a private
    /// PostgreSQL and S3 server in the data directory.
    Dev(ServeArgs),
    /// Like `dev`, but tokens must be configured (SLESS_JWT_SECRET, or
    /// SLESS_JWT_ALGORITHM with public keys) and none is printed; reads
    /// DATABASE_URL and S3_* when set.
    Serve(ServeArgs),
    /// Only the HTTP API and, on an origin of its own, the invoke proxy
    /// (needs DATABASE_URL, S3_*, SLESS_JWT_SECRET).
    Api {
        #[arg(long, default_value = "127.0.0.1:8080")]
        listen: SocketAddr,
        #[command(flatten)]
        functions: FnOrigin,
    },
    /// Only a worker with the local driver (needs DATABASE_URL, S3_*).
    Worker {
        #[arg(long, env = "SLESS_DATA_DIR", default_value = "./.sless-worker")]
        data_dir: PathBuf,
        /// Run functions, jobs and builds without the sandbox, as the user
        /// that runs sless: only for one person's own code.
        #[arg(long)]
        unsafe_no_sandbox: bool,
    },
    /// Only the projector: read models and version manifests (needs
    /// DATABASE_URL and S3_*).
    Projector,
    /// Apply database migrations and exit (needs DATABASE_URL).
    Migrate,
    /// Rebuild every read model from the start of the log into fresh tables,
    /// compare checksums with the live ones, and swap them in. Exit status:
    /// 0 equal, 1 some differed (named; the rebuilt ones are live now unless
    /// --verify), 2 failed (nothing changed).
    Replay {
        /// Only rebuild and compare; change nothing.
        #[arg(long)]
        verify: bool,
        #[command(flatten)]
        target: OpsTarget,
        /// Events per transaction while rebuilding.
        #[arg(long, default_value_t = sless_projector::replay::REPLAY_BATCH)]
        batch: i64,
    },
    /// Enqueue a reconcile of every function, so what runs converges with
    /// the log: deleted functions are removed, missing processes started,
    /// stale versions replaced.
    Reconcile {
        #[command(flatten)]
        target: OpsTarget,
    },
    /// Print an HS256 token for a user of a dev instance, signed with
    /// SLESS_JWT_SECRET or else the data directory's secret, with the
    /// configured issuer and audience.
    Token {
        #[arg(long, default_value = "./.sless")]
        data_dir: PathBuf,
        /// The user (token subject); their namespace derives from it.
        #[arg(long)]
        sub: String,
        /// Days the token stays valid.
        #[arg(long, default_value_t = 365)]
        days: u64,
        /// Give the token the admin claim: it may act in every namespace.
        #[arg(long)]
        admin: bool,
    },
    /// Write or check the Kubernetes manifests of deploy/base, which are
    /// generated from this binary (docs/kubernetes.md).
    #[command(hide = true)]
    Manifests(manifests::Args),
    #[command(flatten)]
    User(cli::UserCommand),
}

/// The database an operation acts on.
#[derive(clap::Args)]
pub struct OpsTarget {
    /// The data directory of a `sless dev` instance, running or stopped;
    /// without it, DATABASE_URL.
    #[arg(long)]
    data_dir: Option<PathBuf>,
}

#[derive(clap::Args)]
pub struct ServeArgs {
    /// Where the embedded database, blobs, builds and logs live.
    #[arg(long, default_value = "./.sless")]
    data_dir: PathBuf,
    /// Address of the HTTP API.
    #[arg(long, default_value = "127.0.0.1:8080")]
    listen: SocketAddr,
    #[command(flatten)]
    functions: FnOrigin,
    /// Run functions, jobs and builds without the sandbox, as the user that
    /// runs sless (where bubblewrap cannot be installed): only your own
    /// code; the instance then accepts the `dev` user's tokens only.
    #[arg(long)]
    unsafe_no_sandbox: bool,
}

/// Where functions are served: an origin of their own, never the API's
/// (docs/security.md).
#[derive(clap::Args)]
pub struct FnOrigin {
    /// Address of the functions' origin, the invoke proxy `/fn/...`
    /// (default: the API's address with the next port; with port 0, any
    /// free port).
    #[arg(long, env = "SLESS_FN_LISTEN")]
    fn_listen: Option<SocketAddr>,
    /// The functions' origin as callers reach it, e.g.
    /// `https://fn.example.com` (default: `http://` and the address it
    /// listens on). What functions' `url` starts with, and where `/fn/...`
    /// on the API's origin redirects.
    #[arg(long, env = "SLESS_FN_URL")]
    fn_url: Option<String>,
}

fn main() -> anyhow::Result<ExitCode> {
    let cli = Cli::parse();
    if let Command::Manifests(args) = &cli.command {
        return manifests::run(args);
    }
    if let Command::User(command) = cli.command {
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()?;
        let env = config::Cli::from_env();
        return Ok(rt.block_on(cli::run(command, cli.global, env, Cli::command())));
    }
    let host = config::Host::from_env();
    // Before any thread starts.
    host.fewer_malloc_arenas();
    // An operation prints what it does itself; its long statements (a
    // replay's checksums) are expected, not worth a warning.
    let default_filter = match cli.command {
        Command::Replay { .. } | Command::Reconcile { .. } => "info,sqlx=error,aws=warn,hyper=warn",
        _ => "info,sqlx=warn,aws=warn,hyper=warn",
    };
    let filter = host
        .log_filter()
        .and_then(|f| tracing_subscriber::EnvFilter::try_new(f).ok())
        .unwrap_or_else(|| default_filter.into());
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()?;
    let (traces, log_export) = logging(&cli.command, &host, filter, rt.handle())?;
    let done = rt.block_on(run(cli.command, host));
    if let Some(log_export) = log_export {
        rt.block_on(log_export.shutdown());
    }
    if let Some(traces) = traces {
        traces.shutdown();
    }
    done
}

/// Log lines on stderr (text, coloured on a terminal only, or JSON with
/// `SLESS_LOG_FORMAT=json`), and
/// traces and the export of what functions print as OTLP log records (in
/// the roles that run functions) when the `OTEL_*` variables ask for them:
/// their exporters, to be shut down before the runtime `rt` ends.
fn logging(
    command: &Command,
    host: &config::Host,
    filter: tracing_subscriber::EnvFilter,
    rt: &tokio::runtime::Handle,
) -> anyhow::Result<(
    Option<sless_telemetry::trace::Exporter>,
    Option<sless_telemetry::logs::Exporter>,
)> {
    use tracing_subscriber::Layer;
    use tracing_subscriber::filter::FilterExt;
    use tracing_subscriber::layer::SubscriberExt;
    use tracing_subscriber::util::SubscriberInitExt;
    let shown = tracing_subscriber::filter::filter_fn(sless_telemetry::trace::logged);
    let terminal = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let logs = tracing_subscriber::fmt::layer()
        .with_writer(std::io::stderr)
        .with_ansi(host.log_colours(terminal));
    let json = host.log_json()?;
    sless_telemetry::trace::log_ids(json);
    let logs = if json {
        // The request's id and namespace (and, with traces, the trace and
        // span ids) come with the span it runs in.
        logs.json()
            .with_current_span(true)
            .with_span_list(false)
            .with_filter(filter.and(shown))
            .boxed()
    } else {
        logs.with_filter(filter.and(shown)).boxed()
    };
    let role = role(command);
    let (settings, log_settings) = config::traces(role)?;
    let log_export = matches!(role, "dev" | "serve" | "worker")
        .then(|| sless_telemetry::logs::install(&log_settings, rt.clone()))
        .flatten();
    match sless_telemetry::trace::install(&settings, rt.clone()).map_err(anyhow::Error::msg)? {
        Some((traces, exporter)) => {
            tracing_subscriber::registry()
                .with(logs)
                .with(traces)
                .init();
            Ok((Some(exporter), log_export))
        }
        None => {
            tracing_subscriber::registry().with(logs).init();
            Ok((None, log_export))
        }
    }
}

/// The role a command runs as, which names its service in traces.
fn role(command: &Command) -> &'static str {
    match command {
        Command::Dev(_) => "dev",
        Command::Serve(_) => "serve",
        Command::Api { .. } => "api",
        Command::Worker { .. } => "worker",
        Command::Projector => "projector",
        _ => "cli",
    }
}

async fn run(command: Command, host: config::Host) -> anyhow::Result<ExitCode> {
    async {
        match command {
            Command::Dev(args) => serve::all_in_one(args, true, &host).await?,
            Command::Serve(args) => serve::all_in_one(args, false, &host).await?,
            Command::Api { listen, functions } => serve::api(listen, functions).await?,
            Command::Worker {
                data_dir,
                unsafe_no_sandbox,
            } => serve::worker(data_dir, unsafe_no_sandbox, &host).await?,
            Command::Projector => serve::projector().await?,
            Command::Migrate => {
                let database = config::Database::from_env();
                let pool = sless_store::connect(database.require()?, 2).await?;
                sless_store::migrate(&pool).await?;
                println!("migrations applied");
            }
            Command::Replay {
                verify,
                target,
                batch,
            } => {
                let db = ops::Database::open(target.data_dir.as_deref(), &host).await;
                let code = match db {
                    Ok(db) => {
                        let code = ops::replay(&db, verify, batch, &host).await;
                        if let Err(e) = db.close().await {
                            eprintln!("stopping the instance's database: {e:#}");
                        }
                        code
                    }
                    Err(e) => Err(e),
                };
                return Ok(code.unwrap_or_else(|e| {
                    eprintln!("sless replay failed, nothing was changed: {e:#}");
                    ExitCode::from(2)
                }));
            }
            Command::Reconcile { target } => {
                let db = ops::Database::open(target.data_dir.as_deref(), &host).await?;
                let done = ops::reconcile(&db).await;
                db.close().await?;
                done?;
            }
            Command::Token {
                data_dir,
                sub,
                days,
                admin,
            } => {
                let tokens = config::TokenSettings::from_env()?;
                if tokens.algorithm != sless_api::plumbing::auth::TokenAlgorithm::Hs256 {
                    anyhow::bail!(
                        "sless token signs HS256 tokens only; with SLESS_JWT_ALGORITHM={} \
                         tokens come from the identity provider that holds the private key",
                        tokens.algorithm
                    );
                }
                let dev_secret = if tokens.has_secret() {
                    None
                } else {
                    Some(embedded::DevSecrets::load(&data_dir)?.jwt_secret)
                };
                let auth = tokens.auth(dev_secret.as_deref())?;
                let token = auth
                    .issue(&sub, Duration::from_secs(days * 86_400), admin)
                    .context("an HS256 token")?;
                println!("{token}");
            }
            Command::Manifests(_) | Command::User(_) => {
                unreachable!("handled before the runtime starts")
            }
        }
        Ok(ExitCode::SUCCESS)
    }
    .await
    .context("sless")
}
