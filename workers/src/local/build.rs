//! Builds: unpacking a build context into a directory and preparing what the
//! runtime needs to run it, cached by the sha256 of the context:
//!
//! - python3.11: `pip install -r requirements.txt --target deps/` when there
//!   is a `requirements.txt`;
//! - nodejs20: `npm ci --omit=dev` when there is a `package.json` and a
//!   lockfile, `npm install --omit=dev` when there is only a `package.json`,
//!   into `code/node_modules/`;
//! - go1.23: the wrapper compiled together with the user's package into
//!   `bin/function` (see [`go`]).
//!
//! What the steps print (stdout and stderr through one pipe, so in the
//! order it was written) and sless's own notes go, as they come, to the
//! build log on this machine (`logs/builds/{ns}/{name}/{sha}.log`, copied
//! into the finished build as `build.log`) and to the request's
//! `BuildLog`, which the reconciler records. A build found cached prints
//! nothing.

mod go;

use std::ffi::OsString;
use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use std::os::fd::OwnedFd;

use flate2::read::GzDecoder;
use sless_domain::Runtime;
use sless_sandbox::{Identity, Limits, Mount};
use tar::{Archive, EntryType};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use super::Jails;
use super::process::{Spawner, describe_exit, inherited_env, signal_group};
use super::sandbox::{self, JailParts, Launch};
use crate::driver::{Artifact, BuildLog, BuildRequest, DriverError};

/// Marks a finished build directory.
pub(crate) const COMPLETE_MARKER: &str = ".complete";
/// The compiled function of a go1.23 build, relative to the build directory.
pub(crate) const GO_BINARY: &str = "bin/function";
/// The build log's copy in a finished build directory.
pub(crate) const BUILD_LOG: &str = "build.log";
/// How long one build step (`pip install`, `npm ci`, `go build`) may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);
/// How many lines of the build log a failed build reports.
const LOG_TAIL_LINES: usize = 40;
/// Temporary build directories older than this are leftovers of a crash.
const STALE_TMP_AGE: Duration = Duration::from_secs(30 * 60);
/// Marks temporary build directories (`{sha}.tmp-<random>`).
const TMP_INFIX: &str = ".tmp-";
/// The scratch directory of a build's steps (`TMPDIR`), removed after.
const SCRATCH: &str = ".tmp";
/// How long a step's output is still read after the step is gone (a
/// process it left behind outside a jail may hold the pipe open).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);
/// The build log's last line, once the build is in place.
const BUILD_COMPLETE: &str = "sless: build complete\n";

/// The programs builds run, and where their caches live.
#[derive(Debug, Clone)]
pub(crate) struct Toolchains {
    pub python: String,
    pub npm: String,
    /// The Go toolchain; `None` looks for `go` on `PATH`.
    pub go: Option<String>,
    /// `GOPATH` of Go builds (the module cache is below it).
    pub go_path: PathBuf,
    /// `GOCACHE` of Go builds.
    pub go_cache: PathBuf,
    /// npm's cache directory.
    pub npm_cache: PathBuf,
    /// The worker's environment, which steps take what they may see from
    /// ([`inherited_env`]).
    pub env: Vec<(String, String)>,
}

/// Where builds, their logs and (in jails) each namespace's caches live.
#[derive(Debug, Clone)]
pub(crate) struct BuildPaths {
    /// `builds/`: `{ns}/{name}/{sha}/`.
    pub builds: PathBuf,
    /// `logs/builds/`: `{ns}/{name}/{sha}.log`, the log of the last attempt.
    pub logs: PathBuf,
    /// `tenants/`: `{ns}/cache/` of jailed builds.
    pub tenants: PathBuf,
}

/// What runs a build's steps.
pub(crate) struct Builder<'a> {
    pub paths: &'a BuildPaths,
    pub tools: &'a Toolchains,
    pub spawner: &'a Arc<Spawner>,
    /// `None`: steps run as sless's own user (unsafe).
    pub jails: Option<&'a Jails>,
}

