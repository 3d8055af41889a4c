//! The worker role (`sless worker`, and the worker of `sless dev` and
//! `serve`): its loop, the driver it runs functions with, and the cron
//! scheduler.

use std::time::Duration;

use anyhow::bail;
use sless_store::queue::Backoff;
use sless_workers::WorkerConfig;
use sless_workers::logs::LogsConfig;
use sless_workers::scheduler::DEFAULT_STARTING_DEADLINE;

use super::source::var;
use super::{Get, number_from};

/// Where functions run: `SLESS_DRIVER`, `local` (the default) or
/// `kubernetes`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DriverKind {
    Local,
    Kubernetes,
}

/// The worker's settings.
#[derive(Debug, Clone)]
pub struct Worker {
    /// From `SLESS_WORKER_ID`, `SLESS_WORKER_CONCURRENCY`,
    /// `SLESS_WORKER_JOB_CONCURRENCY`, `SLESS_WORKER_PREFETCH`,
    /// `SLESS_LEASE_SECS`, `SLESS_SWEEP_SECS`, `SLESS_POLL_MS`,
    /// `SLESS_RETRY_BASE_MS`, `SLESS_SHUTDOWN_GRACE_SECS`,
    /// `SLESS_ORPHAN_SWEEP_SECS`, `SLESS_ORPHAN_GRACE_SECS`,
    /// `SLESS_SCALE_TO_ZERO_AFTER_SEC` (900; 0: never) and the autoscaler's
    /// `SLESS_AUTOSCALE_*`.
    pub config: WorkerConfig,
    pub driver: DriverKind,
    /// How late a cron tick may still fire (after an outage, only the
    /// latest tick fires), `SLESS_CRON_STARTING_DEADLINE_SECS` (3600).
    pub cron_starting_deadline: Duration,
    /// What functions print, kept: `SLESS_LOG_RETENTION_DAYS` (7),
    /// `SLESS_LOG_RETENTION_NAMESPACES` (`ns=days,…`, namespaces that keep
    /// theirs longer or shorter), and each function's budget,
    /// `SLESS_LOG_LINES_PER_SEC` (1000) and `SLESS_LOG_BYTES_PER_SEC`
    /// (1048576).
    pub logs: LogsConfig,
}

impl Worker {
    pub fn from_env() -> anyhow::Result<Worker> {
        Worker::from(&var)
    }

    pub(super) fn from(get: Get<'_>) -> anyhow::Result<Worker> {
        let config = worker_config(get)?;
        let driver = match get("SLESS_DRIVER").as_deref() {
            None | Some("local") => DriverKind::Local,
            Some("kubernetes") => DriverKind::Kubernetes,
            Some(other) => bail!("SLESS_DRIVER={other:?}: use local or kubernetes"),
        };
        let secs: u64 = number_from(
            get,
            "SLESS_CRON_STARTING_DEADLINE_SECS",
            DEFAULT_STARTING_DEADLINE.as_secs(),
        )?;
        if !(10..=30 * 86_400).contains(&secs) {
            bail!("SLESS_CRON_STARTING_DEADLINE_SECS must be from 10 to 2592000 (30 days)");
        }
        Ok(Worker {
            config,
            driver,
            cron_starting_deadline: Duration::from_secs(secs),
            logs: logs_config(get)?,
        })
    }

    /// The cron scheduler of these settings.
    pub fn scheduler(&self, pool: sless_store::PgPool) -> sless_workers::Scheduler {
        sless_workers::Scheduler::new(pool, self.cron_starting_deadline)
    }
}

fn worker_config(get: Get<'_>) -> anyhow::Result<WorkerConfig> {
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
    let scale_to_zero_after_sec: u32 = number_from(
        get,
        "SLESS_SCALE_TO_ZERO_AFTER_SEC",
        d.scale_to_zero_after_sec,
    )?;
    if scale_to_zero_after_sec > sless_domain::spec::MAX_SCALE_TO_ZERO_AFTER_SEC {
        bail!(
            "SLESS_SCALE_TO_ZERO_AFTER_SEC must be from 0 (never) to {} (a week)",
            sless_domain::spec::MAX_SCALE_TO_ZERO_AFTER_SEC
        );
    }
    let autoscale = autoscale_config(get)?;
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
        scale_to_zero_after_sec,
        idle_sweep: d.idle_sweep,
        autoscale: Some(autoscale),
    })
}

