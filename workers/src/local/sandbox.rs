//! How the local driver isolates tenants' code: every function, job and
//! build step runs in a jail of `sless_sandbox` as the unprivileged user of
//! its namespace, and sees only this (paths inside the jail):
//!
//! ```text
//! /usr, /bin, /lib...           the system, read-only
//! /etc/{ssl,resolv.conf,...}    what programs need, read-only; passwd/group of its user only
//! the interpreter's directory   where python3/node live when outside /usr, read-only
//! /sless/function               its own build (code/, deps/, bin/), read-only
//! /sless/runtime                the runtime wrappers, read-only
//! /sless/job/event.json         a job's input, read-only
//! /tmp, /dev/shm                private, bounded (SLESS_SANDBOX_TMP_MB)
//! ```
//!
//! A build step sees its build directory writable at `/sless/build` and its
//! namespace's caches (Go's module and build caches, npm's) at
//! `/sless/cache` instead of `/sless/function`. Nothing else of the data
//! directory, no other namespace's code, no credential of sless's.
//!
//! With [`Isolation::Unsafe`] (`sless dev --unsafe-no-sandbox`) none of this
//! holds: processes run as sless's own user and see what it sees.

use std::collections::HashMap;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::sync::{Arc, Mutex};

use sless_domain::Namespace;
use sless_sandbox::{Identity, Limits, Mount, Network, Sandbox, SandboxOptions};
use sless_store::PgPool;

use crate::driver::DriverError;

/// Where a function's build is, inside its jail.
pub(crate) const FUNCTION_DIR: &str = "/sless/function";
/// Where the runtime wrappers are, inside a jail.
pub(crate) const RUNTIME_DIR: &str = "/sless/runtime";
/// Where a build step's build directory is, inside its jail.
pub(crate) const BUILD_DIR: &str = "/sless/build";
/// Where a build step's namespace caches are, inside its jail.
pub(crate) const CACHE_DIR: &str = "/sless/cache";
/// Where a job's input is, inside its jail.
pub(crate) const JOB_EVENT: &str = "/sless/job/event.json";

/// How the local driver runs tenants' code.
#[derive(Debug, Clone)]
pub enum Isolation {
    /// In jails (see the module docs). `LocalDriver::new` fails when the
    /// sandbox does not work on the machine.
    Sandboxed(SandboxOptions),
    /// As plain processes of sless's own user: only for one person's own
    /// code on their own machine (`--unsafe-no-sandbox`).
    Unsafe,
}

/// Who each namespace's code runs as.
#[derive(Debug, Clone)]
pub enum TenantIds {
    /// Every namespace as this one user (tests of one tenant).
    Shared(Identity),
    /// Each namespace as a user of its own: `first` plus the namespace's
    /// slot (kept in the database, so every worker agrees), of `count`.
    PerNamespace {
        pool: PgPool,
        first: u32,
        count: u32,
    },
}

/// Sizes of the jails.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct JailSizes {
    /// `/tmp` (and `/dev/shm`) of each jail, in MiB.
    pub tmp_mb: u32,
    /// Processes (threads) of one function or job at once.
    pub processes: u32,
    /// The largest file a function, job or build may write, in MiB.
    pub file_mb: u32,
    /// Memory of one build step (pip, npm, go), in MiB.
    pub build_memory_mb: u32,
    /// Processes of one build step.
    pub build_processes: u32,
}

impl Default for JailSizes {
    fn default() -> Self {
        JailSizes {
            tmp_mb: 64,
            processes: 256,
            file_mb: 1024,
            build_memory_mb: 2048,
            build_processes: 1024,
        }
    }
}

