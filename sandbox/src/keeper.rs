//! The keeper: the process a jail's owner spawns, between the owner and
//! bwrap, so that the owner dying at any moment leaves no jail behind.
//!
//! bwrap (0.8) alone cannot promise that. Its outer process gets our
//! parent-death signal, but the child it clones (the jail's init) arms a
//! parent-death signal of its own only after the namespace setup, without
//! checking that its parent is still there, and ignores what its read of
//! the "go on" eventfd returned: an outer bwrap killed during those few
//! milliseconds leaves an init that goes on, runs the program, and is
//! reparented to the machine's init.
//!
//! The keeper is a child subreaper (such an orphaned init is reparented
//! to it), asks for a catchable parent-death signal (re-checking its
//! parent after arming it), and starts bwrap as its own child, which gets
//! SIGKILL when the keeper ends. When it is told to end (its parent ended,
//! or the owner sent it [`END`], or any other signal that would end a
//! process) or when bwrap ends, it SIGKILLs every child it has or
//! inherits (an init killed takes its whole PID namespace with it), reaps
//! them, and exits as bwrap did: with its exit code (bwrap reports the
//! program's death by signal N as 128+N), or killed by bwrap's signal.
//!
//! It is a fork made in the pre-exec hook that never execs: no second
//! program to install and find, no exec on a jail's start, and the
//! jail's descriptors are already where they must be. A fork is a copy
//! of the owner's memory, shared copy on write: a page the owner writes
//! later would stay the keeper's, so a long-lived jail's keeper would come
//! to hold the owner's heap as it was. The keeper lets go of it at once
//! (`let_go_of_owners_memory`): it never touches anything but its own
//! stack, the programs' code and libc. Between fork
//! and exit it makes raw system calls only (async-signal-safe, no
//! allocation, no lock: glibc's `fork` would take malloc's locks, which
//! another thread of the owner may have held at the fork, so the second
//! fork is a bare `clone`), and it closes every descriptor it does not
//! need, which are the owner's (std's error pipe for the exec among them:
//! the spawn returns once bwrap has exec'd and the keeper closed its
//! copy; another jail's descriptors: they must not live as long as this
//! one).

use std::io;
use std::os::fd::RawFd;

/// The signal that ends a jail's keeper: its parent-death signal, and
/// what [`crate::Sandboxed::kill`] sends it.
pub(crate) const END: libc::c_int = libc::SIGTERM;

/// One `setrlimit` bwrap's process makes before exec.
#[derive(Clone, Copy)]
pub(crate) struct Rlimit {
    pub resource: libc::__rlimit_resource_t,
    pub soft: u64,
    pub hard: u64,
}

/// What the spawned process needs, captured by the pre-exec hook.
pub(crate) struct Setup {
    /// The owner's pid: the keeper's parent.
    pub owner: libc::pid_t,
    /// `cgroup.procs` of the jail's cgroup(s): bwrap joins them, the
    /// keeper does not (killing the cgroup must never kill the keeper
    /// first, nor count it).
    pub join: Vec<RawFd>,
    /// bwrap's descriptors (arguments, seccomp, files, info and block
    /// pipes): closed on exec until bwrap's process clears the flag.
    pub inherit: Vec<RawFd>,
    pub limits: Vec<Rlimit>,
    /// A descriptor the keeper keeps open until it exits (the write end of
    /// slirp4netns's exit pipe: the network helper ends with the jail).
    pub hold: Option<RawFd>,
}

fn last_error() -> io::Error {
    io::Error::last_os_error()
}

