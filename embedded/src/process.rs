//! Process plumbing for the private PostgreSQL cluster: locating the server
//! binaries, choosing the (unprivileged) account to run them as, preparing
//! child commands, and supervising the postmaster from a dedicated thread.

use std::ffi::{CStr, CString, OsStr};
use std::io;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;

use sless_sandbox::{Identity, Jail, Mount, Pending, Sandbox, SandboxOptions, Sandboxed};
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::{Arc, Condvar, Mutex, mpsc};
use std::time::{Duration, Instant};

use crate::error::{EmbeddedError, IoContext, Result};

/// Where Debian/Ubuntu install the versioned PostgreSQL server binaries.
const DEBIAN_PG_ROOT: &str = "/usr/lib/postgresql";

/// The setting that names the directory with `initdb` and `postgres`, as
/// messages name it (the caller reads it: [`PostgresHost::bin_dir`]).
const PG_BIN_SETTING: &str = "SLESS_PG_BIN";

/// How often the keeper thread checks whether the child has exited.
const KEEPER_POLL: Duration = Duration::from_millis(20);

/// What of the host the cluster's programs are found with and run in. This
/// crate reads no environment: the caller passes its settings and its own
/// environment here.
#[derive(Debug, Clone, Default)]
pub struct PostgresHost {
    /// The directory with `initdb` and `postgres` (`SLESS_PG_BIN`): when
    /// set, the only place they are looked for.
    pub bin_dir: Option<PathBuf>,
    /// The caller's environment. Its `PATH` is searched for the server
    /// programs after `/usr/lib/postgresql/*/bin`, and for bwrap and setpriv
    /// when the server runs in a sandbox (under root), where it gets this
    /// `PATH`, `LANG`, `TZ` and `LC_*`. Outside a sandbox the programs
    /// inherit the process's environment as it is.
    pub env: Vec<(String, String)>,
}

impl PostgresHost {
    /// The directories of `PATH` in [`env`](Self::env).
    fn search_path(&self) -> Vec<PathBuf> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == "PATH")
            .map(|(_, v)| std::env::split_paths(v).collect())
            .unwrap_or_default()
    }
}

/// The PostgreSQL server programs this crate runs.
#[derive(Debug, Clone)]
pub(crate) struct PgBinaries {
    /// Path of `initdb`.
    pub initdb: PathBuf,
    /// Path of `postgres` (the postmaster).
    pub postgres: PathBuf,
}

impl PgBinaries {
    /// Finds `initdb` and `postgres`: in `host.bin_dir` if set, else in the
    /// highest-versioned `/usr/lib/postgresql/*/bin`, else on `host`'s `PATH`.
    pub fn locate(host: &PostgresHost) -> Result<Self> {
        if let Some(dir) = host.bin_dir.as_ref().filter(|d| !d.as_os_str().is_empty()) {
            return Self::in_dir(dir).ok_or_else(|| EmbeddedError::BinariesNotFound {
                searched: format!("{PG_BIN_SETTING}={} (PATH not searched)", dir.display()),
            });
        }
        let mut versions: Vec<(Vec<u32>, PathBuf)> = std::fs::read_dir(DEBIAN_PG_ROOT)
            .into_iter()
            .flatten()
            .flatten()
            .filter_map(|entry| {
                let name = entry.file_name();
                let version = name
                    .to_str()?
                    .split('.')
                    .map(|part| part.parse::<u32>().ok())
                    .collect::<Option<Vec<u32>>>()?;
                Some((version, entry.path().join("bin")))
            })
            .collect();
        versions.sort_by(|a, b| b.0.cmp(&a.0));
        versions
            .into_iter()
            .map(|(_, dir)| dir)
            .chain(host.search_path())
            .find_map(|dir| Self::in_dir(&dir))
            .ok_or_else(|| EmbeddedError::BinariesNotFound {
                searched: format!("{DEBIAN_PG_ROOT}/*/bin and PATH"),
            })
    }

