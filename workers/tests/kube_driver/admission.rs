//! What only a real API server can say of what the driver writes: that it
//! is valid (the NetworkPolicies, ResourceQuota and LimitRange of a tenant
//! namespace, whatever the settings an operator may give), and that Pod
//! Security admits the pods of functions under `restricted`, and those of
//! builds under the build namespace's `baseline`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{LimitRange, Pod, ResourceQuota, Secret};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, PostParams};
use serde_json::{Value, json};
use sless_domain::{FunctionKey, Runtime};
use sless_testkit::kube::Outcome;
use sless_workers::driver::{Artifact, Driver};
use sless_workers::kube::render::{CronSpec, build_job, cron_job, deployment, run_job};
use sless_workers::kube::{KubeSettings, TenantQuota};

use super::cluster::{BUILD_NS, names};
use super::runs::job_req;
use super::{Cluster, REGISTRY, build_req, deploy_req, image_of};

/// Settings an operator may give that change what `ensure` writes.
fn operator_settings() -> Vec<(&'static str, KubeSettings)> {
    let defaults = KubeSettings::new(REGISTRY);
    vec![
        ("the defaults", defaults.clone()),
        (
            "no egress, a pull secret, another quota, another port",
            KubeSettings {
                function_egress: false,
                registry_pull_secret: Some("sless-registry-pull".into()),
                function_port: 9000,
                quota: TenantQuota {
                    pods: 5,
                    cpu_limits: "2500m".into(),
                    memory_limits: "1.5Gi".into(),
                    ephemeral_storage_limits: "500Mi".into(),
                },
                ..defaults.clone()
            },
        ),
        (
            "denied ranges of both address families",
            KubeSettings {
                egress_denied_cidrs: vec![
                    "10.0.0.0/8".into(),
                    "169.254.169.254/32".into(),
                    "fd00::/8".into(),
                    "fe80::/10".into(),
                ],
                ..defaults
            },
        ),
    ]
}

#[tokio::test]
async fn every_policy_quota_and_limit_the_driver_writes_is_accepted() {
    let settings = operator_settings();
    let ensured = settings.into_iter().map(|(case, settings)| async move {
        let c = Cluster::start_with(settings.clone()).await;
        let rendered = sless_workers::kube::render::tenant_objects(&settings, &c.ns);
        if let Err(e) = c.driver.ensure_namespace(&c.ns).await {
            panic!("{case}: the cluster refused the tenant namespace: {e}");
        }
        let ns = c.ns.as_str();
        let written: Vec<Value> = rendered
            .network_policies
            .iter()
            .map(|p| serde_json::to_value(p).unwrap())
            .collect();
        assert_eq!(
            names(&c.list::<NetworkPolicy>(ns, "").await),
            names(&written),
            "{case}"
        );
        assert_eq!(
            names(&c.list::<ResourceQuota>(ns, "").await),
            [rendered.resource_quota.name_any()],
            "{case}"
        );
        assert_eq!(
            names(&c.list::<LimitRange>(ns, "").await),
            [rendered.limit_range.name_any()],
            "{case}"
        );
        // The quota is in force (the controller counted it) as stored: the
        // server keeps quantities in their canonical form (1.5Gi is 1536Mi).
        c.quota_counted().await;
        let quota = c.get::<ResourceQuota>(ns, "sless-quota").await.unwrap();
        assert_eq!(quota["status"]["hard"], quota["spec"]["hard"], "{case}");
        let keys = |v: &Value| v.as_object().unwrap().keys().cloned().collect::<Vec<_>>();
        let hard = serde_json::to_value(&rendered.resource_quota.spec.as_ref().unwrap().hard);
        assert_eq!(keys(&quota["spec"]["hard"]), keys(&hard.unwrap()), "{case}");
        // Written again (every worker does, now and then), in whatever
        // form: nothing changes.
        let before = c.versions().await;
        c.driver.ensure_namespace(&c.ns).await.unwrap();
        assert_eq!(
            c.versions().await,
            before,
            "{case}: a second ensure changed something"
        );
        // The pull Secret was copied, when there is one to copy.
        let copied = c.get::<Secret>(ns, "sless-pull").await;
        match &settings.registry_pull_secret {
            Some(_) => {
                let copied = copied.expect("the pull Secret's copy");
                let source = c
                    .get::<Secret>("sless", "sless-registry-pull")
                    .await
                    .unwrap();
                assert_eq!(copied["type"], "kubernetes.io/dockerconfigjson");
                assert_eq!(copied["data"], source["data"], "{case}");
            }
            None => assert!(copied.is_none(), "{case}: {copied:?}"),
        }
        c.assert_writes_are_ours();
    });
    futures_util::future::join_all(ensured).await;
}

