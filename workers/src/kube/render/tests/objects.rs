use std::collections::BTreeMap;

use chrono::Utc;
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::Job;
use k8s_openapi::api::core::v1::PodSpec;
use k8s_openapi::apimachinery::pkg::util::intstr::IntOrString;
use sless_domain::job::{CronTick, JobRequest as DomainJobRequest};
use sless_domain::{FunctionName, TriggerName};

use super::{
    DOLLAR_VALUE, SHA, assert_labels_valid, build_request, cron_spec, deploy_request, env_of,
    hardening_violations, hello, job_request, json_of, settings,
};
use crate::kube::KubeSettings;
use crate::kube::render::build::{
    BUILD_CA_DIR, BUILD_CA_KEY, BUILD_CONTAINER, CERT_DIR_ENV, CONTEXT_URL_ENV, CONTEXT_URL_KEY,
};
use crate::kube::render::cron::cron_event;
use crate::kube::render::pod::{ANNOTATION_EVENT, EVENT_DIR, EVENT_FILE, HEALTH_PATH};
use crate::kube::render::{
    LABEL_BUILD, LABEL_COMPONENT, LABEL_FUNCTION, LABEL_JOB, LABEL_NAMESPACE, LABEL_RUN,
    LABEL_TRIGGER, LABEL_VERSION, build_job, build_job_name, build_secret, cron_job, deployment,
    run_event_secret, run_job, service,
};

const IMAGE: &str = "registry.example.com/sless/sless-0123456789abcdef-hello:v3-d2a84f4b";

