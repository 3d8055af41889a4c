//! Crashes of functions' pods, into the log: the function container of a
//! pod that ended on its own (killed for passing its memory limit, or its
//! process exited), which the kubelet then starts again, becomes
//! `FunctionCrashed`, as a local process's crash does (`crate::crashes`).
//! Its `last_error` then says so, and the invoke proxy can tell the caller
//! whose call broke why.
//!
//! Every worker process watches the pods of each namespace that holds a
//! function; a crash is recorded once however many see it, and once more
//! never when a watch starts again and lists the pod's last termination.

use chrono::{DateTime, Utc};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use sless_domain::{CrashCause, FunctionKey, FunctionName, Namespace};
use sless_store::PgPool;
use tokio::sync::watch;

use super::render::pod::CONTAINER;
use super::render::{COMPONENT_FUNCTION, LABEL_COMPONENT, LABEL_FUNCTION, LABEL_VERSION};
use crate::crashes::Crash;

/// A termination older than this when first seen is history (the watcher
/// was not running), not news: it is not recorded.
const NEWS: chrono::TimeDelta = chrono::TimeDelta::minutes(10);

/// How much earlier than the container's end a record of it may be (the
/// kubelet's clock against the database's).
const SKEW: chrono::TimeDelta = chrono::TimeDelta::seconds(2);

/// The crash a function's pod shows, and when its container ended: the
/// last termination of a container the kubelet restarted.
pub fn crash_of(pod: &Pod) -> Option<(Crash, DateTime<Utc>)> {
    let labels = pod.labels();
    if labels.get(LABEL_COMPONENT).map(String::as_str) != Some(COMPONENT_FUNCTION) {
        return None;
    }
    let namespace = Namespace::parse(pod.namespace()?.as_str()).ok()?;
    let name = FunctionName::parse(labels.get(LABEL_FUNCTION)?).ok()?;
    let version: u32 = labels.get(LABEL_VERSION)?.parse().ok()?;
    let status = pod
        .status
        .as_ref()?
        .container_statuses
        .as_ref()?
        .iter()
        .find(|c| c.name == CONTAINER)?;
    if status.restart_count == 0 {
        return None;
    }
    let ended = status.last_state.as_ref()?.terminated.as_ref()?;
    let finished =
        DateTime::<Utc>::from_timestamp_millis(ended.finished_at.as_ref()?.0.as_millisecond())?;
    let again = "the kubelet starts it again";
    let memory_mb = super::run::memory_limit_mb(pod);
    let (cause, detail, memory_mb) = if ended.reason.as_deref() == Some(super::run::OOM_KILLED) {
        let limit = memory_mb.map_or_else(|| "limit".to_owned(), |mb| format!("memory_mb of {mb}"));
        (
            CrashCause::Oom,
            format!("killed for using more memory than its {limit}; {again}"),
            memory_mb,
        )
    } else if let Some(signal) = ended.signal {
        (
            CrashCause::Killed,
            format!("its process was killed by signal {signal}; {again}"),
            None,
        )
    } else {
        (
            CrashCause::Exited,
            format!("its process exited with code {}; {again}", ended.exit_code),
            None,
        )
    };
    let crash = Crash {
        key: FunctionKey::new(namespace, name),
        version,
        cause,
        detail,
        memory_mb,
    };
    Some((crash, finished))
}

/// Records the crashes of functions' pods in the log.
#[derive(Clone)]
pub struct PodCrashRecorder {
    pool: PgPool,
    client: kube::Client,
    /// Changes when the driver deployed into a namespace.
    wake: Option<watch::Receiver<()>>,
}

impl PodCrashRecorder {
    pub fn new(pool: PgPool, client: kube::Client) -> PodCrashRecorder {
        PodCrashRecorder {
            pool,
            client,
            wake: None,
        }
    }

    /// Lists the namespaces to watch again whenever `wake` changes.
    pub fn woken_by(mut self, wake: watch::Receiver<()>) -> PodCrashRecorder {
        self.wake = Some(wake);
        self
    }

    /// Records the crash `pod` shows, unless the log has it or it is old
    /// news; true when it appended one.
    pub async fn record(&self, pod: &Pod) -> sless_store::Result<bool> {
        let Some((crash, finished)) = crash_of(pod) else {
            return Ok(false);
        };
        if Utc::now() - finished > NEWS {
            return Ok(false);
        }
        crate::crashes::append_unless_recorded(&self.pool, &crash, Some(finished - SKEW)).await
    }