/// One process to start: in a jail, or (unsafe) as it is.
#[derive(Debug, Clone)]
pub(crate) struct Launch {
    /// Inside the jail (the same as the host's for interpreters).
    pub program: PathBuf,
    pub args: Vec<std::ffi::OsString>,
    /// The complete environment of the program.
    pub env: Vec<(String, String)>,
    /// The working directory (inside the jail).
    pub cwd: PathBuf,
    pub jail: Option<JailParts>,
    /// The socket a function serves on: sless's own, bound before the
    /// process starts and handed to it (`SLESS_LISTEN_FD`), kept across
    /// its restarts, closed only when the instance ends. A port that
    /// sless holds cannot be taken by anyone else while its process is
    /// down.
    pub listener: Option<Arc<std::net::TcpListener>>,
}

impl Launch {
    /// The value the process gets for `name` (the last one set wins).
    pub fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}

/// What makes a [`Launch`] a jail.
#[derive(Debug, Clone)]
pub(crate) struct JailParts {
    pub sandbox: Sandbox,
    pub identity: Identity,
    pub mounts: Vec<Mount>,
    pub limits: Limits,
    pub tmp_bytes: u64,
    pub label: String,
    /// Its network: a namespace of its own for tenants' code.
    pub network: Network,
    /// Marks bwrap's processes (see `sless_sandbox::OWNER_ENV`): the data
    /// directory of the driver.
    pub owner: String,
}

/// A command ready to spawn, and what its jail holds until it has.
pub(crate) struct Command {
    pub command: std::process::Command,
    pub pending: Option<sless_sandbox::Pending>,
}

impl Launch {
    /// The command that starts this: bwrap for a jail, else the program in
    /// a process group of its own. Either dies (SIGKILL) when the thread
    /// that spawns it ends.
    pub fn command(&self) -> Result<Command, DriverError> {
        let mut made = self.unlistening_command()?;
        if let Some(listener) = &self.listener {
            inherit(&mut made.command, listener.as_raw_fd());
        }
        Ok(made)
    }

