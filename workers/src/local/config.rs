//! The local driver's settings ([`LocalDriverConfig`]) and the build
//! toolchains they name.

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;
use std::time::Duration;

use sless_sandbox::{Identity, Network};

use super::build;
use super::pool::WarmPool;
use super::sandbox::{Isolation, JailSizes, TenantIds};
use crate::driver::Node;
use crate::logs::Shipper;

/// Settings of the [`LocalDriver`](super::LocalDriver).
#[derive(Debug, Clone)]
pub struct LocalDriverConfig {
    /// Root of builds (`builds/{ns}/{name}/{context_sha256}/`), logs
    /// (`logs/{ns}/{name}/`) and the runtime wrappers.
    pub data_dir: PathBuf,
    /// The Python interpreter to run functions and pip with.
    pub python: String,
    /// The Node.js binary that runs nodejs20 functions.
    pub node: String,
    /// npm, for nodejs20 functions with a `package.json`.
    pub npm: String,
    /// The Go toolchain (at least 1.21) that builds go1.23 functions
    /// (`SLESS_GO`); `None` uses `go` from `PATH`.
    pub go: Option<String>,
    /// `GOCACHE` of Go builds.
    pub go_cache: PathBuf,
    /// The worker's environment, which the driver reads none of itself:
    /// functions run without the sandbox, and build steps, get the
    /// variables of it they may see (`PATH`, `HOME`, the locale, proxies, CA
    /// certificates; a jailed build step only pip's, npm's and Go's own
    /// settings), and `node` and `npm` are looked for on its `PATH`. Empty
    /// by default: nothing of the worker's environment is passed on.
    pub env: Vec<(String, String)>,
    /// How long a deploy waits for the function to become healthy.
    pub health_timeout: Duration,
    /// Whether tenants' code runs in the sandbox (the default).
    pub isolation: Isolation,
    /// Who each namespace's code runs as (default: all as `nobody`).
    pub tenants: TenantIds,
    /// Sizes of the sandbox's jails.
    pub jail: JailSizes,
    /// The network of functions and jobs in the sandbox (default: a
    /// namespace of their own, out through slirp4netns). Builds reach out
    /// the same way unless this is the host's network.
    pub network: Network,
    /// The worker the driver runs in, which the log names as where its
    /// functions run (`None`: not said, as in tests of the driver alone).
    pub placement: Option<Node>,
    /// The address functions listen on and the invoke proxy reaches them
    /// at: loopback (the default) when the API runs on this machine.
    pub advertise: IpAddr,
    /// Processes started ahead for deploys and jobs to take (none by
    /// default; only in the sandbox).
    pub warm_pool: WarmPool,
    /// Where what functions and jobs print is kept (`None`: only in the
    /// data directory's files, as in tests of the driver alone).
    pub logs: Option<Shipper>,
}

impl LocalDriverConfig {
    /// The defaults for a data directory: `python3`, `node`, `npm`, `go`,
    /// `GOCACHE` below the data directory, none of the worker's environment
    /// passed on, 60 s health timeout.
    pub fn new(data_dir: impl Into<PathBuf>) -> LocalDriverConfig {
        let data_dir = data_dir.into();
        LocalDriverConfig {
            python: "python3".to_owned(),
            node: "node".to_owned(),
            npm: "npm".to_owned(),
            go: None,
            go_cache: data_dir.join("go/cache"),
            env: Vec::new(),
            health_timeout: Duration::from_secs(60),
            isolation: Isolation::Sandboxed(Default::default()),
            tenants: TenantIds::Shared(Identity::NOBODY),
            jail: JailSizes::default(),
            network: Network::Outbound,
            placement: None,
            advertise: IpAddr::V4(Ipv4Addr::LOCALHOST),
            warm_pool: WarmPool::default(),
            logs: None,
            data_dir,
        }
    }

    pub(super) fn toolchains(&self) -> build::Toolchains {
        build::Toolchains {
            python: self.python.clone(),
            npm: self.npm.clone(),
            go: self.go.clone(),
            go_path: self.data_dir.join("go/path"),
            go_cache: self.go_cache.clone(),
            npm_cache: self.data_dir.join("npm/cache"),
            env: self.env.clone(),
        }
    }

    /// The value of `name` in the worker's environment ([`Self::env`]).
    pub(super) fn env_value(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, _)| k == name)
            .map(|(_, v)| v.as_str())
    }
}
