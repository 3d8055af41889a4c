//! A rolling restart of every Deployment of sless under a steady load of
//! calls fails no call: a step of the in-cluster walkthrough
//! (`in_cluster.rs`), which installs sless once. The projector, the
//! worker and the api are restarted in turn, in the order of an upgrade
//! (docs/kubernetes.md, "Upgrading"), as `kubectl rollout restart` does
//! (the pod template's `kubectl.kubernetes.io/restartedAt` annotation),
//! each waited for until its rollout is complete and its old pods are
//! gone, while:
//!
//! - callers loop on a warm function through the functions' port of the
//!   API's Service, from this machine, where kube-proxy routes the cluster
//!   IP to the API's pods, as a load balancer in front of the cluster would;
//! - one more reads that function through the REST API on the same Service;
//! - and each restart begins with a call to a second function, at zero
//!   then, so that its start (the proxy's hold, the worker's reconcile, the
//!   projector's read model) runs while the role is replaced.
//!
//! A call fails when its answer is not the function's 200 (or the API's),
//! or its connection broke once the request was sent. A connection refused
//! or unreachable before anything was sent is tried again, as a load
//! balancer does, within the call's deadline; but each is counted, and
//! there must be none: kube-proxy routes new connections to a pod until
//! it has seen it leave the Service, so a pod that stopped accepting at
//! once (no shutdown delay) refuses the connections made meanwhile, which
//! a client of the Service without retries would see fail.

use std::error::Error as _;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::api::{Api, ListParams, Patch, PatchParams};
use reqwest::StatusCode;
use serde_json::{Value, json};

use crate::in_cluster::{ROLLOUT_DEADLINE, SYSTEM, wait};
use crate::support::{Client, zip_dir};

/// The function each restart calls from zero, beside the warm one.
pub const COLD: &str = "cold";
/// Callers of the warm function.
const CALLERS: usize = 4;
/// A caller's pause between two calls: a steady load that leaves the two
/// cores room for the pods being replaced.
const PACE: Duration = Duration::from_millis(25);
/// The REST reader's pause between two reads.
const READ_PACE: Duration = Duration::from_millis(100);
/// How long one call may take, its connection retries included.
const CALL_DEADLINE: Duration = Duration::from_secs(30);
/// When a call whose connection was refused is tried again.
const RETRY_AFTER: Duration = Duration::from_millis(50);
/// Answered calls of the warm function each phase must have: the load
/// ran through every restart.
const CALLS_PER_PHASE: u64 = 20;
/// The Deployments in the order an upgrade rolls them: the readers of
/// the log and the queue before their writers.
const ORDER: [&str; 3] = ["sless-projector", "sless-worker", "sless-api"];
/// The phases of the load: before the first restart, during each role's,
/// and after the last.
const PHASES: [&str; 5] = ["before", ORDER[0], ORDER[1], ORDER[2], "after"];

/// Creates `COLD` from the same example as the walkthrough's function,
/// scaled to zero after `idle_sec`, and uploads it; its build runs while
/// the walkthrough goes on.
pub async fn create_cold(client: &Client, idle_sec: u32) {
    let res = client
        .create(json!({
            "name": COLD, "runtime": "python3.11", "entrypoint": "handler.handle",
            "scale_to_zero_after_sec": idle_sec,
        }))
        .await;
    let status = res.status();
    assert_eq!(status, 201, "{}", res.text().await.unwrap());
    let example = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello-python");
    let res = client.upload(COLD, zip_dir(&example)).await;
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
}

/// What one kind of call saw in one phase.
#[derive(Default, Clone, Copy)]
struct Figures {
    calls: u64,
    failed: u64,
    /// Connections refused before the request went out, tried again.
    refused: u64,
    longest: Duration,
}

/// What a call is.
#[derive(Clone, Copy)]
enum Kind {
    /// The warm function, through `/fn`.
    Warm,
    /// The function at zero, through `/fn`: a start each.
    Cold,
    /// The REST API: a read of the warm function.
    Rest,
}

