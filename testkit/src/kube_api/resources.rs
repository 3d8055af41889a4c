//! The resource types the server knows, how a request path names one of
//! them, the `Status` errors every failure is answered with, and the
//! validation of names and labels.

use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

/// One kind of object: where it lives in the API and whether it belongs to a
/// namespace.
#[derive(Debug, PartialEq, Eq)]
pub struct ResourceType {
    pub group: &'static str,
    pub version: &'static str,
    pub plural: &'static str,
    pub kind: &'static str,
    pub namespaced: bool,
}

const fn rt(
    group: &'static str,
    version: &'static str,
    plural: &'static str,
    kind: &'static str,
    namespaced: bool,
) -> ResourceType {
    ResourceType {
        group,
        version,
        plural,
        kind,
        namespaced,
    }
}

/// Every resource type served. Anything else is answered with 404.
pub static RESOURCES: &[ResourceType] = &[
    rt("", "v1", "namespaces", "Namespace", false),
    rt("", "v1", "pods", "Pod", true),
    rt("", "v1", "services", "Service", true),
    rt("", "v1", "secrets", "Secret", true),
    rt("", "v1", "configmaps", "ConfigMap", true),
    rt("", "v1", "resourcequotas", "ResourceQuota", true),
    rt("", "v1", "limitranges", "LimitRange", true),
    rt("", "v1", "serviceaccounts", "ServiceAccount", true),
    rt("", "v1", "events", "Event", true),
    rt("apps", "v1", "deployments", "Deployment", true),
    rt("apps", "v1", "replicasets", "ReplicaSet", true),
    rt("batch", "v1", "jobs", "Job", true),
    rt("batch", "v1", "cronjobs", "CronJob", true),
    rt(
        "networking.k8s.io",
        "v1",
        "networkpolicies",
        "NetworkPolicy",
        true,
    ),
    rt("networking.k8s.io", "v1", "ingresses", "Ingress", true),
    rt(
        "policy",
        "v1",
        "poddisruptionbudgets",
        "PodDisruptionBudget",
        true,
    ),
    rt("rbac.authorization.k8s.io", "v1", "roles", "Role", true),
    rt(
        "rbac.authorization.k8s.io",
        "v1",
        "rolebindings",
        "RoleBinding",
        true,
    ),
    rt(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterroles",
        "ClusterRole",
        false,
    ),
    rt(
        "rbac.authorization.k8s.io",
        "v1",
        "clusterrolebindings",
        "ClusterRoleBinding",
        false,
    ),
];

impl ResourceType {
    pub fn find(group: &str, version: &str, plural: &str) -> Option<&'static ResourceType> {
        RESOURCES
            .iter()
            .find(|r| r.group == group && r.version == version && r.plural == plural)
    }

    pub fn namespaces() -> &'static ResourceType {
        &RESOURCES[0]
    }

    pub fn pods() -> &'static ResourceType {
        &RESOURCES[1]
    }

    /// `v1` for the core group, `{group}/{version}` otherwise.
    pub fn api_version(&self) -> String {
        if self.group.is_empty() {
            self.version.to_owned()
        } else {
            format!("{}/{}", self.group, self.version)
        }
    }

    /// `plural` or `plural.group`, as Kubernetes names a resource in messages.
    pub fn qualified(&self) -> String {
        if self.group.is_empty() {
            self.plural.to_owned()
        } else {
            format!("{}.{}", self.plural, self.group)
        }
    }

    /// The path of an object (or of the collection when `name` is `None`).
    pub fn path(&self, namespace: Option<&str>, name: Option<&str>) -> String {
        let mut p = if self.group.is_empty() {
            format!("/api/{}", self.version)
        } else {
            format!("/apis/{}/{}", self.group, self.version)
        };
        if let Some(ns) = namespace.filter(|_| self.namespaced) {
            p.push_str(&format!("/namespaces/{ns}"));
        }
        p.push('/');
        p.push_str(self.plural);
        if let Some(n) = name {
            p.push('/');
            p.push_str(n);
        }
        p
    }
}

