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
//! node). What it leaves on the host (its chains, the jumps to them, its
//! ipsets) is lifted by `kube-router --cleanup-config`, which the node's
//! reaper runs.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use super::cluster::NODE;
use super::control_plane::{Program, tail};

/// The Service range the test control plane allocates cluster IPs from
/// (its kube-apiserver's `--service-cluster-ip-range`).
const SERVICE_RANGE: &str = "10.0.0.0/24";
/// The chain kube-router sends forwarded traffic through, made on its
/// first sync.
const FORWARD_CHAIN: &str = "KUBE-ROUTER-FORWARD";
/// How long its first sync may take.
const START_DEADLINE: Duration = Duration::from_secs(120);

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