/// A pod as a controller would make it from `template` (a PodTemplateSpec).
fn pod_of(template: &Value, name: &str) -> Pod {
    serde_json::from_value(json!({
        "metadata": {"name": name, "labels": template["metadata"]["labels"],
                     "annotations": template["metadata"]["annotations"]},
        "spec": template["spec"],
    }))
    .unwrap()
}

/// Asks admission whether it would take `pod` in `ns` (a server-side dry
/// run: Pod Security, the LimitRange and the quota all judge it).
async fn admitted(c: &Cluster, ns: &str, pod: &Pod) -> Result<(), String> {
    let dry_run = PostParams {
        dry_run: true,
        ..PostParams::default()
    };
    Api::<Pod>::namespaced(c.admin.clone(), ns)
        .create(&dry_run, pod)
        .await
        .map(|_| ())
        .map_err(|e| e.to_string())
}

#[tokio::test]
async fn the_pods_of_functions_builds_and_runs_are_admitted() {
    let c = Cluster::start().await;
    let settings = KubeSettings::new(REGISTRY);
    let k = c.key("hello");
    let ns = c.ns.as_str();
    c.driver.ensure_namespace(&c.ns).await.unwrap();
    c.quota_counted().await;

    // Every pod template the driver renders, judged before any runs: a
    // refused one fails here, not after a rollout's deadline.
    let image = image_of(&c, 1, 1);
    let served = deployment(&settings, &deploy_req(&k, 1, &image), &image, 1);
    let run = job_req(&k, "probe");
    let one_run = run_job(&settings, &run, &image, "job-probe-event-x");
    let cron = cron_job(&settings, &cron_spec(&k, &image));
    let build = build_job(&settings, &build_req(&c, &k, 1, 1).await);
    let templates = [
        (
            "a served function",
            ns,
            json!(served)["spec"]["template"].clone(),
        ),
        ("a run", ns, json!(one_run)["spec"]["template"].clone()),
        (
            "a cron run",
            ns,
            json!(cron)["spec"]["jobTemplate"]["spec"]["template"].clone(),
        ),
        (
            "a build",
            BUILD_NS,
            json!(build)["spec"]["template"].clone(),
        ),
    ];
    for (what, ns, template) in &templates {
        let pod = pod_of(template, "admission-probe");
        if let Err(e) = admitted(&c, ns, &pod).await {
            panic!("the pod of {what} is not admitted in {ns}: {e}");
        }
    }
    // The namespace's Pod Security is what refuses a pod: one that runs
    // as root is not admitted.
    let mut root = json!(served)["spec"]["template"].clone();
    root["spec"]["securityContext"]["runAsNonRoot"] = false.into();
    root["spec"]["securityContext"]["runAsUser"] = 0.into();
    let refused = admitted(&c, ns, &pod_of(&root, "root")).await.unwrap_err();
    assert!(refused.contains("violates PodSecurity"), "{refused}");

    // And the real ones: a served function's pod and a run's were made by
    // their controllers, and started.
    c.serve_functions();
    c.play_all("sless.dev/job=probe", Outcome::succeeds("{}\n"));
    c.driver.deploy(deploy_req(&k, 1, &image)).await.unwrap();
    let out = c
        .driver
        .run_job(sless_workers::driver::JobRequest {
            artifact: Artifact {
                reference: image.clone(),
            },
            ..run
        })
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    let pods = c.list::<Pod>(ns, "").await;
    let components: BTreeMap<&str, usize> = pods.iter().fold(BTreeMap::new(), |mut counted, p| {
        let component = p["metadata"]["labels"]["sless.dev/component"]
            .as_str()
            .unwrap_or_default();
        *counted.entry(component).or_default() += 1;
        counted
    });
    assert_eq!(
        components,
        BTreeMap::from([("function", 1), ("job", 1)]),
        "{pods:#?}"
    );
    c.assert_writes_are_ours();
}

fn cron_spec(k: &FunctionKey, image: &str) -> CronSpec {
    CronSpec {
        trigger: "nightly".into(),
        key: k.clone(),
        schedule: "0 3 * * *".into(),
        timezone: "Europe/Paris".into(),
        version: 1,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        env_vars: BTreeMap::new(),
        memory_mb: 128,
        timeout_sec: 60,
        image: image.into(),
    }
}
