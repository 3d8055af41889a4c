//! A build's steps ([`Steps`]): each one a process (in a jail, as the
//! namespace's user) run in the build directory, its output copied into
//! the build log as it comes, killed when it takes too long.

use std::ffi::OsString;
use std::io;
use std::os::fd::OwnedFd;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use sless_sandbox::{Identity, Limits, Mount};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::unix::pipe;

use super::{Builder, SCRATCH, append_log, infra};
use crate::driver::{BuildLog, DriverError};
use crate::local::process::{describe_exit, inherited_env, signal_group};
use crate::local::sandbox::{self, JailParts, Launch};

/// How long one build step (`pip install`, `npm ci`, `go build`) may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);
/// How many lines of the build log a failed build reports.
const LOG_TAIL_LINES: usize = 40;
/// How long a step's output is still read after the step is gone (a
/// process it left behind outside a jail may hold the pipe open).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

/// One build's directory, log and user: runs its steps.
pub(crate) struct Steps<'a> {
    pub(super) builder: &'a Builder<'a>,
    /// The build directory on the host.
    pub(super) dir: PathBuf,
    /// The build log on the host (outside `dir`: a step may replace
    /// anything inside it).
    pub(super) log: PathBuf,
    /// The build's log as the reconciler records it: everything written to
    /// `log` goes here too, as it comes.
    pub(super) out: BuildLog,
    /// In a jail: its user and the namespace's cache directory on the host.
    pub(super) jail: Option<(Identity, PathBuf)>,
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

/// The last `n` lines of a file.
fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}