fn pod_of_deployment(d: &Deployment) -> &PodSpec {
    d.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

fn pod_of_job(j: &Job) -> &PodSpec {
    j.spec.as_ref().unwrap().template.spec.as_ref().unwrap()
}

/// Whether every label of `selector` is among `labels`.
fn selects(selector: &BTreeMap<String, String>, labels: &BTreeMap<String, String>) -> bool {
    selector.iter().all(|(k, v)| labels.get(k) == Some(v))
}

#[test]
fn every_function_pod_is_hardened() {
    let mut s = settings();
    for pull in [None, Some("regcred".to_owned())] {
        s.registry_pull_secret = pull;
        let d = deployment(&s, &deploy_request(hello()), IMAGE, 2);
        let j = run_job(
            &s,
            &job_request(hello(), "job/ns/nightly"),
            IMAGE,
            "job-nightly-event-x",
        );
        let c = cron_job(&s, &cron_spec(hello(), "every-5"));
        let cron_pod = c.spec.as_ref().unwrap().job_template.spec.as_ref().unwrap();
        let pods = [
            ("deployment", pod_of_deployment(&d), 256),
            ("job", pod_of_job(&j), 512),
            ("cronjob", cron_pod.template.spec.as_ref().unwrap(), 128),
        ];
        for (what, pod, memory_mb) in pods {
            let bad = hardening_violations(pod, &s, memory_mb);
            assert!(bad.is_empty(), "{what} is not hardened: {bad:#?}");
        }
    }
}

#[test]
fn the_hardening_check_catches_a_weakened_pod() {
    let s = settings();
    let d = deployment(&s, &deploy_request(hello()), IMAGE, 1);
    let mut pod = pod_of_deployment(&d).clone();
    let sc = pod.containers[0].security_context.as_mut().unwrap();
    sc.capabilities.as_mut().unwrap().drop = None;
    sc.read_only_root_filesystem = None;
    pod.automount_service_account_token = None;
    let bad = hardening_violations(&pod, &s, 256);
    assert_eq!(
        bad,
        [
            "pod: automountServiceAccountToken false",
            "container: capabilities drop ALL",
            "container: readOnlyRootFilesystem",
        ]
    );
}

#[test]
fn the_deployment_serves_the_version_under_a_fixed_selector() {
    let s = settings();
    let d = deployment(&s, &deploy_request(hello()), IMAGE, 2);
    json_of(&d, "Deployment");
    assert_labels_valid(&d.metadata);
    assert_eq!(d.metadata.name.as_deref(), Some("hello"));
    assert_eq!(
        d.metadata.namespace.as_deref(),
        Some("sless-0123456789abcdef")
    );
    let spec = d.spec.as_ref().unwrap();
    assert_eq!(spec.replicas, Some(2));
    assert_eq!(spec.progress_deadline_seconds, Some(300));
    assert!(spec.revision_history_limit.is_some_and(|n| n <= 5));
    let rolling = spec
        .strategy
        .as_ref()
        .unwrap()
        .rolling_update
        .as_ref()
        .unwrap();
    assert_eq!(rolling.max_unavailable, Some(IntOrString::Int(0)));
    assert_eq!(rolling.max_surge, Some(IntOrString::Int(1)));

    let selector = spec.selector.match_labels.as_ref().unwrap();
    assert!(!selector.contains_key(LABEL_VERSION), "{selector:?}");
    assert_eq!(selector[LABEL_NAMESPACE], "sless-0123456789abcdef");
    assert_eq!(selector[LABEL_FUNCTION], "hello");
    let template = spec.template.metadata.as_ref().unwrap();
    assert_labels_valid(template);
    let pod_labels = template.labels.as_ref().unwrap();
    assert!(
        selects(selector, pod_labels),
        "{selector:?} ⊄ {pod_labels:?}"
    );
    assert_eq!(pod_labels[LABEL_VERSION], "3");
    assert_eq!(
        template.annotations.as_ref().unwrap()["sless.dev/image"],
        IMAGE
    );

    let c = &pod_of_deployment(&d).containers[0];
    assert_eq!(c.image.as_deref(), Some(IMAGE));
    assert_eq!(c.ports.as_ref().unwrap()[0].container_port, 8080);
    for probe in [&c.readiness_probe, &c.liveness_probe] {
        let get = probe.as_ref().unwrap().http_get.as_ref().unwrap();
        assert_eq!(get.path.as_deref(), Some(HEALTH_PATH));
        assert_eq!(get.port, IntOrString::Int(8080));
    }
    let liveness = c.liveness_probe.as_ref().unwrap();
    assert!(
        liveness.failure_threshold.unwrap() * liveness.period_seconds.unwrap() >= 60,
        "a pod is restarted only after a minute without an answer"
    );
    let env = env_of(c);
    assert_eq!(env["SLESS_PORT"], "8080");
    assert_eq!(env["SLESS_HOST"], "0.0.0.0");
    assert!(!env.contains_key("SLESS_JOB"));
}

#[test]
fn a_new_version_changes_the_pods_but_not_the_selector() {
    let s = settings();
    let v3 = deployment(&s, &deploy_request(hello()), IMAGE, 1);
    let mut req = deploy_request(hello());
    req.version = 4;
    let v4 = deployment(&s, &req, "other:v4", 1);
    let (a, b) = (v3.spec.unwrap(), v4.spec.unwrap());
    assert_eq!(a.selector, b.selector);
    assert_ne!(a.template, b.template);
}

#[test]
fn the_service_selects_the_deployments_pods_and_no_job_pods() {
    let s = settings();
    let svc = service(&s, &hello());
    json_of(&svc, "Service");
    assert_labels_valid(&svc.metadata);
    let spec = svc.spec.as_ref().unwrap();
    assert_eq!(spec.type_.as_deref(), Some("ClusterIP"));
    assert_eq!(spec.ports.as_ref().unwrap()[0].port, 8080);
    assert_eq!(
        spec.ports.as_ref().unwrap()[0].target_port,
        Some(IntOrString::Int(8080))
    );
    let selector = spec.selector.as_ref().unwrap();
    let d = deployment(&s, &deploy_request(hello()), IMAGE, 1);
    assert_eq!(
        Some(selector),
        d.spec.as_ref().unwrap().selector.match_labels.as_ref()
    );
    let serving = d.spec.as_ref().unwrap().template.metadata.as_ref().unwrap();
    assert!(selects(selector, serving.labels.as_ref().unwrap()));

    let j = run_job(
        &s,
        &job_request(hello(), "job/ns/nightly"),
        IMAGE,
        "job-nightly-event-x",
    );
    let c = cron_job(&s, &cron_spec(hello(), "every-5"));
    let job_pod = j.spec.unwrap().template.metadata.unwrap().labels.unwrap();
    let cron_pod = c.spec.unwrap().job_template.spec.unwrap().template.metadata;
    assert!(
        !selects(selector, &job_pod),
        "a job's pod would get traffic"
    );
    assert!(!selects(selector, &cron_pod.unwrap().labels.unwrap()));
}

#[test]
fn user_env_is_escaped_and_cannot_take_our_names() {
    let s = settings();
    let d = deployment(&s, &deploy_request(hello()), IMAGE, 1);
    let c = &pod_of_deployment(&d).containers[0];
    let env = env_of(c);
    assert_eq!(env["GREETING"], "a$$(B)", "{DOLLAR_VALUE} must be escaped");
    assert_eq!(env["SLESS_PORT"], "8080");
    assert_eq!(env["SLESS_ENTRYPOINT"], "handler.handle");
    assert_eq!(env["HOME"], "/tmp");
    assert_eq!(env["SLESS_FUNCTION"], "sless-0123456789abcdef/hello");
    assert_eq!(env["SLESS_VERSION"], "3");
    // Each name once: the user's SLESS_PORT, SLESS_ENTRYPOINT and HOME are
    // left out, not listed after ours.
    assert_eq!(c.env.as_ref().unwrap().len(), env.len());
}

#[test]
fn a_user_job_runs_once_in_job_mode() {
    let s = settings();
    let req = job_request(hello(), "job/sless-0123456789abcdef/nightly");
    let j = run_job(&s, &req, IMAGE, "job-nightly-event-0123456789");
    json_of(&j, "Job");
    assert_labels_valid(&j.metadata);
    assert_eq!(j.metadata.name.as_deref(), Some("job-nightly"));
    let labels = j.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_COMPONENT], "job");
    assert_eq!(labels[LABEL_JOB], "nightly");
    assert_eq!(labels[LABEL_RUN], "job-nightly");
    assert_eq!(labels[LABEL_FUNCTION], "hello");
    assert!(!labels.contains_key("job-name"));
    let spec = j.spec.as_ref().unwrap();
    assert_eq!(spec.backoff_limit, Some(0));
    assert_eq!(spec.active_deadline_seconds, Some(91), "90.5 s, rounded up");
    assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
    assert!(spec.selector.is_none() && spec.manual_selector.is_none());
    let template = spec.template.metadata.as_ref().unwrap();
    assert_labels_valid(template);
    assert!(selects(labels, template.labels.as_ref().unwrap()));
    let pod = pod_of_job(&j);
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let c = &pod.containers[0];
    assert!(c.ports.is_none() && c.readiness_probe.is_none() && c.liveness_probe.is_none());
    let env = env_of(c);
    assert_eq!(env["SLESS_JOB"], "1");
    assert!(!env.contains_key("SLESS_PORT"));
    // The event is a file from the run's Secret, not a variable.
    assert_eq!(
        env["SLESS_JOB_EVENT_FILE"],
        "/var/run/secrets/sless.dev/job/event.json"
    );
    assert!(!env.contains_key("SLESS_JOB_EVENT"));
    let text = serde_json::to_string(&j).unwrap();
    assert!(
        !text.contains("$(HOME)"),
        "the event is not in the Job: {text}"
    );
    let mount = c
        .volume_mounts
        .iter()
        .flatten()
        .find(|m| m.name == "event")
        .unwrap();
    assert_eq!(mount.mount_path, EVENT_DIR);
    assert_eq!(mount.read_only, Some(true));
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "event")
        .unwrap();
    let secret = volume.secret.as_ref().unwrap();
    assert_eq!(
        secret.secret_name.as_deref(),
        Some("job-nightly-event-0123456789")
    );
    assert_eq!(secret.optional, Some(false));
    let items = secret.items.as_ref().unwrap();
    assert_eq!(
        (items[0].key.as_str(), items[0].path.as_str()),
        (EVENT_FILE, EVENT_FILE)
    );

    // The Secret: the event byte for byte (a file is not expanded as a
    // variable is), owned by the Job as the cluster made it.
    let mut created = j.clone();
    created.metadata.uid = Some("uid-1".to_owned());
    let secret = run_event_secret("job-nightly-event-0123456789", &req, &created);
    json_of(&secret, "Secret");
    assert_labels_valid(&secret.metadata);
    assert_eq!(
        secret.metadata.namespace.as_deref(),
        Some("sless-0123456789abcdef")
    );
    assert_eq!(secret.immutable, Some(true));
    let owner = &secret.metadata.owner_references.as_ref().unwrap()[0];
    assert_eq!(
        (owner.kind.as_str(), owner.name.as_str(), owner.uid.as_str()),
        ("Job", "job-nightly", "uid-1")
    );
    let data = &secret.data.as_ref().unwrap()[EVENT_FILE].0;
    let event: serde_json::Value = serde_json::from_slice(data).unwrap();
    assert_eq!(event, req.event);
}

