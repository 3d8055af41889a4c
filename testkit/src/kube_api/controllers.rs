//! Ready-made reactors that play the controllers a driver waits on: the
//! Job controller (a pod, its log, and the Job's outcome) and the
//! Deployment controller (pods and the rollout's status).

use std::time::Duration;

use serde_json::{Value, json};

use super::resources::ResourceType;
use super::select::LabelSelector;
use super::store::{now, suffix};
use super::{FakeKube, Verb};

/// How a Job run or a rollout ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// The Job completes (its pod exits 0) or the rollout becomes available.
    Succeeded { log: String },
    /// The Job fails with `reason` on its `Failed` condition (e.g.
    /// `BackoffLimitExceeded`, `DeadlineExceeded`; its pod exits 1), or the
    /// rollout's pods wait with `reason` (`ImagePullBackOff`,
    /// `CrashLoopBackOff`, ...) and the Deployment's `Progressing`
    /// condition turns False with `ProgressDeadlineExceeded`.
    Failed { log: String, reason: String },
}

impl Outcome {
    pub fn succeeded(log: &str) -> Outcome {
        Outcome::Succeeded {
            log: log.to_owned(),
        }
    }

    pub fn failed(reason: &str, log: &str) -> Outcome {
        Outcome::Failed {
            log: log.to_owned(),
            reason: reason.to_owned(),
        }
    }

    fn log(&self) -> &str {
        match self {
            Outcome::Succeeded { log } | Outcome::Failed { log, .. } => log,
        }
    }
}

fn path_of(rt: &ResourceType, obj: &Value) -> String {
    rt.path(
        obj["metadata"]["namespace"].as_str(),
        obj["metadata"]["name"].as_str(),
    )
}

fn owner_reference(obj: &Value) -> Value {
    json!({
        "apiVersion": obj["apiVersion"],
        "kind": obj["kind"],
        "name": obj["metadata"]["name"],
        "uid": obj["metadata"]["uid"],
        "controller": true,
        "blockOwnerDeletion": true,
    })
}

