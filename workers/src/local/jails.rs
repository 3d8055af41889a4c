//! The jails tenants' code runs in: what every jailed function, job and
//! build step gets ([`Jails`]), and the environment jailed and Python
//! processes start with.

use sless_sandbox::{Identity, Limits, Mount, Network, Sandbox};

use super::sandbox::{JailParts, JailSizes, Tenants, Toolchain};

/// The environment every jailed function or job starts with, before its
/// own.
pub(crate) fn jailed_env(jails: &Jails) -> Vec<(String, String)> {
    vec![
        ("PATH".to_owned(), jails.toolchain.path.clone()),
        ("HOME".to_owned(), "/tmp".to_owned()),
        ("TMPDIR".to_owned(), "/tmp".to_owned()),
        ("LANG".to_owned(), "C.UTF-8".to_owned()),
    ]
}

/// What every Python function's interpreter is started with, after the
/// function's own environment.
pub(crate) fn python_env() -> [(String, String); 2] {
    [
        ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
        ("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()),
    ]
}

/// What runs tenants' code in jails.
pub(crate) struct Jails {
    pub sandbox: Sandbox,
    pub tenants: Tenants,
    pub toolchain: Toolchain,
    pub sizes: JailSizes,
    /// The network of functions and jobs.
    pub network: Network,
    /// Marks the driver's jails (`sless_sandbox::OWNER_ENV`).
    pub owner: String,
}

impl Jails {
    /// The network of a build step: out through slirp4netns (package
    /// registries), or the host's where functions have it too.
    pub(crate) fn build_network(&self) -> Network {
        match self.network {
            Network::Host => Network::Host,
            Network::Loopback | Network::Outbound => Network::Outbound,
        }
    }

    /// A jail of a namespace's user with these mounts, the tools'
    /// directories, and the limits of a function or job of `memory_mb`.
    pub(crate) fn parts(
        &self,
        identity: Identity,
        mut mounts: Vec<Mount>,
        memory_mb: u32,
        label: String,
    ) -> JailParts {
        mounts.extend(self.toolchain.mounts());
        JailParts {
            sandbox: self.sandbox.clone(),
            identity,
            mounts,
            limits: Limits {
                memory_bytes: Some(u64::from(memory_mb) << 20),
                processes: Some(u64::from(self.sizes.processes)),
                file_bytes: Some(u64::from(self.sizes.file_mb) << 20),
                cpu_secs: None,
            },
            tmp_bytes: u64::from(self.sizes.tmp_mb) << 20,
            label,
            network: self.network,
            owner: self.owner.clone(),
        }
    }
}
