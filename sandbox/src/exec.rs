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
use crate::keeper::{self, Rlimit};
use crate::{
    Jail, Mount, Network, OWNER_ENV, Result, Sandbox, SandboxError, View, args, io_error, network,
};

/// A jail ready to spawn: `command` runs it; once it is spawned (or failed
/// to), call [`Pending::spawned`] with the spawned process's pid.
///
/// The spawned process is the jail's *keeper* (see the crate docs), whose
/// child is bwrap, and its exit status is bwrap's: wait on it as on bwrap.
/// Spawn it from a thread that lives as long as the jail should (the
/// keeper ends the jail when that thread ends), with tokio's
/// `kill_on_drop(false)`, and never SIGKILL it: a keeper killed cannot
/// clean up. End a jail with [`Sandboxed::kill`] (or by dropping it).
/// Pre-exec hooks added to `command` run in bwrap's process, not the
/// keeper's.
pub struct Prepared {
    pub command: Command,
    pub pending: Pending,
}

/// What a prepared jail holds until it is spawned.
pub struct Pending {
    /// Our copies of the descriptors bwrap (or its keeper) reads.
    keep: Vec<OwnedFd>,
    info: File,
    cgroup: Option<Cgroup>,
    outbound: Option<network::Outbound>,
}

impl Pending {
    /// Closes our copies of bwrap's descriptors: call once the command was
    /// spawned, with the spawned process's pid, or failed to (`None`).
    pub fn spawned(mut self, child_pid: Option<u32>) -> Sandboxed {
        self.keep.clear();
        if let Some(group) = self.cgroup.as_mut() {
            group.joined();
        }
        Sandboxed {
            info: Some(self.info),
            cgroup: self.cgroup,
            sandbox_pid: None,
            keeper: child_pid.and_then(pidfd_open),
            outbound: self.outbound,
            slirp: None,
        }
    }
}

/// A spawned jail. Dropping it ends the jail ([`Sandboxed::kill`]).
pub struct Sandboxed {
    info: Option<File>,
    /// The jail's cgroup, where the machine has them.
    pub cgroup: Option<Cgroup>,
    sandbox_pid: Option<u32>,
    /// The keeper, as a pidfd: a signal never reaches another process.
    keeper: Option<OwnedFd>,
    /// An `Outbound` jail not yet started.
    pub(crate) outbound: Option<network::Outbound>,
    /// slirp4netns, once started.
    pub(crate) slirp: Option<std::process::Child>,
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

    /// Ends the jail and everything in it, whatever stage its setup is at:
    /// its keeper is told to end it (it SIGKILLs bwrap and whatever
    /// bwrap left, then exits as bwrap did; wait on the spawned process as
    /// usual), and its slirp4netns is killed. Idempotent; does not block.
    pub fn kill(&mut self) {
        if let Some(keeper) = &self.keeper {
            // SAFETY: pidfd_send_signal on a pidfd we own; ESRCH (it has
            // already exited) is fine.
            unsafe {
                libc::syscall(
                    libc::SYS_pidfd_send_signal,
                    keeper.as_raw_fd(),
                    keeper::END,
                    std::ptr::null::<libc::siginfo_t>(),
                    0,
                );
            }
        }
        if let Some(mut slirp) = self.slirp.take() {
            let _ = slirp.kill();
            let _ = slirp.wait();
        }
        // Last: the program must not start (an `Outbound` jail's bwrap
        // goes on when its block pipe closes) before the keeper is told.
        self.outbound = None;
    }
}

impl Drop for Sandboxed {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A pidfd of `pid`, a child not yet waited for (so the pid is its own).
fn pidfd_open(pid: u32) -> Option<OwnedFd> {
    // SAFETY: pidfd_open takes a pid and flags; the descriptor is new.
    let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid as libc::pid_t, 0) };
    if fd < 0 {
        tracing::warn!(
            pid,
            "pidfd_open of a jail's keeper failed ({}); it ends only with its spawning thread",
            std::io::Error::last_os_error()
        );
        return None;
    }
    // SAFETY: a new descriptor that nothing else owns.
    Some(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
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
    let slirp4netns = match jail.network {
        Network::Outbound => Some(sandbox.slirp4netns()?.to_path_buf()),
        Network::Host | Network::Loopback => None,
    };
    let mut keep: Vec<OwnedFd> = Vec::new();
    let (info_read, info_write) = pipe()?;
    let mut fds = args::Fds {
        info: info_write.as_raw_fd(),
        ..Default::default()
    };
    keep.push(info_write);
    // An `Outbound` jail waits on its block pipe until its network is up;
    // the write end of slirp4netns's exit pipe is held by the keeper alone
    // (our copy closes at `spawned`), so slirp4netns ends with the jail.
    let mut outbound = None;
    let mut hold = None;
    if let Some(slirp4netns) = slirp4netns {
        let (block_read, block_write) = pipe()?;
        fds.block = Some(block_read.as_raw_fd());
        keep.push(OwnedFd::from(block_read));
        let (exit_read, exit_write) = pipe()?;
        hold = Some(exit_write.as_raw_fd());
        keep.push(exit_write);
        outbound = Some(network::Outbound {
            slirp4netns,
            owner: jail.owner.clone(),
            block: block_write,
            exit: OwnedFd::from(exit_read),
        });
    }
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
    if jail.network == Network::Outbound {
        // The host's resolver may be on an address the namespace cannot
        // reach (a loopback one); slirp4netns forwards DNS from here.
        mounts.push(Mount::File {
            dest: "/etc/resolv.conf".into(),
            contents: network::RESOLV_CONF.to_vec(),
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

    let mut inherit: Vec<RawFd> = keep
        .iter()
        .map(AsRawFd::as_raw_fd)
        .filter(|fd| Some(*fd) != hold)
        .collect();
    inherit.push(args_fd.as_raw_fd());
    keep.push(args_fd);
    let setup = keeper::Setup {
        // SAFETY: getpid has no preconditions.
        owner: unsafe { libc::getpid() },
        join: cgroup.as_ref().map(Cgroup::join_fds).unwrap_or_default(),
        inherit,
        limits: rlimits(jail, sandbox),
        hold,
    };
    // SAFETY: the hook makes only async-signal-safe system calls and does
    // not allocate (keeper.rs).
    unsafe {
        command.pre_exec(move || setup.run());
    }
    Ok(Prepared {
        command,
        pending: Pending {
            keep,
            info: info_read,
            cgroup,
            outbound,
        },
    })
}
