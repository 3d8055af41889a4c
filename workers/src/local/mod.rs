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
//! {data_dir}/logs/{ns}/{name}/v{version}.log         stdout + stderr of a version
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
//! previous process of the function. Every process has a supervisor task
//! that restarts it with exponential backoff if it dies. Processes are
//! spawned from one dedicated thread with `PR_SET_PDEATHSIG`, so they die
//! with the worker even on `kill -9`, and run in their own process group.

mod build;
pub(crate) mod job;
mod pool;
mod process;
pub mod sandbox;

use std::collections::HashMap;
use std::ffi::OsString;
use std::net::{IpAddr, Ipv4Addr, SocketAddr, TcpListener};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sless_domain::{FunctionKey, Runtime};
use tokio::time::Instant;

use crate::crashes::Crash;
use crate::driver::{
    Artifact, BuildRequest, DeployRequest, Deployment, Driver, DriverError, JobOutput, JobRequest,
    Node, RunningHere,
};
pub use pool::WarmPool;
use process::{Instance, InstanceParts, LogSink, Running, Spawner};
use sandbox::{Isolation, JailParts, JailSizes, Launch, TenantIds, Tenants, Toolchain};
use sless_sandbox::{Identity, Limits, Mount, Network, Sandbox};

/// The Python runtime wrapper, embedded so the binary is self-contained.
const PYTHON_WRAPPER: &str = include_str!("../../../runtimes/python3.11/sless_runtime.py");
/// Where the wrapper lives below the runtimes directory.
const PYTHON_WRAPPER_RELATIVE: &str = "python3.11/sless_runtime.py";
/// The Node.js runtime wrapper.
const NODE_WRAPPER: &str = include_str!("../../../runtimes/nodejs20/sless_runtime.cjs");
const NODE_WRAPPER_RELATIVE: &str = "nodejs20/sless_runtime.cjs";
/// How often deploy asks a starting function whether it is healthy.
const HEALTH_POLL: Duration = Duration::from_millis(5);
/// How long one health request may take.
const HEALTH_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

/// Settings of the [`LocalDriver`].
#[derive(Debug, Clone)]
pub struct LocalDriverConfig {
    /// Root of builds (`builds/{ns}/{name}/{context_sha256}/`), logs
    /// (`logs/{ns}/{name}/`) and the runtime wrappers.
    pub data_dir: PathBuf,
    /// The Python interpreter to run functions and pip with.
    pub python: String,
    /// The Node.js binary that runs nodejs20 functions.
    pub node: String,
    /// npm, for nodejs20 functions with a `package.json`.
    pub npm: String,
    /// The Go toolchain (at least 1.21) that builds go1.23 functions
    /// (`SLESS_GO`); `None` uses `go` from `PATH`.
    pub go: Option<String>,
    /// `GOCACHE` of Go builds.
    pub go_cache: PathBuf,
    /// The worker's environment, which the driver reads none of itself:
    /// functions run without the sandbox, and build steps, get the
    /// variables of it they may see (`PATH`, `HOME`, the locale, proxies, CA
    /// certificates; a jailed build step only pip's, npm's and Go's own
    /// settings), and `node` and `npm` are looked for on its `PATH`. Empty
    /// by default: nothing of the worker's environment is passed on.
    pub env: Vec<(String, String)>,
    /// How long a deploy waits for the function to become healthy.
    pub health_timeout: Duration,
    /// Whether tenants' code runs in the sandbox (the default).
    pub isolation: Isolation,
    /// Who each namespace's code runs as (default: all as `nobody`).
    pub tenants: TenantIds,
    /// Sizes of the sandbox's jails.
    pub jail: JailSizes,
    /// The network of functions and jobs in the sandbox (default: a
    /// namespace of their own, out through slirp4netns). Builds reach out
    /// the same way unless this is the host's network.
    pub network: Network,
    /// The worker the driver runs in, which the log names as where its
    /// functions run (`None`: not said, as in tests of the driver alone).
    pub placement: Option<Node>,
    /// The address functions listen on and the invoke proxy reaches them
    /// at: loopback (the default) when the API runs on this machine.
    pub advertise: IpAddr,
    /// Processes started ahead for deploys and jobs to take (none by
    /// default; only in the sandbox).
    pub warm_pool: WarmPool,
}

