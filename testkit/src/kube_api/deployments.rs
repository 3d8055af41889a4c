//! The Deployment controller, with the ReplicaSets it keeps, as far as a
//! driver can tell (`pkg/controller/deployment` in Kubernetes):
//!
//! - each distinct pod template gets a ReplicaSet `{deployment}-{hash}`,
//!   the hash computed from the template (so the same template, applied
//!   again, finds its ReplicaSet again), labelled and selected with
//!   `pod-template-hash`, owned by the Deployment;
//! - the ReplicaSet of the current template gets the revision
//!   (`deployment.kubernetes.io/revision`) one past every older one's, and
//!   the Deployment the same annotation: going back to an older template
//!   moves its ReplicaSet to the newest revision, as `kubectl rollout undo`
//!   does;
//! - a rolling update (`maxSurge`, `maxUnavailable`) that succeeds scales
//!   the new ReplicaSet up and every other one to zero; one whose new pods
//!   never become ready leaves the old ReplicaSets' pods serving (with
//!   `maxUnavailable: 0` all of them) and adds at most `maxSurge` new pods
//!   beside them (all `replicas` when nothing serves yet);
//! - ReplicaSets scaled to zero beyond `revisionHistoryLimit` (default 10)
//!   are deleted, oldest revision first.
//!
//! Pods of a ReplicaSet are owned by it and carry the template's labels,
//! annotations and `pod-template-hash`.

use serde_json::{Value, json};

use super::FakeKube;
use super::controllers::{Outcome, first_container, owner_reference, path_of, template_map};
use super::resources::ResourceType;
use super::store::{now, suffix};

/// The label of a ReplicaSet's template hash.
pub const POD_TEMPLATE_HASH: &str = "pod-template-hash";
/// The annotation of a Deployment's and a ReplicaSet's revision.
pub const REVISION: &str = "deployment.kubernetes.io/revision";
/// `revisionHistoryLimit` when a Deployment does not say.
const DEFAULT_HISTORY: i64 = 10;

fn deployments() -> &'static ResourceType {
    ResourceType::find("apps", "v1", "deployments").expect("a known type")
}

fn replica_sets() -> &'static ResourceType {
    ResourceType::find("apps", "v1", "replicasets").expect("a known type")
}

/// The template without `pod-template-hash`, as the controller compares
/// templates.
fn without_hash(template: &Value) -> Value {
    let mut t = template.clone();
    if let Some(labels) = t["metadata"]["labels"].as_object_mut() {
        labels.remove(POD_TEMPLATE_HASH);
    }
    t
}

/// A hash of the template (FNV-1a over its JSON, whose object keys are
/// sorted), in the lowercase alphanumerics Kubernetes uses.
pub fn template_hash(template: &Value) -> String {
    let text = without_hash(template).to_string();
    let mut h: u64 = 0xcbf2_9ce4_8422_2325;
    for b in text.bytes() {
        h ^= u64::from(b);
        h = h.wrapping_mul(0x0100_0000_01b3);
    }
    const ALPHABET: &[u8] = b"bcdfghjklmnpqrstvwxz2456789";
    (0..10)
        .map(|i| ALPHABET[((h >> (i * 6)) % ALPHABET.len() as u64) as usize] as char)
        .collect()
}

fn revision(obj: &Value) -> i64 {
    obj["metadata"]["annotations"][REVISION]
        .as_str()
        .and_then(|r| r.parse().ok())
        .unwrap_or(0)
}

fn owned_by<'a>(objects: &'a [Value], uid: &Value) -> impl Iterator<Item = &'a Value> {
    objects.iter().filter(move |o| {
        o["metadata"]["ownerReferences"]
            .as_array()
            .is_some_and(|refs| refs.iter().any(|r| r["uid"] == *uid))
    })
}

fn ready(pod: &Value) -> bool {
    pod["status"]["conditions"].as_array().is_some_and(|cs| {
        cs.iter()
            .any(|c| c["type"] == "Ready" && c["status"] == "True")
    })
}

/// `maxSurge` or `maxUnavailable` as a number of pods: an integer, or a
/// percentage of `replicas` (rounded up for a surge, down otherwise).
fn pods_of(v: &Value, replicas: i64, round_up: bool) -> i64 {
    match v {
        Value::Number(n) => n.as_i64().unwrap_or(0),
        Value::String(s) => {
            let pct: i64 = s.trim_end_matches('%').parse().unwrap_or(25);
            let scaled = replicas * pct;
            if round_up {
                (scaled + 99) / 100
            } else {
                scaled / 100
            }
        }
        _ => {
            if round_up {
                (replicas * 25 + 99) / 100
            } else {
                replicas * 25 / 100
            }
        }
    }
}

