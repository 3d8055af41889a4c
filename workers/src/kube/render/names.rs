//! Names of the objects we create, the images we build and where a served
//! function is reached.
//!
//! Every name is a deterministic function of what it names. Names that
//! must fit a Kubernetes limit are cut and given a short hash of the whole
//! input, so two inputs that differ still give two names. Object kinds
//! share a namespace's Jobs and pods, so each kind of run has a prefix of
//! its own: `job-` (a user's job), `run-` (a cron tick sless runs itself)
//! and `cron-` (a CronJob, whose Jobs are `cron-{trigger}-{minutes}`).

use k8s_openapi::api::core::v1::Service;
use sless_domain::archive::sha256_hex;
use sless_domain::{FunctionKey, Runtime};

use crate::kube::KubeSettings;

/// The longest DNS-1123 label, and the longest label value.
pub const MAX_LABEL: usize = 63;
/// The longest CronJob name: its Jobs get an 11-character suffix.
pub const MAX_CRONJOB: usize = 52;
/// Hex digits of the hash a cut name ends with.
const HASH_LEN: usize = 10;

/// The repository a function's images are pushed to:
/// `{registry}/{ns}-{name}`.
///
/// It is unambiguous only because tenant namespaces have a fixed shape
/// (`sless-` and 16 hex digits).
pub fn repository(settings: &KubeSettings, key: &FunctionKey) -> String {
    format!("{}/{}-{}", settings.registry, key.namespace, key.name)
}

/// The tag a build pushes: `{repository}:v{version}-{sha8}`, where `sha8`
/// is the start of the build context's sha256. Nothing runs it: a tag can
/// be moved, so what runs is the digest the push gave ([`pinned_image`]).
pub fn image(settings: &KubeSettings, key: &FunctionKey, version: u32, sha256: &str) -> String {
    format!(
        "{}:{}",
        repository(settings, key),
        build_tag(version, sha256)
    )
}

/// What a build's artifact is, and what Deployments, CronJobs and Jobs
/// run: `{repository}@sha256:{64 hex digits}`, from the digest the push
/// reported (kaniko's `--digest-file`, surrounding whitespace ignored).
/// An error says what is wrong with `digest`.
pub fn pinned_image(
    settings: &KubeSettings,
    key: &FunctionKey,
    digest: &str,
) -> Result<String, String> {
    let digest = digest.trim();
    if digest.is_empty() {
        return Err("no image digest".to_owned());
    }
    let hex = digest.strip_prefix("sha256:").unwrap_or_default();
    if hex.len() != 64 || !hex.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')) {
        let shown: String = digest.chars().take(100).collect();
        return Err(format!(
            "{shown:?}, which is not an image digest (sha256: and 64 hex digits)"
        ));
    }
    Ok(format!("{}@{digest}", repository(settings, key)))
}

/// Whether `reference` is a pinned image of the function's repository, as
/// [`pinned_image`] makes them (the artifact of an earlier build, say).
pub fn is_pinned_image(settings: &KubeSettings, key: &FunctionKey, reference: &str) -> bool {
    reference.split_once('@').is_some_and(|(repo, digest)| {
        repo == repository(settings, key)
            && pinned_image(settings, key, digest).as_deref() == Ok(reference)
    })
}

/// `v{version}-{sha8}`: the tag of a build's image and its
/// `sless.dev/build` label.
pub fn build_tag(version: u32, sha256: &str) -> String {
    format!("v{version}-{}", sha8(sha256))
}

/// The base image of a runtime: `{runtime_image_prefix}{runtime}:{runtime_image_tag}`.
pub fn runtime_image(settings: &KubeSettings, runtime: Runtime) -> String {
    format!(
        "{}{}:{}",
        settings.runtime_image_prefix, runtime, settings.runtime_image_tag
    )
}

/// The name of a served function's Deployment and Service: the function's
/// own name (a DNS-1035 label already: it starts with a letter and has at
/// most 40 characters).
pub fn function_name(key: &FunctionKey) -> String {
    fit(key.name.as_str(), MAX_LABEL)
}

/// Where the invoke proxy reaches a served function by the cluster's DNS
/// ([`FunctionAddress::Dns`](crate::kube::FunctionAddress::Dns)):
/// `http://{name}.{ns}.svc.cluster.local:{function_port}`.
pub fn endpoint(settings: &KubeSettings, key: &FunctionKey) -> String {
    format!(
        "http://{}.{}.svc.cluster.local:{}",
        function_name(key),
        key.namespace,
        settings.function_port
    )
}

/// Where the invoke proxy reaches a served function by the address the
/// cluster gave its Service
/// ([`FunctionAddress::ClusterIp`](crate::kube::FunctionAddress::ClusterIp)):
/// `http://{clusterIP}:{function_port}` (an IPv6 address in brackets),
/// read from `service` as the cluster holds it. An error names a Service
/// without one (a headless Service, `clusterIP: None`, or none assigned).
pub fn cluster_ip_endpoint(settings: &KubeSettings, service: &Service) -> Result<String, String> {
    let ip = service
        .spec
        .as_ref()
        .and_then(|s| s.cluster_ip.as_deref())
        .unwrap_or_default();
    let which = || {
        format!(
            "the Service {}/{}",
            service.metadata.namespace.as_deref().unwrap_or_default(),
            service.metadata.name.as_deref().unwrap_or_default()
        )
    };
    match ip.parse::<std::net::IpAddr>() {
        Ok(std::net::IpAddr::V4(ip)) => Ok(format!("http://{ip}:{}", settings.function_port)),
        Ok(std::net::IpAddr::V6(ip)) => Ok(format!("http://[{ip}]:{}", settings.function_port)),
        Err(_) if ip.is_empty() => Err(format!("{} has no cluster IP", which())),
        Err(_) => Err(format!(
            "{} has no cluster IP to reach it by (clusterIP {ip:?})",
            which()
        )),
    }
}