impl LocalDriverConfig {
    /// The defaults for a data directory: `python3`, `node`, `npm`, `go`,
    /// `GOCACHE` below the data directory, none of the worker's environment
    /// passed on, 60 s health timeout.
    pub fn new(data_dir: impl Into<PathBuf>) -> LocalDriverConfig {
        let data_dir = data_dir.into();
        LocalDriverConfig {
            python: "python3".to_owned(),
            node: "node".to_owned(),
            npm: "npm".to_owned(),
            go: None,
            go_cache: data_dir.join("go/cache"),
            env: Vec::new(),
            health_timeout: Duration::from_secs(60),
            isolation: Isolation::Sandboxed(Default::default()),
            tenants: TenantIds::Shared(Identity::NOBODY),
            jail: JailSizes::default(),
            network: Network::Outbound,
            placement: None,
            advertise: IpAddr::V4(Ipv4Addr::LOCALHOST),
            warm_pool: WarmPool::default(),
            data_dir,
        }
    }

    fn toolchains(&self) -> build::Toolchains {
        build::Toolchains {
            python: self.python.clone(),
            npm: self.npm.clone(),
            go: self.go.clone(),
            go_path: self.data_dir.join("go/path"),
            go_cache: self.go_cache.clone(),
            npm_cache: self.data_dir.join("npm/cache"),
            env: self.env.clone(),
        }
    }

