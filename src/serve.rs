//! Running the roles: all in one process (`dev`/`serve`), or one each.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use serde_json::json;
use sless_api::plumbing::metrics::Scope;
use sless_api::{AppState, Auth};
use sless_domain::Namespace;
use sless_store::PgPool;
use sless_store::blobs::BlobStore;
use sless_workers::{Driver, Reconciler, Worker};
use tokio::sync::watch;

use crate::drivers::AnyDriver;
use crate::{FnOrigin, ServeArgs, config, embedded};

/// Resolves on Ctrl-C or SIGTERM.
async fn stop_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

/// The two origins, bound: the API's and the functions'.
pub struct Listeners {
    api: tokio::net::TcpListener,
    functions: tokio::net::TcpListener,
    /// The functions' origin as callers reach it; None when it cannot be
    /// told (listening on every address, and `SLESS_FN_URL` unset).
    fn_url: Option<String>,
}

impl Listeners {
    /// Binds the API's address and the functions' (by default the next
    /// port; port 0 stays any free port).
    pub async fn bind(listen: SocketAddr, origin: FnOrigin) -> anyhow::Result<Listeners> {
        let fn_listen = origin.fn_listen.unwrap_or_else(|| {
            let port = match listen.port() {
                0 => 0,
                p => p.checked_add(1).unwrap_or(0),
            };
            SocketAddr::new(listen.ip(), port)
        });
        if fn_listen == listen && listen.port() != 0 {
            anyhow::bail!(
                "the functions' origin (--fn-listen, SLESS_FN_LISTEN) must be another address than the API's ({listen}): a function's answer must never come from the API's origin"
            );
        }
        let fn_url = origin.fn_url.map(|u| config::fn_url(&u)).transpose()?;
        let api = tokio::net::TcpListener::bind(listen)
            .await
            .with_context(|| format!("listening on {listen}"))?;
        let functions = tokio::net::TcpListener::bind(fn_listen)
            .await
            .with_context(|| format!("listening on {fn_listen} for functions (--fn-listen)"))?;
        let bound = functions.local_addr()?;
        let fn_url =
            fn_url.or_else(|| (!bound.ip().is_unspecified()).then(|| format!("http://{bound}")));
        Ok(Listeners {
            api,
            functions,
            fn_url,
        })
    }

    /// Serves both origins until [`Serving::stop`], which stops them as
    /// `shutdown` says.
    fn serve(self, mut state: AppState, shutdown: config::Shutdown) -> Serving {
        state.fn_url = self.fn_url.map(Into::into);
        let (stop_tx, stop) = watch::channel(false);
        let draining = state.draining.clone();
        let tails = state.tails.clone();
        let closing = |router: axum::Router| {
            router.layer(axum::middleware::from_fn_with_state(
                draining.clone(),
                sless_api::plumbing::serve::close_while_draining,
            ))
        };
        let api = serve_http(
            "the API's origin",
            self.api,
            closing(sless_api::router(state.clone())),
            sless_api::plumbing::serve::HEADER_PARSE_LIMIT,
            tails.clone(),
            stop.clone(),
            shutdown.drain,
        );
        let functions = serve_http(
            "the functions' origin",
            self.functions,
            closing(sless_api::fn_router(state)),
            sless_api::plumbing::serve::FN_HEADER_PARSE_LIMIT,
            tails,
            stop,
            shutdown.drain,
        );
        let task = tokio::spawn(async move {
            let (a, f) = tokio::join!(api, functions);
            a.and(f)
        });
        Serving {
            draining,
            shutdown,
            stop: stop_tx,
            task,
        }
    }
}

/// Both origins, served.
struct Serving {
    draining: sless_api::plumbing::serve::Draining,
    shutdown: config::Shutdown,
    stop: watch::Sender<bool>,
    task: tokio::task::JoinHandle<anyhow::Result<()>>,
}

