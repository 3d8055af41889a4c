//! Small helpers over kube's `Api`: server-side apply with our field
//! manager, deletes that tolerate a missing object, label selectors, and
//! errors as the driver reports them.

use std::collections::BTreeMap;
use std::fmt::Debug;

use kube::api::{Api, DeleteParams, ListParams, Patch, PatchParams};
use kube::{Resource, ResourceExt};
use serde::Serialize;
use serde::de::DeserializeOwned;

use super::render::FIELD_MANAGER;
use crate::driver::DriverError;

/// Creates or updates `obj` by server-side apply, as field manager
/// `sless`, taking over fields another manager changed since.
pub(super) async fn apply<K>(api: &Api<K>, obj: &K) -> Result<K, kube::Error>
where
    K: Resource + Clone + Debug + Serialize + DeserializeOwned,
{
    let params = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&obj.name_any(), &params, &Patch::Apply(obj))
        .await
}

/// Deletes `name` and, in the background, what it owns; no error if it is
/// already gone.
pub(super) async fn delete<K>(api: &Api<K>, name: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    match api.delete(name, &DeleteParams::background()).await {
        Ok(_) => Ok(()),
        Err(e) if is_status(&e, 404) => Ok(()),
        Err(e) => Err(e),
    }
}

/// Deletes every object `selector` matches (and what they own).
pub(super) async fn delete_matching<K>(api: &Api<K>, selector: &str) -> Result<(), kube::Error>
where
    K: Resource + Clone + Debug + DeserializeOwned,
{
    let list = api.list(&ListParams::default().labels(selector)).await;
    let list = match list {
        Ok(list) => list,
        Err(e) if is_status(&e, 404) => return Ok(()),
        Err(e) => return Err(e),
    };
    for obj in list {
        delete(api, &obj.name_any()).await?;
    }
    Ok(())
}

/// A label selector requiring every pair of `labels`.
pub(super) fn selector(labels: &BTreeMap<String, String>) -> String {
    labels
        .iter()
        .map(|(k, v)| format!("{k}={v}"))
        .collect::<Vec<_>>()
        .join(",")
}

/// Whether `e` is the API server answering with HTTP status `code`.
pub(super) fn is_status(e: &kube::Error, code: u16) -> bool {
    matches!(e, kube::Error::Api(status) if status.code == code)
}

/// A Kubernetes error the reconciler should retry later.
pub(super) fn infra(what: impl std::fmt::Display) -> impl FnOnce(kube::Error) -> DriverError {
    move |e| DriverError::Infra(format!("kubernetes: {what}: {e}"))
}

/// Watches `name` until `done` says so of it (or of its absence: `None`),
/// or `within` passes; returns the object as last seen. A dropped watch is
/// resumed with a backoff.
pub(super) async fn watch_until<K>(
    api: &Api<K>,
    name: &str,
    within: std::time::Duration,
    done: impl Fn(Option<&K>) -> bool,
) -> Result<Option<K>, WaitError>
where
    K: Resource + Clone + Debug + Send + DeserializeOwned + 'static,
{
    use futures_util::StreamExt;
    use kube::runtime::WatchStreamExt;
    let stream = kube::runtime::watcher::watch_object(api.clone(), name).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let watching = async {
        while let Some(seen) = stream.next().await {
            match seen {
                Ok(obj) if done(obj.as_ref()) => return Ok(obj),
                Ok(_) => {}
                Err(e) => tracing::debug!(%name, "watch interrupted: {e}"),
            }
        }
        Err(WaitError::Ended)
    };
    tokio::time::timeout(within, watching)
        .await
        .unwrap_or(Err(WaitError::TimedOut))
}

/// Why [`watch_until`] returned without what it waited for.
#[derive(Debug)]
pub(super) enum WaitError {
    TimedOut,
    Ended,
}

impl std::fmt::Display for WaitError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            WaitError::TimedOut => f.write_str("timed out"),
            WaitError::Ended => f.write_str("the watch ended"),
        }
    }
}

/// How a Job ended, once it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct JobEnd {
    pub succeeded: bool,
    /// The condition's reason (`BackoffLimitExceeded`, `DeadlineExceeded`, ...).
    pub reason: String,
    pub message: String,
}

