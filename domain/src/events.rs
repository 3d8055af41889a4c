//! Events: what happened, in the past tense. Stored as `{type, data}` in the
//! log; `data` is the JSON of the variant's fields. Event types are versioned
//! data: renaming a field needs an upcaster, never a rewrite of stored events.

use serde::{Deserialize, Serialize};

use crate::spec::{FunctionSpec, Runtime};

/// One uploaded version of a function's source, as the log records it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SourceVersion {
    pub version: u32,
    /// sha256 (hex) of the uploaded zip, byte for byte.
    pub sha256: String,
    /// Size of the zip in bytes.
    pub size: u64,
    /// Number of files in the archive.
    pub files: u32,
    /// S3 key of the zip (content-addressed).
    pub zip_key: String,
    /// sha256 (hex) of the build context.
    pub context_sha256: String,
    /// S3 key of the build context (tar.gz of the files plus a Dockerfile).
    pub context_key: String,
    /// The runtime the build context was packed for (absent in events
    /// recorded before it was kept).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub runtime: Option<Runtime>,
}

/// Everything that can happen to a function.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum FunctionEvent {
    /// Created, or created again after a delete (the stream goes on, and
    /// so do its version numbers).
    FunctionCreated {
        spec: FunctionSpec,
    },
    FunctionUploaded(SourceVersion),
    /// The user changed the spec; `spec` is the whole new spec. When the
    /// runtime changed, a `FunctionUploaded` of the same source rebuilt for
    /// the new runtime follows it in the same append.
    FunctionSpecChanged {
        spec: FunctionSpec,
    },
    /// The user deleted the function: what runs is removed, and the name
    /// is free to be created again.
    FunctionDeleted {},
    BuildStarted {
        version: u32,
    },
    BuildSucceeded {
        version: u32,
        artifact: String,
    },
    BuildFailed {
        version: u32,
        error: String,
        log_tail: String,
    },
    /// `version` serves at `endpoint`. Appended again, with the same
    /// version, whenever the instances that serve it change (scaled out
    /// or in, one replaced after a crash).
    FunctionDeployed {
        version: u32,
        endpoint: String,
        /// Where it runs, for a driver whose processes live on one worker
        /// (the local driver: that worker's id); `None` on a cluster.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        node: Option<String>,
        /// Each instance's own endpoint, when the proxy sends calls to the
        /// instances itself (the local driver's processes); empty when
        /// `endpoint` is the one address of all of them (a Service), or
        /// for events recorded before instances were counted.
        #[serde(default, skip_serializing_if = "Vec::is_empty")]
        instances: Vec<String>,
    },
    DeployFailed {
        version: u32,
        error: String,
        log_tail: String,
    },
    /// A user made an earlier version current again: it is built (or its
    /// build reused) and deployed like a new upload, without a new number.
    FunctionRolledBack {
        version: u32,
    },
    /// Versions dropped by retention: no longer listed or deployable. Their
    /// blobs are deleted after this event commits, unless another version
    /// (of any function) still uses them.
    VersionsPruned {
        versions: Vec<u32>,
    },
    /// What ran was stopped because the function has http triggers and
    /// none of them is enabled (scaled to zero). Enabling one deploys the
    /// current version again (its build is kept).
    FunctionStopped {
        version: u32,
        reason: String,
    },
    /// No call reached the function for its idle window
    /// (`scale_to_zero_after_sec`): what runs is stopped, and the next call
    /// starts it again (`FunctionScaledUp`). Its phase stays `Ready`;
    /// `version` is the version that serves again when called.
    FunctionScaledToZero {
        version: u32,
        reason: String,
    },
    /// A call reached a function scaled to zero: an instance is started
    /// (the reconciler deploys `deployed_version` again).
    FunctionScaledUp {
        reason: String,
    },
    /// The autoscaler changed how many instances serve, from `from` to
    /// `to` (never to zero: that is `FunctionScaledToZero`), because it
    /// measured `observed` calls in flight, summed over every API process,
    /// on average over its `window`.
    FunctionScaled {
        from: u32,
        to: u32,
        observed: InFlight,
        window: ScaleWindow,
        /// For people: e.g. "31.8 calls in flight over the last 6 s; 70%
        /// of concurrency 1 per instance is 0.7".
        reason: String,
    },
    /// The work queue gave up on the function after its retries ran out.
    ReconcileAbandoned {
        attempts: i32,
        error: String,
    },
    /// The deploy of `failed_version` failed (the `DeployFailed` appended
    /// with this event) and what served before it serves on:
    /// `restored_version` (the same number when only the spec changed).
    /// The Kubernetes driver put the Deployment back to it; the local
    /// driver never stopped its process.
    DeployRolledBack {
        failed_version: u32,
        restored_version: u32,
    },
    /// The process of a deployed version ended without being asked to
    /// (killed by the kernel for passing its `memory_mb`, or it exited or
    /// was killed by a signal); its driver starts it again.
    FunctionCrashed {
        version: u32,
        cause: CrashCause,
        /// For people: what happened, e.g. "killed for using more memory
        /// than its memory_mb of 128; started again".
        detail: String,
        /// The memory limit it passed, for an `oom`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        memory_mb: Option<u32>,
    },
}

