//! A tenant namespace as a real API server judges it
//! (`sless_testkit::kube::ControlPlane`: kube-apiserver with the production
//! admission plugins, and the controllers). The driver ensures the
//! namespace; then an administrator, who is bound by nothing but admission,
//! tries pods in it: Pod Security `restricted` refuses each way out of the
//! sandbox, the ResourceQuota refuses what is beyond it, the LimitRange
//! fills in what a pod does not say, and every object the driver wrote is
//! on the server as it was written.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{LimitRange, Namespace as K8sNamespace, Pod, ResourceQuota};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use kube::api::{Api, ListParams, PostParams};
use serde_json::{Value, json};
use sless_domain::Namespace;
use sless_testkit::kube::ControlPlane;
use sless_testkit::{TestS3, eventually};
use sless_workers::kube::render::namespace::{LIMIT_RANGE_NAME, QUOTA_NAME};
use sless_workers::kube::render::tenant_objects;
use sless_workers::kube::{KubeDriver, KubeSettings};

const REGISTRY: &str = "registry.test/sless";
const DEADLINE: Duration = Duration::from_secs(60);

/// A tenant namespace the driver ensured with `settings`.
struct Tenant {
    client: kube::Client,
    ns: Namespace,
    driver: KubeDriver,
    _s3: TestS3,
}

impl Tenant {
    async fn ensure(settings: KubeSettings) -> Tenant {
        let client = ControlPlane::shared().admin();
        let s3 = TestS3::new().await;
        let suffix = uuid::Uuid::new_v4().simple().to_string();
        let ns = Namespace::parse(&format!("sless-{}", &suffix[..16])).unwrap();
        let driver = KubeDriver::new(client.clone(), settings, s3.blobs());
        driver.ensure_namespace(&ns).await.unwrap();
        let tenant = Tenant {
            client,
            ns,
            driver,
            _s3: s3,
        };
        // ResourceQuota admission refuses every pod until the quota's
        // controller has counted what the namespace holds.
        let quotas = tenant.api::<ResourceQuota>();
        eventually("the quota to be counted", DEADLINE, || async {
            let q = quotas.get(QUOTA_NAME).await.ok()?;
            q.status?.hard.map(|_| ())
        })
        .await;
        tenant
    }

    fn api<K>(&self) -> Api<K>
    where
        K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>,
        <K as kube::Resource>::DynamicType: Default,
    {
        Api::namespaced(self.client.clone(), self.ns.as_str())
    }

    /// Creates `pod` as an administrator: what the server stored, or the
    /// status it refused it with.
    async fn create(&self, pod: Value) -> Result<Pod, kube::core::Status> {
        let pod: Pod = serde_json::from_value(pod).unwrap();
        match self.api::<Pod>().create(&PostParams::default(), &pod).await {
            Ok(pod) => Ok(pod),
            Err(kube::Error::Api(status)) => Err(*status),
            Err(e) => panic!("creating a pod: {e}"),
        }
    }

    /// Creates `pod`, which the server must refuse: the status it gave.
    async fn refused(&self, pod: Value) -> kube::core::Status {
        match self.create(pod).await {
            Ok(pod) => panic!("pod {} was admitted in {}", pod.name_any(), self.ns),
            Err(status) => status,
        }
    }
}

/// A pod Pod Security `restricted` admits, with no resources of its own.
fn compliant(name: &str) -> Value {
    json!({
        "metadata": {"name": name},
        "spec": {
            "securityContext": {"runAsNonRoot": true, "runAsUser": 10001,
                "seccompProfile": {"type": "RuntimeDefault"}},
            "containers": [{
                "name": "main", "image": "registry.test/sless/anything:1",
                "securityContext": {"allowPrivilegeEscalation": false,
                    "capabilities": {"drop": ["ALL"]}},
            }],
        },
    })
}

/// `compliant(name)` with `change` made to it.
fn compliant_but(name: &str, change: fn(&mut Value)) -> Value {
    let mut pod = compliant(name);
    change(&mut pod);
    pod
}

/// Every way out of `restricted` a pod may try, one at a time: (what, the
/// change to a compliant pod, what the refusal names).
type Violation = (&'static str, fn(&mut Value), &'static str);

