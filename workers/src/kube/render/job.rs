//! The Job of one run of a function: a user's job (`job/{ns}/{name}`) or a
//! cron tick sless runs itself (`cron/{ns}/{trigger}/{unix}`).
//!
//! The pod runs the function's image in job mode (`SLESS_JOB=1`), once: no
//! retry (`backoffLimit: 0`), stopped after the run's timeout, kept
//! `finished_ttl_secs` for its log to be read. Its event is a file
//! (`SLESS_JOB_EVENT_FILE`) from a Secret of the run's own
//! ([`run_event_secret`]): a job's input may hold the user's secrets, and
//! is too large for a variable. Its pod is found by `sless.dev/run`, never
//! by the `job-name` label Kubernetes adds.

use std::collections::BTreeMap;

use k8s_openapi::ByteString;
use k8s_openapi::api::batch::v1::{Job, JobSpec};
use k8s_openapi::api::core::v1::{PodSpec, PodTemplateSpec, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, OwnerReference};

use super::build::ttl;
use super::names::{self, RunId};
use super::pod::{EVENT_FILE, EventSource, FunctionPod, PodMode, hardened_pod_spec};
use super::{
    ANNOTATION_IMAGE, COMPONENT_JOB, LABEL_JOB, LABEL_RUN, LABEL_TRIGGER, meta, versioned_labels,
};
use crate::driver::JobRequest;
use crate::kube::KubeSettings;

/// The labels of a run's Job, its pod and its event Secret.
fn run_labels(req: &JobRequest) -> BTreeMap<String, String> {
    let name = names::run_job_name(&req.run);
    let mut labels = versioned_labels(&req.key, COMPONENT_JOB, req.version);
    match RunId::parse(&req.run) {
        RunId::Job { name } => {
            labels.insert(LABEL_JOB.to_owned(), names::label_value(name));
        }
        RunId::Cron { trigger, .. } => {
            labels.insert(LABEL_TRIGGER.to_owned(), names::label_value(trigger));
        }
        RunId::Other => {}
    }
    labels.insert(LABEL_RUN.to_owned(), names::label_value(&name));
    labels
}

/// The Job running `req` from `image`, in the function's namespace, its
/// event read from the Secret `event_secret` ([`run_event_secret`]).
pub fn run_job(settings: &KubeSettings, req: &JobRequest, image: &str, event_secret: &str) -> Job {
    let name = names::run_job_name(&req.run);
    let labels = run_labels(req);
    let pod = hardened_pod_spec(
        settings,
        &FunctionPod {
            key: &req.key,
            version: req.version,
            entrypoint: &req.entrypoint,
            env_vars: &req.env_vars,
            memory_mb: req.memory_mb,
            image,
            mode: PodMode::Run {
                event: EventSource::Secret(event_secret),
            },
        },
    );
    let timeout = req.timeout.as_secs() + u64::from(req.timeout.subsec_nanos() > 0);
    let annotations = BTreeMap::from([(ANNOTATION_IMAGE.to_owned(), image.to_owned())]);
    Job {
        metadata: meta(
            name,
            req.key.namespace.as_str(),
            labels.clone(),
            annotations.clone(),
        ),
        spec: Some(run_spec(settings, labels, annotations, pod, timeout)),
        ..Job::default()
    }
}

/// The Secret `name` holding the event of `req` as [`EVENT_FILE`], owned
/// by its Job (`job`, as the cluster created it), so the cluster deletes
/// it with the Job. Immutable: nothing changes a run's event, and the
/// kubelet need not watch it.
pub fn run_event_secret(name: &str, req: &JobRequest, job: &Job) -> Secret {
    let mut metadata = meta(
        name.to_owned(),
        req.key.namespace.as_str(),
        run_labels(req),
        BTreeMap::new(),
    );
    metadata.owner_references = Some(vec![OwnerReference {
        api_version: "batch/v1".to_owned(),
        kind: "Job".to_owned(),
        name: job.metadata.name.clone().unwrap_or_default(),
        uid: job.metadata.uid.clone().unwrap_or_default(),
        ..OwnerReference::default()
    }]);
    let event = serde_json::to_vec(&req.event).expect("JSON values serialize");
    Secret {
        metadata,
        type_: Some("Opaque".to_owned()),
        data: Some(BTreeMap::from([(EVENT_FILE.to_owned(), ByteString(event))])),
        immutable: Some(true),
        ..Secret::default()
    }
}

/// The spec of a Job that runs a function once: no retry, stopped after
/// `timeout_secs` (at least 1), its pod labelled with `labels` and
/// annotated with `annotations`.
pub(super) fn run_spec(
    settings: &KubeSettings,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
    pod: PodSpec,
    timeout_secs: u64,
) -> JobSpec {
    JobSpec {
        backoff_limit: Some(0),
        active_deadline_seconds: Some(i64::try_from(timeout_secs.max(1)).unwrap_or(i64::MAX)),
        ttl_seconds_after_finished: Some(ttl(settings)),
        template: PodTemplateSpec {
            metadata: Some(ObjectMeta {
                labels: Some(labels),
                annotations: Some(annotations),
                ..ObjectMeta::default()
            }),
            spec: Some(pod),
        },
        ..JobSpec::default()
    }
}
