//! The seccomp filter of untrusted jails, as the classic BPF program bwrap's
//! `--seccomp` loads (an array of `struct sock_filter`).
//!
//! It refuses (EPERM) what an unprivileged process needs for nothing a
//! function does and what kernel exploits reach for: new user namespaces
//! (`unshare`/`clone` with `CLONE_NEWUSER`; `clone3`, whose flags a filter
//! cannot read, answers ENOSYS so the C library falls back to `clone`), the
//! kernel keyring, `bpf`, `perf_event_open`, `userfaultfd` and io_uring
//! (ENOSYS: runtimes fall back to plain system calls). Calls of another
//! architecture's ABI (32-bit x86 on x86_64, x32) are refused altogether.

/// `SECCOMP_RET_ALLOW`.
const RET_ALLOW: u32 = 0x7fff_0000;
/// `SECCOMP_RET_ERRNO`, to be or'ed with the errno.
const RET_ERRNO: u32 = 0x0005_0000;

// Classic BPF opcodes.
const LD_W_ABS: u16 = 0x20;
const JEQ_K: u16 = 0x15;
const JGE_K: u16 = 0x35;
const JSET_K: u16 = 0x45;
const RET_K: u16 = 0x06;

/// Offsets into `struct seccomp_data`.
const NR: u32 = 0;
const ARCH: u32 = 4;
/// The low 32 bits of the first argument (little-endian).
const ARG0_LOW: u32 = 16;

const CLONE_NEWUSER: u32 = 0x1000_0000;

#[cfg(target_arch = "x86_64")]
const AUDIT_ARCH: u32 = 0xc000_003e;
#[cfg(target_arch = "aarch64")]
const AUDIT_ARCH: u32 = 0xc000_00b7;

/// x32 system calls are x86_64's numbers with this bit set.
#[cfg(target_arch = "x86_64")]
const X32_BIT: Option<u32> = Some(0x4000_0000);
#[cfg(not(target_arch = "x86_64"))]
const X32_BIT: Option<u32> = None;

#[derive(Clone, Copy)]
struct Insn {
    code: u16,
    jt: u8,
    jf: u8,
    k: u32,
}

const fn stmt(code: u16, k: u32) -> Insn {
    Insn {
        code,
        jt: 0,
        jf: 0,
        k,
    }
}

const fn jump(code: u16, k: u32, jt: u8, jf: u8) -> Insn {
    Insn { code, jt, jf, k }
}

fn nr(call: libc::c_long) -> u32 {
    u32::try_from(call).expect("system call numbers are small")
}

/// What a denied call answers.
#[derive(Clone, Copy)]
enum Deny {
    Eperm,
    Enosys,
}

impl Deny {
    fn ret(self) -> Insn {
        let errno = match self {
            Deny::Eperm => libc::EPERM,
            Deny::Enosys => libc::ENOSYS,
        };
        stmt(RET_K, RET_ERRNO | errno as u32)
    }
}