/// One build's directory, log and user: runs its steps.
pub(crate) struct Steps<'a> {
    builder: &'a Builder<'a>,
    /// The build directory on the host.
    dir: PathBuf,
    /// The build log on the host (outside `dir`: a step may replace
    /// anything inside it).
    log: PathBuf,
    /// The build's log as the reconciler records it: everything written to
    /// `log` goes here too, as it comes.
    out: BuildLog,
    /// In a jail: its user and the namespace's cache directory on the host.
    jail: Option<(Identity, PathBuf)>,
}

impl Steps<'_> {
    /// `relative` (below the build directory) as the steps see it.
    pub(crate) fn path(&self, relative: &str) -> PathBuf {
        match self.jail {
            Some(_) => Path::new(sandbox::BUILD_DIR).join(relative),
            None => self.dir.join(relative),
        }
    }

    /// `relative` below the namespace's cache, as the steps see it.
    pub(crate) fn cache(&self, relative: &str, unsafe_default: &Path) -> PathBuf {
        match self.jail {
            Some(_) => Path::new(sandbox::CACHE_DIR).join(relative),
            None => unsafe_default.to_path_buf(),
        }
    }

    /// A step: `program` in `cwd` (below the build directory) with the
    /// common environment, the worker's variables that start with one of
    /// `pass` (pip's, npm's, Go's proxy settings), then `env`. `roots` are
    /// more host directories the step must see (a Go toolchain's).
    pub(crate) fn step(
        &self,
        program: PathBuf,
        args: Vec<OsString>,
        cwd: &str,
        pass: &[&str],
        env: Vec<(String, String)>,
        roots: &[PathBuf],
    ) -> Launch {
        let mut all = match (self.jail.as_ref(), self.builder.jails) {
            (Some(_), Some(jails)) => {
                let mut path = jails.toolchain.path.clone();
                for root in roots {
                    path = format!("{}:{path}", root.join("bin").display());
                }
                let mut v = vec![
                    ("PATH".to_owned(), path),
                    ("HOME".to_owned(), format!("{}/home", sandbox::CACHE_DIR)),
                    ("LANG".to_owned(), "C.UTF-8".to_owned()),
                ];
                let env = &self.builder.tools.env;
                v.extend(
                    inherited_env(env, pass)
                        .into_iter()
                        .filter(|(k, _)| pass.iter().any(|p| k.starts_with(p))),
                );
                v
            }
            _ => inherited_env(&self.builder.tools.env, pass),
        };
        all.push((
            "TMPDIR".to_owned(),
            self.path(SCRATCH).to_string_lossy().into_owned(),
        ));
        all.extend(env);
        let jail = match (self.jail.as_ref(), self.builder.jails) {
            (Some((identity, cache)), Some(jails)) => {
                let mut mounts = vec![
                    Mount::ReadWrite {
                        source: self.dir.clone(),
                        dest: PathBuf::from(sandbox::BUILD_DIR),
                    },
                    Mount::ReadWrite {
                        source: cache.clone(),
                        dest: PathBuf::from(sandbox::CACHE_DIR),
                    },
                ];
                mounts.extend(roots.iter().map(|r| Mount::same_path(r.clone())));
                mounts.extend(jails.toolchain.mounts());
                let sizes = jails.sizes;
                Some(JailParts {
                    sandbox: jails.sandbox.clone(),
                    identity: *identity,
                    mounts,
                    limits: Limits {
                        memory_bytes: Some(u64::from(sizes.build_memory_mb) << 20),
                        processes: Some(u64::from(sizes.build_processes)),
                        file_bytes: Some(u64::from(sizes.file_mb) << 20),
                        cpu_secs: None,
                    },
                    tmp_bytes: u64::from(sizes.tmp_mb) << 20,
                    label: "build".to_owned(),
                    network: jails.build_network(),
                    owner: jails.owner.clone(),
                })
            }
            _ => None,
        };
        Launch {
            program,
            args,
            env: all,
            cwd: self.path(cwd),
            jail,
            listener: None,
        }
    }

    /// Runs one step (`what`, e.g. "pip install") with its output (stdout
    /// and stderr together) appended to the build log as it comes, killing
    /// it after [`STEP_TIMEOUT`].
    pub(crate) async fn run(&self, what: &str, launch: Launch) -> Result<(), DriverError> {
        let (ok, _) = self.spawn_and_wait(what, launch, false, None).await?;
        match ok {
            Ok(()) => Ok(()),
            Err(message) => Err(self.failed(message).await),
        }
    }

    /// Runs a step that answers on stdout (its stderr goes to the build
    /// log), with `input` on its stdin; the answer, or on failure the log's tail.
    pub(crate) async fn query(
        &self,
        what: &str,
        launch: Launch,
        input: Option<Vec<u8>>,
    ) -> Result<String, DriverError> {
        let (ok, stdout) = self.spawn_and_wait(what, launch, true, input).await?;
        match ok {
            Ok(()) => Ok(stdout),
            Err(message) => Err(self.failed(message).await),
        }
    }

    /// Copies what a step writes to its output pipe into the build log,
    /// file and [`BuildLog`], until every writer has closed it.
    async fn copy_output(&self, mut output: pipe::Receiver, mut file: tokio::fs::File) {
        let mut buf = vec![0u8; 16 * 1024];
        loop {
            match output.read(&mut buf).await {
                Ok(0) | Err(_) => break,
                Ok(n) => {
                    // The file is the log of the last attempt on this
                    // machine; losing a piece of it is not worth failing
                    // the build for.
                    let _ = file.write_all(&buf[..n]).await;
                    self.out.push(&buf[..n]);
                }
            }
        }
    }

    /// Spawns a step and waits for it: `Ok(Err(message))` when it failed.
    /// Its stderr, and its stdout unless it is the `answer` (returned),
    /// go to the build log through one pipe, in the order they were written.
    async fn spawn_and_wait(
        &self,
        what: &str,
        launch: Launch,
        answer: bool,
        input: Option<Vec<u8>>,
    ) -> Result<(Result<(), String>, String), DriverError> {
        let sandbox::Command {
            mut command,
            pending,
        } = launch.command()?;
        let file = tokio::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .await
            .map_err(|e| infra("opening the build log", e))?;
        let pipe_error = |e| infra("making the build log's pipe", e);
        let (reader, writer) = io::pipe().map_err(pipe_error)?;
        let output = pipe::Receiver::from_owned_fd(OwnedFd::from(reader)).map_err(pipe_error)?;
        command
            .stdin(if input.is_some() {
                Stdio::piped()
            } else {
                Stdio::null()
            })
            .stderr(Stdio::from(writer.try_clone().map_err(pipe_error)?));
        if answer {
            command.stdout(Stdio::piped());
            drop(writer);
        } else {
            command.stdout(Stdio::from(writer));
        }
        // The command, and with it this process's ends of the pipe, is
        // dropped once the step is spawned: the pipe ends when the step's
        // processes are gone.
        let program = launch.program.to_string_lossy().into_owned();
        // A jail's process is its keeper, never to be SIGKILLed: the jail's
        // handle ends it (dropped below, or at a timeout).
        let spawned = self.builder.spawner.spawn(command, pending.is_none()).await;
        let pid = spawned.as_ref().ok().and_then(tokio::process::Child::id);
        let jail = pending.map(|p| p.spawned(pid));
        let mut child =
            spawned.map_err(|e| infra(&format!("cannot run {program} for {what}"), e))?;
        let pid = pid.unwrap_or(0);
        let mut jail = match jail {
            Some(mut jail) => Some(
                tokio::task::spawn_blocking(move || jail.start().map(|()| jail))
                    .await
                    .map_err(|e| infra(&format!("starting {what}"), std::io::Error::other(e)))?
                    .map_err(|e| infra(&format!("starting {what}"), std::io::Error::other(e)))?,
            ),
            None => None,
        };
        if let (Some(mut stdin), Some(input)) = (child.stdin.take(), input) {
            let _ = stdin.write_all(&input).await;
        }
        let mut out = String::new();
        let stdout = child.stdout.take();
        let reading = async {
            if let Some(mut o) = stdout {
                let mut bytes = Vec::new();
                let _ = o.read_to_end(&mut bytes).await;
                out = String::from_utf8_lossy(&bytes).into_owned();
            }
        };
        let copying = self.copy_output(output, file);
        tokio::pin!(copying);
        let mut copied = false;
        let waited = tokio::time::timeout(STEP_TIMEOUT, async {
            let step = async {
                reading.await;
                child.wait().await
            };
            tokio::pin!(step);
            loop {
                tokio::select! {
                    ended = &mut step => break ended,
                    () = &mut copying, if !copied => copied = true,
                }
            }
        })
        .await;
        let jailed = jail.is_some();
        let oom = jail
            .as_ref()
            .and_then(|j| j.cgroup.as_ref())
            .is_some_and(|g| g.oom_kills() > 0);
        let result = match waited {
            Ok(Ok(status)) if status.success() => Ok(()),
            Ok(Ok(_)) if oom => Err(format!(
                "{what} ran out of memory (a build step may use {} MiB)",
                self.builder.jails.map_or(0, |j| j.sizes.build_memory_mb)
            )),
            Ok(Ok(status)) => match status.code().filter(|c| !jailed || *c <= 128) {
                Some(code) => Err(format!("{what} failed (exit {code})")),
                None => Err(format!(
                    "{what} failed: it {}",
                    describe_exit(&status, jailed)
                )),
            },
            Ok(Err(e)) => return Err(infra(&format!("waiting for {what}"), e)),
            Err(_) => {
                match jail.as_mut() {
                    Some(jail) => jail.kill(),
                    None => signal_group(pid, libc::SIGKILL),
                }
                let _ = child.wait().await;
                Err(format!(
                    "{what} timed out after {} s",
                    STEP_TIMEOUT.as_secs()
                ))
            }
        };
        drop(jail);
        if !copied {
            // What the step wrote last; a process it left behind (outside
            // a jail) may hold the pipe open.
            let _ = tokio::time::timeout(DRAIN_TIMEOUT, &mut copying).await;
        }
        Ok((result, out))
    }

    /// A failed build step, with the tail of the build log.
    async fn failed(&self, message: String) -> DriverError {
        let log_path = self.log.clone();
        let log_tail = tokio::task::spawn_blocking(move || tail_of(&log_path, LOG_TAIL_LINES))
            .await
            .unwrap_or_default();
        DriverError::Build { message, log_tail }
    }

    /// Appends a line of sless's own to the build log.
    pub(crate) async fn note(&self, text: String) -> Result<(), DriverError> {
        self.out.push(text.as_bytes());
        let log = self.log.clone();
        tokio::task::spawn_blocking(move || append_log(&log, &text))
            .await
            .map_err(|e| infra("build task", e))?
            .map_err(|e| infra("writing the build log", e))
    }

    /// Writes a file below the build directory once steps may have run in
    /// it: as the steps' user (in a step), never following what they left.
    pub(crate) async fn write(&self, relative: &str, contents: Vec<u8>) -> Result<(), DriverError> {
        if self.jail.is_none() {
            let path = self.dir.join(relative);
            return tokio::task::spawn_blocking(move || {
                if let Some(dir) = path.parent() {
                    std::fs::create_dir_all(dir)?;
                }
                std::fs::write(&path, contents)
            })
            .await
            .map_err(|e| infra("build task", e))?
            .map_err(|e| infra("writing a build file", e));
        }
        let target = self.path(relative);
        let step = self.step(
            PathBuf::from("/bin/sh"),
            vec![
                "-c".into(),
                "mkdir -p \"$(dirname \"$1\")\" && cat > \"$1\"".into(),
                "sh".into(),
                target.into_os_string(),
            ],
            "",
            &[],
            vec![],
            &[],
        );
        self.query(&format!("writing {relative}"), step, Some(contents))
            .await
            .map(drop)
    }
}

