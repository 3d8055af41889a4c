//! The command line of bwrap and setpriv for a [`Jail`]. Pure: the file
//! descriptors it names are opened by `exec`.

use std::ffi::{OsStr, OsString};
use std::os::unix::ffi::OsStrExt;
use std::path::{Path, PathBuf};

use crate::{HostLayout, Jail, Mount, Network, OWNER_ENV, TopEntry, View};

/// What of `/etc` an untrusted jail sees, where the host has it: enough to
/// run programs (the dynamic linker's cache, `alternatives`), resolve names
/// and verify TLS, and nothing that holds a secret.
const ETC_FOR_UNTRUSTED: &[&str] = &[
    "/etc/ld.so.cache",
    "/etc/ld.so.conf",
    "/etc/ld.so.conf.d",
    "/etc/alternatives",
    "/etc/ssl",
    "/etc/ca-certificates",
    "/etc/ca-certificates.conf",
    "/etc/pki",
    "/etc/crypto-policies",
    "/etc/resolv.conf",
    "/etc/hosts",
    "/etc/host.conf",
    "/etc/nsswitch.conf",
    "/etc/gai.conf",
    "/etc/protocols",
    "/etc/services",
    "/etc/localtime",
    "/etc/timezone",
    "/etc/mime.types",
];

/// The file descriptors (in the spawned process) the arguments refer to.
#[derive(Debug, Clone, Default)]
pub(crate) struct Fds {
    /// bwrap writes `{"child-pid": N}` here once the jail runs.
    pub info: i32,
    /// The seccomp program, for [`View::Untrusted`].
    pub seccomp: Option<i32>,
    /// One per [`Mount::File`], in the order of `jail.mounts`.
    pub files: Vec<i32>,
    /// bwrap's child reads a byte here before it forks the program
    /// ([`Network::Outbound`]: once the network is up).
    pub block: Option<i32>,
}

fn os(s: impl AsRef<OsStr>) -> OsString {
    s.as_ref().to_owned()
}

fn fd(n: i32) -> OsString {
    OsString::from(n.to_string())
}

/// `/etc/passwd` and `/etc/group` of an untrusted jail: its own user, and
/// `nobody`.
pub(crate) fn identity_files(jail: &Jail) -> (Vec<u8>, Vec<u8>) {
    let id = jail.identity;
    let passwd = format!(
        "root:x:0:0:root:/nonexistent:/usr/sbin/nologin\n\
         sless:x:{}:{}:sless function:/tmp:/usr/sbin/nologin\n\
         nobody:x:65534:65534:nobody:/nonexistent:/usr/sbin/nologin\n",
        id.uid, id.gid
    );
    let group = format!("root:x:0:\nsless:x:{}:\nnogroup:x:65534:\n", id.gid);
    (passwd.into_bytes(), group.into_bytes())
}