const VIOLATIONS: &[Violation] = &[
    (
        "root user",
        |p| p["spec"]["securityContext"]["runAsUser"] = json!(0),
        "runAsUser=0",
    ),
    (
        "runAsNonRoot false",
        |p| p["spec"]["securityContext"]["runAsNonRoot"] = json!(false),
        "runAsNonRoot != true",
    ),
    (
        "privilege escalation",
        |p| p["spec"]["containers"][0]["securityContext"]["allowPrivilegeEscalation"] = json!(true),
        "allowPrivilegeEscalation != false",
    ),
    (
        "an added capability",
        |p| {
            p["spec"]["containers"][0]["securityContext"]["capabilities"]["add"] =
                json!(["SYS_ADMIN"])
        },
        "SYS_ADMIN",
    ),
    (
        "capabilities not dropped",
        |p| p["spec"]["containers"][0]["securityContext"]["capabilities"] = json!({}),
        "unrestricted capabilities",
    ),
    (
        "a hostPath volume",
        |p| {
            p["spec"]["volumes"] = json!([{"name": "host", "hostPath": {"path": "/"}}]);
            p["spec"]["containers"][0]["volumeMounts"] =
                json!([{"name": "host", "mountPath": "/host"}]);
        },
        "hostPath",
    ),
    (
        "an NFS volume",
        |p| {
            p["spec"]["volumes"] =
                json!([{"name": "nfs", "nfs": {"server": "10.0.0.1", "path": "/"}}])
        },
        "restricted volume types",
    ),
    (
        "the host's network",
        |p| p["spec"]["hostNetwork"] = json!(true),
        "hostNetwork=true",
    ),
    (
        "the host's processes",
        |p| p["spec"]["hostPID"] = json!(true),
        "hostPID=true",
    ),
    (
        "the host's IPC",
        |p| p["spec"]["hostIPC"] = json!(true),
        "hostIPC=true",
    ),
    (
        "a host port",
        |p| p["spec"]["containers"][0]["ports"] = json!([{"containerPort": 8080, "hostPort": 80}]),
        "hostPort",
    ),
    (
        "no seccomp profile",
        |p| {
            p["spec"]["securityContext"]
                .as_object_mut()
                .unwrap()
                .remove("seccompProfile");
        },
        "seccompProfile",
    ),
    (
        "seccomp unconfined",
        |p| p["spec"]["securityContext"]["seccompProfile"] = json!({"type": "Unconfined"}),
        "seccompProfile",
    ),
    (
        "an SELinux type of its own",
        |p| p["spec"]["securityContext"]["seLinuxOptions"] = json!({"type": "spc_t"}),
        "seLinuxOptions",
    ),
    (
        "an unsafe sysctl",
        |p| {
            p["spec"]["securityContext"]["sysctls"] =
                json!([{"name": "kernel.msgmax", "value": "65536"}])
        },
        "forbidden sysctls",
    ),
    (
        "AppArmor unconfined",
        |p| {
            p["spec"]["containers"][0]["securityContext"]["appArmorProfile"] =
                json!({"type": "Unconfined"})
        },
        "AppArmor profile",
    ),
];

/// Each way out of the sandbox is refused by Pod Security `restricted` in
/// a tenant namespace, on its own; the compliant pod is admitted.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pod_security_restricted_refuses_each_violation_and_admits_a_compliant_pod() {
    let t = Tenant::ensure(KubeSettings::new(REGISTRY)).await;
    let mut admitted = Vec::new();
    for (i, (what, change, named)) in VIOLATIONS.iter().enumerate() {
        match t
            .create(compliant_but(&format!("violation-{i}"), *change))
            .await
        {
            Ok(_) => admitted.push(format!("{what}: admitted")),
            Err(status) => {
                let refused = status.code == 403
                    && status
                        .message
                        .contains("violates PodSecurity \"restricted:latest\"")
                    && status.message.contains(named);
                if !refused {
                    admitted.push(format!("{what}: {} {}", status.code, status.message));
                }
            }
        }
    }
    assert!(
        admitted.is_empty(),
        "in {}, not refused by Pod Security restricted as expected:\n{}",
        t.ns,
        admitted.join("\n")
    );
    let pod = t.create(compliant("compliant")).await;
    assert!(pod.is_ok(), "the compliant pod: {pod:?}");
}

/// A pod whose memory limit is beyond what is left of the quota is
/// refused, and so is a pod beyond its count.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_quota_refuses_memory_and_pods_beyond_it() {
    let mut settings = KubeSettings::new(REGISTRY);
    settings.quota.pods = 3;
    settings.quota.memory_limits = "1Gi".into();
    let t = Tenant::ensure(settings).await;

    // Under the LimitRange's most (4096 MiB) but over the quota.
    let big = compliant_but("big", |p| {
        p["spec"]["containers"][0]["resources"] = json!({"limits": {"memory": "2Gi"}})
    });
    let status = t.refused(big).await;
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status.message.contains("exceeded quota: sless-quota")
            && status.message.contains("limits.memory=2Gi"),
        "{status:?}"
    );

    // The LimitRange gives each 128 MiB: three fit in the memory, and the
    // quota's count is three.
    for i in 0..3 {
        let pod = t.create(compliant(&format!("small-{i}"))).await;
        assert!(pod.is_ok(), "pod {i} within the quota: {pod:?}");
    }
    let status = t.refused(compliant("one-too-many")).await;
    assert_eq!(status.code, 403, "{status:?}");
    assert!(
        status.message.contains("exceeded quota: sless-quota") && status.message.contains("pods=3"),
        "{status:?}"
    );
}