fn build_error(message: impl Into<String>) -> DriverError {
    DriverError::Build {
        message: message.into(),
        log_tail: String::new(),
    }
}

fn infra(what: &str, e: impl std::fmt::Display) -> DriverError {
    DriverError::Infra(format!("{what}: {e}"))
}

/// Removes a temporary build directory unless the build finished.
struct TmpDir {
    path: PathBuf,
    keep: bool,
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Builds `req`, or returns the earlier build of the same context.
pub(crate) async fn build(
    builder: &Builder<'_>,
    req: BuildRequest,
) -> Result<Artifact, DriverError> {
    let sha = &req.context_sha256;
    if sha.is_empty() || sha.len() > 128 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(build_error(format!(
            "context_sha256 {sha:?} is not a hex digest"
        )));
    }
    let (ns, name) = (req.key.namespace.as_str(), req.key.name.as_str());
    let parent = builder.paths.builds.join(ns).join(name);
    let final_dir = parent.join(sha);
    let log = builder
        .paths
        .logs
        .join(ns)
        .join(name)
        .join(format!("{sha}.log"));
    let artifact = Artifact {
        reference: final_dir.to_string_lossy().into_owned(),
    };
    let identity = match builder.jails {
        Some(jails) => Some(jails.tenants.identity(&req.key.namespace).await?),
        None => None,
    };
    let cache = builder.paths.tenants.join(ns).join("cache");