/// The program, as bytes for bwrap's `--seccomp`.
pub(crate) fn filter() -> Vec<u8> {
    let plain: &[(libc::c_long, Deny)] = &[
        (libc::SYS_clone3, Deny::Enosys),
        (libc::SYS_keyctl, Deny::Eperm),
        (libc::SYS_add_key, Deny::Eperm),
        (libc::SYS_request_key, Deny::Eperm),
        (libc::SYS_bpf, Deny::Eperm),
        (libc::SYS_perf_event_open, Deny::Eperm),
        (libc::SYS_userfaultfd, Deny::Eperm),
        (libc::SYS_io_uring_setup, Deny::Enosys),
        (libc::SYS_io_uring_enter, Deny::Enosys),
        (libc::SYS_io_uring_register, Deny::Enosys),
    ];
    // Calls refused only when their first argument has CLONE_NEWUSER.
    let flagged = [libc::SYS_unshare, libc::SYS_clone];

    let mut p: Vec<Insn> = Vec::new();
    p.push(stmt(LD_W_ABS, ARCH));
    // Another ABI: refuse everything (jump to the EPERM return at the end).
    let arch_check = p.len();
    p.push(jump(JEQ_K, AUDIT_ARCH, 0, 0)); // jf patched below
    p.push(stmt(LD_W_ABS, NR));
    let mut to_eperm: Vec<usize> = vec![];
    if let Some(bit) = X32_BIT {
        to_eperm.push(p.len());
        p.push(jump(JGE_K, bit, 0, 0)); // jt patched
    }
    for &(call, deny) in plain {
        // Equal: fall into the return just after; else skip it.
        p.push(jump(JEQ_K, nr(call), 0, 1));
        p.push(deny.ret());
    }
    for call in flagged {
        // Equal: load the flags and test them; else skip those 4.
        p.push(jump(JEQ_K, nr(call), 0, 4));
        p.push(stmt(LD_W_ABS, ARG0_LOW));
        p.push(jump(JSET_K, CLONE_NEWUSER, 0, 1));
        p.push(Deny::Eperm.ret());
        p.push(stmt(RET_K, RET_ALLOW));
    }
    p.push(stmt(RET_K, RET_ALLOW));
    let eperm = p.len();
    p.push(Deny::Eperm.ret());

    let offset = |from: usize| u8::try_from(eperm - from - 1).expect("the filter is short");
    p[arch_check].jf = offset(arch_check);
    for at in to_eperm {
        p[at].jt = offset(at);
    }

    let mut bytes = Vec::with_capacity(p.len() * 8);
    for insn in p {
        bytes.extend_from_slice(&insn.code.to_ne_bytes());
        bytes.push(insn.jt);
        bytes.push(insn.jf);
        bytes.extend_from_slice(&insn.k.to_ne_bytes());
    }
    bytes
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Runs the program over one call, as the kernel would.
    fn run(program: &[u8], arch: u32, call: u32, arg0: u64) -> u32 {
        let insns: Vec<Insn> = program
            .chunks(8)
            .map(|c| Insn {
                code: u16::from_ne_bytes([c[0], c[1]]),
                jt: c[2],
                jf: c[3],
                k: u32::from_ne_bytes([c[4], c[5], c[6], c[7]]),
            })
            .collect();
        let load = |off: u32| match off {
            NR => call,
            ARCH => arch,
            ARG0_LOW => arg0 as u32,
            other => panic!("unexpected load at {other}"),
        };
        let (mut pc, mut acc) = (0usize, 0u32);
        loop {
            let i = insns[pc];
            pc += 1;
            match i.code {
                LD_W_ABS => acc = load(i.k),
                RET_K => return i.k,
                JEQ_K | JGE_K | JSET_K => {
                    let taken = match i.code {
                        JEQ_K => acc == i.k,
                        JGE_K => acc >= i.k,
                        _ => acc & i.k != 0,
                    };
                    pc += usize::from(if taken { i.jt } else { i.jf });
                }
                other => panic!("unknown opcode {other:#x}"),
            }
        }
    }

    fn errno(e: libc::c_int) -> u32 {
        RET_ERRNO | e as u32
    }

    #[test]
    fn user_namespaces_are_refused_and_everything_else_passes() {
        let f = filter();
        let call = |c: libc::c_long, a: u64| run(&f, AUDIT_ARCH, nr(c), a);
        assert_eq!(
            call(libc::SYS_unshare, u64::from(CLONE_NEWUSER)),
            errno(libc::EPERM)
        );
        assert_eq!(
            call(libc::SYS_clone, u64::from(CLONE_NEWUSER) | 0x11),
            errno(libc::EPERM)
        );
        assert_eq!(
            call(libc::SYS_unshare, 0x0002_0000),
            RET_ALLOW,
            "CLONE_NEWNS alone"
        );
        assert_eq!(call(libc::SYS_clone, 0x003d_0f00), RET_ALLOW, "a thread");
        assert_eq!(call(libc::SYS_clone3, 0), errno(libc::ENOSYS));
        assert_eq!(call(libc::SYS_keyctl, 0), errno(libc::EPERM));
        assert_eq!(call(libc::SYS_bpf, 0), errno(libc::EPERM));
        assert_eq!(call(libc::SYS_io_uring_setup, 0), errno(libc::ENOSYS));
        for ok in [
            libc::SYS_read,
            libc::SYS_write,
            libc::SYS_openat,
            libc::SYS_execve,
        ] {
            assert_eq!(call(ok, 0), RET_ALLOW);
        }
    }

    #[test]
    fn another_abi_is_refused_altogether() {
        let f = filter();
        assert_eq!(run(&f, 0x4000_0003, 3, 0), errno(libc::EPERM), "i386 read");
        if let Some(bit) = X32_BIT {
            assert_eq!(
                run(&f, AUDIT_ARCH, bit | nr(libc::SYS_read), 0),
                errno(libc::EPERM),
                "x32 read"
            );
        }
    }
}
