//! Tests of the rendered objects: fixtures, and the hardening list as a
//! check every pod-bearing object goes through.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, PodSpec};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use sless_domain::{FunctionKey, FunctionName, Namespace, Runtime};

use super::pod::{CONTAINER, RUN_AS, ephemeral_mb};
use crate::driver::{Artifact, BuildRequest, DeployRequest, JobRequest};
use crate::kube::KubeSettings;

mod names;
mod objects;
mod tenant;

/// A user value Kubernetes would expand if it were not escaped.
const DOLLAR_VALUE: &str = "a$(B)";

fn settings() -> KubeSettings {
    KubeSettings::new("registry.example.com/sless/")
}

fn key(ns: &str, name: &str) -> FunctionKey {
    FunctionKey::new(
        Namespace::parse(ns).unwrap(),
        FunctionName::parse(name).unwrap(),
    )
}

fn hello() -> FunctionKey {
    key("sless-0123456789abcdef", "hello")
}

/// The user's env: one value to escape, and names of ours it may not take.
fn user_env() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("GREETING".to_owned(), DOLLAR_VALUE.to_owned()),
        ("SLESS_PORT".to_owned(), "1".to_owned()),
        ("SLESS_ENTRYPOINT".to_owned(), "evil.handle".to_owned()),
        ("HOME".to_owned(), "/root".to_owned()),
    ])
}

const SHA: &str = "d2a84f4b8b650937ec8f73cd8be2c74add5a911ba64df27458ed8229da804a26";

fn build_request(key: FunctionKey) -> BuildRequest {
    BuildRequest {
        key,
        version: 3,
        runtime: Runtime::Python311,
        context_sha256: SHA.to_owned(),
        context_key: format!("blobs/contexts/{SHA}.tar.gz"),
        context: Vec::new(),
        built: None,
        log: Default::default(),
    }
}

fn deploy_request(key: FunctionKey) -> DeployRequest {
    DeployRequest {
        key,
        version: 3,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".to_owned(),
        memory_mb: 256,
        timeout_sec: 30,
        env_vars: user_env(),
        artifact: Artifact {
            reference: "registry.example.com/sless/x:v3-d2a84f4b".to_owned(),
        },
        instances: 1,
    }
}

fn job_request(key: FunctionKey, run: &str) -> JobRequest {
    JobRequest {
        key,
        run: run.to_owned(),
        version: 3,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".to_owned(),
        env_vars: user_env(),
        memory_mb: 512,
        timeout: Duration::from_millis(90_500),
        artifact: Artifact {
            reference: "img".to_owned(),
        },
        event: serde_json::json!({"method": "JOB", "body": "{\"p\":\"$(HOME)\"}", "json": {"p": "$(HOME)"}}),
        invocation: None,
    }
}

fn cron_spec(key: FunctionKey, trigger: &str) -> super::CronSpec {
    super::CronSpec {
        trigger: trigger.to_owned(),
        key,
        schedule: "*/5 * * * *".to_owned(),
        timezone: "Europe/Paris".to_owned(),
        version: 3,
        runtime: Runtime::Nodejs20,
        entrypoint: "handler.handle".to_owned(),
        env_vars: user_env(),
        memory_mb: 128,
        timeout_sec: 60,
        image: "registry.example.com/sless/x:v3-d2a84f4b".to_owned(),
    }
}

/// Everything in `pod` that breaks the hardening list, as sentences; empty
/// when the pod is hardened.
fn hardening_violations(pod: &PodSpec, s: &KubeSettings, memory_mb: u32) -> Vec<String> {
    let mut bad = Vec::new();
    let mut check = |ok: bool, what: &str| {
        if !ok {
            bad.push(what.to_owned());
        }
    };
    let psc = pod.security_context.clone().unwrap_or_default();
    check(psc.run_as_non_root == Some(true), "pod: runAsNonRoot");
    check(psc.run_as_user == Some(RUN_AS), "pod: runAsUser 10001");
    check(psc.run_as_group == Some(RUN_AS), "pod: runAsGroup 10001");
    check(psc.fs_group == Some(RUN_AS), "pod: fsGroup 10001");
    check(
        psc.seccomp_profile.as_ref().map(|p| p.type_.as_str()) == Some("RuntimeDefault"),
        "pod: seccompProfile RuntimeDefault",
    );
    check(
        pod.automount_service_account_token == Some(false),
        "pod: automountServiceAccountToken false",
    );
    check(
        pod.enable_service_links == Some(false),
        "pod: enableServiceLinks false",
    );
    check(
        pod.host_network != Some(true) && pod.host_pid != Some(true) && pod.host_ipc != Some(true),
        "pod: no host namespaces",
    );
    let volumes = pod.volumes.clone().unwrap_or_default();
    check(
        volumes.iter().all(|v| {
            v.empty_dir.is_some()
                || (v.name == "event" && (v.secret.is_some() || v.downward_api.is_some()))
        }),
        "pod: emptyDir volumes, and a run's event",
    );
    check(
        volumes.iter().any(|v| {
            v.name == "tmp"
                && v.empty_dir.as_ref().is_some_and(|e| {
                    e.medium.is_none()
                        && e.size_limit.as_ref().map(|q| q.0.clone())
                            == Some(format!("{}Mi", s.tmp_mb))
                })
        }),
        "pod: /tmp is an emptyDir of tmp_mb",
    );
    check(
        pod.image_pull_secrets
            .as_ref()
            .map(|p| p.len())
            .unwrap_or(0)
            == usize::from(s.registry_pull_secret.is_some()),
        "pod: imagePullSecrets exactly when the registry needs one",
    );
    check(pod.containers.len() == 1, "pod: one container");
    check(
        pod.init_containers.is_none() && pod.ephemeral_containers.is_none(),
        "pod: no other containers",
    );
    for c in &pod.containers {
        container_violations(c, s, memory_mb, &mut check);
    }
    bad
}