/// Calls in flight, on average over a window (a fraction: 0.5 is one call
/// in flight half of the time).
#[derive(Debug, Clone, Copy, PartialEq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct InFlight(pub f64);

// The values are measurements read back from the log as they were
// written, never NaN.
impl Eq for InFlight {}

/// The window an autoscaling decision averaged over.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ScaleWindow {
    /// The long window: it scales out and in with the load.
    Stable,
    /// The short window: a burst passed twice the capacity that serves,
    /// and nothing scales in until it has been quiet for a stable window.
    Panic,
}

impl ScaleWindow {
    pub fn as_str(self) -> &'static str {
        match self {
            ScaleWindow::Stable => "stable",
            ScaleWindow::Panic => "panic",
        }
    }
}

/// Why a function's process ended on its own.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum CrashCause {
    /// Killed by the kernel for using more memory than its `memory_mb`.
    Oom,
    /// It exited.
    Exited,
    /// A signal ended it.
    Killed,
}

impl CrashCause {
    /// The name stored in the log and in invocation records.
    pub fn as_str(self) -> &'static str {
        match self {
            CrashCause::Oom => "oom",
            CrashCause::Exited => "exited",
            CrashCause::Killed => "killed",
        }
    }
}

impl FunctionEvent {
    /// The type name stored in the log's `type` column.
    pub fn type_name(&self) -> &'static str {
        match self {
            FunctionEvent::FunctionCreated { .. } => "FunctionCreated",
            FunctionEvent::FunctionUploaded(_) => "FunctionUploaded",
            FunctionEvent::FunctionSpecChanged { .. } => "FunctionSpecChanged",
            FunctionEvent::FunctionDeleted {} => "FunctionDeleted",
            FunctionEvent::BuildStarted { .. } => "BuildStarted",
            FunctionEvent::BuildSucceeded { .. } => "BuildSucceeded",
            FunctionEvent::BuildFailed { .. } => "BuildFailed",
            FunctionEvent::FunctionDeployed { .. } => "FunctionDeployed",
            FunctionEvent::DeployFailed { .. } => "DeployFailed",
            FunctionEvent::ReconcileAbandoned { .. } => "ReconcileAbandoned",
            FunctionEvent::FunctionRolledBack { .. } => "FunctionRolledBack",
            FunctionEvent::VersionsPruned { .. } => "VersionsPruned",
            FunctionEvent::FunctionStopped { .. } => "FunctionStopped",
            FunctionEvent::FunctionScaledToZero { .. } => "FunctionScaledToZero",
            FunctionEvent::FunctionScaledUp { .. } => "FunctionScaledUp",
            FunctionEvent::FunctionScaled { .. } => "FunctionScaled",
            FunctionEvent::DeployRolledBack { .. } => "DeployRolledBack",
            FunctionEvent::FunctionCrashed { .. } => "FunctionCrashed",
        }
    }

    /// The `data` column: the variant's fields as JSON.
    pub fn data(&self) -> serde_json::Value {
        data_of(self)
    }

    /// Rebuilds an event from the log's `type` and `data` columns.
    pub fn from_stored(
        type_name: &str,
        data: &serde_json::Value,
    ) -> Result<Self, serde_json::Error> {
        from_type_and_data(type_name, data)
    }
}

