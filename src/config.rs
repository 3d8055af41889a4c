//! Configuration of the `sless` binary: environment variables only, never a
//! secret in code.

use std::time::Duration;

use anyhow::{Context, bail};
use sless_store::blobs::S3Config;
use sless_store::queue::Backoff;
use sless_workers::WorkerConfig;

fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

fn number<T: std::str::FromStr>(name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    match var(name) {
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

/// The token secret, from `SLESS_JWT_SECRET`.
pub fn jwt_secret() -> Option<String> {
    var("SLESS_JWT_SECRET")
}

/// Worker settings from `SLESS_WORKER_ID`, `SLESS_WORKER_CONCURRENCY`,
/// `SLESS_WORKER_PREFETCH`, `SLESS_LEASE_SECS`, `SLESS_SWEEP_SECS`, `SLESS_POLL_MS`,
/// `SLESS_RETRY_BASE_MS`, `SLESS_SHUTDOWN_GRACE_SECS`.
pub fn worker() -> anyhow::Result<WorkerConfig> {
    let d = WorkerConfig::default();
    let lease = number("SLESS_LEASE_SECS", d.lease.as_secs_f64())?;
    if !(1.0..=3600.0).contains(&lease) {
        bail!("SLESS_LEASE_SECS must be between 1 and 3600");
    }
    Ok(WorkerConfig {
        id: var("SLESS_WORKER_ID").unwrap_or(d.id),
        concurrency: number("SLESS_WORKER_CONCURRENCY", d.concurrency)?.max(1),
        prefetch: number("SLESS_WORKER_PREFETCH", d.prefetch)?,
        lease: Duration::from_secs_f64(lease),
        sweep: Duration::from_secs_f64(number("SLESS_SWEEP_SECS", d.sweep.as_secs_f64())?.max(0.1)),
        poll: Duration::from_millis(number("SLESS_POLL_MS", d.poll.as_millis() as u64)?.max(10)),
        backoff: Backoff {
            base: Duration::from_millis(number(
                "SLESS_RETRY_BASE_MS",
                d.backoff.base.as_millis() as u64,
            )?),
            max: d.backoff.max,
        },
        shutdown_grace: Duration::from_secs_f64(
            number("SLESS_SHUTDOWN_GRACE_SECS", d.shutdown_grace.as_secs_f64())?.max(0.0),
        ),
        ack_batch: d.ack_batch,
    })
}

pub fn python() -> String {
    var("SLESS_PYTHON").unwrap_or_else(|| "python3".into())
}
