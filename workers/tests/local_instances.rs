//! The local driver running a function as several instances, each a
//! process of its own on a port of its own, against a real Python
//! interpreter in the sandbox: a count that changes starts or stops
//! instances and leaves the others serving, a new version replaces them
//! all once its own are healthy, a killed instance is started again and
//! one that fails its health check is replaced, and the reconciler records
//! where they serve.

mod support;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use serde_json::Value;
use sless_domain::{CrashCause, FunctionEvent, FunctionKey, InFlight, Phase, ScaleWindow};
use sless_testkit::eventually;
use sless_workers::Driver;
use sless_workers::driver::DriverError;
use support::{Harness, handler, local_driver, python_build, python_deploy};

const DEADLINE: Duration = Duration::from_secs(20);
/// How long a replaced instance's process may take to end.
const RETIRED_WITHIN: Duration = Duration::from_secs(15);

/// Says which version and which start of its process answered (a pid in
/// a jail is always the same). After `/unhealthy` its health check names
/// another instance than the one it was started as: it serves, and fails
/// its health check.
const HANDLER: &str = r#"
import os

START = os.urandom(8).hex()

def handle(event):
    if event["path"] == "/unhealthy":
        os.environ["SLESS_INSTANCE"] = "another"
    return {"version": os.environ["SLESS_VERSION"], "start": START}
"#;

fn http() -> reqwest::Client {
    reqwest::Client::builder()
        .no_proxy()
        .timeout(Duration::from_secs(5))
        .build()
        .unwrap()
}

/// What the instance at `endpoint` answers, if it does.
async fn call(endpoint: &str) -> Option<Value> {
    call_within(endpoint, Duration::from_secs(5)).await
}

/// What the instance at `endpoint` answers within `timeout`, if it does.
async fn call_within(endpoint: &str, timeout: Duration) -> Option<Value> {
    let resp = http()
        .get(format!("{endpoint}/"))
        .timeout(timeout)
        .send()
        .await
        .ok()?;
    if !resp.status().is_success() {
        return None;
    }
    resp.json().await.ok()
}

/// Which start of a process answers at each of `endpoints`, each of which
/// must answer as `version`.
async fn starts(endpoints: &[String], version: &str) -> Vec<String> {
    let mut starts = Vec::new();
    for endpoint in endpoints {
        let got = call(endpoint)
            .await
            .unwrap_or_else(|| panic!("{endpoint} does not answer"));
        assert_eq!(got["version"], version, "{endpoint}: {got}");
        starts.push(got["start"].as_str().unwrap().to_owned());
    }
    starts
}

fn distinct(items: &[String]) -> bool {
    items.iter().collect::<HashSet<_>>().len() == items.len()
}

fn alive(pid: u32) -> bool {
    // SAFETY: signal 0 only checks whether the process exists.
    unsafe { libc::kill(pid as i32, 0) == 0 }
}

/// Every pid of `pids`, each instance's process running.
fn running(pids: Vec<Option<u32>>) -> Vec<u32> {
    assert!(pids.iter().all(Option::is_some), "{pids:?}");
    pids.into_iter().flatten().collect()
}

