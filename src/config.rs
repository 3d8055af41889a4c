//! Configuration of the `sless` binary: environment variables only, never a
//! secret in code.

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use sless_api::Auth;
use sless_api::auth::{
    AuthSettings, DEFAULT_ADMIN_CLAIM, KeyError, KeySet, MAX_LEEWAY, TokenAlgorithm,
};
use sless_api::invocations::RecorderConfig;
use sless_api::proxy::ProxyLimits;
use sless_api::quota::{Quota, Quotas};
use sless_store::blobs::S3Config;
use sless_store::queue::Backoff;
use sless_workers::WorkerConfig;
use sless_workers::kube::KubeSettings;

mod sandbox;
pub use sandbox::sandbox;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn number<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    number_from(&|name| var(name), name, default)
}

/// `number`, reading the variable through `get`.
fn number_from<T: std::str::FromStr>(
    get: &dyn Fn(&str) -> Option<String>,
    name: &str,
    default: T,
) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    match get(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|e| anyhow::anyhow!("{name}={v:?} is not a number: {e}")),
    }
}

pub fn database_url() -> Option<String> {
    var("DATABASE_URL")
}

pub fn require_database_url() -> anyhow::Result<String> {
    database_url()
        .context("DATABASE_URL is not set (e.g. postgres://user:password@host:5432/sless)")
}

/// S3 settings from `S3_ENDPOINT`, `S3_BUCKET`, `S3_REGION`,
/// `S3_ACCESS_KEY_ID`/`AWS_ACCESS_KEY_ID`, `S3_SECRET_ACCESS_KEY`/`AWS_SECRET_ACCESS_KEY`,
/// `S3_FORCE_PATH_STYLE`. None when `S3_ENDPOINT` and `S3_BUCKET` are both unset.
pub fn s3() -> anyhow::Result<Option<S3Config>> {
    let endpoint = var("S3_ENDPOINT");
    let bucket = var("S3_BUCKET");
    if endpoint.is_none() && bucket.is_none() {
        return Ok(None);
    }
    let access_key = var("S3_ACCESS_KEY_ID").or_else(|| var("AWS_ACCESS_KEY_ID"));
    let secret_key = var("S3_SECRET_ACCESS_KEY").or_else(|| var("AWS_SECRET_ACCESS_KEY"));
    let (Some(access_key), Some(secret_key)) = (access_key, secret_key) else {
        bail!("S3 is configured but S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY are not both set");
    };
    Ok(Some(S3Config {
        force_path_style: var("S3_FORCE_PATH_STYLE")
            .map(|v| v != "false")
            .unwrap_or(endpoint.is_some()),
        endpoint,
        region: var("S3_REGION").unwrap_or_else(|| "us-east-1".into()),
        bucket: bucket.unwrap_or_else(|| "sless".into()),
        access_key,
        secret_key,
    }))
}

pub fn require_s3() -> anyhow::Result<S3Config> {
    s3()?.context("S3_ENDPOINT / S3_BUCKET are not set")
}

/// Token settings, from `SLESS_JWT_ALGORITHM`, `SLESS_JWT_SECRET`,
/// `SLESS_JWT_PUBLIC_KEY_FILE`, `SLESS_JWKS_FILE`, `SLESS_JWT_ISSUER`,
/// `SLESS_JWT_AUDIENCE`, `SLESS_JWT_ADMIN_CLAIM` and `SLESS_JWT_LEEWAY_SECS`
/// (docs/configuration.md, "Tokens"). Key files are read by `auth`.
pub fn tokens() -> anyhow::Result<TokenSettings> {
    tokens_from(&var)
}

/// How tokens are checked, before the key files are read.
#[derive(Debug, Clone)]
pub struct TokenSettings {
    pub algorithm: TokenAlgorithm,
    secret: Option<String>,
    public_key_files: Vec<PathBuf>,
    jwks_file: Option<PathBuf>,
    settings: AuthSettings,
}

