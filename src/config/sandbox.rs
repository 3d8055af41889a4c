//! The local driver's sandbox, from `SLESS_SANDBOX_*`, `SLESS_BWRAP` and
//! `SLESS_BUILD_MEMORY_MB` / `SLESS_BUILD_PROCESSES` (docs/configuration.md,
//! "The sandbox"): a part of the [`Local`](super::Local) section.

use std::path::PathBuf;

use anyhow::bail;
use sless_sandbox::Network;
use sless_workers::local::WarmPool;
use sless_workers::local::sandbox::JailSizes;

use super::{Get, number_from};

/// The first uid of the default range: far above the users a machine has
/// and the ranges `/etc/subuid` hands out.
pub const DEFAULT_FIRST_UID: u32 = 2_000_000_000;
/// How many uids the default range has: one per namespace.
pub const DEFAULT_UID_COUNT: u32 = 1_000_000;

/// The first uid of the warm pool's default range, right after the
/// namespaces'.
pub const DEFAULT_FIRST_POOL_UID: u32 = 2_001_000_000;
/// How many uids the warm pool's default range has: one per pooled
/// process, taken in turn.
pub const DEFAULT_POOL_UID_COUNT: u32 = 1_000_000;
/// Processes each runtime's warm pool keeps ready by default.
pub const DEFAULT_WARM_POOL: u32 = 2;

/// What the local driver's sandbox is made of.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxSettings {
    /// The uids given to namespaces: `first`, then the `count - 1` after it.
    pub first_uid: u32,
    pub uid_count: u32,
    pub sizes: JailSizes,
    /// A delegated cgroup (v2) to make jails' cgroups below.
    pub cgroup: Option<PathBuf>,
    /// Resource limits instead of cgroups.
    pub rlimits_only: bool,
    /// bwrap, where it is not on `PATH` (`SLESS_BWRAP`).
    pub bwrap: Option<PathBuf>,
    /// The warm pool: `SLESS_WARM_POOL_PYTHON311`, `SLESS_WARM_POOL_NODEJS20`
    /// and its uids, `SLESS_WARM_POOL_UIDS`.
    pub pool: WarmPool,
    /// The network of functions and jobs (`SLESS_SANDBOX_NETWORK`).
    pub network: Network,
}

pub(super) fn sandbox_from(get: Get<'_>) -> anyhow::Result<SandboxSettings> {
    let (first_uid, uid_count) = match get("SLESS_SANDBOX_UIDS") {
        None => (DEFAULT_FIRST_UID, DEFAULT_UID_COUNT),
        Some(range) => uid_range("SLESS_SANDBOX_UIDS", &range)?,
    };
    let (first_pool_uid, pool_uid_count) = match get("SLESS_WARM_POOL_UIDS") {
        None => (DEFAULT_FIRST_POOL_UID, DEFAULT_POOL_UID_COUNT),
        Some(range) => uid_range("SLESS_WARM_POOL_UIDS", &range)?,
    };
    let ends = |first: u32, count: u32| u64::from(first) + u64::from(count);
    if u64::from(first_pool_uid) < ends(first_uid, uid_count)
        && u64::from(first_uid) < ends(first_pool_uid, pool_uid_count)
    {
        bail!(
            "SLESS_WARM_POOL_UIDS overlaps SLESS_SANDBOX_UIDS: a pooled process would run \
             as a namespace's user"
        );
    }
    let d = JailSizes::default();
    let sized = |name: &str, default: u32, min: u32, max: u32| -> anyhow::Result<u32> {
        let v: u32 = number_from(get, name, default)?;
        if !(min..=max).contains(&v) {
            bail!("{name}={v} must be from {min} to {max}");
        }
        Ok(v)
    };
    let sizes = JailSizes {
        tmp_mb: sized("SLESS_SANDBOX_TMP_MB", d.tmp_mb, 1, 65_536)?,
        processes: sized("SLESS_SANDBOX_PROCESSES", d.processes, 8, 1_000_000)?,
        file_mb: sized("SLESS_SANDBOX_FILE_MB", d.file_mb, 1, 1_048_576)?,
        build_memory_mb: sized("SLESS_BUILD_MEMORY_MB", d.build_memory_mb, 64, 1_048_576)?,
        build_processes: sized("SLESS_BUILD_PROCESSES", d.build_processes, 8, 1_000_000)?,
    };
    let rlimits_only = match get("SLESS_SANDBOX_LIMITS").as_deref() {
        None | Some("auto") => false,
        Some("rlimits") => true,
        Some(other) => bail!(
            "SLESS_SANDBOX_LIMITS={other:?}: use auto (cgroups where they can be written, \
             else resource limits) or rlimits"
        ),
    };
    let pool = WarmPool {
        python: sized("SLESS_WARM_POOL_PYTHON311", DEFAULT_WARM_POOL, 0, 64)?,
        node: sized("SLESS_WARM_POOL_NODEJS20", DEFAULT_WARM_POOL, 0, 64)?,
        uids: Some((first_pool_uid, pool_uid_count)),
    };
    if get("SLESS_WARM_POOL_GO123").is_some() {
        bail!(
            "SLESS_WARM_POOL_GO123: go1.23 has no warm pool (a Go function's cold start \
             is its compiled binary's start); unset it"
        );
    }
    let network = match get("SLESS_SANDBOX_NETWORK").as_deref() {
        None | Some("outbound") => Network::Outbound,
        Some("loopback") => Network::Loopback,
        Some("host") => Network::Host,
        Some(other) => bail!(
            "SLESS_SANDBOX_NETWORK={other:?}: use outbound (a network namespace of each \
             function's own, out through slirp4netns), loopback (no way out) or host (the \
             machine's network, shared with every function and sless itself)"
        ),
    };
    Ok(SandboxSettings {
        pool,
        network,
        first_uid,
        uid_count,
        sizes,
        cgroup: get("SLESS_SANDBOX_CGROUP").map(PathBuf::from),
        rlimits_only,
        bwrap: get("SLESS_BWRAP").map(PathBuf::from),
    })
}

