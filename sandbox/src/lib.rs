//! Running processes that sless does not trust (functions, jobs and their
//! builds) or that must not run as root (the embedded PostgreSQL) on one
//! machine.
//!
//! A [`Jail`] describes one process: who it runs as, what it sees of the
//! file system, its environment and its limits. [`Sandbox::prepare`] turns
//! it into a command that runs it under bubblewrap (`bwrap`, the sandbox of
//! Flatpak): bwrap runs as root, builds a mount namespace that holds only
//! what the jail names (a read-only system, the jail's own directories, a
//! bounded private `/tmp`), a PID, IPC and UTS namespace, installs a seccomp
//! filter, and runs `setpriv` (util-linux), which drops to the jail's
//! unprivileged uid and gid with no supplementary groups, no capabilities
//! in any set and `no_new_privs`, then runs the program. Everything the
//! program starts lives in the jail's PID namespace, so it ends when the
//! program does (or when bwrap is killed: `--die-with-parent`), daemons and
//! double forks included.
//!
//! The process the owner spawns is not bwrap but the jail's keeper
//! ([`keeper`]), whose child bwrap is: it ends the jail, whatever stage
//! bwrap's setup is at, when the owner (the thread that spawned it) ends
//! or asks ([`Sandboxed::kill`]), and exits as bwrap did.
//!
//! A jail has the host's network, or a network namespace of its own
//! ([`Network`]): with only its loopback, or going out through
//! slirp4netns ([`network`]).
//!
//! Limits go into a cgroup of the jail's own where the machine lets sless
//! write the cgroup tree ([`cgroup`]), else into resource limits of the
//! process (`RLIMIT_DATA`, `RLIMIT_NPROC`). A file-size limit, a CPU-time
//! limit and no core dumps are always resource limits.
//!
//! This crate sits at the bottom of the dependency graph: it depends on no
//! other crate of sless.

mod args;
pub mod cgroup;
mod exec;
mod inject;
mod keeper;
mod network;
mod seccomp;

use std::ffi::OsString;
use std::io::Read;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::Arc;

pub use cgroup::{Cgroup, LimitsMechanism};
pub use exec::{Pending, Prepared, Sandboxed};

/// The Debian package that has `bwrap`.
pub const BUBBLEWRAP_PACKAGE: &str = "bubblewrap";
/// The Debian package that has `slirp4netns`, for [`Network::Outbound`].
pub const SLIRP4NETNS_PACKAGE: &str = "slirp4netns";
/// The environment variable that names the sandbox's owner on bwrap's own
/// processes (never on the jailed program's): see [`Jail::owner`].
pub const OWNER_ENV: &str = "SLESS_SANDBOX_OF";

/// Why a sandbox cannot be made or used.
#[derive(Debug, thiserror::Error)]
pub enum SandboxError {
    #[error(
        "{tool} not found (looked in {searched}): install the package {package} \
         (Debian: apt-get install {package})"
    )]
    Missing {
        tool: &'static str,
        package: &'static str,
        searched: String,
    },
    #[error(
        "the sandbox runs every tenant's code as an unprivileged user of its own, which \
         needs root; sless runs as uid {uid}"
    )]
    NotRoot { uid: u32 },
    #[error("the sandbox does not work on this machine: {0}")]
    Broken(String),
    #[error("{what}: {source}")]
    Io {
        what: String,
        #[source]
        source: std::io::Error,
    },
}

pub type Result<T, E = SandboxError> = std::result::Result<T, E>;

pub(crate) fn io_error(what: impl Into<String>) -> impl FnOnce(std::io::Error) -> SandboxError {
    let what = what.into();
    move |source| SandboxError::Io { what, source }
}

/// Who a jailed process runs as. Never uid or gid 0.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Identity {
    pub uid: u32,
    pub gid: u32,
}

impl Identity {
    /// `nobody`/`nogroup` as most Linux distributions number them.
    pub const NOBODY: Identity = Identity {
        uid: 65534,
        gid: 65534,
    };
}

/// Something of the host made visible in the jail.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Mount {
    /// `source` (a host path, which must exist) at `dest`, read-only.
    ReadOnly { source: PathBuf, dest: PathBuf },
    /// `source` at `dest`, writable (as far as the file modes let the jail's user).
    ReadWrite { source: PathBuf, dest: PathBuf },
    /// A read-only file at `dest` with these contents.
    File { dest: PathBuf, contents: Vec<u8> },
}

