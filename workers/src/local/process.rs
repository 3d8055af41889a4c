//! Function processes: spawning them from a long-lived thread, capturing
//! their output, supervising (restart with backoff) and stopping them.

use std::collections::{BTreeMap, VecDeque};
use std::io::{self, Write};
use std::process::{ExitStatus, Stdio};
use std::sync::mpsc as std_mpsc;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, AsyncRead, AsyncReadExt, BufReader};
use tokio::process::Child;
use tokio::runtime::Handle;
use tokio::sync::{mpsc, oneshot, watch};
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::sandbox::{self, Launch};
use crate::crashes::Crash;
use crate::driver::Artifact;
use crate::logs::{Shipper, Source};
use sless_domain::{CrashCause, FunctionKey};
use sless_store::function_logs::{self, Stream};

/// How many lines of a function's output are kept in memory.
const RING_LINES: usize = 50;
/// The most bytes of a line read: what the function log keeps, and room
/// for the runtime wrapper's mark of the call.
const MAX_LINE_BYTES: u64 = function_logs::LINE_LIMIT as u64 + 64;
/// How long a process gets between SIGTERM and SIGKILL.
pub(crate) const STOP_GRACE: Duration = Duration::from_secs(5);
const INITIAL_BACKOFF: Duration = Duration::from_millis(250);
const MAX_BACKOFF: Duration = Duration::from_secs(30);
/// A process that stayed up this long restarts with the initial backoff again.
const STABLE_AFTER: Duration = Duration::from_secs(60);

/// The variables of the worker's environment `from` (what the binary passed
/// in [`LocalDriverConfig::env`](super::LocalDriverConfig::env)) that function
/// processes and build tools may see, plus those starting with one of
/// `prefixes` (e.g. `PIP_` for pip); everything else (database URLs,
/// credentials, ...) is withheld.
pub(crate) fn inherited_env(from: &[(String, String)], prefixes: &[&str]) -> Vec<(String, String)> {
    const EXACT: &[&str] = &[
        "PATH",
        "HOME",
        "USER",
        "LOGNAME",
        "LANG",
        "LANGUAGE",
        "TZ",
        "TMPDIR",
        "SSL_CERT_FILE",
        "SSL_CERT_DIR",
        "HTTP_PROXY",
        "HTTPS_PROXY",
        "NO_PROXY",
        "http_proxy",
        "https_proxy",
        "no_proxy",
    ];
    from.iter()
        .filter(|(k, _)| {
            EXACT.contains(&k.as_str())
                || k.starts_with("LC_")
                || k.starts_with("PYENV_")
                || prefixes.iter().any(|p| k.starts_with(p))
        })
        .cloned()
        .collect()
}

/// Sends SIGTERM/SIGKILL to the process group led by `pid`.
pub(crate) fn signal_group(pid: u32, signal: libc::c_int) {
    let Ok(pid) = i32::try_from(pid) else { return };
    if pid <= 0 {
        return;
    }
    // SAFETY: kill(2) with a negative pid signals a process group; it has no
    // memory-safety preconditions.
    unsafe {
        libc::kill(-pid, signal);
    }
}

/// How a process ended: its exit code, or the signal that killed it. A
/// jail's bwrap reports a program killed by signal N as exit code 128 + N
/// (as shells do), which is read back as the signal.
pub(crate) fn exit_parts(status: &ExitStatus, jailed: bool) -> (Option<i32>, Option<i32>) {
    use std::os::unix::process::ExitStatusExt;
    match (status.code(), status.signal()) {
        (Some(code), _) if jailed && (129..=128 + 64).contains(&code) => (None, Some(code - 128)),
        (code, signal) => (code, signal),
    }
}

/// Describes an exit status for people.
pub(crate) fn describe_exit(status: &ExitStatus, jailed: bool) -> String {
    match exit_parts(status, jailed) {
        (Some(code), _) => format!("exited with code {code}"),
        (None, Some(sig)) => format!("was killed by signal {sig}"),
        _ => format!("ended ({status})"),
    }
}

/// Spawns processes from one dedicated thread that lives as long as the
/// driver, so that `PR_SET_PDEATHSIG` (which fires when the *spawning
/// thread* exits) only fires when the driver itself goes away.
pub(crate) struct Spawner {
    tx: std_mpsc::Sender<SpawnJob>,
}

