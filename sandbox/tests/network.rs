//! A jail's network, with real namespaces and the real slirp4netns: what
//! each `Network` can reach. The only address outside loopback any test
//! sends to is the test's own host: a network namespace joined to this
//! one by a veth pair, deleted at the end.

use std::io::Read;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::fd::AsRawFd;
use std::os::unix::process::CommandExt;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use sless_sandbox::{Identity, Jail, Network, Prepared, Sandbox};

const TENANT: Identity = Identity {
    uid: 2_000_458,
    gid: 2_000_458,
};

/// One for the whole run: a sandbox's cgroups go with it.
fn sandbox() -> &'static Sandbox {
    static SANDBOX: std::sync::OnceLock<Sandbox> = std::sync::OnceLock::new();
    SANDBOX.get_or_init(|| {
        Sandbox::locate()
            .expect("bwrap, setpriv and slirp4netns are installed (scripts/ensure-sandbox)")
    })
}

/// Runs a python program in a jail of `network`; its stdout.
fn python(network: Network, program: &str) -> String {
    let mut jail = Jail::untrusted(TENANT, "/usr/bin/python3");
    jail.args = vec!["-c".into(), program.into()];
    jail.network = network;
    jail.label = "net".into();
    let Prepared {
        mut command,
        pending,
    } = sandbox().prepare(&jail).unwrap();
    command
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let child = command.spawn().unwrap();
    let mut sandboxed = pending.spawned(Some(child.id()));
    sandboxed.start().unwrap();
    let out = child.wait_with_output().unwrap();
    assert!(
        out.status.success(),
        "{network:?}: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

/// A python program that tries each address and prints `ADDR ok` or
/// `ADDR refused`, one line each.
fn connect_to(addrs: &[SocketAddr]) -> String {
    let list: Vec<String> = addrs
        .iter()
        .map(|a| format!("('{}', {})", a.ip(), a.port()))
        .collect();
    format!(
        "import socket\n\
         for host, port in [{}]:\n    \
             try:\n        \
                 s = socket.create_connection((host, port), timeout=3)\n        \
                 print(host, 'ok', flush=True)\n        \
                 s.close()\n    \
             except OSError:\n        \
                 print(host, 'refused', flush=True)\n",
        list.join(", ")
    )
}

/// How many connections `listener` has waiting.
fn accepted(listener: &TcpListener) -> usize {
    listener.set_nonblocking(true).unwrap();
    std::iter::from_fn(|| listener.accept().ok()).count()
}

#[test]
fn a_jail_of_its_own_network_cannot_reach_the_hosts_loopback_but_a_host_jail_can() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let port = listener.local_addr().unwrap().port();
    let loopback = SocketAddr::from((Ipv4Addr::LOCALHOST, port));
    let slirp_host = SocketAddr::from(([10, 0, 2, 2], port));

    let host = python(Network::Host, &connect_to(&[loopback]));
    assert_eq!(
        host, "127.0.0.1 ok\n",
        "the control: a Host jail reaches it"
    );
    assert_eq!(accepted(&listener), 1);

    for network in [Network::Loopback, Network::Outbound] {
        let out = python(network, &connect_to(&[loopback, slirp_host]));
        assert_eq!(
            out, "127.0.0.1 refused\n10.0.2.2 refused\n",
            "{network:?} reached the host's loopback"
        );
        assert_eq!(accepted(&listener), 0, "{network:?}");
    }
}

#[test]
fn an_outbound_jail_reaches_a_host_outside_the_hosts_loopback() {
    let host = TestHost::new();
    let (listener, addr) = host.listen();
    let out = python(Network::Outbound, &connect_to(&[addr]));
    assert_eq!(out, format!("{} ok\n", addr.ip()));
    assert_eq!(accepted(&listener), 1);
}

#[test]
fn a_loopback_jail_cannot_reach_a_host_outside() {
    let host = TestHost::new();
    let (listener, addr) = host.listen();
    let control = python(Network::Host, &connect_to(&[addr]));
    assert_eq!(control, format!("{} ok\n", addr.ip()), "the control");
    assert_eq!(accepted(&listener), 1);
    let out = python(Network::Loopback, &connect_to(&[addr]));
    assert_eq!(out, format!("{} refused\n", addr.ip()));
    assert_eq!(accepted(&listener), 0);
}

#[test]
fn a_listener_of_the_host_handed_to_a_loopback_jail_accepts_the_hosts_connections() {
    let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).unwrap();
    let addr = listener.local_addr().unwrap();
    let fd = listener.as_raw_fd();
    let mut jail = Jail::untrusted(TENANT, "/usr/bin/python3");
    jail.args = vec![
        "-c".into(),
        format!(
            "import socket\n\
             s = socket.socket(fileno={fd})\n\
             c, _ = s.accept()\n\
             c.sendall(b'served from the jail')\n\
             c.close()\n"
        )
        .into(),
    ];
    jail.network = Network::Loopback;
    let Prepared {
        mut command,
        pending,
    } = sandbox().prepare(&jail).unwrap();
    command.stdin(Stdio::null()).stderr(Stdio::piped());
    // SAFETY: fcntl only, between fork and exec (in bwrap's process).
    unsafe {
        command.pre_exec(move || {
            if libc::fcntl(fd, libc::F_SETFD, 0) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let child = command.spawn().unwrap();
    let mut sandboxed = pending.spawned(Some(child.id()));
    sandboxed.start().unwrap();
    drop(listener); // the jail's copy is the one that serves
    let mut conn = TcpStream::connect(addr).unwrap();
    conn.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut got = String::new();
    let read = conn.read_to_string(&mut got);
    let out = child.wait_with_output().unwrap();
    assert_eq!(
        got,
        "served from the jail",
        "{read:?}; the jail said: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(out.status.success());
}

/// A host of the test's own: a network namespace with one end of a veth
/// pair (10.213.N.2), the other end here (10.213.N.1/30). Deleted on drop.
struct TestHost {
    netns: String,
    veth: String,
    subnet: u8,
}

static HOSTS: AtomicU32 = AtomicU32::new(0);

fn ip(args: &[&str]) {
    let out = Command::new("ip").args(args).output().unwrap();
    assert!(
        out.status.success(),
        "ip {}: {}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr)
    );
}

impl TestHost {
    fn new() -> TestHost {
        let n = HOSTS.fetch_add(1, Ordering::Relaxed);
        let id = std::process::id() % 100_000;
        let host = TestHost {
            netns: format!("sless-test-{}-{n}", std::process::id()),
            veth: format!("slt{id}x{n}"),
            // /30 subnets of 10.213.0.0/16, one per host of this run.
            subnet: ((std::process::id() * 4 + n) % 250) as u8,
        };
        let peer = format!("{}p", host.veth);
        let (here, there) = (host.addr(1), host.addr(2));
        ip(&["netns", "add", &host.netns]);
        ip(&[
            "link", "add", &host.veth, "type", "veth", "peer", "name", &peer,
        ]);
        ip(&["link", "set", &peer, "netns", &host.netns]);
        ip(&["addr", "add", &format!("{here}/30"), "dev", &host.veth]);
        ip(&["link", "set", &host.veth, "up"]);
        let ns = ["netns", "exec", &host.netns, "ip"];
        ip(&[
            &ns[..],
            &["addr", "add", &format!("{there}/30"), "dev", &peer],
        ]
        .concat());
        ip(&[&ns[..], &["link", "set", &peer, "up"]].concat());
        ip(&[&ns[..], &["link", "set", "lo", "up"]].concat());
        host
    }

    fn addr(&self, last: u8) -> Ipv4Addr {
        Ipv4Addr::new(10, 213, self.subnet, last)
    }

    /// A listener in the test host's namespace (made by a thread that
    /// enters it), and its address.
    fn listen(&self) -> (TcpListener, SocketAddr) {
        let path = format!("/run/netns/{}", self.netns);
        let addr = self.addr(2);
        let listener = std::thread::spawn(move || {
            let ns = std::fs::File::open(path).unwrap();
            // SAFETY: setns of this thread alone, which ends right after.
            assert_eq!(
                unsafe { libc::setns(ns.as_raw_fd(), libc::CLONE_NEWNET) },
                0
            );
            TcpListener::bind((addr, 0)).unwrap()
        })
        .join()
        .unwrap();
        let at = listener.local_addr().unwrap();
        (listener, at)
    }
}

impl Drop for TestHost {
    fn drop(&mut self) {
        // The peer goes with the namespace, and this end with its peer.
        let _ = Command::new("ip")
            .args(["link", "del", &self.veth])
            .output();
        let _ = Command::new("ip")
            .args(["netns", "del", &self.netns])
            .output();
    }
}
