//! A node for the test control plane that plays the kubelet's part through
//! the real API: it registers a Ready Node, and for each pod the scheduler
//! binds to it does what a test said a container of that pod does ([`Outcome`])
//! by writing the pod's status, as a kubelet would; it serves the containers'
//! logs on the kubelet's port (HTTPS, where the API server asks for
//! `pods/log`), and finishes the deletion of pods the cluster deletes.
//!
//! No container runs: the real Deployment, ReplicaSet and Job controllers,
//! the scheduler, admission and the garbage collector act on what it reports.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex, OnceLock};

use futures_util::StreamExt;
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Secret};
use kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams};
use kube::runtime::watcher;
use serde_json::{Value, json};

use super::ControlPlane;
use super::kubelet_logs::LogServer;

/// The address of every pod of the test node.
const TEST_POD_IP: &str = "198.51.100.7";

/// The name of the node every pod is scheduled to.
pub const NODE_NAME: &str = "sless-test-node";

/// How often pods that could not start are tried again.
const RETRY_EVERY: std::time::Duration = std::time::Duration::from_millis(100);

/// What a pod's container does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Starts, becomes ready and keeps serving (a Deployment's pod; a Job's
    /// pod that is still at work).
    Serves { log: String },
    /// Runs to its end and exits with `code`, having printed `log` and
    /// written `message` to its termination-message file.
    Exits {
        code: i32,
        log: String,
        message: Option<String>,
    },
    /// Never starts: waits with `reason` (`ImagePullBackOff`,
    /// `CrashLoopBackOff` after exits that printed `log`, ...).
    Waits { reason: String, log: String },
}

impl Outcome {
    /// A container that starts and serves.
    pub fn serves() -> Outcome {
        Outcome::Serves { log: String::new() }
    }

    /// A container that exits 0 after printing `log`.
    pub fn succeeds(log: &str) -> Outcome {
        Outcome::Exits {
            code: 0,
            log: log.into(),
            message: None,
        }
    }

    /// A container that exits 1 after printing `log`.
    pub fn fails(log: &str) -> Outcome {
        Outcome::Exits {
            code: 1,
            log: log.into(),
            message: None,
        }
    }

    /// A container that never starts, waiting with `reason`.
    pub fn waits(reason: &str, log: &str) -> Outcome {
        Outcome::Waits {
            reason: reason.into(),
            log: log.into(),
        }
    }

    /// The same exit, with `message` in the termination-message file.
    pub fn with_termination_message(self, message: &str) -> Outcome {
        match self {
            Outcome::Exits { code, log, .. } => Outcome::Exits {
                code,
                log,
                message: Some(message.into()),
            },
            other => other,
        }
    }

    fn log(&self) -> &str {
        match self {
            Outcome::Serves { log } | Outcome::Exits { log, .. } | Outcome::Waits { log, .. } => {
                log
            }
        }
    }
}

/// A pod as its (first) container sees it: its environment resolved (from
/// values, Secrets, ConfigMaps and the pod's own fields, `$(VAR)` and `$$`
/// expanded as the kubelet does) and the files of its Secret and downward-API
/// volumes at their paths.
#[derive(Debug, Clone)]
pub struct PodView {
    pub pod: Pod,
    env: BTreeMap<String, String>,
    files: BTreeMap<String, Vec<u8>>,
}

impl PodView {
    pub fn name(&self) -> &str {
        self.pod.metadata.name.as_deref().unwrap_or_default()
    }

    pub fn namespace(&self) -> &str {
        self.pod.metadata.namespace.as_deref().unwrap_or_default()
    }

