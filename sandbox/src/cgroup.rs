//! Cgroups of jails: where the machine lets sless write the cgroup tree,
//! each jail gets a cgroup of its own with a memory limit and a process
//! limit, and a count of the times the kernel killed something in it for
//! memory.
//!
//! - **cgroup v2**: `memory.max`, `memory.swap.max`, `pids.max`,
//!   `memory.events` (`oom_kill`), `cgroup.kill`. Jails' cgroups need a
//!   parent that holds no process (the "no internal processes" rule): the
//!   root of the tree, or a cgroup delegated to sless
//!   ([`crate::SandboxOptions::cgroup_parent`]).
//! - **cgroup v1**: the `memory` hierarchy (`memory.limit_in_bytes`,
//!   `memory.memsw.limit_in_bytes`, `memory.oom_control`) and the `pids`
//!   hierarchy (`pids.max`), below sless's own cgroup in each.
//!
//! Every sless process keeps its jails below a cgroup of its own,
//! `sless-{pid}-{random}`; one left by a process that is gone is removed
//! (its processes killed) by the next that looks.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::{AsRawFd, RawFd};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How memory and process limits are enforced.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LimitsMechanism {
    CgroupV2,
    /// The v1 memory hierarchy; `pids` says whether the pids one is there too.
    CgroupV1 {
        pids: bool,
    },
    /// `RLIMIT_DATA` for memory, `RLIMIT_NPROC` (per uid) for processes.
    Rlimits,
}

impl LimitsMechanism {
    /// Whether jails have a cgroup with a memory limit.
    pub fn cgroups(self) -> bool {
        !matches!(self, LimitsMechanism::Rlimits)
    }

    /// Whether a process limit is a cgroup's (per jail) rather than
    /// `RLIMIT_NPROC` (per uid).
    pub fn pids_per_jail(self) -> bool {
        matches!(
            self,
            LimitsMechanism::CgroupV2 | LimitsMechanism::CgroupV1 { pids: true }
        )
    }
}

impl std::fmt::Display for LimitsMechanism {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            LimitsMechanism::CgroupV2 => "cgroup v2 (memory.max, pids.max)",
            LimitsMechanism::CgroupV1 { pids: true } => {
                "cgroup v1 (memory.limit_in_bytes, pids.max)"
            }
            LimitsMechanism::CgroupV1 { pids: false } => {
                "cgroup v1 (memory.limit_in_bytes; processes: RLIMIT_NPROC per uid)"
            }
            LimitsMechanism::Rlimits => {
                "resource limits (memory: RLIMIT_DATA; processes: RLIMIT_NPROC per uid)"
            }
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Version {
    V1,
    V2,
}

/// The cgroups of one sless process's jails.
#[derive(Debug)]
pub(crate) struct Hierarchy {
    version: Version,
    /// `sless-{pid}-{random}`: v2 one directory; v1 the memory one, then
    /// the pids one if there is one.
    bases: Vec<PathBuf>,
    next: AtomicU64,
    /// Jail cgroups that could not be removed yet.
    graveyard: Arc<Mutex<Vec<PathBuf>>>,
}

impl Hierarchy {
    /// Finds a writable place for jails' cgroups and makes this process's
    /// base there. `Ok(None)`: cgroups are not usable here (the reason is
    /// the error of `Err` only when `parent` was configured).
    pub(crate) fn detect(parent: Option<&Path>) -> Result<Option<Hierarchy>, String> {
        let own = std::fs::read_to_string("/proc/self/cgroup")
            .map_err(|e| format!("reading /proc/self/cgroup: {e}"))?;
        let mounts = std::fs::read_to_string("/proc/self/mountinfo")
            .map_err(|e| format!("reading /proc/self/mountinfo: {e}"))?;
        let v2_dir = own_dir(&own, &mounts, None);
        let memory_v1 = own_dir(&own, &mounts, Some("memory"));
        if let Some(parent) = parent {
            return Hierarchy::v2(parent, true).map(Some);
        }
        if let Some(memory) = memory_v1 {
            let pids = own_dir(&own, &mounts, Some("pids"));
            return Hierarchy::v1(&memory, pids.as_deref()).map(Some);
        }
        match v2_dir {
            Some(dir) => Hierarchy::v2(&dir, false).map(Some),
            None => Err("no cgroup hierarchy with a memory controller is mounted".into()),
        }
    }

