//! Ready-made reactors that play the controllers a driver waits on: the
//! Job controller (a pod, its log, and the Job's outcome), here, and the
//! Deployment controller (ReplicaSets, pods and the rollout's status), in
//! `deployments.rs`. Their pods start as the kubelet starts them
//! (`kubelet.rs`): once what they mount exists.

use std::sync::Arc;
use std::time::Duration;

use serde_json::{Value, json};

use super::kubelet::{self, ContainerView, Waiting};
use super::resources::ResourceType;
use super::select::LabelSelector;
use super::store::{now, suffix};
use super::{FakeKube, Verb};

/// How a Job run or a rollout ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The Job completes (its pod exits 0) or the rollout becomes available.
    /// `message`: what the container wrote to its termination message file.
    Succeeded {
        log: String,
        message: Option<String>,
    },
    /// The Job fails with `reason` on its `Failed` condition (e.g.
    /// `BackoffLimitExceeded`, `DeadlineExceeded`; its pod exits 1), or the
    /// rollout's new pods wait with `reason` (`ImagePullBackOff`,
    /// `CrashLoopBackOff`, ...) and the Deployment's `Progressing`
    /// condition turns False with `ProgressDeadlineExceeded`.
    Failed {
        log: String,
        reason: String,
        message: Option<String>,
    },
}

impl Outcome {
    pub fn succeeded(log: &str) -> Outcome {
        Outcome::Succeeded {
            log: log.to_owned(),
            message: None,
        }
    }

    pub fn failed(reason: &str, log: &str) -> Outcome {
        Outcome::Failed {
            log: log.to_owned(),
            reason: reason.to_owned(),
            message: None,
        }
    }

    /// The same outcome, the container having written `message` to its
    /// `terminationMessagePath` (kaniko's `--digest-file`, say).
    pub fn with_termination_message(self, message: &str) -> Outcome {
        let message = Some(message.to_owned());
        match self {
            Outcome::Succeeded { log, .. } => Outcome::Succeeded { log, message },
            Outcome::Failed { log, reason, .. } => Outcome::Failed {
                log,
                reason,
                message,
            },
        }
    }

    pub(super) fn log(&self) -> &str {
        match self {
            Outcome::Succeeded { log, .. } | Outcome::Failed { log, .. } => log,
        }
    }

    fn message(&self) -> Option<&str> {
        match self {
            Outcome::Succeeded { message, .. } | Outcome::Failed { message, .. } => {
                message.as_deref()
            }
        }
    }
}

pub(super) fn path_of(rt: &ResourceType, obj: &Value) -> String {
    rt.path(
        obj["metadata"]["namespace"].as_str(),
        obj["metadata"]["name"].as_str(),
    )
}

