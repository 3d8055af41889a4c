//! A function's rollout: its Deployment applied, and the wait until the
//! rollout is available (the pods it replaced gone, its Service routing to
//! it) or failed, when a pod of the new version cannot pull its image or
//! keeps crashing, or the rollout passes its deadline. A deploy
//! (`deploy`) and a rollback (`rollback`) both roll out through here.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use futures_util::StreamExt;
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use k8s_openapi::api::discovery::v1::EndpointSlice;
use kube::api::{Api, ListParams};
use kube::runtime::{WatchStreamExt, watcher};

use sless_domain::FunctionKey;

use super::api::{apply, infra, log_tail, selector};
use super::render::pod::CONTAINER;
use super::render::{COMPONENT_FUNCTION, function_labels, names, versioned_labels};
use super::{FunctionAddress, Inner};
use crate::driver::DriverError;

/// Waiting reasons of a container that will not get better by waiting.
const HOPELESS: &[&str] = &[
    "ErrImagePull",
    "ImagePullBackOff",
    "InvalidImageName",
    "CrashLoopBackOff",
    "CreateContainerConfigError",
    "CreateContainerError",
];

/// Lines of a failed pod's log kept in `DeployFailed`.
const LOG_TAIL_LINES: i64 = 60;

/// How much longer than the rollout's own deadline the driver waits.
const GRACE: Duration = Duration::from_secs(30);

/// How long a finished rollout waits for the pods it replaced to end: a
/// pod's default termination grace (30 s), and some.
const REPLACED_WITHIN: Duration = Duration::from_secs(45);

/// How long a finished rollout waits for its Service to route to it.
const ROUTED_WITHIN: Duration = Duration::from_secs(30);

/// How long a deploy with cluster-ip addressing tries to connect to the
/// cluster IP: long enough for kube-proxy's next sync, short because a
/// worker in the cluster may be denied by the functions' NetworkPolicy
/// (it admits the API's pods only) and then never connects.
const ACCEPTING_WITHIN: Duration = Duration::from_secs(5);

/// Applies the function's Deployment; its generation as applied.
pub(super) async fn apply_deployment(
    inner: &Inner,
    key: &FunctionKey,
    d: &K8sDeployment,
) -> Result<i64, DriverError> {
    let ns = key.namespace.as_str();
    let name = names::function_name(key);
    let deployments = Api::<K8sDeployment>::namespaced(inner.client.clone(), ns);
    let applied = apply(&deployments, d).await.map_err(|e| match e {
        kube::Error::Api(s) if s.code == 422 => DriverError::Deploy {
            message: format!("the cluster refused the deployment: {}", s.message),
            log_tail: String::new(),
        },
        e => infra(format_args!("deployment {ns}/{name}"))(e),
    })?;
    Ok(applied.metadata.generation.unwrap_or(0))
}