    fn v1(memory: &Path, pids: Option<&Path>) -> Result<Hierarchy, String> {
        let name = base_name();
        let mut bases = vec![];
        for dir in std::iter::once(memory).chain(pids) {
            remove_stale(dir);
            let base = dir.join(&name);
            std::fs::create_dir(&base)
                .map_err(|e| format!("cannot create a cgroup below {}: {e}", dir.display()))?;
            bases.push(base);
        }
        let h = Hierarchy {
            version: Version::V1,
            bases,
            next: AtomicU64::new(0),
            graveyard: Arc::default(),
        };
        h.probe()?;
        Ok(h)
    }

    fn v2(parent: &Path, configured: bool) -> Result<Hierarchy, String> {
        let controllers = std::fs::read_to_string(parent.join("cgroup.controllers"))
            .map_err(|e| format!("{} is not a cgroup v2 directory: {e}", parent.display()))?;
        let has = |c: &str| controllers.split_whitespace().any(|x| x == c);
        if !has("memory") || !has("pids") {
            return Err(format!(
                "the cgroup {} has no memory and pids controllers (it has: {})",
                parent.display(),
                controllers.trim()
            ));
        }
        enable_controllers(parent).map_err(|e| {
            if configured {
                format!(
                    "cannot enable memory and pids below {}: {e}",
                    parent.display()
                )
            } else {
                format!(
                    "cannot enable memory and pids below sless's own cgroup {} ({e}); \
                     give sless a delegated cgroup with SLESS_SANDBOX_CGROUP",
                    parent.display()
                )
            }
        })?;
        remove_stale(parent);
        let base = parent.join(base_name());
        std::fs::create_dir(&base)
            .map_err(|e| format!("cannot create a cgroup below {}: {e}", parent.display()))?;
        enable_controllers(&base)
            .map_err(|e| format!("cannot enable memory and pids in {}: {e}", base.display()))?;
        let h = Hierarchy {
            version: Version::V2,
            bases: vec![base],
            next: AtomicU64::new(0),
            graveyard: Arc::default(),
        };
        h.probe()?;
        Ok(h)
    }

    /// Makes a jail cgroup with a limit, and removes it again.
    fn probe(&self) -> Result<(), String> {
        let group = self
            .create("probe", Some(16 << 20), Some(8))
            .map_err(|e| format!("cannot set limits on a cgroup: {e}"))?;
        drop(group);
        Ok(())
    }

    pub(crate) fn mechanism(&self) -> LimitsMechanism {
        match self.version {
            Version::V2 => LimitsMechanism::CgroupV2,
            Version::V1 => LimitsMechanism::CgroupV1 {
                pids: self.bases.len() > 1,
            },
        }
    }

    /// A new cgroup for one jail with these limits.
    pub(crate) fn create(
        &self,
        label: &str,
        memory_bytes: Option<u64>,
        processes: Option<u64>,
    ) -> std::io::Result<Cgroup> {
        self.bury();
        let n = self.next.fetch_add(1, Ordering::Relaxed);
        let name = format!("{}-{n}", sanitize(label));
        let mut group = Cgroup {
            version: self.version,
            dirs: Vec::with_capacity(self.bases.len()),
            procs: Vec::with_capacity(self.bases.len()),
            graveyard: self.graveyard.clone(),
        };
        for base in &self.bases {
            let dir = base.join(&name);
            std::fs::create_dir(&dir)?;
            group.dirs.push(dir);
        }
        group.limit(memory_bytes, processes)?;
        for dir in &group.dirs {
            group.procs.push(
                OpenOptions::new()
                    .write(true)
                    .open(dir.join("cgroup.procs"))?,
            );
        }
        Ok(group)
    }

