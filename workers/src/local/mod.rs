//! The local driver: functions run as supervised processes on loopback ports.
//!
//! Layout of the data directory:
//!
//! ```text
//! {data_dir}/runtimes/python3.11/sless_runtime.py   the runtime wrappers (written by `new`)
//! {data_dir}/runtimes/nodejs20/sless_runtime.cjs
//! {data_dir}/builds/{ns}/{name}/{sha256}/            one finished build
//!     code/          the unpacked build context (nodejs20: with node_modules/)
//!     deps/          pip install --target of code/requirements.txt (if any)
//!     bin/function   go1.23: the wrapper compiled with the user's package
//!     build.log      what the build printed
//!     .complete      present once the build is finished
//! {data_dir}/logs/{ns}/{name}/v{version}.log         stdout + stderr of a version's instances
//! {data_dir}/logs/jobs/{run}.log                     stdout + stderr of a job run
//! {data_dir}/go/{path,cache}/                        GOPATH and GOCACHE of Go builds
//! {data_dir}/npm/cache/                              npm's cache
//! ```
//!
//! A build is unpacked into a temporary sibling directory and renamed into
//! place once finished, so a crash never leaves a directory that looks
//! complete. A deployment starts the runtime wrapper (`python3
//! sless_runtime.py`, `node sless_runtime.cjs`, or the Go binary), waits
//! until it answers `GET /__sless/health`, and only then replaces the
//! previous processes of the function. A function runs as the number of
//! instances its deploy asks for, each a process of its own on a loopback
//! port of its own (held by sless while the instance lives, so a restart
//! keeps it), all appending to the version's log. Every process has a
//! supervisor task that restarts it with exponential backoff if it dies.
//! Processes are spawned from one dedicated thread with
//! `PR_SET_PDEATHSIG`, so they die with the worker even on `kill -9`, and
//! run in their own process group.
//!
//! This module holds the driver itself ([`LocalDriver`]: its state, start,
//! shutdown and the [`Driver`] calls); the parts live beside it: `config`
//! (its settings), `build` (builds), `launch` (how a process is started),
//! `deploy` (starting a version's instances and waiting until they are
//! healthy), `job` (one-shot runs), `jails` and `sandbox` (the sandbox's
//! jails), `process` (spawning and supervising processes) and `pool` (the
//! warm pool).

mod build;
mod config;
mod deploy;
mod jails;
pub(crate) mod job;
mod launch;
mod pool;
mod process;
pub mod sandbox;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sless_domain::{FunctionKey, Runtime};

use crate::crashes::Crash;
use crate::driver::{
    Artifact, BuildRequest, DeployRequest, Deployment, Driver, DriverError, JobOutput, JobRequest,
    Node, RunningHere,
};
pub use config::LocalDriverConfig;
use jails::Jails;
pub use pool::WarmPool;
use process::{Instance, Spawner};
use sandbox::{Isolation, Tenants, Toolchain};
use sless_sandbox::{Network, Sandbox};

/// The Python runtime wrapper, embedded so the binary is self-contained.
const PYTHON_WRAPPER: &str = include_str!("../../../runtimes/python3.11/sless_runtime.py");
/// Where the wrapper lives below the runtimes directory.
const PYTHON_WRAPPER_RELATIVE: &str = "python3.11/sless_runtime.py";
/// The Node.js runtime wrapper.
const NODE_WRAPPER: &str = include_str!("../../../runtimes/nodejs20/sless_runtime.cjs");
const NODE_WRAPPER_RELATIVE: &str = "nodejs20/sless_runtime.cjs";

/// Writes a runtime wrapper below the runtimes directory, atomically: a
/// process of another driver may be starting it.
fn write_wrapper(runtimes: &Path, relative: &str, text: &str) -> std::io::Result<PathBuf> {
    let path = runtimes.join(relative);
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let mut tmp = path.clone().into_os_string();
    tmp.push(format!(".tmp-{:016x}", rand::random::<u64>()));
    std::fs::write(&tmp, text)?;
    std::fs::rename(&tmp, &path)?;
    Ok(path)
}

