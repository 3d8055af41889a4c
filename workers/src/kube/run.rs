//! One run of a function to completion: a Job labelled
//! `sless.dev/job=<name>`, its event in a Secret owned by the Job and
//! mounted into its pod as a file, waited for with a watch; what its pod
//! printed (stdout and stderr together, as the pod log has them) becomes
//! the run's output. Dropping the run deletes the Job, and with it its pod
//! and its Secret.

use std::time::Duration;

use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::{Pod, Secret};
use kube::ResourceExt;
use kube::api::{Api, ListParams, LogParams, PostParams};
use sless_store::function_logs::Stream;

use super::Inner;
use super::api::{self, infra, is_status, job_end};
use super::render::job::{run_event_secret, run_job};
use super::render::pod::CONTAINER;
use super::render::{LABEL_RUN, names};
use crate::capture;
use crate::driver::{Captured, DriverError, JobOutput, JobRequest};
use crate::logs::{Shipper, Source};

/// Most bytes of a run's log read back.
const LOG_READ_LIMIT: i64 = 16 * 1024 * 1024;

/// How much longer than the run's timeout the driver waits for the Job to
/// say how it ended (the pod must be scheduled and pulled first).
const GRACE: Duration = Duration::from_secs(120);

/// Runs `req` as a Job and waits for its end; what its pod printed goes to
/// `logs` too, under the run's invocation record.
pub(super) async fn run(
    inner: &Inner,
    logs: Option<&Shipper>,
    req: JobRequest,
) -> Result<JobOutput, DriverError> {
    let ns = req.key.namespace.as_str();
    let jobs = Api::<Job>::namespaced(inner.client.clone(), ns);
    let secrets = Api::<Secret>::namespaced(inner.client.clone(), ns);
    let nonce = uuid::Uuid::new_v4().simple().to_string();
    let event_secret = names::run_event_secret_name(&names::run_job_name(&req.run), &nonce[..10]);
    let job = run_job(
        &inner.settings,
        &req,
        &req.artifact.reference,
        &event_secret,
    );
    let name = job.name_any();
    // Armed before the Job exists: a run dropped at any point leaves none.
    let guard = DeleteOnDrop {
        jobs: Some(jobs.clone()),
        name: name.clone(),
    };
    let created = match jobs.create(&PostParams::default(), &job).await {
        Ok(created) => created,
        Err(e) if is_status(&e, 409) => {
            // A run is started once: a Job of that name is left from an
            // earlier life of the job's name. Replace it.
            api::delete(&jobs, &name)
                .await
                .map_err(infra("deleting a stale job"))?;
            api::watch_until(&jobs, &name, Duration::from_secs(60), |j| j.is_none())
                .await
                .map_err(|e| DriverError::Infra(format!("waiting for {ns}/{name} to go: {e}")))?;
            jobs.create(&PostParams::default(), &job)
                .await
                .map_err(infra("creating a job"))?
        }
        Err(e) => return Err(infra("creating a job")(e)),
    };
    // Then its event, owned by it: its pod waits for the Secret to mount.
    match secrets
        .create(
            &PostParams::default(),
            &run_event_secret(&event_secret, &req, &created),
        )
        .await
    {
        Ok(_) => {}
        Err(kube::Error::Api(s)) if s.code == 422 => {
            return Err(DriverError::Deploy {
                message: format!(
                    "the run cannot start: the cluster refused its event: {}",
                    s.message
                ),
                log_tail: String::new(),
            });
        }
        Err(e) => return Err(infra("creating a job's event")(e)),
    }
    let within = req.timeout + GRACE;
    let seen = api::watch_until(&jobs, &name, within, |j| {
        j.is_none_or(|j| job_end(j).is_some())
    })
    .await
    .map_err(|e| DriverError::Infra(format!("waiting for job {ns}/{name}: {e}")))?;
    let Some(finished) = seen else {
        return Err(DriverError::Infra(format!(
            "job {ns}/{name} was deleted while it ran"
        )));
    };
    let end = job_end(&finished).expect("waited for the end");
    let pods = Api::<Pod>::namespaced(inner.client.clone(), ns);
    let uid = created.uid().unwrap_or_default();
    let pod = pods
        .list(&ListParams::default().labels(&format!("{LABEL_RUN}={}", names::label_value(&name))))
        .await
        .map_err(infra("finding a job's pod"))?
        .items
        .into_iter()
        .filter(|p| p.owner_references().iter().any(|o| o.uid == uid))
        .max_by_key(|p| p.metadata.creation_timestamp.clone().map(|t| t.0));
    let exit = pod.as_ref().map(exit_of).unwrap_or_default();
    let printed = match &pod {
        Some(pod) => read_log(&pods, &pod.name_any()).await,
        None => String::new(),
    };
    if let Some(logs) = logs {
        let source = Source {
            namespace: req.key.namespace.to_string(),
            function: req.key.name.to_string(),
            version: Some(req.version),
            instance: req.run.clone(),
            invocation: req.invocation,
        };
        logs.push_text(&source, Stream::Stdout, &printed);
    }
    let stdout = capture::captured(printed.as_bytes());
    let duration = finished
        .status
        .as_ref()
        .and_then(|s| Some((s.start_time.clone()?, s.completion_time.clone())))
        .map(|(start, done)| {
            let now = || {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
            };
            let done = done.map_or_else(now, |t| t.0.as_millisecond());
            Duration::from_millis(u64::try_from(done - start.0.as_millisecond()).unwrap_or(0))
        })
        .unwrap_or_default();
    guard.disarm();
    let signal = exit.signal;
    Ok(JobOutput {
        exit_code: exit
            .code
            .or((!end.succeeded).then_some(1).filter(|_| signal.is_none())),
        signal,
        timed_out: end.reason == "DeadlineExceeded",
        out_of_memory: exit.out_of_memory.then_some(req.memory_mb),
        stdout,
        stderr: Captured::default(),
        duration,
    })
}