#[test]
fn a_cron_run_is_labelled_with_its_trigger() {
    let s = settings();
    let mut req = job_request(hello(), "cron/sless-0123456789abcdef/report/1764470400");
    req.timeout = std::time::Duration::ZERO;
    let j = run_job(&s, &req, IMAGE, "run-report-1764470400-event-x");
    assert_eq!(j.metadata.name.as_deref(), Some("run-report-1764470400"));
    let labels = j.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_TRIGGER], "report");
    assert!(!labels.contains_key(LABEL_JOB));
    assert_eq!(
        j.spec.unwrap().active_deadline_seconds,
        Some(1),
        "at least a second"
    );
}

#[test]
fn the_cronjob_runs_the_trigger_on_its_schedule() {
    let s = settings();
    let spec = cron_spec(hello(), "every-5");
    let c = cron_job(&s, &spec);
    json_of(&c, "CronJob");
    assert_labels_valid(&c.metadata);
    assert_eq!(c.metadata.name.as_deref(), Some("cron-every-5"));
    let labels = c.metadata.labels.as_ref().unwrap();
    assert_eq!(labels[LABEL_COMPONENT], "cron");
    assert_eq!(labels[LABEL_TRIGGER], "every-5");
    assert_eq!(labels[LABEL_VERSION], "3");
    let cs = c.spec.as_ref().unwrap();
    assert_eq!(cs.schedule, "*/5 * * * *");
    assert_eq!(cs.time_zone.as_deref(), Some("Europe/Paris"));
    assert_eq!(cs.concurrency_policy.as_deref(), Some("Forbid"));
    assert_eq!(cs.starting_deadline_seconds, Some(3600));
    assert_eq!(cs.successful_jobs_history_limit, Some(3));
    assert_eq!(cs.failed_jobs_history_limit, Some(3));
    let template = &cs.job_template;
    assert_labels_valid(template.metadata.as_ref().unwrap());
    assert_eq!(
        template.metadata.as_ref().unwrap().labels.as_ref(),
        Some(labels)
    );
    let js = template.spec.as_ref().unwrap();
    assert_eq!(js.backoff_limit, Some(0));
    assert_eq!(js.active_deadline_seconds, Some(60));
    assert_eq!(js.ttl_seconds_after_finished, Some(3600));
    let pod_meta = js.template.metadata.as_ref().unwrap();
    assert_eq!(pod_meta.labels.as_ref(), Some(labels));
    let pod = js.template.spec.as_ref().unwrap();
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    let env = env_of(&pod.containers[0]);
    assert_eq!(env["SLESS_JOB"], "1");
    assert!(!env.contains_key("SLESS_JOB_EVENT"));
    // Every run's event is the same: its pod's own annotation, as a file.
    assert_eq!(
        env["SLESS_JOB_EVENT_FILE"],
        format!("{EVENT_DIR}/{EVENT_FILE}")
    );
    let annotation = &pod_meta.annotations.as_ref().unwrap()[ANNOTATION_EVENT];
    let event: serde_json::Value = serde_json::from_str(annotation).unwrap();
    assert_eq!(event, cron_event(&spec));
    let volume = pod
        .volumes
        .iter()
        .flatten()
        .find(|v| v.name == "event")
        .unwrap();
    let item = &volume
        .downward_api
        .as_ref()
        .unwrap()
        .items
        .as_ref()
        .unwrap()[0];
    assert_eq!(item.path, EVENT_FILE);
    assert_eq!(
        item.field_ref.as_ref().unwrap().field_path,
        "metadata.annotations['sless.dev/event']"
    );
}

