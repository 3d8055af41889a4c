//! The Kubernetes driver (`SLESS_DRIVER=kubernetes`), from `SLESS_KUBE_*`
//! (docs/kubernetes.md explains each). `SLESS_KUBE_REGISTRY` is required.

use anyhow::{Context, bail};
use sless_workers::kube::render::names::is_dns_label;
use sless_workers::kube::{FunctionAddress, KubeSettings};

use super::Get;
use super::source::var;

/// The Kubernetes driver's settings.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kube {
    pub settings: KubeSettings,
}

impl Kube {
    pub fn from_env() -> anyhow::Result<Kube> {
        Kube::from(&var)
    }

    pub(super) fn from(get: Get<'_>) -> anyhow::Result<Kube> {
        Ok(Kube {
            settings: read(get)?,
        })
    }
}

fn read(get: Get<'_>) -> anyhow::Result<KubeSettings> {
    let registry = get("SLESS_KUBE_REGISTRY").context(
        "SLESS_DRIVER=kubernetes needs SLESS_KUBE_REGISTRY (where images are pushed, e.g. registry.example.com/sless)",
    )?;
    let mut s = KubeSettings::new(registry);
    let text = |name: &str, field: &mut String| {
        if let Some(v) = get(name) {
            *field = v;
        }
    };
    text("SLESS_KUBE_SYSTEM_NAMESPACE", &mut s.system_namespace);
    text("SLESS_KUBE_BUILD_NAMESPACE", &mut s.build_namespace);
    text("SLESS_KUBE_KANIKO_IMAGE", &mut s.kaniko_image);
    text(
        "SLESS_KUBE_REGISTRY_PUSH_SECRET",
        &mut s.registry_push_secret,
    );
    text(
        "SLESS_KUBE_RUNTIME_IMAGE_PREFIX",
        &mut s.runtime_image_prefix,
    );
    text("SLESS_KUBE_RUNTIME_IMAGE_TAG", &mut s.runtime_image_tag);
    text("SLESS_KUBE_CPU_REQUEST", &mut s.cpu_request);
    text("SLESS_KUBE_CPU_LIMIT", &mut s.cpu_limit);
    text("SLESS_KUBE_BUILD_CPU_REQUEST", &mut s.build_cpu_request);
    text("SLESS_KUBE_BUILD_CPU_LIMIT", &mut s.build_cpu_limit);
    text("SLESS_KUBE_QUOTA_CPU", &mut s.quota.cpu_limits);
    text("SLESS_KUBE_QUOTA_MEMORY", &mut s.quota.memory_limits);
    text(
        "SLESS_KUBE_QUOTA_EPHEMERAL_STORAGE",
        &mut s.quota.ephemeral_storage_limits,
    );
    s.registry_pull_secret = get("SLESS_KUBE_REGISTRY_PULL_SECRET");
    if let Some(v) = get("SLESS_KUBE_BUILD_CA_SECRET") {
        if !is_object_name(&v) {
            bail!(
                "SLESS_KUBE_BUILD_CA_SECRET={v:?} is not the name of a Secret \
                 (lowercase letters, digits, '-' and '.', at most 253)"
            );
        }
        s.build_ca_secret = Some(v);
    }
    s.build_cache_repo = build_cache_repo(get, &s.registry)?;
    if let Some(v) = get("SLESS_KUBE_FUNCTION_ADDRESS") {
        s.function_address = FunctionAddress::parse(&v)
            .with_context(|| format!("SLESS_KUBE_FUNCTION_ADDRESS={v:?}: use dns or cluster-ip"))?;
    }
    let num = |name: &str, default: u64, range: std::ops::RangeInclusive<u64>| {
        let Some(v) = get(name) else {
            return Ok(default);
        };
        let n: u64 = v
            .parse()
            .map_err(|e| anyhow::anyhow!("{name}={v:?} is not a number: {e}"))?;
        if !range.contains(&n) {
            bail!(
                "{name}={n} is out of range ({}..={})",
                range.start(),
                range.end()
            );
        }
        Ok(n)
    };
    let small = |n: u64| u32::try_from(n).unwrap_or(u32::MAX);
    s.build_timeout_secs = small(num(
        "SLESS_KUBE_BUILD_TIMEOUT_SECS",
        s.build_timeout_secs.into(),
        60..=86_400,
    )?);
    s.finished_ttl_secs = small(num(
        "SLESS_KUBE_FINISHED_TTL_SECS",
        s.finished_ttl_secs.into(),
        0..=2_592_000,
    )?);
    s.rollout_timeout_secs = small(num(
        "SLESS_KUBE_ROLLOUT_TIMEOUT_SECS",
        s.rollout_timeout_secs.into(),
        10..=86_400,
    )?);
    s.function_port = u16::try_from(num(
        "SLESS_KUBE_FUNCTION_PORT",
        s.function_port.into(),
        1024..=65_535,
    )?)?;
    s.tmp_mb = small(num("SLESS_KUBE_TMP_MB", s.tmp_mb.into(), 1..=65_536)?);
    s.build_memory_mb = small(num(
        "SLESS_KUBE_BUILD_MEMORY_MB",
        s.build_memory_mb.into(),
        256..=65_536,
    )?);
    s.build_ephemeral_mb = small(num(
        "SLESS_KUBE_BUILD_EPHEMERAL_MB",
        s.build_ephemeral_mb.into(),
        1024..=1_048_576,
    )?);
    s.quota.pods = small(num(
        "SLESS_KUBE_QUOTA_PODS",
        s.quota.pods.into(),
        1..=10_000,
    )?);
    s.cron_starting_deadline_secs = i64::try_from(num(
        "SLESS_CRON_STARTING_DEADLINE_SECS",
        u64::try_from(s.cron_starting_deadline_secs).unwrap_or(3600),
        10..=604_800,
    )?)?;
    if let Some(v) = get("SLESS_KUBE_FUNCTION_EGRESS") {
        s.function_egress = match v.as_str() {
            "true" | "1" => true,
            "false" | "0" => false,
            _ => bail!("SLESS_KUBE_FUNCTION_EGRESS={v:?}: use true or false"),
        };
    }
    if let Some(v) = get("SLESS_KUBE_EGRESS_DENIED_CIDRS") {
        s.egress_denied_cidrs = v
            .split(',')
            .map(str::trim)
            .filter(|c| !c.is_empty())
            .map(|c| {
                cidr(c)
                    .map_err(|why| anyhow::anyhow!("SLESS_KUBE_EGRESS_DENIED_CIDRS: {c:?} {why}"))
            })
            .collect::<anyhow::Result<_>>()?;
    }
    Ok(s)
}