    let prepared = {
        let (parent, final_dir, log, cache) = (
            parent.clone(),
            final_dir.clone(),
            log.clone(),
            cache.clone(),
        );
        let sha = sha.clone();
        let context = req.context;
        tokio::task::spawn_blocking(move || {
            prepare(
                &parent,
                &final_dir,
                &log,
                &sha,
                &context,
                identity.map(|id| (id, cache.as_path())),
            )
        })
        .await
        .map_err(|e| infra("build task", e))??
    };
    let Some((mut tmp, files)) = prepared else {
        return Ok(artifact); // cached: nothing was built, nothing to log
    };
    let steps = Steps {
        builder,
        dir: tmp.path.clone(),
        log: log.clone(),
        out: req.log.clone(),
        jail: identity.map(|id| (id, cache)),
    };
    steps
        .note(format!(
            "sless: unpacked {files} files of build context {sha}\n"
        ))
        .await?;

    let step = match req.runtime {
        Runtime::Python311 => python_deps(&steps).await,
        Runtime::Nodejs20 => node_deps(&steps).await,
        Runtime::Go123 => go::build(&steps).await,
    };
    if let Err(e) = step {
        // Removing the half build is blocking work too.
        let _ = tokio::task::spawn_blocking(move || drop(tmp)).await;
        return Err(e);
    }

