//! The pod every piece of a user's code runs in, served or run once:
//! Pod Security `restricted` and then some, since the code is untrusted.
//!
//! - runs as user and group 10001, never root, under the RuntimeDefault
//!   seccomp profile, with no privilege escalation and no capability;
//! - a read-only root filesystem; the only writable place is `/tmp`, an
//!   emptyDir of `tmp_mb` MiB (`HOME` points there); a run (a Job's pod)
//!   also has its event as a file, mounted read-only (see [`EventSource`]);
//! - no service account token and no Service environment variables: the
//!   code learns nothing about the cluster it runs in;
//! - requests and limits for cpu (settings), memory (`memory_mb`, request =
//!   limit) and ephemeral storage (`/tmp` plus room for the logs).
//!
//! The environment: ours first (`HOME`, `PYTHONDONTWRITEBYTECODE`, the
//! `SLESS_*` variables of the runtime contract), then the function's
//! `env_vars`. Ours win: a user variable with the name of one of ours, or
//! any `SLESS_` name (reserved; the API refuses them), is left out, so the
//! list never names a variable twice (server-side apply refuses that).
//! Every value is escaped with [`escape_env`].

use std::collections::{BTreeMap, BTreeSet};

use k8s_openapi::api::core::v1::{
    Capabilities, Container, ContainerPort, DownwardAPIVolumeFile, DownwardAPIVolumeSource,
    EmptyDirVolumeSource, EnvVar, HTTPGetAction, KeyToPath, LocalObjectReference,
    ObjectFieldSelector, PodSecurityContext, PodSpec, Probe, ResourceRequirements, SeccompProfile,
    SecretVolumeSource, SecurityContext, Volume, VolumeMount,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sless_domain::FunctionKey;

use super::{escape_env, mebibytes, quantities};
use crate::kube::KubeSettings;

/// The user and group function code runs as.
pub const RUN_AS: i64 = 10001;
/// The name of the function's container.
pub const CONTAINER: &str = "function";
/// The writable scratch directory.
pub const TMP_DIR: &str = "/tmp";
/// The runtime wrapper's health path: readiness and liveness.
pub const HEALTH_PATH: &str = "/__sless/health";
/// The name of the image pull Secret `ensure` copies into a tenant
/// namespace when `registry_pull_secret` is set.
pub const PULL_SECRET_NAME: &str = "sless-pull";
/// Ephemeral storage a container gets beyond its `/tmp`: its logs (the
/// kubelet keeps up to 5 × 10 MiB) and what the runtime writes elsewhere.
pub const LOG_ROOM_MB: u32 = 64;

/// The directory a run's event is mounted in, read-only.
pub const EVENT_DIR: &str = "/var/run/secrets/sless.dev/job";
/// The event's file in [`EVENT_DIR`], and its key in a run's Secret.
pub const EVENT_FILE: &str = "event.json";
/// The annotation of a CronJob's pods holding their event.
pub const ANNOTATION_EVENT: &str = "sless.dev/event";
/// The volume of the event.
const EVENT_VOLUME: &str = "event";

/// `{EVENT_DIR}/{EVENT_FILE}`: what `SLESS_JOB_EVENT_FILE` names.
pub fn event_path() -> String {
    format!("{EVENT_DIR}/{EVENT_FILE}")
}

/// How the pod runs the function.
#[derive(Debug, Clone, Copy)]
pub enum PodMode<'a> {
    /// Serves HTTP on the function port until stopped (a Deployment's pod).
    Serve,
    /// Runs once and exits (a Job's pod): `SLESS_JOB=1`, and the event as
    /// JSON in the file `SLESS_JOB_EVENT_FILE` names ([`event_path`]),
    /// mounted read-only from `event`. A file, not a variable: a job's
    /// input may be 64 KiB, and its event twice that.
    Run { event: EventSource<'a> },
}

/// Where a run's event file comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventSource<'a> {
    /// The key [`EVENT_FILE`] of this Secret: a user's job, whose input may
    /// hold secrets, gets a Secret of its own, owned by its Job.
    Secret(&'a str),
    /// The pod's annotation [`ANNOTATION_EVENT`], through the downward
    /// API: a CronJob's runs, which all get the same event, with nothing
    /// secret in it.
    Annotation,
}

/// What a function's pod runs.
#[derive(Debug, Clone, Copy)]
pub struct FunctionPod<'a> {
    pub key: &'a FunctionKey,
    pub version: u32,
    pub entrypoint: &'a str,
    pub env_vars: &'a BTreeMap<String, String>,
    pub memory_mb: u32,
    pub image: &'a str,
    pub mode: PodMode<'a>,
}