pub(super) fn owner_reference(obj: &Value) -> Value {
    json!({
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

pub(super) fn first_container(template: &Value) -> (Value, Value) {
    let c = &template["spec"]["containers"][0];
    (c["name"].clone(), c["image"].clone())
}

/// A map of the template's `labels` or `annotations` (empty when it has none).
pub(super) fn template_map(template: &Value, field: &str) -> Value {
    let m = template["metadata"][field].clone();
    if m.is_object() { m } else { json!({}) }
}

/// Runs `act` for every object `on` sees that matches `selector`, at once
/// or after `delay` on a task of its own.
fn react(
    kube: &FakeKube,
    verb: Verb,
    plural: &str,
    selector: &str,
    delay: Duration,
    act: impl Fn(&FakeKube, &Value) + Send + Sync + Clone + 'static,
) {
    let selector = LabelSelector::parse(selector).expect("a valid label selector");
    kube.on(verb, plural, move |kube, obj| {
        if !selector.matches(&obj) {
            return;
        }
        if delay.is_zero() {
            act(&kube, &obj);
        } else {
            let act = act.clone();
            tokio::spawn(async move {
                tokio::time::sleep(delay).await;
                act(&kube, &obj);
            });
        }
    });
}

/// How a Job's run ends, from what its container sees.
type JobEnd = Arc<dyn Fn(&ContainerView) -> Outcome + Send + Sync>;

impl FakeKube {
    /// Plays the Job controller for every Job created that matches the
    /// label selector: creates its pod (owned by the Job, with the labels
    /// the controller adds), and once the kubelet could start it (see
    /// [`FakeKube::complete_jobs_with`]) sets the pod's log and ends pod
    /// and Job with `outcome`.
    pub fn complete_jobs(&self, selector: &str, outcome: Outcome) {
        self.complete_jobs_with(selector, move |_| outcome.clone());
    }

    /// [`FakeKube::complete_jobs`], `delay` after the Job is created.
    pub fn complete_jobs_after(&self, selector: &str, delay: Duration, outcome: Outcome) {
        let end: JobEnd = Arc::new(move |_| outcome.clone());
        react(
            self,
            Verb::Create,
            "jobs",
            selector,
            delay,
            move |kube, job| run_job(kube, job, end.clone()),
        );
    }

    /// [`FakeKube::complete_jobs`], the outcome decided by `end` from what
    /// the container sees (its environment and mounted files, see
    /// [`ContainerView`]). As the kubelet does, the container starts only
    /// when the Secrets and ConfigMaps it mounts or reads variables from
    /// exist: until then the pod is `Pending`, its container waiting
    /// (`ContainerCreating` for a volume, `CreateContainerConfigError` for
    /// a variable), and the Job runs on. A container whose environment
    /// `execve` would refuse (a `NAME=value` of 128 KiB or more) fails to
    /// start: exit code 128, `StartError`, and the Job fails.
    pub fn complete_jobs_with(
        &self,
        selector: &str,
        end: impl Fn(&ContainerView) -> Outcome + Send + Sync + 'static,
    ) {
        let end: JobEnd = Arc::new(end);
        react(
            self,
            Verb::Create,
            "jobs",
            selector,
            Duration::ZERO,
            move |kube, job| run_job(kube, job, end.clone()),
        );
    }

    /// Plays the Deployment controller for every write of a Deployment
    /// that matches the label selector and whose generation it has not
    /// rolled out yet (see `deployments.rs`).
    pub fn roll_out_deployments(&self, selector: &str, outcome: Outcome) {
        self.roll_out_deployments_with(selector, move |_| outcome.clone());
    }

    /// [`FakeKube::roll_out_deployments`], `delay` after the write.
    pub fn roll_out_deployments_after(&self, selector: &str, delay: Duration, outcome: Outcome) {
        react(
            self,
            Verb::Write,
            "deployments",
            selector,
            delay,
            move |kube, d| super::deployments::roll_out(kube, d, &|_| outcome.clone()),
        );
    }

    /// [`FakeKube::roll_out_deployments`], the outcome of each rollout
    /// decided by `outcome` from the Deployment as written (its template's
    /// image, say).
    pub fn roll_out_deployments_with(
        &self,
        selector: &str,
        outcome: impl Fn(&Value) -> Outcome + Send + Sync + 'static,
    ) {
        let outcome = Arc::new(outcome);
        react(
            self,
            Verb::Write,
            "deployments",
            selector,
            Duration::ZERO,
            move |kube, d| super::deployments::roll_out(kube, d, &*outcome),
        );
    }
}

/// The Job controller's part: the pod, then the kubelet's.
fn run_job(kube: &FakeKube, job: &Value, end: JobEnd) {
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let ns = job["metadata"]["namespace"].as_str().unwrap_or_default();
    let uid = &job["metadata"]["uid"];
    let template = &job["spec"]["template"];
    let mut labels = template_map(template, "labels");
    for (k, v) in [
        ("batch.kubernetes.io/controller-uid", uid.clone()),
        ("batch.kubernetes.io/job-name", json!(name)),
        ("controller-uid", uid.clone()),
        ("job-name", json!(name)),
    ] {
        labels[k] = v;
    }
    let (container, image) = first_container(template);
    let pod_name = format!("{name}-{}", suffix());
    let pod = json!({
        "metadata": {"name": pod_name, "namespace": ns, "labels": labels,
                     "annotations": template_map(template, "annotations"),
                     "ownerReferences": [owner_reference(job)]},
        "spec": template["spec"],
        "status": {"phase": "Pending", "startTime": now()},
    });
    let pod_path = ResourceType::pods().path(Some(ns), Some(&pod_name));
    let pod = kube.put_object(&pod_path, pod);
    // Subscribed before the first look: no change is missed in between.
    let mut changes = kube.store().subscribe();
    match kubelet::start(kube, &pod) {
        Ok(view) => finish_job(kube, job, &pod, &view, &*end),
        Err(refused) if refused.failed => fail_to_start(kube, job, &pod, &refused),
        Err(waiting) => {
            set_waiting(kube, &pod_path, &container, &image, &waiting);
            let (kube, job, pod) = (kube.clone(), job.clone(), pod.clone());
            // Started by the first change after which it can be.
            tokio::spawn(async move {
                let jobs = ResourceType::find("batch", "v1", "jobs").expect("a known type");
                loop {
                    use tokio::sync::broadcast::error::RecvError;
                    match changes.recv().await {
                        Ok(_) | Err(RecvError::Lagged(_)) => {}
                        Err(RecvError::Closed) => return,
                    }
                    if kube.get(&path_of(jobs, &job)).is_none() || kube.get(&pod_path).is_none() {
                        return;
                    }
                    match kubelet::start(&kube, &pod) {
                        Ok(view) => finish_job(&kube, &job, &pod, &view, &*end),
                        Err(refused) if refused.failed => {
                            fail_to_start(&kube, &job, &pod, &refused)
                        }
                        Err(_) => continue,
                    }
                    return;
                }
            });
        }
    }
}

/// A pod whose container cannot start yet.
fn set_waiting(kube: &FakeKube, pod_path: &str, container: &Value, image: &Value, w: &Waiting) {
    kube.patch_status(
        pod_path,
        json!({"phase": "Pending", "containerStatuses": [{
            "name": container, "image": image, "imageID": "", "ready": false, "restartCount": 0,
            "started": false, "state": {"waiting": {"reason": w.reason, "message": w.message}}}]}),
    );
}

/// The runtime could not start the container: it ends with exit code 128
/// (`StartError`, as containerd reports it), and so does the Job.
fn fail_to_start(kube: &FakeKube, job: &Value, pod: &Value, why: &Waiting) {
    let jobs = ResourceType::find("batch", "v1", "jobs").expect("a known type");
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let spec = &pod["spec"]["containers"][0];
    let t = now();
    kube.patch_status(
        &ResourceType::pods().path(Some(ns), Some(pod_name)),
        json!({"phase": "Failed", "containerStatuses": [{
            "name": spec["name"], "image": spec["image"], "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": {"exitCode": 128, "reason": why.reason, "message": why.message,
                                     "startedAt": t, "finishedAt": t}}}]}),
    );
    kube.set_status(
        &path_of(jobs, job),
        json!({"startTime": t, "failed": 1, "ready": 0, "terminating": 0, "uncountedTerminatedPods": {},
               "conditions": [
                   {"type": "FailureTarget", "status": "True", "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit", "lastProbeTime": t, "lastTransitionTime": t},
                   {"type": "Failed", "status": "True", "reason": "BackoffLimitExceeded",
                    "message": "Job has reached the specified backoff limit", "lastProbeTime": t, "lastTransitionTime": t}]}),
    );
}

/// The container ran: its log, its end, and the Job's.
fn finish_job(
    kube: &FakeKube,
    job: &Value,
    pod: &Value,
    view: &ContainerView,
    end: &(dyn Fn(&ContainerView) -> Outcome + Send + Sync),
) {
    let jobs = ResourceType::find("batch", "v1", "jobs").expect("a known type");
    let ns = pod["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod_name = pod["metadata"]["name"].as_str().unwrap_or_default();
    let outcome = end(view);
    let (phase, exit_code, reason) = match &outcome {
        Outcome::Succeeded { .. } => ("Succeeded", 0, "Completed"),
        Outcome::Failed { .. } => ("Failed", 1, "Error"),
    };
    let spec = &pod["spec"]["containers"][0];
    let t = now();
    let mut terminated =
        json!({"exitCode": exit_code, "reason": reason, "startedAt": t, "finishedAt": t});
    if let Some(m) =
        kubelet::termination_message(spec, outcome.message(), exit_code != 0, outcome.log())
    {
        terminated["message"] = json!(m);
    }
    kube.set_pod_log(ns, pod_name, outcome.log());
    kube.patch_status(
        &ResourceType::pods().path(Some(ns), Some(pod_name)),
        json!({"phase": phase, "containerStatuses": [{
            "name": spec["name"], "image": spec["image"], "imageID": "", "ready": false, "restartCount": 0,
            "state": {"terminated": terminated}}]}),
    );
    let status = match &outcome {
        Outcome::Succeeded { .. } => json!({
            "startTime": t, "completionTime": t, "succeeded": 1, "ready": 0, "terminating": 0,
            "uncountedTerminatedPods": {},
            "conditions": [
                {"type": "SuccessCriteriaMet", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastProbeTime": t, "lastTransitionTime": t},
                {"type": "Complete", "status": "True", "reason": "CompletionsReached",
                 "message": "Reached expected number of succeeded pods", "lastProbeTime": t, "lastTransitionTime": t},
            ],
        }),
        Outcome::Failed { reason, .. } => json!({
            "startTime": t, "failed": 1, "ready": 0, "terminating": 0,
            "uncountedTerminatedPods": {},
            "conditions": [
                {"type": "FailureTarget", "status": "True", "reason": reason,
                 "message": "Job has reached the specified backoff limit", "lastProbeTime": t, "lastTransitionTime": t},
                {"type": "Failed", "status": "True", "reason": reason,
                 "message": "Job has reached the specified backoff limit", "lastProbeTime": t, "lastTransitionTime": t},
            ],
        }),
    };
    // The Job may be gone by now; then there is nothing to report on.
    kube.set_status(&path_of(jobs, job), status);
}