/// Rolls `written` out (the latest state of it, which a delay may have
/// made newer), once per generation, ending as `decide` says.
pub(super) fn roll_out(kube: &FakeKube, written: &Value, decide: &dyn Fn(&Value) -> Outcome) {
    let path = path_of(deployments(), written);
    let Some(d) = kube.get(&path) else { return };
    let generation = d["metadata"]["generation"].as_i64().unwrap_or(1);
    if d["status"]["observedGeneration"].as_i64() == Some(generation) {
        return;
    }
    let outcome = decide(&d);
    let name = d["metadata"]["name"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let ns = d["metadata"]["namespace"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let uid = d["metadata"]["uid"].clone();
    let replicas = d["spec"]["replicas"].as_i64().unwrap_or(1);
    let rolling = &d["spec"]["strategy"]["rollingUpdate"];
    let max_surge = pods_of(&rolling["maxSurge"], replicas, true).max(1);
    let max_unavailable = pods_of(&rolling["maxUnavailable"], replicas, false);

    let template = without_hash(&d["spec"]["template"]);
    let hash = template_hash(&template);
    let new_name = format!("{name}-{hash}");
    let all_rs = kube.list(&replica_sets().path(Some(&ns), None), "");
    let owned: Vec<Value> = owned_by(&all_rs, &uid).cloned().collect();
    let max_old = owned
        .iter()
        .filter(|rs| rs["metadata"]["name"] != new_name.as_str())
        .map(revision)
        .max()
        .unwrap_or(0);
    let existing = owned
        .iter()
        .find(|rs| rs["metadata"]["name"] == new_name.as_str());
    let rev = match existing {
        Some(rs) if revision(rs) > max_old => revision(rs),
        _ => max_old + 1,
    };
    let pods = kube.list(&ResourceType::pods().path(Some(&ns), None), "");
    let old: Vec<&Value> = owned
        .iter()
        .filter(|rs| rs["metadata"]["name"] != new_name.as_str())
        .collect();
    let old_ready: i64 = old
        .iter()
        .map(|rs| {
            owned_by(&pods, &rs["metadata"]["uid"])
                .filter(|p| ready(p))
                .count() as i64
        })
        .sum();
    let succeeded = matches!(outcome, Outcome::Succeeded { .. });
    let new_count = if succeeded || old_ready == 0 {
        replicas
    } else {
        max_surge.min(replicas)
    };

    // The new ReplicaSet, created or found again.
    let mut labels = template_map(&template, "labels");
    labels[POD_TEMPLATE_HASH] = json!(hash);
    let mut rs_template = template.clone();
    rs_template["metadata"]["labels"] = labels.clone();
    let mut selector = d["spec"]["selector"].clone();
    selector["matchLabels"][POD_TEMPLATE_HASH] = json!(hash);
    let rs_path = replica_sets().path(Some(&ns), Some(&new_name));
    let mut rs = existing.cloned().unwrap_or_else(|| {
        json!({"metadata": {"name": new_name, "namespace": ns, "labels": labels,
                            "ownerReferences": [owner_reference(&d)]}})
    });
    rs["metadata"]["annotations"] = json!({REVISION: rev.to_string()});
    rs["spec"] = json!({"replicas": new_count, "selector": selector, "template": rs_template});
    let rs = kube.put_object(&rs_path, rs);

    // Its pods: kept when they already serve and the rollout succeeds
    // (a rollback to a ReplicaSet still running), else made anew.
    let mut mine: Vec<Value> = owned_by(&pods, &rs["metadata"]["uid"]).cloned().collect();
    if !succeeded {
        for p in mine.drain(..) {
            delete_pod(kube, &ns, &p);
        }
    } else {
        mine.retain(|p| {
            let keep = ready(p);
            if !keep {
                delete_pod(kube, &ns, p);
            }
            keep
        });
        while mine.len() as i64 > new_count {
            delete_pod(kube, &ns, &mine.pop().expect("not empty"));
        }
    }
    for _ in mine.len() as i64..new_count {
        mine.push(new_pod(kube, &rs, &outcome));
    }
    let new_ready = if succeeded { new_count } else { 0 };
    set_rs_status(kube, &rs_path, new_count, new_ready);

    // The old ReplicaSets: scaled to zero once the new one serves.
    let mut old_pods = 0;
    for o in &old {
        let path = replica_sets().path(Some(&ns), o["metadata"]["name"].as_str());
        let theirs: Vec<&Value> = owned_by(&pods, &o["metadata"]["uid"]).collect();
        if succeeded {
            for p in theirs {
                delete_pod(kube, &ns, p);
            }
            let mut scaled = (*o).clone();
            scaled["spec"]["replicas"] = json!(0);
            kube.put_object(&path, scaled);
            set_rs_status(kube, &path, 0, 0);
        } else {
            old_pods += theirs.len() as i64;
        }
    }
    clean_up(kube, &d, &ns, &new_name);

    let mut annotated = kube.get(&path).unwrap_or(d.clone());
    annotated["metadata"]["annotations"][REVISION] = json!(rev.to_string());
    kube.put_object(&path, annotated);
    let status = if succeeded {
        available_status(generation, replicas, &new_name)
    } else {
        stuck_status(
            generation,
            replicas,
            old_pods,
            old_ready,
            new_count,
            max_unavailable,
            &new_name,
        )
    };
    kube.set_status(&path, status);
}

fn delete_pod(kube: &FakeKube, ns: &str, pod: &Value) {
    kube.delete(&ResourceType::pods().path(Some(ns), pod["metadata"]["name"].as_str()));
}

fn set_rs_status(kube: &FakeKube, path: &str, replicas: i64, ready: i64) {
    kube.set_status(
        path,
        json!({"replicas": replicas, "readyReplicas": ready, "availableReplicas": ready,
               "fullyLabeledReplicas": replicas, "observedGeneration": 1}),
    );
}

/// A pod of `rs`: running and ready, or waiting as the failed outcome says.
fn new_pod(kube: &FakeKube, rs: &Value, outcome: &Outcome) -> Value {
    let template = &rs["spec"]["template"];
    let ns = rs["metadata"]["namespace"].as_str().unwrap_or_default();
    let pod_name = format!(
        "{}-{}",
        rs["metadata"]["name"].as_str().unwrap_or_default(),
        suffix()
    );
    let (container, image) = first_container(template);
    let t = now();
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
        "metadata": {"name": pod_name, "namespace": ns,
                     "labels": template_map(template, "labels"),
                     "annotations": template_map(template, "annotations"),
                     "ownerReferences": [owner_reference(rs)]},
        "spec": template["spec"],
        "status": status,
    });
    kube.set_pod_log(ns, &pod_name, outcome.log());
    kube.put_object(&ResourceType::pods().path(Some(ns), Some(&pod_name)), pod)
}