/// Every argument of bwrap (given to it through `--args`), then setpriv's
/// and the program's.
pub(crate) fn bwrap_args(
    jail: &Jail,
    host: &HostLayout,
    setpriv: &Path,
    fds: &Fds,
) -> Vec<OsString> {
    let mut a: Vec<OsString> = Vec::new();
    macro_rules! push {
        ($($x:expr),+ $(,)?) => {{ $( a.push(OsString::from($x)); )+ }};
    }
    let untrusted = jail.view == View::Untrusted;

    // Every jail has a PID namespace: when its bwrap ends, whatever it
    // holds is killed (bwrap's own processes, uid 0, get its parent-death
    // signal; a process of another uid would not).
    push!(
        "--unshare-pid",
        "--die-with-parent",
        "--unshare-uts",
        "--unshare-cgroup-try",
        "--hostname",
        "sless",
        "--new-session",
    );
    if untrusted {
        // A service keeps the host's: PostgreSQL's shared-memory interlock
        // must see another postmaster of the same cluster.
        push!("--unshare-ipc");
    }
    if jail.network != Network::Host {
        // bwrap brings the namespace's loopback up.
        push!("--unshare-net");
    }
    if jail.owner.is_some() {
        push!("--unsetenv", OWNER_ENV);
    }

    // The system, read-only.
    push!("--ro-bind", "/usr", "/usr");
    for (path, entry) in &host.top {
        match entry {
            TopEntry::Symlink(target) => {
                push!("--symlink", target, path)
            }
            TopEntry::Directory => {
                push!("--ro-bind", path, path)
            }
        }
    }
    match jail.view {
        View::Untrusted => {
            // bwrap 0.8 makes the parents of a mount point 0700 unless told.
            push!("--perms", "0755", "--dir", "/etc");
            for etc in ETC_FOR_UNTRUSTED {
                if *etc == "/etc/resolv.conf" && jail.network == Network::Outbound {
                    continue; // a file of its own (exec.rs)
                }
                push!("--ro-bind-try", etc, etc);
            }
        }
        View::Service => push!("--ro-bind", "/etc", "/etc"),
    }
    push!("--proc", "/proc", "--dev", "/dev",);
    let size = jail.tmp_bytes.max(4096).to_string();
    for tmp in ["/tmp", "/dev/shm"] {
        push!("--perms", "1777", "--size", &size, "--tmpfs", tmp,);
    }

    // The jail's own things. bwrap would make the directories a mount
    // point needs (e.g. /root/.pyenv/... for an interpreter installed
    // there) 0700: they are made first, traversable.
    let mut made = Made::default();
    for path in ["/usr", "/proc", "/dev"] {
        made.mounted.push(PathBuf::from(path));
    }
    for path in ["/etc", "/tmp", "/dev/shm"] {
        made.dirs.push(PathBuf::from(path));
    }
    if jail.view == View::Service {
        made.mounted.push(PathBuf::from("/etc"));
    }
    let mut files = fds.files.iter();
    for mount in &jail.mounts {
        let dest = match mount {
            Mount::ReadOnly { dest, .. } | Mount::ReadWrite { dest, .. } => dest,
            Mount::File { dest, .. } => dest,
        };
        for parent in made.parents_to_make(dest) {
            push!("--perms", "0755", "--dir", &parent);
            made.dirs.push(parent);
        }
        match mount {
            Mount::ReadOnly { source, dest } => {
                push!("--ro-bind", source, dest)
            }
            Mount::ReadWrite { source, dest } => {
                push!("--bind", source, dest)
            }
            Mount::File { dest, .. } => {
                let n = files.next().copied().unwrap_or(-1);
                a.extend([
                    os("--perms"),
                    os("0444"),
                    os("--ro-bind-data"),
                    fd(n),
                    os(dest),
                ]);
            }
        }
        made.mounted.push(dest.clone());
    }

    a.extend([os("--info-fd"), fd(fds.info)]);
    if let Some(n) = fds.block {
        a.extend([os("--block-fd"), fd(n)]);
    }
    if let Some(n) = fds.seccomp {
        a.extend([os("--seccomp"), fd(n)]);
    }
    a.extend([os("--chdir"), os(&jail.cwd)]);

    // setpriv drops to the jail's user for good before the program runs.
    let id = jail.identity;
    a.extend([
        os("--"),
        os(setpriv),
        os(format!("--reuid={}", id.uid)),
        os(format!("--regid={}", id.gid)),
        os("--clear-groups"),
        os("--inh-caps=-all"),
        os("--ambient-caps=-all"),
        os("--bounding-set=-all"),
        os("--no-new-privs"),
    ]);
    a.push(os("--"));
    if let Some(sig) = jail.program_death_signal {
        // A second setpriv, already the jail's user: the parent-death
        // signal is cleared when credentials change, so the first one's
        // would not survive its own switch.
        a.extend([
            os(setpriv),
            os(format!("--pdeathsig={}", signal_name(sig))),
            os("--"),
        ]);
    }
    a.push(os(&jail.program));
    a.extend(jail.args.iter().cloned());
    a
}

/// What a jail's arguments have made so far.
#[derive(Debug, Default)]
struct Made {
    /// Mount points: below one, the directories are the host's.
    mounted: Vec<PathBuf>,
    /// Directories (and tmpfs) of the jail's own: bwrap would make what is
    /// missing below them 0700.
    dirs: Vec<PathBuf>,
}