    let final_dir2 = final_dir.clone();
    let tmp_path = tmp.path.clone();
    let jailed = identity.is_some();
    tokio::task::spawn_blocking(move || finish(&tmp_path, &final_dir2, &log, jailed))
        .await
        .map_err(|e| infra("build task", e))??;
    tmp.keep = true;
    req.log.push(BUILD_COMPLETE.as_bytes());
    Ok(artifact)
}

/// Returns `None` when the build exists already, else a fresh temporary
/// directory with the context unpacked into `code/` (and how many files it
/// has) and a new, empty log. In a jail the directory is handed to the
/// build's user (`jail`: its identity and the namespace's cache directory,
/// made if missing).
fn prepare(
    parent: &Path,
    final_dir: &Path,
    log: &Path,
    sha: &str,
    context: &[u8],
    jail: Option<(Identity, &Path)>,
) -> Result<Option<(TmpDir, usize)>, DriverError> {
    if final_dir.join(COMPLETE_MARKER).is_file() {
        return Ok(None);
    }
    std::fs::create_dir_all(parent).map_err(|e| infra("creating the build directory", e))?;
    remove_stale_tmp_dirs(parent, STALE_TMP_AGE);

    let suffix: u64 = rand::random();
    let tmp = TmpDir {
        path: parent.join(format!("{sha}{TMP_INFIX}{suffix:016x}")),
        keep: false,
    };
    let code = tmp.path.join("code");
    std::fs::create_dir_all(&code).map_err(|e| infra("creating the build directory", e))?;
    let files = unpack(context, &code)?;
    for dir in ["deps", "bin", SCRATCH] {
        std::fs::create_dir_all(tmp.path.join(dir))
            .map_err(|e| infra("creating the build directory", e))?;
    }
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(|e| infra("creating the build log", e))?;
    }
    std::fs::write(log, "").map_err(|e| infra("writing the build log", e))?;
    if let Some((identity, cache)) = jail {
        if !cache.is_dir() {
            std::fs::create_dir_all(cache.join("home"))
                .map_err(|e| infra("creating the namespace's build cache", e))?;
            sandbox::hand_over(cache, Some(identity))
                .map_err(|e| infra("handing the build cache to its user", e))?;
        }
        sandbox::hand_over(&tmp.path, Some(identity))
            .map_err(|e| infra("handing the build directory to its user", e))?;
    }
    Ok(Some((tmp, files)))
}