    /// The value of `name` in the worker's environment ([`Self::env`]).
    fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

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

/// The environment every jailed function or job starts with, before its
/// own.
pub(crate) fn jailed_env(jails: &Jails) -> Vec<(String, String)> {
    vec![
        ("PATH".to_owned(), jails.toolchain.path.clone()),
        ("HOME".to_owned(), "/tmp".to_owned()),
        ("TMPDIR".to_owned(), "/tmp".to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ]
}

/// What every Python function's interpreter is started with, after the
/// function's own environment.
pub(crate) fn python_env() -> [(String, String); 2] {
    [
        ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
        ("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()),
    ]
}

/// What runs tenants' code in jails.
pub(crate) struct Jails {
    pub sandbox: Sandbox,
    pub tenants: Tenants,
    pub toolchain: Toolchain,
    pub sizes: JailSizes,
    /// The network of functions and jobs.
    pub network: Network,
    /// Marks the driver's jails (`sless_sandbox::OWNER_ENV`).
    pub owner: String,
}

impl Jails {
    /// The network of a build step: out through slirp4netns (package
    /// registries), or the host's where functions have it too.
    pub(crate) fn build_network(&self) -> Network {
        match self.network {
            Network::Host => Network::Host,
            Network::Loopback | Network::Outbound => Network::Outbound,
        }
    }

    /// A jail of a namespace's user with these mounts, the tools'
    /// directories, and the limits of a function or job of `memory_mb`.
    pub(crate) fn parts(
        &self,
        identity: Identity,
        mut mounts: Vec<Mount>,
        memory_mb: u32,
        label: String,
    ) -> JailParts {
        mounts.extend(self.toolchain.mounts());
        JailParts {
            sandbox: self.sandbox.clone(),
            identity,
            mounts,
            limits: Limits {
                memory_bytes: Some(u64::from(memory_mb) << 20),
                processes: Some(u64::from(self.sizes.processes)),
                file_bytes: Some(u64::from(self.sizes.file_mb) << 20),
                cpu_secs: None,
            },
            tmp_bytes: u64::from(self.sizes.tmp_mb) << 20,
            label,
            network: self.network,
            owner: self.owner.clone(),
        }
    }
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
    /// The current deployment of each function.
    registry: Mutex<HashMap<FunctionKey, Arc<Instance>>>,
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
            registry.drain().map(|(_, inst)| inst).collect()
        };
        for inst in &all {
            inst.signal_stop();
        }
        for inst in &all {
            inst.stop().await;
        }
    }

    /// The pid of the function's current process, while it runs.
    pub fn pid(&self, key: &FunctionKey) -> Option<u32> {
        self.current(key).and_then(|inst| inst.pid())
    }

    /// How often the function's current deployment was restarted after its
    /// process died.
    pub fn restarts(&self, key: &FunctionKey) -> u32 {
        self.current(key).map_or(0, |inst| inst.restarts())
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
        let n = self.registry.lock().unwrap().len();
        sless_telemetry::global()
            .processes
            .set(i64::try_from(n).unwrap_or(i64::MAX));
    }

    fn current(&self, key: &FunctionKey) -> Option<Arc<Instance>> {
        self.registry.lock().unwrap().get(key).cloned()
    }

    fn key_lock(&self, key: &FunctionKey) -> Arc<tokio::sync::Mutex<()>> {
        let mut locks = self.key_locks.lock().unwrap();
        locks.entry(key.clone()).or_default().clone()
    }

    fn log_path(&self, key: &FunctionKey, version: u32) -> PathBuf {
        self.cfg
            .data_dir
            .join("logs")
            .join(key.namespace.as_str())
            .join(key.name.as_str())
            .join(format!("v{version}.log"))
    }

    /// Whether the process started as `spec` answers its health check on
    /// `port`: the answer must name the instance `spec` was started as, so
    /// another process that took the port does not pass for it.
    async fn healthy(&self, port: u16, spec: &Launch) -> bool {
        #[derive(serde::Deserialize)]
        struct Health {
            instance: Option<String>,
        }
        let url = format!(
            "http://{}/__sless/health",
            SocketAddr::new(self.cfg.advertise, port)
        );
        let Ok(resp) = self
            .client
            .get(url)
            .timeout(HEALTH_REQUEST_TIMEOUT)
            .send()
            .await
        else {
            return false;
        };
        if resp.status() != reqwest::StatusCode::OK {
            return false;
        }
        let answered = resp.json::<Health>().await.ok().and_then(|h| h.instance);
        answered.as_deref() == spec.env_value(INSTANCE_ENV)
    }

    /// Waits until the process answers its health check; on failure says
    /// why.
    async fn wait_healthy(
        &self,
        port: u16,
        spec: &Launch,
        running: &mut Running,
    ) -> Result<(), String> {
        let deadline = Instant::now() + self.cfg.health_timeout;
        let timed_out = || {
            format!(
                "function not healthy within {}",
                human_duration(self.cfg.health_timeout)
            )
        };
        let exited =
            |status: std::io::Result<std::process::ExitStatus>, running: &Running| match status {
                Ok(status) => format!("function {} during start", running.describe(&status)),
                Err(e) => format!("function process could not be waited for: {e}"),
            };
        loop {
            tokio::select! {
                status = running.child.wait() => return Err(exited(status, running)),
                probe = tokio::time::timeout_at(deadline, self.healthy(port, spec)) => match probe {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    Err(_) => return Err(timed_out()),
                },
            }
            let next = (Instant::now() + HEALTH_POLL).min(deadline);
            tokio::select! {
                status = running.child.wait() => return Err(exited(status, running)),
                () = tokio::time::sleep_until(next) => {}
            }
            if Instant::now() >= deadline {
                return Err(timed_out());
            }
        }
    }

    /// A new socket for a function to serve on, on the address the invoke
    /// proxy reaches functions at.
    fn listen(&self) -> Result<TcpListener, DriverError> {
        listen_on(self.cfg.advertise)
    }

    /// How to start the function of `req`, built into `artifact_dir`: to
    /// serve on `listener` (sless's socket, handed to the process), or with
    /// none, to run once as a job (the wrapper's `--job` mode). In a jail,
    /// `extra` is mounted too.
    async fn launch_spec(
        &self,
        req: &DeployRequest,
        artifact_dir: &Path,
        listener: Option<Arc<TcpListener>>,
        extra: Vec<Mount>,
    ) -> Result<Launch, DriverError> {
        let port = listener.as_ref().map(|l| listener_port(l)).transpose()?;
        let jailed = self.jails.is_some();
        // Paths as the process sees them.
        let (build_dir, runtimes) = if jailed {
            (
                PathBuf::from(sandbox::FUNCTION_DIR),
                PathBuf::from(sandbox::RUNTIME_DIR),
            )
        } else {
            (artifact_dir.to_path_buf(), self.runtimes_dir.clone())
        };
        let code_dir = build_dir.join("code");
        let mut env = match &self.jails {
            Some(jails) => jailed_env(jails),
            None => process::inherited_env(&self.cfg.env, &[]),
        };
        // Defaults the function's own environment may override.
        if req.runtime == Runtime::Nodejs20 {
            env.push(("NODE_ENV".to_owned(), "production".to_owned()));
        }
        env.extend(req.env_vars.iter().map(|(k, v)| (k.clone(), v.clone())));
        if let (Some(port), Some(listener)) = (port, &listener) {
            env.extend([
                (
                    sandbox::LISTEN_FD_ENV.to_owned(),
                    listener.as_raw_fd().to_string(),
                ),
                ("SLESS_PORT".to_owned(), port.to_string()),
                ("SLESS_HOST".to_owned(), self.cfg.advertise.to_string()),
                (
                    INSTANCE_ENV.to_owned(),
                    uuid::Uuid::new_v4().simple().to_string(),
                ),
            ]);
        }
        env.extend([
            (
                "SLESS_CODE_DIR".to_owned(),
                code_dir.to_string_lossy().into_owned(),
            ),
            ("SLESS_ENTRYPOINT".to_owned(), req.entrypoint.clone()),
            ("SLESS_FUNCTION".to_owned(), req.key.to_string()),
            ("SLESS_VERSION".to_owned(), req.version.to_string()),
        ]);
        let (program, mut args) = match req.runtime {
            Runtime::Python311 => {
                env.extend(python_env());
                if tokio::fs::metadata(artifact_dir.join("deps"))
                    .await
                    .is_ok_and(|m| m.is_dir())
                {
                    env.push((
                        "SLESS_DEPS_DIR".to_owned(),
                        build_dir.join("deps").to_string_lossy().into_owned(),
                    ));
                }
                let python = match &self.jails {
                    Some(jails) => jails.toolchain.python.clone(),
                    None => PathBuf::from(&self.cfg.python),
                };
                (
                    python,
                    vec![runtimes.join(PYTHON_WRAPPER_RELATIVE).into_os_string()],
                )
            }
            Runtime::Nodejs20 => {
                let node = match &self.jails {
                    Some(jails) => jails.toolchain.node.clone(),
                    None => PathBuf::from(&self.cfg.node),
                };
                (
                    node,
                    vec![runtimes.join(NODE_WRAPPER_RELATIVE).into_os_string()],
                )
            }
            Runtime::Go123 => {
                if !tokio::fs::try_exists(artifact_dir.join(build::GO_BINARY))
                    .await
                    .unwrap_or(false)
                {
                    return Err(DriverError::Deploy {
                        message: format!(
                            "artifact {} has no Go binary: it was not built for go1.23",
                            req.artifact.reference
                        ),
                        log_tail: String::new(),
                    });
                }
                (build_dir.join(build::GO_BINARY), Vec::new())
            }
        };
        if port.is_none() {
            args.push(OsString::from(job::JOB_FLAG));
        }
        let jail = match &self.jails {
            None => None,
            Some(jails) => {
                let identity = jails.tenants.identity(&req.key.namespace).await?;
                let mut mounts = vec![
                    Mount::ReadOnly {
                        source: artifact_dir.to_path_buf(),
                        dest: PathBuf::from(sandbox::FUNCTION_DIR),
                    },
                    Mount::ReadOnly {
                        source: self.runtimes_dir.clone(),
                        dest: PathBuf::from(sandbox::RUNTIME_DIR),
                    },
                ];
                mounts.extend(extra);
                let kind = if port.is_some() { "fn" } else { "job" };
                let label = format!(
                    "{kind}-{}-{}-v{}",
                    req.key.namespace, req.key.name, req.version
                );
                Some(jails.parts(identity, mounts, req.memory_mb, label))
            }
        };
        Ok(Launch {
            program,
            args,
            env,
            cwd: code_dir,
            jail,
            listener,
        })
    }

    /// A process of the warm pool for `req`, unless its environment sets
    /// what an interpreter reads only when it starts.
    async fn warm_for(&self, req: &DeployRequest) -> Option<pool::Warm> {
        let pool = self.pool.as_ref()?;
        if req
            .env_vars
            .keys()
            .any(|k| pool::read_at_start(req.runtime, k))
        {
            return None;
        }
        pool.take(req.runtime).await
    }

    async fn deploy_locked(&self, req: DeployRequest) -> Result<Deployment, DriverError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(DriverError::Infra("the local driver is shut down".into()));
        }
        let artifact_dir = PathBuf::from(&req.artifact.reference);
        let complete = artifact_dir.join(build::COMPLETE_MARKER);
        if !tokio::fs::try_exists(&complete).await.unwrap_or(false) {
            return Err(DriverError::Deploy {
                message: format!(
                    "artifact {} is not a finished local build",
                    req.artifact.reference
                ),
                log_tail: String::new(),
            });
        }

