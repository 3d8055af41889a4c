//! A jail's network: the host's, or a network namespace of its own with
//! only its loopback, or one whose traffic goes out through slirp4netns
//! ([`crate::Network`]).
//!
//! An `Outbound` jail's bwrap makes the namespace and then waits, before
//! it forks the program, until a byte comes on its block pipe (bwrap's
//! `--block-fd`). [`Sandboxed::start`] attaches slirp4netns (as root) to
//! the namespace by a descriptor of it, waits until slirp4netns says the
//! network is configured, and writes that byte. slirp4netns's exit pipe
//! is held open by the jail's keeper alone, so it ends with the jail (and
//! with its owner, whose keeper ends the jail then).

use std::fs::File;
use std::io::{Read, Write};
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::os::unix::fs::MetadataExt;
use std::os::unix::process::CommandExt;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::{OWNER_ENV, Result, SandboxError, Sandboxed, io_error};

/// `/etc/resolv.conf` of an `Outbound` jail: slirp4netns's DNS forwarder.
pub(crate) const RESOLV_CONF: &[u8] = b"nameserver 10.0.2.3\n";

/// How long slirp4netns may take to configure a jail's network.
const READY_WITHIN: Duration = Duration::from_secs(10);

/// What an `Outbound` jail needs until its network is up.
pub(crate) struct Outbound {
    pub slirp4netns: PathBuf,
    /// The jail's owner, set on slirp4netns as on bwrap ([`OWNER_ENV`]).
    pub owner: Option<String>,
    /// The write end of bwrap's block pipe: a byte lets the program start.
    pub block: OwnedFd,
    /// The read end of slirp4netns's exit pipe (the keeper holds the
    /// write end).
    pub exit: OwnedFd,
}

impl Sandboxed {
    /// Sets up the network of an `Outbound` jail and lets its program
    /// start: call once, after [`crate::Pending::spawned`]. A no-op for
    /// other jails (and after the first call). Blocking (a few
    /// milliseconds). On an error the jail is killed.
    pub fn start(&mut self) -> Result<()> {
        let Some(outbound) = self.outbound.take() else {
            return Ok(());
        };
        let started = self.attach(&outbound).and_then(|slirp| {
            self.slirp = Some(slirp);
            File::from(
                outbound
                    .block
                    .try_clone()
                    .map_err(io_error("the block pipe"))?,
            )
            .write_all(b"1")
            .map_err(|e| {
                SandboxError::Broken(format!(
                    "the jail ended before its program could start: {e}"
                ))
            })
        });
        if started.is_err() {
            self.kill();
        }
        drop(outbound);
        started
    }

    /// Runs slirp4netns on the jail's network namespace until it is ready.
    fn attach(&mut self, outbound: &Outbound) -> Result<Child> {
        let pid = self.sandbox_pid().ok_or_else(|| {
            SandboxError::Broken("the jail ended before its network was set up".into())
        })?;
        let what = "attaching slirp4netns to the jail's network namespace";
        let netns = File::open(format!("/proc/{pid}/ns/net")).map_err(io_error(what))?;
        // A pid reused by a process of the host's namespace must never
        // give slirp4netns (which would add a route) the host's network.
        let host = std::fs::metadata("/proc/self/ns/net").map_err(io_error(what))?;
        if netns.metadata().map_err(io_error(what))?.ino() == host.ino() {
            return Err(SandboxError::Broken(format!(
                "{what}: the jail (pid {pid}) has the host's network namespace"
            )));
        }
        // bwrap brings the namespace's loopback up first, over netlink, and
        // dies if a reply it reads is not its own: slirp4netns configuring
        // the namespace meanwhile makes that happen now and then.
        loopback_up(pid)?;
        let (mut ready_read, ready_write) = pipe().map_err(io_error(what))?;
        let passed: [RawFd; 3] = [
            ready_write.as_raw_fd(),
            outbound.exit.as_raw_fd(),
            netns.as_raw_fd(),
        ];
        let mut command = Command::new(&outbound.slirp4netns);
        command
            .args([
                "--configure",
                "--mtu=65520",
                "--disable-host-loopback",
                "--enable-sandbox",
                "--enable-seccomp",
                "--netns-type=path",
            ])
            .arg(format!("--ready-fd={}", passed[0]))
            .arg(format!("--exit-fd={}", passed[1]))
            .arg(format!("/proc/self/fd/{}", passed[2]))
            .arg("tap0")
            .env_clear()
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        if let Some(owner) = &outbound.owner {
            command.env(OWNER_ENV, owner);
        }
        // SAFETY: fcntl only, between fork and exec.
        unsafe {
            command.pre_exec(move || {
                for fd in passed {
                    if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                }
                Ok(())
            });
        }
        let mut slirp = command.spawn().map_err(io_error(format!(
            "running {}",
            outbound.slirp4netns.display()
        )))?;
        drop(ready_write);
        drop(netns);
        let ready = wait_readable(&ready_read, READY_WITHIN).and_then(|()| {
            let mut byte = [0u8; 1];
            ready_read.read(&mut byte)
        });
        match ready {
            Ok(1) => Ok(slirp),
            outcome => {
                let _ = slirp.kill();
                let status = slirp.wait();
                Err(SandboxError::Broken(format!(
                    "slirp4netns did not set up the jail's network ({}; {})",
                    match outcome {
                        Ok(_) => "it ended first".to_owned(),
                        Err(e) => e.to_string(),
                    },
                    status.map_or_else(|e| e.to_string(), |s| s.to_string())
                )))
            }
        }
    }
}

/// Waits until the loopback of `pid`'s network namespace is up: its
/// address is in the local routing table.
fn loopback_up(pid: u32) -> Result<()> {
    let deadline = Instant::now() + READY_WITHIN;
    loop {
        let routes = std::fs::read_to_string(format!("/proc/{pid}/net/fib_trie"))
            .map_err(io_error("reading the jail's routing table"))?;
        if routes.contains("127.0.0.1") {
            return Ok(());
        }
        if Instant::now() >= deadline {
            return Err(SandboxError::Broken(
                "bwrap did not bring the jail's loopback up".into(),
            ));
        }
        std::thread::sleep(Duration::from_micros(200));
    }
}

fn pipe() -> std::io::Result<(File, OwnedFd)> {
    let mut fds = [0 as RawFd; 2];
    // SAFETY: pipe2 writes two descriptors into the array.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        return Err(std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors are new and ours.
    unsafe { Ok((File::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1]))) }
}

/// Waits until `file` is readable (or its writers are gone).
fn wait_readable(file: &File, within: Duration) -> std::io::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(std::io::Error::from(std::io::ErrorKind::TimedOut));
        }
        let mut poll = libc::pollfd {
            fd: file.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let ms = left.as_millis().clamp(1, i32::MAX as u128) as i32;
        // SAFETY: poll on one pollfd we own.
        match unsafe { libc::poll(&mut poll, 1, ms) } {
            n if n > 0 => return Ok(()),
            0 => {}
            _ => {
                let e = std::io::Error::last_os_error();
                if e.kind() != std::io::ErrorKind::Interrupted {
                    return Err(e);
                }
            }
        }
    }
}
