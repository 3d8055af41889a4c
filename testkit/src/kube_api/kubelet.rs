//! What the kubelet does for a pod that the controllers here play: it
//! starts a container only once every Secret and ConfigMap the pod needs
//! exists, hands it its environment (with Kubernetes' `$(VAR)` expansion)
//! and its mounted files, and reads its termination message back. A
//! process whose environment Linux would refuse to exec never starts.

use std::collections::BTreeMap;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde_json::Value;

use super::FakeKube;
use super::resources::RESOURCES;

/// `kubecontainer.MaxContainerTerminationMessageLength`: what the kubelet
/// reads of a termination message file.
pub const MAX_TERMINATION_MESSAGE_BYTES: usize = 4096;
/// Linux's `MAX_ARG_STRLEN` (32 pages): the longest single argument or
/// `NAME=value` string `execve` takes; a longer one fails with E2BIG.
pub const MAX_ARG_STRLEN: usize = 32 * 4096;
/// With `terminationMessagePolicy: FallbackToLogsOnError`, a container that
/// failed without a message gets the end of its log: at most this many
/// lines ...
const FALLBACK_LOG_LINES: usize = 80;
/// ... and bytes.
const FALLBACK_LOG_BYTES: usize = 2048;

/// What a started container sees: its image and arguments, its
/// environment as the process gets it, and the files its volumes put in
/// its filesystem (by absolute path).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ContainerView {
    pub name: String,
    pub image: String,
    pub args: Vec<String>,
    pub env: BTreeMap<String, String>,
    pub files: BTreeMap<String, Vec<u8>>,
}

impl ContainerView {
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }

    pub fn file(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    /// The value of the first argument `--{flag}=value`.
    pub fn flag(&self, flag: &str) -> Option<&str> {
        let prefix = format!("--{flag}=");
        self.args.iter().find_map(|a| a.strip_prefix(&prefix))
    }
}

/// Why a container has not started: the reason and message its status
/// shows, as the kubelet reports them. `failed`: it never will (the
/// runtime could not exec it); otherwise it waits and is tried again.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Waiting {
    pub reason: &'static str,
    pub message: String,
    pub failed: bool,
}

/// What the first container of `pod` sees, or why the kubelet cannot start
/// it yet: a volume's Secret or ConfigMap is missing (`ContainerCreating`,
/// the kubelet retries the mount) or an env reference to one is
/// (`CreateContainerConfigError`). Optional references may be missing.
pub fn start(kube: &FakeKube, pod: &Value) -> Result<ContainerView, Waiting> {
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let c = &pod["spec"]["containers"][0];
    let mut view = ContainerView {
        name: text(&c["name"]),
        image: text(&c["image"]),
        args: strings(&c["args"]),
        ..ContainerView::default()
    };
    let volumes: BTreeMap<String, &Value> = pod["spec"]["volumes"]
        .as_array()
        .into_iter()
        .flatten()
        .map(|v| (text(&v["name"]), v))
        .collect();
    for mount in c["volumeMounts"].as_array().into_iter().flatten() {
        let Some(volume) = volumes.get(&text(&mount["name"])) else {
            continue;
        };
        let files = volume_files(kube, ns, pod, volume)?;
        let at = text(&mount["mountPath"]);
        let at = at.trim_end_matches('/');
        match mount["subPath"].as_str().filter(|s| !s.is_empty()) {
            Some(sub) => {
                if let Some(data) = files.get(sub) {
                    view.files.insert(at.to_owned(), data.clone());
                }
            }
            None => {
                for (path, data) in files {
                    view.files.insert(format!("{at}/{path}"), data);
                }
            }
        }
    }
    for var in c["env"].as_array().into_iter().flatten() {
        let name = text(&var["name"]);
        let value = match var.get("valueFrom") {
            Some(from) => match env_source(kube, ns, pod, from)? {
                Some(v) => v,
                None => continue,
            },
            None => expand(var["value"].as_str().unwrap_or_default(), &view.env),
        };
        view.env.insert(name, value);
    }
    let too_long = view
        .env
        .iter()
        .map(|(k, v)| k.len() + 1 + v.len())
        .chain(view.args.iter().map(String::len))
        .find(|n| *n + 1 > MAX_ARG_STRLEN);
    if let Some(n) = too_long {
        return Err(Waiting {
            reason: "StartError",
            message: format!(
                "failed to start container: exec: argument list too long (a string of {n} bytes in its environment or arguments; at most {} fit)",
                MAX_ARG_STRLEN - 1
            ),
            failed: true,
        });
    }
    Ok(view)
}