    pub fn label(&self, key: &str) -> Option<&str> {
        self.pod
            .metadata
            .labels
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    pub fn image(&self) -> &str {
        self.container()
            .and_then(|c| c.image.as_deref())
            .unwrap_or_default()
    }

    /// An environment variable as the process sees it.
    pub fn env(&self, name: &str) -> Option<&str> {
        self.env.get(name).map(String::as_str)
    }

    /// The value of `--{name}=value` on the command line.
    pub fn flag(&self, name: &str) -> Option<&str> {
        let c = self.container()?;
        let prefix = format!("--{name}=");
        c.command
            .iter()
            .flatten()
            .chain(c.args.iter().flatten())
            .find_map(|a| a.strip_prefix(&prefix))
    }

    /// The content of a file mounted from a Secret or the downward API.
    pub fn file(&self, path: &str) -> Option<&[u8]> {
        self.files.get(path).map(Vec::as_slice)
    }

    fn container(&self) -> Option<&k8s_openapi::api::core::v1::Container> {
        self.pod.spec.as_ref()?.containers.first()
    }
}

type PlayFn = Arc<dyn Fn(&PodView) -> Outcome + Send + Sync>;

struct Play {
    selector: Vec<(String, Option<String>)>,
    f: PlayFn,
}

impl Play {
    fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.iter().all(|(k, v)| match v {
            Some(v) => labels.get(k) == Some(v),
            None => labels.contains_key(k),
        })
    }
}

/// `a=b,c` → `[(a, Some(b)), (c, None)]`.
fn parse_selector(selector: &str) -> Vec<(String, Option<String>)> {
    selector
        .split(',')
        .filter(|p| !p.trim().is_empty())
        .map(|p| match p.split_once('=') {
            Some((k, v)) => (k.trim().to_owned(), Some(v.trim().to_owned())),
            None => (p.trim().to_owned(), None),
        })
        .collect()
}

/// The test node of this process.
pub struct TestNode {
    plays: Mutex<Vec<Play>>,
    logs: Arc<LogServer>,
}

static NODE: OnceLock<TestNode> = OnceLock::new();

impl TestNode {
    /// The node of this process (and the control plane's), registered on
    /// first use.
    pub fn shared() -> &'static TestNode {
        let node = NODE.get_or_init(|| TestNode {
            plays: Mutex::new(Vec::new()),
            logs: LogServer::start(),
        });
        static STARTED: OnceLock<()> = OnceLock::new();
        STARTED.get_or_init(|| {
            let plane = ControlPlane::shared();
            let (tx, rx) = std::sync::mpsc::channel();
            std::thread::Builder::new()
                .name("kube-test-node".into())
                .spawn(move || {
                    let rt = tokio::runtime::Builder::new_current_thread()
                        .enable_all()
                        .build()
                        .expect("a runtime for the test node");
                    rt.block_on(async move {
                        let client = plane.admin();
                        register(&client, node.logs.port()).await;
                        tx.send(()).ok();
                        node.run(client).await;
                    });
                })
                .expect("a thread for the test node");
            rx.recv().expect("registering the test node");
        });
        node
    }

    /// From now on, a pod whose labels match `selector` (`key=value` and
    /// `key`, comma-separated), and no selector given earlier, does what `f`
    /// says when the scheduler puts it on this node. A pod no selector
    /// matches stays `Pending`.
    pub fn play(&self, selector: &str, f: impl Fn(&PodView) -> Outcome + Send + Sync + 'static) {
        self.plays.lock().unwrap().push(Play {
            selector: parse_selector(selector),
            f: Arc::new(f),
        });
    }

    /// Every pod matching `selector` does `outcome`.
    pub fn play_all(&self, selector: &str, outcome: Outcome) {
        self.play(selector, move |_| outcome.clone());
    }

    fn play_for(&self, labels: &BTreeMap<String, String>) -> Option<PlayFn> {
        self.plays
            .lock()
            .unwrap()
            .iter()
            .find(|p| p.matches(labels))
            .map(|p| p.f.clone())
    }

    async fn run(&self, client: kube::Client) -> ! {
        let pods: Api<Pod> = Api::all(client.clone());
        let config = watcher::Config::default().fields(&format!("spec.nodeName={NODE_NAME}"));
        let mut started: HashSet<String> = HashSet::new();
        let mut waiting: HashMap<String, Pod> = HashMap::new();
        // Pods that cannot start yet are tried again on every event and
        // every tick: a test may say what they do after they were created,
        // and a Secret they need may come after them.
        let mut tick = tokio::time::interval(RETRY_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            let mut stream = watcher(pods.clone(), config.clone()).boxed();
            loop {
                let seen = tokio::select! {
                    event = stream.next() => match event {
                        Some(event) => Some(event),
                        None => break,
                    },
                    _ = tick.tick() => None,
                };
                match seen {
                    Some(Ok(watcher::Event::Apply(p) | watcher::Event::InitApply(p))) => {
                        waiting.insert(p.metadata.uid.clone().unwrap_or_default(), p);
                    }
                    Some(Ok(watcher::Event::Delete(p))) => {
                        let uid = p.metadata.uid.clone().unwrap_or_default();
                        waiting.remove(&uid);
                        started.remove(&uid);
                    }
                    Some(_) | None => {}
                }
                let again: Vec<Pod> = waiting.drain().map(|(_, p)| p).collect();
                for pod in again {
                    self.on_pod(&client, pod, &mut started, &mut waiting).await;
                }
            }
        }
    }

    async fn on_pod(
        &self,
        client: &kube::Client,
        pod: Pod,
        started: &mut HashSet<String>,
        waiting: &mut HashMap<String, Pod>,
    ) {
        let uid = pod.metadata.uid.clone().unwrap_or_default();
        let ns = pod.metadata.namespace.clone().unwrap_or_default();
        let name = pod.metadata.name.clone().unwrap_or_default();
        let api: Api<Pod> = Api::namespaced(client.clone(), &ns);
        if pod.metadata.deletion_timestamp.is_some() {
            // The containers are stopped: the kubelet's final delete.
            let _ = api
                .delete(&name, &DeleteParams::default().grace_period(0))
                .await;
            started.remove(&uid);
            return;
        }
        if started.contains(&uid) {
            return;
        }
        let labels = pod.metadata.labels.clone().unwrap_or_default();
        let Some(play) = self.play_for(&labels) else {
            waiting.insert(uid, pod);
            return;
        };
        // The kubelet does not start a container whose Secrets are not
        // there yet (CreateContainerConfigError, a volume not mounted).
        let Ok(view) = view(client, pod.clone()).await else {
            waiting.insert(uid, pod);
            return;
        };
        let outcome = play(&view);
        let container = view.container().map(|c| c.name.clone()).unwrap_or_default();
        self.logs.put(&ns, &name, &container, outcome.log());
        let status = status(&pod, &container, &outcome);
        match api
            .patch_status(&name, &PatchParams::default(), &Patch::Merge(&status))
            .await
        {
            Ok(_) => {
                started.insert(uid);
            }
            Err(e) => eprintln!("test node: writing the status of {ns}/{name}: {e}"),
        }
    }
}