    /// Retries removing jail cgroups that were busy when their jail ended.
    fn bury(&self) {
        let mut graves = self.graveyard.lock().unwrap_or_else(|p| p.into_inner());
        graves.retain(|dir| std::fs::remove_dir(dir).is_err() && dir.exists());
    }
}

impl Drop for Hierarchy {
    fn drop(&mut self) {
        for base in &self.bases {
            remove_tree(base);
        }
    }
}

/// The cgroup of one jail. Dropping it kills what is left in it and
/// removes it.
#[derive(Debug)]
pub struct Cgroup {
    version: Version,
    dirs: Vec<PathBuf>,
    /// `cgroup.procs` of each directory, open for the jail to join.
    procs: Vec<File>,
    graveyard: Arc<Mutex<Vec<PathBuf>>>,
}

impl Cgroup {
    fn limit(&self, memory_bytes: Option<u64>, processes: Option<u64>) -> std::io::Result<()> {
        let memory_dir = &self.dirs[0];
        if let Some(bytes) = memory_bytes {
            match self.version {
                Version::V2 => {
                    write_value(&memory_dir.join("memory.max"), bytes)?;
                    // No swap to escape the limit into, where there is swap.
                    let _ = write_value(&memory_dir.join("memory.swap.max"), 0);
                }
                Version::V1 => {
                    write_value(&memory_dir.join("memory.limit_in_bytes"), bytes)?;
                    let memsw = memory_dir.join("memory.memsw.limit_in_bytes");
                    if memsw.exists() {
                        let _ = write_value(&memsw, bytes);
                    }
                }
            }
        }
        if let Some(n) = processes {
            let pids_dir = match self.version {
                Version::V2 => self.dirs.first(),
                Version::V1 => self.dirs.get(1),
            };
            if let Some(dir) = pids_dir {
                write_value(&dir.join("pids.max"), n)?;
            }
        }
        Ok(())
    }

    /// Sets the memory limit (and no swap past it) of a cgroup in use.
    pub(crate) fn set_memory(&self, bytes: u64) -> std::io::Result<()> {
        self.limit(Some(bytes), None)
    }

    /// The descriptors a process writes `0` to, to join this cgroup.
    pub(crate) fn join_fds(&self) -> Vec<RawFd> {
        self.procs.iter().map(AsRawFd::as_raw_fd).collect()
    }

    /// Closes the descriptors used to join (after the jail has spawned).
    pub(crate) fn joined(&mut self) {
        self.procs.clear();
    }

    /// How often the kernel killed a process of this cgroup for memory.
    pub fn oom_kills(&self) -> u64 {
        let dir = &self.dirs[0];
        let (file, key) = match self.version {
            Version::V2 => ("memory.events", "oom_kill"),
            Version::V1 => ("memory.oom_control", "oom_kill"),
        };
        let text = std::fs::read_to_string(dir.join(file)).unwrap_or_default();
        let counted = text.lines().find_map(|line| {
            let (k, v) = line.split_once(' ')?;
            (k == key).then(|| v.trim().parse::<u64>().ok()).flatten()
        });
        match (counted, self.version) {
            (Some(n), _) => n,
            // Kernels before 4.13 count no kills: hitting the limit is the
            // nearest sign.
            (None, Version::V1) => std::fs::read_to_string(dir.join("memory.failcnt"))
                .ok()
                .and_then(|t| t.trim().parse().ok())
                .unwrap_or(0),
            (None, Version::V2) => 0,
        }
    }