    /// Watches the pods of every namespace with a function and
    /// records their crashes, until `shutdown`.
    pub async fn run(self, shutdown: watch::Receiver<bool>) {
        let (client, pool, wake) = (self.client.clone(), self.pool.clone(), self.wake.clone());
        let namespaces = || sless_store::readmodel::namespaces_with_functions(&pool);
        let seen = move |pod: Pod| {
            let me = self.clone();
            async move {
                let ns = pod.namespace().unwrap_or_default();
                match me.record(&pod).await {
                    Ok(true) => {
                        tracing::info!(%ns, pod = %pod.name_any(), "recorded a function pod's crash")
                    }
                    Ok(false) => {}
                    Err(e) => {
                        tracing::warn!(%ns, pod = %pod.name_any(), error = %e, "recording a function pod's crash")
                    }
                }
            }
        };
        let selector = format!("{LABEL_COMPONENT}={COMPONENT_FUNCTION}");
        super::watch::each_namespace(client, selector, namespaces, seen, shutdown, wake).await;
    }
}

#[cfg(test)]
mod tests {
    use serde_json::{Value, json};

    use super::*;

    /// A function pod of `demo` version 3 (limit 128Mi) whose container
    /// has `status`.
    fn pod(component: &str, status: Value) -> Pod {
        serde_json::from_value(json!({
            "metadata": {
                "name": "demo-5c9f-abcde",
                "namespace": "sless-0123456789abcdef",
                "labels": {
                    LABEL_COMPONENT: component,
                    LABEL_FUNCTION: "demo",
                    LABEL_VERSION: "3",
                },
            },
            "spec": {"containers": [{
                "name": CONTAINER,
                "resources": {"limits": {"memory": "128Mi"}},
            }]},
            "status": {"containerStatuses": [status]},
        }))
        .unwrap()
    }

    fn restarted(count: i32, terminated: Value) -> Value {
        json!({
            "name": CONTAINER, "image": "x", "imageID": "", "ready": true,
            "restartCount": count,
            "lastState": {"terminated": terminated},
        })
    }

    #[test]
    fn a_restarted_function_container_is_a_crash_with_its_cause() {
        let at = "2026-12-06T10:00:00Z";
        let oom = json!({"exitCode": 137, "reason": "OOMKilled", "finishedAt": at});
        let exited = json!({"exitCode": 3, "reason": "Error", "finishedAt": at});
        let signalled = json!({"exitCode": 0, "signal": 9, "finishedAt": at});
        let cases = [
            (
                pod(COMPONENT_FUNCTION, restarted(1, oom.clone())),
                Some((
                    CrashCause::Oom,
                    "killed for using more memory than its memory_mb of 128; the kubelet starts it again",
                    Some(128),
                )),
            ),
            (
                pod(COMPONENT_FUNCTION, restarted(2, exited)),
                Some((
                    CrashCause::Exited,
                    "its process exited with code 3; the kubelet starts it again",
                    None,
                )),
            ),
            (
                pod(COMPONENT_FUNCTION, restarted(1, signalled)),
                Some((
                    CrashCause::Killed,
                    "its process was killed by signal 9; the kubelet starts it again",
                    None,
                )),
            ),
            // Never restarted: nothing ended on its own.
            (pod(COMPONENT_FUNCTION, restarted(0, oom.clone())), None),
            // A job's or a build's pod: a run's end, recorded with the run.
            (pod("job", restarted(1, oom.clone())), None),
            // Restarted, but no termination known.
            (
                pod(
                    COMPONENT_FUNCTION,
                    json!({"name": CONTAINER, "image": "x", "imageID": "", "ready": true, "restartCount": 1}),
                ),
                None,
            ),
        ];
        for (pod, want) in cases {
            let got = crash_of(&pod);
            let got_parts = got
                .as_ref()
                .map(|(c, _)| (c.cause, c.detail.as_str(), c.memory_mb));
            assert_eq!(got_parts, want, "{:?}", pod.status);
            if let Some((crash, finished)) = got {
                assert_eq!(crash.key.to_string(), "sless-0123456789abcdef/demo");
                assert_eq!(crash.version, 3);
                assert_eq!(finished.to_rfc3339(), "2026-12-06T10:00:00+00:00");
            }
        }
    }
}
