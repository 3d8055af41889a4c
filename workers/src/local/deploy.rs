//! Deploying a function on the local driver: it runs as `instances`
//! instances, each a supervised process on a loopback port of its own.
//! Each instance's process (warm from the pool, or started cold) is
//! handed its socket and waited for until it answers its health check.
//! The same version with the same settings keeps its healthy instances
//! (the oldest first) and has the missing ones started or the newest
//! extra ones stopped; anything else starts every instance anew, and the
//! previous ones stop only once all the new ones are healthy (a call that
//! a proxy still sends them is refused, and the proxy waits for the read
//! model to name the new ones). A start that fails leaves what served
//! before as it was.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::future::join_all;
use sless_domain::FunctionKey;
use tokio::time::Instant;

use super::launch::{INSTANCE_ENV, listener_port};
use super::process::{self, Instance, InstanceParts, LogSink, Running};
use super::sandbox::Launch;
use super::{LocalDriver, build, pool};
use crate::driver::{DeployRequest, Deployment, DriverError};
use crate::logs::Source;

/// How often deploy asks a starting function whether it is healthy.
const HEALTH_POLL: Duration = Duration::from_millis(5);
/// How long one health request may take.
const HEALTH_REQUEST_TIMEOUT: Duration = Duration::from_secs(2);

impl LocalDriver {
    fn log_path(&self, key: &FunctionKey, version: u32) -> PathBuf {
        self.cfg
            .data_dir
            .join("logs")
            .join(key.namespace.as_str())
            .join(key.name.as_str())
            .join(format!("v{version}.log"))
    }

    /// Whether the process started as `spec` answers its health check on
    /// `port`: the answer must name the instance `spec` was started as, so
    /// another process that took the port does not pass for it.
    async fn healthy(&self, port: u16, spec: &Launch) -> bool {
        #[derive(serde::Deserialize)]
        struct Health {
            instance: Option<String>,
        }
        let url = format!(
            "http://{}/__sless/health",
            SocketAddr::new(self.cfg.advertise, port)
        );
        let Ok(resp) = self
            .client
            .get(url)
            .timeout(HEALTH_REQUEST_TIMEOUT)
            .send()
            .await
        else {
            return false;
        };
        if resp.status() != reqwest::StatusCode::OK {
            return false;
        }
        let answered = resp.json::<Health>().await.ok().and_then(|h| h.instance);
        answered.as_deref() == spec.env_value(INSTANCE_ENV)
    }

    /// Waits until the process answers its health check; on failure says
    /// why.
    async fn wait_healthy(
        &self,
        port: u16,
        spec: &Launch,
        running: &mut Running,
    ) -> Result<(), String> {
        let deadline = Instant::now() + self.cfg.health_timeout;
        let timed_out = || {
            format!(
                "function not healthy within {}",
                human_duration(self.cfg.health_timeout)
            )
        };
        let exited =
            |status: std::io::Result<std::process::ExitStatus>, running: &Running| match status {
                Ok(status) => format!("function {} during start", running.describe(&status)),
                Err(e) => format!("function process could not be waited for: {e}"),
            };
        loop {
            tokio::select! {
                status = running.child.wait() => return Err(exited(status, running)),
                probe = tokio::time::timeout_at(deadline, self.healthy(port, spec)) => match probe {
                    Ok(true) => return Ok(()),
                    Ok(false) => {}
                    Err(_) => return Err(timed_out()),
                },
            }
            let next = (Instant::now() + HEALTH_POLL).min(deadline);
            tokio::select! {
                status = running.child.wait() => return Err(exited(status, running)),
                () = tokio::time::sleep_until(next) => {}
            }
            if Instant::now() >= deadline {
                return Err(timed_out());
            }
        }
    }

    /// A process of the warm pool for `req`, unless its environment sets
    /// what an interpreter reads only when it starts.
    pub(super) async fn warm_for(&self, req: &DeployRequest) -> Option<pool::Warm> {
        let pool = self.pool.as_ref()?;
        if req
            .env_vars
            .keys()
            .any(|k| pool::read_at_start(req.runtime, k))
        {
            return None;
        }
        pool.take(req.runtime).await
    }

    pub(super) async fn deploy_locked(
        &self,
        req: DeployRequest,
    ) -> Result<Deployment, DriverError> {
        if self.closed.load(Ordering::SeqCst) {
            return Err(DriverError::Infra("the local driver is shut down".into()));
        }
        let artifact_dir = PathBuf::from(&req.artifact.reference);
        let complete = artifact_dir.join(build::COMPLETE_MARKER);
        if !tokio::fs::try_exists(&complete).await.unwrap_or(false) {
            return Err(DriverError::Deploy {
                message: format!(
                    "artifact {} is not a finished local build",
                    req.artifact.reference
                ),
                log_tail: String::new(),
            });
        }

        // Of what runs, the instances started as `req` asks that are
        // healthy serve on; the oldest are kept, up to the count asked for.
        let want = usize::try_from(req.instances.max(1)).unwrap_or(usize::MAX);
        let current = self.instances(&req.key);
        let mut kept = Vec::new();
        if current.first().is_some_and(|i| runs_as(i, &req)) {
            let healthy = join_all(
                current
                    .iter()
                    .map(async |i| i.pid().is_some() && self.healthy(i.port, i.spec()).await),
            )
            .await;
            kept = current
                .iter()
                .zip(healthy)
                .filter(|(_, healthy)| *healthy)
                .map(|(i, _)| i.clone())
                .take(want)
                .collect();
        }
        if kept.len() == current.len() && kept.len() == want {
            return self.deployment_of(&kept).ok_or_else(|| {
                DriverError::Infra(format!("the instances of {} stopped", req.key))
            });
        }

        let missing = want - kept.len();
        let mut started = Vec::with_capacity(missing);
        let mut failure = None;
        for start in join_all((0..missing).map(|_| self.start_instance(&req, &artifact_dir))).await
        {
            match start {
                Ok(instance) => started.push(instance),
                Err(e) => {
                    failure.get_or_insert(e);
                }
            }
        }
        if let Some(e) = failure {
            // What served before serves on.
            stop_all(&started).await;
            return Err(e);
        }

        // What is not kept stops: replaced, scaled in, or failing its
        // health check.
        let retired: Vec<Arc<Instance>> = current
            .iter()
            .filter(|i| !kept.iter().any(|k| Arc::ptr_eq(i, k)))
            .cloned()
            .collect();
        let serving: Vec<Arc<Instance>> = kept.into_iter().chain(started).collect();
        self.registry
            .lock()
            .unwrap()
            .insert(req.key.clone(), serving.clone());
        self.count_processes();
        stop_all(&retired).await;
        self.deployment_of(&serving)
            .ok_or_else(|| DriverError::Infra(format!("the instances of {} stopped", req.key)))
    }