struct SpawnJob {
    cmd: std::process::Command,
    kill_on_drop: bool,
    handle: Handle,
    reply: oneshot::Sender<io::Result<Child>>,
}

impl Spawner {
    pub(crate) fn new() -> io::Result<Spawner> {
        let (tx, rx) = std_mpsc::channel::<SpawnJob>();
        std::thread::Builder::new()
            .name("sless-local-spawner".into())
            .spawn(move || {
                for job in rx {
                    let _runtime = job.handle.enter();
                    let mut cmd = tokio::process::Command::from(job.cmd);
                    cmd.kill_on_drop(job.kill_on_drop);
                    // If the requester is gone the child is dropped here and
                    // killed (kill_on_drop).
                    let _ = job.reply.send(cmd.spawn());
                }
            })?;
        Ok(Spawner { tx })
    }

    /// Spawns `cmd` from the spawner's thread (killed when the child is
    /// dropped, if `kill_on_drop`).
    pub(crate) async fn spawn(
        &self,
        cmd: std::process::Command,
        kill_on_drop: bool,
    ) -> io::Result<Child> {
        let (reply, rx) = oneshot::channel();
        let job = SpawnJob {
            cmd,
            kill_on_drop,
            handle: Handle::current(),
            reply,
        };
        self.tx
            .send(job)
            .map_err(|_| io::Error::other("the process spawner thread is gone"))?;
        rx.await
            .map_err(|_| io::Error::other("the process spawner thread is gone"))?
    }
}

/// Output of a function: appended to its log file, kept as a ring of
/// the last lines for error reports, and shipped to the function's log
/// (`crate::logs`) when the driver keeps one.
pub(crate) struct LogSink {
    file: Mutex<Option<std::fs::File>>,
    ring: Mutex<VecDeque<String>>,
    ship: Option<(Shipper, Source)>,
}

impl LogSink {
    pub(crate) fn open(path: &std::path::Path) -> io::Result<LogSink> {
        if let Some(dir) = path.parent() {
            std::fs::create_dir_all(dir)?;
        }
        let file = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(path)?;
        Ok(LogSink {
            file: Mutex::new(Some(file)),
            ring: Mutex::new(VecDeque::with_capacity(RING_LINES)),
            ship: None,
        })
    }

    /// Also ships every line to `shipper`, as `source`'s.
    pub(crate) fn shipping(mut self, ship: Option<(Shipper, Source)>) -> LogSink {
        self.ship = ship;
        self
    }

    /// A line sless writes itself (a restart, say): kept here, not shipped.
    pub(crate) fn push(&self, line: &str) {
        let line = line.trim_end_matches(['\n', '\r']);
        if let Some(file) = self.file.lock().unwrap().as_mut() {
            // One write per line: the instances of a version append to
            // the same file, and their lines must not interleave. Losing a
            // log line is better than failing the function.
            let _ = file.write_all(format!("{line}\n").as_bytes());
        }
        let mut ring = self.ring.lock().unwrap();
        if ring.len() == RING_LINES {
            ring.pop_front();
        }
        ring.push_back(line.to_owned());
    }

    /// A line the process wrote on `stream` (`cut`: it went on past what
    /// was read, and the rest was skipped).
    fn printed(&self, stream: Stream, raw: &str, cut: bool) {
        match &self.ship {
            Some((shipper, source)) => {
                let line = source.line(stream, raw, cut);
                self.push(&line.line);
                shipper.push(line);
            }
            None => self.push(crate::logs::unmark(raw).1),
        }
    }

    /// The last captured lines, oldest first.
    pub(crate) fn tail(&self) -> String {
        let ring = self.ring.lock().unwrap();
        ring.iter()
            .map(String::as_str)
            .collect::<Vec<_>>()
            .join("\n")
    }
}

/// Reads `reader` a line at a time into `sink`. A line longer than
/// [`MAX_LINE_BYTES`] is cut there and the rest of it skipped.
async fn pump<R: AsyncRead + Unpin>(reader: R, sink: Arc<LogSink>, stream: Stream) {
    let mut reader = BufReader::new(reader);
    let mut buf = Vec::new();
    loop {
        buf.clear();
        match (&mut reader)
            .take(MAX_LINE_BYTES)
            .read_until(b'\n', &mut buf)
            .await
        {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                let cut = n as u64 == MAX_LINE_BYTES && buf.last() != Some(&b'\n');
                sink.printed(stream, &String::from_utf8_lossy(&buf), cut);
                if cut && !skip_line(&mut reader).await {
                    break;
                }
            }
        }
    }
}