fn tokens_from(get: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<TokenSettings> {
    let list = |name: &str| -> Vec<String> {
        get(name)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let algorithm = match get("SLESS_JWT_ALGORITHM") {
        None => TokenAlgorithm::Hs256,
        Some(v) => v
            .parse()
            .map_err(|e| anyhow::anyhow!("SLESS_JWT_ALGORITHM: {e}"))?,
    };
    let leeway = match get("SLESS_JWT_LEEWAY_SECS") {
        None => MAX_LEEWAY.as_secs(),
        Some(v) => v.parse::<u64>().map_err(|e| {
            anyhow::anyhow!("SLESS_JWT_LEEWAY_SECS={v:?} is not a number of seconds: {e}")
        })?,
    };
    if leeway > MAX_LEEWAY.as_secs() {
        bail!("SLESS_JWT_LEEWAY_SECS={leeway} is more than the 60 s allowed");
    }
    let secret = get("SLESS_JWT_SECRET");
    let public_key_files: Vec<PathBuf> = list("SLESS_JWT_PUBLIC_KEY_FILE")
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let jwks_file = get("SLESS_JWKS_FILE").map(PathBuf::from);
    if algorithm == TokenAlgorithm::Hs256 {
        for (name, set) in [
            ("SLESS_JWT_PUBLIC_KEY_FILE", !public_key_files.is_empty()),
            ("SLESS_JWKS_FILE", jwks_file.is_some()),
        ] {
            if set {
                bail!(
                    "{name} is set, but SLESS_JWT_ALGORITHM is HS256 (its default), which checks \
                     tokens with SLESS_JWT_SECRET: set SLESS_JWT_ALGORITHM=RS256 or ES256 to check \
                     them with public keys"
                );
            }
        }
    } else {
        if secret.is_some() {
            bail!(
                "SLESS_JWT_SECRET is set, but SLESS_JWT_ALGORITHM={algorithm} checks tokens with \
                 public keys only: unset SLESS_JWT_SECRET"
            );
        }
        if public_key_files.is_empty() && jwks_file.is_none() {
            bail!(
                "SLESS_JWT_ALGORITHM={algorithm} needs SLESS_JWT_PUBLIC_KEY_FILE (PEM public keys, \
                 comma-separated files) or SLESS_JWKS_FILE (a JSON Web Key Set), or both"
            );
        }
    }
    let admin_claim = get("SLESS_JWT_ADMIN_CLAIM").unwrap_or_else(|| DEFAULT_ADMIN_CLAIM.into());
    Ok(TokenSettings {
        algorithm,
        secret,
        public_key_files,
        jwks_file,
        settings: AuthSettings {
            issuers: list("SLESS_JWT_ISSUER"),
            audiences: list("SLESS_JWT_AUDIENCE"),
            admin_claim,
            leeway: Duration::from_secs(leeway),
        },
    })
}

/// The shortest HS256 secret accepted: 256 bits.
pub const MIN_SECRET_BYTES: usize = 32;

impl TokenSettings {
    /// Whether `SLESS_JWT_SECRET` is set.
    pub fn has_secret(&self) -> bool {
        self.secret.is_some()
    }

    /// The token checker, with its key files read and checked. `dev_secret`
    /// is the HS256 secret of `sless dev`'s data directory, used when
    /// `SLESS_JWT_SECRET` is not set; without one HS256 needs that variable.
    pub fn auth(&self, dev_secret: Option<&str>) -> anyhow::Result<Auth> {
        let mut keys = KeySet::new(self.algorithm);
        if self.algorithm == TokenAlgorithm::Hs256 {
            let secret = self.secret.as_deref().or(dev_secret).context(
                "SLESS_JWT_SECRET is not set: HS256 (the default SLESS_JWT_ALGORITHM) checks \
                 tokens with that shared secret; or set SLESS_JWT_ALGORITHM=RS256 or ES256 with \
                 SLESS_JWT_PUBLIC_KEY_FILE or SLESS_JWKS_FILE",
            )?;
            if secret.len() < MIN_SECRET_BYTES {
                bail!(
                    "SLESS_JWT_SECRET has {} bytes: an HS256 secret needs at least \
                     {MIN_SECRET_BYTES} (256 bits; e.g. openssl rand -hex 32)",
                    secret.len()
                );
            }
            keys.add_secret(secret.as_bytes())
                .map_err(|e| anyhow::anyhow!("SLESS_JWT_SECRET: {e}"))?;
        }
        for path in &self.public_key_files {
            let pem = std::fs::read(path).with_context(|| {
                format!("SLESS_JWT_PUBLIC_KEY_FILE: cannot read {}", path.display())
            })?;
            let n = keys.add_pem(&pem).map_err(|e| {
                anyhow::anyhow!("SLESS_JWT_PUBLIC_KEY_FILE: {}: {e}", path.display())
            })?;
            tracing::info!(file = %path.display(), keys = n, "token public keys loaded");
        }
        if let Some(path) = &self.jwks_file {
            let json = std::fs::read(path)
                .with_context(|| format!("SLESS_JWKS_FILE: cannot read {}", path.display()))?;
            let report = keys
                .add_jwks(&json)
                .map_err(|e| anyhow::anyhow!("SLESS_JWKS_FILE: {}: {e}", path.display()))?;
            tracing::info!(file = %path.display(), keys = ?report.kept, "token key set loaded");
            for skipped in &report.skipped {
                tracing::warn!(file = %path.display(), key = %skipped, "a key of the set is not used");
            }
        }
        Auth::new(keys, self.settings.clone()).map_err(|e| match e {
            KeyError::AdminClaim(..) => anyhow::anyhow!("SLESS_JWT_ADMIN_CLAIM: {e}"),
            other => anyhow::anyhow!("token settings (SLESS_JWT_*): {other}"),
        })
    }
}

/// Worker settings from `SLESS_WORKER_ID`, `SLESS_WORKER_CONCURRENCY`,
/// `SLESS_WORKER_JOB_CONCURRENCY`, `SLESS_WORKER_PREFETCH`, `SLESS_LEASE_SECS`,
/// `SLESS_SWEEP_SECS`, `SLESS_POLL_MS`, `SLESS_RETRY_BASE_MS`,
/// `SLESS_SHUTDOWN_GRACE_SECS`, `SLESS_ORPHAN_SWEEP_SECS`, `SLESS_ORPHAN_GRACE_SECS`.
pub fn worker() -> anyhow::Result<WorkerConfig> {
    worker_from(&|name| var(name))
}

fn worker_from(get: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<WorkerConfig> {
    let secs = |name: &str, default: f64| number_from(get, name, default);
    let count = |name: &str, default: usize| number_from(get, name, default);
    let d = WorkerConfig::default();
    let lease = secs("SLESS_LEASE_SECS", d.lease.as_secs_f64())?;
    if !(1.0..=3600.0).contains(&lease) {
        bail!("SLESS_LEASE_SECS must be between 1 and 3600");
    }
    let orphan_sweep = secs("SLESS_ORPHAN_SWEEP_SECS", d.orphan_sweep.as_secs_f64())?;
    if !(1.0..=86_400.0).contains(&orphan_sweep) {
        bail!("SLESS_ORPHAN_SWEEP_SECS must be from 1 to 86400 (a day)");
    }
    let orphan_grace = secs("SLESS_ORPHAN_GRACE_SECS", d.orphan_grace.as_secs_f64())?;
    if !(60.0..=30.0 * 86_400.0).contains(&orphan_grace) {
        bail!(
            "SLESS_ORPHAN_GRACE_SECS must be from 60 to 2592000 (30 days): an upload in flight \
             must never look like an orphan"
        );
    }
    Ok(WorkerConfig {
        id: get("SLESS_WORKER_ID").unwrap_or(d.id),
        concurrency: count("SLESS_WORKER_CONCURRENCY", d.concurrency)?.max(1),
        job_concurrency: count("SLESS_WORKER_JOB_CONCURRENCY", d.job_concurrency)?.max(1),
        prefetch: count("SLESS_WORKER_PREFETCH", d.prefetch)?,
        lease: Duration::from_secs_f64(lease),
        sweep: Duration::from_secs_f64(secs("SLESS_SWEEP_SECS", d.sweep.as_secs_f64())?.max(0.1)),
        poll: Duration::from_millis(
            number_from(get, "SLESS_POLL_MS", d.poll.as_millis() as u64)?.max(10),
        ),
        backoff: Backoff {
            base: Duration::from_millis(number_from(
                get,
                "SLESS_RETRY_BASE_MS",
                d.backoff.base.as_millis() as u64,
            )?),
            max: d.backoff.max,
        },
        shutdown_grace: Duration::from_secs_f64(
            secs("SLESS_SHUTDOWN_GRACE_SECS", d.shutdown_grace.as_secs_f64())?.max(0.0),
        ),
        ack_batch: d.ack_batch,
        orphan_sweep: Duration::from_secs_f64(orphan_sweep),
        orphan_grace: Duration::from_secs_f64(orphan_grace),
    })
}

/// The cron scheduler, from `SLESS_CRON_STARTING_DEADLINE_SECS` (3600): how
/// late a tick may still fire (after an outage, only the latest tick fires).
pub fn scheduler(pool: sless_store::PgPool) -> anyhow::Result<sless_workers::Scheduler> {
    let d = sless_workers::scheduler::DEFAULT_STARTING_DEADLINE;
    let secs: u64 = number("SLESS_CRON_STARTING_DEADLINE_SECS", d.as_secs())?;
    if !(10..=30 * 86_400).contains(&secs) {
        bail!("SLESS_CRON_STARTING_DEADLINE_SECS must be from 10 to 2592000 (30 days)");
    }
    Ok(sless_workers::Scheduler::new(
        pool,
        Duration::from_secs(secs),
    ))
}

/// Invocation records, from `SLESS_INVOCATION_RETENTION_DAYS` (7) and
/// `SLESS_INVOCATION_RETENTION_PER_FUNCTION` (10,000).
pub fn invocations() -> anyhow::Result<RecorderConfig> {
    let mut cfg = RecorderConfig::default();
    let days: f64 = number(
        "SLESS_INVOCATION_RETENTION_DAYS",
        cfg.retention.max_age.as_secs_f64() / 86_400.0,
    )?;
    if !(days > 0.0 && days <= 3650.0) {
        bail!("SLESS_INVOCATION_RETENTION_DAYS must be more than 0 and at most 3650");
    }
    cfg.retention.max_age = Duration::from_secs_f64(days * 86_400.0);
    cfg.retention.per_function = number(
        "SLESS_INVOCATION_RETENTION_PER_FUNCTION",
        cfg.retention.per_function,
    )?;
    if cfg.retention.per_function == 0 {
        bail!("SLESS_INVOCATION_RETENTION_PER_FUNCTION must be at least 1");
    }
    Ok(cfg)
}

/// What the invoke proxy forwards, from `SLESS_PROXY_MAX_BODY_BYTES` (6 MiB),
/// `SLESS_PROXY_MAX_HEADERS` (64, at most 100: the API refuses more before
/// the proxy sees them) and `SLESS_PROXY_MAX_HEADER_BYTES` (16 KiB).
pub fn proxy_limits() -> anyhow::Result<ProxyLimits> {
    let d = ProxyLimits::default();
    let limits = ProxyLimits {
        max_body_bytes: number("SLESS_PROXY_MAX_BODY_BYTES", d.max_body_bytes)?,
        max_headers: number("SLESS_PROXY_MAX_HEADERS", d.max_headers)?,
        max_header_bytes: number("SLESS_PROXY_MAX_HEADER_BYTES", d.max_header_bytes)?,
        idle_timeout: Duration::from_secs_f64(number(
            "SLESS_PROXY_IDLE_SECS",
            d.idle_timeout.as_secs_f64(),
        )?),
    };
    if !(1..=100).contains(&limits.max_headers) {
        bail!("SLESS_PROXY_MAX_HEADERS must be between 1 and 100");
    }
    if !(Duration::from_millis(100)..=Duration::from_secs(3600)).contains(&limits.idle_timeout) {
        bail!("SLESS_PROXY_IDLE_SECS must be between 0.1 and 3600");
    }
    Ok(limits)
}

/// The functions' origin as callers reach it (`--fn-url`, `SLESS_FN_URL`):
/// `http://` or `https://`, a host, perhaps a port, and no path, query or
/// credentials. Returned without a trailing `/`.
pub fn fn_url(url: &str) -> anyhow::Result<String> {
    let bad = |why: &str| anyhow::anyhow!("SLESS_FN_URL {url:?} {why}");
    let uri: axum::http::Uri = url.parse().map_err(|_| bad("is not a URL"))?;
    if !matches!(uri.scheme_str(), Some("http" | "https")) {
        return Err(bad("must start with http:// or https://"));
    }
    let authority = uri.authority().ok_or_else(|| bad("names no host"))?;
    if authority.host().is_empty() || authority.as_str().contains('@') {
        return Err(bad("must name a host, without credentials"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad(
            "must have no path or query: functions are under its /fn/",
        ));
    }
    Ok(format!(
        "{}://{authority}",
        uri.scheme_str().unwrap_or("http")
    ))
}

/// How many uploads are checked at once, from `SLESS_UPLOAD_CONCURRENCY`
/// (4), and how long one waits for its turn, `SLESS_UPLOAD_WAIT_SECS` (30).
pub fn upload_gate() -> anyhow::Result<sless_api::upload::UploadGate> {
    use sless_api::upload::UploadGate;
    let concurrency = number("SLESS_UPLOAD_CONCURRENCY", UploadGate::DEFAULT_CONCURRENCY)?;
    if !(1..=1024).contains(&concurrency) {
        bail!("SLESS_UPLOAD_CONCURRENCY must be between 1 and 1024");
    }
    let wait: f64 = number(
        "SLESS_UPLOAD_WAIT_SECS",
        UploadGate::DEFAULT_WAIT.as_secs_f64(),
    )?;
    if !(0.0..=3600.0).contains(&wait) {
        bail!("SLESS_UPLOAD_WAIT_SECS must be between 0 and 3600");
    }
    Ok(UploadGate::new(concurrency, Duration::from_secs_f64(wait)))
}

/// Versions kept per function besides the live one, from
/// `SLESS_VERSION_RETENTION` (50).
pub fn keep_versions() -> anyhow::Result<usize> {
    let keep = number("SLESS_VERSION_RETENTION", sless_api::DEFAULT_KEEP_VERSIONS)?;
    if !(1..=100_000).contains(&keep) {
        bail!("SLESS_VERSION_RETENTION must be between 1 and 100000");
    }
    Ok(keep)
}

/// Per-namespace quotas, from `SLESS_QUOTA_FUNCTIONS` (100),
/// `SLESS_QUOTA_VERSIONS` (1000), `SLESS_QUOTA_STORED_BYTES` (1 GiB),
/// `SLESS_QUOTA_TRIGGERS` (100), `SLESS_QUOTA_RUNNING_JOBS` (10) and
/// `SLESS_QUOTA_UPLOADS_PER_MINUTE` (30). `0` is no limit.
pub fn quotas() -> anyhow::Result<Quotas> {
    quotas_from(&var)
}

fn quotas_from(get: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<Quotas> {
    let mut quotas = Quotas::DEFAULT;
    for quota in Quota::ALL {
        let name = quota.setting();
        let Some(v) = get(name) else { continue };
        let n: u64 = v.trim().parse().map_err(|e| {
            anyhow::anyhow!("{name}={v:?} is not a whole number of at least 0 (0: no limit): {e}")
        })?;
        quotas.set(quota, (n > 0).then_some(n));
    }
    Ok(quotas)
}

/// Where functions run: `SLESS_DRIVER`, `local` (the default) or
/// `kubernetes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverKind {
    Local,
    Kubernetes,
}

pub fn driver() -> anyhow::Result<DriverKind> {
    match var("SLESS_DRIVER").as_deref() {
        None | Some("local") => Ok(DriverKind::Local),
        Some("kubernetes") => Ok(DriverKind::Kubernetes),
        Some(other) => bail!("SLESS_DRIVER={other:?}: use local or kubernetes"),
    }
}

/// The Kubernetes driver's settings, from `SLESS_KUBE_*`
/// (docs/kubernetes.md lists them). `SLESS_KUBE_REGISTRY` is required.
pub fn kube() -> anyhow::Result<KubeSettings> {
    kube_from(&|name| var(name))
}

fn kube_from(get: &dyn Fn(&str) -> Option<String>) -> anyhow::Result<KubeSettings> {
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
    s.replicas = i32::try_from(num("SLESS_KUBE_REPLICAS", 1, 1..=100)?)?;
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
            .map(str::to_owned)
            .collect();
    }
    Ok(s)
}

/// The address the local driver's functions listen on and the invoke proxy
/// reaches them at, from `SLESS_LOCAL_ADVERTISE` (127.0.0.1): another
/// machine's address when API processes run on other machines than this
/// worker.
pub fn advertise() -> anyhow::Result<std::net::IpAddr> {
    match var("SLESS_LOCAL_ADVERTISE") {
        None => Ok(std::net::IpAddr::V4(std::net::Ipv4Addr::LOCALHOST)),
        Some(v) => v
            .parse()
            .map_err(|e| anyhow::anyhow!("SLESS_LOCAL_ADVERTISE={v:?} is not an IP address: {e}")),
    }
}

pub fn python() -> String {
    var("SLESS_PYTHON").unwrap_or_else(|| "python3".into())
}

#[cfg(test)]
mod tests;