/// Removes `*.tmp-*` directories below `parent` older than `min_age`
/// (`Duration::ZERO`: all of them).
pub(crate) fn remove_stale_tmp_dirs(parent: &Path, min_age: Duration) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().contains(TMP_INFIX) {
            continue;
        }
        let age = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .unwrap_or(Duration::MAX);
        if age >= min_age {
            tracing::info!(dir = %entry.path().display(), "removing an unfinished build");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Unpacks a tar.gz into `dest`, refusing anything but regular files and
/// directories with relative paths that stay inside `dest`.
fn unpack(context: &[u8], dest: &Path) -> Result<usize, DriverError> {
    let invalid =
        |e: io::Error| build_error(format!("the build context is not a valid tar.gz: {e}"));
    let mut archive = Archive::new(GzDecoder::new(context));
    archive.set_preserve_permissions(false);
    archive.set_mask(0o022);
    archive.set_overwrite(true);
    let mut files = 0;
    for entry in archive.entries().map_err(invalid)? {
        let mut entry = entry.map_err(invalid)?;
        let path = entry.path().map_err(invalid)?.into_owned();
        let kind = entry.header().entry_type();
        if kind == EntryType::XGlobalHeader {
            continue;
        }
        let safe = path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !safe {
            return Err(build_error(format!(
                "the build context has an entry with an unsafe path: {}",
                path.display()
            )));
        }
        let relative: PathBuf = path
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        let target = dest.join(&relative);
        match kind {
            EntryType::Directory => {
                std::fs::create_dir_all(&target).map_err(|e| infra("unpacking", e))?;
            }
            EntryType::Regular | EntryType::Continuous => {
                if relative.as_os_str().is_empty() {
                    return Err(build_error("the build context has a file without a name"));
                }
                if let Some(dir) = target.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| infra("unpacking", e))?;
                }
                entry
                    .unpack(&target)
                    .map_err(|e| build_error(format!("cannot unpack {}: {e}", path.display())))?;
                files += 1;
            }
            other => {
                return Err(build_error(format!(
                    "the build context has an entry that is neither a file nor a directory ({other:?}): {}",
                    path.display()
                )));
            }
        }
    }
    Ok(files)
}

fn append_log(log: &Path, text: &str) -> io::Result<()> {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    log.write_all(text.as_bytes())
}

/// The last `n` lines of a file.
fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

async fn is_file(path: PathBuf) -> bool {
    tokio::fs::metadata(path).await.is_ok_and(|m| m.is_file())
}

