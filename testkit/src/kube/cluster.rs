//! A real node beside the test control plane, so that what sless writes
//! runs: containerd and runc (Debian's), the CNI `bridge`, `host-local`,
//! `loopback` and `portmap` plugins, the kubelet and kube-proxy of the
//! control plane's release (`scripts/ensure-node`), and a registry
//! (Debian's `docker-registry`) holding the images `scripts/ensure-images`
//! made on this machine: the pause image, the runtimes' base images and the
//! kaniko executor. Nothing is pulled from outside.
//!
//! One node per machine at a time: it takes a bridge (`sless0`, pods in
//! 10.244.0.0/24, the host at [`GATEWAY`]), a cgroup (`sless-node`) and
//! kube-proxy's iptables chains, so a second test process waits on a lock
//! until the first one's node is gone. The registry and the TLS fronts
//! listen on the gateway address, which the host (containerd pulling, sless
//! proxying) and the pods (kaniko pushing, fetching its context) both
//! reach. They speak TLS with a certificate of a CA made at start, which
//! containerd trusts and kaniko is given ([`Cluster::ca_pem`]).
//!
//! When the test process ends, a small shell holding the lock kills what
//! the node ran (its programs, the containerd shims, every process in the
//! node's cgroup), lifts kube-proxy's rules, removes the bridge, unmounts
//! and removes the node's directory, and only then lets the next node start.

use std::io::{BufRead, BufReader};
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use rcgen::{
    BasicConstraints, CertificateParams, CertifiedIssuer, DnType, ExtendedKeyUsagePurpose, IsCa,
    KeyPair, KeyUsagePurpose,
};

use super::ControlPlane;
use super::control_plane::{Program, SERVICE_RANGE, panic_message, tail};

/// The node's name.
pub const NODE: &str = "sless-node";
/// The host's address on the pods' bridge: where pods reach the registry
/// and the TLS fronts.
pub const GATEWAY: Ipv4Addr = Ipv4Addr::new(10, 244, 0, 1);
/// The tag every image made here is pushed with.
pub const IMAGE_TAG: &str = "local";
/// The repository the images are pushed under: `{registry}/sless/{image}`.
const REPOSITORY: &str = "sless";
/// The bridge the pods are on.
pub const BRIDGE: &str = "sless0";
/// The comment on the rules that refuse cluster IPs kube-proxy has not
/// written rules for.
const UNROUTED_SERVICES: &str = "sless-test-unrouted-services";
const POD_SUBNET: &str = "10.244.0.0/24";
/// The cgroup every pod of the node is under (cgroup v1: in each hierarchy).
pub const NODE_CGROUP: &str = "sless-node";
/// Held by the node's reaper while a node is up or being cleaned away.
pub const NODE_LOCK: &str = "/tmp/sless-test-node.lock";
/// How long a start may take before the tests give up on it.
const START_DEADLINE: Duration = Duration::from_secs(300);

/// A control plane with a real node.
pub struct Cluster {
    plane: &'static ControlPlane,
    dir: PathBuf,
    /// `10.244.0.1:{port}`.
    registry: String,
    ca_pem: String,
    /// The certificate (and its key) of [`GATEWAY`] the registry and the
    /// fronts serve, DER.
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
    /// The images in the registry, by their name in `scripts/ensure-images`.
    images: Vec<String>,
    /// The OCI layout they were copied from.
    layout: PathBuf,
    /// How long the start took, and of it the filling of the registry.
    pub started_in: Duration,
    pub registry_filled_in: Duration,
}

static CLUSTER: OnceLock<Result<Cluster, String>> = OnceLock::new();