/// Waits until the rollout of `generation` (pods of `version`) is done:
/// available, or failed (`DriverError::Deploy`) when a pod of the version
/// will not start or the rollout passes its deadline. `replicas` is the
/// count the Deployment was given.
pub(super) async fn rollout_of(
    inner: &Inner,
    key: &FunctionKey,
    version: u32,
    generation: i64,
    replicas: i32,
) -> Result<(), DriverError> {
    let settings = &inner.settings;
    let ns = key.namespace.as_str();
    let name = names::function_name(key);
    let deployments = Api::<K8sDeployment>::namespaced(inner.client.clone(), ns);
    let within = Duration::from_secs(settings.rollout_timeout_secs.into()) + GRACE;
    let pods = Api::<Pod>::namespaced(inner.client.clone(), ns);
    let version_pods = selector(&versioned_labels(key, COMPONENT_FUNCTION, version));
    let mut deployment_events =
        std::pin::pin!(watcher::watch_object(deployments.clone(), &name).default_backoff());
    let mut pod_events = std::pin::pin!(
        watcher(
            pods.clone(),
            watcher::Config::default().labels(&version_pods)
        )
        .default_backoff()
        .applied_objects()
    );
    let deadline = tokio::time::sleep(within);
    let mut deadline = std::pin::pin!(deadline);
    loop {
        tokio::select! {
            seen = deployment_events.next() => match seen {
                Some(Ok(Some(d))) => match rollout(&d, generation, replicas) {
                    Rollout::Done => {
                        replaced_gone(&pods, key, replicas).await;
                        routed(inner, key, replicas).await;
                        accepting(inner, key).await;
                        return Ok(());
                    }
                    Rollout::Stuck(why) => {
                        // A pod of the version usually says more.
                        let listed = pods.list(&ListParams::default().labels(&version_pods)).await;
                        let found = listed.ok().and_then(|l| l.items.into_iter().find_map(|p| hopeless(&p).map(|h| (p, h))));
                        if let Some((pod, found)) = found {
                            return Err(pod_failure(&pods, &pod, found, version).await);
                        }
                        return Err(DriverError::Deploy { message: why, log_tail: String::new() });
                    }
                    Rollout::Going => {}
                },
                Some(Ok(None)) => {
                    return Err(DriverError::Infra(format!(
                        "deployment {ns}/{name} was deleted during its rollout"
                    )));
                }
                Some(Err(e)) => tracing::debug!(%name, "deployment watch interrupted: {e}"),
                None => return Err(DriverError::Infra("the deployment watch ended".into())),
            },
            seen = pod_events.next() => match seen {
                Some(Ok(pod)) => {
                    if let Some(found) = hopeless(&pod) {
                        return Err(pod_failure(&pods, &pod, found, version).await);
                    }
                }
                Some(Err(e)) => tracing::debug!(%name, "pod watch interrupted: {e}"),
                None => return Err(DriverError::Infra("the pod watch ended".into())),
            },
            () = &mut deadline => {
                return Err(DriverError::Deploy {
                    message: format!("the rollout did not finish within {} s", within.as_secs()),
                    log_tail: String::new(),
                });
            }
        }
    }
}

/// Waits until the function has no pod but the `replicas` of its rollout:
/// the pods it replaced keep answering calls until they end (a
/// connection the proxy keeps open to the Service stays with the pod it
/// reached, and kube-proxy learns of a terminating endpoint a moment
/// later), so a version is not deployed while another one still
/// answers. A pod that outlives [`REPLACED_WITHIN`] is left to the
/// cluster, with a warning.
async fn replaced_gone(pods: &Api<Pod>, key: &FunctionKey, replicas: i32) {
    let all = selector(&function_labels(key, COMPONENT_FUNCTION));
    let stream = watcher(pods.clone(), watcher::Config::default().labels(&all)).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut left = FunctionPods::default();
    let waiting = async {
        while let Some(seen) = stream.next().await {
            match seen {
                Ok(event) => {
                    if left.seen(event, replicas) {
                        return;
                    }
                }
                Err(e) => tracing::debug!("pod watch interrupted: {e}"),
            }
        }
    };
    if tokio::time::timeout(REPLACED_WITHIN, waiting)
        .await
        .is_err()
    {
        tracing::warn!(
            function = %key.queue_key(),
            pods = ?left.names,
            "pods of the function's previous rollout are still there after {} s",
            REPLACED_WITHIN.as_secs()
        );
    }
}

/// Waits until the function's Service routes to `replicas` ready
/// endpoints and to nothing else: a rollout is available before the
/// EndpointSlices list its pods, and until they do (and whatever serves
/// Services on the nodes has read them) a call sent to the Service is
/// refused. The EndpointSlices are the last of it sless can see. A
/// Service that is not routed within [`ROUTED_WITHIN`] is left with a
/// warning.
async fn routed(inner: &Inner, key: &FunctionKey, replicas: i32) {
    let slices = Api::<EndpointSlice>::namespaced(inner.client.clone(), key.namespace.as_str());
    let of_service = format!("kubernetes.io/service-name={}", names::function_name(key));
    let stream = watcher(slices, watcher::Config::default().labels(&of_service)).default_backoff();
    let mut stream = std::pin::pin!(stream);
    let mut endpoints = ServiceEndpoints::default();
    let waiting = async {
        while let Some(seen) = stream.next().await {
            match seen {
                Ok(event) => {
                    if endpoints.seen(event, replicas) {
                        return;
                    }
                }
                Err(e) => tracing::debug!("endpoint slice watch interrupted: {e}"),
            }
        }
    };
    if tokio::time::timeout(ROUTED_WITHIN, waiting).await.is_err() {
        tracing::warn!(
            function = %key.queue_key(),
            "the function's Service does not route to its {replicas} pods after {} s",
            ROUTED_WITHIN.as_secs()
        );
    }
}

