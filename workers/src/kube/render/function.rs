//! A served function: a Deployment of hardened pods and the Service the
//! invoke proxy reaches it through ([`names::endpoint`]).
//!
//! The Deployment's selector is the function's (namespace, name and
//! `component=function`), never its version: a selector cannot change, and
//! a new version rolls out under the same one. A rollout brings a new pod up
//! and ready before an old one goes (`maxUnavailable: 0`, `maxSurge: 1`),
//! and fails after `rollout_timeout_secs` without progress.

use std::collections::BTreeMap;

use k8s_openapi::api::apps::v1::{
    Deployment, DeploymentSpec, DeploymentStrategy, RollingUpdateDeployment,
};
use k8s_openapi::api::core::v1::{PodTemplateSpec, Service, ServicePort, ServiceSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, ObjectMeta};
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sless_domain::FunctionKey;

use super::pod::{FunctionPod, PodMode, hardened_pod_spec};
use super::{
    ANNOTATION_IMAGE, ANNOTATION_TEMPLATE, COMPONENT_FUNCTION, function_labels, meta, names,
    serving_selector, versioned_labels,
};
use crate::driver::DeployRequest;
use crate::kube::KubeSettings;

/// How many old ReplicaSets a Deployment keeps (for `kubectl rollout undo`;
/// sless rolls back by deploying an older version).
pub const REVISION_HISTORY: i32 = 3;

/// The Deployment running `req` from `image` with `replicas` pods (0 while
/// the function's HTTP trigger is disabled).
pub fn deployment(
    settings: &KubeSettings,
    req: &DeployRequest,
    image: &str,
    replicas: i32,
) -> Deployment {
    let labels = versioned_labels(&req.key, COMPONENT_FUNCTION, req.version);
    let annotations = BTreeMap::from([(ANNOTATION_IMAGE.to_owned(), image.to_owned())]);
    let pod = hardened_pod_spec(
        settings,
        &FunctionPod {
            key: &req.key,
            version: req.version,
            entrypoint: &req.entrypoint,
            env_vars: &req.env_vars,
            memory_mb: req.memory_mb,
            image,
            mode: PodMode::Serve,
        },
    );
    let template = PodTemplateSpec {
        metadata: Some(ObjectMeta {
            labels: Some(labels.clone()),
            annotations: Some(annotations.clone()),
            ..ObjectMeta::default()
        }),
        spec: Some(pod),
    };
    let mut deployment_annotations = annotations;
    deployment_annotations.insert(ANNOTATION_TEMPLATE.to_owned(), template_hash(&template));
    Deployment {
        metadata: meta(
            names::function_name(&req.key),
            req.key.namespace.as_str(),
            labels,
            deployment_annotations,
        ),
        spec: Some(DeploymentSpec {
            replicas: Some(replicas),
            selector: LabelSelector {
                match_labels: Some(serving_selector(&req.key)),
                match_expressions: None,
            },
            template,
            strategy: Some(DeploymentStrategy {
                type_: Some("RollingUpdate".to_owned()),
                rolling_update: Some(RollingUpdateDeployment {
                    max_unavailable: Some(IntOrString::Int(0)),
                    max_surge: Some(IntOrString::Int(1)),
                }),
            }),
            progress_deadline_seconds: Some(
                i32::try_from(settings.rollout_timeout_secs).unwrap_or(i32::MAX),
            ),
            revision_history_limit: Some(REVISION_HISTORY),
            ..DeploymentSpec::default()
        }),
        ..Deployment::default()
    }
}

/// A hash of a pod template as sless renders it (its JSON), in hex: the
/// same template gives the same hash in every worker of one build.
fn template_hash(template: &PodTemplateSpec) -> String {
    use std::hash::{Hash, Hasher};
    let json = serde_json::to_string(template).expect("a pod template is JSON");
    let mut hasher = std::hash::DefaultHasher::new();
    json.hash(&mut hasher);
    format!("{:016x}", hasher.finish())
}

/// The ClusterIP Service of a served function: `function_port` to the
/// pods' `function_port`.
pub fn service(settings: &KubeSettings, key: &FunctionKey) -> Service {
    Service {
        metadata: meta(
            names::function_name(key),
            key.namespace.as_str(),
            function_labels(key, COMPONENT_FUNCTION),
            BTreeMap::new(),
        ),
        spec: Some(ServiceSpec {
            type_: Some("ClusterIP".to_owned()),
            selector: Some(serving_selector(key)),
            ports: Some(vec![ServicePort {
                name: Some("http".to_owned()),
                protocol: Some("TCP".to_owned()),
                port: i32::from(settings.function_port),
                target_port: Some(IntOrString::Int(i32::from(settings.function_port))),
                ..ServicePort::default()
            }]),
            ..ServiceSpec::default()
        }),
        ..Service::default()
    }
}
