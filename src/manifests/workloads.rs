//! The pods of sless itself: one Deployment per role, each migrating the
//! schema in an init container first, hardened like the functions they run.

use serde_json::{Value, json};

use super::{API_PORT, FN_PORT, IMAGE, METRICS_PORT, SERVICE_ACCOUNT, SYSTEM_NAMESPACE};

/// A role of the binary and how its pods run.
struct Role {
    /// `api`, `worker`, `projector`: the subcommand and the component label.
    name: &'static str,
    replicas: u32,
    args: &'static [&'static str],
    /// Only the worker talks to the Kubernetes API.
    kube_token: bool,
    jwt: bool,
    s3: bool,
    requests: (&'static str, &'static str),
    memory_limit: &'static str,
    /// The scratch directory (`--data-dir`) of the worker.
    data_dir: bool,
    /// How its pods stop while others take over (the API's); `None`: on
    /// SIGTERM the role ends its own work within the default grace.
    drain: Option<Drain>,
}

/// The graceful stop of the API's pods on SIGTERM: `/readyz` answers 503
/// at once, the listeners serve on for `delay_secs` while the pod leaves
/// its Service's endpoints (a terminating pod is taken out at once, and the
/// readiness probe takes it out too), then they stop accepting, close
/// kept-alive connections and give the calls in flight `drain_secs`.
#[derive(Clone, Copy)]
struct Drain {
    /// `SLESS_SHUTDOWN_DELAY_SECS`: long enough for the endpoints
    /// controller and every kube-proxy (and ingress controller) to stop
    /// sending the pod new connections, and longer than the readiness
    /// probe takes to see the 503 (`READY_PERIOD_SECS` times
    /// `READY_FAILURES`).
    delay_secs: u32,
    /// `SLESS_DRAIN_SECS`.
    drain_secs: u32,
}

const API_DRAIN: Drain = Drain {
    delay_secs: 5,
    drain_secs: 30,
};
/// The readiness probe of the API: a pod that answers 503 is out of its
/// Service within 4 s, inside the shutdown delay.
const READY_PERIOD_SECS: u32 = 2;
const READY_FAILURES: u32 = 2;
const _: () = assert!(API_DRAIN.delay_secs > READY_PERIOD_SECS * READY_FAILURES);
/// What a pod gets past its drain to end (the database pool closed, the
/// last traces sent) before the kubelet kills it.
const STOP_MARGIN_SECS: u32 = 10;
/// The grace of the roles that stop on their own: the worker hands its
/// items back within `SLESS_SHUTDOWN_GRACE_SECS` (8 s), the projector
/// ends its batch.
const GRACE_SECS: u32 = 30;

const API_LISTEN: &str = "0.0.0.0:8080";
/// The functions' origin: another port of the same pods (`FN_PORT`).
const FN_LISTEN: &str = "0.0.0.0:8081";

const ROLES: [Role; 3] = [
    Role {
        name: "api",
        replicas: 2,
        args: &["api", "--listen", API_LISTEN, "--fn-listen", FN_LISTEN],
        kube_token: false,
        jwt: true,
        s3: true,
        requests: ("100m", "256Mi"),
        // Up to SLESS_UPLOAD_CONCURRENCY (4) uploads of 50 MiB zips and
        // 250 MiB of unpacked files each are checked in memory.
        memory_limit: "2Gi",
        data_dir: false,
        drain: Some(API_DRAIN),
    },
    Role {
        name: "worker",
        replicas: 2,
        args: &["worker"],
        kube_token: true,
        jwt: false,
        s3: true,
        requests: ("100m", "256Mi"),
        memory_limit: "1Gi",
        data_dir: true,
        drain: None,
    },
    // One projector: it applies the log in commit order under a lock on its
    // checkpoint row, so a second one would only wait for the first.
    Role {
        name: "projector",
        replicas: 1,
        args: &["projector"],
        kube_token: false,
        jwt: false,
        s3: true,
        requests: ("100m", "128Mi"),
        memory_limit: "512Mi",
        data_dir: false,
        drain: None,
    },
];

pub fn selector(component: &str) -> Value {
    json!({"app.kubernetes.io/name": "sless", "app.kubernetes.io/component": component})
}