/// The name of the kaniko Job (and of its Secret) that builds `version` of
/// a function from the context with `sha256`. Builds of every tenant share
/// the build namespace, and `-` may appear in both a namespace and a
/// function name, so the name always ends with a hash of the whole,
/// unambiguous key: `{ns}-{name}-v{version}` (cut to fit) `-{hash}`.
pub fn build_job_name(key: &FunctionKey, version: u32, sha256: &str) -> String {
    let readable = format!("{}-{}-v{version}", key.namespace, key.name);
    let unique = format!("{}/{}/{version}/{sha256}", key.namespace, key.name);
    with_hash(&readable, &unique, MAX_LABEL)
}

/// The name of a cron trigger's CronJob: `cron-{trigger}`, at most 52
/// characters.
pub fn cronjob_name(trigger: &str) -> String {
    fit(&dns_chars(&format!("cron-{trigger}")), MAX_CRONJOB)
}

/// What a run id (`JobRequest::run`) names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunId<'a> {
    /// `job/{ns}/{name}`: a user's job.
    Job { name: &'a str },
    /// `cron/{ns}/{trigger}/{unix}`: a cron trigger's tick.
    Cron { trigger: &'a str, at: &'a str },
    /// Anything else.
    Other,
}

impl<'a> RunId<'a> {
    pub fn parse(run: &'a str) -> RunId<'a> {
        let parts: Vec<&str> = run.split('/').collect();
        match parts.as_slice() {
            ["job", _, name] if !name.is_empty() => RunId::Job { name },
            ["cron", _, trigger, at]
                if !trigger.is_empty()
                    && !at.is_empty()
                    && at.bytes().all(|b| b.is_ascii_digit()) =>
            {
                RunId::Cron { trigger, at }
            }
            _ => RunId::Other,
        }
    }
}

/// The name of the Job of one run, at most 63 characters: `job-{name}` for
/// a user's job, `run-{trigger}-{unix}` for a cron tick, `run-{hash}` for
/// any other run id.
pub fn run_job_name(run: &str) -> String {
    match RunId::parse(run) {
        RunId::Job { name } => fit(&dns_chars(&format!("job-{name}")), MAX_LABEL),
        RunId::Cron { trigger, at } => fit(&dns_chars(&format!("run-{trigger}-{at}")), MAX_LABEL),
        RunId::Other => format!("run-{}", &sha256_hex(run.as_bytes())[..16]),
    }
}

/// The name of the Secret holding a run's event: `{job}-event-{nonce}`.
/// The nonce keeps it apart from the Secret of an earlier Job of the same
/// name, which the cluster may not have collected yet.
pub fn run_event_secret_name(job: &str, nonce: &str) -> String {
    format!("{job}-event-{nonce}")
}

/// A valid label value (at most 63 of `A-Za-z0-9._-`, starting and ending
/// with a letter or digit, or empty) for `s`: `s` itself when it is one,
/// else its valid characters, cut, and a hash of `s`.
pub fn label_value(s: &str) -> String {
    if is_label_value(s) {
        return s.to_owned();
    }
    let cleaned: String = s
        .chars()
        .map(|c| {
            if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                c
            } else {
                '-'
            }
        })
        .collect();
    with_hash(&cleaned, s, MAX_LABEL)
}

/// Whether `s` is a valid label value.
pub fn is_label_value(s: &str) -> bool {
    s.is_empty()
        || (s.len() <= MAX_LABEL
            && s.bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'_' | b'-'))
            && s.starts_with(|c: char| c.is_ascii_alphanumeric())
            && s.ends_with(|c: char| c.is_ascii_alphanumeric()))
}

/// Whether `s` is a DNS-1123 label of at most `max` characters.
pub fn is_dns_label(s: &str, max: usize) -> bool {
    !s.is_empty()
        && s.len() <= max
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// The first 8 characters of a sha256 (all of it when shorter).
fn sha8(sha256: &str) -> &str {
    sha256.get(..8).unwrap_or(sha256)
}

/// `s` in DNS-1123 characters: lowercase, anything else becomes `-`.
fn dns_chars(s: &str) -> String {
    s.chars()
        .map(|c| {
            let c = c.to_ascii_lowercase();
            if c.is_ascii_lowercase() || c.is_ascii_digit() {
                c
            } else {
                '-'
            }
        })
        .collect()
}

/// `s` when it fits in `max` characters, else its start and a hash of it.
fn fit(s: &str, max: usize) -> String {
    if s.len() <= max {
        s.to_owned()
    } else {
        with_hash(s, s, max)
    }
}

/// `{readable, cut}-{hash of unique}` in at most `max` characters. The cut
/// part loses punctuation at either end, so the result starts with a letter
/// or digit and ends with a hex digit.
fn with_hash(readable: &str, unique: &str, max: usize) -> String {
    let hash = &sha256_hex(unique.as_bytes())[..HASH_LEN];
    let room = max - HASH_LEN - 1;
    let cut = readable
        .get(..room.min(readable.len()))
        .unwrap_or("")
        .trim_matches(|c: char| !c.is_ascii_alphanumeric());
    if cut.is_empty() {
        hash.to_owned()
    } else {
        format!("{cut}-{hash}")
    }
}