/// Deletes old ReplicaSets at zero beyond the history limit, oldest first.
fn clean_up(kube: &FakeKube, d: &Value, ns: &str, current: &str) {
    let limit = d["spec"]["revisionHistoryLimit"]
        .as_i64()
        .unwrap_or(DEFAULT_HISTORY);
    let all = kube.list(&replica_sets().path(Some(ns), None), "");
    let mut idle: Vec<&Value> = owned_by(&all, &d["metadata"]["uid"])
        .filter(|rs| rs["metadata"]["name"] != current && rs["spec"]["replicas"] == 0)
        .collect();
    idle.sort_by_key(|rs| revision(rs));
    let excess = idle
        .len()
        .saturating_sub(usize::try_from(limit.max(0)).unwrap_or(0));
    for rs in &idle[..excess] {
        kube.delete(&replica_sets().path(Some(ns), rs["metadata"]["name"].as_str()));
    }
}

fn condition(kind: &str, status: &str, reason: &str, message: String) -> Value {
    let t = now();
    json!({"type": kind, "status": status, "reason": reason, "message": message,
           "lastUpdateTime": t, "lastTransitionTime": t})
}

fn available_status(generation: i64, replicas: i64, rs: &str) -> Value {
    let mut status = json!({"observedGeneration": generation});
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
            format!("ReplicaSet \"{rs}\" has successfully progressed.")
        ),
    ]);
    status
}

/// A rollout whose new pods never became ready: the old ReplicaSets'
/// pods still count, and serve.
fn stuck_status(
    generation: i64,
    replicas: i64,
    old_pods: i64,
    old_ready: i64,
    new_pods: i64,
    max_unavailable: i64,
    rs: &str,
) -> Value {
    let total = old_pods + new_pods;
    let mut status = json!({"observedGeneration": generation});
    if total > 0 {
        status["replicas"] = json!(total);
        status["updatedReplicas"] = json!(new_pods);
        status["unavailableReplicas"] = json!((total - old_ready).max(0));
    }
    if old_ready > 0 {
        status["readyReplicas"] = json!(old_ready);
        status["availableReplicas"] = json!(old_ready);
    }
    let available = old_ready >= replicas - max_unavailable;
    status["conditions"] = json!([
        if available {
            condition(
                "Available",
                "True",
                "MinimumReplicasAvailable",
                "Deployment has minimum availability.".into(),
            )
        } else {
            condition(
                "Available",
                "False",
                "MinimumReplicasUnavailable",
                "Deployment does not have minimum availability.".into(),
            )
        },
        condition(
            "Progressing",
            "False",
            "ProgressDeadlineExceeded",
            format!("ReplicaSet \"{rs}\" has timed out progressing.")
        ),
    ]);
    status
}
