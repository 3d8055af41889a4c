//! Turning a [`Jail`] into a command: the descriptors bwrap reads (its
//! arguments, the seccomp program, files, the info pipe), the jail's
//! cgroup, and what the spawned process does before it runs bwrap.

use std::ffi::CString;
use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::process::CommandExt;
use std::process::Command;

use crate::cgroup::Cgroup;
use crate::{Jail, Mount, OWNER_ENV, Result, Sandbox, SandboxError, View, args, io_error};

/// A jail ready to spawn: `command` runs it; once it is spawned (or failed
/// to), call [`Pending::spawned`]. Spawn it from a thread that lives as
/// long as the jail should: bwrap gets the jail's parent-death signal when
/// that thread ends.
pub struct Prepared {
    pub command: Command,
    pub pending: Pending,
}

/// What a prepared jail holds until it is spawned.
pub struct Pending {
    /// Our copies of the descriptors bwrap reads.
    keep: Vec<OwnedFd>,
    info: File,
    cgroup: Option<Cgroup>,
}

impl Pending {
    /// Closes our copies of bwrap's descriptors: call once the command was
    /// spawned (or failed to).
    pub fn spawned(mut self) -> Sandboxed {
        self.keep.clear();
        if let Some(group) = self.cgroup.as_mut() {
            group.joined();
        }
        Sandboxed {
            info: Some(self.info),
            cgroup: self.cgroup,
            sandbox_pid: None,
        }
    }
}

/// A spawned jail.
pub struct Sandboxed {
    info: Option<File>,
    /// The jail's cgroup, where the machine has them.
    pub cgroup: Option<Cgroup>,
    sandbox_pid: Option<u32>,
}

impl Sandboxed {
    /// The pid (as sless sees pids) of the jail's first process: bwrap's
    /// init in its PID namespace, whose child is the program. Blocks until
    /// bwrap has said it (right after it made the namespaces); `None` if
    /// bwrap ended first.
    pub fn sandbox_pid(&mut self) -> Option<u32> {
        if let Some(info) = self.info.take() {
            self.sandbox_pid = read_child_pid(info);
        }
        self.sandbox_pid
    }

    /// The program's pid (as sless sees pids): the first child of the
    /// jail's init, once it has one.
    pub fn program_pid(&mut self) -> Option<u32> {
        let init = self.sandbox_pid()?;
        let children =
            std::fs::read_to_string(format!("/proc/{init}/task/{init}/children")).ok()?;
        children.split_whitespace().next()?.parse().ok()
    }
}

fn read_child_pid(mut info: File) -> Option<u32> {
    let mut text = String::new();
    info.read_to_string(&mut text).ok()?;
    let value: serde_json::Value = serde_json::from_str(&text).ok()?;
    value.get("child-pid")?.as_u64()?.try_into().ok()
}