/// pip for `code/requirements.txt` into `deps/`, when there is one.
async fn python_deps(steps: &Steps<'_>) -> Result<(), DriverError> {
    if !is_file(steps.dir.join("code/requirements.txt")).await {
        return Ok(());
    }
    let python = match steps.builder.jails {
        Some(jails) if steps.jail.is_some() => jails.toolchain.python.clone(),
        _ => PathBuf::from(&steps.builder.tools.python),
    };
    let mut args: Vec<OsString> = [
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "-r",
    ]
    .map(OsString::from)
    .into();
    args.push(steps.path("code/requirements.txt").into_os_string());
    args.push("--target".into());
    args.push(steps.path("deps").into_os_string());
    let step = steps.step(
        python,
        args,
        "code",
        &["PIP_"],
        vec![
            ("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()),
            // pip's lines reach the build log as it prints them.
            ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
        ],
        &[],
    );
    steps.run("pip install", step).await
}

/// npm for `code/package.json` into `code/node_modules`, when there is one:
/// `npm ci` with a lockfile, else `npm install`; never the devDependencies.
async fn node_deps(steps: &Steps<'_>) -> Result<(), DriverError> {
    let code = steps.dir.join("code");
    if !is_file(code.join("package.json")).await {
        return Ok(());
    }
    let locked = is_file(code.join("package-lock.json")).await
        || is_file(code.join("npm-shrinkwrap.json")).await;
    let (what, verb) = if locked {
        ("npm ci", "ci")
    } else {
        ("npm install", "install")
    };
    let npm = match steps.builder.jails {
        Some(jails) if steps.jail.is_some() => jails.toolchain.npm.clone(),
        _ => PathBuf::from(&steps.builder.tools.npm),
    };
    let cache = steps.cache("npm", &steps.builder.tools.npm_cache);
    let step = steps.step(
        npm,
        [verb, "--omit=dev", "--no-audit", "--no-fund"]
            .map(OsString::from)
            .into(),
        "code",
        &["NPM_CONFIG_", "npm_config_"],
        vec![
            (
                "NPM_CONFIG_CACHE".to_owned(),
                cache.to_string_lossy().into_owned(),
            ),
            ("NPM_CONFIG_UPDATE_NOTIFIER".to_owned(), "false".to_owned()),
            ("NODE_ENV".to_owned(), "production".to_owned()),
        ],
        &[],
    );
    steps.run(what, step).await
}

/// Takes the build back from its steps' user, copies the log in, marks
/// the build complete and moves it into place. Nothing a step left behind
/// is followed: the tree is handed back to root link by link, and sless's
/// own files replace whatever has their names.
fn finish(tmp: &Path, final_dir: &Path, log: &Path, jailed: bool) -> Result<(), DriverError> {
    if jailed {
        sandbox::hand_over(tmp, None).map_err(|e| infra("taking the build back", e))?;
    }
    let _ = std::fs::remove_dir_all(tmp.join(SCRATCH));
    append_log(log, BUILD_COMPLETE).map_err(|e| infra("writing the build log", e))?;
    for (name, contents) in [
        (BUILD_LOG, std::fs::read(log).unwrap_or_default()),
        (COMPLETE_MARKER, Vec::new()),
    ] {
        let path = tmp.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(_) => Ok(()),
        }
        .map_err(|e| infra("clearing the build's own files", e))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&contents))
            .map_err(|e| infra("marking the build complete", e))?;
    }
    for _ in 0..2 {
        match std::fs::rename(tmp, final_dir) {
            Ok(()) => return Ok(()),
            Err(_) if final_dir.join(COMPLETE_MARKER).is_file() => {
                // Someone else finished the same build first; use theirs.
                let _ = std::fs::remove_dir_all(tmp);
                return Ok(());
            }
            Err(_) if final_dir.exists() => {
                // A directory without the marker is not ours to trust.
                let _ = std::fs::remove_dir_all(final_dir);
            }
            Err(e) => return Err(infra("moving the build into place", e)),
        }
    }
    Err(DriverError::Infra(format!(
        "cannot move the build into place at {}",
        final_dir.display()
    )))
}
