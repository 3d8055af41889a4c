//! The API role (`sless api`, and the API of `sless dev` and `serve`): the
//! invoke proxy's limits, invocation records, the upload gate, versions
//! kept, per-namespace quotas, the fault suite's hook and how it stops
//! (`shutdown`). Where it listens (`--listen`, `--fn-listen`/
//! `SLESS_FN_LISTEN`) and the functions' origin (`--fn-url`/
//! `SLESS_FN_URL`, checked by [`fn_url`]) are arguments.

use std::time::Duration;

use anyhow::bail;
use sless_api::plumbing::faults::CRASH_AFTER_COMMIT_ENV;
use sless_api::plumbing::quota::{Quota, Quotas};
use sless_api::plumbing::recorder::RecorderConfig;
use sless_api::proxy::ProxyLimits;
use sless_api::rest::upload::UploadGate;

use super::source::var;
use super::{Get, Shutdown, number_from};

/// The API's settings.
#[derive(Debug, Clone)]
pub struct Api {
    /// What the invoke proxy forwards, from `SLESS_PROXY_MAX_BODY_BYTES`
    /// (6 MiB), `SLESS_PROXY_MAX_HEADERS` (64, at most 100: the API refuses
    /// more before the proxy sees them), `SLESS_PROXY_MAX_HEADER_BYTES`
    /// (16 KiB), `SLESS_PROXY_IDLE_SECS` (10), and for calls to a function
    /// scaled to zero `SLESS_ACTIVATION_TIMEOUT_SECS` (30) and
    /// `SLESS_ACTIVATION_QUEUE` (100 per function).
    pub proxy: ProxyLimits,
    /// Invocation records, from `SLESS_INVOCATION_RETENTION_DAYS` (7) and
    /// `SLESS_INVOCATION_RETENTION_PER_FUNCTION` (10,000).
    pub invocations: RecorderConfig,
    /// Uploads checked at once, `SLESS_UPLOAD_CONCURRENCY` (4).
    pub upload_concurrency: usize,
    /// How long an upload waits for its turn, `SLESS_UPLOAD_WAIT_SECS` (30).
    pub upload_wait: Duration,
    /// Versions kept per function besides the live one,
    /// `SLESS_VERSION_RETENTION` (50).
    pub keep_versions: usize,
    /// Per-namespace quotas, from `SLESS_QUOTA_FUNCTIONS` (100),
    /// `SLESS_QUOTA_VERSIONS` (1000), `SLESS_QUOTA_STORED_BYTES` (1 GiB),
    /// `SLESS_QUOTA_TRIGGERS` (100), `SLESS_QUOTA_RUNNING_JOBS` (10),
    /// `SLESS_QUOTA_UPLOADS_PER_MINUTE` (30) and `SLESS_QUOTA_INSTANCES`
    /// (50). `0` is no limit.
    pub quotas: Quotas,
    /// The fault suite's hook: kill the process right after a commit
    /// (`SLESS_FAULT_CRASH_AFTER_COMMIT=1`). For tests only.
    pub crash_after_commit: bool,
    /// How it stops: `SLESS_SHUTDOWN_DELAY_SECS` (0) and
    /// `SLESS_DRAIN_SECS` (30).
    pub shutdown: Shutdown,
}

impl Api {
    pub fn from_env() -> anyhow::Result<Api> {
        Api::from(&var)
    }