impl Serving {
    /// Stops serving without failing a call: `/readyz` answers 503 at once,
    /// both origins serve on as before for the shutdown delay (a load
    /// balancer that polls readiness moves away meanwhile), then close
    /// their listeners and drain (`serve_http`). Returns once both have.
    async fn stop(self) -> anyhow::Result<()> {
        let config::Shutdown { delay, drain } = self.shutdown;
        self.draining.begin();
        tracing::info!(
            delay_secs = delay.as_secs_f64(),
            "stopping: /readyz answers 503; serving on until the shutdown delay has passed"
        );
        // The delay is the point: the process serves as before meanwhile.
        tokio::time::sleep(delay).await;
        tracing::info!(
            drain_secs = drain.as_secs_f64(),
            "no new connections; the calls in flight have the drain time to finish"
        );
        let _ = self.stop.send(true);
        self.task.await?
    }
}

/// Serves `listener` until `stop`; then closes it, ends the audit log's
/// tails, and waits up to `drain` for the calls in flight.
async fn serve_http(
    origin: &'static str,
    listener: tokio::net::TcpListener,
    app: axum::Router,
    parse_limit: usize,
    // The audit log's live tails would hold the drain open.
    tails: sless_api::rest::events::Tails,
    mut stop: watch::Receiver<bool>,
    drain: Duration,
) -> anyhow::Result<()> {
    let stopped = async move {
        let _ = stop.wait_for(|s| *s).await;
        tails.close();
    };
    let drained =
        sless_api::plumbing::serve::serve_then_drain(listener, app, parse_limit, stopped, drain)
            .await?;
    if drained.cut > 0 {
        tracing::warn!(
            origin,
            cut = drained.cut,
            "the drain time ran out: the calls still in flight on {origin} were cut"
        );
    }
    Ok(())
}

