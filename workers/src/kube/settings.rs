//! What the Kubernetes driver is configured with.

use std::collections::BTreeMap;

/// Settings of the Kubernetes driver. `sless` reads them from the
/// environment (`SLESS_KUBE_*`); every field has a default except the
/// registry.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KubeSettings {
    /// Where images are pushed and pulled from, without a trailing slash,
    /// e.g. `registry.example.com/sless`. A build pushes
    /// `{registry}/{ns}-{name}:v{version}-{sha8}`; what runs is the digest
    /// that push gave, `{registry}/{ns}-{name}@sha256:…`.
    pub registry: String,
    /// The namespace sless itself runs in (its API pods proxy to functions).
    pub system_namespace: String,
    /// Labels of the pods allowed to reach functions (the invoke proxy).
    pub proxy_pod_labels: BTreeMap<String, String>,
    /// The namespace kaniko builds run in. It holds the registry push
    /// Secret; tenant namespaces never do.
    pub build_namespace: String,
    /// The base image of each runtime is `{runtime_image_prefix}{runtime}:{runtime_image_tag}`
    /// (e.g. `registry.example.com/sless/sless-runtime-python3.11:0.1.0`),
    /// passed to kaniko as the build argument `SLESS_RUNTIME_IMAGE`.
    pub runtime_image_prefix: String,
    pub runtime_image_tag: String,
    /// The kaniko executor image.
    pub kaniko_image: String,
    /// A Secret of type `kubernetes.io/dockerconfigjson` in the build
    /// namespace, mounted into kaniko to push.
    pub registry_push_secret: String,
    /// A Secret of type `kubernetes.io/dockerconfigjson` in the system
    /// namespace, copied into each tenant namespace as an image pull
    /// Secret. `None`: nodes pull without one.
    pub registry_pull_secret: Option<String>,
    /// A Secret in the build namespace whose `ca.crt` (PEM) kaniko trusts
    /// besides the public CAs: when it fetches the build context (a
    /// presigned URL of the object store) and when it talks to the
    /// registry. The operator creates it; sless only names it in the Job.
    /// `None`: the public CAs only.
    pub build_ca_secret: Option<String>,
    /// Where kaniko keeps the layers of dependency steps it may reuse
    /// (`--cache-repo`), without a trailing slash: a build of the tenant
    /// namespace `ns` reads and writes `{build_cache_repo}/{ns}` only.
    /// `None`: no layer cache (`--cache=false`, one snapshot).
    pub build_cache_repo: Option<String>,
    /// How long a build may run (`activeDeadlineSeconds` of the kaniko Job).
    pub build_timeout_secs: u32,
    /// How long a finished build or job is kept (`ttlSecondsAfterFinished`).
    pub finished_ttl_secs: u32,
    /// How long a rollout may take before it is failed
    /// (`progressDeadlineSeconds`).
    pub rollout_timeout_secs: u32,
    /// The port function containers listen on and their Service exposes.
    pub function_port: u16,
    /// How the invoke proxy reaches a served function: the endpoint the
    /// driver records for it.
    pub function_address: FunctionAddress,
    /// CPU request and limit of a function container, e.g. `100m`, `1`.
    pub cpu_request: String,
    pub cpu_limit: String,
    /// Size of the writable `/tmp` of a function, in MiB. Its
    /// ephemeral-storage request and limit are this plus room for its logs.
    pub tmp_mb: u32,
    /// `startingDeadlineSeconds` of CronJobs.
    pub cron_starting_deadline_secs: i64,
    /// Whether functions may open connections out of the cluster. `true`:
    /// egress to any address except `egress_denied_cidrs`; `false`: DNS only.
    pub function_egress: bool,
    /// Addresses functions never reach even with `function_egress`: by
    /// default the private ranges (where pods, Services and the nodes
    /// usually are), carrier-grade NAT and link-local (the cloud metadata
    /// endpoint, which hands out node credentials).
    pub egress_denied_cidrs: Vec<String>,
    /// CPU request and limit of a kaniko build, e.g. `500m`, `2`.
    pub build_cpu_request: String,
    pub build_cpu_limit: String,
    /// Memory of a kaniko build, in MiB (request and limit).
    pub build_memory_mb: u32,
    /// Scratch disk of a kaniko build (the unpacked base image, the context
    /// and the layers), in MiB (its ephemeral-storage request and limit).
    pub build_ephemeral_mb: u32,
    /// ResourceQuota of a tenant namespace.
    pub quota: TenantQuota,
}

/// How the invoke proxy reaches a served function, which is the endpoint a
/// deploy records (`FunctionDeployed`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FunctionAddress {
    /// `http://{name}.{ns}.svc.cluster.local:{port}`, the Service's name in
    /// the cluster's DNS: for sless running in the cluster.
    #[default]
    Dns,
    /// `http://{clusterIP}:{port}`, the address the cluster gave the
    /// Service: for sless on a machine that routes the Service range
    /// (kube-proxy there) but does not resolve cluster names, e.g. outside
    /// the cluster.
    ClusterIp,
}

impl FunctionAddress {
    /// `dns` or `cluster-ip`, as the setting spells it.
    pub fn parse(text: &str) -> Option<FunctionAddress> {
        match text {
            "dns" => Some(FunctionAddress::Dns),
            "cluster-ip" => Some(FunctionAddress::ClusterIp),
            _ => None,
        }
    }
}

/// The ResourceQuota `ensure` gives each tenant namespace.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TenantQuota {
    pub pods: u32,
    /// Sums over the namespace, as Kubernetes quantities (`8`, `16Gi`).
    pub cpu_limits: String,
    pub memory_limits: String,
    pub ephemeral_storage_limits: String,
}

impl KubeSettings {
    /// The defaults, pushing to and pulling from `registry`.
    pub fn new(registry: impl Into<String>) -> KubeSettings {
        let registry = registry.into().trim_end_matches('/').to_owned();
        KubeSettings {
            runtime_image_prefix: format!("{registry}/sless-runtime-"),
            build_cache_repo: Some(format!("{registry}/cache")),
            runtime_image_tag: env!("CARGO_PKG_VERSION").into(),
            registry,
            system_namespace: "sless".into(),
            proxy_pod_labels: BTreeMap::from([
                ("app.kubernetes.io/name".into(), "sless".into()),
                ("app.kubernetes.io/component".into(), "api".into()),
            ]),
            build_namespace: "sless-builds".into(),
            kaniko_image: "gcr.io/kaniko-project/executor:v1.23.2".into(),
            registry_push_secret: "sless-registry-push".into(),
            registry_pull_secret: None,
            build_ca_secret: None,
            build_timeout_secs: 900,
            finished_ttl_secs: 3600,
            rollout_timeout_secs: 300,
            function_port: 8080,
            function_address: FunctionAddress::Dns,
            cpu_request: "50m".into(),
            cpu_limit: "1".into(),
            tmp_mb: 64,
            cron_starting_deadline_secs: 3600,
            function_egress: true,
            egress_denied_cidrs: [
                "10.0.0.0/8",
                "172.16.0.0/12",
                "192.168.0.0/16",
                "100.64.0.0/10",
                "169.254.0.0/16",
            ]
            .map(String::from)
            .to_vec(),
            build_cpu_request: "500m".into(),
            build_cpu_limit: "2".into(),
            build_memory_mb: 2048,
            build_ephemeral_mb: 10240,
            quota: TenantQuota {
                pods: 50,
                cpu_limits: "16".into(),
                memory_limits: "32Gi".into(),
                ephemeral_storage_limits: "8Gi".into(),
            },
        }
    }
}