impl Mount {
    /// The same host path inside the jail, read-only.
    pub fn same_path(path: impl Into<PathBuf>) -> Mount {
        let path = path.into();
        Mount::ReadOnly {
            source: path.clone(),
            dest: path,
        }
    }
}

/// What a jail sees of the host's system directories.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum View {
    /// For untrusted code: `/usr` and the library links, and of `/etc` only
    /// what programs need to run and reach the network (CA certificates,
    /// `resolv.conf`, `hosts`, the dynamic linker's cache, ...), with a
    /// `passwd` and `group` that name the jail's user only. The program
    /// gets a PID namespace and the seccomp filter.
    Untrusted,
    /// For a service of sless's own that only must not run as root (the
    /// embedded PostgreSQL): `/usr`, the library links and the whole of
    /// `/etc`, read-only; the host's IPC namespace, no seccomp filter.
    Service,
}

/// Limits of one jail. `None` leaves a limit as the host has it.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Limits {
    /// Memory of the whole jail (its processes and what they wrote to its
    /// `/tmp`), in bytes.
    pub memory_bytes: Option<u64>,
    /// Processes (threads, as Linux counts them) at once.
    pub processes: Option<u64>,
    /// The largest file a process may write, in bytes (`RLIMIT_FSIZE`).
    pub file_bytes: Option<u64>,
    /// CPU time of each process, in seconds (`RLIMIT_CPU`: SIGXCPU, then
    /// SIGKILL five seconds later).
    pub cpu_secs: Option<u64>,
}

/// The network a jail sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Network {
    /// The host's network, as today (services of sless's own, e.g. the embedded PostgreSQL).
    Host,
    /// A network namespace of the jail's own with only its loopback: no way out.
    Loopback,
    /// A network namespace of the jail's own whose traffic goes out through a user-mode network stack (slirp4netns, Debian package `slirp4netns`): it reaches the outside as the host does, but not the host's loopback nor anything listening only there.
    Outbound,
}

/// One process to run in a sandbox: see the crate docs.
#[derive(Debug, Clone)]
pub struct Jail {
    pub identity: Identity,
    /// The program, as a path inside the jail.
    pub program: PathBuf,
    pub args: Vec<OsString>,
    /// The whole environment of the program.
    pub env: Vec<(String, String)>,
    /// The working directory, inside the jail.
    pub cwd: PathBuf,
    pub view: View,
    /// Host paths and files the jail sees besides its view.
    pub mounts: Vec<Mount>,
    /// Size of the private `/tmp` (and of `/dev/shm`), in bytes.
    pub tmp_bytes: u64,
    pub limits: Limits,
    /// Its network. A jail of [`Network::Outbound`] must be started
    /// ([`Sandboxed::start`]) once spawned.
    pub network: Network,
    /// The signal the program itself gets when its parent (the jail's
    /// init) ends. The jail's PID namespace ends with bwrap in any case,
    /// and bwrap with its keeper, which ends when the thread that spawned
    /// it ends.
    pub program_death_signal: Option<libc::c_int>,
    /// Names the jail's cgroup (`[A-Za-z0-9._-]`, other bytes become `_`).
    pub label: String,
    /// Set on bwrap's own processes (and an `Outbound` jail's slirp4netns)
    /// as [`OWNER_ENV`] (readable by root only, never given to the
    /// program), so the owner can find them. Not on the keeper, a fork of
    /// the owner with the owner's environment and command line (named
    /// `sless-keeper` in `/proc/PID/comm`).
    pub owner: Option<String>,
}

impl Jail {
    /// A jail for untrusted code: [`View::Untrusted`], a 64 MiB `/tmp`,
    /// no limits yet, the host's network.
    pub fn untrusted(identity: Identity, program: impl Into<PathBuf>) -> Jail {
        Jail {
            identity,
            program: program.into(),
            args: Vec::new(),
            env: Vec::new(),
            cwd: PathBuf::from("/"),
            view: View::Untrusted,
            mounts: Vec::new(),
            tmp_bytes: 64 << 20,
            limits: Limits::default(),
            network: Network::Host,
            program_death_signal: None,
            label: "jail".to_owned(),
            owner: None,
        }
    }

    /// A jail for a service of sless's own: [`View::Service`].
    pub fn service(identity: Identity, program: impl Into<PathBuf>) -> Jail {
        Jail {
            view: View::Service,
            ..Jail::untrusted(identity, program)
        }
    }
}