/// How the function's container ended, as its pod's status says.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) struct Exit {
    /// The container's exit code (137 for a process killed by SIGKILL).
    pub code: Option<i32>,
    /// The signal that ended it, when the runtime says so.
    pub signal: Option<i32>,
    /// Whether the kernel killed it for passing its memory limit: the
    /// container runtime's reason `OOMKilled`.
    pub out_of_memory: bool,
}

/// How the function's container ended.
pub(super) fn exit_of(pod: &Pod) -> Exit {
    let terminated = pod
        .status
        .as_ref()
        .and_then(|s| s.container_statuses.as_ref())
        .and_then(|all| all.iter().find(|c| c.name == CONTAINER))
        .and_then(|c| c.state.as_ref()?.terminated.clone());
    match terminated {
        Some(t) => Exit {
            code: Some(t.exit_code),
            signal: t.signal,
            out_of_memory: t.reason.as_deref() == Some(OOM_KILLED),
        },
        None => Exit::default(),
    }
}

/// The reason a container runtime gives a container the kernel killed for
/// passing its cgroup's memory limit.
pub(super) const OOM_KILLED: &str = "OOMKilled";

/// The memory limit of the pod's function container in MiB, as sless
/// renders it (`{n}Mi`).
pub(super) fn memory_limit_mb(pod: &Pod) -> Option<u32> {
    let limit = pod
        .spec
        .as_ref()?
        .containers
        .iter()
        .find(|c| c.name == CONTAINER)?
        .resources
        .as_ref()?
        .limits
        .as_ref()?
        .get("memory")?;
    limit.0.strip_suffix("Mi")?.parse().ok()
}

/// The pod's log (up to [`LOG_READ_LIMIT`] bytes), kept as a local run
/// keeps its stdout.
async fn read_log(pods: &Api<Pod>, pod: &str) -> String {
    let params = LogParams {
        container: Some(CONTAINER.to_owned()),
        limit_bytes: Some(LOG_READ_LIMIT),
        ..LogParams::default()
    };
    pods.logs(pod, &params).await.unwrap_or_default()
}

/// Deletes the run's Job (and so its pod) unless the run ended: dropping
/// the run's future cancels it.
struct DeleteOnDrop {
    jobs: Option<Api<Job>>,
    name: String,
}

impl DeleteOnDrop {
    fn disarm(mut self) {
        self.jobs = None;
    }
}

impl Drop for DeleteOnDrop {
    fn drop(&mut self) {
        let Some(jobs) = self.jobs.take() else {
            return;
        };
        let name = std::mem::take(&mut self.name);
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Err(e) = api::delete(&jobs, &name).await {
                    tracing::warn!(job = %name, "could not delete a cancelled run: {e}");
                }
            });
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;

    use super::*;

    fn pod(terminated: serde_json::Value) -> Pod {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "run"},
            "spec": {"containers": [{
                "name": CONTAINER,
                "image": "x",
                "resources": {"limits": {"memory": "64Mi"}, "requests": {"memory": "64Mi"}},
            }]},
            "status": {"containerStatuses": [{
                "name": CONTAINER,
                "image": "x",
                "imageID": "",
                "ready": false,
                "restartCount": 0,
                "state": {"terminated": terminated},
            }]},
        }))
        .unwrap()
    }

    #[test]
    fn a_container_the_kernel_killed_for_memory_is_out_of_memory() {
        let p = pod(serde_json::json!({"exitCode": 137, "reason": "OOMKilled"}));
        assert_eq!(
            exit_of(&p),
            Exit {
                code: Some(137),
                signal: None,
                out_of_memory: true,
            }
        );
        assert_eq!(memory_limit_mb(&p), Some(64));
    }

    #[test]
    fn a_container_that_failed_on_its_own_is_not_out_of_memory() {
        let p = pod(serde_json::json!({"exitCode": 1, "reason": "Error"}));
        assert_eq!(
            exit_of(&p),
            Exit {
                code: Some(1),
                signal: None,
                out_of_memory: false,
            }
        );
        let killed = pod(serde_json::json!({"exitCode": 137, "reason": "Error", "signal": 9}));
        assert!(!exit_of(&killed).out_of_memory);
    }
}
