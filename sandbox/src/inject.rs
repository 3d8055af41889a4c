//! Changing a jail that already runs: showing it a host directory it was
//! started without, and setting its memory and CPU-time limits. A jail started before
//! its program's files were chosen (a warm pool's) gets them this way.
//!
//! The directory is cloned as a detached mount tree (`open_tree`), made
//! read-only, without setuid and devices (`mount_setattr`), and attached in
//! the jail's mount namespace (`setns`, then `move_mount`) by a thread of
//! its own that ends right after, so no other thread of sless ever sees
//! the jail's file system. Linux 5.12 or later.

use std::ffi::CString;
use std::fs::File;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

use crate::{Result, SandboxError, Sandboxed, io_error};

// The kernel's values (linux/mount.h, linux/fcntl.h).
const OPEN_TREE_CLONE: libc::c_uint = 1;
const AT_RECURSIVE: libc::c_uint = 0x8000;
const AT_EMPTY_PATH: libc::c_uint = 0x1000;
const MOVE_MOUNT_F_EMPTY_PATH: libc::c_uint = 4;
const MOUNT_ATTR_RDONLY: u64 = 1;
const MOUNT_ATTR_NOSUID: u64 = 2;
const MOUNT_ATTR_NODEV: u64 = 4;

#[repr(C)]
struct MountAttr {
    attr_set: u64,
    attr_clr: u64,
    propagation: u64,
    userns_fd: u64,
}

impl Sandboxed {
    /// Shows the host directory `source` read-only at `dest` inside the
    /// running jail, over what is there (`dest` must be a directory in the
    /// jail). Blocking, a millisecond or so.
    pub fn mount_read_only(&mut self, source: &Path, dest: &Path) -> Result<()> {
        let pid = self.sandbox_pid().ok_or_else(|| {
            SandboxError::Broken("the jail ended before its files could be shown to it".into())
        })?;
        let what = format!(
            "showing {} at {} in the jail",
            source.display(),
            dest.display()
        );
        let ns = File::open(format!("/proc/{pid}/ns/mnt")).map_err(io_error(what.clone()))?;
        let source = c_path(source)?;
        let dest = c_path(dest)?;
        std::thread::scope(|scope| {
            scope
                .spawn(|| attach(&source, &ns, &dest))
                .join()
                .unwrap_or_else(|_| Err(std::io::Error::other("the mounting thread panicked")))
        })
        .map_err(io_error(what))
    }

    /// Sets the jail's memory limit to `bytes`: its cgroup's, or, where
    /// limits are resource limits, the program's `RLIMIT_DATA`.
    pub fn limit_memory(&mut self, bytes: u64) -> Result<()> {
        if let Some(group) = &self.cgroup {
            return group
                .set_memory(bytes)
                .map_err(io_error("setting the jail's memory limit"));
        }
        let pid = self.program_pid().ok_or_else(|| {
            SandboxError::Broken("the jail's program ended before its limit was set".into())
        })?;
        prlimit(pid, libc::RLIMIT_DATA, bytes, bytes, "RLIMIT_DATA")
    }
}

impl Sandboxed {
    /// Sets the CPU time the jail's program may use (`RLIMIT_CPU`: SIGXCPU,
    /// then SIGKILL five seconds later), counting what it used already.
    pub fn limit_cpu_time(&mut self, secs: u64) -> Result<()> {
        let pid = self.program_pid().ok_or_else(|| {
            SandboxError::Broken("the jail's program ended before its limit was set".into())
        })?;
        prlimit(
            pid,
            libc::RLIMIT_CPU,
            secs,
            secs.saturating_add(5),
            "RLIMIT_CPU",
        )
    }
}

/// Lowers a resource limit of the jail's program. Linux lets a process
/// change another's limits when it has `CAP_SYS_RESOURCE`, which sless may
/// lack (in a container), or when both run as the same user: a thread of
/// its own takes on the program's uid and gid (for itself alone: the raw
/// system calls, not libc's, which would change every thread's) and ends
/// right after.
fn prlimit(
    pid: u32,
    resource: libc::__rlimit_resource_t,
    soft: u64,
    hard: u64,
    name: &str,
) -> Result<()> {
    let what = format!("setting the program's {name}");
    let status =
        std::fs::read_to_string(format!("/proc/{pid}/status")).map_err(io_error(what.clone()))?;
    let real = |key: &str| -> Option<u32> {
        let line = status.lines().find(|l| l.starts_with(key))?;
        line.split_whitespace().nth(1)?.parse().ok()
    };
    let (Some(uid), Some(gid)) = (real("Uid:"), real("Gid:")) else {
        return Err(SandboxError::Broken(format!(
            "{what}: no uid in /proc/{pid}/status"
        )));
    };
    let limit = libc::rlimit {
        rlim_cur: soft,
        rlim_max: hard,
    };
    let set = move || -> std::io::Result<()> {
        // SAFETY: system calls on plain values; this thread ends after.
        unsafe {
            if libc::syscall(libc::SYS_setresgid, gid, gid, gid) != 0
                || libc::syscall(libc::SYS_setresuid, uid, uid, uid) != 0
                || libc::prlimit(pid as libc::pid_t, resource, &limit, std::ptr::null_mut()) != 0
            {
                return Err(std::io::Error::last_os_error());
            }
        }
        Ok(())
    };
    std::thread::scope(|scope| {
        scope
            .spawn(set)
            .join()
            .unwrap_or_else(|_| Err(std::io::Error::other("the thread panicked")))
    })
    .map_err(io_error(what))
}

fn c_path(path: &Path) -> Result<CString> {
    CString::new(path.as_os_str().as_bytes())
        .map_err(|_| SandboxError::Broken(format!("{} has a NUL byte in it", path.display())))
}

fn check(rc: libc::c_long) -> std::io::Result<libc::c_long> {
    if rc < 0 {
        Err(std::io::Error::last_os_error())
    } else {
        Ok(rc)
    }
}

/// Runs on a thread of its own, which leaves sless's file system for the
/// jail's and ends.
fn attach(source: &CString, ns: &File, dest: &CString) -> std::io::Result<()> {
    let empty = c"";
    // SAFETY: system calls with NUL-terminated paths and descriptors we
    // own; the returned descriptor is new and owned by `tree`.
    unsafe {
        let fd = check(libc::syscall(
            libc::SYS_open_tree,
            libc::AT_FDCWD,
            source.as_ptr(),
            OPEN_TREE_CLONE | libc::O_CLOEXEC as libc::c_uint | AT_RECURSIVE,
        ))?;
        let tree = OwnedFd::from_raw_fd(fd as libc::c_int);
        let attr = MountAttr {
            attr_set: MOUNT_ATTR_RDONLY | MOUNT_ATTR_NOSUID | MOUNT_ATTR_NODEV,
            attr_clr: 0,
            propagation: 0,
            userns_fd: 0,
        };
        check(libc::syscall(
            libc::SYS_mount_setattr,
            tree.as_raw_fd(),
            empty.as_ptr(),
            AT_EMPTY_PATH | AT_RECURSIVE,
            &attr as *const MountAttr,
            std::mem::size_of::<MountAttr>(),
        ))?;
        // This thread alone enters the jail's mount namespace.
        if libc::unshare(libc::CLONE_FS) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        if libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNS) != 0 {
            return Err(std::io::Error::last_os_error());
        }
        check(libc::syscall(
            libc::SYS_move_mount,
            tree.as_raw_fd(),
            empty.as_ptr(),
            libc::AT_FDCWD,
            dest.as_ptr(),
            MOVE_MOUNT_F_EMPTY_PATH,
        ))?;
    }
    Ok(())
}