/// The hardened pod spec of a function, served or run once (see the
/// module's documentation for what it holds).
pub fn hardened_pod_spec(settings: &KubeSettings, pod: &FunctionPod<'_>) -> PodSpec {
    let serve = matches!(pod.mode, PodMode::Serve);
    let mut mounts = vec![VolumeMount {
        name: "tmp".to_owned(),
        mount_path: TMP_DIR.to_owned(),
        ..VolumeMount::default()
    }];
    let mut volumes = vec![Volume {
        name: "tmp".to_owned(),
        empty_dir: Some(EmptyDirVolumeSource {
            medium: None,
            size_limit: Some(mebibytes(settings.tmp_mb)),
        }),
        ..Volume::default()
    }];
    if let PodMode::Run { event } = pod.mode {
        mounts.push(VolumeMount {
            name: EVENT_VOLUME.to_owned(),
            mount_path: EVENT_DIR.to_owned(),
            read_only: Some(true),
            ..VolumeMount::default()
        });
        volumes.push(event_volume(event));
    }
    let container = Container {
        name: CONTAINER.to_owned(),
        image: Some(pod.image.to_owned()),
        image_pull_policy: Some("IfNotPresent".to_owned()),
        env: Some(env(settings, pod)),
        resources: Some(resources(settings, pod.memory_mb)),
        security_context: Some(container_security()),
        volume_mounts: Some(mounts),
        ports: serve.then(|| {
            vec![ContainerPort {
                name: Some("http".to_owned()),
                container_port: i32::from(settings.function_port),
                protocol: Some("TCP".to_owned()),
                ..ContainerPort::default()
            }]
        }),
        // Ready once the entrypoint is loaded; restarted only when it has
        // stopped answering for a minute; given a minute to start.
        readiness_probe: serve.then(|| health_probe(settings, 5, 3)),
        liveness_probe: serve.then(|| health_probe(settings, 10, 6)),
        startup_probe: serve.then(|| health_probe(settings, 2, 30)),
        termination_message_policy: Some("FallbackToLogsOnError".to_owned()),
        ..Container::default()
    };
    PodSpec {
        containers: vec![container],
        restart_policy: Some(if serve { "Always" } else { "Never" }.to_owned()),
        automount_service_account_token: Some(false),
        enable_service_links: Some(false),
        security_context: Some(PodSecurityContext {
            run_as_non_root: Some(true),
            run_as_user: Some(RUN_AS),
            run_as_group: Some(RUN_AS),
            fs_group: Some(RUN_AS),
            seccomp_profile: Some(runtime_default_seccomp()),
            ..PodSecurityContext::default()
        }),
        volumes: Some(volumes),
        image_pull_secrets: pull_secrets(settings),
        ..PodSpec::default()
    }
}

/// The volume holding a run's event as [`EVENT_FILE`], read-only and
/// readable by the function's user (the pod runs nothing else).
fn event_volume(source: EventSource<'_>) -> Volume {
    let mode = Some(0o444);
    match source {
        EventSource::Secret(name) => Volume {
            name: EVENT_VOLUME.to_owned(),
            secret: Some(SecretVolumeSource {
                secret_name: Some(name.to_owned()),
                items: Some(vec![KeyToPath {
                    key: EVENT_FILE.to_owned(),
                    path: EVENT_FILE.to_owned(),
                    mode: None,
                }]),
                default_mode: mode,
                optional: Some(false),
            }),
            ..Volume::default()
        },
        EventSource::Annotation => Volume {
            name: EVENT_VOLUME.to_owned(),
            downward_api: Some(DownwardAPIVolumeSource {
                items: Some(vec![DownwardAPIVolumeFile {
                    path: EVENT_FILE.to_owned(),
                    field_ref: Some(ObjectFieldSelector {
                        api_version: None,
                        field_path: format!("metadata.annotations['{ANNOTATION_EVENT}']"),
                    }),
                    mode: None,
                    resource_field_ref: None,
                }]),
                default_mode: mode,
            }),
            ..Volume::default()
        },
    }
}