/// Runs functions as supervised local processes (see the module docs).
///
/// Dropping the driver stops its processes in the background; call
/// [`LocalDriver::shutdown`] to stop them and wait until they are gone.
pub struct LocalDriver {
    cfg: LocalDriverConfig,
    tools: build::Toolchains,
    /// `None` with [`Isolation::Unsafe`].
    jails: Option<Arc<Jails>>,
    /// Where the runtime wrappers are (`runtimes/` of the data directory).
    runtimes_dir: PathBuf,
    build_paths: build::BuildPaths,
    client: reqwest::Client,
    spawner: Arc<Spawner>,
    /// Processes started ahead (none without the sandbox).
    pool: Option<pool::Pool>,
    /// The instances of each function that serve, in the order they
    /// started.
    registry: Mutex<HashMap<FunctionKey, Vec<Arc<Instance>>>>,
    /// Serialises deploy/remove of one function.
    key_locks: Mutex<HashMap<FunctionKey, Arc<tokio::sync::Mutex<()>>>>,
    closed: AtomicBool,
    /// Crashes of supervised processes: the sender each instance reports
    /// on, and the receiver until someone takes it ([`LocalDriver::crashes`]).
    crashes: (
        tokio::sync::mpsc::UnboundedSender<Crash>,
        Mutex<Option<tokio::sync::mpsc::UnboundedReceiver<Crash>>>,
    ),
}

impl LocalDriver {
    /// Creates the data directories, writes the runtime wrappers and removes
    /// builds left unfinished by an earlier run.
    pub fn new(cfg: LocalDriverConfig) -> std::io::Result<LocalDriver> {
        let builds = cfg.data_dir.join("builds");
        std::fs::create_dir_all(&builds)?;
        std::fs::create_dir_all(cfg.data_dir.join("logs"))?;
        let runtimes = cfg.data_dir.join("runtimes");
        write_wrapper(&runtimes, PYTHON_WRAPPER_RELATIVE, PYTHON_WRAPPER)?;
        write_wrapper(&runtimes, NODE_WRAPPER_RELATIVE, NODE_WRAPPER)?;
        for ns in std::fs::read_dir(&builds)?.flatten() {
            for function in std::fs::read_dir(ns.path()).into_iter().flatten().flatten() {
                build::remove_stale_tmp_dirs(&function.path(), Duration::ZERO);
            }
        }
        let client = reqwest::Client::builder()
            .no_proxy()
            .build()
            .map_err(std::io::Error::other)?;
        let jails = match &cfg.isolation {
            Isolation::Unsafe => None,
            Isolation::Sandboxed(options) => {
                let sandbox = Sandbox::with_options(options)
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                sandbox
                    .check()
                    .map_err(|e| std::io::Error::other(e.to_string()))?;
                if cfg.network == Network::Outbound {
                    // Refused at start, naming the package, not at the
                    // first deploy.
                    sandbox
                        .slirp4netns()
                        .map_err(|e| std::io::Error::other(e.to_string()))?;
                }
                let toolchain =
                    Toolchain::resolve(&cfg.python, &cfg.node, &cfg.npm, cfg.env_value("PATH"))?;
                Some(Arc::new(Jails {
                    sandbox,
                    tenants: Tenants::new(cfg.tenants.clone()),
                    toolchain,
                    sizes: cfg.jail,
                    network: cfg.network,
                    owner: cfg.data_dir.to_string_lossy().into_owned(),
                }))
            }
        };
        let spawner = Arc::new(Spawner::new()?);
        let pool = match &jails {
            Some(jails) if cfg.warm_pool.python + cfg.warm_pool.node > 0 => {
                let empty = cfg.data_dir.join("pool/empty");
                std::fs::create_dir_all(&empty)?;
                Some(pool::Pool::start(
                    &cfg.warm_pool,
                    pool::Maker {
                        jails: jails.clone(),
                        spawner: spawner.clone(),
                        runtimes_dir: runtimes.clone(),
                        empty,
                        advertise: cfg.advertise,
                    },
                ))
            }
            _ => None,
        };
        Ok(LocalDriver {
            tools: cfg.toolchains(),
            jails,
            runtimes_dir: runtimes,
            build_paths: build::BuildPaths {
                builds: cfg.data_dir.join("builds"),
                logs: cfg.data_dir.join("logs/builds"),
                tenants: cfg.data_dir.join("tenants"),
            },
            client,
            spawner,
            pool,
            registry: Mutex::new(HashMap::new()),
            key_locks: Mutex::new(HashMap::new()),
            closed: AtomicBool::new(false),
            crashes: {
                let (tx, rx) = tokio::sync::mpsc::unbounded_channel();
                (tx, Mutex::new(Some(rx)))
            },
            cfg,
        })
    }