/// Reads past the rest of a line; false at the end of the output.
async fn skip_line<R: AsyncRead + Unpin>(reader: &mut BufReader<R>) -> bool {
    loop {
        let (done, used) = match reader.fill_buf().await {
            Ok([]) | Err(_) => return false,
            Ok(bytes) => match bytes.iter().position(|b| *b == b'\n') {
                Some(i) => (true, i + 1),
                None => (false, bytes.len()),
            },
        };
        reader.consume(used);
        if done {
            return true;
        }
    }
}

/// A started process and the tasks reading its output.
pub(crate) struct Running {
    pub child: Child,
    pub pid: u32,
    /// Its jail, when it has one.
    pub jail: Option<sless_sandbox::Sandboxed>,
    pumps: Vec<JoinHandle<()>>,
}

impl Running {
    /// How it ended, for people.
    pub(crate) fn describe(&self, status: &ExitStatus) -> String {
        let what = describe_exit(status, self.jail.is_some());
        if self.out_of_memory() {
            format!("{what}: out of memory")
        } else {
            what
        }
    }

    /// Whether the kernel killed something in its jail for memory.
    pub(crate) fn out_of_memory(&self) -> bool {
        self.jail
            .as_ref()
            .and_then(|j| j.cgroup.as_ref())
            .is_some_and(|g| g.oom_kills() > 0)
    }
}

impl Running {
    /// Waits (briefly) until the output of an exited process has been read.
    pub(crate) async fn drain_output(&mut self) {
        let deadline = Instant::now() + Duration::from_secs(2);
        for pump in self.pumps.drain(..) {
            let _ = tokio::time::timeout_at(deadline, pump).await;
        }
    }
}

/// Starts the runtime wrapper for `spec`, dying with the spawner thread,
/// its output going to `sink`.
pub(crate) async fn start(
    spawner: &Spawner,
    spec: &Launch,
    sink: &Arc<LogSink>,
) -> io::Result<Running> {
    let mut running = spawn(spawner, spec, Stdio::null()).await?;
    read_output(&mut running, sink);
    Ok(running)
}

/// Sends what the process prints to `sink` from now on.
pub(crate) fn read_output(running: &mut Running, sink: &Arc<LogSink>) {
    if let Some(out) = running.child.stdout.take() {
        running
            .pumps
            .push(tokio::spawn(pump(out, sink.clone(), Stream::Stdout)));
    }
    if let Some(err) = running.child.stderr.take() {
        running
            .pumps
            .push(tokio::spawn(pump(err, sink.clone(), Stream::Stderr)));
    }
}

/// Spawns `spec` (in its jail, or in a process group of its own) with
/// `stdin`, stdout and stderr piped, killed when the spawner thread (the
/// driver) goes away or when the returned [`Running`] is dropped. A jail is
/// started (its network set up) before this returns.
pub(crate) async fn spawn(spawner: &Spawner, spec: &Launch, stdin: Stdio) -> io::Result<Running> {
    let sandbox::Command {
        mut command,
        pending,
    } = spec.command().map_err(io::Error::other)?;
    command
        .stdin(stdin)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    // A jail's process is its keeper, which must never be SIGKILLed: the
    // jail's own handle ends it (see `sless_sandbox::Sandboxed::kill`).
    let spawned = spawner.spawn(command, pending.is_none()).await;
    let pid = spawned.as_ref().ok().and_then(Child::id);
    let jail = pending.map(|p| p.spawned(pid));
    let child = spawned?;
    let jail = match jail {
        // bwrap says its pid at once; reading it now keeps it for stopping.
        Some(mut jail) => tokio::task::spawn_blocking(move || {
            let started = jail.start();
            jail.sandbox_pid();
            started.map(|()| jail)
        })
        .await
        .map_err(io::Error::other)?
        .map(Some)
        .map_err(io::Error::other)?,
        None => None,
    };
    Ok(Running {
        child,
        pid: pid.unwrap_or(0),
        jail,
        pumps: Vec::with_capacity(2),
    })
}