/// A sealed-in-memory file with `bytes`, positioned at its start, closed on exec.
fn memfd(name: &str, bytes: &[u8]) -> Result<OwnedFd> {
    let cname = CString::new(name).expect("no NUL in memfd names");
    // SAFETY: memfd_create takes a NUL-terminated name and flags.
    let fd = unsafe { libc::memfd_create(cname.as_ptr(), libc::MFD_CLOEXEC) };
    if fd < 0 {
        return Err(io_error("creating an in-memory file for bwrap")(
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: memfd_create returned a new descriptor that nothing else owns.
    let owned = unsafe { OwnedFd::from_raw_fd(fd) };
    let mut file = File::from(owned);
    file.write_all(bytes)
        .map_err(io_error("writing an in-memory file for bwrap"))?;
    // SAFETY: lseek on a descriptor we own.
    if unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_SET) } != 0 {
        return Err(io_error("rewinding an in-memory file for bwrap")(
            std::io::Error::last_os_error(),
        ));
    }
    Ok(OwnedFd::from(file))
}

fn pipe() -> Result<(File, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(io_error("creating a pipe for bwrap")(
            std::io::Error::last_os_error(),
        ));
    }
    // SAFETY: both descriptors are new and ours.
    unsafe { Ok((File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// One `setrlimit` the spawned process makes.
#[derive(Clone, Copy)]
struct Rlimit {
    resource: libc::__rlimit_resource_t,
    soft: u64,
    hard: u64,
}

fn rlimits(jail: &Jail, sandbox: &Sandbox) -> Vec<Rlimit> {
    let mechanism = sandbox.limits_mechanism();
    let mut out = vec![Rlimit {
        resource: libc::RLIMIT_CORE,
        soft: 0,
        hard: 0,
    }];
    let l = &jail.limits;
    if let Some(bytes) = l.file_bytes {
        out.push(Rlimit {
            resource: libc::RLIMIT_FSIZE,
            soft: bytes,
            hard: bytes,
        });
    }
    if let Some(secs) = l.cpu_secs {
        out.push(Rlimit {
            resource: libc::RLIMIT_CPU,
            soft: secs,
            hard: secs.saturating_add(5),
        });
    }
    if let Some(bytes) = l.memory_bytes
        && !mechanism.cgroups()
    {
        out.push(Rlimit {
            resource: libc::RLIMIT_DATA,
            soft: bytes,
            hard: bytes,
        });
    }
    if let Some(n) = l.processes
        && !mechanism.pids_per_jail()
    {
        out.push(Rlimit {
            resource: libc::RLIMIT_NPROC,
            soft: n,
            hard: n,
        });
    }
    out
}

pub(crate) fn prepare(sandbox: &Sandbox, jail: &Jail) -> Result<Prepared> {
    if jail.identity.uid == 0 || jail.identity.gid == 0 {
        return Err(SandboxError::Broken(
            "a jail never runs as uid or gid 0".to_owned(),
        ));
    }
    let inner = &sandbox.inner;
    let mut keep: Vec<OwnedFd> = Vec::new();
    let (info_read, info_write) = pipe()?;
    let mut fds = args::Fds {
        info: info_write.as_raw_fd(),
        ..Default::default()
    };
    keep.push(info_write);
    if jail.view == View::Untrusted {
        let fd = memfd("sless-seccomp", &inner.seccomp)?;
        fds.seccomp = Some(fd.as_raw_fd());
        keep.push(fd);
    }
    let mut mounts = jail.mounts.clone();
    if jail.view == View::Untrusted {
        let (passwd, group) = args::identity_files(jail);
        mounts.push(Mount::File {
            dest: "/etc/passwd".into(),
            contents: passwd,
        });
        mounts.push(Mount::File {
            dest: "/etc/group".into(),
            contents: group,
        });
    }
    for mount in &mounts {
        if let Mount::File { contents, .. } = mount {
            let fd = memfd("sless-file", contents)?;
            fds.files.push(fd.as_raw_fd());
            keep.push(fd);
        }
    }
    let jail_with_files = Jail {
        mounts,
        ..jail.clone()
    };
    let list = args::bwrap_args(&jail_with_files, &inner.host, &inner.setpriv, &fds);
    // bwrap reads only options from --args; the command stays on its
    // command line (it holds no host path but the program's).
    let split = list.iter().position(|a| a == "--").unwrap_or(list.len());
    let (options, program) = list.split_at(split);
    let args_fd = memfd("sless-bwrap-args", &args::nul_separated(options))?;

    let cgroup = match &inner.cgroups {
        Some(h) => Some(
            h.create(&jail.label, jail.limits.memory_bytes, jail.limits.processes)
                .map_err(io_error(format!("making the cgroup of {}", jail.label)))?,
        ),
        None => None,
    };

    let mut command = Command::new(&inner.bwrap);
    command
        .arg("--args")
        .arg(args_fd.as_raw_fd().to_string())
        .args(program);
    command.env_clear();
    command.envs(jail.env.iter().map(|(k, v)| (k, v)));
    if let Some(owner) = &jail.owner {
        command.env(OWNER_ENV, owner);
    }

    let mut inherit: Vec<RawFd> = keep.iter().map(AsRawFd::as_raw_fd).collect();
    inherit.push(args_fd.as_raw_fd());
    keep.push(args_fd);
    let join: Vec<RawFd> = cgroup.as_ref().map(Cgroup::join_fds).unwrap_or_default();
    let limits = rlimits(jail, sandbox);
    let death = jail.parent_death_signal;
    // SAFETY: getpid has no preconditions.
    let parent = unsafe { libc::getpid() };
    let hook = move || -> std::io::Result<()> {
        // Between fork and exec: system calls only, no allocation.
        // SAFETY: plain system calls on descriptors and values we own.
        unsafe {
            for &fd in &join {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for &fd in &inherit {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            for l in &limits {
                let value = libc::rlimit {
                    rlim_cur: l.soft,
                    rlim_max: l.hard,
                };
                if libc::setrlimit(l.resource, &value) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
            }
            // Dispositions are inherited through exec: a signal ignored by
            // whoever started sless (SIGINT, SIGQUIT under a shell's `&`)
            // must not be ignored by bwrap, whose parent-death signal it
            // may be, nor by the program.
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, death as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            if libc::getppid() != parent {
                return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
            }
        }
        Ok(())
    };
    // SAFETY: the hook makes only async-signal-safe system calls and does
    // not allocate.
    unsafe {
        command.pre_exec(hook);
    }
    Ok(Prepared {
        command,
        pending: Pending {
            keep,
            info: info_read,
            cgroup,
        },
    })
}