    /// The most memory the jail used at once, in bytes, where the kernel
    /// tells.
    pub fn memory_peak(&self) -> Option<u64> {
        let file = match self.version {
            Version::V2 => "memory.peak",
            Version::V1 => "memory.max_usage_in_bytes",
        };
        std::fs::read_to_string(self.dirs[0].join(file))
            .ok()
            .and_then(|t| t.trim().parse().ok())
    }

    /// The processes in the cgroup now.
    pub fn processes(&self) -> Vec<u32> {
        std::fs::read_to_string(self.dirs[0].join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect()
    }

    /// Kills every process in the cgroup (SIGKILL) and waits briefly
    /// until none is left.
    pub fn kill_all(&self) {
        kill_dir(&self.dirs[0], self.version);
    }
}

impl Drop for Cgroup {
    fn drop(&mut self) {
        self.procs.clear();
        self.kill_all();
        let mut graves = self.graveyard.lock().unwrap_or_else(|p| p.into_inner());
        for dir in self.dirs.drain(..) {
            if std::fs::remove_dir(&dir).is_err() && dir.exists() {
                graves.push(dir);
            }
        }
    }
}

fn kill_dir(dir: &Path, version: Version) {
    if version == Version::V2 && write_value(&dir.join("cgroup.kill"), 1).is_ok() {
        wait_empty(dir);
        return;
    }
    for _ in 0..100 {
        let pids: Vec<i32> = std::fs::read_to_string(dir.join("cgroup.procs"))
            .unwrap_or_default()
            .lines()
            .filter_map(|l| l.trim().parse().ok())
            .collect();
        if pids.is_empty() {
            return;
        }
        for pid in pids {
            // SAFETY: kill(2) has no memory-safety preconditions.
            unsafe {
                libc::kill(pid, libc::SIGKILL);
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn wait_empty(dir: &Path) {
    for _ in 0..200 {
        let procs = std::fs::read_to_string(dir.join("cgroup.procs")).unwrap_or_default();
        if procs.trim().is_empty() {
            return;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

fn write_value(path: &Path, value: u64) -> std::io::Result<()> {
    let mut f = OpenOptions::new().write(true).open(path)?;
    f.write_all(value.to_string().as_bytes())
}

fn enable_controllers(dir: &Path) -> std::io::Result<()> {
    let current = std::fs::read_to_string(dir.join("cgroup.subtree_control"))?;
    let on = |c: &str| current.split_whitespace().any(|x| x == c);
    if on("memory") && on("pids") {
        return Ok(());
    }
    let mut f = OpenOptions::new()
        .write(true)
        .open(dir.join("cgroup.subtree_control"))?;
    f.write_all(b"+memory +pids")
}

fn base_name() -> String {
    format!("sless-{}-{:08x}", std::process::id(), rand_u32())
}

fn rand_u32() -> u32 {
    let mut b = [0u8; 4];
    // SAFETY: getrandom writes at most `b.len()` bytes into `b`.
    let n = unsafe { libc::getrandom(b.as_mut_ptr().cast(), b.len(), 0) };
    if n == 4 {
        u32::from_ne_bytes(b)
    } else {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos())
    }
}

/// `label` reduced to what is safe in a cgroup's name.
fn sanitize(label: &str) -> String {
    let s: String = label
        .chars()
        .take(100)
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '_'
            }
        })
        .collect();
    if s.is_empty() || s.starts_with('.') {
        format!("j{s}")
    } else {
        s
    }
}

/// Removes the `sless-{pid}-*` cgroups below `dir` whose process is gone.
fn remove_stale(dir: &Path) {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().into_owned();
        let Some(pid) = name
            .strip_prefix("sless-")
            .and_then(|r| r.split('-').next())
            .and_then(|p| p.parse::<u32>().ok())
        else {
            continue;
        };
        if !Path::new(&format!("/proc/{pid}")).exists() {
            tracing::info!(cgroup = %entry.path().display(), "removing the cgroups of a sless process that is gone");
            remove_tree(&entry.path());
        }
    }
}

/// Kills what is in a base's jail cgroups and removes them and the base.
fn remove_tree(base: &Path) {
    let version = if base.join("cgroup.controllers").exists() {
        Version::V2
    } else {
        Version::V1
    };
    if let Ok(entries) = std::fs::read_dir(base) {
        for entry in entries.flatten() {
            if entry.file_type().is_ok_and(|t| t.is_dir()) {
                kill_dir(&entry.path(), version);
                remove_dir_patiently(&entry.path());
            }
        }
    }
    kill_dir(base, version);
    remove_dir_patiently(base);
}

fn remove_dir_patiently(dir: &Path) {
    for _ in 0..100 {
        if std::fs::remove_dir(dir).is_ok() || !dir.exists() {
            return;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    tracing::warn!(cgroup = %dir.display(), "could not remove a cgroup");
}

/// The directory of this process's cgroup in the hierarchy with
/// `controller` (v1), or in the v2 tree (`None`), if it is mounted.
fn own_dir(own: &str, mountinfo: &str, controller: Option<&str>) -> Option<PathBuf> {
    let path = own.lines().find_map(|line| {
        let mut parts = line.splitn(3, ':');
        let (id, controllers, path) = (parts.next()?, parts.next()?, parts.next()?);
        let matches = match controller {
            None => id == "0" && controllers.is_empty(),
            Some(c) => controllers.split(',').any(|x| x == c),
        };
        matches.then(|| path.to_owned())
    })?;
    mountinfo.lines().find_map(|line| {
        let (before, after) = line.split_once(" - ")?;
        let fields: Vec<&str> = before.split(' ').collect();
        let (root, mount_point) = (*fields.get(3)?, *fields.get(4)?);
        let mut after = after.split(' ');
        let (fstype, _source, options) = (after.next()?, after.next()?, after.next()?);
        let matches = match controller {
            None => fstype == "cgroup2",
            Some(c) => fstype == "cgroup" && options.split(',').any(|x| x == c),
        };
        if !matches {
            return None;
        }
        let relative = path.strip_prefix(root).unwrap_or(&path);
        let relative = relative.trim_start_matches('/');
        Some(Path::new(mount_point).join(relative))
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const MOUNTINFO: &str = "\
24 30 0:22 / /sys/fs/cgroup rw,relatime - tmpfs tmpfs rw,mode=755
25 24 0:23 / /sys/fs/cgroup/memory rw,relatime - cgroup cgroup rw,memory
26 24 0:24 / /sys/fs/cgroup/pids rw,relatime - cgroup cgroup rw,pids
27 24 0:25 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw
";

    #[test]
    fn own_cgroups_are_found_in_each_hierarchy() {
        let own = "8:pids:/\n4:memory:/process_api/abc\n0::/\n";
        assert_eq!(
            own_dir(own, MOUNTINFO, Some("memory")),
            Some(PathBuf::from("/sys/fs/cgroup/memory/process_api/abc"))
        );
        assert_eq!(
            own_dir(own, MOUNTINFO, Some("pids")),
            Some(PathBuf::from("/sys/fs/cgroup/pids"))
        );
        assert_eq!(
            own_dir(own, MOUNTINFO, None),
            Some(PathBuf::from("/sys/fs/cgroup/unified"))
        );
        assert_eq!(own_dir(own, MOUNTINFO, Some("cpu")), None);
    }

    #[test]
    fn a_cgroup_namespace_root_is_taken_off_the_path() {
        let mounts = "30 24 0:23 /kubepods/x /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n";
        assert_eq!(
            own_dir("0::/kubepods/x/app\n", mounts, None),
            Some(PathBuf::from("/sys/fs/cgroup/app"))
        );
    }

    #[test]
    fn labels_become_safe_names() {
        assert_eq!(sanitize("fn-sless-0123/hello v3"), "fn-sless-0123_hello_v3");
        assert_eq!(sanitize("../x"), "j.._x");
        assert_eq!(sanitize(""), "j");
    }
}