/// The image pull Secrets of a tenant pod: [`PULL_SECRET_NAME`] when the
/// registry needs one.
pub fn pull_secrets(settings: &KubeSettings) -> Option<Vec<LocalObjectReference>> {
    settings.registry_pull_secret.as_ref().map(|_| {
        vec![LocalObjectReference {
            name: PULL_SECRET_NAME.to_owned(),
        }]
    })
}

/// `RuntimeDefault`.
pub(super) fn runtime_default_seccomp() -> SeccompProfile {
    SeccompProfile {
        type_: "RuntimeDefault".to_owned(),
        localhost_profile: None,
    }
}

fn container_security() -> SecurityContext {
    SecurityContext {
        allow_privilege_escalation: Some(false),
        privileged: Some(false),
        capabilities: Some(Capabilities {
            add: None,
            drop: Some(vec!["ALL".to_owned()]),
        }),
        read_only_root_filesystem: Some(true),
        run_as_non_root: Some(true),
        ..SecurityContext::default()
    }
}

/// The ephemeral storage of a function container, in MiB.
pub fn ephemeral_mb(settings: &KubeSettings) -> u32 {
    settings.tmp_mb + LOG_ROOM_MB
}

fn resources(settings: &KubeSettings, memory_mb: u32) -> ResourceRequirements {
    let storage = || mebibytes(ephemeral_mb(settings));
    ResourceRequirements {
        requests: Some(quantities([
            ("cpu", Quantity(settings.cpu_request.clone())),
            ("memory", mebibytes(memory_mb)),
            ("ephemeral-storage", storage()),
        ])),
        limits: Some(quantities([
            ("cpu", Quantity(settings.cpu_limit.clone())),
            ("memory", mebibytes(memory_mb)),
            ("ephemeral-storage", storage()),
        ])),
        claims: None,
    }
}

fn health_probe(settings: &KubeSettings, period: i32, failures: i32) -> Probe {
    Probe {
        http_get: Some(HTTPGetAction {
            path: Some(HEALTH_PATH.to_owned()),
            port: IntOrString::Int(i32::from(settings.function_port)),
            scheme: Some("HTTP".to_owned()),
            ..HTTPGetAction::default()
        }),
        period_seconds: Some(period),
        timeout_seconds: Some(2),
        failure_threshold: Some(failures),
        success_threshold: Some(1),
        ..Probe::default()
    }
}

/// The container's environment, in order: ours, then the user's.
fn env(settings: &KubeSettings, pod: &FunctionPod<'_>) -> Vec<EnvVar> {
    let mut ours: Vec<(&str, String)> = vec![
        ("HOME", TMP_DIR.to_owned()),
        ("PYTHONDONTWRITEBYTECODE", "1".to_owned()),
        ("SLESS_ENTRYPOINT", pod.entrypoint.to_owned()),
        ("SLESS_FUNCTION", pod.key.to_string()),
        ("SLESS_VERSION", pod.version.to_string()),
    ];
    match pod.mode {
        PodMode::Serve => ours.extend([
            ("SLESS_PORT", settings.function_port.to_string()),
            ("SLESS_HOST", "0.0.0.0".to_owned()),
        ]),
        PodMode::Run { .. } => ours.extend([
            ("SLESS_JOB", "1".to_owned()),
            ("SLESS_JOB_EVENT_FILE", event_path()),
        ]),
    }
    let taken: BTreeSet<&str> = ours.iter().map(|(name, _)| *name).collect();
    let users = pod
        .env_vars
        .iter()
        .filter(|(name, _)| !taken.contains(name.as_str()) && !name.starts_with("SLESS_"))
        .map(|(name, value)| (name.as_str(), value.clone()));
    ours.into_iter()
        .chain(users)
        .map(|(name, value)| EnvVar {
            name: name.to_owned(),
            value: Some(escape_env(&value)),
            value_from: None,
        })
        .collect()
}