#[test]
fn the_cron_event_is_the_one_the_local_driver_gives() {
    let spec = cron_spec(hello(), "every-5");
    let tick = DomainJobRequest {
        function: FunctionName::parse("hello").unwrap(),
        version: 3,
        input: serde_json::Value::Null,
        timeout_sec: 60,
        cron: Some(CronTick {
            trigger: TriggerName::parse("every-5").unwrap(),
            schedule: spec.schedule.clone(),
            timezone: spec.timezone.clone(),
            scheduled_at: Utc::now(),
            missed: 0,
        }),
    };
    let mut local = crate::jobs::handler_event(&tick);
    // A CronJob cannot know the tick it starts for.
    local["json"]["scheduled_at"] = serde_json::Value::Null;
    local["body"] = local["json"].to_string().into();
    assert_eq!(cron_event(&spec), local);
}

#[test]
fn the_build_job_holds_no_credential_and_stops_in_time() {
    let s = settings();
    let req = build_request(hello());
    let url = "https://s3.example.com/blobs/contexts/x.tar.gz?X-Amz-Signature=secret";
    let secret = build_secret(&s, &req.key, req.version, SHA, url);
    let job = build_job(&s, &req);
    json_of(&secret, "Secret");
    let text = json_of(&job, "Job").to_string();
    assert!(
        !text.contains("X-Amz") && !text.contains("s3.example.com"),
        "{text}"
    );

    let name = build_job_name(&req.key, 3, SHA);
    for meta in [&job.metadata, &secret.metadata] {
        assert_labels_valid(meta);
        assert_eq!(meta.name.as_ref(), Some(&name));
        assert_eq!(meta.namespace.as_deref(), Some("sless-builds"));
        let labels = meta.labels.as_ref().unwrap();
        assert_eq!(labels[LABEL_COMPONENT], "build");
        assert_eq!(labels[LABEL_BUILD], "v3-d2a84f4b");
        assert_eq!(labels[LABEL_NAMESPACE], "sless-0123456789abcdef");
        assert_eq!(labels[LABEL_VERSION], "3");
    }
    assert_eq!(secret.string_data.as_ref().unwrap()[CONTEXT_URL_KEY], url);

    let spec = job.spec.as_ref().unwrap();
    assert_eq!(
        spec.backoff_limit,
        Some(0),
        "a failed build is not run again"
    );
    assert_eq!(spec.active_deadline_seconds, Some(900));
    assert_eq!(spec.ttl_seconds_after_finished, Some(3600));
    assert_labels_valid(spec.template.metadata.as_ref().unwrap());
    let pod = pod_of_job(&job);
    assert_eq!(pod.restart_policy.as_deref(), Some("Never"));
    assert_eq!(pod.automount_service_account_token, Some(false));
    assert_eq!(pod.enable_service_links, Some(false));
    let c = &pod.containers[0];
    assert_eq!(c.name, BUILD_CONTAINER);
    assert_eq!(c.image.as_deref(), Some(s.kaniko_image.as_str()));
    let args = c.args.as_ref().unwrap();
    for arg in [
        format!("--context=$({CONTEXT_URL_ENV})"),
        format!(
            "--destination={}",
            super::super::image(&s, &req.key, 3, SHA)
        ),
        format!(
            "--build-arg=SLESS_RUNTIME_IMAGE={}",
            super::super::runtime_image(&s, req.runtime)
        ),
        "--dockerfile=Dockerfile".to_owned(),
    ] {
        assert!(args.contains(&arg), "{arg} missing from {args:?}");
    }
    let env = c.env.as_ref().unwrap();
    let from = env[0].value_from.as_ref().unwrap().secret_key_ref.as_ref();
    assert_eq!(env[0].name, CONTEXT_URL_ENV);
    assert!(env[0].value.is_none());
    assert_eq!(
        from.map(|r| (&r.name, r.key.as_str())),
        Some((&name, CONTEXT_URL_KEY))
    );
    let res = c.resources.as_ref().unwrap();
    for part in ["cpu", "memory", "ephemeral-storage"] {
        assert!(
            res.limits.as_ref().unwrap().contains_key(part),
            "{part} limit"
        );
        assert!(
            res.requests.as_ref().unwrap().contains_key(part),
            "{part} request"
        );
    }
    let push = &pod.volumes.as_ref().unwrap()[0];
    let source = push.secret.as_ref().unwrap();
    assert_eq!(source.secret_name.as_deref(), Some("sless-registry-push"));
    let item = &source.items.as_ref().unwrap()[0];
    assert_eq!(
        (item.key.as_str(), item.path.as_str()),
        (".dockerconfigjson", "config.json")
    );
    let mount = &c.volume_mounts.as_ref().unwrap()[0];
    assert_eq!(
        (
            mount.name.as_str(),
            mount.mount_path.as_str(),
            mount.read_only
        ),
        (push.name.as_str(), "/kaniko/.docker", Some(true))
    );
}