    fn unlistening_command(&self) -> Result<Command, DriverError> {
        use std::os::unix::process::CommandExt;
        let Some(jail) = &self.jail else {
            let mut command = std::process::Command::new(&self.program);
            command
                .args(&self.args)
                .current_dir(&self.cwd)
                .env_clear()
                .envs(self.env.iter().map(|(k, v)| (k, v)))
                .process_group(0);
            // SAFETY: the closure runs between fork and exec and only makes
            // the async-signal-safe prctl(2) system call.
            unsafe {
                command.pre_exec(|| {
                    let sig = libc::SIGKILL as libc::c_ulong;
                    if libc::prctl(libc::PR_SET_PDEATHSIG, sig, 0, 0, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
            return Ok(Command {
                command,
                pending: None,
            });
        };
        let mut spec = sless_sandbox::Jail::untrusted(jail.identity, &self.program);
        spec.args.clone_from(&self.args);
        spec.env.clone_from(&self.env);
        spec.cwd.clone_from(&self.cwd);
        spec.mounts.clone_from(&jail.mounts);
        spec.limits = jail.limits;
        spec.tmp_bytes = jail.tmp_bytes;
        spec.label.clone_from(&jail.label);
        spec.network = jail.network;
        spec.owner = Some(jail.owner.clone());
        let prepared = jail
            .sandbox
            .prepare(&spec)
            .map_err(|e| DriverError::Infra(format!("preparing the sandbox: {e}")))?;
        let mut command = prepared.command;
        command.process_group(0);
        Ok(Command {
            command,
            pending: Some(prepared.pending),
        })
    }
}

/// The environment variable that names the descriptor of the socket a
/// function serves on (runtimes/README.md).
pub(crate) const LISTEN_FD_ENV: &str = "SLESS_LISTEN_FD";

/// Hands `fd` to the program `command` starts, under its own number
/// (bwrap and setpriv pass descriptors on as they are): clears its
/// close-on-exec flag in the child, never in this process, so no other
/// child inherits it.
fn inherit(command: &mut std::process::Command, fd: RawFd) {
    use std::os::unix::process::CommandExt;
    // SAFETY: the closure runs between fork and exec and only makes the
    // async-signal-safe fcntl(2) system call on a descriptor this process
    // holds open (the listener outlives the spawn).
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
}

/// The users of namespaces, asked once per namespace.
pub(crate) struct Tenants {
    ids: TenantIds,
    known: Mutex<HashMap<Namespace, Identity>>,
}

impl Tenants {
    pub fn new(ids: TenantIds) -> Tenants {
        Tenants {
            ids,
            known: Mutex::new(HashMap::new()),
        }
    }

    /// The user `ns`'s code runs as.
    pub async fn identity(&self, ns: &Namespace) -> Result<Identity, DriverError> {
        if let Some(id) = self.known.lock().unwrap().get(ns) {
            return Ok(*id);
        }
        let id = match &self.ids {
            TenantIds::Shared(id) => *id,
            TenantIds::PerNamespace { pool, first, count } => {
                let slot = sless_store::sandbox_uids::slot(pool, ns.as_str())
                    .await
                    .map_err(|e| DriverError::Infra(format!("the sandbox uid of {ns}: {e}")))?;
                if slot >= *count {
                    return Err(DriverError::Infra(format!(
                        "the sandbox's uids ({first} and the {count} after it) are all given: \
                         {ns} would be slot {slot}; widen SLESS_SANDBOX_UIDS"
                    )));
                }
                let uid = first + slot;
                Identity { uid, gid: uid }
            }
        };
        self.known.lock().unwrap().insert(ns.clone(), id);
        Ok(id)
    }
}

/// Where the interpreters and build tools are, and what of the host a jail
/// must see to run them.
#[derive(Debug, Clone, Default)]
pub(crate) struct Toolchain {
    /// The Python interpreter itself (not a shim that finds it).
    pub python: PathBuf,
    pub node: PathBuf,
    pub npm: PathBuf,
    /// Host directories outside `/usr` that hold them (a pyenv or nvm
    /// installation), shown read-only at the same path.
    pub roots: Vec<PathBuf>,
    /// `PATH` inside a jail: the tools' directories, then the system's.
    pub path: String,
}

impl Toolchain {
    /// Asks the configured programs where they really are, `node` and `npm`
    /// looked for in `path` (the worker's `PATH`) unless they are paths.
    /// Blocking.
    pub fn resolve(
        python: &str,
        node: &str,
        npm: &str,
        path: Option<&str>,
    ) -> std::io::Result<Toolchain> {
        let mut roots: Vec<PathBuf> = Vec::new();
        let mut bins: Vec<PathBuf> = Vec::new();
        let out = std::process::Command::new(python)
            .args([
                "-c",
                "import sys, json; print(json.dumps([sys.executable, sys.prefix, sys.base_prefix]))",
            ])
            .stdin(Stdio::null())
            .stderr(Stdio::null())
            .output()
            .map_err(|e| std::io::Error::other(format!("running {python}: {e}")))?;
        let paths: Vec<PathBuf> = serde_json::from_slice(&out.stdout)
            .map_err(|e| std::io::Error::other(format!("{python} did not say where it is: {e}")))?;
        let python_exe = paths
            .first()
            .cloned()
            .unwrap_or_else(|| PathBuf::from(python));
        for prefix in paths.iter().skip(1) {
            add_root(&mut roots, prefix);
        }
        if let Some(dir) = python_exe.parent() {
            bins.push(dir.to_path_buf());
        }
        let mut resolved = |program: &str| -> PathBuf {
            let Some(found) = which(program, path) else {
                return PathBuf::from(program);
            };
            let real = std::fs::canonicalize(&found).unwrap_or_else(|_| found.clone());
            // An installation's prefix: `{prefix}/bin/node`, or npm's
            // `{prefix}/lib/node_modules/npm/bin/npm-cli.js`.
            let prefix = real
                .ancestors()
                .find(|a| a.file_name().is_some_and(|n| n == "bin"))
                .and_then(Path::parent)
                .map(Path::to_path_buf);
            if let Some(prefix) = prefix {
                add_root(&mut roots, &prefix);
            }
            if let Some(dir) = found.parent() {
                bins.push(dir.to_path_buf());
            }
            found
        };
        let node = resolved(node);
        let npm = resolved(npm);
        let mut path_dirs: Vec<String> = Vec::new();
        for dir in bins
            .iter()
            .map(|d| d.to_string_lossy().into_owned())
            .chain(["/usr/local/bin", "/usr/bin", "/bin"].map(String::from))
        {
            if !path_dirs.contains(&dir) {
                path_dirs.push(dir);
            }
        }
        Ok(Toolchain {
            python: python_exe,
            node,
            npm,
            roots,
            path: path_dirs.join(":"),
        })
    }

    /// The tools' directories, read-only at their own paths.
    pub fn mounts(&self) -> impl Iterator<Item = Mount> + '_ {
        self.roots.iter().map(|r| Mount::same_path(r.clone()))
    }
}

/// Adds `dir` when it is outside what every jail sees and not inside a root
/// already there.
pub(crate) fn add_root(roots: &mut Vec<PathBuf>, dir: &Path) {
    let dir = std::fs::canonicalize(dir).unwrap_or_else(|_| dir.to_path_buf());
    if dir.starts_with("/usr") || dir == Path::new("/") || !dir.is_dir() {
        return;
    }
    if roots.iter().any(|r| dir.starts_with(r)) {
        return;
    }
    roots.retain(|r| !r.starts_with(&dir));
    roots.push(dir);
}

/// `program` as `path` (a `PATH`) finds it (a path is returned as it is).
fn which(program: &str, path: Option<&str>) -> Option<PathBuf> {
    if program.contains('/') {
        return Some(PathBuf::from(program));
    }
    std::env::split_paths(path?)
        .map(|d| d.join(program))
        .find(|p| p.is_file())
}

/// Hands a tree (not following links) to `id`, or back to root with
/// `None`: what a build step may write, and what it wrote once it is done.
pub(crate) fn hand_over(dir: &Path, id: Option<Identity>) -> std::io::Result<()> {
    let (uid, gid) = id.map_or((0, 0), |id| (id.uid, id.gid));
    let meta = std::fs::symlink_metadata(dir)?;
    std::os::unix::fs::lchown(dir, Some(uid), Some(gid))?;
    if meta.is_dir() {
        for entry in std::fs::read_dir(dir)? {
            hand_over(&entry?.path(), id)?;
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn roots_are_kept_outside_usr_and_never_nested() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let ab = a.join("b");
        std::fs::create_dir_all(&ab).unwrap();
        let mut roots = Vec::new();
        add_root(&mut roots, Path::new("/usr/lib"));
        add_root(&mut roots, &ab);
        add_root(&mut roots, &a);
        add_root(&mut roots, &ab);
        assert_eq!(roots, vec![std::fs::canonicalize(&a).unwrap()]);
    }

    #[test]
    fn a_tree_is_handed_over_without_following_links() {
        let dir = tempfile::tempdir().unwrap();
        let outside = dir.path().join("outside");
        std::fs::write(&outside, "root's").unwrap();
        let tree = dir.path().join("tree");
        std::fs::create_dir_all(tree.join("sub")).unwrap();
        std::fs::write(tree.join("sub/f"), "x").unwrap();
        std::os::unix::fs::symlink(&outside, tree.join("link")).unwrap();
        let id = Identity {
            uid: 2_000_001,
            gid: 2_000_002,
        };
        hand_over(&tree, Some(id)).unwrap();
        use std::os::unix::fs::MetadataExt;
        let owner = |p: &Path| std::fs::symlink_metadata(p).unwrap().uid();
        assert_eq!(owner(&tree.join("sub/f")), id.uid);
        assert_eq!(owner(&tree.join("link")), id.uid, "the link itself");
        assert_eq!(owner(&outside), 0, "not what it points to");
        hand_over(&tree, None).unwrap();
        assert_eq!(owner(&tree.join("sub/f")), 0);
    }
}