/// Registers the node: Ready, room for every test's pods, its kubelet port
/// the log server's.
async fn register(client: &kube::Client, port: u16) {
    let nodes: Api<k8s_openapi::api::core::v1::Node> = Api::all(client.clone());
    let node = json!({
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": NODE_NAME, "labels": {
            "kubernetes.io/hostname": NODE_NAME,
            "kubernetes.io/os": "linux",
            "kubernetes.io/arch": "amd64",
        }},
    });
    let node: k8s_openapi::api::core::v1::Node = serde_json::from_value(node).expect("a Node");
    match nodes.create(&PostParams::default(), &node).await {
        Ok(_) => {}
        Err(kube::Error::Api(e)) if e.code == 409 => {}
        Err(e) => panic!("registering the test node: {e}"),
    }
    let now = now();
    let room = json!({"cpu": "64", "memory": "256Gi", "pods": "1000", "ephemeral-storage": "1Ti"});
    let status = json!({"status": {
        "capacity": room,
        "allocatable": room,
        "conditions": [
            {"type": "Ready", "status": "True", "reason": "KubeletReady",
             "message": "sless's test node plays the kubelet",
             "lastHeartbeatTime": now, "lastTransitionTime": now},
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"},
                      {"type": "Hostname", "address": NODE_NAME}],
        "daemonEndpoints": {"kubeletEndpoint": {"Port": port}},
        "nodeInfo": {
            "machineID": "sless-test", "systemUUID": "sless-test", "bootID": "sless-test",
            "kernelVersion": "", "osImage": "sless test node", "containerRuntimeVersion": "none://0",
            "kubeletVersion": "v1.37.2", "kubeProxyVersion": "", "operatingSystem": "linux",
            "architecture": "amd64",
        },
    }});
    nodes
        .patch_status(NODE_NAME, &PatchParams::default(), &Patch::Merge(&status))
        .await
        .expect("writing the test node's status");
}