fn secret_env(name: &str, secret: &str, optional: bool) -> Value {
    let mut r = json!({"name": secret, "key": name});
    if optional {
        r["optional"] = json!(true);
    }
    json!({"name": name, "valueFrom": {"secretKeyRef": r}})
}

fn container_security() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "capabilities": {"drop": ["ALL"]},
        "privileged": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
    })
}

fn container(
    name: &str,
    args: &[&str],
    env: Vec<Value>,
    resources: Value,
    mounts: Vec<Value>,
) -> Value {
    json!({
        "name": name,
        "image": IMAGE,
        "command": ["sless"],
        "args": args,
        "envFrom": [{"configMapRef": {"name": "sless-config"}}],
        "env": env,
        "resources": resources,
        "securityContext": container_security(),
        "volumeMounts": mounts,
    })
}

fn deployment(role: &Role, labels: &Value) -> Value {
    let mut env = vec![
        secret_env("DATABASE_URL", "sless-database", false),
        json!({"name": "SLESS_METRICS_LISTEN", "value": format!("0.0.0.0:{METRICS_PORT}")}),
    ];
    if role.s3 {
        env.push(secret_env("S3_ACCESS_KEY_ID", "sless-s3", false));
        env.push(secret_env("S3_SECRET_ACCESS_KEY", "sless-s3", false));
    }
    if role.jwt {
        env.push(secret_env("SLESS_JWT_SECRET", "sless-jwt", true));
    }
    let mut mounts = vec![json!({"name": "tmp", "mountPath": "/tmp"})];
    let mut volumes = vec![json!({"name": "tmp", "emptyDir": {"sizeLimit": "256Mi"}})];
    if role.jwt {
        // Public keys or a key set for RS256/ES256 (SLESS_JWT_PUBLIC_KEY_FILE,
        // SLESS_JWKS_FILE), when the Secret holds them.
        mounts.push(json!({"name": "jwt", "mountPath": "/etc/sless/jwt", "readOnly": true}));
        volumes
            .push(json!({"name": "jwt", "secret": {"secretName": "sless-jwt", "optional": true}}));
    }
    if let Some(d) = &role.drain {
        env.push(json!({"name": "SLESS_SHUTDOWN_DELAY_SECS", "value": d.delay_secs.to_string()}));
        env.push(json!({"name": "SLESS_DRAIN_SECS", "value": d.drain_secs.to_string()}));
    }
    if role.data_dir {
        env.push(json!({"name": "SLESS_DATA_DIR", "value": "/var/lib/sless"}));
        mounts.push(json!({"name": "data", "mountPath": "/var/lib/sless"}));
        volumes.push(json!({"name": "data", "emptyDir": {"sizeLimit": "1Gi"}}));
    }
    let resources = json!({
        "requests": {"cpu": role.requests.0, "memory": role.requests.1, "ephemeral-storage": "256Mi"},
        "limits": {"memory": role.memory_limit, "ephemeral-storage": "2Gi"},
    });
    let mut main = container(role.name, role.args, env, resources, mounts);
    let metrics = json!({"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"});
    main["ports"] = json!([metrics]);
    if role.name == "api" {
        main["ports"] = json!([
            {"name": "http", "containerPort": API_PORT, "protocol": "TCP"},
            {"name": "functions", "containerPort": FN_PORT, "protocol": "TCP"},
            metrics,
        ]);
        main["readinessProbe"] = json!({
            "httpGet": {"path": "/readyz", "port": "http"},
            "periodSeconds": READY_PERIOD_SECS, "timeoutSeconds": READY_PERIOD_SECS,
            "failureThreshold": READY_FAILURES,
        });
        main["livenessProbe"] = json!({
            "httpGet": {"path": "/healthz", "port": "http"},
            "initialDelaySeconds": 10, "periodSeconds": 10, "timeoutSeconds": 5, "failureThreshold": 6,
        });
    }
    // The worker and the projector serve only their metrics: no probe. Each exits when
    // it cannot go on (its task ends with the error), and the kubelet
    // restarts it.
    let migrate = container(
        "migrate",
        &["migrate"],
        vec![secret_env("DATABASE_URL", "sless-database", false)],
        json!({
            "requests": {"cpu": "50m", "memory": "64Mi", "ephemeral-storage": "16Mi"},
            "limits": {"memory": "256Mi", "ephemeral-storage": "256Mi"},
        }),
        vec![json!({"name": "tmp", "mountPath": "/tmp"})],
    );
    let grace = role.drain.as_ref().map_or(GRACE_SECS, |d| {
        d.delay_secs + d.drain_secs + STOP_MARGIN_SECS
    });
    let mut pod_labels = labels.clone();
    pod_labels["app.kubernetes.io/component"] = json!(role.name);
    let strategy = if role.replicas == 1 {
        json!({"type": "Recreate"})
    } else {
        json!({"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}})
    };
    json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": format!("sless-{}", role.name), "namespace": SYSTEM_NAMESPACE, "labels": pod_labels},
        "spec": {
            "replicas": role.replicas,
            "revisionHistoryLimit": 5,
            "selector": {"matchLabels": selector(role.name)},
            "strategy": strategy,
            "template": {
                "metadata": {
                    "labels": pod_labels,
                    // Where Prometheus's pod discovery scrapes it
                    // (docs/observability.md).
                    "annotations": {
                        "prometheus.io/scrape": "true",
                        "prometheus.io/port": METRICS_PORT.to_string(),
                        "prometheus.io/path": "/metrics",
                    },
                },
                "spec": {
                    "serviceAccountName": SERVICE_ACCOUNT,
                    "automountServiceAccountToken": role.kube_token,
                    "enableServiceLinks": false,
                    "securityContext": {
                        "runAsNonRoot": true,
                        "runAsUser": 10001,
                        "runAsGroup": 10001,
                        "fsGroup": 10001,
                        "seccompProfile": {"type": "RuntimeDefault"},
                    },
                    "terminationGracePeriodSeconds": grace,
                    "initContainers": [migrate],
                    "containers": [main],
                    "volumes": volumes,
                },
            },
        },
    })
}

