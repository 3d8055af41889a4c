//! The settings the manifests give the binary: which environment variables
//! exist, their defaults, and the values of the ConfigMap `sless-config`.
//!
//! The binary reads its settings in `config.rs` (and the Kubernetes
//! driver's in the same place); this table names the ones the manifests
//! set. `tests/manifests.rs` checks that every variable the manifests set is
//! in this table and that every name in it is read somewhere in the
//! binary's sources, so a renamed or removed setting fails the test rather
//! than being silently ignored in a cluster.

use serde::Serialize;

use super::{BUILD_NAMESPACE, REGISTRY_PUSH_SECRET, SYSTEM_NAMESPACE};

/// One environment variable the binary reads.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Setting {
    pub name: &'static str,
    /// The binary's default, as the documentation states it.
    pub default: &'static str,
    /// Where the manifests take it from.
    pub source: Source,
    pub what: &'static str,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum Source {
    /// The ConfigMap `sless-config`, with this value in the base.
    Config(&'static str),
    /// The ConfigMap `sless-config`, set by the overlay (no value in the base).
    Overlay,
    /// A key (named like the variable) of this Secret.
    Secret(&'static str),
    /// Set on one role's container.
    Container,
    /// Read when set; the manifests leave it to the overlay.
    Unset,
}

macro_rules! setting {
    ($name:literal, $default:expr, $source:expr, $what:literal) => {
        Setting {
            name: $name,
            default: $default,
            source: $source,
            what: $what,
        }
    };
}

use Source::{Config, Container, Overlay, Secret, Unset};

/// Every setting the manifests concern, in the order the documentation
/// lists them.
pub const SETTINGS: &[Setting] = &[
    setting!(
        "DATABASE_URL",
        "none (required)",
        Secret("sless-database"),
        "PostgreSQL connection URL of the event log, the work queue and the read models"
    ),
    setting!(
        "S3_ENDPOINT",
        "none: AWS S3",
        Overlay,
        "URL of an S3-compatible server; leave unset for AWS S3"
    ),
    setting!(
        "SLESS_FN_URL",
        "`http://` and the address the functions' listener has",
        Overlay,
        "the functions' origin as callers reach it: the Ingress's second host (`https://fn.example.com`); what functions' `url` starts with, and where `/fn/...` on the API's host redirects"
    ),
    setting!(
        "S3_BUCKET",
        "sless",
        Config("sless"),
        "bucket of zips, build contexts and version manifests"
    ),
    setting!(
        "S3_REGION",
        "us-east-1",
        Config("us-east-1"),
        "region of the bucket"
    ),
    setting!(
        "S3_FORCE_PATH_STYLE",
        "true with S3_ENDPOINT, else false",
        Unset,
        "path-style bucket addressing (`false` for virtual-hosted style)"
    ),
    setting!(
        "S3_PRESIGN_ENDPOINT",
        "S3_ENDPOINT",
        Unset,
        "the address build pods reach the S3 server at, when it is another than sless's: presigned URLs name it"
    ),
    setting!(
        "S3_ACCESS_KEY_ID",
        "none (required)",
        Secret("sless-s3"),
        "S3 access key"
    ),
    setting!(
        "S3_SECRET_ACCESS_KEY",
        "none (required)",
        Secret("sless-s3"),
        "S3 secret key"
    ),
    setting!(
        "SLESS_JWT_ALGORITHM",
        "HS256",
        Config("HS256"),
        "the one algorithm tokens may use: HS256, RS256 or ES256 (docs/configuration.md)"
    ),
    setting!(
        "SLESS_JWT_SECRET",
        "none",
        Secret("sless-jwt"),
        "HS256 shared secret, at least 32 bytes (optional key of the Secret: leave it out with RS256/ES256)"
    ),
    setting!(
        "SLESS_JWT_PUBLIC_KEY_FILE",
        "none",
        Unset,
        "RS256/ES256: PEM public keys; the Secret `sless-jwt` is mounted at /etc/sless/jwt"
    ),
    setting!(
        "SLESS_JWKS_FILE",
        "none",
        Unset,
        "RS256/ES256: a JSON Web Key Set file, e.g. /etc/sless/jwt/jwks.json"
    ),
    setting!(
        "SLESS_DATA_DIR",
        "./.sless-worker",
        Container,
        "the worker's scratch directory (an emptyDir at /var/lib/sless)"
    ),
    setting!(
        "SLESS_METRICS_LISTEN",
        "unset",
        Container,
        "where each role serves /metrics without a token: 0.0.0.0:9464, the port its annotations name"
    ),
    setting!(
        "SLESS_SHUTDOWN_DELAY_SECS",
        "0",
        Container,
        "the API on SIGTERM: how long /readyz answers 503 while the listeners still serve, so the pod leaves its Service first (the API's container: 5)"
    ),
    setting!(
        "SLESS_DRAIN_SECS",
        "30",
        Container,
        "the API on SIGTERM, after the delay: how long the calls in flight get to finish (the API's container: 30; the pod's grace is the two plus 10 s)"
    ),
    setting!(
        "SLESS_DRIVER",
        "local",
        Config("kubernetes"),
        "where functions run: `local` (processes beside the worker) or `kubernetes`"
    ),
    setting!(
        "SLESS_KUBE_REGISTRY",
        "none (required)",
        Overlay,
        "registry builds push to (`{registry}/{ns}-{name}:v{version}-{sha8}`) and functions run from, by the digest of that push (`{registry}/{ns}-{name}@sha256:…`)"
    ),
    setting!(
        "SLESS_KUBE_SYSTEM_NAMESPACE",
        "sless",
        Config(SYSTEM_NAMESPACE),
        "namespace sless runs in; tenant NetworkPolicies admit the API's pods from it"
    ),
    setting!(
        "SLESS_KUBE_BUILD_NAMESPACE",
        "sless-builds",
        Config(BUILD_NAMESPACE),
        "namespace of the kaniko build Jobs and the registry push Secret"
    ),
    setting!(
        "SLESS_KUBE_KANIKO_IMAGE",
        "gcr.io/kaniko-project/executor:v1.23.2",
        Config("gcr.io/kaniko-project/executor:v1.23.2"),
        "the kaniko executor image"
    ),
    setting!(
        "SLESS_KUBE_REGISTRY_PUSH_SECRET",
        "sless-registry-push",
        Config(REGISTRY_PUSH_SECRET),
        "dockerconfigjson Secret in the build namespace that kaniko pushes with"
    ),
    setting!(
        "SLESS_KUBE_REGISTRY_PULL_SECRET",
        "none: nodes pull without one",
        Unset,
        "dockerconfigjson Secret in the system namespace, copied into each tenant namespace as its image pull Secret"
    ),
    setting!(
        "SLESS_KUBE_BUILD_CA_SECRET",
        "none: the public CAs only",
        Unset,
        "Secret in the build namespace holding `ca.crt` (PEM), a private CA kaniko trusts besides the public ones"
    ),
    setting!(
        "SLESS_KUBE_BUILD_CACHE",
        "true",
        Unset,
        "whether kaniko reuses the layers of dependency steps from the registry (`false`: every build installs its dependencies)"
    ),
    setting!(
        "SLESS_KUBE_BUILD_CACHE_REPO",
        "{registry}/cache",
        Unset,
        "repository of kaniko's cached layers; a build of tenant namespace `ns` uses `{repo}/{ns}`"
    ),
    setting!(
        "SLESS_KUBE_RUNTIME_IMAGE_PREFIX",
        "{registry}/sless-runtime-",
        Unset,
        "base image of a runtime: `{prefix}{runtime}:{tag}`, e.g. `…/sless-runtime-python3.11:0.1.0`"
    ),
    setting!(
        "SLESS_KUBE_RUNTIME_IMAGE_TAG",
        "the binary's version",
        Unset,
        "tag of the runtime base images"
    ),
    setting!(
        "SLESS_KUBE_BUILD_TIMEOUT_SECS",
        "900",
        Config("900"),
        "how long a build may run (`activeDeadlineSeconds` of the kaniko Job)"
    ),
    setting!(
        "SLESS_KUBE_FINISHED_TTL_SECS",
        "3600",
        Config("3600"),
        "how long finished build and job Jobs are kept (`ttlSecondsAfterFinished`)"
    ),
    setting!(
        "SLESS_KUBE_ROLLOUT_TIMEOUT_SECS",
        "300",
        Config("300"),
        "how long a rollout may take before the deploy fails (`progressDeadlineSeconds`)"
    ),
    setting!(
        "SLESS_KUBE_FUNCTION_PORT",
        "8080",
        Config("8080"),
        "port function containers listen on and their Service exposes"
    ),
    setting!(
        "SLESS_KUBE_FUNCTION_ADDRESS",
        "dns",
        Unset,
        "where the invoke proxy calls a function: `dns` (the Service's cluster DNS name) or `cluster-ip` (its cluster IP, for sless outside the cluster)"
    ),
    setting!(
        "SLESS_KUBE_CPU_REQUEST",
        "50m",
        Config("50m"),
        "CPU request of a function container"
    ),
    setting!(
        "SLESS_KUBE_CPU_LIMIT",
        "1",
        Config("1"),
        "CPU limit of a function container"
    ),
    setting!(
        "SLESS_KUBE_TMP_MB",
        "64",
        Config("64"),
        "size of a function's writable /tmp in MiB (its ephemeral-storage limit is this plus 64 MiB for logs)"
    ),
    setting!(
        "SLESS_KUBE_FUNCTION_EGRESS",
        "true",
        Config("true"),
        "whether functions may open connections out of the cluster (false: DNS only)"
    ),
    setting!(
        "SLESS_KUBE_EGRESS_DENIED_CIDRS",
        "the private ranges, 100.64.0.0/10 and 169.254.0.0/16",
        Unset,
        "comma-separated address ranges functions never reach, even with egress allowed"
    ),
    setting!(
        "SLESS_KUBE_BUILD_CPU_REQUEST",
        "500m",
        Config("500m"),
        "CPU request of a kaniko build"
    ),
    setting!(
        "SLESS_KUBE_BUILD_CPU_LIMIT",
        "2",
        Config("2"),
        "CPU limit of a kaniko build"
    ),
    setting!(
        "SLESS_KUBE_BUILD_MEMORY_MB",
        "2048",
        Config("2048"),
        "memory of a kaniko build in MiB (request and limit)"
    ),
    setting!(
        "SLESS_KUBE_BUILD_EPHEMERAL_MB",
        "10240",
        Config("10240"),
        "ephemeral storage of a kaniko build in MiB (its layers are written there)"
    ),
    setting!(
        "SLESS_KUBE_QUOTA_PODS",
        "50",
        Config("50"),
        "ResourceQuota of a tenant namespace: pods"
    ),
    setting!(
        "SLESS_KUBE_QUOTA_CPU",
        "16",
        Config("16"),
        "ResourceQuota of a tenant namespace: sum of CPU limits"
    ),
    setting!(
        "SLESS_KUBE_QUOTA_MEMORY",
        "32Gi",
        Config("32Gi"),
        "ResourceQuota of a tenant namespace: sum of memory limits"
    ),
    setting!(
        "SLESS_KUBE_QUOTA_EPHEMERAL_STORAGE",
        "8Gi",
        Config("8Gi"),
        "ResourceQuota of a tenant namespace: sum of ephemeral-storage limits"
    ),
];

/// The base's `config.env`, the source of the ConfigMap `sless-config`.
pub fn config_env() -> String {
    let mut out = String::from(
        "# Settings of sless that are not secret (docs/kubernetes.md explains each).\n\
         # Overlays change them with a configMapGenerator of behavior `merge`.\n",
    );
    for s in SETTINGS {
        if let Source::Config(value) = s.source {
            out.push_str(&format!("{}={value}\n", s.name));
        }
    }
    out
}