impl Setup {
    /// Runs in the spawned process between fork and exec. Returns (`Ok`)
    /// only in bwrap's process, which std then execs; the keeper never
    /// returns from here.
    ///
    /// # Safety
    /// Only between fork and exec, in the child.
    pub(crate) unsafe fn run(&self) -> io::Result<()> {
        // SAFETY: system calls on values and descriptors of this process.
        unsafe {
            // Every signal is queued, never handled: the keeper takes
            // them one by one (a handler of the owner's, inherited by the
            // fork, must not run here). SIGCHLD must not be ignored, or
            // children would not stay to be reaped.
            let mut all: libc::sigset_t = std::mem::zeroed();
            libc::sigfillset(&mut all);
            libc::sigprocmask(libc::SIG_SETMASK, &all, std::ptr::null_mut());
            for sig in 1..32 {
                if sig != libc::SIGKILL && sig != libc::SIGSTOP {
                    libc::signal(sig, libc::SIG_DFL);
                }
            }
            if libc::prctl(libc::PR_SET_PDEATHSIG, END as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(last_error());
            }
            if libc::getppid() != self.owner {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            if libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1 as libc::c_ulong, 0, 0, 0) != 0 {
                return Err(last_error());
            }
            let keeper = libc::getpid();
            let bwrap = libc::syscall(libc::SYS_clone, libc::SIGCHLD as libc::c_long, 0, 0, 0, 0);
            if bwrap < 0 {
                return Err(last_error());
            }
            if bwrap == 0 {
                return self.become_bwrap(keeper);
            }
            keep(bwrap as libc::pid_t, self.hold)
        }
    }

    /// In bwrap's process: dies with the keeper, joins the jail's cgroup,
    /// hands bwrap its descriptors, sets the jail's resource limits.
    unsafe fn become_bwrap(&self, keeper: libc::pid_t) -> io::Result<()> {
        // SAFETY: system calls on values and descriptors of this process.
        unsafe {
            let mut empty: libc::sigset_t = std::mem::zeroed();
            libc::sigemptyset(&mut empty);
            libc::sigprocmask(libc::SIG_SETMASK, &empty, std::ptr::null_mut());
            if libc::prctl(
                libc::PR_SET_PDEATHSIG,
                libc::SIGKILL as libc::c_ulong,
                0,
                0,
                0,
            ) != 0
            {
                return Err(last_error());
            }
            if libc::getppid() != keeper {
                return Err(io::Error::from_raw_os_error(libc::ESRCH));
            }
            for &fd in &self.join {
                if libc::write(fd, b"0".as_ptr().cast(), 1) != 1 {
                    return Err(last_error());
                }
            }
            for &fd in &self.inherit {
                if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                    return Err(last_error());
                }
            }
            for l in &self.limits {
                let value = libc::rlimit {
                    rlim_cur: l.soft,
                    rlim_max: l.hard,
                };
                if libc::setrlimit(l.resource, &value) != 0 {
                    return Err(last_error());
                }
            }
        }
        Ok(())
    }
}

/// Whether a signal sent to the keeper ends the jail: every signal whose
/// default action ends a process (SIGINT from a terminal included), not
/// those that stop, continue or only inform.
fn ends(sig: libc::c_int) -> bool {
    !matches!(
        sig,
        libc::SIGCHLD
            | libc::SIGCONT
            | libc::SIGSTOP
            | libc::SIGTSTP
            | libc::SIGTTIN
            | libc::SIGTTOU
            | libc::SIGURG
            | libc::SIGWINCH
    )
}

/// The keeper's life: waits for bwrap to end or for a signal to end the
/// jail, then kills and reaps everything below it and exits as bwrap did.
unsafe fn keep(bwrap: libc::pid_t, hold: Option<RawFd>) -> ! {
    // SAFETY: system calls on values and descriptors of this process.
    unsafe {
        libc::prctl(libc::PR_SET_NAME, c"sless-keeper".as_ptr(), 0, 0, 0);
        let core = libc::rlimit {
            rlim_cur: 0,
            rlim_max: 0,
        };
        libc::setrlimit(libc::RLIMIT_CORE, &core);
        close_all_but(hold);
        let here = 0u8;
        let_go_of_owners_memory(std::ptr::addr_of!(here) as usize);

        let mut all: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all);
        let mut status: Option<libc::c_int> = None;
        loop {
            reap(bwrap, &mut status, libc::WNOHANG);
            if status.is_some() {
                break;
            }
            let sig = libc::syscall(
                libc::SYS_rt_sigtimedwait,
                &all as *const libc::sigset_t,
                std::ptr::null_mut::<libc::siginfo_t>(),
                std::ptr::null::<libc::timespec>(),
                8 as libc::c_long,
            );
            if sig > 0 && ends(sig as libc::c_int) {
                break;
            }
        }
        // bwrap ended, or the jail must: everything left goes. A jail's
        // init whose bwrap died is reparented here (we are a subreaper)
        // before bwrap can be reaped, so each round sees it.
        loop {
            kill_children(bwrap);
            let mut st: libc::c_int = 0;
            let r = libc::waitpid(-1, &mut st, libc::__WALL);
            if r == bwrap {
                status = Some(st);
            } else if r < 0 {
                if *libc::__errno_location() == libc::EINTR {
                    continue;
                }
                break; // ECHILD: nothing is left
            }
        }
        exit_as(status)
    }
}