/// A pod that states no resources gets the LimitRange's defaults, which
/// cover every resource the quota counts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pod_without_resources_gets_the_limit_range_defaults() {
    let settings = KubeSettings::new(REGISTRY);
    let t = Tenant::ensure(settings.clone()).await;
    let pod = t.create(compliant("plain")).await.expect("a compliant pod");
    let resources = pod.spec.unwrap().containers[0].resources.clone().unwrap();
    let quantities =
        |m: Option<BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>| {
            m.unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .collect::<BTreeMap<String, String>>()
        };
    // docs/kubernetes.md: a container's defaults are the function's CPU
    // settings, 128 MiB of memory and a function's ephemeral storage
    // (`SLESS_KUBE_TMP_MB` and 64 MiB for its logs).
    let storage = format!("{}Mi", settings.tmp_mb + 64);
    let expected = |cpu: &str| {
        BTreeMap::from([
            ("cpu".to_owned(), cpu.to_owned()),
            ("memory".to_owned(), "128Mi".to_owned()),
            ("ephemeral-storage".to_owned(), storage.clone()),
        ])
    };
    assert_eq!(quantities(resources.limits), expected(&settings.cpu_limit));
    assert_eq!(
        quantities(resources.requests),
        expected(&settings.cpu_request)
    );
}

/// Whether `want` is part of `have`: every field of `want` is in `have`
/// with the same value (the server adds defaults of its own).
fn subset(want: &Value, have: &Value, at: &str, diffs: &mut Vec<String>) {
    match (want, have) {
        (Value::Object(w), Value::Object(h)) => {
            for (k, v) in w {
                subset(
                    v,
                    h.get(k).unwrap_or(&Value::Null),
                    &format!("{at}.{k}"),
                    diffs,
                );
            }
        }
        (Value::Array(w), Value::Array(h)) if w.len() == h.len() => {
            for (i, (w, h)) in w.iter().zip(h).enumerate() {
                subset(w, h, &format!("{at}[{i}]"), diffs);
            }
        }
        (w, h) if w == h => {}
        (Value::String(w), Value::String(h))
            if quantity(w).is_some() && quantity(w) == quantity(h) => {}
        (w, h) => diffs.push(format!("{at}: wrote {w}, the server has {h}")),
    }
}

/// The value of a Kubernetes quantity (`50m`, `4096Mi`, `16`), which the
/// server keeps in a canonical form of its own (`4096Mi` is `4Gi`).
fn quantity(text: &str) -> Option<f64> {
    const SUFFIXES: &[(&str, f64)] = &[
        ("Ki", 1024.0),
        ("Mi", 1048576.0),
        ("Gi", 1073741824.0),
        ("Ti", 1099511627776.0),
        ("m", 0.001),
        ("k", 1e3),
        ("M", 1e6),
        ("G", 1e9),
        ("T", 1e12),
        ("", 1.0),
    ];
    SUFFIXES.iter().find_map(|(suffix, scale)| {
        let number = text.strip_suffix(suffix)?;
        let plain = !number.is_empty() && number.bytes().all(|b| b.is_ascii_digit() || b == b'.');
        plain
            .then(|| number.parse::<f64>().ok().map(|n| n * scale))
            .flatten()
    })
}