/// The termination message the kubelet reports for a container that wrote
/// `written` to its `terminationMessagePath` and printed `log`: what was
/// written (at most 4 KiB), or with `FallbackToLogsOnError`, when nothing
/// was and the container failed, the end of its log.
pub fn termination_message(
    container: &Value,
    written: Option<&str>,
    failed: bool,
    log: &str,
) -> Option<String> {
    if let Some(m) = written.filter(|m| !m.is_empty()) {
        return Some(cut_start(m, MAX_TERMINATION_MESSAGE_BYTES).to_owned());
    }
    let fallback = container["terminationMessagePolicy"] == "FallbackToLogsOnError";
    if !(fallback && failed) || log.is_empty() {
        return None;
    }
    let lines: Vec<&str> = log.split_inclusive('\n').collect();
    let tail = lines[lines.len().saturating_sub(FALLBACK_LOG_LINES)..].concat();
    let start = tail.len().saturating_sub(FALLBACK_LOG_BYTES);
    let start = (start..=tail.len())
        .find(|i| tail.is_char_boundary(*i))
        .unwrap_or(tail.len());
    Some(tail[start..].to_owned())
}

/// At most `max` bytes from the start of `s`, on a character boundary.
fn cut_start(s: &str, max: usize) -> &str {
    let mut end = s.len().min(max);
    while !s.is_char_boundary(end) {
        end -= 1;
    }
    &s[..end]
}

fn text(v: &Value) -> String {
    v.as_str().unwrap_or_default().to_owned()
}

fn strings(v: &Value) -> Vec<String> {
    v.as_array()
        .into_iter()
        .flatten()
        .filter_map(|s| s.as_str().map(str::to_owned))
        .collect()
}

fn object(kube: &FakeKube, plural: &str, ns: &str, name: &str) -> Option<Value> {
    let rt = RESOURCES
        .iter()
        .find(|r| r.group.is_empty() && r.plural == plural)?;
    kube.get(&rt.path(Some(ns), Some(name)))
}

/// The entries of a Secret (decoded) or a ConfigMap (data and binaryData).
fn entries(kind: &str, obj: &Value) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let decoded = |v: &Value| {
        STANDARD
            .decode(v.as_str().unwrap_or_default())
            .unwrap_or_default()
    };
    for (k, v) in obj["data"].as_object().into_iter().flatten() {
        let bytes = if kind == "secrets" {
            decoded(v)
        } else {
            v.as_str().unwrap_or_default().as_bytes().to_vec()
        };
        out.insert(k.clone(), bytes);
    }
    for (k, v) in obj["binaryData"].as_object().into_iter().flatten() {
        out.insert(k.clone(), decoded(v));
    }
    out
}