impl Made {
    /// The ancestors of `dest` (outermost first) that must be made.
    fn parents_to_make(&self, dest: &Path) -> Vec<PathBuf> {
        let mut ancestors: Vec<&Path> = dest
            .ancestors()
            .skip(1)
            .filter(|p| p.as_os_str().len() > 1)
            .collect();
        ancestors.reverse();
        let mut out = Vec::new();
        for p in ancestors {
            if self.mounted.iter().any(|m| p.starts_with(m)) {
                break; // the host's directories from here on
            }
            if !self.dirs.iter().any(|d| d == p) {
                out.push(p.to_path_buf());
            }
        }
        out
    }
}

fn signal_name(sig: libc::c_int) -> &'static str {
    match sig {
        libc::SIGINT => "INT",
        libc::SIGTERM => "TERM",
        libc::SIGQUIT => "QUIT",
        _ => "KILL",
    }
}

/// The arguments as bwrap's `--args` reads them: each followed by a NUL.
pub(crate) fn nul_separated(args: &[OsString]) -> Vec<u8> {
    let mut out = Vec::new();
    for arg in args {
        out.extend_from_slice(arg.as_bytes());
        out.push(0);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Identity;

    fn layout() -> HostLayout {
        HostLayout {
            top: vec![
                (
                    PathBuf::from("/bin"),
                    TopEntry::Symlink(PathBuf::from("usr/bin")),
                ),
                (PathBuf::from("/lib"), TopEntry::Directory),
            ],
        }
    }

    fn joined(args: &[OsString]) -> String {
        args.iter()
            .map(|a| a.to_string_lossy().into_owned())
            .collect::<Vec<_>>()
            .join(" ")
    }

    #[test]
    fn an_untrusted_jail_gets_namespaces_a_bounded_tmp_and_drops_to_its_user() {
        let mut jail = Jail::untrusted(
            Identity {
                uid: 200_001,
                gid: 200_001,
            },
            "/usr/bin/python3",
        );
        jail.args = vec!["x.py".into()];
        jail.tmp_bytes = 1 << 20;
        jail.cwd = PathBuf::from("/sless/function/code");
        jail.mounts = vec![Mount::ReadOnly {
            source: PathBuf::from("/data/builds/ns/f/sha"),
            dest: PathBuf::from("/sless/function"),
        }];
        let fds = Fds {
            info: 7,
            seccomp: Some(8),
            files: vec![],
            block: None,
        };
        let args = joined(&bwrap_args(
            &jail,
            &layout(),
            Path::new("/usr/bin/setpriv"),
            &fds,
        ));
        for expected in [
            "--unshare-pid --die-with-parent --unshare-uts",
            "--new-session --unshare-ipc",
            "--ro-bind /usr /usr",
            "--symlink usr/bin /bin",
            "--ro-bind /lib /lib",
            "--ro-bind-try /etc/resolv.conf /etc/resolv.conf",
            "--perms 1777 --size 1048576 --tmpfs /tmp",
            "--perms 1777 --size 1048576 --tmpfs /dev/shm",
            "--perms 0755 --dir /etc --ro-bind-try /etc/ld.so.cache",
            "--perms 0755 --dir /sless --ro-bind /data/builds/ns/f/sha /sless/function",
            "--info-fd 7 --seccomp 8 --chdir /sless/function/code",
            "-- /usr/bin/setpriv --reuid=200001 --regid=200001 --clear-groups --inh-caps=-all \
             --ambient-caps=-all --bounding-set=-all --no-new-privs -- /usr/bin/python3 x.py",
        ] {
            assert!(args.contains(expected), "{expected:?} not in {args}");
        }
        assert!(!args.contains("--ro-bind /etc /etc"), "{args}");
        assert!(!args.contains("/etc/shadow"), "{args}");
    }

    #[test]
    fn a_service_sees_all_of_etc_and_keeps_the_hosts_ipc() {
        let mut jail = Jail::service(
            Identity { uid: 101, gid: 104 },
            "/usr/lib/postgresql/15/bin/postgres",
        );
        jail.program_death_signal = Some(libc::SIGINT);
        jail.mounts = vec![Mount::ReadWrite {
            source: PathBuf::from("/root/.sless/postgres"),
            dest: PathBuf::from("/root/.sless/postgres"),
        }];
        let fds = Fds {
            info: 5,
            seccomp: None,
            files: vec![],
            block: None,
        };
        let args = joined(&bwrap_args(
            &jail,
            &layout(),
            Path::new("/usr/bin/setpriv"),
            &fds,
        ));
        assert!(args.contains("--ro-bind /etc /etc"), "{args}");
        assert!(args.contains("--unshare-pid --die-with-parent"), "{args}");
        assert!(!args.contains("--unshare-ipc"), "{args}");
        assert!(!args.contains("--seccomp"), "{args}");
        assert!(
            args.contains(
                "--no-new-privs -- /usr/bin/setpriv --pdeathsig=INT -- /usr/lib/postgresql"
            ),
            "{args}"
        );
        assert!(
            args.contains(
                "--perms 0755 --dir /root --perms 0755 --dir /root/.sless \
                 --bind /root/.sless/postgres /root/.sless/postgres"
            ),
            "{args}"
        );
    }

    #[test]
    fn parents_are_made_once_and_never_inside_a_mount() {
        let made = Made {
            mounted: vec![PathBuf::from("/usr"), PathBuf::from("/sless/function")],
            dirs: vec![PathBuf::from("/tmp"), PathBuf::from("/sless")],
        };
        assert_eq!(
            made.parents_to_make(Path::new("/sless/function/code/x")),
            Vec::<PathBuf>::new(),
            "inside a mount the host's directories are there"
        );
        assert_eq!(
            made.parents_to_make(Path::new("/sless/runtime/w.py")),
            vec![PathBuf::from("/sless/runtime")]
        );
        assert_eq!(
            made.parents_to_make(Path::new("/tmp/a/b")),
            vec![PathBuf::from("/tmp/a")],
            "bwrap would make /tmp/a 0700"
        );
        assert_eq!(
            made.parents_to_make(Path::new("/opt/py/bin/python3")),
            vec![
                PathBuf::from("/opt"),
                PathBuf::from("/opt/py"),
                PathBuf::from("/opt/py/bin")
            ]
        );
        assert_eq!(made.parents_to_make(Path::new("/x")), Vec::<PathBuf>::new());
    }

    #[test]
    fn files_are_given_by_descriptor_and_read_only() {
        let mut jail = Jail::untrusted(Identity::NOBODY, "/bin/true");
        jail.mounts = vec![Mount::File {
            dest: PathBuf::from("/etc/passwd"),
            contents: b"x".to_vec(),
        }];
        let fds = Fds {
            info: 3,
            seccomp: None,
            files: vec![9],
            block: None,
        };
        let args = joined(&bwrap_args(&jail, &layout(), Path::new("setpriv"), &fds));
        assert!(
            args.contains("--perms 0444 --ro-bind-data 9 /etc/passwd"),
            "{args}"
        );
    }

    #[test]
    fn a_jail_of_its_own_network_unshares_it_and_an_outbound_one_waits_and_has_its_resolver() {
        let mut jail = Jail::untrusted(Identity::NOBODY, "/bin/true");
        let fds = Fds {
            info: 3,
            block: Some(11),
            ..Fds::default()
        };
        let host = joined(&bwrap_args(
            &jail,
            &layout(),
            Path::new("setpriv"),
            &Fds::default(),
        ));
        assert!(!host.contains("--unshare-net"), "{host}");
        jail.network = Network::Loopback;
        let own = joined(&bwrap_args(
            &jail,
            &layout(),
            Path::new("setpriv"),
            &Fds::default(),
        ));
        assert!(own.contains("--unshare-net"), "{own}");
        assert!(!own.contains("--block-fd"), "{own}");
        jail.network = Network::Outbound;
        let out = joined(&bwrap_args(&jail, &layout(), Path::new("setpriv"), &fds));
        assert!(out.contains("--unshare-net"), "{out}");
        assert!(out.contains("--info-fd 3 --block-fd 11"), "{out}");
        assert!(!out.contains("/etc/resolv.conf"), "{out}");
    }
}