const KINDS: [(Kind, &str); 3] = [
    (Kind::Warm, "warm"),
    (Kind::Cold, "from zero"),
    (Kind::Rest, "REST"),
];

/// How one call ended.
struct Outcome {
    took: Duration,
    refused: u64,
    /// What was wrong with it.
    failed: Option<String>,
}

#[derive(Default)]
struct Tally {
    phase: AtomicUsize,
    /// By phase, then by kind.
    figures: Mutex<[[Figures; 3]; PHASES.len()]>,
    failures: Mutex<Vec<String>>,
}

impl Tally {
    fn phase(&self) -> usize {
        self.phase.load(Ordering::SeqCst)
    }

    fn record(&self, kind: Kind, phase: usize, what: &str, outcome: &Outcome) {
        let mut figures = self.figures.lock().unwrap();
        let f = &mut figures[phase][kind as usize];
        f.calls += 1;
        f.refused += outcome.refused;
        f.longest = f.longest.max(outcome.took);
        if let Some(e) = &outcome.failed {
            f.failed += 1;
            self.failures.lock().unwrap().push(format!(
                "{} during {}, after {:?}: {what}: {e}",
                KINDS[kind as usize].1, PHASES[phase], outcome.took
            ));
        }
    }

    fn of(&self, phase: usize, kind: Kind) -> Figures {
        self.figures.lock().unwrap()[phase][kind as usize]
    }
}

/// An error with its causes, which say whether the connection broke.
fn chain(e: &reqwest::Error) -> String {
    let mut out = e.to_string();
    let mut source = e.source();
    while let Some(s) = source {
        out.push_str(&format!(": {s}"));
        source = s.source();
    }
    out
}

/// One call: sent again while its connection is refused (or the address
/// unreachable) before the request went out, within `CALL_DEADLINE`;
/// `check` judges the answer.
async fn call(
    request: impl Fn() -> reqwest::RequestBuilder,
    check: impl FnOnce(StatusCode, &str) -> Result<(), String>,
) -> Outcome {
    let started = Instant::now();
    let mut refused = 0;
    let answer = loop {
        match request().send().await {
            Ok(res) => {
                let status = res.status();
                break match res.text().await {
                    Ok(body) => check(status, &body),
                    Err(e) => Err(format!("{status}, then the body broke: {}", chain(&e))),
                };
            }
            Err(e) if e.is_connect() && started.elapsed() < CALL_DEADLINE => {
                refused += 1;
                tokio::time::sleep(RETRY_AFTER).await;
            }
            Err(e) => break Err(chain(&e)),
        }
    };
    Outcome {
        took: started.elapsed(),
        refused,
        failed: answer.err(),
    }
}

/// The answer of the example function to `?name=NAME`.
fn says_hello(name: &str) -> impl FnOnce(StatusCode, &str) -> Result<(), String> + '_ {
    move |status, body| {
        if status == StatusCode::OK && body.contains(&format!("hello, {name}")) {
            Ok(())
        } else {
            Err(format!("{status}: {body}"))
        }
    }
}

/// The callers, until stopped.
struct Load {
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    callers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(client: &Client, warm: &str) -> Load {
        let http = reqwest::Client::builder()
            .timeout(CALL_DEADLINE)
            .build()
            .unwrap();
        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let mut callers = Vec::new();
        for i in 0..CALLERS {
            let (http, tally, stop) = (http.clone(), tally.clone(), stop.clone());
            let base = format!("{}/fn/{}/{warm}", client.fn_url, client.namespace);
            callers.push(tokio::spawn(async move {
                for n in 0.. {
                    if stop.load(Ordering::SeqCst) {
                        break;
                    }
                    let phase = tally.phase();
                    let name = format!("w{i}n{n}");
                    let url = format!("{base}?name={name}");
                    let outcome = call(|| http.get(&url), says_hello(&name)).await;
                    tally.record(Kind::Warm, phase, &url, &outcome);
                    tokio::time::sleep(PACE).await;
                }
            }));
        }
        callers.push(tokio::spawn({
            let (client, tally, stop) = (client.clone(), tally.clone(), stop.clone());
            let read = client.v1(&format!("/functions/{warm}"));
            async move {
                while !stop.load(Ordering::SeqCst) {
                    let phase = tally.phase();
                    let outcome = call(
                        || http.get(&read).bearer_auth(&client.token),
                        |status, body| match serde_json::from_str::<Value>(body) {
                            Ok(f) if status == StatusCode::OK && f["phase"] == "Ready" => Ok(()),
                            _ => Err(format!("{status}: {body}")),
                        },
                    )
                    .await;
                    tally.record(Kind::Rest, phase, &read, &outcome);
                    tokio::time::sleep(READ_PACE).await;
                }
            }
        }));
        Load {
            tally,
            stop,
            callers,
        }
    }

