//! The Kubernetes driver: functions are built by kaniko Jobs, run as
//! Deployments behind Services, fired by CronJobs and run once as Jobs, all
//! in the tenant's own namespace, hardened for untrusted code.
//!
//! `render` turns requests into Kubernetes objects (pure, unit-tested);
//! [`KubeDriver`] applies them by server-side apply with the field manager
//! `sless` and watches what the cluster makes of them: a build, a rollout
//! or a run is waited for with a watch, never a polling loop.
//!
//! Architecture Invariant: the driver only talks to the cluster; what it
//! learns goes back to the log through the reconciler's events.

mod api;
mod build;
pub mod crashes;
mod cron;
pub mod cron_runs;
mod deploy;
pub mod pod_logs;
pub mod rbac;
pub mod render;
mod rollback;
mod rollout;
mod run;
pub mod settings;
mod tenant;
mod watch;

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use sless_domain::{FunctionKey, Namespace};
use sless_store::blobs::BlobStore;

use crate::driver::{
    Artifact, BuildRequest, CronRequest, DeployRequest, Deployment, Driver, DriverError, JobOutput,
    JobRequest,
};
pub use crashes::PodCrashRecorder;
pub use cron_runs::CronRunRecorder;
pub use pod_logs::PodLogFollower;
pub use settings::{FunctionAddress, KubeSettings, TenantQuota};
pub use tenant::{SERVICE_ACCOUNT, TENANT_CLUSTER_ROLE};

/// Runs functions on a Kubernetes cluster (see the module docs).
#[derive(Clone)]
pub struct KubeDriver {
    inner: Arc<Inner>,
    /// Where what function pods print goes, when it is kept.
    logs: Option<crate::logs::Shipper>,
}

struct Inner {
    client: kube::Client,
    settings: KubeSettings,
    /// Where build contexts are; builds fetch theirs through a presigned URL.
    blobs: BlobStore,
    /// Tenant namespaces this process has ensured, and when.
    ensured: Mutex<HashMap<String, std::time::Instant>>,
    /// Changed after each deploy and cron sync: the recorders that watch
    /// each namespace with functions or cron triggers look again.
    deployed: tokio::sync::watch::Sender<()>,
}

impl KubeDriver {
    pub fn new(client: kube::Client, settings: KubeSettings, blobs: BlobStore) -> KubeDriver {
        KubeDriver {
            inner: Arc::new(Inner {
                client,
                settings,
                blobs,
                ensured: Mutex::new(HashMap::new()),
                deployed: tokio::sync::watch::Sender::new(()),
            }),
            logs: None,
        }
    }

    /// Keeps what function pods print through `shipper`
    /// ([`KubeDriver::pod_log_follower`]).
    pub fn with_logs(mut self, shipper: crate::logs::Shipper) -> KubeDriver {
        self.logs = Some(shipper);
        self
    }

    /// Connects with the in-cluster configuration, or else `KUBECONFIG`
    /// (or `~/.kube/config`).
    pub async fn connect(settings: KubeSettings, blobs: BlobStore) -> Result<KubeDriver, String> {
        let client = kube::Client::try_default()
            .await
            .map_err(|e| format!("connecting to Kubernetes: {e}"))?;
        Ok(KubeDriver::new(client, settings, blobs))
    }

    /// What records the runs of this driver's CronJobs in the log.
    pub fn cron_run_recorder(&self, pool: sless_store::PgPool) -> CronRunRecorder {
        CronRunRecorder::new(pool, self.inner.client.clone())
            .woken_by(self.inner.deployed.subscribe())
            .shipping_to(self.logs.clone())
    }

    /// What records the crashes of this driver's function pods in the log.
    pub fn crash_recorder(&self, pool: sless_store::PgPool) -> PodCrashRecorder {
        PodCrashRecorder::new(pool, self.inner.client.clone())
            .woken_by(self.inner.deployed.subscribe())
    }

    /// What follows the output of this driver's function pods into the
    /// function logs, when it keeps them ([`KubeDriver::with_logs`]).
    pub fn pod_log_follower(&self, pool: sless_store::PgPool) -> Option<PodLogFollower> {
        let shipper = self.logs.clone()?;
        Some(
            PodLogFollower::new(pool, self.inner.client.clone(), shipper)
                .woken_by(self.inner.deployed.subscribe()),
        )
    }

    pub fn settings(&self) -> &KubeSettings {
        &self.inner.settings
    }

    /// Creates or updates the tenant namespace and what every tenant
    /// namespace has: Pod Security `restricted`, default-deny network
    /// policies, a quota, limits, the RoleBinding that lets sless manage it
    /// and the image pull Secret. Idempotent.
    pub async fn ensure_namespace(&self, ns: &Namespace) -> Result<(), DriverError> {
        tenant::ensure(&self.inner, ns, true).await
    }

    /// Like [`KubeDriver::ensure_namespace`], but at most every ten minutes.
    async fn ensured(&self, ns: &Namespace) -> Result<(), DriverError> {
        tenant::ensure(&self.inner, ns, false).await
    }
}

impl Driver for KubeDriver {
    async fn build(&self, req: BuildRequest) -> Result<Artifact, DriverError> {
        build::build(&self.inner, req).await
    }

    async fn deploy(&self, req: DeployRequest) -> Result<Deployment, DriverError> {
        self.ensured(&req.key.namespace).await?;
        let deployed = deploy::deploy(&self.inner, req).await;
        self.inner.deployed.send_replace(());
        deployed
    }

    async fn remove(&self, key: &FunctionKey) -> Result<(), DriverError> {
        deploy::remove(&self.inner, key).await
    }

    async fn stop(&self, key: &FunctionKey) -> Result<(), DriverError> {
        deploy::scale_to_zero(&self.inner, key).await
    }

    async fn status(&self, key: &FunctionKey) -> Option<Deployment> {
        deploy::status(&self.inner, key).await
    }

    async fn run_job(&self, req: JobRequest) -> Result<JobOutput, DriverError> {
        self.ensured(&req.key.namespace).await?;
        run::run(&self.inner, self.logs.as_ref(), req).await
    }

    fn kind(&self) -> &'static str {
        "kubernetes"
    }

    /// Cron triggers are CronJobs; [`CronRunRecorder`] records their runs.
    fn runs_cron(&self) -> bool {
        true
    }

    async fn sync_cron(
        &self,
        key: &FunctionKey,
        triggers: Vec<CronRequest>,
    ) -> Result<(), DriverError> {
        if !triggers.is_empty() {
            self.ensured(&key.namespace).await?;
        }
        let synced = cron::sync(&self.inner, key, triggers).await;
        self.inner.deployed.send_replace(());
        synced
    }
}