#[test]
fn the_build_trusts_the_operators_ca_besides_kanikos_own_only_when_named() {
    let req = build_request(hello());
    let job = build_job(&settings(), &req);
    let c = &pod_of_job(&job).containers[0];
    assert_eq!(pod_of_job(&job).volumes.as_ref().unwrap().len(), 1);
    assert_eq!(c.volume_mounts.as_ref().unwrap().len(), 1);
    assert!(!env_of(c).contains_key(CERT_DIR_ENV), "{:?}", env_of(c));

    let s = KubeSettings {
        build_ca_secret: Some("sless-build-ca".to_owned()),
        ..settings()
    };
    let job = build_job(&s, &req);
    json_of(&job, "Job");
    let pod = pod_of_job(&job);
    let c = &pod.containers[0];
    assert_eq!(
        env_of(c).get(CERT_DIR_ENV).map(String::as_str),
        Some("/kaniko/ssl/certs:/sless/ca")
    );
    assert_eq!(env_of(c).get(CONTEXT_URL_ENV).map(String::as_str), Some(""));
    let volumes = pod.volumes.as_ref().unwrap();
    assert_eq!(volumes.len(), 2, "{volumes:#?}");
    let ca = volumes.iter().find(|v| v.name == "build-ca").unwrap();
    let source = ca.secret.as_ref().unwrap();
    assert_eq!(source.secret_name.as_deref(), Some("sless-build-ca"));
    let items: Vec<_> = source
        .items
        .iter()
        .flatten()
        .map(|i| (i.key.as_str(), i.path.as_str()))
        .collect();
    assert_eq!(items, [(BUILD_CA_KEY, "ca.crt")], "only the certificate");
    assert_eq!(
        (source.default_mode, source.optional),
        (Some(0o444), Some(false))
    );
    let mounts = c.volume_mounts.as_ref().unwrap();
    let mount = mounts.iter().find(|m| m.name == "build-ca").unwrap();
    assert_eq!(
        (mount.mount_path.as_str(), mount.read_only),
        (BUILD_CA_DIR, Some(true))
    );
    assert_eq!(BUILD_CA_DIR, "/sless/ca");
    // The push credentials are mounted as before.
    assert!(
        mounts
            .iter()
            .any(|m| m.name == "docker-config" && m.mount_path == "/kaniko/.docker"),
        "{mounts:#?}"
    );
}