#[tokio::test(flavor = "multi_thread")]
async fn a_count_that_changes_starts_or_stops_instances_and_leaves_the_others_serving() {
    let dir = tempfile::tempdir().unwrap();
    let driver = local_driver(dir.path());
    let k = Harness::key("many");
    let artifact = driver
        .build(python_build(&k, 1, &[("handler.py", HANDLER)]))
        .await
        .unwrap();

    let three = driver
        .deploy(python_deploy(&k, 1, &artifact, 3))
        .await
        .unwrap();
    assert_eq!((three.version, three.ready), (1, 3));
    assert_eq!(three.instances.len(), 3);
    assert!(distinct(&three.instances), "{:?}", three.instances);
    assert_eq!(three.endpoint, three.instances[0]);
    let started = starts(&three.instances, "1").await;
    assert!(distinct(&started), "a process each: {started:?}");
    assert_eq!(driver.status(&k).await, Some(three.clone()));
    let pids = running(driver.pids(&k));

    // Out to five: the three serve on as they were, two more start.
    let five = driver
        .deploy(python_deploy(&k, 1, &artifact, 5))
        .await
        .unwrap();
    assert_eq!(five.ready, 5);
    assert_eq!(five.instances.len(), 5);
    assert_eq!(five.instances[..3], three.instances[..]);
    assert_eq!(five.endpoint, three.endpoint);
    assert!(distinct(&five.instances), "{:?}", five.instances);
    let five_pids = running(driver.pids(&k));
    assert_eq!(five_pids[..3], pids[..]);
    let five_started = starts(&five.instances, "1").await;
    assert_eq!(
        five_started[..3],
        started[..],
        "none of the three restarted"
    );
    assert!(distinct(&five_started), "{five_started:?}");
    assert_eq!(driver.status(&k).await, Some(five.clone()));

    // Five again: nothing changes.
    assert_eq!(
        driver
            .deploy(python_deploy(&k, 1, &artifact, 5))
            .await
            .unwrap(),
        five
    );
    assert_eq!(running(driver.pids(&k)), five_pids);

    // In to two: the newest stop, the first two serve on.
    let two = driver
        .deploy(python_deploy(&k, 1, &artifact, 2))
        .await
        .unwrap();
    assert_eq!(two.ready, 2);
    assert_eq!(two.instances[..], three.instances[..2]);
    assert_eq!(running(driver.pids(&k))[..], pids[..2]);
    assert_eq!(starts(&two.instances, "1").await[..], started[..2]);
    // Scaled in: the extra instances stop.
    for pid in &five_pids[2..] {
        eventually(
            "a stopped instance's process to end",
            RETIRED_WITHIN,
            || async { (!alive(*pid)).then_some(()) },
        )
        .await;
    }
    for endpoint in &five.instances[2..] {
        assert!(call(endpoint).await.is_none(), "{endpoint} still answers");
    }
    assert_eq!(driver.status(&k).await, Some(two));
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_new_version_replaces_every_instance_once_all_of_its_own_are_healthy() {
    let dir = tempfile::tempdir().unwrap();
    let driver = Arc::new(local_driver(dir.path()));
    let k = Harness::key("rollover");
    let a1 = driver
        .build(python_build(&k, 1, &[("handler.py", HANDLER)]))
        .await
        .unwrap();
    // Version 2 takes a while to start: longer than a call to version 1
    // may take during the rollover.
    let slow = format!("import time\ntime.sleep(3)\n{HANDLER}");
    let a2 = driver
        .build(python_build(&k, 2, &[("handler.py", &slow)]))
        .await
        .unwrap();
    let v1 = driver.deploy(python_deploy(&k, 1, &a1, 3)).await.unwrap();
    let v1_pids = running(driver.pids(&k));

    let deploying = tokio::spawn({
        let driver = driver.clone();
        let req = python_deploy(&k, 2, &a2, 3);
        async move { driver.deploy(req).await }
    });
    // Until all of version 2 is healthy, version 1 serves as it did: each
    // call through what serves is answered, by version 1. A call can fail
    // only once version 2 took over and version 1 is stopping.
    let mut answered = 0;
    'rollover: loop {
        let now = driver.status(&k).await.expect("something serves");
        if now.version == 2 {
            break;
        }
        assert_eq!(now, v1);
        for endpoint in &now.instances {
            match call_within(endpoint, Duration::from_secs(1)).await {
                Some(got) => {
                    assert_eq!(got["version"], "1", "{got}");
                    answered += 1;
                }
                None => {
                    let serving = driver.status(&k).await.map(|d| d.version);
                    assert_eq!(
                        serving,
                        Some(2),
                        "{endpoint} of version 1 stopped answering before version 2 took over"
                    );
                    break 'rollover;
                }
            }
        }
    }
    let v2 = deploying.await.unwrap().unwrap();
    assert!(
        answered >= 3,
        "version 1 answered {answered} calls during the rollover"
    );
    assert_eq!((v2.version, v2.ready), (2, 3));
    assert!(distinct(&v2.instances), "{:?}", v2.instances);
    assert!(
        v2.instances.iter().all(|e| !v1.instances.contains(e)),
        "{:?} {:?}",
        v2.instances,
        v1.instances
    );
    starts(&v2.instances, "2").await;
    assert_eq!(driver.status(&k).await, Some(v2.clone()));
    for pid in &v1_pids {
        eventually("a version 1 process to end", RETIRED_WITHIN, || async {
            (!alive(*pid)).then_some(())
        })
        .await;
    }
    let v2_pids = running(driver.pids(&k));

    // A version that does not start leaves version 2 serving as it was.
    let broken = driver
        .build(python_build(
            &k,
            3,
            &[("handler.py", "raise ImportError('nope')\n")],
        ))
        .await
        .unwrap();
    match driver.deploy(python_deploy(&k, 3, &broken, 3)).await {
        Err(DriverError::Deploy { log_tail, .. }) => {
            assert!(log_tail.contains("nope"), "{log_tail}")
        }
        other => panic!("expected a deploy error, got {other:?}"),
    }
    assert_eq!(driver.status(&k).await, Some(v2.clone()));
    assert_eq!(running(driver.pids(&k)), v2_pids);
    starts(&v2.instances, "2").await;
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_killed_instance_starts_again_on_its_port_and_the_others_serve_on() {
    let dir = tempfile::tempdir().unwrap();
    let driver = local_driver(dir.path());
    let mut crashes = driver.crashes().unwrap();
    let k = Harness::key("phoenix");
    let artifact = driver
        .build(python_build(&k, 1, &[("handler.py", HANDLER)]))
        .await
        .unwrap();
    let dep = driver
        .deploy(python_deploy(&k, 1, &artifact, 3))
        .await
        .unwrap();
    let started = starts(&dep.instances, "1").await;
    let pids = running(driver.pids(&k));

    // SAFETY: kills a function process this test started.
    assert_eq!(unsafe { libc::kill(pids[1] as i32, libc::SIGKILL) }, 0);
    let again = eventually("the killed instance runs again", DEADLINE, || async {
        let now = driver.pids(&k);
        (driver.restarts(&k) == 1 && now[1].is_some_and(|p| p != pids[1])).then_some(now)
    })
    .await;
    assert_eq!((again[0], again[2]), (Some(pids[0]), Some(pids[2])));
    // Its port is sless's: it serves where it did, as a new process.
    assert_eq!(driver.status(&k).await, Some(dep.clone()));
    let now = starts(&dep.instances, "1").await;
    assert_eq!((&now[0], &now[2]), (&started[0], &started[2]));
    assert_ne!(now[1], started[1]);
    let crash = crashes.try_recv().expect("the crash was reported");
    assert_eq!(
        (crash.key, crash.version, crash.cause),
        (k.clone(), 1, CrashCause::Killed)
    );
    assert!(crashes.try_recv().is_err(), "one crash");
    driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread")]
async fn a_deploy_replaces_an_instance_that_fails_its_health_check() {
    let dir = tempfile::tempdir().unwrap();
    let driver = local_driver(dir.path());
    let k = Harness::key("unhealthy");
    let artifact = driver
        .build(python_build(&k, 1, &[("handler.py", HANDLER)]))
        .await
        .unwrap();
    let dep = driver
        .deploy(python_deploy(&k, 1, &artifact, 3))
        .await
        .unwrap();
    let started = starts(&dep.instances, "1").await;
    let pids = running(driver.pids(&k));

    // The second instance's process runs on, and fails its health check.
    let unhealthy = http()
        .get(format!("{}/unhealthy", dep.instances[1]))
        .send()
        .await
        .unwrap();
    assert!(unhealthy.status().is_success(), "{unhealthy:?}");

    let again = driver
        .deploy(python_deploy(&k, 1, &artifact, 3))
        .await
        .unwrap();
    assert_eq!(again.ready, 3);
    assert_eq!(
        again.instances[..2],
        [dep.instances[0].clone(), dep.instances[2].clone()]
    );
    assert!(!dep.instances.contains(&again.instances[2]), "{again:?}");
    let now = running(driver.pids(&k));
    assert_eq!(now[..2], [pids[0], pids[2]]);
    assert!(!alive(pids[1]), "the unhealthy instance's process");
    let now = starts(&again.instances, "1").await;
    assert_eq!(now[..2], [started[0].clone(), started[2].clone()]);
    assert_eq!(driver.status(&k).await, Some(again));
    driver.shutdown().await;
}

/// Enqueues one more reconcile of `key` and runs it.
async fn reconcile_again(h: &Harness, key: &FunctionKey) {
    sless_store::queue::enqueue_reconcile(&h.db.pool, &key.queue_key())
        .await
        .unwrap();
    h.worker.run_once(10).await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_scaled_function_runs_its_instances_and_the_log_says_where() {
    let h = Harness::new().await;
    let key = Harness::key("scaled");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let before = h.state(&key).await;
    assert_eq!(before.phase, Phase::Ready, "{:?}", before.last_error);
    let first = before.endpoint.clone().unwrap();
    assert_eq!(before.instance_endpoints, std::slice::from_ref(&first));

    h.append(
        &key,
        &[FunctionEvent::FunctionScaled {
            from: 1,
            to: 3,
            observed: InFlight(2.5),
            window: ScaleWindow::Stable,
            reason: "2.5 calls in flight".into(),
        }],
        true,
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    let after = h.state(&key).await;
    let events = h.events(&key).await;
    let recorded: Vec<_> = events[before.stream_version as usize..]
        .iter()
        .map(FunctionEvent::type_name)
        .collect();
    assert_eq!(recorded, ["FunctionScaled", "FunctionDeployed"]);
    assert_eq!(after.phase, Phase::Ready, "{:?}", after.last_error);
    assert_eq!(after.instance_endpoints.len(), 3);
    assert!(distinct(&after.instance_endpoints));
    assert_eq!(after.endpoint.as_deref(), Some(first.as_str()));
    assert_eq!(after.instance_endpoints[0], first, "the first serves on");
    let running = h.driver.status(&key).await.unwrap();
    assert_eq!(running.ready, 3);
    assert_eq!(running.instances, after.instance_endpoints);
    for endpoint in &after.instance_endpoints {
        let got: Value = http()
            .get(format!("{endpoint}/x"))
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        assert_eq!(got["reply"], "v1", "{endpoint}: {got}");
    }

    // Converged: running it again changes nothing.
    reconcile_again(&h, &key).await;
    assert_eq!(h.events(&key).await.len(), events.len());
    h.driver.shutdown().await;
}