        // Idempotence: the same thing already runs and is healthy.
        if let Some(cur) = self.current(&req.key)
            && cur.deployment.version == req.version
            && cur.deployment.artifact == req.artifact
            && cur.entrypoint == req.entrypoint
            && cur.env_vars == req.env_vars
            && cur.pid().is_some()
            && self.healthy(cur.port, cur.spec()).await
        {
            return Ok(cur.deployment.clone());
        }

        let log_path = self.log_path(&req.key, req.version);
        let sink = tokio::task::spawn_blocking(move || LogSink::open(&log_path))
            .await
            .map_err(|e| DriverError::Infra(format!("log task: {e}")))?
            .map_err(|e| DriverError::Infra(format!("cannot open the function log: {e}")))?;
        let sink = Arc::new(sink);

        // The socket the function serves on is bound here and handed to its
        // process: a warm process brought one from its start, a cold one gets
        // a new one. sless holds it for as long as the instance lives, so
        // while the process is down (a crash, a restart) the port stays
        // sless's and calls wait in its backlog; nobody else can take it.
        let warm = self.warm_for(&req).await;
        let listener = match warm.as_ref() {
            Some(warm) => warm.listener(),
            None => Arc::new(self.listen()?),
        };
        let port = listener_port(&listener)?;
        let spec = self
            .launch_spec(&req, &artifact_dir, Some(listener), Vec::new())
            .await?;
        let to = pool::Specialisation {
            artifact_dir: &artifact_dir,
            spec: &spec,
            memory_mb: req.memory_mb,
            job: None,
        };
        let what = format!("function {}", req.key);
        let cold = async || process::start(&self.spawner, &spec, &sink).await;
        let started =
            pool::warm_or_cold(warm, to, &what, cold)
                .await
                .map(|(mut running, pooled)| {
                    // A cold start reads its output from the start.
                    if pooled {
                        process::read_output(&mut running, &sink);
                    }
                    running
                });
        let mut running = started.map_err(|e| {
            DriverError::Infra(format!(
                "cannot start {}: {e}",
                spec.program.to_string_lossy()
            ))
        })?;
        if let Err(failure) = self.wait_healthy(port, &spec, &mut running).await {
            process::terminate(&mut running, process::STOP_GRACE).await;
            running.drain_output().await;
            return Err(DriverError::Deploy {
                message: failure,
                log_tail: sink.tail(),
            });
        }