/// The `data` column of an event enum tagged `type` with content `data`.
pub(crate) fn data_of(event: &impl Serialize) -> serde_json::Value {
    let mut v = serde_json::to_value(event).expect("events serialize");
    v.get_mut("data")
        .map(serde_json::Value::take)
        .unwrap_or(serde_json::Value::Object(Default::default()))
}

/// An event enum tagged `type` with content `data`, from the log's columns.
pub(crate) fn from_type_and_data<E: serde::de::DeserializeOwned>(
    type_name: &str,
    data: &serde_json::Value,
) -> Result<E, serde_json::Error> {
    serde_json::from_value(serde_json::json!({ "type": type_name, "data": data }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn events_round_trip_through_type_and_data() {
        let events = vec![
            FunctionEvent::FunctionCreated {
                spec: FunctionSpec {
                    runtime: Runtime::Python311,
                    entrypoint: "handler.handle".into(),
                    memory_mb: 128,
                    timeout_sec: 30,
                    env_vars: [("K".to_string(), "v".to_string())].into(),
                    scale_to_zero_after_sec: None,
                    scaling: Default::default(),
                },
            },
            FunctionEvent::FunctionUploaded(SourceVersion {
                version: 1,
                sha256: "ab".into(),
                size: 10,
                files: 1,
                zip_key: "z".into(),
                context_sha256: "cd".into(),
                context_key: "c".into(),
                runtime: Some(Runtime::Python311),
            }),
            FunctionEvent::FunctionRolledBack { version: 1 },
            FunctionEvent::FunctionStopped {
                version: 1,
                reason: "disabled".into(),
            },
            FunctionEvent::VersionsPruned {
                versions: vec![1, 2],
            },
            FunctionEvent::FunctionScaledToZero {
                version: 1,
                reason: "no call for 300 s".into(),
            },
            FunctionEvent::FunctionScaledUp {
                reason: "a call".into(),
            },
            FunctionEvent::BuildStarted { version: 1 },
            FunctionEvent::FunctionDeployed {
                version: 1,
                endpoint: "http://x".into(),
                node: None,
                instances: vec!["http://x".into(), "http://y".into()],
            },
            FunctionEvent::FunctionScaled {
                from: 1,
                to: 4,
                observed: InFlight(2.75),
                window: ScaleWindow::Panic,
                reason: "a burst".into(),
            },
            FunctionEvent::FunctionSpecChanged {
                spec: FunctionSpec {
                    runtime: Runtime::Nodejs20,
                    entrypoint: "index.handler".into(),
                    memory_mb: 256,
                    timeout_sec: 10,
                    env_vars: Default::default(),
                    scale_to_zero_after_sec: None,
                    scaling: Default::default(),
                },
            },
            FunctionEvent::FunctionDeleted {},
            FunctionEvent::DeployRolledBack {
                failed_version: 2,
                restored_version: 1,
            },
            FunctionEvent::FunctionCrashed {
                version: 3,
                cause: CrashCause::Oom,
                detail: "killed for memory".into(),
                memory_mb: Some(128),
            },
        ];
        for e in events {
            let back = FunctionEvent::from_stored(e.type_name(), &e.data()).unwrap();
            assert_eq!(back, e);
        }
    }

    #[test]
    fn a_deletion_is_stored_with_empty_data() {
        let e = FunctionEvent::FunctionDeleted {};
        assert_eq!(e.data(), serde_json::json!({}));
        assert_eq!(
            FunctionEvent::from_stored("FunctionDeleted", &serde_json::json!({})).unwrap(),
            e
        );
    }
}