/// The autoscaler's windows and aim: `SLESS_AUTOSCALE_STABLE_WINDOW_SECS`
/// (60), `SLESS_AUTOSCALE_PANIC_WINDOW_SECS` (6) and
/// `SLESS_AUTOSCALE_TARGET_UTILISATION` (0.7, of a function's concurrency).
fn autoscale_config(get: Get<'_>) -> anyhow::Result<sless_workers::autoscale::AutoscaleConfig> {
    let mut c = sless_workers::autoscale::AutoscaleConfig::default();
    let p = &mut c.policy;
    p.stable_window = number_from(get, "SLESS_AUTOSCALE_STABLE_WINDOW_SECS", p.stable_window)?;
    p.panic_window = number_from(get, "SLESS_AUTOSCALE_PANIC_WINDOW_SECS", p.panic_window)?;
    p.utilisation = number_from(get, "SLESS_AUTOSCALE_TARGET_UTILISATION", p.utilisation)?;
    if !(6.0..=3600.0).contains(&p.stable_window) {
        bail!("SLESS_AUTOSCALE_STABLE_WINDOW_SECS must be from 6 to 3600");
    }
    if !(1.0..=p.stable_window).contains(&p.panic_window) {
        bail!(
            "SLESS_AUTOSCALE_PANIC_WINDOW_SECS must be from 1 to the stable window ({} s)",
            p.stable_window
        );
    }
    if !(p.utilisation > 0.0 && p.utilisation <= 1.0) {
        bail!("SLESS_AUTOSCALE_TARGET_UTILISATION must be above 0 and at most 1");
    }
    p.scale_down_delay = p.panic_window;
    Ok(c)
}

/// The most days lines may be kept.
const MAX_RETENTION_DAYS: u32 = 366;

/// How function logs are kept (see [`Worker::logs`]).
fn logs_config(get: Get<'_>) -> anyhow::Result<LogsConfig> {
    let mut c = LogsConfig::default();
    c.retention_days = number_from(get, "SLESS_LOG_RETENTION_DAYS", c.retention_days)?;
    if !(1..=MAX_RETENTION_DAYS).contains(&c.retention_days) {
        bail!("SLESS_LOG_RETENTION_DAYS must be from 1 to {MAX_RETENTION_DAYS}");
    }
    for pair in get("SLESS_LOG_RETENTION_NAMESPACES")
        .unwrap_or_default()
        .split(',')
        .map(str::trim)
        .filter(|p| !p.is_empty())
    {
        let days = pair.split_once('=').and_then(|(ns, days)| {
            let days: u32 = days.trim().parse().ok()?;
            let ns = sless_domain::Namespace::parse(ns.trim()).ok()?;
            (1..=MAX_RETENTION_DAYS)
                .contains(&days)
                .then(|| (ns.to_string(), days))
        });
        let Some((ns, days)) = days else {
            bail!(
                "SLESS_LOG_RETENTION_NAMESPACES: {pair:?} is not namespace=days \
                 (days from 1 to {MAX_RETENTION_DAYS})"
            );
        };
        c.retention.insert(ns, days);
    }
    c.lines_per_sec = number_from(get, "SLESS_LOG_LINES_PER_SEC", c.lines_per_sec)?;
    c.bytes_per_sec = number_from(get, "SLESS_LOG_BYTES_PER_SEC", c.bytes_per_sec)?;
    if c.lines_per_sec == 0 || c.bytes_per_sec == 0 {
        bail!("SLESS_LOG_LINES_PER_SEC and SLESS_LOG_BYTES_PER_SEC must be above 0");
    }
    Ok(c)
}