/// Every role in one process: the embedded default. `dev` checks tokens
/// with the data directory's secret unless `SLESS_JWT_SECRET` or public keys
/// are configured, and prints a token for the user `dev`; `serve` needs
/// token settings of its own and prints none.
pub async fn all_in_one(args: ServeArgs, dev: bool, host: &config::Host) -> anyhow::Result<()> {
    let ServeArgs {
        data_dir,
        listen,
        functions,
        unsafe_no_sandbox,
    } = args;
    // Every role runs here: one registry, made before anything counts.
    let metrics_config = config::Metrics::from_env()?;
    let registry = crate::metrics::registry(&metrics_config);
    if unsafe_no_sandbox && !dev {
        anyhow::bail!(
            "--unsafe-no-sandbox is for `sless dev` only: `sless serve` serves several users, \
             and without the sandbox each could act as every other"
        );
    }
    create_private_dir(&data_dir)?;
    let data_dir = data_dir.canonicalize()?;
    if unsafe_no_sandbox {
        warn_unsafe();
    }
    let secrets = embedded::DevSecrets::load_or_create(&data_dir)?;
    // Every section is read before anything starts: a bad setting stops here.
    let dev_secret = dev.then_some(secrets.jwt_secret.as_str());
    let auth = config::TokenSettings::from_env()?.auth(dev_secret)?;
    let api_config = config::Api::from_env()?;
    let worker_config = config::Worker::from_env()?;
    let blobs_config = config::Blobs::from_env()?;

    let (pg, url) = match config::Database::from_env().url {
        Some(url) => (None, url),
        None => {
            let pg_host = config::Dev::from_env().postgres_host(host);
            let pg = embedded::postgres(&data_dir, pg_host).await?;
            let url = pg.url("postgres");
            (Some(pg), url)
        }
    };
    let (s3, s3_config) = match blobs_config.s3 {
        Some(cfg) => (None, cfg),
        None => {
            let (server, cfg) = embedded::s3(&data_dir, &secrets).await?;
            (Some(server), cfg)
        }
    };

    let pool = sless_store::connect(&url, 30)
        .await
        .context("connecting to PostgreSQL")?;
    sless_store::migrate(&pool).await?;
    let blobs = BlobStore::new(&s3_config);
    blobs.check().await.context("checking the S3 bucket")?;
    let driver = AnyDriver::from_env(
        &data_dir,
        &blobs,
        &pool,
        &worker_config,
        host,
        unsafe_no_sandbox,
    )
    .await?;

    if pg.is_some() {
        // Our own private database: no other worker can hold these items, so
        // work cut short by an unclean stop need not wait out its lease.
        let released = sless_store::queue::release_all_running(&pool).await?;
        if released > 0 {
            tracing::info!(
                released,
                "released work items left running by the last stop"
            );
        }
        // Nor is any other worker alive: what the last one ran stopped
        // with it. Each such function is at zero before a call is taken,
        // so calls are held until it runs again, never sent where nothing
        // listens (or where another function's instance listens now).
        sless_store::workers::forget_all(&pool).await?;
        // Where functions serve, as the whole log says (the last run's own
        // stop recorded some of it after its projector had stopped).
        sless_projector::catch_up(&pool).await?;
        sless_workers::placement::sweep(&pool, &*driver).await?;
    }
    let (stop_tx, stop) = watch::channel(false);
    let projector = tokio::spawn(sless_projector::run(
        pool.clone(),
        Duration::from_secs(1),
        stop.clone(),
    ));
    let manifests = tokio::spawn(sless_projector::manifests::run(
        pool.clone(),
        blobs.clone(),
        Duration::from_secs(1),
        stop.clone(),
    ));
    let worker = Worker {
        pool: pool.clone(),
        reconciler: Reconciler {
            pool: pool.clone(),
            blobs: blobs.clone(),
            driver: driver.clone(),
        },
        config: worker_config.config.clone(),
        on_start: None,
    };
    let worker = tokio::spawn(worker.run(stop.clone()));
    let crashes = record_crashes(&driver, &pool, &stop);
    let scheduler = cron(&driver, &pool, &worker_config, &stop);
    // Processes did not survive the last stop: converge everything again.
    sless_store::queue::enqueue_reconcile_all(&pool).await?;

    let listeners = Listeners::bind(listen, functions).await?;
    let addr = listeners.api.local_addr()?;
    let fn_url = match &listeners.fn_url {
        Some(u) => u.clone(),
        None => format!("http://{}", listeners.functions.local_addr()?),
    };
    let mut state = app_state(pool.clone(), blobs, auth.clone(), &api_config);
    if unsafe_no_sandbox {
        state.only_namespace = Some(Namespace::for_subject(DEV_USER));
    }
    // ... and the database's gauges of all.
    state.metrics = registry;
    state.metrics_scope = Scope {
        projector: true,
        queue: true,
    };
    let metrics = crate::metrics::listen(
        &metrics_config,
        &pool,
        &state.metrics,
        state.metrics_scope,
        &stop,
    )
    .await?;
    let recorder = state.invocations.clone();
    let http = listeners.serve(state, api_config.shutdown);
    announce(&data_dir, addr, &fn_url, &auth, &pool, dev).await?;

    stop_signal().await;
    eprintln!("stopping sless");
    // The calls in flight first: while they finish, the worker still
    // starts what a held call waits for and the projector still moves on.
    if let Err(e) = http.stop().await {
        tracing::warn!(error = %e, "serving HTTP ended with an error");
    }
    tracing::info!("the calls in flight are answered; stopping the worker");
    let _ = stop_tx.send(true);
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    recorder.shutdown().await;
    let _ = worker.await;
    let _ = scheduler.await;
    let _ = projector.await;
    let _ = manifests.await;
    tracing::info!("the worker stopped; stopping the functions");
    driver.shutdown().await;
    tracing::info!("the functions stopped");
    leave(&driver, &pool).await;
    if let Some(crashes) = crashes {
        let _ = crashes.await;
    }
    pool.close().await;
    if let Some(s3) = s3 {
        s3.stop().await;
    }
    if let Some(pg) = pg {
        pg.stop().await?;
    }
    eprintln!("sless stopped");
    Ok(())
}

