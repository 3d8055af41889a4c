//! The driver a process runs functions with, chosen by `SLESS_DRIVER` (the
//! worker's section of the configuration).

use std::path::Path;
use std::sync::Arc;

use sless_domain::FunctionKey;
use sless_sandbox::SandboxOptions;
use sless_store::PgPool;
use sless_store::blobs::BlobStore;
use sless_workers::Driver;
use sless_workers::WorkerConfig;
use sless_workers::driver::{
    Artifact, BuildRequest, CronRequest, DeployRequest, Deployment, DriverError, JobOutput,
    JobRequest, Node, RunningHere,
};
use sless_workers::kube::{CronRunRecorder, KubeDriver, PodCrashRecorder, PodLogFollower};
use sless_workers::local::sandbox::{Isolation, TenantIds};
use sless_workers::local::{LocalDriver, LocalDriverConfig};
use sless_workers::logs::{LogsConfig, Shipper};

use crate::config::{self, DriverKind};

/// The local driver of `local`'s settings (see [`AnyDriver::from_env`]).
fn local_driver(
    data_dir: &Path,
    pool: &PgPool,
    worker: &WorkerConfig,
    host: &config::Host,
    local: config::Local,
    logs: &LogsConfig,
    unsafe_no_sandbox: bool,
) -> anyhow::Result<LocalDriver> {
    let settings = local.sandbox;
    let mut cfg = LocalDriverConfig::new(data_dir.join("local"));
    cfg.python = local.python;
    cfg.go = local.go;
    if let Some(cache) = local.go_cache {
        cfg.go_cache = cache;
    }
    cfg.env.clone_from(&host.env);
    cfg.isolation = if unsafe_no_sandbox {
        Isolation::Unsafe
    } else {
        Isolation::Sandboxed(SandboxOptions {
            rlimits_only: settings.rlimits_only,
            cgroup_parent: settings.cgroup.clone(),
            bwrap: settings.bwrap.clone(),
            search_path: host.search_path(),
        })
    };
    cfg.tenants = TenantIds::PerNamespace {
        pool: pool.clone(),
        first: settings.first_uid,
        count: settings.uid_count,
    };
    cfg.jail = settings.sizes;
    cfg.network = settings.network;
    cfg.warm_pool = settings.pool.clone();
    // The log names this worker as where its functions run; a worker
    // silent for a lease is gone.
    cfg.placement = Some(Node {
        id: worker.id.clone(),
        dead_after: worker.lease,
    });
    cfg.advertise = local.advertise;
    cfg.logs = Some(Shipper::start(pool.clone(), logs.clone()).0);
    LocalDriver::new(cfg).map_err(|e| {
        if unsafe_no_sandbox {
            anyhow::anyhow!("preparing the local driver: {e}")
        } else {
            anyhow::anyhow!(
                "the local driver runs every function, job and build in a sandbox, \
                 which does not work here: {e}\n\
                 (to run only your own code, as your own user, without it: \
                 --unsafe-no-sandbox)"
            )
        }
    })
}

/// The local driver (processes on this machine) or the Kubernetes one.
pub enum AnyDriver {
    Local(Box<LocalDriver>),
    Kubernetes(KubeDriver),
}

impl AnyDriver {
    /// The driver `worker.driver` names, with its own section read from the
    /// environment; the local one keeps its builds and logs below
    /// `data_dir`, runs each namespace's code as a uid of its own (given in
    /// `pool`), in the sandbox unless `unsafe_no_sandbox`, and passes on
    /// what of `host`'s environment its processes may see.
    pub async fn from_env(
        data_dir: &Path,
        blobs: &BlobStore,
        pool: &PgPool,
        worker: &config::Worker,
        host: &config::Host,
        unsafe_no_sandbox: bool,
    ) -> anyhow::Result<Arc<AnyDriver>> {
        let driver = match worker.driver {
            DriverKind::Local => {
                let local = config::Local::from_env()?;
                let driver = local_driver(
                    data_dir,
                    pool,
                    &worker.config,
                    host,
                    local,
                    &worker.logs,
                    unsafe_no_sandbox,
                )?;
                if let Some(limits) = driver.limits() {
                    tracing::info!(%limits, "functions run in the sandbox; memory and processes are limited by {limits}");
                }
                AnyDriver::Local(Box::new(driver))
            }
            DriverKind::Kubernetes => {
                let settings = config::Kube::from_env()?.settings;
                let driver = KubeDriver::connect(settings, blobs.clone())
                    .await
                    .map_err(anyhow::Error::msg)?;
                // What function pods print, kept as the local driver's
                // instances' output is: a shipper of its own.
                let shipper = Shipper::start(pool.clone(), worker.logs.clone()).0;
                AnyDriver::Kubernetes(driver.with_logs(shipper))
            }
        };
        Ok(Arc::new(driver))
    }