#[test]
fn the_build_caches_its_layers_in_the_tenants_own_cache_repository_unless_turned_off() {
    let args = |s: &KubeSettings, ns: &str| {
        let req = build_request(super::key(ns, "hello"));
        let job = build_job(s, &req);
        pod_of_job(&job).containers[0].args.clone().unwrap()
    };
    let kept = ["--push-retry=2", "--digest-file=/dev/termination-log"];
    let one = args(&settings(), "sless-0123456789abcdef");
    for arg in [
        "--cache=true",
        "--cache-repo=registry.example.com/sless/cache/sless-0123456789abcdef",
    ]
    .iter()
    .chain(&kept)
    {
        assert!(one.iter().any(|a| a == arg), "{arg} missing from {one:?}");
    }
    // One snapshot pushes the layer under another key than the lookup's.
    assert!(!one.iter().any(|a| a == "--single-snapshot"), "{one:?}");
    let other = args(&settings(), "sless-fedcba9876543210");
    assert!(
        other
            .iter()
            .any(|a| a == "--cache-repo=registry.example.com/sless/cache/sless-fedcba9876543210"),
        "another tenant, another cache: {other:?}"
    );

    let off = KubeSettings {
        build_cache_repo: None,
        ..settings()
    };
    let none = args(&off, "sless-0123456789abcdef");
    for arg in ["--cache=false", "--single-snapshot"].iter().chain(&kept) {
        assert!(none.iter().any(|a| a == arg), "{arg} missing from {none:?}");
    }
    assert!(
        !none.iter().any(|a| a.starts_with("--cache-repo")),
        "{none:?}"
    );
}