impl Cluster {
    /// The cluster of this process, started on first use on
    /// [`ControlPlane::shared`]. Panics with the failing program's log when
    /// it cannot start, in every test that asks.
    pub fn shared() -> &'static Cluster {
        let cluster = CLUSTER.get_or_init(launch);
        match cluster {
            Ok(cluster) => cluster,
            Err(message) => panic!("starting the Kubernetes node: {message}"),
        }
    }

    /// The control plane the node is registered with.
    pub fn plane(&self) -> &'static ControlPlane {
        self.plane
    }

    /// The registry, `10.244.0.1:{port}`, as an image reference begins.
    pub fn registry(&self) -> &str {
        &self.registry
    }

    /// Where sless pushes and pulls: `{registry}/sless`.
    pub fn repository(&self) -> String {
        format!("{}/{REPOSITORY}", self.registry)
    }

    /// The reference of an image made by `scripts/ensure-images` (`pause`,
    /// `kaniko-executor`, `sless-runtime-python3.11`, …), as pushed here.
    pub fn image(&self, name: &str) -> String {
        assert!(
            self.images.iter().any(|i| i == name),
            "no image {name} was made (made: {:?})",
            self.images
        );
        format!("{}/{name}:{IMAGE_TAG}", self.repository())
    }

    /// The OCI layout `scripts/ensure-images` made, which the registry was
    /// filled from.
    pub fn layout(&self) -> &Path {
        &self.layout
    }

    /// The CA the registry's and the fronts' certificates are signed by.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// The node's scratch directory (the programs' logs are there).
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// An HTTPS address on [`GATEWAY`] that passes connections on to the
    /// plain server at `upstream`, for the rest of the process.
    pub fn tls_front(&self, upstream: SocketAddr) -> SocketAddr {
        super::front::start(
            GATEWAY,
            upstream,
            self.cert_der.clone(),
            self.key_der.clone(),
        )
    }

    /// Points the `kubernetes` Service (the address a pod's in-cluster
    /// configuration names) at the API server, through a TCP front on
    /// [`GATEWAY`]: the EndpointSlice the API server writes itself where
    /// its endpoint reconciler runs (here it does not).
    pub fn route_kubernetes_service(&self) {
        let plane = self.plane();
        let api: SocketAddr = plane
            .url()
            .trim_start_matches("https://")
            .trim_end_matches('/')
            .parse()
            .expect("the API server on a numeric address");
        let front = super::front::start_tcp(GATEWAY, api);
        let jsonpath = "jsonpath={.spec.ports[0].name}";
        let port_name = plane.kubectl_ok(
            &[
                "-n",
                "default",
                "get",
                "service",
                "kubernetes",
                "-o",
                jsonpath,
            ],
            None,
        );
        let slice = serde_json::json!({
            "apiVersion": "discovery.k8s.io/v1",
            "kind": "EndpointSlice",
            "metadata": {
                "name": "kubernetes",
                "namespace": "default",
                "labels": {"kubernetes.io/service-name": "kubernetes"},
            },
            "addressType": "IPv4",
            "endpoints": [{"addresses": [GATEWAY.to_string()], "conditions": {"ready": true}}],
            "ports": [{"name": port_name.trim(), "port": front.port(), "protocol": "TCP"}],
        });
        let apply = [
            "apply",
            "--server-side",
            "--field-manager=sless-test",
            "-f",
            "-",
        ];
        plane.kubectl_ok(&apply, Some(&slice.to_string()));
    }

    /// The tail of a node program's log (`containerd`, `kubelet`,
    /// `kube-proxy`, `docker-registry`), for a failing test to show.
    pub fn log_tail(&self, program: &str) -> String {
        tail(&self.dir.join(format!("{program}.log")))
    }
}

/// Starts the node on a thread that holds its programs for the rest of the
/// process (they die with it: PR_SET_PDEATHSIG).
fn launch() -> Result<Cluster, String> {
    let plane = ControlPlane::shared();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::Builder::new()
        .name("kube-node".into())
        .spawn(move || match std::panic::catch_unwind(|| start(plane)) {
            Ok((cluster, held)) => {
                tx.send(Ok(cluster)).ok();
                let _held = held;
                loop {
                    std::thread::park();
                }
            }
            Err(panic) => {
                tx.send(Err(panic_message(panic))).ok();
            }
        })
        .map_err(|e| format!("a thread for the node: {e}"))?;
    rx.recv()
        .unwrap_or_else(|_| Err("the node's thread ended".into()))
}

/// What the node's thread holds: the programs, and the reaper's stdin,
/// which closes when this process ends.
struct Held {
    _programs: Vec<Program>,
    _reaper: Child,
    _reaper_stdin: ChildStdin,
}