/// How `job` ended, or `None` while it runs.
pub(super) fn job_end(job: &k8s_openapi::api::batch::v1::Job) -> Option<JobEnd> {
    let status = job.status.as_ref()?;
    for c in status.conditions.iter().flatten() {
        if c.status != "True" {
            continue;
        }
        let end = |succeeded| JobEnd {
            succeeded,
            reason: c.reason.clone().unwrap_or_default(),
            message: c.message.clone().unwrap_or_default(),
        };
        match c.type_.as_str() {
            "Complete" | "SuccessCriteriaMet" => return Some(end(true)),
            "Failed" | "FailureTarget" => return Some(end(false)),
            _ => {}
        }
    }
    None
}

/// The last `lines` lines a pod's container printed (empty when they
/// cannot be read).
pub(super) async fn log_tail(
    pods: &Api<k8s_openapi::api::core::v1::Pod>,
    pod: &str,
    container: &str,
    lines: i64,
    previous: bool,
) -> String {
    let params = kube::api::LogParams {
        container: Some(container.to_owned()),
        tail_lines: Some(lines),
        previous,
        ..kube::api::LogParams::default()
    };
    pods.logs(pod, &params).await.unwrap_or_default()
}

/// How long `job` ran: from its start to its completion, or, when the
/// Job controller has not written `completionTime` yet, to the moment
/// its end condition became true. Since Kubernetes 1.31 a Job first gets
/// `SuccessCriteriaMet` (or `FailureTarget`), which [`job_end`] takes as
/// its end, and its `completionTime` only with `Complete` a moment later;
/// a failed Job never gets one. Zero while it has not started or ended.
pub(super) fn run_duration(job: &k8s_openapi::api::batch::v1::Job) -> std::time::Duration {
    let Some(status) = job.status.as_ref() else {
        return std::time::Duration::ZERO;
    };
    let ended = status.completion_time.clone().or_else(|| {
        status
            .conditions
            .iter()
            .flatten()
            .filter(|c| c.status == "True")
            .filter(|c| {
                matches!(
                    c.type_.as_str(),
                    "Complete" | "SuccessCriteriaMet" | "Failed" | "FailureTarget"
                )
            })
            .find_map(|c| c.last_transition_time.clone())
    });
    match (status.start_time.as_ref(), ended) {
        (Some(start), Some(end)) => std::time::Duration::from_millis(
            u64::try_from(end.0.as_millisecond() - start.0.as_millisecond()).unwrap_or(0),
        ),
        _ => std::time::Duration::ZERO,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use k8s_openapi::api::batch::v1::Job;

    use super::{job_end, run_duration};

    fn job(status: serde_json::Value) -> Job {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": "run"},
            "status": status,
        }))
        .unwrap()
    }

    #[test]
    fn a_job_that_met_its_success_criteria_ran_until_then() {
        // What the Job controller writes first: the end, no completionTime.
        let j = job(serde_json::json!({
            "startTime": "2026-12-06T20:29:00Z",
            "conditions": [{
                "type": "SuccessCriteriaMet", "status": "True",
                "lastTransitionTime": "2026-12-06T20:29:07Z",
            }],
        }));
        assert!(job_end(&j).is_some_and(|e| e.succeeded));
        assert_eq!(run_duration(&j), Duration::from_secs(7));
    }

    #[test]
    fn a_completed_job_ran_until_its_completion_time() {
        let j = job(serde_json::json!({
            "startTime": "2026-12-06T20:29:00Z",
            "completionTime": "2026-12-06T20:29:08Z",
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": "2026-12-06T20:29:07Z"},
                {"type": "Complete", "status": "True", "lastTransitionTime": "2026-12-06T20:29:08Z"},
            ],
        }));
        assert_eq!(run_duration(&j), Duration::from_secs(8));
    }

    #[test]
    fn a_failed_job_ran_until_it_failed() {
        let j = job(serde_json::json!({
            "startTime": "2026-12-06T20:29:00Z",
            "conditions": [{
                "type": "FailureTarget", "status": "True", "reason": "DeadlineExceeded",
                "lastTransitionTime": "2026-12-06T20:29:30Z",
            }],
        }));
        assert!(job_end(&j).is_some_and(|e| !e.succeeded));
        assert_eq!(run_duration(&j), Duration::from_secs(30));
    }

    #[test]
    fn a_job_that_runs_has_no_duration_yet() {
        let j = job(serde_json::json!({"startTime": "2026-12-06T20:29:00Z", "active": 1}));
        assert_eq!(run_duration(&j), Duration::ZERO);
    }
}