    /// Waits until the warm function had `CALLS_PER_PHASE` calls in the
    /// current phase.
    async fn until_calls(&self, report: &impl Fn() -> String) {
        let phase = self.tally.phase();
        wait(
            &format!("{CALLS_PER_PHASE} calls {}", PHASES[phase]),
            Duration::from_secs(60),
            report,
            || async {
                let calls = self.tally.of(phase, Kind::Warm).calls;
                if calls >= CALLS_PER_PHASE {
                    Ok(())
                } else {
                    Err(format!("{calls} calls"))
                }
            },
        )
        .await;
    }

    /// Stops the callers once their calls are answered.
    async fn stop(self) -> Arc<Tally> {
        self.stop.store(true, Ordering::SeqCst);
        for c in self.callers {
            c.await.unwrap();
        }
        self.tally
    }
}

/// Waits until `COLD` is at zero, in the read model and on the cluster
/// (no pod of it left), so that a call to it waits for a start.
async fn until_cold(client: &Client, tenant_pods: &Api<Pod>, report: &impl Fn() -> String) {
    let selector = ListParams::default().labels(&format!("sless.dev/function={COLD}"));
    wait(
        &format!("{COLD} at zero"),
        ROLLOUT_DEADLINE,
        report,
        || async {
            let f = client.function(COLD).await;
            let pods = tenant_pods
                .list(&selector)
                .await
                .map_err(|e| e.to_string())?;
            if f["instances"] == 0 && pods.items.is_empty() {
                Ok(())
            } else {
                Err(format!("{f}; {} pods", pods.items.len()))
            }
        },
    )
    .await;
}

/// The names of the pods of `role` that exist now.
async fn pods_of(pods: &Api<Pod>, role: &str) -> Result<Vec<String>, String> {
    let component = role.strip_prefix("sless-").unwrap();
    let selector = format!("app.kubernetes.io/name=sless,app.kubernetes.io/component={component}");
    let list = pods
        .list(&ListParams::default().labels(&selector))
        .await
        .map_err(|e| e.to_string())?;
    Ok(list
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect())
}

/// `kubectl rollout restart` of `role`, waited for as `kubectl rollout
/// status` does (the new generation observed, every replica updated and
/// available, none of the old ones left), and then until its old pods,
/// which end within their grace, are gone.
async fn restart(
    deployments: &Api<Deployment>,
    pods: &Api<Pod>,
    role: &str,
    report: &impl Fn() -> String,
) {
    let old = pods_of(pods, role).await.unwrap();
    let now = chrono::Utc::now().to_rfc3339_opts(chrono::SecondsFormat::Secs, true);
    let patch = json!({"spec": {"template": {"metadata": {"annotations": {
        "kubectl.kubernetes.io/restartedAt": now,
    }}}}});
    let patched = deployments
        .patch(role, &PatchParams::default(), &Patch::Strategic(&patch))
        .await
        .unwrap();
    let generation = patched.metadata.generation.expect("a generation");
    wait(
        &format!("{role} rolled out"),
        ROLLOUT_DEADLINE,
        report,
        || async {
            let d = deployments.get(role).await.map_err(|e| e.to_string())?;
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let s = d.status.unwrap_or_default();
            let seen = (
                s.observed_generation.unwrap_or(0),
                s.updated_replicas.unwrap_or(0),
                s.available_replicas.unwrap_or(0),
                s.replicas.unwrap_or(0),
            );
            if seen.0 >= generation && seen.1 == want && seen.2 == want && seen.3 == want {
                Ok(())
            } else {
                Err(format!(
                    "generation {} of {generation}; {} updated, {} available, {} in all of {want}",
                    seen.0, seen.1, seen.2, seen.3
                ))
            }
        },
    )
    .await;
    wait(
        &format!("{role}'s old pods gone"),
        ROLLOUT_DEADLINE,
        report,
        || async {
            let left: Vec<String> = pods_of(pods, role)
                .await?
                .into_iter()
                .filter(|p| old.contains(p))
                .collect();
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        },
    )
    .await;
}