/// Every object of a tenant namespace is on the server as the driver
/// rendered it (so the server's validation took it whole), and ensuring
/// the namespace again changes none of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_tenant_objects_are_on_the_server_as_written_and_a_second_ensure_changes_nothing() {
    let settings = KubeSettings::new(REGISTRY);
    let t = Tenant::ensure(settings.clone()).await;
    let rendered = tenant_objects(&settings, &t.ns);
    let mut diffs = Vec::new();

    let namespace = Api::<K8sNamespace>::all(t.client.clone())
        .get(t.ns.as_str())
        .await
        .unwrap();
    let labels = namespace.metadata.labels.clone().unwrap_or_default();
    for (k, v) in rendered.namespace.metadata.labels.clone().unwrap() {
        if labels.get(&k) != Some(&v) {
            diffs.push(format!(
                "namespace label {k}: wrote {v}, the server has {:?}",
                labels.get(&k)
            ));
        }
    }
    assert_eq!(
        labels
            .get("pod-security.kubernetes.io/enforce")
            .map(String::as_str),
        Some("restricted")
    );

    let policies = t.api::<NetworkPolicy>();
    let on_server: BTreeMap<String, NetworkPolicy> = policies
        .list(&ListParams::default())
        .await
        .unwrap()
        .items
        .into_iter()
        .map(|p| (p.name_any(), p))
        .collect();
    // docs/kubernetes.md: deny all, then DNS, the proxy in, and (the
    // default) egress out of the cluster; nothing else.
    let mut written: Vec<String> = rendered
        .network_policies
        .iter()
        .map(|p| p.name_any())
        .collect();
    written.sort();
    assert_eq!(
        written,
        [
            "sless-allow-dns",
            "sless-allow-egress",
            "sless-allow-proxy",
            "sless-deny-all"
        ],
        "the network policies the driver wrote"
    );
    assert_eq!(
        on_server.keys().cloned().collect::<Vec<_>>(),
        written,
        "the namespace's network policies"
    );
    assert_eq!(
        serde_json::to_value(&on_server["sless-deny-all"].spec).unwrap(),
        json!({"podSelector": {}, "policyTypes": ["Ingress", "Egress"]}),
        "the default deny: every pod, both ways, no rule"
    );
    assert_eq!(
        serde_json::to_value(&on_server["sless-allow-proxy"].spec).unwrap(),
        json!({
            "podSelector": {"matchLabels": {"sless.dev/component": "function"}},
            "policyTypes": ["Ingress"],
            "ingress": [{
                "from": [{
                    "namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": "sless"}},
                    "podSelector": {"matchLabels": {
                        "app.kubernetes.io/name": "sless", "app.kubernetes.io/component": "api"}},
                }],
                "ports": [{"protocol": "TCP", "port": 8080}],
            }],
        }),
        "functions are reached only by the API's pods, on the function port"
    );
    for policy in &rendered.network_policies {
        let name = policy.name_any();
        subset(
            &serde_json::to_value(&policy.spec).unwrap(),
            &serde_json::to_value(&on_server[&name].spec).unwrap(),
            &format!("networkpolicy/{name}.spec"),
            &mut diffs,
        );
    }

    let quota = t.api::<ResourceQuota>().get(QUOTA_NAME).await.unwrap();
    subset(
        &serde_json::to_value(&rendered.resource_quota.spec).unwrap(),
        &serde_json::to_value(&quota.spec).unwrap(),
        "resourcequota.spec",
        &mut diffs,
    );
    // And what it enforces is what the settings say.
    let hard = quota.status.unwrap().hard.unwrap();
    let hard: BTreeMap<&str, &str> = hard
        .iter()
        .map(|(k, v)| (k.as_str(), v.0.as_str()))
        .collect();
    assert_eq!(
        hard,
        BTreeMap::from([
            ("pods", "50"),
            ("limits.cpu", "16"),
            ("limits.memory", "32Gi"),
            ("limits.ephemeral-storage", "8Gi"),
        ])
    );

    let limits = t.api::<LimitRange>().get(LIMIT_RANGE_NAME).await.unwrap();
    subset(
        &serde_json::to_value(&rendered.limit_range.spec).unwrap(),
        &serde_json::to_value(&limits.spec).unwrap(),
        "limitrange.spec",
        &mut diffs,
    );
    assert!(diffs.is_empty(), "{}", diffs.join("\n"));

    // Server-side apply of the same objects is no change at all.
    let versions = |t: &Tenant| {
        let (policies, quotas, ranges) = (
            t.api::<NetworkPolicy>(),
            t.api::<ResourceQuota>(),
            t.api::<LimitRange>(),
        );
        let namespaces = Api::<K8sNamespace>::all(t.client.clone());
        let ns = t.ns.to_string();
        async move {
            let mut v = BTreeMap::new();
            v.insert(
                "namespace".to_owned(),
                namespaces.get(&ns).await.unwrap().resource_version(),
            );
            for p in policies.list(&ListParams::default()).await.unwrap() {
                v.insert(
                    format!("networkpolicy/{}", p.name_any()),
                    p.resource_version(),
                );
            }
            v.insert(
                "limitrange".to_owned(),
                ranges
                    .get(LIMIT_RANGE_NAME)
                    .await
                    .unwrap()
                    .resource_version(),
            );
            // The quota's status changes with what the namespace holds;
            // its spec is what the driver writes.
            v.insert(
                "resourcequota.spec".to_owned(),
                Some(serde_json::to_string(&quotas.get(QUOTA_NAME).await.unwrap().spec).unwrap()),
            );
            v
        }
    };
    let before = versions(&t).await;
    t.driver.ensure_namespace(&t.ns).await.unwrap();
    assert_eq!(
        versions(&t).await,
        before,
        "a second ensure changed objects"
    );
}