/// kaniko's layer cache: `SLESS_KUBE_BUILD_CACHE` (`true`, the default, or
/// `false`) and the repository `SLESS_KUBE_BUILD_CACHE_REPO` (default
/// `{registry}/cache`), a repository without a tag or digest.
fn build_cache_repo(get: Get<'_>, registry: &str) -> anyhow::Result<Option<String>> {
    let on = match get("SLESS_KUBE_BUILD_CACHE").as_deref() {
        None | Some("true" | "1") => true,
        Some("false" | "0") => false,
        Some(v) => bail!("SLESS_KUBE_BUILD_CACHE={v:?}: use true or false"),
    };
    let Some(repo) = get("SLESS_KUBE_BUILD_CACHE_REPO") else {
        return Ok(on.then(|| format!("{registry}/cache")));
    };
    let repo = repo.trim_end_matches('/');
    let last = repo.rsplit('/').next().unwrap_or_default();
    if repo.is_empty()
        || !repo.contains('/')
        || last.contains(':')
        || repo.contains('@')
        || repo
            .chars()
            .any(|c| c.is_whitespace() || c.is_ascii_uppercase())
    {
        bail!(
            "SLESS_KUBE_BUILD_CACHE_REPO={repo:?} is not a repository (like \
             registry.example.com/sless/cache: a host and a lowercase path, no tag or digest)"
        );
    }
    Ok(on.then(|| repo.to_owned()))
}

/// Whether `name` is a name the API server takes for a Secret: a DNS-1123
/// subdomain (labels joined by dots, at most 253 characters).
fn is_object_name(name: &str) -> bool {
    name.len() <= 253 && name.split('.').all(|label| is_dns_label(label, 63))
}

/// An address range as a NetworkPolicy's `ipBlock` takes it: `address/bits`
/// with no bit set past the prefix (the API server refuses the policy
/// otherwise, and every tenant's `ensure` with it).
fn cidr(text: &str) -> Result<String, String> {
    let (address, bits) = text
        .split_once('/')
        .ok_or("is not an address range (like 10.0.0.0/8)")?;
    let address: std::net::IpAddr = address
        .parse()
        .map_err(|_| format!("does not start with an IP address: {address:?}"))?;
    let width: u32 = if address.is_ipv4() { 32 } else { 128 };
    let bits: u32 = bits
        .parse()
        .ok()
        .filter(|b| *b <= width)
        .ok_or(format!("has a prefix length that is not 0 to {width}"))?;
    let value: u128 = match address {
        std::net::IpAddr::V4(a) => u32::from(a).into(),
        std::net::IpAddr::V6(a) => u128::from(a),
    };
    let host_bits = width - bits;
    if host_bits > 0 && value & ((1u128 << host_bits) - 1) != 0 {
        let network = value & !((1u128 << host_bits) - 1);
        let network = match address {
            std::net::IpAddr::V4(_) => std::net::Ipv4Addr::from(network as u32).to_string(),
            std::net::IpAddr::V6(_) => std::net::Ipv6Addr::from(network).to_string(),
        };
        return Err(format!(
            "sets bits past its prefix: did you mean {network}/{bits}?"
        ));
    }
    Ok(text.to_owned())
}