fn pdb(component: &str, labels: &Value) -> Value {
    json!({
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": format!("sless-{component}"), "namespace": SYSTEM_NAMESPACE, "labels": labels},
        "spec": {"minAvailable": 1, "selector": {"matchLabels": selector(component)}},
    })
}

/// `api.yaml`: the API and the invoke proxy (on a port of its own), their
/// Service and the disruption budget.
pub fn api(labels: &Value) -> Vec<Value> {
    vec![
        deployment(&ROLES[0], labels),
        json!({
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": {"name": "sless-api", "namespace": SYSTEM_NAMESPACE, "labels": labels},
            "spec": {
                "type": "ClusterIP",
                "selector": selector("api"),
                "ports": [
                    {"name": "http", "port": 80, "targetPort": "http", "protocol": "TCP"},
                    {"name": "functions", "port": 81, "targetPort": "functions", "protocol": "TCP"},
                ],
            },
        }),
        pdb("api", labels),
    ]
}

/// `worker.yaml`.
pub fn worker(labels: &Value) -> Vec<Value> {
    vec![deployment(&ROLES[1], labels), pdb("worker", labels)]
}

/// `projector.yaml`. No disruption budget: with one replica it would block
/// every node drain.
pub fn projector(labels: &Value) -> Vec<Value> {
    vec![deployment(&ROLES[2], labels)]
}

/// `ingress.yaml`: two hosts, the API's (rule 0) and the functions' (rule
/// 1), so that no function answers on the API's origin (the overlay sets
/// the hosts, their TLS and the ingress class).
pub fn ingress(labels: &Value) -> Vec<Value> {
    let path = |path: &str, kind: &str, port: &str| {
        json!({
            "path": path,
            "pathType": kind,
            "backend": {"service": {"name": "sless-api", "port": {"name": port}}},
        })
    };
    vec![json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "Ingress",
        "metadata": {"name": "sless", "namespace": SYSTEM_NAMESPACE, "labels": labels},
        "spec": {"rules": [
            {"http": {"paths": [
                path("/v1", "Prefix", "http"),
                path("/fn", "Prefix", "http"),
                path("/openapi.json", "Exact", "http"),
                path("/healthz", "Exact", "http"),
            ]}},
            {"http": {"paths": [
                path("/fn", "Prefix", "functions"),
                path("/healthz", "Exact", "functions"),
            ]}},
        ]},
    })]
}