/// What a request path addresses.
#[derive(Debug, Clone)]
pub struct Target {
    pub rt: &'static ResourceType,
    /// `None` for cluster-scoped types, and for lists across all namespaces.
    pub namespace: Option<String>,
    pub name: Option<String>,
    pub sub: Option<String>,
}

impl Target {
    /// Parses `/api/v1/...` and `/apis/{group}/{version}/...`.
    pub fn parse(path: &str) -> Result<Target, ApiError> {
        let not_found = || ApiError::not_found_path(path);
        let segs: Vec<&str> = path.trim_matches('/').split('/').collect();
        let (group, version, rest) = match segs.as_slice() {
            ["api", v, rest @ ..] => ("", *v, rest),
            ["apis", g, v, rest @ ..] => (*g, *v, rest),
            _ => return Err(not_found()),
        };
        if rest.iter().any(|s| s.is_empty()) {
            return Err(not_found());
        }
        let (namespace, plural, name, sub) = match rest {
            // The namespace object's own subresources.
            ["namespaces", ns, sub @ ("status" | "finalize")] if group.is_empty() => {
                (None, "namespaces", Some(*ns), Some(*sub))
            }
            ["namespaces", ns, plural, tail @ ..] if tail.len() <= 2 => (
                Some(*ns),
                *plural,
                tail.first().copied(),
                tail.get(1).copied(),
            ),
            [plural, tail @ ..] if tail.len() <= 2 => {
                (None, *plural, tail.first().copied(), tail.get(1).copied())
            }
            _ => return Err(not_found()),
        };
        let rt = ResourceType::find(group, version, plural).ok_or_else(not_found)?;
        if !rt.namespaced && namespace.is_some() {
            return Err(not_found());
        }
        if rt.namespaced && namespace.is_none() && name.is_some() {
            return Err(not_found());
        }
        Ok(Target {
            rt,
            namespace: namespace.map(str::to_owned),
            name: name.map(str::to_owned),
            sub: sub.map(str::to_owned),
        })
    }
}

/// A failed request, answered as a Kubernetes `Status` object: the shape
/// kube-rs parses into `kube::Error::Api`.
#[derive(Debug, Clone)]
pub struct ApiError {
    pub code: u16,
    pub reason: &'static str,
    pub message: String,
    pub details: Option<Value>,
}

impl ApiError {
    pub fn new(code: u16, reason: &'static str, message: impl Into<String>) -> ApiError {
        ApiError {
            code,
            reason,
            message: message.into(),
            details: None,
        }
    }

    /// An error with the reason Kubernetes gives for `code`.
    pub fn from_code(code: u16) -> ApiError {
        let reason = match code {
            400 => "BadRequest",
            401 => "Unauthorized",
            403 => "Forbidden",
            404 => "NotFound",
            405 => "MethodNotAllowed",
            409 => "Conflict",
            410 => "Expired",
            415 => "UnsupportedMediaType",
            422 => "Invalid",
            429 => "TooManyRequests",
            503 => "ServiceUnavailable",
            504 => "Timeout",
            _ => "InternalError",
        };
        ApiError::new(code, reason, format!("injected failure ({code} {reason})"))
    }

    pub fn bad_request(message: impl Into<String>) -> ApiError {
        ApiError::new(400, "BadRequest", message)
    }

    pub fn invalid(rt: &ResourceType, name: &str, message: impl Into<String>) -> ApiError {
        let message = message.into();
        ApiError::new(
            422,
            "Invalid",
            format!("{} \"{name}\" is invalid: {message}", rt.kind),
        )
        .with_details(rt, name)
    }