    /// Stops every process this driver started (SIGTERM, then SIGKILL after
    /// 5 s) and waits until they are gone. Later deploys fail.
    pub async fn shutdown(&self) {
        self.closed.store(true, Ordering::SeqCst);
        if let Some(pool) = &self.pool {
            pool.close();
        }
        let all: Vec<Arc<Instance>> = {
            let mut registry = self.registry.lock().unwrap();
            registry
                .drain()
                .flat_map(|(_, instances)| instances)
                .collect()
        };
        deploy::stop_all(&all).await;
    }

    /// The pid of the process of the function's first instance, while it
    /// runs.
    pub fn pid(&self, key: &FunctionKey) -> Option<u32> {
        self.instances(key).first().and_then(|inst| inst.pid())
    }

    /// The pid of each instance's process of the function, in the order
    /// they started (`None` while one is down).
    pub fn pids(&self, key: &FunctionKey) -> Vec<Option<u32>> {
        self.instances(key).iter().map(|inst| inst.pid()).collect()
    }

    /// How often the processes of the function's instances were restarted
    /// after they died.
    pub fn restarts(&self, key: &FunctionKey) -> u32 {
        self.instances(key).iter().map(|inst| inst.restarts()).sum()
    }

    /// The crashes of the processes this driver supervises (each one that
    /// ended without being asked to, before it is started again), for
    /// `crashes::record`; `None` once taken.
    pub fn crashes(&self) -> Option<tokio::sync::mpsc::UnboundedReceiver<Crash>> {
        self.crashes.1.lock().unwrap().take()
    }

    /// How memory and process limits are enforced, when functions run in
    /// the sandbox.
    pub fn limits(&self) -> Option<sless_sandbox::LimitsMechanism> {
        self.jails.as_ref().map(|j| j.sandbox.limits_mechanism())
    }

    /// How many started processes of `runtime` wait in the warm pool.
    pub fn warm(&self, runtime: Runtime) -> usize {
        self.pool.as_ref().map_or(0, |p| p.waiting(runtime))
    }

    /// The data directory.
    pub fn data_dir(&self) -> &Path {
        &self.cfg.data_dir
    }

    /// Sets the metric of the function processes this driver runs.
    fn count_processes(&self) {
        let n: usize = self.registry.lock().unwrap().values().map(Vec::len).sum();
        sless_telemetry::global()
            .processes
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    /// The function's instances, in the order they started.
    fn instances(&self, key: &FunctionKey) -> Vec<Arc<Instance>> {
        self.registry
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    fn key_lock(&self, key: &FunctionKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.key_locks.lock().unwrap();
        locks.entry(key.clone()).or_default().clone()
    }
}

impl Drop for LocalDriver {
    fn drop(&mut self) {
        if let Ok(registry) = self.registry.lock() {
            for inst in registry.values().flatten() {
                inst.signal_stop();
            }
        }
    }
}

impl Driver for LocalDriver {
    async fn build(&self, req: BuildRequest) -> Result<Artifact, DriverError> {
        let builder = build::Builder {
            paths: &self.build_paths,
            tools: &self.tools,
            spawner: &self.spawner,
            jails: self.jails.as_deref(),
        };
        build::build(&builder, req).await
    }

    async fn deploy(&self, req: DeployRequest) -> Result<Deployment, DriverError> {
        let lock = self.key_lock(&req.key);
        let _guard = lock.lock().await;
        self.deploy_locked(req).await
    }

    async fn remove(&self, key: &FunctionKey) -> Result<(), DriverError> {
        let lock = self.key_lock(key);
        let _guard = lock.lock().await;
        let instances = self.registry.lock().unwrap().remove(key);
        self.count_processes();
        deploy::stop_all(&instances.unwrap_or_default()).await;
        Ok(())
    }

    async fn status(&self, key: &FunctionKey) -> Option<Deployment> {
        self.deployment_of(&self.instances(key))
    }

    async fn run_job(&self, req: JobRequest) -> Result<JobOutput, DriverError> {
        self.run_job_locally(req).await
    }

    fn node(&self) -> Option<Node> {
        self.cfg.placement.clone()
    }

    fn kind(&self) -> &'static str {
        "local"
    }

    fn running_here(&self) -> Vec<RunningHere> {
        let registry = self.registry.lock().unwrap();
        registry
            .iter()
            .filter_map(|(key, instances)| {
                let first = instances.first()?;
                Some(RunningHere {
                    key: key.clone(),
                    version: first.version,
                    endpoint: first.endpoint.clone(),
                    // Since the newest instance started: the first one's
                    // endpoint changes only when one starts.
                    age: instances.iter().map(|i| i.deployed_at.elapsed()).min()?,
                })
            })
            .collect()
    }
}
