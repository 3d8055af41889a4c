//! The Kubernetes objects of the driver, rendered from requests and
//! settings. Pure: nothing here talks to a cluster, so every object can be
//! checked in unit tests (see `tests/`) against the hardening list.
//!
//! Every object carries `app.kubernetes.io/managed-by: sless` and our own
//! `sless.dev/*` labels; the driver selects by those, never by the labels
//! Kubernetes adds itself (`job-name`, `controller-uid`). Objects are meant
//! to be applied server-side with [`FIELD_MANAGER`].
//!
//! - [`names`]: object names, images (pushed by tag, run by digest) and
//!   the endpoint of a function;
//! - [`namespace`]: what a tenant namespace holds before any function runs;
//! - [`build`]: the kaniko Job (and its Secret) that builds an image;
//! - [`function`]: the Deployment and Service of a served function;
//! - [`cron`]: the CronJob of a cron trigger;
//! - [`job`]: the Job of one run, and the Secret of its event;
//! - [`pod`]: the hardened pod all of a function's code runs in.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sless_domain::FunctionKey;

pub mod build;
pub mod cron;
pub mod function;
pub mod job;
pub mod names;
pub mod namespace;
pub mod pod;

#[cfg(test)]
mod tests;

pub use build::{build_job, build_secret};
pub use cron::{CronSpec, cron_job};
pub use function::{deployment, service};
pub use job::{run_event_secret, run_job};
pub use names::{
    build_job_name, cluster_ip_endpoint, cronjob_name, endpoint, function_name, image,
    pinned_image, repository, run_job_name, runtime_image,
};
pub use namespace::{TenantObjects, tenant_objects};
pub use pod::{EventSource, FunctionPod, PodMode, hardened_pod_spec};

/// The field manager of every server-side apply of ours.
pub const FIELD_MANAGER: &str = "sless";

/// The tenant namespace an object belongs to (on build objects, which live
/// in the build namespace, the namespace of the function being built).
pub const LABEL_NAMESPACE: &str = "sless.dev/namespace";
/// The function's name.
pub const LABEL_FUNCTION: &str = "sless.dev/function";
/// The version of the function an object runs or builds.
pub const LABEL_VERSION: &str = "sless.dev/version";
/// The name of a user's one-shot job.
pub const LABEL_JOB: &str = "sless.dev/job";
/// The name of a cron trigger.
pub const LABEL_TRIGGER: &str = "sless.dev/trigger";
/// A build: `v{version}-{sha8}`.
pub const LABEL_BUILD: &str = "sless.dev/build";
/// One run (a Job of ours): its name, so its pod is found without the
/// `job-name` label Kubernetes adds.
pub const LABEL_RUN: &str = "sless.dev/run";
/// What an object is for: one of the `COMPONENT_*` values.
pub const LABEL_COMPONENT: &str = "sless.dev/component";
/// `app.kubernetes.io/managed-by`, always [`MANAGED_BY`].
pub const LABEL_MANAGED_BY: &str = "app.kubernetes.io/managed-by";
pub const MANAGED_BY: &str = "sless";

/// A served function (Deployment, Service, their pods).
pub const COMPONENT_FUNCTION: &str = "function";
/// A kaniko build.
pub const COMPONENT_BUILD: &str = "build";
/// A run of a function to completion, asked for by a user or a cron tick
/// sless scheduled itself.
pub const COMPONENT_JOB: &str = "job";
/// A cron trigger's CronJob and what it starts.
pub const COMPONENT_CRON: &str = "cron";

/// The annotation holding the image an object runs (or a build pushes).
pub const ANNOTATION_IMAGE: &str = "sless.dev/image";

/// The annotation of a function's Deployment that names its pod template
/// as rendered (a hash of it): a deploy whose template has the same one
/// changes only the count, through the scale subresource.
pub const ANNOTATION_TEMPLATE: &str = "sless.dev/template";

/// Escapes an env value for Kubernetes, which expands `$(VAR)` in `value`
/// and turns `$$` into `$`: every `$` is doubled, so the container sees the
/// value exactly as given. Every value that comes from a user goes through
/// this.
pub fn escape_env(value: &str) -> String {
    value.replace('$', "$$")
}

/// The labels every object of a function has: namespace, function, what it
/// is for, and managed-by.
pub fn function_labels(key: &FunctionKey, component: &str) -> BTreeMap<String, String> {
    BTreeMap::from([
        (
            LABEL_NAMESPACE.to_owned(),
            names::label_value(key.namespace.as_str()),
        ),
        (
            LABEL_FUNCTION.to_owned(),
            names::label_value(key.name.as_str()),
        ),
        (LABEL_COMPONENT.to_owned(), component.to_owned()),
        (LABEL_MANAGED_BY.to_owned(), MANAGED_BY.to_owned()),
    ])
}

/// [`function_labels`] plus the version.
pub fn versioned_labels(
    key: &FunctionKey,
    component: &str,
    version: u32,
) -> BTreeMap<String, String> {
    let mut labels = function_labels(key, component);
    labels.insert(LABEL_VERSION.to_owned(), version.to_string());
    labels
}

/// What selects a served function's pods (Deployment and Service): its
/// namespace and name, and `component=function` so the pods of its jobs and
/// cron runs, which carry the same function labels, never receive traffic.
/// Never the version: a Deployment's selector cannot change.
pub fn serving_selector(key: &FunctionKey) -> BTreeMap<String, String> {
    let mut labels = function_labels(key, COMPONENT_FUNCTION);
    labels.remove(LABEL_MANAGED_BY);
    labels
}

/// Metadata of a namespaced object.
fn meta(
    name: String,
    namespace: &str,
    labels: BTreeMap<String, String>,
    annotations: BTreeMap<String, String>,
) -> ObjectMeta {
    ObjectMeta {
        name: Some(name),
        namespace: Some(namespace.to_owned()),
        labels: Some(labels),
        annotations: (!annotations.is_empty()).then_some(annotations),
        ..ObjectMeta::default()
    }
}

/// `{mb}Mi`.
fn mebibytes(mb: u32) -> Quantity {
    Quantity(format!("{mb}Mi"))
}

/// A map of quantities from string pairs.
fn quantities<const N: usize>(pairs: [(&str, Quantity); N]) -> BTreeMap<String, Quantity> {
    pairs.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
}
