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