    fn in_dir(dir: &Path) -> Option<Self> {
        let initdb = dir.join("initdb");
        let postgres = dir.join("postgres");
        (is_executable(&initdb) && is_executable(&postgres)).then_some(Self { initdb, postgres })
    }
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// The account the PostgreSQL programs run as.
#[derive(Debug, Clone)]
pub(crate) struct RunAs {
    /// Account name (or numeric uid when it has no passwd entry).
    pub name: String,
    /// User id.
    pub uid: u32,
    /// Primary group id.
    pub gid: u32,
    /// Whether the child must switch to `uid`/`gid` (we are root).
    pub switch: bool,
    /// What its programs are found with and, in a sandbox, get.
    host: PostgresHost,
}

impl RunAs {
    /// Chooses the account for the cluster in `pgdata`.
    ///
    /// Without root privileges this is the current user. As root (which
    /// PostgreSQL refuses), it is the non-root owner of an existing cluster,
    /// else `postgres` if that user exists, else `nobody`.
    pub fn for_cluster(pgdata: &Path, host: &PostgresHost) -> Result<Self> {
        let host = host.clone();
        // SAFETY: geteuid/getegid cannot fail and have no preconditions.
        let (euid, egid) = unsafe { (libc::geteuid(), libc::getegid()) };
        if euid != 0 {
            let name = lookup_user(UserKey::Uid(euid)).map_or_else(|| euid.to_string(), |u| u.name);
            return Ok(Self {
                name,
                uid: euid,
                gid: egid,
                switch: false,
                host,
            });
        }
        if let Ok(meta) = std::fs::metadata(pgdata)
            && meta.uid() != 0
        {
            let uid = meta.uid();
            let user = lookup_user(UserKey::Uid(uid));
            return Ok(Self {
                name: user
                    .as_ref()
                    .map_or_else(|| uid.to_string(), |u| u.name.clone()),
                uid,
                gid: user.map_or(meta.gid(), |u| u.gid),
                switch: true,
                host,
            });
        }
        ["postgres", "nobody"]
            .into_iter()
            .find_map(|name| lookup_user(UserKey::Name(name)))
            .filter(|u| u.uid != 0)
            .map(|u| Self {
                name: u.name,
                uid: u.uid,
                gid: u.gid,
                switch: true,
                host,
            })
            .ok_or(EmbeddedError::NoUnprivilegedUser)
    }

    /// Makes `path` owned by this account (no-op unless switching users).
    pub fn chown(&self, path: &Path) -> Result<()> {
        if !self.switch {
            return Ok(());
        }
        std::os::unix::fs::chown(path, Some(self.uid), Some(self.gid))
            .context(|| format!("changing the owner of {} to {}", path.display(), self.name))
    }

    /// The command that runs `program args` in `cwd` as this account,
    /// receiving SIGINT when the thread that spawns it exits
    /// (`PR_SET_PDEATHSIG`) or, if our process already died before it
    /// started, refusing to start.
    ///
    /// Switching users (we are root), the program runs in a sandbox that
    /// shows it the system read-only and, writable, only `own` (at its own
    /// path), so a data directory private to root can hold the cluster: the
    /// account never needs to reach the directories above `own`. The
    /// program itself gets SIGINT (PostgreSQL's fast shutdown) when the
    /// sandbox's bwrap ends.
    pub fn command(
        &self,
        program: &Path,
        args: &[&OsStr],
        cwd: &Path,
        own: &Path,
    ) -> Result<Launch> {
        if self.switch {
            return self.sandboxed(program, args, cwd, own);
        }
        let mut cmd = Command::new(program);
        cmd.args(args).current_dir(cwd);
        let parent = std::process::id() as libc::pid_t;
        let hook = move || -> io::Result<()> {
            // Only async-signal-safe calls in here: this runs between fork and exec.
            // SAFETY: prctl/getppid are plain syscalls without pointer arguments.
            unsafe {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGINT as libc::c_ulong) != 0 {
                    return Err(io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    return Err(io::Error::from_raw_os_error(libc::ESRCH));
                }
            }
            Ok(())
        };
        // SAFETY: the hook only performs async-signal-safe system calls and
        // does not allocate.
        unsafe {
            cmd.pre_exec(hook);
        }
        Ok(Launch {
            command: cmd,
            pending: None,
        })
    }