/// Runs one of the repository's scripts and returns the last line it printed.
fn script(name: &str, args: &[&str]) -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../scripts")
        .join(name);
    let out = Command::new(&path)
        .args(args)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", path.display()));
    assert!(
        out.status.success(),
        "{} failed (its output is above)",
        path.display()
    );
    String::from_utf8_lossy(&out.stdout)
        .lines()
        .last()
        .unwrap_or_default()
        .trim()
        .to_owned()
}

/// Runs a command, panicking with its output when it fails; its stdout.
pub(crate) fn run(program: &str, args: &[&str]) -> String {
    let out = Command::new(program)
        .args(args)
        .output()
        .unwrap_or_else(|e| panic!("running {program}: {e}"));
    assert!(
        out.status.success(),
        "{program} {}: {}{}",
        args.join(" "),
        String::from_utf8_lossy(&out.stderr),
        String::from_utf8_lossy(&out.stdout)
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// Kills what a node ran and removes what it made. `$NODE_DIR` empty: what
/// a node whose reaper was itself killed left behind (any node directory).
const CLEANUP: &str = r#"
cleanup() {
  pattern=${NODE_DIR:-/sless-test-[0-9]*-node-[0-9a-f]*}
  pkill -9 -f -- "$pattern/" 2>/dev/null
  for round in 1 2 3 4 5 6 7 8 9 10; do
    pids=$(find /sys/fs/cgroup/pids/$CGROUP -name cgroup.procs -exec cat {} + 2>/dev/null)
    [ -z "$pids" ] && break
    kill -9 $pids 2>/dev/null
    sleep 0.2
  done
  awk '{print $2}' /proc/mounts | grep -E -- "$pattern/" | sort -r | while read -r m; do umount -l "$m" 2>/dev/null; done
  "$PROXY" --cleanup >/dev/null 2>&1
  sh -c "$NETPOL_CLEANUP" >/dev/null 2>&1
  iptables-save -t filter | grep -- "--comment $UNROUTED" | sed 's/^-A/-D/' \
    | while read -r rule; do eval "iptables -w -t filter $rule"; done
  # What the kubelet made (KUBE-FIREWALL, its canaries), and anything of
  # kube-proxy's and kube-router's their own cleanups left.
  for ipt in iptables ip6tables; do
    for t in filter nat mangle; do
      "$ipt-save" -t $t 2>/dev/null | grep -E -- '^-A [A-Z]+ .*-j KUBE-' | sed 's/^-A/-D/' \
        | while read -r rule; do eval "$ipt -w -t $t $rule"; done
      chains=$("$ipt-save" -t $t 2>/dev/null | sed -n -E 's/^:(KUBE-[A-Z0-9-]+) .*/\1/p')
      for c in $chains; do "$ipt" -w -t $t -F "$c"; done
      for c in $chains; do "$ipt" -w -t $t -X "$c"; done
    done
  done
  ip link del "$BRIDGE" 2>/dev/null
  for h in /sys/fs/cgroup/*/; do
    [ -d "$h$CGROUP" ] && find "$h$CGROUP" -depth -type d -exec rmdir {} \; 2>/dev/null
  done
  [ -n "$NODE_DIR" ] && rm -rf "$NODE_DIR"
  return 0
}
exec 9>"$LOCK"
flock 9
NODE_DIR= cleanup
echo locked
cat >/dev/null
cleanup
"#;

/// Starts the reaper and waits until it holds the lock (another process's
/// node is gone).
fn reaper(dir: &Path, kube_proxy: &Path) -> (Child, ChildStdin) {
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(CLEANUP)
        .arg("sless-test-node-reaper")
        .env("NODE_DIR", dir)
        .env("PROXY", kube_proxy)
        .env("NETPOL_CLEANUP", super::netpol::CLEANUP)
        .env("LOCK", NODE_LOCK)
        .env("BRIDGE", BRIDGE)
        .env("UNROUTED", UNROUTED_SERVICES)
        .env("CGROUP", NODE_CGROUP)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("starting the node's reaper");
    let stdin = child.stdin.take().expect("the reaper's stdin");
    let mut line = String::new();
    BufReader::new(child.stdout.take().expect("the reaper's stdout"))
        .read_line(&mut line)
        .expect("the reaper's word");
    assert_eq!(line.trim(), "locked", "the node's reaper did not start");
    (child, stdin)
}

/// A CA, and a certificate of [`GATEWAY`] signed by it (PEM of the CA; DER
/// of the certificate and key; PEM of both for the registry).
struct GatewayTls {
    ca_pem: String,
    cert_pem: String,
    key_pem: String,
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
}

fn gateway_tls() -> GatewayTls {
    let ca_key = KeyPair::generate().expect("a CA key");
    let mut ca_params = CertificateParams::new(Vec::<String>::new()).expect("CA params");
    ca_params
        .distinguished_name
        .push(DnType::CommonName, "sless-test-node-ca");
    ca_params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
    ca_params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::CrlSign];
    let ca = CertifiedIssuer::self_signed(ca_params, ca_key).expect("the node CA");
    let key = KeyPair::generate().expect("a gateway key");
    let mut params = CertificateParams::new(vec![GATEWAY.to_string()]).expect("gateway params");
    params
        .distinguished_name
        .push(DnType::CommonName, GATEWAY.to_string());
    params.extended_key_usages = vec![ExtendedKeyUsagePurpose::ServerAuth];
    let cert = params
        .signed_by(&key, &ca)
        .expect("the gateway certificate");
    GatewayTls {
        ca_pem: ca.pem(),
        cert_pem: cert.pem(),
        key_pem: key.serialize_pem(),
        cert_der: cert.der().to_vec(),
        key_der: key.serialize_der(),
    }
}

/// Waits for `done` until the deadline, checking the programs are alive.
fn wait_for(what: &str, programs: &mut [Program], mut done: impl FnMut() -> bool) {
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        for p in programs.iter_mut() {
            p.check();
        }
        if done() {
            return;
        }
        if Instant::now() > deadline {
            let logs: Vec<String> = programs
                .iter()
                .map(|p| format!("--- {}:\n{}", p.name, tail(&p.log)))
                .collect();
            panic!("{what} not after {START_DEADLINE:?}:\n{}", logs.join("\n"));
        }
        std::thread::sleep(Duration::from_millis(200));
    }
}

/// The images in an OCI layout, by their `org.opencontainers.image.ref.name`.
fn layout_images(layout: &Path) -> Vec<String> {
    let index: serde_json::Value = serde_json::from_slice(
        &std::fs::read(layout.join("index.json")).expect("the images' index.json"),
    )
    .expect("an OCI index");
    index["manifests"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|m| m["annotations"]["org.opencontainers.image.ref.name"].as_str())
        .map(str::to_owned)
        .collect()
}

/// A free port on loopback (released again: the program binds it).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on loopback")
        .port()
}

fn write(path: &Path, text: &str) {
    std::fs::write(path, text).unwrap_or_else(|e| panic!("writing {}: {e}", path.display()));
}

fn start(plane: &'static ControlPlane) -> (Cluster, Held) {
    let bin = PathBuf::from(script("ensure-node", &[]));
    let layout = PathBuf::from(script("ensure-images", &[]));
    let netpol = PathBuf::from(script("ensure-netpol", &[]));
    let started = Instant::now();
    let dir = crate::scratch_dir("node");
    let (reaper, reaper_stdin) = reaper(&dir, &bin.join("kube-proxy"));
    let path = |p: &Path| p.display().to_string();

    // Routing to Services from pods and from the host (kube-proxy's rules
    // see bridged traffic), and pods reaching each other through them.
    write(Path::new("/proc/sys/net/ipv4/ip_forward"), "1");
    write(
        Path::new("/proc/sys/net/bridge/bridge-nf-call-iptables"),
        "1",
    );
    run("ip", &["link", "add", BRIDGE, "type", "bridge"]);
    run(
        "ip",
        &["addr", "add", &format!("{GATEWAY}/24"), "dev", BRIDGE],
    );
    run("ip", &["link", "set", BRIDGE, "up"]);
    // A cluster IP kube-proxy has not written rules for yet is refused, as
    // nothing answers the Service range on a real network. Here the default
    // route leads to a proxy that accepts every connection, and a pooled
    // connection made to it before the rules came would keep going there.
    // kube-proxy's DNAT comes first (nat), so this sees only what it left.
    for chain in ["OUTPUT", "FORWARD"] {
        run(
            "iptables",
            &[
                "-w",
                "-A",
                chain,
                "-d",
                SERVICE_RANGE,
                "-m",
                "comment",
                "--comment",
                UNROUTED_SERVICES,
                "-j",
                "REJECT",
            ],
        );
    }

    let tls = gateway_tls();
    write(&dir.join("ca.crt"), &tls.ca_pem);
    write(&dir.join("gateway.crt"), &tls.cert_pem);
    write(&dir.join("gateway.key"), &tls.key_pem);

    let registry_port = TcpListener::bind((GATEWAY, 0))
        .and_then(|l| l.local_addr())
        .expect("a port for the registry")
        .port();
    let registry = format!("{GATEWAY}:{registry_port}");
    let registry_config = dir.join("registry.yml");
    write(
        &registry_config,
        &format!(
            "version: 0.1\nlog: {{level: warn}}\nstorage:\n  filesystem: {{rootdirectory: {}}}\n  \
             delete: {{enabled: true}}\nhttp:\n  addr: {registry}\n  tls:\n    certificate: {}\n    \
             key: {}\n",
            path(&dir.join("registry")),
            path(&dir.join("gateway.crt")),
            path(&dir.join("gateway.key")),
        ),
    );
    let mut programs = vec![Program::start(
        Path::new("/usr/bin"),
        &dir,
        "docker-registry",
        &["serve".into(), path(&registry_config)],
    )];
    wait_for("the registry listening", &mut programs, || {
        TcpStream::connect((GATEWAY, registry_port)).is_ok()
    });

    // The registry gets every image made here; skopeo trusts the CA.
    let filling = Instant::now();
    let certs = dir.join("certs");
    std::fs::create_dir_all(&certs).expect("a directory for skopeo's CA");
    write(&certs.join("ca.crt"), &tls.ca_pem);
    let images = layout_images(&layout);
    for image in &images {
        run(
            "skopeo",
            &[
                "copy",
                "--quiet",
                "--dest-cert-dir",
                &path(&certs),
                &format!("oci:{}:{image}", path(&layout)),
                &format!("docker://{registry}/{REPOSITORY}/{image}:{IMAGE_TAG}"),
            ],
        );
    }
    let registry_filled_in = filling.elapsed();

    for hierarchy in std::fs::read_dir("/sys/fs/cgroup").expect("the cgroup hierarchies") {
        let hierarchy = hierarchy.expect("a cgroup hierarchy").path();
        if hierarchy.is_dir() && !hierarchy.is_symlink() {
            let _ = std::fs::create_dir_all(hierarchy.join(NODE_CGROUP));
        }
    }

    let cni = dir.join("cni");
    std::fs::create_dir_all(&cni).expect("the CNI configuration directory");
    write(
        &cni.join("10-sless.conflist"),
        &format!(
            r#"{{"cniVersion": "1.0.0", "name": "sless", "plugins": [
  {{"type": "bridge", "bridge": "{BRIDGE}", "isGateway": true, "ipMasq": false, "hairpinMode": true,
   "ipam": {{"type": "host-local", "ranges": [[{{"subnet": "{POD_SUBNET}", "gateway": "{GATEWAY}"}}]],
            "routes": [{{"dst": "0.0.0.0/0"}}], "dataDir": "{}"}}}},
  {{"type": "portmap", "capabilities": {{"portMappings": true}}}},
  {{"type": "loopback"}}]}}"#,
            path(&dir.join("cni-ipam"))
        ),
    );

    let socket = dir.join("containerd.sock");
    let containerd_config = dir.join("containerd.toml");
    write(
        &containerd_config,
        &format!(
            r#"version = 2
root = "{root}"
state = "{state}"
[grpc]
  address = "{socket}"
[plugins."io.containerd.grpc.v1.cri"]
  sandbox_image = "{registry}/{REPOSITORY}/pause:{IMAGE_TAG}"
  # The kubelet asks for a lower OOM score than this machine lets root set
  # (no CAP_SYS_RESOURCE here): take the caller's instead.
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  [plugins."io.containerd.grpc.v1.cri".cni]
    bin_dir = "/usr/lib/cni"
    conf_dir = "{cni}"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc]
    runtime_type = "io.containerd.runc.v2"
  [plugins."io.containerd.grpc.v1.cri".containerd.runtimes.runc.options]
    Root = "{runc}"
  [plugins."io.containerd.grpc.v1.cri".registry.configs."{registry}".tls]
    ca_file = "{ca}"
"#,
            root = path(&dir.join("containerd/root")),
            state = path(&dir.join("containerd/state")),
            socket = path(&socket),
            cni = path(&cni),
            runc = path(&dir.join("runc")),
            ca = path(&dir.join("ca.crt")),
        ),
    );
    programs.push(Program::start(
        Path::new("/usr/bin"),
        &dir,
        "containerd",
        &[format!("--config={}", path(&containerd_config))],
    ));
    wait_for("containerd listening", &mut programs, || socket.exists());

    let kubelet_port = free_port();
    let kubelet_config = dir.join("kubelet.yaml");
    write(
        &kubelet_config,
        &format!(
            "apiVersion: kubelet.config.k8s.io/v1beta1\nkind: KubeletConfiguration\n\
             address: {GATEWAY}\nport: {kubelet_port}\nreadOnlyPort: 0\nhealthzPort: 0\n\
             cgroupDriver: cgroupfs\ncgroupRoot: /{NODE_CGROUP}\nfailCgroupV1: false\nfailSwapOn: false\n\
             containerRuntimeEndpoint: unix://{socket}\n\
             authentication:\n  anonymous: {{enabled: false}}\n  webhook: {{enabled: true}}\n  \
             x509: {{clientCAFile: {ca}}}\nauthorization: {{mode: Webhook}}\n\
             evictionHard: {{memory.available: 100Mi, nodefs.available: 1%, imagefs.available: 1%, \
             nodefs.inodesFree: 1%}}\nserializeImagePulls: false\nresolvConf: /etc/resolv.conf\n",
            socket = path(&socket),
            ca = path(&plane.ca_file()),
        ),
    );
    programs.push(Program::start(
        &bin,
        &dir,
        "kubelet",
        &[
            format!("--config={}", path(&kubelet_config)),
            format!("--kubeconfig={}", path(plane.node_kubeconfig())),
            format!("--root-dir={}", path(&dir.join("kubelet"))),
            format!("--hostname-override={NODE}"),
            // Not loopback (the kubelet refuses it): its own bridge address.
            format!("--node-ip={GATEWAY}"),
            "--v=1".into(),
        ],
    ));

    let proxy_config = dir.join("kube-proxy.yaml");
    write(
        &proxy_config,
        &format!(
            "apiVersion: kubeproxy.config.k8s.io/v1alpha1\nkind: KubeProxyConfiguration\n\
             clientConnection: {{kubeconfig: {kubeconfig}}}\nmode: iptables\n\
             clusterCIDR: {POD_SUBNET}\nhostnameOverride: {NODE}\nbindAddress: 127.0.0.1\n\
             healthzBindAddress: 127.0.0.1:{healthz}\nmetricsBindAddress: 127.0.0.1:{metrics}\n\
             iptables: {{masqueradeAll: true}}\nconntrack: {{maxPerCore: 0}}\n",
            kubeconfig = path(plane.kubeconfig()),
            healthz = free_port(),
            metrics = free_port(),
        ),
    );
    programs.push(Program::start(
        &bin,
        &dir,
        "kube-proxy",
        &[format!("--config={}", path(&proxy_config)), "--v=1".into()],
    ));

    wait_for("the node Ready", &mut programs, || {
        let out = plane.kubectl_run(
            &[
                "get",
                "node",
                NODE,
                "-o",
                "jsonpath={.status.conditions[?(@.type==\"Ready\")].status}",
            ],
            None,
        );
        out.status.success() && String::from_utf8_lossy(&out.stdout).trim() == "True"
    });
    // The NetworkPolicies sless writes, enforced (the bridge ignores them).
    programs.push(super::netpol::start(&netpol, &dir, plane.kubeconfig()));

    let cluster = Cluster {
        plane,
        dir,
        registry,
        ca_pem: tls.ca_pem,
        cert_der: tls.cert_der,
        key_der: tls.key_der,
        images,
        layout,
        started_in: started.elapsed(),
        registry_filled_in,
    };
    (
        cluster,
        Held {
            _programs: programs,
            _reaper: reaper,
            _reaper_stdin: reaper_stdin,
        },
    )
}