/// Prints how to reach this instance and writes `dev.json`. For `dev` with
/// HS256 it signs a token for the user `dev`; otherwise tokens come from
/// whoever holds the signing keys (`token` is null).
async fn announce(
    data_dir: &Path,
    addr: SocketAddr,
    fn_url: &str,
    auth: &Auth,
    pool: &PgPool,
    dev: bool,
) -> anyhow::Result<()> {
    let sub = DEV_USER;
    let token = dev
        .then(|| auth.issue(sub, Duration::from_secs(365 * 86_400), false))
        .flatten();
    let ns = Namespace::for_subject(sub);
    let url = format!("http://{addr}");
    // The console's sign-in link: a one-time code, never the token, in the URL.
    let console = match token.as_deref().map(|t| auth.verify(t)) {
        Some(Ok(caller)) => {
            let code =
                sless_api::console::issue_code(pool, &caller, Duration::from_secs(86_400)).await?;
            Some(format!("{url}/console/sign-in?code={code}"))
        }
        _ => None,
    };
    let info = json!({
        "url": url, "fn_url": fn_url, "token": token, "namespace": ns, "console": console,
    });
    // The `dev` profile (before dev.json, which says the instance is up):
    // the user commands talk to this instance.
    let profile = token.as_deref().map(|token| {
        match crate::cli::profile::save_dev(&crate::config::Cli::from_env(), &url, token) {
            Ok(file) => format!(
                "the `sless` commands use it: profile `dev` in {}",
                file.display()
            ),
            Err(e) => format!("(the `dev` profile could not be written: {e:#})"),
        }
    });
    let path = data_dir.join("dev.json");
    let tmp = data_dir.join("dev.json.tmp");
    std::fs::write(&tmp, serde_json::to_vec_pretty(&info)?)?;
    std::fs::rename(&tmp, &path)?;
    let Some(token) = token else {
        println!(
            "sless is running at {url}\n\
             functions: {fn_url}/fn/{{namespace}}/{{name}}\n\
             tokens:    {} tokens signed by your identity provider or `sless token`\n\
             (also in {})\n",
            auth.algorithm(),
            path.display()
        );
        return Ok(());
    };
    println!(
        "sless is running at {url}\n\
         functions: {fn_url}/fn/{ns}/{{name}}\n\
         console:   {} (signs in once, within a day)\n\
         namespace: {ns}\n\
         token:     {token}\n\
         (also in {})\n\
         {}\n\n\
         try:\n  sless deploy examples/hello-python && sless invoke hello\n  \
         curl -H \"Authorization: Bearer {token}\" {url}/v1/namespaces/{ns}/functions\n\n\
         {}",
        console.as_deref().unwrap_or("-"),
        path.display(),
        profile.unwrap_or_default(),
        terraform_setup(data_dir, &url, &token),
    );
    Ok(())
}

/// Terraform's settings for this instance: a CLI configuration that uses
/// the provider built beside this binary (`terraform.rc` in the data
/// directory), and the provider block to paste.
fn terraform_setup(data_dir: &Path, url: &str, token: &str) -> String {
    let provider_dir = std::env::current_exe()
        .ok()
        .and_then(|exe| exe.parent().map(Path::to_path_buf))
        .filter(|dir| dir.join("terraform-provider-sless").is_file());
    let Some(provider_dir) = provider_dir else {
        return "terraform: build the provider (`cargo build -p sless-terraform`) \
                and see docs/terraform.md\n"
            .to_owned();
    };
    let rc = data_dir.join("terraform.rc");
    let text = format!(
        "# Written by sless dev: Terraform uses the provider built beside it.\n\
         provider_installation {{\n  dev_overrides {{\n    \"sless.dev/sless/sless\" = {:?}\n  }}\n  direct {{}}\n}}\n",
        provider_dir.display().to_string()
    );
    if let Err(e) = std::fs::write(&rc, text) {
        return format!("terraform: (could not write {}: {e})\n", rc.display());
    }
    format!(
        "terraform (examples/terraform, docs/terraform.md):\n  \
         export TF_CLI_CONFIG_FILE={} SLESS_ENDPOINT={url} SLESS_TOKEN={token}\n  \
         or in main.tf:\n    provider \"sless\" {{\n      endpoint = \"{url}\"\n      token    = \"{token}\"\n    }}\n",
        rc.display()
    )
}