fn first_container(template: &Value) -> (Value, Value) {
    let c = &template["spec"]["containers"][0];
    (c["name"].clone(), c["image"].clone())
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

impl FakeKube {
    /// Plays the Job controller for every Job created that matches the
    /// label selector: creates its pod (owned by the Job, with the labels
    /// the controller adds), sets the pod's log, and ends pod and Job with
    /// `outcome`.
    pub fn complete_jobs(&self, selector: &str, outcome: Outcome) {
        self.complete_jobs_after(selector, Duration::ZERO, outcome);
    }

    /// [`FakeKube::complete_jobs`], `delay` after the Job is created.
    pub fn complete_jobs_after(&self, selector: &str, delay: Duration, outcome: Outcome) {
        react(
            self,
            Verb::Create,
            "jobs",
            selector,
            delay,
            move |kube, job| run_job(kube, job, &outcome),
        );
    }

    /// Plays the Deployment controller for every write of a Deployment
    /// that matches the label selector and whose generation it has not
    /// rolled out yet: replaces the Deployment's pods and sets its status.
    pub fn roll_out_deployments(&self, selector: &str, outcome: Outcome) {
        self.roll_out_deployments_after(selector, Duration::ZERO, outcome);
    }

    /// [`FakeKube::roll_out_deployments`], `delay` after the write.
    pub fn roll_out_deployments_after(&self, selector: &str, delay: Duration, outcome: Outcome) {
        react(
            self,
            Verb::Write,
            "deployments",
            selector,
            delay,
            move |kube, d| roll_out(kube, d, &outcome),
        );
    }
}

fn run_job(kube: &FakeKube, job: &Value, outcome: &Outcome) {
    let jobs = ResourceType::find("batch", "v1", "jobs").expect("a known type");
    let name = job["metadata"]["name"].as_str().unwrap_or_default();
    let ns = job["metadata"]["namespace"].as_str().unwrap_or_default();
    let uid = &job["metadata"]["uid"];
    let template = &job["spec"]["template"];
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    for (k, v) in [
        ("batch.kubernetes.io/controller-uid", uid.clone()),
        ("batch.kubernetes.io/job-name", json!(name)),
        ("controller-uid", uid.clone()),
        ("job-name", json!(name)),
    ] {
        labels[k] = v;
    }
    let (container, image) = first_container(template);
    let (phase, exit_code, reason) = match outcome {
        Outcome::Succeeded { .. } => ("Succeeded", 0, "Completed"),
        Outcome::Failed { .. } => ("Failed", 1, "Error"),
    };
    let t = now();
    let pod_name = format!("{name}-{}", suffix());
    let pod = json!({
        "metadata": {"name": pod_name, "namespace": ns, "labels": labels, "ownerReferences": [owner_reference(job)]},
        "spec": template["spec"],
        "status": {
            "phase": phase,
            "startTime": t,
            "containerStatuses": [{
                "name": container, "image": image, "imageID": "", "ready": false, "restartCount": 0,
                "state": {"terminated": {"exitCode": exit_code, "reason": reason, "startedAt": t, "finishedAt": t}},
            }],
        },
    });
    kube.set_pod_log(ns, &pod_name, outcome.log());
    kube.put_object(&ResourceType::pods().path(Some(ns), Some(&pod_name)), pod);
    let status = match outcome {
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

fn roll_out(kube: &FakeKube, written: &Value, outcome: &Outcome) {
    let deployments = ResourceType::find("apps", "v1", "deployments").expect("a known type");
    let path = path_of(deployments, written);
    // Work from the latest state, which a delay may have made newer.
    let Some(d) = kube.get(&path) else { return };
    let generation = d["metadata"]["generation"].as_i64().unwrap_or(1);
    if d["status"]["observedGeneration"].as_i64() == Some(generation) {
        return;
    }
    let name = d["metadata"]["name"].as_str().unwrap_or_default();
    let ns = d["metadata"]["namespace"].as_str().unwrap_or_default();
    let uid = d["metadata"]["uid"].as_str().unwrap_or_default();
    let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
    let pods_path = ResourceType::pods().path(Some(ns), None);
    for old in kube.list(&pods_path, "") {
        let owned = old["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == uid));
        if owned {
            kube.delete(&ResourceType::pods().path(Some(ns), old["metadata"]["name"].as_str()));
        }
    }
    let template = &d["spec"]["template"];
    let hash = format!("{:x}", generation * 2_654_435_761 % 0xfff_ffff);
    let mut labels = template["metadata"]["labels"].clone();
    if !labels.is_object() {
        labels = json!({});
    }
    labels["pod-template-hash"] = json!(hash);
    let (container, image) = first_container(template);
    let t = now();
    for _ in 0..replicas {
        let pod_name = format!("{name}-{hash}-{}", suffix());
        let status = match outcome {
            Outcome::Succeeded { .. } => json!({
                "phase": "Running", "startTime": t,
                "conditions": [{"type": "Ready", "status": "True", "lastTransitionTime": t}],
                "containerStatuses": [{"name": container, "image": image, "imageID": "", "ready": true, "started": true,
                    "restartCount": 0, "state": {"running": {"startedAt": t}}}],
            }),
            Outcome::Failed { reason, .. } => {
                let crashing = reason == "CrashLoopBackOff";
                let message = if crashing {
                    format!("back-off 5m0s restarting failed container={container} pod={pod_name}")
                } else {
                    format!("Back-off pulling image {image}")
                };
                let mut cs = json!({"name": container, "image": image, "imageID": "", "ready": false, "started": false,
                    "restartCount": if crashing { 5 } else { 0 },
                    "state": {"waiting": {"reason": reason, "message": message}}});
                if crashing {
                    cs["lastState"] = json!({"terminated": {"exitCode": 1, "reason": "Error", "startedAt": t, "finishedAt": t}});
                }
                json!({
                    "phase": if crashing { "Running" } else { "Pending" }, "startTime": t,
                    "conditions": [{"type": "Ready", "status": "False", "reason": "ContainersNotReady", "lastTransitionTime": t}],
                    "containerStatuses": [cs],
                })
            }
        };
        let pod = json!({
            "metadata": {"name": pod_name, "namespace": ns, "labels": labels, "ownerReferences": [owner_reference(&d)]},
            "spec": template["spec"],
            "status": status,
        });
        kube.set_pod_log(ns, &pod_name, outcome.log());
        kube.put_object(&ResourceType::pods().path(Some(ns), Some(&pod_name)), pod);
    }
    let condition = |kind: &str, status: &str, reason: &str, message: String| {
        json!({"type": kind, "status": status, "reason": reason, "message": message,
               "lastUpdateTime": t, "lastTransitionTime": t})
    };
    let replica_set = format!("{name}-{hash}");
    let mut status = json!({"observedGeneration": generation});
    match outcome {
        Outcome::Succeeded { .. } => {
            if replicas > 0 {
                for field in [
                    "replicas",
                    "updatedReplicas",
                    "readyReplicas",
                    "availableReplicas",
                ] {
                    status[field] = json!(replicas);
                }
            }
            status["conditions"] = json!([
                condition(
                    "Available",
                    "True",
                    "MinimumReplicasAvailable",
                    "Deployment has minimum availability.".into()
                ),
                condition(
                    "Progressing",
                    "True",
                    "NewReplicaSetAvailable",
                    format!("ReplicaSet \"{replica_set}\" has successfully progressed.")
                ),
            ]);
        }
        Outcome::Failed { .. } => {
            if replicas > 0 {
                for field in ["replicas", "updatedReplicas", "unavailableReplicas"] {
                    status[field] = json!(replicas);
                }
            }
            status["conditions"] = json!([
                condition(
                    "Available",
                    "False",
                    "MinimumReplicasUnavailable",
                    "Deployment does not have minimum availability.".into()
                ),
                condition(
                    "Progressing",
                    "False",
                    "ProgressDeadlineExceeded",
                    format!("ReplicaSet \"{replica_set}\" has timed out progressing.")
                ),
            ]);
        }
    }
    kube.set_status(&path, status);
}
