//! The warm pool: per runtime, a few runtime wrappers started ahead in
//! jails of their own, with the interpreter and the wrapper loaded but no
//! function (the wrapper's `--pool` mode). A deploy or a job takes one and
//! *specialises* it: shows it the build read-only at `/sless/function`
//! (mounted into the running jail), sets the jail's memory limit to the
//! function's, and writes it one line that holds the environment a
//! process started for the function would have had. The pool starts
//! another in the background.
//!
//! A pooled process runs as a uid of its own, from `WarmPool::uids`
//! (not its namespace's, which is not known when it starts), serves one
//! function or job and ends with it: it is never handed to another.
//! One that dies while it waits is replaced. Go has no pool: its cold
//! start is its binary's start. Without the sandbox there is no pool
//! (nothing can be shown to a plain process after it started).

use std::collections::VecDeque;
use std::net::{IpAddr, TcpListener};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicU32, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sless_domain::Runtime;
use sless_sandbox::{Identity, Mount};
use tokio::io::AsyncWriteExt;
use tokio::process::ChildStdin;
use tokio::sync::{Notify, oneshot};
use tokio::time::Instant;

use super::jails::Jails;
use super::process::{self, Running, Spawner};
use super::sandbox::{self, Launch};
use super::{NODE_WRAPPER_RELATIVE, PYTHON_WRAPPER_RELATIVE};

/// The memory limit of a pooled process until it is specialised: the
/// largest a function may have, as a limit that is a resource limit can
/// only be lowered.
const WAITING_MEMORY_MB: u32 = sless_domain::spec::MEMORY_MB_RANGE.1;
/// How long the pool waits after a process was taken before it starts
/// another, so the start does not compete with the specialisation.
const REFILL_DELAY: Duration = Duration::from_millis(250);
/// The longest wait between starts while pooled processes keep dying.
const MAX_REFILL_BACKOFF: Duration = Duration::from_secs(30);
/// A pooled process that dies sooner than this after its start counts
/// toward the backoff.
const DIED_YOUNG: Duration = Duration::from_secs(5);

/// How many processes the pool keeps ready, and who they run as.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WarmPool {
    /// python3.11 (`SLESS_WARM_POOL_PYTHON311`).
    pub python: u32,
    /// nodejs20 (`SLESS_WARM_POOL_NODEJS20`).
    pub node: u32,
    /// The uids of pooled processes: the first and how many, each taken
    /// in turn; `None`: `nobody`.
    pub uids: Option<(u32, u32)>,
}

impl Default for WarmPool {
    /// No pool.
    fn default() -> Self {
        WarmPool {
            python: 0,
            node: 0,
            uids: None,
        }
    }
}

impl WarmPool {
    fn size(&self, runtime: Runtime) -> u32 {
        match runtime {
            Runtime::Python311 => self.python,
            Runtime::Nodejs20 => self.node,
            Runtime::Go123 => 0,
        }
    }
}

/// Whether a variable of a function's environment only takes effect when
/// the interpreter starts (a pooled one has started already): a function
/// that sets one starts cold.
pub(crate) fn read_at_start(runtime: Runtime, name: &str) -> bool {
    name == "LANG"
        || name.starts_with("LC_")
        || match runtime {
            Runtime::Python311 => name.starts_with("PYTHON"),
            Runtime::Nodejs20 => name.starts_with("NODE_") && name != "NODE_ENV",
            Runtime::Go123 => true,
        }
}

/// A started process waiting for its function.
pub(crate) struct Warm {
    running: Running,
    stdin: ChildStdin,
    /// The socket it was started with (see [`Launch::listener`]): the one
    /// it serves on if a function takes it.
    listener: Arc<TcpListener>,
}

/// What a specialised process is given.
pub(crate) struct Specialisation<'a> {
    /// The build, shown at `/sless/function`.
    pub artifact_dir: &'a Path,
    /// How a process of its own would have been started: its environment
    /// is what the pooled one gets.
    pub spec: &'a Launch,
    pub memory_mb: u32,
    /// A job's event (the process runs in job mode and reads it from
    /// stdin), with the CPU time each of its processes may use.
    pub job: Option<(&'a [u8], u64)>,
}