    /// Starts one instance of `req`, built into `artifact_dir` (see the
    /// module docs), and supervises it once it is healthy.
    async fn start_instance(
        &self,
        req: &DeployRequest,
        artifact_dir: &Path,
    ) -> Result<Arc<Instance>, DriverError> {
        let log_path = self.log_path(&req.key, req.version);
        let sink = tokio::task::spawn_blocking(move || LogSink::open(&log_path))
            .await
            .map_err(|e| DriverError::Infra(format!("log task: {e}")))?
            .map_err(|e| DriverError::Infra(format!("cannot open the function log: {e}")))?;

        // The socket the function serves on is bound here and handed to its
        // process: a warm process brought one from its start, a cold one gets
        // a new one. sless holds it for as long as the instance lives, so
        // while the process is down (a crash, a restart) the port stays
        // sless's and calls wait in its backlog; nobody else can take it.
        let warm = self.warm_for(req).await;
        let listener = match warm.as_ref() {
            Some(warm) => warm.listener(),
            None => Arc::new(self.listen()?),
        };
        let port = listener_port(&listener)?;
        let source = Source {
            namespace: req.key.namespace.to_string(),
            function: req.key.name.to_string(),
            version: Some(req.version),
            instance: format!("{}:{port}", self.cfg.advertise),
            invocation: None,
        };
        let sink = Arc::new(sink.shipping(self.cfg.logs.clone().map(|s| (s, source))));
        let spec = self
            .launch_spec(req, artifact_dir, Some(listener), Vec::new())
            .await?;
        let to = pool::Specialisation {
            artifact_dir,
            spec: &spec,
            memory_mb: req.memory_mb,
            job: None,
        };
        let what = format!("function {}", req.key);
        let cold = async || process::start(&self.spawner, &spec, &sink).await;
        let started =
            pool::warm_or_cold(warm, to, &what, cold)
                .await
                .map(|(mut running, pooled)| {
                    // A cold start reads its output from the start.
                    if pooled {
                        process::read_output(&mut running, &sink);
                    }
                    running
                });
        let mut running = started.map_err(|e| {
            DriverError::Infra(format!(
                "cannot start {}: {e}",
                spec.program.to_string_lossy()
            ))
        })?;
        if let Err(failure) = self.wait_healthy(port, &spec, &mut running).await {
            process::terminate(&mut running, process::STOP_GRACE).await;
            running.drain_output().await;
            return Err(DriverError::Deploy {
                message: failure,
                log_tail: sink.tail(),
            });
        }
        Ok(Instance::supervise(
            InstanceParts {
                key: req.key.clone(),
                version: req.version,
                artifact: req.artifact.clone(),
                endpoint: format!("http://{}", SocketAddr::new(self.cfg.advertise, port)),
                port,
                entrypoint: req.entrypoint.clone(),
                env_vars: req.env_vars.clone(),
                memory_mb: req.memory_mb,
                spec,
                sink,
                crashes: self.crashes.0.clone(),
            },
            running,
            self.spawner.clone(),
        ))
    }

    /// What `instances` (one function's, in the order they started) serve
    /// as: those whose process runs, the first one's endpoint the
    /// function's; `None` when none runs.
    pub(super) fn deployment_of(&self, instances: &[Arc<Instance>]) -> Option<Deployment> {
        let running: Vec<&Arc<Instance>> = instances.iter().filter(|i| i.pid().is_some()).collect();
        let first = running.first()?;
        Some(Deployment {
            version: first.version,
            endpoint: first.endpoint.clone(),
            artifact: first.artifact.clone(),
            node: self.cfg.placement.as_ref().map(|n| n.id.clone()),
            ready: u32::try_from(running.len()).unwrap_or(u32::MAX),
            instances: running.iter().map(|i| i.endpoint.clone()).collect(),
        })
    }
}

/// Whether `instance` was started as `req` asks: the same version, build,
/// entrypoint and environment (its memory limit aside).
fn runs_as(instance: &Instance, req: &DeployRequest) -> bool {
    instance.version == req.version
        && instance.artifact == req.artifact
        && instance.entrypoint == req.entrypoint
        && instance.env_vars == req.env_vars
}

/// Stops `instances` gracefully, all at once, and waits until they are gone.
pub(super) async fn stop_all(instances: &[Arc<Instance>]) {
    for i in instances {
        i.signal_stop();
    }
    join_all(instances.iter().map(|i| i.stop())).await;
}

fn human_duration(d: Duration) -> String {
    if d.subsec_millis() == 0 {
        format!("{} s", d.as_secs())
    } else {
        format!("{} ms", d.as_millis())
    }
}