    pub(super) fn from(get: Get<'_>) -> anyhow::Result<Api> {
        let proxy = proxy_limits(get)?;
        let invocations = invocations(get)?;
        let upload_concurrency = number_from(
            get,
            "SLESS_UPLOAD_CONCURRENCY",
            UploadGate::DEFAULT_CONCURRENCY,
        )?;
        if !(1..=1024).contains(&upload_concurrency) {
            bail!("SLESS_UPLOAD_CONCURRENCY must be between 1 and 1024");
        }
        let wait: f64 = number_from(
            get,
            "SLESS_UPLOAD_WAIT_SECS",
            UploadGate::DEFAULT_WAIT.as_secs_f64(),
        )?;
        if !(0.0..=3600.0).contains(&wait) {
            bail!("SLESS_UPLOAD_WAIT_SECS must be between 0 and 3600");
        }
        let keep_versions = number_from(
            get,
            "SLESS_VERSION_RETENTION",
            sless_api::DEFAULT_KEEP_VERSIONS,
        )?;
        if !(1..=100_000).contains(&keep_versions) {
            bail!("SLESS_VERSION_RETENTION must be between 1 and 100000");
        }
        Ok(Api {
            proxy,
            invocations,
            upload_concurrency,
            upload_wait: Duration::from_secs_f64(wait),
            keep_versions,
            quotas: quotas(get)?,
            crash_after_commit: get(CRASH_AFTER_COMMIT_ENV).is_some_and(|v| v == "1"),
            shutdown: Shutdown::from(get)?,
        })
    }

    /// The upload gate of these settings.
    pub fn upload_gate(&self) -> UploadGate {
        UploadGate::new(self.upload_concurrency, self.upload_wait)
    }
}

fn proxy_limits(get: Get<'_>) -> anyhow::Result<ProxyLimits> {
    let d = ProxyLimits::default();
    let limits = ProxyLimits {
        max_body_bytes: number_from(get, "SLESS_PROXY_MAX_BODY_BYTES", d.max_body_bytes)?,
        max_headers: number_from(get, "SLESS_PROXY_MAX_HEADERS", d.max_headers)?,
        max_header_bytes: number_from(get, "SLESS_PROXY_MAX_HEADER_BYTES", d.max_header_bytes)?,
        idle_timeout: Duration::from_secs_f64(number_from(
            get,
            "SLESS_PROXY_IDLE_SECS",
            d.idle_timeout.as_secs_f64(),
        )?),
        activation_timeout: Duration::from_secs_f64(number_from(
            get,
            "SLESS_ACTIVATION_TIMEOUT_SECS",
            d.activation_timeout.as_secs_f64(),
        )?),
        activation_queue: number_from(get, "SLESS_ACTIVATION_QUEUE", d.activation_queue)?,
    };
    // The functions' origin parses no more fields than that.
    let most = sless_api::plumbing::serve::FN_HEADER_PARSE_LIMIT;
    if !(1..=most).contains(&limits.max_headers) {
        bail!("SLESS_PROXY_MAX_HEADERS must be between 1 and {most}");
    }
    if !(Duration::from_millis(100)..=Duration::from_secs(3600)).contains(&limits.idle_timeout) {
        bail!("SLESS_PROXY_IDLE_SECS must be between 0.1 and 3600");
    }
    if !(Duration::from_millis(100)..=Duration::from_secs(900)).contains(&limits.activation_timeout)
    {
        bail!("SLESS_ACTIVATION_TIMEOUT_SECS must be between 0.1 and 900");
    }
    if !(1..=100_000).contains(&limits.activation_queue) {
        bail!("SLESS_ACTIVATION_QUEUE must be between 1 and 100000");
    }
    Ok(limits)
}

fn invocations(get: Get<'_>) -> anyhow::Result<RecorderConfig> {
    let mut cfg = RecorderConfig::default();
    let days: f64 = number_from(
        get,
        "SLESS_INVOCATION_RETENTION_DAYS",
        cfg.retention.max_age.as_secs_f64() / 86_400.0,
    )?;
    if !(days > 0.0 && days <= 3650.0) {
        bail!("SLESS_INVOCATION_RETENTION_DAYS must be more than 0 and at most 3650");
    }
    cfg.retention.max_age = Duration::from_secs_f64(days * 86_400.0);
    cfg.retention.per_function = number_from(
        get,
        "SLESS_INVOCATION_RETENTION_PER_FUNCTION",
        cfg.retention.per_function,
    )?;
    if cfg.retention.per_function == 0 {
        bail!("SLESS_INVOCATION_RETENTION_PER_FUNCTION must be at least 1");
    }
    Ok(cfg)
}

pub(super) fn quotas(get: Get<'_>) -> anyhow::Result<Quotas> {
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
