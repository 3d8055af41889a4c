//! The CronJob of a cron trigger: Kubernetes starts a Job at each tick of
//! the schedule, in the trigger's time zone, never two at once
//! (`concurrencyPolicy: Forbid`), and skips ticks it could not start within
//! `cron_starting_deadline_secs` (as the local scheduler does).
//!
//! Each run gets the event the local driver gives a cron run
//! (`crate::jobs::handler_event`), except that the CronJob cannot know the
//! tick it starts for: `scheduled_at` is null and `missed` is 0.

use std::collections::BTreeMap;

use k8s_openapi::api::batch::v1::{CronJob, CronJobSpec, JobTemplateSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sless_domain::{FunctionKey, Runtime};

use super::job::run_spec;
use super::pod::{ANNOTATION_EVENT, EventSource, FunctionPod, PodMode, hardened_pod_spec};
use super::{ANNOTATION_IMAGE, COMPONENT_CRON, LABEL_TRIGGER, meta, names, versioned_labels};
use crate::kube::KubeSettings;

/// How many finished Jobs (succeeded, and failed) a CronJob keeps.
pub const JOBS_HISTORY: i32 = 3;

/// A cron trigger, with what its function runs.
#[derive(Debug, Clone)]
pub struct CronSpec {
    /// The trigger's name.
    pub trigger: String,
    /// The function it runs.
    pub key: FunctionKey,
    /// A five-field cron expression.
    pub schedule: String,
    /// An IANA time zone, e.g. `Europe/Paris`.
    pub timezone: String,
    pub version: u32,
    pub runtime: Runtime,
    pub entrypoint: String,
    pub env_vars: BTreeMap<String, String>,
    pub memory_mb: u32,
    /// How long a run may take.
    pub timeout_sec: u32,
    /// The function's image (of `version`).
    pub image: String,
}

/// The event a run of the CronJob hands the function.
pub fn cron_event(spec: &CronSpec) -> serde_json::Value {
    let json = serde_json::json!({
        "source": "cron",
        "trigger": spec.trigger,
        "schedule": spec.schedule,
        "timezone": spec.timezone,
        "scheduled_at": null,
        "missed": 0,
    });
    serde_json::json!({
        "method": "CRON",
        "path": "/",
        "query": {},
        "headers": {},
        "body": json.to_string(),
        "json": json,
    })
}

/// The CronJob of `spec`, in the function's namespace, named
/// [`names::cronjob_name`]. The CronJob, its Jobs and their pods carry
/// `component=cron`, the trigger and the function's labels.
pub fn cron_job(settings: &KubeSettings, spec: &CronSpec) -> CronJob {
    let mut labels = versioned_labels(&spec.key, COMPONENT_CRON, spec.version);
    labels.insert(LABEL_TRIGGER.to_owned(), names::label_value(&spec.trigger));
    let annotations = BTreeMap::from([(ANNOTATION_IMAGE.to_owned(), spec.image.clone())]);
    // The same event every tick, nothing secret in it: the pod reads it
    // from its own annotation (the downward API), no object to keep.
    let mut pod_annotations = annotations.clone();
    pod_annotations.insert(ANNOTATION_EVENT.to_owned(), cron_event(spec).to_string());
    let pod = hardened_pod_spec(
        settings,
        &FunctionPod {
            key: &spec.key,
            version: spec.version,
            entrypoint: &spec.entrypoint,
            env_vars: &spec.env_vars,
            memory_mb: spec.memory_mb,
            image: &spec.image,
            mode: PodMode::Run {
                event: EventSource::Annotation,
            },
        },
    );
    CronJob {
        metadata: meta(
            names::cronjob_name(&spec.trigger),
            spec.key.namespace.as_str(),
            labels.clone(),
            annotations.clone(),
        ),
        spec: Some(CronJobSpec {
            schedule: spec.schedule.clone(),
            time_zone: Some(spec.timezone.clone()),
            concurrency_policy: Some("Forbid".to_owned()),
            starting_deadline_seconds: Some(settings.cron_starting_deadline_secs),
            successful_jobs_history_limit: Some(JOBS_HISTORY),
            failed_jobs_history_limit: Some(JOBS_HISTORY),
            suspend: Some(false),
            job_template: JobTemplateSpec {
                metadata: Some(ObjectMeta {
                    labels: Some(labels.clone()),
                    annotations: Some(annotations.clone()),
                    ..ObjectMeta::default()
                }),
                spec: Some(run_spec(
                    settings,
                    labels,
                    pod_annotations,
                    pod,
                    u64::from(spec.timeout_sec),
                )),
            },
        }),
        ..CronJob::default()
    }
}