impl Warm {
    /// The socket the process was started with, to serve a function on.
    pub(crate) fn listener(&self) -> Arc<TcpListener> {
        self.listener.clone()
    }

    /// Hands the process its function (see the module docs). Its output is
    /// not read yet: that is the caller's.
    pub(crate) async fn specialise(mut self, to: Specialisation<'_>) -> std::io::Result<Running> {
        let mut jail = self
            .running
            .jail
            .take()
            .ok_or_else(|| std::io::Error::other("a pooled process has no jail"))?;
        let source = to.artifact_dir.to_path_buf();
        let memory = u64::from(to.memory_mb) << 20;
        let cpu = to.job.map(|(_, secs)| secs);
        let jail = tokio::task::spawn_blocking(move || {
            jail.mount_read_only(&source, Path::new(sandbox::FUNCTION_DIR))?;
            jail.limit_memory(memory)?;
            if let Some(secs) = cpu {
                jail.limit_cpu_time(secs)?;
            }
            Ok::<_, sless_sandbox::SandboxError>(jail)
        })
        .await
        .map_err(std::io::Error::other)?
        .map_err(std::io::Error::other)?;
        self.running.jail = Some(jail);
        let mut env = serde_json::Map::new();
        for (k, v) in &to.spec.env {
            if to.job.is_some() && k == super::launch::EVENT_FILE_ENV {
                continue; // the event comes on stdin
            }
            env.insert(k.clone(), serde_json::Value::String(v.clone()));
        }
        let mut line = serde_json::to_vec(&serde_json::json!({
            "env": env,
            "job": to.job.is_some(),
        }))
        .map_err(std::io::Error::other)?;
        line.push(b'\n');
        if let Some((event, _)) = to.job {
            line.extend_from_slice(event);
        }
        // A large event is written while the wrapper reads it: the output
        // is not read meanwhile, and a job that prints much before it read
        // its whole event would wait; the wrapper reads the event first.
        self.stdin.write_all(&line).await?;
        self.stdin.shutdown().await?;
        drop(self.stdin);
        Ok(self.running)
    }
}

/// A process for `to`: `warm` specialised for it, and `true`; without one,
/// or when specialising it fails (logged, naming `what`), one `cold` starts,
/// and `false`.
pub(crate) async fn warm_or_cold(
    warm: Option<Warm>,
    to: Specialisation<'_>,
    what: &str,
    cold: impl AsyncFnOnce() -> std::io::Result<Running>,
) -> std::io::Result<(Running, bool)> {
    if let Some(warm) = warm {
        match warm.specialise(to).await {
            Ok(running) => return Ok((running, true)),
            Err(e) => tracing::warn!(
                "a process of the warm pool could not take {what} ({e}); starting one"
            ),
        }
    }
    Ok((cold().await?, false))
}

/// A waiting process's holder, asked for it with a reply channel.
type Slot = oneshot::Sender<oneshot::Sender<Warm>>;

struct RuntimePool {
    runtime: Runtime,
    target: usize,
    ready: Mutex<VecDeque<Slot>>,
    /// Processes started and not yet taken or dead.
    live: AtomicUsize,
    /// Deaths in a row of processes that died young.
    streak: AtomicU32,
    wake: Notify,
}

/// What starts pooled processes.
pub(crate) struct Maker {
    pub jails: Arc<Jails>,
    pub spawner: Arc<Spawner>,
    pub runtimes_dir: PathBuf,
    /// An empty directory, at `/sless/function` until the build is shown there.
    pub empty: PathBuf,
    /// Where the sockets pooled processes are started with listen (see
    /// `LocalDriverConfig::advertise`).
    pub advertise: IpAddr,
}

/// Who pooled processes run as, each taken in turn.
struct Uids {
    range: Option<(u32, u32)>,
    next: AtomicU32,
}