    pub fn not_found(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("{} \"{name}\" not found", rt.qualified()),
        )
        .with_details(rt, name)
    }

    pub fn not_found_path(path: &str) -> ApiError {
        ApiError::new(
            404,
            "NotFound",
            format!("the server could not find the requested resource ({path})"),
        )
    }

    pub fn already_exists(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::new(
            409,
            "AlreadyExists",
            format!("{} \"{name}\" already exists", rt.qualified()),
        )
        .with_details(rt, name)
    }

    pub fn conflict(rt: &ResourceType, name: &str, why: &str) -> ApiError {
        ApiError::new(
            409,
            "Conflict",
            format!(
                "Operation cannot be fulfilled on {} \"{name}\": {why}",
                rt.qualified()
            ),
        )
        .with_details(rt, name)
    }

    pub fn stale(rt: &ResourceType, name: &str) -> ApiError {
        ApiError::conflict(
            rt,
            name,
            "the object has been modified; please apply your changes to the latest version and try again",
        )
    }

    pub fn expired(message: impl Into<String>) -> ApiError {
        ApiError::new(410, "Expired", message)
    }

    fn with_details(mut self, rt: &ResourceType, name: &str) -> ApiError {
        self.details = Some(json!({"name": name, "group": rt.group, "kind": rt.plural}));
        self
    }

    /// The `Status` object.
    pub fn status(&self) -> Value {
        let mut v = json!({
            "kind": "Status",
            "apiVersion": "v1",
            "metadata": {},
            "status": "Failure",
            "message": self.message,
            "reason": self.reason,
            "code": self.code,
        });
        if let Some(d) = &self.details {
            v["details"] = d.clone();
        }
        v
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        let code = StatusCode::from_u16(self.code).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
        (code, axum::Json(self.status())).into_response()
    }
}

/// DNS-1123 label: at most 63 lowercase alphanumerics or '-', starting and
/// ending alphanumeric.
pub fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

/// DNS-1123 subdomain: at most 253 characters, dot-separated labels.
pub fn is_dns_subdomain(s: &str) -> bool {
    !s.is_empty() && s.len() <= 253 && s.split('.').all(is_dns_label)
}

/// The longest name Kubernetes accepts for objects of this type.
fn name_ok(rt: &ResourceType, name: &str) -> Result<(), String> {
    let ok = match rt.plural {
        "namespaces" | "services" => is_dns_label(name),
        _ => is_dns_subdomain(name),
    };
    if !ok {
        return Err(format!(
            "metadata.name: Invalid value: \"{name}\": a lowercase RFC 1123 name"
        ));
    }
    // The controller appends an 11-character suffix to the Jobs it creates.
    if rt.plural == "cronjobs" && name.len() > 52 {
        return Err(format!(
            "metadata.name: Invalid value: \"{name}\": must be no more than 52 characters"
        ));
    }
    Ok(())
}

fn label_name_ok(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
        && s.as_bytes()[0].is_ascii_alphanumeric()
        && s.as_bytes()[s.len() - 1].is_ascii_alphanumeric()
}

fn label_key_ok(k: &str) -> bool {
    match k.split_once('/') {
        Some((prefix, name)) => is_dns_subdomain(prefix) && label_name_ok(name),
        None => label_name_ok(k),
    }
}

fn label_value_ok(v: &str) -> bool {
    v.is_empty() || label_name_ok(v)
}

/// What the API server validates on every write: the name, and label keys
/// and values.
pub fn validate(rt: &ResourceType, obj: &Value) -> Result<(), ApiError> {
    let name = obj["metadata"]["name"].as_str().unwrap_or_default();
    name_ok(rt, name).map_err(|m| ApiError::invalid(rt, name, m))?;
    if let Some(labels) = obj["metadata"]["labels"].as_object() {
        for (k, v) in labels {
            if !label_key_ok(k) {
                return Err(ApiError::invalid(
                    rt,
                    name,
                    format!("metadata.labels: Invalid value: \"{k}\""),
                ));
            }
            match v.as_str() {
                Some(v) if label_value_ok(v) => {}
                _ => {
                    return Err(ApiError::invalid(
                        rt,
                        name,
                        format!(
                            "metadata.labels: Invalid value: {v}: must be 63 characters or less"
                        ),
                    ));
                }
            }
        }
    }
    Ok(())
}