fn container_violations(
    c: &Container,
    s: &KubeSettings,
    memory_mb: u32,
    check: &mut impl FnMut(bool, &str),
) {
    check(c.name == CONTAINER, "container: named function");
    let sc = c.security_context.clone().unwrap_or_default();
    check(
        sc.allow_privilege_escalation == Some(false),
        "container: allowPrivilegeEscalation false",
    );
    check(sc.privileged != Some(true), "container: not privileged");
    let caps = sc.capabilities.clone().unwrap_or_default();
    check(
        caps.drop.unwrap_or_default() == ["ALL"],
        "container: capabilities drop ALL",
    );
    check(
        caps.add.unwrap_or_default().is_empty(),
        "container: no capability added",
    );
    check(
        sc.read_only_root_filesystem == Some(true),
        "container: readOnlyRootFilesystem",
    );
    check(sc.run_as_non_root == Some(true), "container: runAsNonRoot");
    check(
        sc.run_as_user.is_none_or(|u| u != 0),
        "container: not run as root",
    );
    check(
        c.volume_mounts
            .iter()
            .flatten()
            .any(|m| m.name == "tmp" && m.mount_path == "/tmp" && m.read_only != Some(true)),
        "container: /tmp mounted writable",
    );
    check(
        c.volume_mounts
            .iter()
            .flatten()
            .all(|m| m.name == "tmp" || m.read_only == Some(true)),
        "container: nothing but /tmp mounted writable",
    );
    let res = c.resources.clone().unwrap_or_default();
    let get = |m: &Option<BTreeMap<String, Quantity>>, k: &str| {
        m.as_ref().and_then(|m| m.get(k)).map(|q| q.0.clone())
    };
    let memory = Some(format!("{memory_mb}Mi"));
    let storage = Some(format!("{}Mi", ephemeral_mb(s)));
    check(
        get(&res.requests, "cpu") == Some(s.cpu_request.clone()),
        "container: cpu request from settings",
    );
    check(
        get(&res.limits, "cpu") == Some(s.cpu_limit.clone()),
        "container: cpu limit from settings",
    );
    check(
        get(&res.requests, "memory") == memory && get(&res.limits, "memory") == memory,
        "container: memory request = limit = memory_mb",
    );
    check(
        get(&res.requests, "ephemeral-storage") == storage
            && get(&res.limits, "ephemeral-storage") == storage,
        "container: ephemeral-storage request and limit",
    );
    let env = env_of(c);
    check(
        env.get("HOME").map(String::as_str) == Some("/tmp"),
        "env: HOME=/tmp",
    );
    check(
        env.get("PYTHONDONTWRITEBYTECODE").map(String::as_str) == Some("1"),
        "env: PYTHONDONTWRITEBYTECODE=1",
    );
    check(
        ["SLESS_ENTRYPOINT", "SLESS_FUNCTION", "SLESS_VERSION"]
            .iter()
            .all(|n| env.contains_key(*n)),
        "env: the SLESS_* of the runtime contract",
    );
    let names: Vec<&str> = c.env.iter().flatten().map(|e| e.name.as_str()).collect();
    check(
        names.iter().collect::<BTreeSet<_>>().len() == names.len(),
        "env: no name twice",
    );
    check(
        c.env.iter().flatten().all(|e| e.value_from.is_none()),
        "env: no value from a Secret or the API",
    );
}

/// The container's env as a map (values as written in the spec).
fn env_of(c: &Container) -> BTreeMap<String, String> {
    c.env
        .iter()
        .flatten()
        .map(|e| (e.name.clone(), e.value.clone().unwrap_or_default()))
        .collect()
}

/// Every label of `meta`, checked: keys and values valid.
fn assert_labels_valid(meta: &ObjectMeta) {
    for (k, v) in meta.labels.iter().flatten() {
        assert!(
            super::names::is_label_value(v) && !v.is_empty(),
            "label {k}={v:?} has an invalid value"
        );
        let name = k.rsplit('/').next().unwrap();
        assert!(
            super::names::is_label_value(name) && !name.is_empty(),
            "label key {k:?} is invalid"
        );
    }
}

/// The object as JSON, with its kind, and back again unchanged.
fn json_of<T>(object: &T, kind: &str) -> serde_json::Value
where
    T: serde::Serialize + serde::de::DeserializeOwned + PartialEq + std::fmt::Debug,
{
    let json = serde_json::to_value(object).expect("serializes");
    assert_eq!(json["kind"], kind, "{json}");
    assert!(json["apiVersion"].is_string(), "{json}");
    let back: T = serde_json::from_value(json.clone()).expect("deserializes");
    assert_eq!(&back, object);
    json
}