struct Shared {
    maker: Maker,
    uids: Uids,
    runtimes: Vec<RuntimePool>,
    closed: AtomicBool,
}

/// The warm pool of a local driver (see the module docs).
pub(crate) struct Pool {
    shared: Arc<Shared>,
}

impl Pool {
    /// A pool of `sizes` whose processes `maker` starts, filling at once,
    /// in the background. No runtime of tokio, or all sizes 0: an empty
    /// pool.
    pub(crate) fn start(sizes: &WarmPool, maker: Maker) -> Pool {
        let runtimes = [Runtime::Python311, Runtime::Nodejs20]
            .into_iter()
            .filter(|r| sizes.size(*r) > 0)
            .map(|runtime| RuntimePool {
                runtime,
                target: sizes.size(runtime) as usize,
                ready: Mutex::new(VecDeque::new()),
                live: AtomicUsize::new(0),
                streak: AtomicU32::new(0),
                wake: Notify::new(),
            })
            .collect::<Vec<_>>();
        let offset = sizes
            .uids
            .map_or(0, |(_, count)| rand::random::<u32>() % count.max(1));
        let shared = Arc::new(Shared {
            maker,
            uids: Uids {
                range: sizes.uids,
                next: AtomicU32::new(offset),
            },
            runtimes,
            closed: AtomicBool::new(false),
        });
        match tokio::runtime::Handle::try_current() {
            Ok(handle) => {
                for i in 0..shared.runtimes.len() {
                    handle.spawn(refill(shared.clone(), i));
                }
            }
            Err(_) if !shared.runtimes.is_empty() => {
                tracing::warn!("the warm pool needs a tokio runtime; functions start cold");
            }
            Err(_) => {}
        }
        Pool { shared }
    }

    /// A waiting process of `runtime`, if one is ready.
    pub(crate) async fn take(&self, runtime: Runtime) -> Option<Warm> {
        let pool = self.shared.runtimes.iter().find(|p| p.runtime == runtime)?;
        loop {
            let slot = pool.ready.lock().unwrap().pop_front()?;
            let (reply, answer) = oneshot::channel();
            if slot.send(reply).is_err() {
                continue; // it died meanwhile
            }
            if let Ok(warm) = answer.await {
                return Some(warm);
            }
        }
    }

    /// How many processes of `runtime` wait now.
    pub(crate) fn waiting(&self, runtime: Runtime) -> usize {
        self.shared
            .runtimes
            .iter()
            .find(|p| p.runtime == runtime)
            .map_or(0, |p| p.live.load(Ordering::SeqCst))
    }

    /// Ends every waiting process and starts no more.
    pub(crate) fn close(&self) {
        self.shared.closed.store(true, Ordering::SeqCst);
        for pool in &self.shared.runtimes {
            pool.ready.lock().unwrap().clear();
            pool.wake.notify_one();
        }
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.close();
    }
}

impl Uids {
    fn take(&self) -> Identity {
        match self.range {
            None => Identity::NOBODY,
            Some((first, count)) => {
                let n = self.next.fetch_add(1, Ordering::Relaxed) % count.max(1);
                Identity {
                    uid: first + n,
                    gid: first + n,
                }
            }
        }
    }
}