/// Stops a process: SIGTERM, SIGKILL after `grace`. A jail's program
/// gets the SIGTERM; when it ends (or the jail is killed) its jail ends with
/// everything in it. A plain process's whole group gets both.
pub(crate) async fn terminate(running: &mut Running, grace: Duration) {
    if running.child.id().is_none() {
        return; // already reaped
    }
    match running.jail.as_mut() {
        Some(jail) => {
            if let Some(program) = jail.program_pid() {
                signal(program, libc::SIGTERM);
            }
        }
        None => signal_group(running.pid, libc::SIGTERM),
    }
    if tokio::time::timeout(grace, running.child.wait())
        .await
        .is_err()
    {
        tracing::warn!(
            pid = running.pid,
            signalled = running
                .jail
                .as_mut()
                .is_none_or(|j| j.program_pid().is_some()),
            "a process did not stop within {grace:?} of SIGTERM; killed"
        );
        kill(running);
        let _ = running.child.wait().await;
    }
    end_all(running);
}

/// Kills a process now: a jail through its keeper (everything in it, at
/// whatever stage its setup is), a plain process with its whole group.
pub(crate) fn kill(running: &mut Running) {
    match running.jail.as_mut() {
        Some(jail) => jail.kill(),
        None => {
            let _ = running.child.start_kill();
            signal_group(running.pid, libc::SIGKILL);
        }
    }
}

/// Kills whatever is left of a process that has ended: the rest of its
/// group, or of its jail's cgroup (the PID namespace already took the rest
/// with it; this is the second line).
pub(crate) fn end_all(running: &Running) {
    match running.jail.as_ref().and_then(|j| j.cgroup.as_ref()) {
        Some(group) => group.kill_all(),
        None if running.jail.is_some() => {}
        None => signal_group(running.pid, libc::SIGKILL),
    }
}

/// Sends `sig` to one process.
fn signal(pid: u32, sig: libc::c_int) {
    let Ok(pid) = i32::try_from(pid) else { return };
    if pid > 0 {
        // SAFETY: kill(2) has no memory-safety preconditions.
        unsafe {
            libc::kill(pid, sig);
        }
    }
}

#[derive(Default)]
struct InstanceState {
    pid: Option<u32>,
    restarts: u32,
}

/// One instance of a deployed function: the running process, how to
/// restart it and what it was deployed from.
pub(crate) struct Instance {
    pub key: FunctionKey,
    pub version: u32,
    pub artifact: Artifact,
    /// Where it serves, e.g. `http://127.0.0.1:41234` (its port is sless's
    /// for as long as the instance lives, restarts included).
    pub endpoint: String,
    /// When it was deployed (became healthy).
    pub deployed_at: Instant,
    pub port: u16,
    pub entrypoint: String,
    pub env_vars: BTreeMap<String, String>,
    memory_mb: u32,
    spec: Launch,
    sink: Arc<LogSink>,
    crashes: mpsc::UnboundedSender<Crash>,
    state: Mutex<InstanceState>,
    stop_tx: watch::Sender<bool>,
    task: Mutex<Option<JoinHandle<()>>>,
}

/// What an [`Instance`] is made of, apart from its process.
pub(crate) struct InstanceParts {
    pub key: FunctionKey,
    pub version: u32,
    pub artifact: Artifact,
    pub endpoint: String,
    pub port: u16,
    pub entrypoint: String,
    pub env_vars: BTreeMap<String, String>,
    pub memory_mb: u32,
    pub spec: Launch,
    pub sink: Arc<LogSink>,
    /// Where crashes are reported.
    pub crashes: mpsc::UnboundedSender<Crash>,
}

impl Instance {
    /// Takes over a healthy process and supervises it from now on.
    pub(crate) fn supervise(
        parts: InstanceParts,
        running: Running,
        spawner: Arc<Spawner>,
    ) -> Arc<Instance> {
        let (stop_tx, stop_rx) = watch::channel(false);
        let inst = Arc::new(Instance {
            key: parts.key,
            version: parts.version,
            artifact: parts.artifact,
            endpoint: parts.endpoint,
            deployed_at: Instant::now(),
            port: parts.port,
            entrypoint: parts.entrypoint,
            env_vars: parts.env_vars,
            memory_mb: parts.memory_mb,
            spec: parts.spec,
            sink: parts.sink,
            crashes: parts.crashes,
            state: Mutex::new(InstanceState {
                pid: Some(running.pid),
                restarts: 0,
            }),
            stop_tx,
            task: Mutex::new(None),
        });
        let task = tokio::spawn(inst.clone().supervisor(running, spawner, stop_rx));
        *inst.task.lock().unwrap() = Some(task);
        inst
    }