/// With `SLESS_KUBE_FUNCTION_ADDRESS=cluster-ip` (sless on a machine that
/// routes the Service range), waits until the Service's cluster IP accepts
/// a connection from here: what serves Services on this machine
/// (kube-proxy) writes its rules a moment after the EndpointSlices list
/// the pods, and until then a call is refused. Bounded by
/// [`ACCEPTING_WITHIN`]; a debug line after it. With `dns` the driver may not be
/// allowed to reach functions at all (their NetworkPolicy admits the
/// proxy's pods only), so it does not try.
async fn accepting(inner: &Inner, key: &FunctionKey) {
    if inner.settings.function_address != FunctionAddress::ClusterIp {
        return;
    }
    let Ok(url) = endpoint(inner, key, None).await else {
        return;
    };
    let Some(addr) = url.strip_prefix("http://").map(str::to_owned) else {
        return;
    };
    let trying = async {
        loop {
            let connect = tokio::net::TcpStream::connect(addr.as_str());
            if let Ok(Ok(_)) = tokio::time::timeout(Duration::from_secs(1), connect).await {
                return;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    if tokio::time::timeout(ACCEPTING_WITHIN, trying)
        .await
        .is_err()
    {
        // A worker in the cluster is usually not let through: no warning.
        tracing::debug!(
            function = %key.queue_key(),
            %addr,
            "the function's cluster IP refuses connections from here after {} s",
            ACCEPTING_WITHIN.as_secs()
        );
    }
}

/// The endpoints of a Service as a watch of its EndpointSlices tells
/// them: per slice, how many are ready (and not terminating) and how many
/// are not.
#[derive(Debug, Default)]
struct ServiceEndpoints {
    slices: BTreeMap<String, (usize, usize)>,
    listed: bool,
}

impl ServiceEndpoints {
    /// Takes in what the watch saw; true once it listed the slices and
    /// they hold `replicas` ready endpoints and no other.
    fn seen(&mut self, event: watcher::Event<EndpointSlice>, replicas: i32) -> bool {
        use kube::ResourceExt;
        let count = |s: &EndpointSlice| {
            s.endpoints.iter().fold((0, 0), |(ready, other), e| {
                let c = e.conditions.as_ref();
                let serving = c.and_then(|c| c.ready) == Some(true)
                    && c.and_then(|c| c.terminating) != Some(true);
                if serving {
                    (ready + 1, other)
                } else {
                    (ready, other + 1)
                }
            })
        };
        match event {
            watcher::Event::Init => {
                self.slices.clear();
                self.listed = false;
            }
            watcher::Event::InitApply(s) | watcher::Event::Apply(s) => {
                self.slices.insert(s.name_any(), count(&s));
            }
            watcher::Event::Delete(s) => {
                self.slices.remove(&s.name_any());
            }
            watcher::Event::InitDone => self.listed = true,
        }
        let (ready, other) = self
            .slices
            .values()
            .fold((0, 0), |(r, o), (ready, other)| (r + ready, o + other));
        self.listed && other == 0 && ready == usize::try_from(replicas.max(0)).unwrap_or(0)
    }
}

/// The pods of a function as a watch tells them, terminating ones
/// included (they are listed until they are gone).
#[derive(Debug, Default)]
struct FunctionPods {
    names: BTreeSet<String>,
    listed: bool,
}

impl FunctionPods {
    /// Takes in what the watch saw; true once it listed the pods and at
    /// most `replicas` are left: only those of the finished rollout.
    fn seen(&mut self, event: watcher::Event<Pod>, replicas: i32) -> bool {
        use kube::ResourceExt;
        match event {
            watcher::Event::Init => {
                self.names.clear();
                self.listed = false;
            }
            watcher::Event::InitApply(p) | watcher::Event::Apply(p) => {
                self.names.insert(p.name_any());
            }
            watcher::Event::Delete(p) => {
                self.names.remove(&p.name_any());
            }
            watcher::Event::InitDone => self.listed = true,
        }
        self.listed && self.names.len() <= usize::try_from(replicas.max(0)).unwrap_or(0)
    }
}

/// `DeployFailed`'s content for a pod that will not start: the reason,
/// and the log of its last attempt.
async fn pod_failure(
    pods: &Api<Pod>,
    pod: &Pod,
    (reason, message): (String, String),
    version: u32,
) -> DriverError {
    let name = pod.metadata.name.clone().unwrap_or_default();
    let previous = reason == "CrashLoopBackOff";
    let log_tail = log_tail(pods, &name, CONTAINER, LOG_TAIL_LINES, previous).await;
    DriverError::Deploy {
        message: format!("version {version} does not start: {reason}{message}"),
        log_tail,
    }
}

pub(super) enum Rollout {
    Going,
    Done,
    Stuck(String),
}

/// Where the rollout of `generation` to `replicas` pods stands.
pub(super) fn rollout(d: &K8sDeployment, generation: i64, replicas: i32) -> Rollout {
    let Some(status) = d.status.as_ref() else {
        return Rollout::Going;
    };
    let conditions = status.conditions.iter().flatten();
    // Pods the cluster would not create (the tenant's quota, admission):
    // the Deployment controller says so in this condition, and only here.
    let refused = conditions
        .clone()
        .find(|c| c.type_ == "ReplicaFailure" && c.status == "True")
        .map(|c| {
            format!(
                "; the cluster refused its pods: {}",
                c.message.as_deref().unwrap_or_default()
            )
        });
    for c in conditions {
        if c.type_ == "Progressing"
            && c.status == "False"
            && c.reason.as_deref() == Some("ProgressDeadlineExceeded")
        {
            return Rollout::Stuck(format!(
                "the rollout stopped progressing: {}{}",
                c.message.clone().unwrap_or_default(),
                refused.unwrap_or_default()
            ));
        }
    }
    let observed = status.observed_generation.unwrap_or(0) >= generation;
    let updated = status.updated_replicas.unwrap_or(0) >= replicas;
    let available = status.available_replicas.unwrap_or(0) >= replicas;
    // Old pods still terminating do not count against it.
    let only_new = status.replicas.unwrap_or(0) <= status.updated_replicas.unwrap_or(0);
    if observed && updated && available && only_new {
        Rollout::Done
    } else {
        Rollout::Going
    }
}

/// A waiting reason of `pod` that means its version will not start.
fn hopeless(pod: &Pod) -> Option<(String, String)> {
    let statuses = pod.status.as_ref()?.container_statuses.as_ref()?;
    statuses.iter().find_map(|s| {
        let waiting = s.state.as_ref()?.waiting.as_ref()?;
        let reason = waiting.reason.clone()?;
        HOPELESS.contains(&reason.as_str()).then(|| {
            let message = waiting
                .message
                .as_deref()
                .map(|m| format!(": {m}"))
                .unwrap_or_default();
            (reason, message)
        })
    })
}

/// Where the invoke proxy reaches the function, as
/// `settings.function_address` says: its Service's name in the cluster's
/// DNS, or the cluster IP of its Service: `service` as the cluster holds
/// it, or, when the caller has none at hand, read from the cluster.
pub(super) async fn endpoint(
    inner: &Inner,
    key: &FunctionKey,
    service: Option<&Service>,
) -> Result<String, DriverError> {
    let settings = &inner.settings;
    match settings.function_address {
        FunctionAddress::Dns => Ok(names::endpoint(settings, key)),
        FunctionAddress::ClusterIp => {
            let read;
            let service = match service {
                Some(service) => service,
                None => {
                    let ns = key.namespace.as_str();
                    let name = names::function_name(key);
                    read = Api::<Service>::namespaced(inner.client.clone(), ns)
                        .get_opt(&name)
                        .await
                        .map_err(infra(format_args!("reading the service {ns}/{name}")))?
                        .ok_or_else(|| {
                            DriverError::Infra(format!("the Service {ns}/{name} is not there"))
                        })?;
                    &read
                }
            };
            names::cluster_ip_endpoint(settings, service).map_err(DriverError::Infra)
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::api::core::v1::Pod;
    use kube::runtime::watcher::Event;

    use super::{FunctionPods, ServiceEndpoints};

    fn pod(name: &str) -> Pod {
        let mut p = Pod::default();
        p.metadata.name = Some(name.to_owned());
        p
    }

    #[test]
    fn a_rollout_is_settled_only_once_the_pods_it_replaced_are_gone() {
        let mut pods = FunctionPods::default();
        assert!(!pods.seen(Event::Init, 1));
        assert!(!pods.seen(Event::InitApply(pod("hello-v2")), 1));
        assert!(!pods.seen(Event::InitApply(pod("hello-v1")), 1));
        assert!(
            !pods.seen(Event::InitDone, 1),
            "the replaced pod terminates"
        );
        // Its status changes while it ends: still there.
        assert!(!pods.seen(Event::Apply(pod("hello-v2")), 1));
        assert!(pods.seen(Event::Delete(pod("hello-v2")), 1), "gone");
    }

    #[test]
    fn a_rollout_that_replaced_nothing_is_settled_once_listed() {
        let mut pods = FunctionPods::default();
        assert!(!pods.seen(Event::Init, 1));
        assert!(!pods.seen(Event::InitApply(pod("hello-v1")), 1));
        assert!(pods.seen(Event::InitDone, 1));
    }

    #[test]
    fn a_restarted_watch_forgets_what_it_listed_before() {
        let mut pods = FunctionPods::default();
        pods.seen(Event::Init, 1);
        pods.seen(Event::InitApply(pod("old")), 1);
        pods.seen(Event::InitApply(pod("new")), 1);
        pods.seen(Event::InitDone, 1);
        // The watch starts again after "old" went: it lists "new" alone.
        assert!(!pods.seen(Event::Init, 1));
        assert!(!pods.seen(Event::InitApply(pod("new")), 1));
        assert!(pods.seen(Event::InitDone, 1));
    }

    fn slice(
        name: &str,
        endpoints: &[(bool, bool)],
    ) -> k8s_openapi::api::discovery::v1::EndpointSlice {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "addressType": "IPv4",
            "endpoints": endpoints.iter().enumerate().map(|(i, (ready, terminating))| serde_json::json!({
                "addresses": [format!("10.244.0.{}", i + 2)],
                "conditions": {"ready": ready, "terminating": terminating},
            })).collect::<Vec<_>>(),
        }))
        .unwrap()
    }

    #[test]
    fn a_service_is_routed_once_its_slices_hold_the_ready_pods_and_nothing_else() {
        let mut routed = ServiceEndpoints::default();
        assert!(!routed.seen(Event::Init, 1));
        assert!(!routed.seen(Event::InitApply(slice("s", &[])), 1));
        assert!(!routed.seen(Event::InitDone, 1), "no endpoint yet");
        assert!(
            !routed.seen(Event::Apply(slice("s", &[(false, false)])), 1),
            "the pod is not ready in the slice yet"
        );
        assert!(
            !routed.seen(Event::Apply(slice("s", &[(true, false), (false, true)])), 1),
            "the replaced pod still terminates"
        );
        assert!(routed.seen(Event::Apply(slice("s", &[(true, false)])), 1));
    }

    #[test]
    fn endpoints_of_every_slice_count_and_a_deleted_slice_does_not() {
        let mut routed = ServiceEndpoints::default();
        routed.seen(Event::Init, 2);
        routed.seen(Event::InitApply(slice("a", &[(true, false)])), 2);
        assert!(!routed.seen(Event::InitDone, 2));
        assert!(routed.seen(Event::Apply(slice("b", &[(true, false)])), 2));
        assert!(!routed.seen(Event::Delete(slice("b", &[])), 2));
    }
}