fn now() -> String {
    chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true)
}

/// The status a kubelet would write for `outcome`.
fn status(pod: &Pod, container: &str, outcome: &Outcome) -> Value {
    let now = now();
    let image = pod
        .spec
        .as_ref()
        .and_then(|s| s.containers.first())
        .and_then(|c| c.image.clone())
        .unwrap_or_default();
    let condition = |kind: &str, ok: bool| json!({"type": kind, "status": if ok { "True" } else { "False" }, "lastTransitionTime": now});
    let (phase, ready, state, last, restarts) = match outcome {
        Outcome::Serves { .. } => (
            "Running",
            true,
            json!({"running": {"startedAt": now}}),
            json!({}),
            0,
        ),
        Outcome::Exits { code, message, .. } => {
            let mut terminated = json!({
                "exitCode": code,
                "reason": if *code == 0 { "Completed" } else { "Error" },
                "startedAt": now, "finishedAt": now,
            });
            if let Some(m) = message {
                terminated["message"] = json!(m);
            }
            let phase = if *code == 0 { "Succeeded" } else { "Failed" };
            (
                phase,
                false,
                json!({"terminated": terminated}),
                json!({}),
                0,
            )
        }
        Outcome::Waits { reason, .. } => {
            let crashed = reason == "CrashLoopBackOff";
            let state = json!({"waiting": {"reason": reason,
                "message": format!("sless's test node: {reason}")}});
            let last = if crashed {
                json!({"terminated": {"exitCode": 1, "reason": "Error",
                    "startedAt": now, "finishedAt": now}})
            } else {
                json!({})
            };
            let phase = if crashed { "Running" } else { "Pending" };
            (phase, false, state, last, if crashed { 3 } else { 0 })
        }
    };
    json!({"status": {
        "phase": phase,
        "hostIP": "127.0.0.1",
        "hostIPs": [{"ip": "127.0.0.1"}],
        // Not loopback, which an EndpointSlice may not hold: an address of
        // a documentation range, which nothing connects to.
        "podIP": TEST_POD_IP,
        "podIPs": [{"ip": TEST_POD_IP}],
        "startTime": now,
        "conditions": [
            condition("PodReadyToStartContainers", true),
            condition("Initialized", true),
            condition("ContainersReady", ready),
            condition("Ready", ready),
            condition("PodScheduled", true),
        ],
        "containerStatuses": [{
            "name": container,
            "image": image,
            "imageID": "",
            "ready": ready,
            "started": matches!(outcome, Outcome::Serves { .. }),
            "restartCount": restarts,
            "state": state,
            "lastState": last,
        }],
    }})
}