/// The API's state with the proxy limits, invocation retention, upload
/// gate, version retention, quotas and fault hook of its section.
fn app_state(pool: PgPool, blobs: BlobStore, auth: Auth, api: &config::Api) -> AppState {
    sless_api::plumbing::faults::crash_after_commit(api.crash_after_commit);
    let mut state = AppState::new(pool.clone(), blobs, auth);
    state.http = sless_api::proxy::HttpClient::new(api.proxy);
    state.invocations =
        sless_api::plumbing::recorder::Recorder::start(pool.clone(), api.invocations);
    state.uploads = api.upload_gate();
    state.keep_versions = api.keep_versions;
    state.quotas = api.quotas;
    state.maintenance = Some(Arc::new(crate::ops::ReplayMaintenance { pool }));
    state
}

/// The pool of `DATABASE_URL`, for the roles that need one of their own.
async fn pool_from_env(max: u32) -> anyhow::Result<PgPool> {
    let database = config::Database::from_env();
    let pool = sless_store::connect(database.require()?, max).await?;
    Ok(pool)
}

/// The blob store of `S3_*`, for the roles that need one of their own.
fn blobs_from_env() -> anyhow::Result<BlobStore> {
    Ok(BlobStore::new(&config::Blobs::from_env()?.require()?))
}

pub async fn api(listen: SocketAddr, functions: FnOrigin) -> anyhow::Result<()> {
    let metrics_config = config::Metrics::from_env()?;
    let registry = crate::metrics::registry(&metrics_config);
    let auth = config::TokenSettings::from_env()?.auth(None)?;
    let api_config = config::Api::from_env()?;
    // S3's settings are checked before the database is waited for.
    let blobs = blobs_from_env()?;
    let pool = pool_from_env(30).await?;
    let mut state = app_state(pool.clone(), blobs, auth, &api_config);
    state.metrics = registry;
    let recorder = state.invocations.clone();
    let listeners = Listeners::bind(listen, functions).await?;
    eprintln!(
        "sless api listening on http://{}",
        listeners.api.local_addr()?
    );
    eprintln!(
        "functions served on http://{} (callers reach them at {})",
        listeners.functions.local_addr()?,
        listeners.fn_url.as_deref().unwrap_or(
            "an address not known: set SLESS_FN_URL, or functions' url is a path and /fn/ on the API's origin answers 404"
        )
    );
    let (tx, rx) = watch::channel(false);
    let metrics = crate::metrics::listen(
        &metrics_config,
        &pool,
        &state.metrics,
        Scope::default(),
        &rx,
    )
    .await?;
    let http = listeners.serve(state, api_config.shutdown);
    stop_signal().await;
    http.stop().await?;
    let _ = tx.send(true);
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    recorder.shutdown().await;
    pool.close().await;
    Ok(())
}

pub async fn worker(
    data_dir: PathBuf,
    unsafe_no_sandbox: bool,
    host: &config::Host,
) -> anyhow::Result<()> {
    create_private_dir(&data_dir)?;
    if unsafe_no_sandbox {
        warn_unsafe();
    }
    let metrics_config = config::Metrics::from_env()?;
    let registry = crate::metrics::registry(&metrics_config);
    let cfg = config::Worker::from_env()?;
    // S3's settings are checked before the database is waited for.
    let blobs = blobs_from_env()?;
    let pool = pool_from_env(10).await?;
    let driver =
        AnyDriver::from_env(&data_dir, &blobs, &pool, &cfg, host, unsafe_no_sandbox).await?;
    eprintln!(
        "sless worker {} started (lease {:?})",
        cfg.config.id, cfg.config.lease
    );
    let worker = Worker {
        pool: pool.clone(),
        reconciler: Reconciler {
            pool: pool.clone(),
            blobs,
            driver: driver.clone(),
        },
        config: cfg.config.clone(),
        on_start: None,
    };
    let (tx, rx) = watch::channel(false);
    let queue = Scope {
        projector: false,
        queue: true,
    };
    let metrics = crate::metrics::listen(&metrics_config, &pool, &registry, queue, &rx).await?;
    let scheduler = cron(&driver, &pool, &cfg, &rx);
    let crashes = record_crashes(&driver, &pool, &rx);
    let task = tokio::spawn(worker.run(rx));
    stop_signal().await;
    let _ = tx.send(true);
    task.await??;
    let _ = scheduler.await;
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    driver.shutdown().await;
    leave(&driver, &pool).await;
    if let Some(crashes) = crashes {
        let _ = crashes.await;
    }
    Ok(())
}