/// The smallest anonymous mapping the keeper gives back: the owner's heap,
/// its allocator's arenas and its other threads' stacks are larger; what
/// is smaller (the tail of a program's or library's `.bss`, which libc's
/// own calls may read) is kept.
const LET_GO_FROM: usize = 1 << 20;

/// Gives back the pages of the owner's the keeper shares: every private
/// anonymous mapping of at least [`LET_GO_FROM`] bytes but the one holding
/// `stack` (the keeper's stack, with its thread's TLS), with
/// `MADV_DONTNEED`. Nothing of what the keeper does afterwards reads them.
unsafe fn let_go_of_owners_memory(stack: usize) {
    // SAFETY: system calls with a NUL-terminated path and a stack buffer;
    // madvise on ranges of this process's own mappings.
    unsafe {
        let fd = libc::open(
            c"/proc/self/maps".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        // Line by line, through a window: a line is read once it is whole.
        let mut buf = [0u8; 8192];
        let mut len = 0usize;
        loop {
            let n = libc::read(fd, buf[len..].as_mut_ptr().cast(), buf.len() - len);
            if n <= 0 {
                break;
            }
            len += n as usize;
            let mut start = 0;
            while let Some(end) = buf[start..len].iter().position(|&b| b == b'\n') {
                let_go_of(&buf[start..start + end], stack);
                start += end + 1;
            }
            buf.copy_within(start..len, 0);
            len -= start;
            if len == buf.len() {
                len = 0; // a line longer than the window: skipped
            }
        }
        libc::close(fd);
    }
}

/// `MADV_DONTNEED` on the mapping one line of `/proc/self/maps` describes
/// (`start-end perms offset dev inode [path]`), if it is a private,
/// writable, anonymous one of at least [`LET_GO_FROM`] bytes without
/// `stack` in it.
unsafe fn let_go_of(line: &[u8], stack: usize) {
    let mut fields = line.split(|&b| b == b' ').filter(|f| !f.is_empty());
    let (Some(range), Some(perms), Some(_), Some(_), Some(inode)) = (
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
        fields.next(),
    ) else {
        return;
    };
    let path = fields.next().unwrap_or(b"");
    let anonymous = inode == b"0" && (path.is_empty() || path == b"[heap]");
    if !anonymous || perms.len() < 4 || perms[1] != b'w' || perms[3] != b'p' {
        return;
    }
    let Some(dash) = range.iter().position(|&b| b == b'-') else {
        return;
    };
    let (Some(start), Some(end)) = (hex(&range[..dash]), hex(&range[dash + 1..])) else {
        return;
    };
    if end <= start || end - start < LET_GO_FROM || (start..end).contains(&stack) {
        return;
    }
    // SAFETY: a range of one of this process's mappings, which nothing the
    // keeper runs reads (its stack is not in it).
    unsafe {
        libc::madvise(start as *mut libc::c_void, end - start, libc::MADV_DONTNEED);
    }
}

fn hex(digits: &[u8]) -> Option<usize> {
    let mut v = 0usize;
    for &d in digits {
        let x = (d as char).to_digit(16)? as usize;
        v = v.checked_mul(16)?.checked_add(x)?;
    }
    Some(v)
}

/// Reaps what has ended; bwrap's status goes to `status`.
unsafe fn reap(bwrap: libc::pid_t, status: &mut Option<libc::c_int>, flags: libc::c_int) {
    loop {
        let mut st: libc::c_int = 0;
        // SAFETY: waitpid writes one int.
        let r = unsafe { libc::waitpid(-1, &mut st, flags | libc::__WALL) };
        if r <= 0 {
            return;
        }
        if r == bwrap {
            *status = Some(st);
        }
    }
}

/// SIGKILLs every child of the keeper: those in
/// `/proc/thread-self/children`, and bwrap in any case.
unsafe fn kill_children(bwrap: libc::pid_t) {
    // SAFETY: system calls with a NUL-terminated path and a stack buffer.
    unsafe {
        libc::kill(bwrap, libc::SIGKILL); // ours until reaped: never reused
        let fd = libc::open(
            c"/proc/thread-self/children".as_ptr(),
            libc::O_RDONLY | libc::O_CLOEXEC,
        );
        if fd < 0 {
            return;
        }
        let mut buf = [0u8; 4096];
        let n = libc::read(fd, buf.as_mut_ptr().cast(), buf.len());
        libc::close(fd);
        if n <= 0 {
            return;
        }
        // "pid pid pid ": a number counts only once its space is read (a
        // full buffer may end in the middle of one).
        let mut pid: libc::pid_t = 0;
        for &b in &buf[..n as usize] {
            match b {
                b'0'..=b'9' => pid = pid.saturating_mul(10).saturating_add((b - b'0') as i32),
                _ => {
                    if pid > 0 {
                        libc::kill(pid, libc::SIGKILL);
                    }
                    pid = 0;
                }
            }
        }
    }
}

/// Points stdin, stdout and stderr at `/dev/null` (the owner's pipes must
/// see their end when bwrap's side closes) and closes every other
/// descriptor but `hold`, which goes to 3.
unsafe fn close_all_but(hold: Option<RawFd>) {
    // SAFETY: system calls on this process's descriptors.
    unsafe {
        let null = libc::open(c"/dev/null".as_ptr(), libc::O_RDWR | libc::O_CLOEXEC);
        for fd in 0..3 {
            if null >= 0 {
                libc::dup2(null, fd);
            } else {
                libc::close(fd);
            }
        }
        let mut first = 3;
        if let Some(fd) = hold {
            if fd != 3 {
                libc::dup2(fd, 3);
            }
            first = 4;
        }
        if libc::syscall(libc::SYS_close_range, first, libc::c_uint::MAX, 0) != 0 {
            // Before Linux 5.9: one by one, up to the descriptor limit.
            let mut lim: libc::rlimit = std::mem::zeroed();
            let top = if libc::getrlimit(libc::RLIMIT_NOFILE, &mut lim) == 0 {
                lim.rlim_cur.min(1 << 20) as libc::c_int
            } else {
                1024
            };
            for fd in first..top {
                libc::close(fd);
            }
        }
    }
}

/// Exits as bwrap did: its exit code, or its death by a signal raised
/// again (128+N where the signal does not end a process by default).
unsafe fn exit_as(status: Option<libc::c_int>) -> ! {
    // SAFETY: system calls on plain values.
    unsafe {
        let Some(st) = status else { libc::_exit(127) };
        if libc::WIFEXITED(st) {
            libc::_exit(libc::WEXITSTATUS(st));
        }
        let sig = libc::WTERMSIG(st);
        libc::signal(sig, libc::SIG_DFL);
        let mut all_but: libc::sigset_t = std::mem::zeroed();
        libc::sigfillset(&mut all_but);
        libc::sigdelset(&mut all_but, sig);
        libc::sigprocmask(libc::SIG_SETMASK, &all_but, std::ptr::null_mut());
        libc::kill(libc::getpid(), sig);
        libc::_exit(128 + sig)
    }
}