impl Maker {
    /// How a pooled process of `runtime` starts, as `identity`, with the
    /// socket it would serve a function on.
    fn launch(&self, runtime: Runtime, identity: Identity, listener: Arc<TcpListener>) -> Launch {
        let jails = &self.jails;
        let (program, wrapper) = match runtime {
            Runtime::Nodejs20 => (jails.toolchain.node.clone(), NODE_WRAPPER_RELATIVE),
            _ => (jails.toolchain.python.clone(), PYTHON_WRAPPER_RELATIVE),
        };
        let mounts = vec![
            Mount::ReadOnly {
                source: self.empty.clone(),
                dest: PathBuf::from(sandbox::FUNCTION_DIR),
            },
            Mount::ReadOnly {
                source: self.runtimes_dir.clone(),
                dest: PathBuf::from(sandbox::RUNTIME_DIR),
            },
        ];
        let label = format!("pool-{runtime}");
        Launch {
            program,
            args: vec![
                Path::new(sandbox::RUNTIME_DIR)
                    .join(wrapper)
                    .into_os_string(),
                "--pool".into(),
            ],
            env: {
                let mut env = super::jails::jailed_env(jails);
                if runtime == Runtime::Python311 {
                    env.extend(super::jails::python_env());
                }
                env
            },
            cwd: PathBuf::from("/tmp"),
            jail: Some(jails.parts(identity, mounts, WAITING_MEMORY_MB, label)),
            listener: Some(listener),
        }
    }
}

/// Keeps `shared.runtimes[i]` at its size while the pool is open.
async fn refill(shared: Arc<Shared>, i: usize) {
    let pool = &shared.runtimes[i];
    loop {
        while !shared.closed.load(Ordering::SeqCst)
            && pool.live.load(Ordering::SeqCst) < pool.target
        {
            if let Err(e) = start_one(&shared, i).await {
                tracing::warn!(runtime = %pool.runtime, "the warm pool could not start a process: {e}");
                pool.streak.fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(backoff(pool)).await;
            }
        }
        pool.wake.notified().await;
        if shared.closed.load(Ordering::SeqCst) {
            return;
        }
        tokio::time::sleep(backoff(pool)).await;
    }
}

fn backoff(pool: &RuntimePool) -> Duration {
    let streak = pool.streak.load(Ordering::SeqCst).min(7);
    (REFILL_DELAY * 2u32.pow(streak)).min(MAX_REFILL_BACKOFF)
}

async fn start_one(shared: &Arc<Shared>, i: usize) -> std::io::Result<()> {
    let pool = &shared.runtimes[i];
    let listener =
        Arc::new(super::launch::listen_on(shared.maker.advertise).map_err(std::io::Error::other)?);
    let launch = shared
        .maker
        .launch(pool.runtime, shared.uids.take(), listener.clone());
    let mut running = process::spawn(&shared.maker.spawner, &launch, Stdio::piped()).await?;
    let stdin = running
        .child
        .stdin
        .take()
        .ok_or_else(|| std::io::Error::other("no stdin"))?;
    let (slot, asked) = oneshot::channel();
    pool.live.fetch_add(1, Ordering::SeqCst);
    pool.ready.lock().unwrap().push_back(slot);
    let warm = Warm {
        running,
        stdin,
        listener,
    };
    tokio::spawn(hold(shared.clone(), i, warm, asked));
    Ok(())
}

/// Keeps a waiting process until it is asked for, dies, or the pool closes.
async fn hold(
    shared: Arc<Shared>,
    i: usize,
    mut warm: Warm,
    asked: oneshot::Receiver<oneshot::Sender<Warm>>,
) {
    let pool = &shared.runtimes[i];
    let started = Instant::now();
    let outcome = tokio::select! {
        status = warm.running.child.wait() => Err(Some(status)),
        asked = asked => asked.map_err(|_| None),
    };
    pool.live.fetch_sub(1, Ordering::SeqCst);
    match outcome {
        Ok(reply) => {
            pool.streak.store(0, Ordering::SeqCst);
            // Should the asker be gone, the process ends here (dropped).
            let _ = reply.send(warm);
        }
        Err(Some(status)) => {
            let how = match &status {
                Ok(status) => warm.running.describe(status),
                Err(e) => format!("could not be waited for ({e})"),
            };
            tracing::warn!(runtime = %pool.runtime, "a waiting process of the warm pool {how}; starting another");
            process::end_all(&warm.running);
            if started.elapsed() < DIED_YOUNG {
                pool.streak.fetch_add(1, Ordering::SeqCst);
            }
        }
        Err(None) => {} // the pool closed: dropping it ends the jail
    }
    pool.wake.notify_one();
}