    /// The pid of the process while it runs.
    pub(crate) fn pid(&self) -> Option<u32> {
        self.state.lock().unwrap().pid
    }

    /// How the process is started.
    pub(crate) fn spec(&self) -> &Launch {
        &self.spec
    }

    /// How often the process was restarted after it died.
    pub(crate) fn restarts(&self) -> u32 {
        self.state.lock().unwrap().restarts
    }

    /// Tells the supervisor to stop the process (returns at once).
    pub(crate) fn signal_stop(&self) {
        self.stop_tx.send_replace(true);
    }

    /// Stops the process and waits until it is gone.
    pub(crate) async fn stop(&self) {
        self.signal_stop();
        let task = self.task.lock().unwrap().take();
        if let Some(task) = task {
            let _ = task.await;
        }
    }

    fn set_pid(&self, pid: Option<u32>) {
        self.state.lock().unwrap().pid = pid;
    }

    async fn supervisor(
        self: Arc<Self>,
        mut running: Running,
        spawner: Arc<Spawner>,
        mut stop_rx: watch::Receiver<bool>,
    ) {
        let mut started = Instant::now();
        let mut backoff = INITIAL_BACKOFF;
        loop {
            let status = tokio::select! {
                status = running.child.wait() => status,
                () = stop_requested(&mut stop_rx) => {
                    terminate(&mut running, STOP_GRACE).await;
                    self.set_pid(None);
                    return;
                }
            };
            end_all(&running);
            self.set_pid(None);
            if *stop_rx.borrow() {
                return;
            }
            let what = match &status {
                Ok(status) => running.describe(status),
                Err(e) => format!("could not be waited for ({e})"),
            };
            if started.elapsed() >= STABLE_AFTER {
                backoff = INITIAL_BACKOFF;
            }
            self.report(&running, status.as_ref().ok(), backoff);
            let mut problem = format!("function process {what}");
            running = loop {
                tracing::warn!(
                    function = %self.key,
                    version = self.version,
                    "{problem}; restarting in {} ms",
                    backoff.as_millis()
                );
                self.sink.push(&format!(
                    "[sless] {problem}; restarting in {} ms",
                    backoff.as_millis()
                ));
                tokio::select! {
                    () = tokio::time::sleep(backoff) => {}
                    () = stop_requested(&mut stop_rx) => return,
                }
                backoff = (backoff * 2).min(MAX_BACKOFF);
                match start(&spawner, &self.spec, &self.sink).await {
                    Ok(new) => break new,
                    Err(e) => problem = format!("function process could not be started ({e})"),
                }
            };
            started = Instant::now();
            {
                let mut state = self.state.lock().unwrap();
                state.pid = Some(running.pid);
                state.restarts += 1;
            }
            // A stop may have been requested while we were starting.
            if *stop_rx.borrow() {
                terminate(&mut running, STOP_GRACE).await;
                self.set_pid(None);
                return;
            }
        }
    }
}

impl Instance {
    /// Reports a process that ended on its own (it is started again after
    /// `backoff`).
    fn report(&self, running: &Running, status: Option<&ExitStatus>, backoff: Duration) {
        let again = format!("started again in {} ms", backoff.as_millis());
        let jailed = running.jail.is_some();
        let (cause, detail) = if running.out_of_memory() {
            (
                CrashCause::Oom,
                format!(
                    "killed for using more memory than its memory_mb of {}; {again}",
                    self.memory_mb
                ),
            )
        } else {
            match status.map(|s| exit_parts(s, jailed)) {
                Some((Some(code), _)) => (
                    CrashCause::Exited,
                    format!("its process exited with code {code}; {again}"),
                ),
                Some((None, Some(sig))) => (
                    CrashCause::Killed,
                    format!("its process was killed by signal {sig}; {again}"),
                ),
                _ => (CrashCause::Killed, format!("its process ended; {again}")),
            }
        };
        let _ = self.crashes.send(Crash {
            key: self.key.clone(),
            version: self.version,
            cause,
            detail,
            memory_mb: (cause == CrashCause::Oom).then_some(self.memory_mb),
        });
    }
}

/// Resolves once a stop was requested (or nobody can request one any more).
async fn stop_requested(rx: &mut watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}