        let deployment = Deployment {
            version: req.version,
            endpoint: format!("http://{}", SocketAddr::new(self.cfg.advertise, port)),
            artifact: req.artifact,
            node: self.cfg.placement.as_ref().map(|n| n.id.clone()),
        };
        let inst = Instance::supervise(
            InstanceParts {
                key: req.key.clone(),
                deployment: deployment.clone(),
                port,
                entrypoint: req.entrypoint,
                env_vars: req.env_vars,
                memory_mb: req.memory_mb,
                spec,
                sink,
                crashes: self.crashes.0.clone(),
            },
            running,
            self.spawner.clone(),
        );
        let previous = self.registry.lock().unwrap().insert(req.key, inst);
        self.count_processes();
        if let Some(previous) = previous {
            previous.stop().await;
        }
        Ok(deployment)
    }
}

impl Drop for LocalDriver {
    fn drop(&mut self) {
        if let Ok(registry) = self.registry.lock() {
            for inst in registry.values() {
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
        let inst = self.registry.lock().unwrap().remove(key);
        self.count_processes();
        if let Some(inst) = inst {
            inst.stop().await;
        }
        Ok(())
    }

    async fn status(&self, key: &FunctionKey) -> Option<Deployment> {
        let inst = self.current(key)?;
        inst.pid().map(|_| inst.deployment.clone())
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
            .values()
            .map(|inst| RunningHere {
                key: inst.key.clone(),
                version: inst.deployment.version,
                endpoint: inst.deployment.endpoint.clone(),
                age: inst.deployed_at.elapsed(),
            })
            .collect()
    }
}

/// The environment variable naming the instance a served process was
/// started as; its health check answers with it.
const INSTANCE_ENV: &str = "SLESS_INSTANCE";

/// A new listening socket on `addr`, on a port the kernel picks.
pub(crate) fn listen_on(addr: IpAddr) -> Result<TcpListener, DriverError> {
    TcpListener::bind((addr, 0))
        .map_err(|e| DriverError::Infra(format!("cannot listen on {addr}: {e}")))
}

/// The port `listener` is bound to.
fn listener_port(listener: &TcpListener) -> Result<u16, DriverError> {
    listener
        .local_addr()
        .map(|a| a.port())
        .map_err(|e| DriverError::Infra(format!("a function's socket has no address: {e}")))
}

fn human_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