/// `FIRST-LAST`, both included, of unprivileged uids, from `name`.
fn uid_range(name: &str, range: &str) -> anyhow::Result<(u32, u32)> {
    let bad = |why: &str| anyhow::anyhow!("{name}={range:?}: {why}");
    let (first, last) = range
        .split_once('-')
        .ok_or_else(|| bad("write it as FIRST-LAST, e.g. 2000000000-2000999999"))?;
    let parse = |s: &str| {
        s.trim()
            .parse::<u32>()
            .map_err(|_| bad("FIRST and LAST are uids (whole numbers)"))
    };
    let (first, last) = (parse(first)?, parse(last)?);
    if first < 1000 {
        return Err(bad(
            "FIRST must be at least 1000: below are the system's own users",
        ));
    }
    if last < first {
        return Err(bad("LAST is below FIRST"));
    }
    if last >= 4_294_967_294 {
        return Err(bad(
            "LAST must be below 4294967294 (the kernel's overflow uid)",
        ));
    }
    Ok((first, last - first + 1))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with(vars: &[(&str, &str)]) -> anyhow::Result<SandboxSettings> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        sandbox_from(&|name| vars.get(name).cloned())
    }

    #[test]
    fn sandbox_settings_have_defaults_and_name_a_bad_value() {
        let d = with(&[]).unwrap();
        assert_eq!(
            (d.first_uid, d.uid_count),
            (DEFAULT_FIRST_UID, DEFAULT_UID_COUNT)
        );
        assert_eq!(d.sizes, JailSizes::default());
        assert_eq!(
            d.pool,
            WarmPool {
                python: 2,
                node: 2,
                uids: Some((DEFAULT_FIRST_POOL_UID, DEFAULT_POOL_UID_COUNT)),
            }
        );
        let p = with(&[
            ("SLESS_WARM_POOL_PYTHON311", "0"),
            ("SLESS_WARM_POOL_NODEJS20", "5"),
            ("SLESS_WARM_POOL_UIDS", "400000-400009"),
        ])
        .unwrap();
        assert_eq!((p.pool.python, p.pool.node), (0, 5));
        assert_eq!(p.pool.uids, Some((400_000, 10)));
        assert!(!d.rlimits_only && d.cgroup.is_none());
        assert_eq!(d.network, Network::Outbound);
        for (value, network) in [
            ("outbound", Network::Outbound),
            ("loopback", Network::Loopback),
            ("host", Network::Host),
        ] {
            let n = with(&[("SLESS_SANDBOX_NETWORK", value)]).unwrap();
            assert_eq!(n.network, network, "{value}");
        }
        let s = with(&[
            ("SLESS_SANDBOX_UIDS", "300000-300099"),
            ("SLESS_SANDBOX_TMP_MB", "16"),
            ("SLESS_SANDBOX_LIMITS", "rlimits"),
        ])
        .unwrap();
        assert_eq!((s.first_uid, s.uid_count), (300_000, 100));
        assert_eq!(s.sizes.tmp_mb, 16);
        assert!(s.rlimits_only);
        for (name, value) in [
            ("SLESS_SANDBOX_UIDS", "300000"),
            ("SLESS_SANDBOX_UIDS", "0-100"),
            ("SLESS_SANDBOX_UIDS", "5000-4000"),
            ("SLESS_SANDBOX_UIDS", "5000-4294967295"),
            ("SLESS_SANDBOX_TMP_MB", "0"),
            ("SLESS_SANDBOX_PROCESSES", "two"),
            ("SLESS_BUILD_MEMORY_MB", "1"),
            ("SLESS_SANDBOX_LIMITS", "cgroups"),
            ("SLESS_WARM_POOL_PYTHON311", "65"),
            ("SLESS_WARM_POOL_NODEJS20", "-1"),
            ("SLESS_WARM_POOL_UIDS", "2000999990-2001000100"),
            ("SLESS_WARM_POOL_GO123", "2"),
            ("SLESS_SANDBOX_NETWORK", "none"),
            ("SLESS_SANDBOX_NETWORK", "Outbound"),
        ] {
            let e = with(&[(name, value)]).unwrap_err().to_string();
            assert!(e.starts_with(name), "{name}={value}: {e}");
        }
    }
}