/// Once the driver stopped what it ran here: this worker leaves, and what
/// it ran gets a reconcile, so another worker places it at once.
async fn leave(driver: &AnyDriver, pool: &PgPool) {
    let Some(node) = driver.node() else { return };
    match sless_workers::placement::leave(pool, &node).await {
        Ok(0) => {}
        Ok(n) => tracing::info!(
            functions = n,
            "this worker left; its functions are placed elsewhere"
        ),
        Err(e) => {
            tracing::warn!(error = %e, "leaving failed; this worker's functions are placed elsewhere once its heartbeat is a lease old")
        }
    }
}

/// The user `sless dev` prints a token for.
const DEV_USER: &str = "dev";

/// Creates the data directory, private to its owner (0700), when it is
/// not there; one that is keeps its permissions.
fn create_private_dir(dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::DirBuilderExt;
    if dir.is_dir() {
        return Ok(());
    }
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("creating {}", dir.display()))
}

/// Says, at every start, what running without the sandbox means.
fn warn_unsafe() {
    eprintln!(
        "WARNING: --unsafe-no-sandbox: functions, jobs and builds run as the user that runs \
         sless ({}), with everything it may read and do: the data directory, its secrets, \
         the machine. Only for your own code, on your own machine: this instance accepts \
         tokens of one user only ({DEV_USER}).",
        whoami()
    );
}

fn whoami() -> String {
    // SAFETY: geteuid has no preconditions.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        "root".to_owned()
    } else {
        format!("uid {uid}")
    }
}

/// Appends the crashes the local driver reports, or those a cluster's
/// function pods show, to the log, and follows what those pods print into
/// the function logs, until `stop`.
fn record_crashes(
    driver: &AnyDriver,
    pool: &PgPool,
    stop: &watch::Receiver<bool>,
) -> Option<tokio::task::JoinHandle<()>> {
    if let Some(recorder) = driver.crash_recorder(pool) {
        // Beside the crashes of a cluster's function pods, what they print.
        let follower = driver.pod_log_follower(pool);
        let stop = stop.clone();
        return Some(tokio::spawn(async move {
            let following = async {
                if let Some(f) = follower {
                    f.run(stop.clone()).await;
                }
            };
            tokio::join!(recorder.run(stop.clone()), following);
        }));
    }
    let crashes = driver.crashes()?;
    Some(tokio::spawn(sless_workers::crashes::record(
        pool.clone(),
        crashes,
        stop.clone(),
    )))
}

/// What fires cron triggers: sless's scheduler, or for a driver that runs
/// them itself (CronJobs), what records their runs.
fn cron(
    driver: &AnyDriver,
    pool: &PgPool,
    worker: &config::Worker,
    stop: &watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    if driver.runs_cron()
        && let Some(recorder) = driver.cron_run_recorder(pool)
    {
        return tokio::spawn(recorder.run(stop.clone()));
    }
    tokio::spawn(worker.scheduler(pool.clone()).run(stop.clone()))
}

/// The read models, and the version manifests in S3.
pub async fn projector() -> anyhow::Result<()> {
    let metrics_config = config::Metrics::from_env()?;
    let registry = crate::metrics::registry(&metrics_config);
    // S3's settings are checked before the database is waited for.
    let blobs = blobs_from_env()?;
    let pool = pool_from_env(4).await?;
    let (tx, rx) = watch::channel(false);
    let lag = Scope {
        projector: true,
        queue: false,
    };
    let metrics = crate::metrics::listen(&metrics_config, &pool, &registry, lag, &rx).await?;
    let task = tokio::spawn(sless_projector::run(
        pool.clone(),
        Duration::from_secs(1),
        rx.clone(),
    ));
    let manifests = tokio::spawn(sless_projector::manifests::run(
        pool,
        blobs,
        Duration::from_secs(1),
        rx,
    ));
    stop_signal().await;
    let _ = tx.send(true);
    task.await??;
    manifests.await??;
    if let Some(metrics) = metrics {
        let _ = metrics.await;
    }
    Ok(())
}