/// What bwrap is given of the host for every jail, read once.
#[derive(Debug, Clone)]
pub(crate) struct HostLayout {
    /// `/bin`, `/lib`, ...: a symlink (merged `/usr`) or a directory.
    pub top: Vec<(PathBuf, TopEntry)>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TopEntry {
    Symlink(PathBuf),
    Directory,
}

impl HostLayout {
    fn read() -> HostLayout {
        let mut top = Vec::new();
        for name in ["bin", "sbin", "lib", "lib32", "lib64", "libx32"] {
            let path = Path::new("/").join(name);
            match std::fs::symlink_metadata(&path) {
                Ok(m) if m.file_type().is_symlink() => {
                    if let Ok(target) = std::fs::read_link(&path) {
                        top.push((path, TopEntry::Symlink(target)));
                    }
                }
                Ok(m) if m.is_dir() => top.push((path, TopEntry::Directory)),
                _ => {}
            }
        }
        HostLayout { top }
    }
}

/// How the sandbox is set up on this machine.
#[derive(Debug, Clone, Default)]
pub struct SandboxOptions {
    /// Use resource limits even where cgroups could be used.
    pub rlimits_only: bool,
    /// A cgroup (a directory of a cgroup v2 tree) delegated to sless, under
    /// which it creates its jails' cgroups; `None` uses sless's own cgroup.
    pub cgroup_parent: Option<PathBuf>,
    /// bwrap itself, where it is not in `search_path` or the system's
    /// directories.
    pub bwrap: Option<PathBuf>,
    /// Where bwrap, setpriv and slirp4netns are looked for first (the caller's `PATH`),
    /// before `/usr/bin`, `/bin` and `/usr/sbin`. This crate reads no
    /// environment: empty, only those are searched.
    pub search_path: Vec<PathBuf>,
}

struct Inner {
    bwrap: PathBuf,
    setpriv: PathBuf,
    /// Where slirp4netns is, or where it was looked for.
    slirp4netns: Result<PathBuf, String>,
    host: HostLayout,
    cgroups: Option<cgroup::Hierarchy>,
    seccomp: Vec<u8>,
}

/// The tools jails are made with; cheap to clone.
#[derive(Clone)]
pub struct Sandbox {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Sandbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Sandbox")
            .field("bwrap", &self.inner.bwrap)
            .field("limits", &self.limits_mechanism())
            .finish_non_exhaustive()
    }
}

impl Sandbox {
    /// Finds bwrap and setpriv (in the system's directories) and the place
    /// for cgroups, with the default options.
    pub fn locate() -> Result<Sandbox> {
        Sandbox::with_options(&SandboxOptions::default())
    }

    /// Finds bwrap and setpriv (in `opts.search_path`, else in `/usr/bin`),
    /// checks that sless runs as root, and finds where jails' cgroups can go.
    pub fn with_options(opts: &SandboxOptions) -> Result<Sandbox> {
        let bwrap = match &opts.bwrap {
            Some(path) if is_executable(path) => path.clone(),
            Some(path) => {
                return Err(SandboxError::Missing {
                    tool: "bwrap",
                    package: BUBBLEWRAP_PACKAGE,
                    searched: path.display().to_string(),
                });
            }
            None => find_program("bwrap", BUBBLEWRAP_PACKAGE, &opts.search_path)?,
        };
        let setpriv = find_program("setpriv", "util-linux", &opts.search_path)?;
        let slirp4netns = match find_program("slirp4netns", SLIRP4NETNS_PACKAGE, &opts.search_path)
        {
            Ok(path) => Ok(path),
            Err(SandboxError::Missing { searched, .. }) => Err(searched),
            Err(other) => return Err(other),
        };
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        if uid != 0 {
            return Err(SandboxError::NotRoot { uid });
        }
        let cgroups = if opts.rlimits_only {
            None
        } else {
            match cgroup::Hierarchy::detect(opts.cgroup_parent.as_deref()) {
                Ok(found) => found,
                Err(why) if opts.cgroup_parent.is_some() => {
                    return Err(SandboxError::Broken(why));
                }
                Err(why) => {
                    tracing::info!("cgroups are not usable ({why}); limits are resource limits");
                    None
                }
            }
        };
        Ok(Sandbox {
            inner: Arc::new(Inner {
                bwrap,
                setpriv,
                slirp4netns,
                host: HostLayout::read(),
                cgroups,
                seccomp: seccomp::filter(),
            }),
        })
    }

