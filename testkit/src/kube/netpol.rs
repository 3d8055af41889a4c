//! The node's NetworkPolicy enforcer: kube-router's firewall (its network
//! policy controller) alone, as a host process beside kube-proxy, built by
//! `scripts/ensure-netpol`. The CNI bridge ignores NetworkPolicies;
//! kube-router watches them (and the pods, namespaces and nodes they name)
//! and keeps iptables chains and ipsets on the host that filter what pods
//! send and receive, bridged traffic included
//! (`bridge-nf-call-iptables`). Its router (BGP, routes) and service proxy
//! stay off: the bridge routes and kube-proxy serves Services.
//!
//! As everywhere with kube-router, traffic from the node itself to a pod
//! is allowed whatever the policies say (the kubelet's probes, and sless
//! outside the cluster calling its functions at their cluster IPs from the
//! node). What it leaves on the host when it is killed (its chains, the
//! jumps to them, its ipsets) stays until [`CLEANUP`] lifts it, which the
//! node's reaper runs: left behind, its rules would reject traffic of the
//! next node's pods that get the same addresses.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::cluster::NODE;
use super::control_plane::{Program, SERVICE_RANGE, tail};

/// The chain kube-router sends forwarded traffic through, made on its
/// first sync.
const FORWARD_CHAIN: &str = "KUBE-ROUTER-FORWARD";
/// How long its first sync may take.
const START_DEADLINE: Duration = Duration::from_secs(120);

/// Shell that lifts what kube-router's firewall left on the host: the jumps
/// from the filter table's INPUT, FORWARD and OUTPUT to its chains, its
/// chains (`KUBE-ROUTER-*`, a chain per pod `KUBE-POD-FW-*` and per policy
/// `KUBE-NWPLCY-*`) and its ipsets (`KUBE-SRC-*`, `KUBE-DST-*`). Needs
/// iptables-save, iptables and ipset; does nothing when nothing is left.
/// (kube-router's own `--cleanup-config` does not: in v2.1.0 it lifts none
/// of the firewall's rules and then crashes in its service proxy's part.)
pub(crate) const CLEANUP: &str = r#"
iptables-save -t filter | grep -E -- '^-A (INPUT|FORWARD|OUTPUT) .*-j KUBE-ROUTER-' | sed 's/^-A/-D/' \
  | while read -r rule; do eval "iptables -w -t filter $rule"; done
chains=$(iptables-save -t filter | sed -n -E 's/^:(KUBE-ROUTER-[A-Z]+|KUBE-POD-FW-[A-Z0-9]+|KUBE-NWPLCY-[A-Z0-9]+) .*/\1/p')
for c in $chains; do iptables -w -t filter -F "$c"; done
for c in $chains; do iptables -w -t filter -X "$c"; done
ipset list -n 2>/dev/null | grep -E '^(KUBE-SRC-|KUBE-DST-)' | while read -r s; do ipset destroy "$s"; done
true
"#;

/// Starts kube-router's firewall for the node, its log in `dir`, reaching
/// the API server with `kubeconfig`, and returns once it filters (its
/// chain is in the filter table). `bin` is the path
/// `scripts/ensure-netpol` printed. The node must be registered: it reads
/// its own Node.
pub(crate) fn start(bin: &Path, dir: &Path, kubeconfig: &Path) -> Program {
    let folder = bin.parent().expect("kube-router's directory");
    let mut program = Program::start(
        folder,
        dir,
        "kube-router",
        &[
            format!("--kubeconfig={}", kubeconfig.display()),
            format!("--hostname-override={NODE}"),
            "--run-firewall=true".into(),
            "--run-router=false".into(),
            "--run-service-proxy=false".into(),
            "--enable-cni=false".into(),
            "--enable-ipv6=false".into(),
            format!("--service-cluster-ip-range={SERVICE_RANGE}"),
            // No listener of its own: nothing asks it.
            "--health-port=0".into(),
            "--metrics-port=0".into(),
            "--v=1".into(),
        ],
    );
    let deadline = Instant::now() + START_DEADLINE;
    loop {
        program.check();
        let listed = Command::new("iptables")
            .args(["-w", "-t", "filter", "-S", FORWARD_CHAIN])
            .output()
            .is_ok_and(|o| o.status.success());
        if listed {
            return program;
        }
        assert!(
            Instant::now() < deadline,
            "kube-router made no {FORWARD_CHAIN} chain in {START_DEADLINE:?}:\n{}",
            tail(&program.log)
        );
        std::thread::sleep(Duration::from_millis(200));
    }
}