    fn sandboxed(&self, program: &Path, args: &[&OsStr], cwd: &Path, own: &Path) -> Result<Launch> {
        let trouble = |reason: String| EmbeddedError::Sandbox {
            user: self.name.clone(),
            reason,
        };
        let sandbox = Sandbox::with_options(&SandboxOptions {
            rlimits_only: true,
            search_path: self.host.search_path(),
            ..SandboxOptions::default()
        })
        .map_err(|e| trouble(e.to_string()))?;
        let mut jail = Jail::service(
            Identity {
                uid: self.uid,
                gid: self.gid,
            },
            program,
        );
        jail.args = args.iter().map(|a| a.to_os_string()).collect();
        jail.env = self
            .host
            .env
            .iter()
            .filter(|(k, _)| matches!(k.as_str(), "PATH" | "LANG" | "TZ") || k.starts_with("LC_"))
            .cloned()
            .collect();
        jail.cwd = cwd.to_path_buf();
        jail.mounts = vec![Mount::ReadWrite {
            source: own.to_path_buf(),
            dest: own.to_path_buf(),
        }];
        jail.program_death_signal = Some(libc::SIGINT);
        jail.label = "postgres".to_owned();
        let prepared = sandbox.prepare(&jail).map_err(|e| trouble(e.to_string()))?;
        Ok(Launch {
            command: prepared.command,
            pending: Some(prepared.pending),
        })
    }
}

/// A command to spawn, and (in a sandbox) what its sandbox holds until it
/// has been.
pub(crate) struct Launch {
    pub command: Command,
    pending: Option<Pending>,
}

impl Launch {
    /// Spawns it: the child, the pid to signal (the program's, which in
    /// a sandbox is not the child's: bwrap runs it, a child of its init),
    /// and the sandbox, to keep as long as the child runs (dropping it ends
    /// the sandbox). Blocks until the sandbox runs the program.
    pub fn spawn(mut self) -> io::Result<(std::process::Child, u32, Option<Sandboxed>)> {
        let spawned = self.command.spawn();
        let sandbox = self
            .pending
            .take()
            .map(|p| p.spawned(spawned.as_ref().ok().map(std::process::Child::id)));
        let mut child = spawned?;
        let Some(mut sandbox) = sandbox else {
            let pid = child.id();
            return Ok((child, pid, None));
        };
        let deadline = Instant::now() + Duration::from_secs(10);
        loop {
            if let Some(pid) = sandbox.program_pid() {
                return Ok((child, pid, Some(sandbox)));
            }
            if child.try_wait()?.is_some() {
                // It ended before the program ran: the supervisor reports it.
                let pid = child.id();
                return Ok((child, pid, Some(sandbox)));
            }
            if Instant::now() >= deadline {
                // The sandbox's keeper ends it (never SIGKILL the keeper).
                sandbox.kill();
                let _ = child.wait();
                return Err(io::Error::other("the sandbox did not start the program"));
            }
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// Runs it to the end and collects its output.
    pub fn output(mut self) -> io::Result<std::process::Output> {
        let out = self.command.output();
        // It has ended (and was reaped): no keeper is left to signal.
        drop(self.pending.take().map(|p| p.spawned(None)));
        out
    }
}

/// A passwd entry, reduced to what we need.
struct User {
    name: String,
    uid: u32,
    gid: u32,
}

enum UserKey<'a> {
    Name(&'a str),
    Uid(u32),
}

/// Looks up a user with the reentrant `getpw*_r` functions.
fn lookup_user(key: UserKey<'_>) -> Option<User> {
    let name = match key {
        UserKey::Name(n) => Some(CString::new(n).ok()?),
        UserKey::Uid(_) => None,
    };
    let mut buf = vec![0 as libc::c_char; 16 * 1024];
    // SAFETY: passwd is plain old data; an all-zero value is valid.
    let mut pwd: libc::passwd = unsafe { std::mem::zeroed() };
    let mut result: *mut libc::passwd = std::ptr::null_mut();
    // SAFETY: all pointers are valid for the duration of the call and the
    // buffer length matches the buffer.
    let rc = unsafe {
        match (&key, &name) {
            (UserKey::Name(_), Some(c)) => libc::getpwnam_r(
                c.as_ptr(),
                &mut pwd,
                buf.as_mut_ptr(),
                buf.len(),
                &mut result,
            ),
            (UserKey::Uid(uid), _) => {
                libc::getpwuid_r(*uid, &mut pwd, buf.as_mut_ptr(), buf.len(), &mut result)
            }
            (UserKey::Name(_), None) => return None,
        }
    };
    if rc != 0 || result.is_null() {
        return None;
    }
    // SAFETY: on success pw_name points to a NUL-terminated string in `buf`.
    let name = unsafe { CStr::from_ptr(pwd.pw_name) };
    Some(User {
        name: OsStr::from_bytes(name.to_bytes())
            .to_string_lossy()
            .into_owned(),
        uid: pwd.pw_uid,
        gid: pwd.pw_gid,
    })
}

/// Exit information shared between the keeper thread and its owner.
#[derive(Default)]
struct ExitSlot {
    status: Mutex<Option<String>>,
    changed: Condvar,
}

/// Owner handle of a child process supervised by a dedicated keeper thread.
///
/// The keeper thread spawns the child and stays alive until the child has
/// exited, so the child's parent-death signal only fires when the child exits
/// on its own, is stopped through this handle, or our whole process dies (even
/// by SIGKILL). The keeper is the only one that reaps the child and the only one
/// that signals it, so a signal can never hit a recycled pid.
pub(crate) struct Keeper {
    pid: u32,
    signals: mpsc::Sender<libc::c_int>,
    exit: Arc<ExitSlot>,
}

impl Keeper {
    /// Spawns `launch` from a new keeper thread; blocks until the spawn is done.
    pub fn spawn(launch: Launch, thread_name: &str) -> Result<Self> {
        let program = launch.command.get_program().to_string_lossy().into_owned();
        let (spawned_tx, spawned_rx) = mpsc::channel();
        let (signals, signal_rx) = mpsc::channel::<libc::c_int>();
        let exit = Arc::new(ExitSlot::default());
        let slot = Arc::clone(&exit);
        std::thread::Builder::new()
            .name(thread_name.to_owned())
            .spawn(move || {
                let (mut child, pid, _sandbox) = match launch.spawn() {
                    Ok(spawned) => spawned,
                    Err(e) => {
                        let _ = spawned_tx.send(Err(e));
                        return;
                    }
                };
                let _ = spawned_tx.send(Ok(pid));
                let mut owner_gone = false;
                let status = loop {
                    match child.try_wait() {
                        Ok(Some(status)) => break status.to_string(),
                        Ok(None) => {}
                        Err(e) => break format!("lost track of the process: {e}"),
                    }
                    if owner_gone {
                        std::thread::sleep(KEEPER_POLL);
                        continue;
                    }
                    match signal_rx.recv_timeout(KEEPER_POLL) {
                        // SAFETY: kill has no memory-safety preconditions; the
                        // child is not reaped yet, so `pid` (it, or the
                        // program its sandbox runs) is still ours.
                        Ok(sig) => unsafe {
                            libc::kill(pid as libc::pid_t, sig);
                        },
                        Err(mpsc::RecvTimeoutError::Timeout) => {}
                        // The handle was leaked: keep supervising so the child
                        // stays tied to this process.
                        Err(mpsc::RecvTimeoutError::Disconnected) => owner_gone = true,
                    }
                };
                *slot.status.lock().unwrap_or_else(|p| p.into_inner()) = Some(status);
                slot.changed.notify_all();
            })
            .context(|| format!("starting a thread to supervise {program}"))?;
        let pid = spawned_rx
            .recv()
            .map_err(|_| {
                EmbeddedError::io(
                    format!("running {program}"),
                    io::Error::other("keeper thread died"),
                )
            })?
            .context(|| format!("running {program}"))?;
        Ok(Self { pid, signals, exit })
    }

    /// Process id of the program (in a sandbox, not bwrap's).
    pub fn pid(&self) -> u32 {
        self.pid
    }

    /// Asks the keeper to deliver `sig` to the child (ignored once it exited).
    pub fn signal(&self, sig: libc::c_int) {
        let _ = self.signals.send(sig);
    }

    /// The child's exit status, rendered, if it has exited.
    pub fn exit_status(&self) -> Option<String> {
        self.exit
            .status
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
    }

    /// Blocks until the child has exited or `timeout` passed.
    pub fn wait_timeout(&self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        let mut status = self.exit.status.lock().unwrap_or_else(|p| p.into_inner());
        while status.is_none() {
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            status = self
                .exit
                .changed
                .wait_timeout(status, left)
                .unwrap_or_else(|p| p.into_inner())
                .0;
        }
        status.clone()
    }

    /// Stops the child: SIGINT (PostgreSQL's fast shutdown), wait up to
    /// `grace`, then SIGKILL. Blocking. Returns `false` if SIGKILL was needed.
    pub fn shutdown_blocking(&self, grace: Duration) -> bool {
        if self.exit_status().is_some() {
            return true;
        }
        self.signal(libc::SIGINT);
        if self.wait_timeout(grace).is_some() {
            return true;
        }
        self.signal(libc::SIGKILL);
        self.wait_timeout(Duration::from_secs(5));
        false
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn override_dir_without_binaries_is_a_clear_error() {
        let dir = std::env::temp_dir();
        let host = PostgresHost {
            bin_dir: Some(dir.clone()),
            ..PostgresHost::default()
        };
        let err = PgBinaries::locate(&host).unwrap_err();
        let msg = err.to_string();
        assert!(
            msg.starts_with("PostgreSQL server binaries not found: looked in SLESS_PG_BIN="),
            "{msg}"
        );
        assert!(msg.contains(&dir.display().to_string()), "{msg}");
        assert!(
            msg.ends_with("install postgresql (Debian: apt-get install postgresql)"),
            "{msg}"
        );
    }

    #[test]
    fn default_search_message_names_the_places() {
        let err = EmbeddedError::BinariesNotFound {
            searched: format!("{DEBIAN_PG_ROOT}/*/bin and PATH"),
        };
        assert_eq!(
            err.to_string(),
            "PostgreSQL server binaries not found: looked in /usr/lib/postgresql/*/bin and PATH; \
             install postgresql (Debian: apt-get install postgresql)"
        );
    }

    #[test]
    fn keeper_reports_exit_and_delivers_signals() {
        let dir = std::env::temp_dir();
        let launch = RunAs::for_cluster(Path::new("/nonexistent"), &PostgresHost::default())
            .unwrap()
            .command(Path::new("/bin/sleep"), &[OsStr::new("30")], &dir, &dir)
            .unwrap();
        let keeper = Keeper::spawn(launch, "test-keeper").unwrap();
        assert!(keeper.exit_status().is_none());
        assert!(
            keeper.shutdown_blocking(Duration::from_secs(10)),
            "sleep dies on SIGINT"
        );
        // Killed by SIGINT: as a signal, or (sandboxed, under root) as
        // bwrap's exit code 128 + 2.
        let status = keeper.exit_status().unwrap();
        assert!(
            status.contains("signal") || status.contains("130"),
            "{status}"
        );
    }
}