    /// How memory and process limits are enforced here.
    pub fn limits_mechanism(&self) -> LimitsMechanism {
        self.inner
            .cgroups
            .as_ref()
            .map_or(LimitsMechanism::Rlimits, cgroup::Hierarchy::mechanism)
    }

    /// slirp4netns, which jails of [`Network::Outbound`] need: where it
    /// is, or [`SandboxError::Missing`] naming its package.
    pub fn slirp4netns(&self) -> Result<&Path> {
        self.inner
            .slirp4netns
            .as_deref()
            .map_err(|searched| SandboxError::Missing {
                tool: "slirp4netns",
                package: SLIRP4NETNS_PACKAGE,
                searched: searched.clone(),
            })
    }

    /// The path of bwrap.
    pub fn bwrap(&self) -> &Path {
        &self.inner.bwrap
    }

    /// Turns `jail` into a command to spawn (see [`Prepared`]). A jail of
    /// [`Network::Outbound`] needs slirp4netns ([`SandboxError::Missing`]).
    pub fn prepare(&self, jail: &Jail) -> Result<Prepared> {
        exec::prepare(self, jail)
    }

    /// Runs a program in a jail as `nobody` with a memory and a process
    /// limit, and checks it ran as that user, without capabilities, in a
    /// PID namespace of its own: whether sandboxes work on this machine.
    /// Blocking.
    pub fn check(&self) -> Result<()> {
        let mut jail = Jail::untrusted(Identity::NOBODY, "/bin/sh");
        jail.args = vec![
            "-c".into(),
            "id -u; grep -E '^(CapEff|NoNewPrivs):' /proc/self/status; echo $$; \
             test ! -e /root && test ! -e /home && echo hidden"
                .into(),
        ];
        jail.env = vec![("PATH".into(), "/usr/bin:/bin".into())];
        jail.limits = Limits {
            memory_bytes: Some(64 << 20),
            processes: Some(16),
            file_bytes: Some(1 << 20),
            cpu_secs: Some(10),
        };
        jail.label = "check".into();
        let Prepared {
            mut command,
            pending,
        } = self.prepare(&jail)?;
        command
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = command
            .spawn()
            .map_err(io_error(format!("running {}", self.inner.bwrap.display())))?;
        let _sandboxed = pending.spawned(Some(child.id()));
        let mut out = String::new();
        let mut err = String::new();
        if let Some(mut s) = child.stdout.take() {
            let _ = s.read_to_string(&mut out);
        }
        if let Some(mut s) = child.stderr.take() {
            let _ = s.read_to_string(&mut err);
        }
        let status = child.wait().map_err(io_error("waiting for bwrap"))?;
        let lines: Vec<&str> = out.lines().map(str::trim).collect();
        let expected = [
            Identity::NOBODY.uid.to_string(),
            "CapEff:\t0000000000000000".to_owned(),
            "NoNewPrivs:\t1".to_owned(),
            "2".to_owned(),
            "hidden".to_owned(),
        ];
        let got: Vec<String> = lines.iter().map(|l| l.replace(' ', "\t")).collect();
        let matches = got.len() == expected.len()
            && got
                .iter()
                .zip(&expected)
                .all(|(g, e)| g.split_whitespace().eq(e.split_whitespace()));
        if status.success() && matches {
            return Ok(());
        }
        Err(SandboxError::Broken(format!(
            "a test program in the sandbox {status}; it printed {:?} (expected {:?}){}",
            lines,
            expected,
            if err.trim().is_empty() {
                String::new()
            } else {
                format!("; bwrap said: {}", err.trim())
            }
        )))
    }
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.mode() & 0o111 != 0)
}

/// Finds `name` in `search_path`, else in `/usr/bin`, `/bin` and `/usr/sbin`.
fn find_program(
    name: &'static str,
    package: &'static str,
    search_path: &[PathBuf],
) -> Result<PathBuf> {
    let mut searched: Vec<PathBuf> = search_path.to_vec();
    for fixed in ["/usr/bin", "/bin", "/usr/sbin"] {
        if !searched.iter().any(|d| d == Path::new(fixed)) {
            searched.push(PathBuf::from(fixed));
        }
    }
    for dir in &searched {
        let candidate = dir.join(name);
        if is_executable(&candidate) {
            return Ok(candidate);
        }
    }
    Err(SandboxError::Missing {
        tool: name,
        package,
        searched: searched
            .iter()
            .map(|d| d.display().to_string())
            .collect::<Vec<_>>()
            .join(":"),
    })
}