/// The files a volume holds, by path inside the volume.
fn volume_files(
    kube: &FakeKube,
    ns: &str,
    pod: &Value,
    volume: &Value,
) -> Result<BTreeMap<String, Vec<u8>>, Waiting> {
    let (plural, source, name_field) = if volume["secret"].is_object() {
        ("secrets", &volume["secret"], "secretName")
    } else if volume["configMap"].is_object() {
        ("configmaps", &volume["configMap"], "name")
    } else if volume["downwardAPI"].is_object() {
        let mut files = BTreeMap::new();
        for item in volume["downwardAPI"]["items"]
            .as_array()
            .into_iter()
            .flatten()
        {
            let field = item["fieldRef"]["fieldPath"].as_str().unwrap_or_default();
            if let Some(v) = pod_field(pod, field) {
                files.insert(text(&item["path"]), v.into_bytes());
            }
        }
        return Ok(files);
    } else {
        return Ok(BTreeMap::new());
    };
    let name = text(&source[name_field]);
    let Some(obj) = object(kube, plural, ns, &name) else {
        if source["optional"] == true {
            return Ok(BTreeMap::new());
        }
        let kind = if plural == "secrets" {
            "secret"
        } else {
            "configmap"
        };
        return Err(Waiting {
            failed: false,
            reason: "ContainerCreating",
            message: format!(
                "MountVolume.SetUp failed for volume {:?} : {kind} {name:?} not found",
                text(&volume["name"])
            ),
        });
    };
    let all = entries(plural, &obj);
    match source["items"].as_array() {
        Some(items) => Ok(items
            .iter()
            .filter_map(|i| {
                let data = all.get(i["key"].as_str()?)?;
                Some((text(&i["path"]), data.clone()))
            })
            .collect()),
        None => Ok(all),
    }
}

/// An env var from a Secret, a ConfigMap or a field of the pod; `None`
/// when an optional reference is missing.
fn env_source(
    kube: &FakeKube,
    ns: &str,
    pod: &Value,
    from: &Value,
) -> Result<Option<String>, Waiting> {
    if let Some(field) = from["fieldRef"]["fieldPath"].as_str() {
        return Ok(pod_field(pod, field));
    }
    let (plural, selector) = if from["secretKeyRef"].is_object() {
        ("secrets", &from["secretKeyRef"])
    } else if from["configMapKeyRef"].is_object() {
        ("configmaps", &from["configMapKeyRef"])
    } else {
        return Ok(None);
    };
    let name = text(&selector["name"]);
    let key = text(&selector["key"]);
    let value = object(kube, plural, ns, &name).and_then(|obj| entries(plural, &obj).remove(&key));
    match value {
        Some(v) => Ok(Some(String::from_utf8_lossy(&v).into_owned())),
        None if selector["optional"] == true => Ok(None),
        None => {
            let kind = if plural == "secrets" {
                "secret"
            } else {
                "configmap"
            };
            Err(Waiting {
                failed: false,
                reason: "CreateContainerConfigError",
                message: format!("couldn't find key {key} in {kind} {ns}/{name}"),
            })
        }
    }
}

/// `metadata.name`, `metadata.namespace`, `metadata.labels['k']` and
/// `metadata.annotations['k']` of the pod.
fn pod_field(pod: &Value, field: &str) -> Option<String> {
    let meta = &pod["metadata"];
    match field {
        "metadata.name" | "metadata.namespace" => meta[field.trim_start_matches("metadata.")]
            .as_str()
            .map(str::to_owned),
        _ => {
            let (map, rest) = field
                .strip_prefix("metadata.annotations['")
                .map(|r| ("annotations", r))
                .or_else(|| {
                    field
                        .strip_prefix("metadata.labels['")
                        .map(|r| ("labels", r))
                })?;
            let key = rest.strip_suffix("']")?;
            meta[map][key].as_str().map(str::to_owned)
        }
    }
}

/// Kubernetes' expansion of an env value: `$(NAME)` becomes the value of a
/// variable defined before it (and stays as written otherwise), `$$`
/// becomes `$`.
pub fn expand(value: &str, defined: &BTreeMap<String, String>) -> String {
    let mut out = String::with_capacity(value.len());
    let mut rest = value;
    while let Some(i) = rest.find('$') {
        out.push_str(&rest[..i]);
        let after = &rest[i + 1..];
        if let Some(tail) = after.strip_prefix('$') {
            out.push('$');
            rest = tail;
        } else if let Some(inner) = after.strip_prefix('(')
            && let Some(end) = inner.find(')')
        {
            let name = &inner[..end];
            match defined.get(name) {
                Some(v) => out.push_str(v),
                None => {
                    out.push_str("$(");
                    out.push_str(name);
                    out.push(')');
                }
            }
            rest = &inner[end + 1..];
        } else {
            out.push('$');
            rest = after;
        }
    }
    out.push_str(rest);
    out
}