/// Restarts sless's Deployments one after the other while callers call
/// `warm` and `COLD` and read the API, and asserts that no call failed.
pub async fn restart_every_role_under_load(
    admin: kube::Client,
    client: &Client,
    warm: &str,
    report: &impl Fn() -> String,
) {
    let started = Instant::now();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), SYSTEM);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SYSTEM);
    let tenant_pods: Api<Pod> = Api::namespaced(admin, &client.namespace);
    let http = reqwest::Client::builder()
        .timeout(CALL_DEADLINE)
        .build()
        .unwrap();
    let load = Load::start(client, warm);
    load.until_calls(report).await;
    for (i, role) in ORDER.iter().enumerate() {
        until_cold(client, &tenant_pods, report).await;
        let phase = i + 1;
        load.tally.phase.store(phase, Ordering::SeqCst);
        let restarting = Instant::now();
        let name = format!("cold{phase}");
        let url = format!(
            "{}/fn/{}/{COLD}?name={name}",
            client.fn_url, client.namespace
        );
        let from_zero = {
            let (http, url) = (http.clone(), url.clone());
            tokio::spawn(async move { call(|| http.get(&url), says_hello(&name)).await })
        };
        restart(&deployments, &pods, role, report).await;
        let outcome = from_zero.await.unwrap();
        load.tally.record(Kind::Cold, phase, &url, &outcome);
        load.until_calls(report).await;
        eprintln!(
            "{role} restarted: {:?} (the call from zero took {:?})",
            restarting.elapsed(),
            outcome.took
        );
    }
    load.tally.phase.store(PHASES.len() - 1, Ordering::SeqCst);
    load.until_calls(report).await;
    let tally = load.stop().await;

    let mut all = [Figures::default(); 3];
    for (phase, name) in PHASES.iter().enumerate() {
        for (kind, what) in KINDS {
            let f = tally.of(phase, kind);
            eprintln!(
                "  {name:>15} {what:>9}: {} calls, {} failed, {} refused and sent again, longest {:?}",
                f.calls, f.failed, f.refused, f.longest
            );
            let a = &mut all[kind as usize];
            a.calls += f.calls;
            a.failed += f.failed;
            a.refused += f.refused;
            a.longest = a.longest.max(f.longest);
        }
    }
    for (kind, what) in KINDS {
        let a = all[kind as usize];
        eprintln!(
            "rolling restart, {what} calls: {} made, {} failed, {} refused and sent again, the longest {:?}",
            a.calls, a.failed, a.refused, a.longest
        );
    }
    eprintln!("the rolling restart under load: {:?}", started.elapsed());
    let failures = tally.failures.lock().unwrap();
    assert!(
        failures.is_empty(),
        "{} calls failed while sless's Deployments were restarted:\n{}\n{}",
        failures.len(),
        failures
            .iter()
            .take(20)
            .cloned()
            .collect::<Vec<_>>()
            .join("\n"),
        report()
    );
    let refused: u64 = all.iter().map(|a| a.refused).sum();
    assert_eq!(
        refused, 0,
        "connections to the API's Service were refused: a pod stopped accepting before \
         kube-proxy stopped sending it connections (SLESS_SHUTDOWN_DELAY_SECS too short)"
    );
}
