//! Kubernetes for tests, the real one: a control plane built from the
//! upstream modules ([`ControlPlane`]), a node that plays the kubelet's part
//! through the API ([`TestNode`]) or a real node that runs pods
//! ([`Cluster`]), and a proxy in front of the API server
//! that records what a client asked and injects the faults only a test can
//! make ([`KubeProxy`]).

mod cluster;
mod control_plane;
mod front;
mod install;
mod kubelet_logs;
mod netpol;
mod node;
mod pki;
mod proxy;
mod sless_image;

pub use cluster::{BRIDGE, Cluster, GATEWAY, IMAGE_TAG, NODE, NODE_CGROUP, NODE_LOCK};
pub use control_plane::{ControlPlane, OwnedControlPlane};
pub use install::{Installed, SLESS_USER, installed};
pub use node::{NODE_NAME, Outcome, PodView, TestNode};
pub use proxy::{KubeProxy, Request};
pub use sless_image::{sless_image, tcp_front};