    /// What records the runs of the driver's own cron (CronJobs), for a
    /// driver that has one.
    pub fn cron_run_recorder(&self, pool: &sless_store::PgPool) -> Option<CronRunRecorder> {
        match self {
            AnyDriver::Local(_) => None,
            AnyDriver::Kubernetes(d) => Some(d.cron_run_recorder(pool.clone())),
        }
    }

    /// What records the crashes of the function pods of a driver that runs
    /// them on a cluster (the local driver reports its own: `crashes`).
    pub fn crash_recorder(&self, pool: &sless_store::PgPool) -> Option<PodCrashRecorder> {
        match self {
            AnyDriver::Local(_) => None,
            AnyDriver::Kubernetes(d) => Some(d.crash_recorder(pool.clone())),
        }
    }

    /// What follows the output of the function pods of a driver that runs
    /// them on a cluster into the function logs (the local driver reads
    /// its instances' pipes itself).
    pub fn pod_log_follower(&self, pool: &sless_store::PgPool) -> Option<PodLogFollower> {
        match self {
            AnyDriver::Local(_) => None,
            AnyDriver::Kubernetes(d) => d.pod_log_follower(pool.clone()),
        }
    }

    /// Where the local driver reports the crashes of what it runs
    /// (`sless_workers::crashes::record`); the Kubernetes driver has none
    /// (its pods are watched: `crash_recorder`).
    pub fn crashes(
        &self,
    ) -> Option<tokio::sync::mpsc::UnboundedReceiver<sless_workers::crashes::Crash>> {
        match self {
            AnyDriver::Local(d) => d.crashes(),
            AnyDriver::Kubernetes(_) => None,
        }
    }

    /// Stops what this process started (local processes); functions on a
    /// cluster keep running.
    pub async fn shutdown(&self) {
        if let AnyDriver::Local(d) = self {
            d.shutdown().await;
        }
    }
}

impl Driver for AnyDriver {
    async fn build(&self, req: BuildRequest) -> Result<Artifact, DriverError> {
        match self {
            AnyDriver::Local(d) => d.build(req).await,
            AnyDriver::Kubernetes(d) => d.build(req).await,
        }
    }

    async fn deploy(&self, req: DeployRequest) -> Result<Deployment, DriverError> {
        match self {
            AnyDriver::Local(d) => d.deploy(req).await,
            AnyDriver::Kubernetes(d) => d.deploy(req).await,
        }
    }

    async fn remove(&self, key: &FunctionKey) -> Result<(), DriverError> {
        match self {
            AnyDriver::Local(d) => d.remove(key).await,
            AnyDriver::Kubernetes(d) => d.remove(key).await,
        }
    }

    async fn stop(&self, key: &FunctionKey) -> Result<(), DriverError> {
        match self {
            AnyDriver::Local(d) => d.stop(key).await,
            AnyDriver::Kubernetes(d) => d.stop(key).await,
        }
    }

    async fn status(&self, key: &FunctionKey) -> Option<Deployment> {
        match self {
            AnyDriver::Local(d) => d.status(key).await,
            AnyDriver::Kubernetes(d) => d.status(key).await,
        }
    }

    async fn run_job(&self, req: JobRequest) -> Result<JobOutput, DriverError> {
        match self {
            AnyDriver::Local(d) => d.run_job(req).await,
            AnyDriver::Kubernetes(d) => d.run_job(req).await,
        }
    }

    fn kind(&self) -> &'static str {
        match self {
            AnyDriver::Local(d) => d.kind(),
            AnyDriver::Kubernetes(d) => d.kind(),
        }
    }

    fn runs_cron(&self) -> bool {
        match self {
            AnyDriver::Local(d) => d.runs_cron(),
            AnyDriver::Kubernetes(d) => d.runs_cron(),
        }
    }

    fn node(&self) -> Option<Node> {
        match self {
            AnyDriver::Local(d) => d.node(),
            AnyDriver::Kubernetes(d) => d.node(),
        }
    }

    fn running_here(&self) -> Vec<RunningHere> {
        match self {
            AnyDriver::Local(d) => d.running_here(),
            AnyDriver::Kubernetes(d) => d.running_here(),
        }
    }

    async fn sync_cron(
        &self,
        key: &FunctionKey,
        triggers: Vec<CronRequest>,
    ) -> Result<(), DriverError> {
        match self {
            AnyDriver::Local(d) => d.sync_cron(key, triggers).await,
            AnyDriver::Kubernetes(d) => d.sync_cron(key, triggers).await,
        }
    }
}