/// What the pod's first container sees; `Err` naming a Secret (or a key
/// of one) it needs that is not there yet.
async fn view(client: &kube::Client, pod: Pod) -> Result<PodView, String> {
    let ns = pod.metadata.namespace.clone().unwrap_or_default();
    let secrets: Api<Secret> = Api::namespaced(client.clone(), &ns);
    let maps: Api<ConfigMap> = Api::namespaced(client.clone(), &ns);
    let secret = |name: String| {
        let secrets = secrets.clone();
        async move {
            secrets.get_opt(&name).await.ok().flatten().map(|s| {
                s.data
                    .unwrap_or_default()
                    .into_iter()
                    .map(|(k, v)| (k, v.0))
                    .collect::<BTreeMap<String, Vec<u8>>>()
            })
        }
    };
    let pod_json = serde_json::to_value(&pod).unwrap_or_default();
    let spec = pod.spec.clone().unwrap_or_default();
    let mut env = BTreeMap::new();
    let mut files = BTreeMap::new();
    if let Some(c) = spec.containers.first() {
        for e in c.env.iter().flatten() {
            let value = if let Some(v) = &e.value {
                Some(expand(v, &env))
            } else if let Some(from) = &e.value_from {
                if let Some(r) = &from.secret_key_ref {
                    let value = secret(r.name.clone())
                        .await
                        .and_then(|data| data.get(&r.key).cloned());
                    if value.is_none() && r.optional != Some(true) {
                        return Err(format!("secret {}, key {}", r.name, r.key));
                    }
                    value.map(|v| String::from_utf8_lossy(&v).into_owned())
                } else if let Some(r) = &from.config_map_key_ref {
                    maps.get_opt(&r.name)
                        .await
                        .ok()
                        .flatten()
                        .and_then(|m| m.data)
                        .and_then(|d| d.get(&r.key).cloned())
                } else {
                    from.field_ref
                        .as_ref()
                        .and_then(|f| field(&pod_json, &f.field_path))
                }
            } else {
                None
            };
            if let Some(v) = value {
                env.insert(e.name.clone(), v);
            }
        }
        for m in c.volume_mounts.iter().flatten() {
            let Some(volume) = spec.volumes.iter().flatten().find(|v| v.name == m.name) else {
                continue;
            };
            let mut put = |path: &str, data: Vec<u8>| {
                files.insert(
                    format!("{}/{path}", m.mount_path.trim_end_matches('/')),
                    data,
                );
            };
            if let Some(s) = &volume.secret {
                let name = s.secret_name.clone().unwrap_or_default();
                let Some(data) = secret(name.clone()).await else {
                    if s.optional == Some(true) {
                        continue;
                    }
                    return Err(format!("secret {name}"));
                };
                match &s.items {
                    Some(items) => {
                        for i in items {
                            if let Some(d) = data.get(&i.key) {
                                put(&i.path, d.clone());
                            }
                        }
                    }
                    None => {
                        for (k, d) in data {
                            put(&k, d);
                        }
                    }
                }
            }
            if let Some(d) = &volume.downward_api {
                for i in d.items.iter().flatten() {
                    if let Some(v) = i
                        .field_ref
                        .as_ref()
                        .and_then(|f| field(&pod_json, &f.field_path))
                    {
                        put(&i.path, v.into_bytes());
                    }
                }
            }
        }
    }
    Ok(PodView { pod, env, files })
}

/// A pod field as `fieldRef.fieldPath` names it: `metadata.name`,
/// `metadata.annotations['k']`, `metadata.labels['k']`, `spec.nodeName`, ...
fn field(pod: &Value, path: &str) -> Option<String> {
    if let Some((map, key)) = path.split_once("['") {
        let key = key.strip_suffix("']")?;
        let mut v = pod;
        for part in map.split('.') {
            v = v.get(part)?;
        }
        return v.get(key)?.as_str().map(str::to_owned);
    }
    let mut v = pod;
    for part in path.split('.') {
        v = v.get(part)?;
    }
    v.as_str().map(str::to_owned)
}

/// The kubelet's expansion of an environment value: `$(VAR)` of a variable
/// defined before it is its value, `$$` is `$`, anything else stays.
fn expand(value: &str, env: &BTreeMap<String, String>) -> String {
    let mut out = String::new();
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
            match env.get(name) {
                Some(v) => out.push_str(v),
                None => out.push_str(&rest[i..i + 3 + end]),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_expand_as_the_kubelet_expands_them() {
        let env = BTreeMap::from([("A".to_owned(), "x".to_owned())]);
        for (value, seen) in [
            ("plain", "plain"),
            ("costs $$(HOME)", "costs $(HOME)"),
            ("$(A)-$(B)", "x-$(B)"),
            ("$$$$", "$$"),
            ("end $", "end $"),
            ("$(open", "$(open"),
        ] {
            assert_eq!(expand(value, &env), seen, "{value}");
        }
    }

    #[test]
    fn selectors_match_values_and_presence() {
        let play = Play {
            selector: parse_selector("a=1,b"),
            f: Arc::new(|_| Outcome::serves()),
        };
        let labels = |pairs: &[(&str, &str)]| {
            pairs
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect::<BTreeMap<_, _>>()
        };
        assert!(play.matches(&labels(&[("a", "1"), ("b", "")])));
        assert!(!play.matches(&labels(&[("a", "2"), ("b", "")])));
        assert!(!play.matches(&labels(&[("a", "1")])));
    }
}
