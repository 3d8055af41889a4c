//! The reconciler after a spec change and after a delete, driven step by
//! step against a real PostgreSQL, a real S3 server and the local driver.

mod support;

use sless_domain::{FunctionEvent, FunctionSpec, Phase, Runtime};
use sless_workers::Driver;
use support::{Harness, handler, pending};

const GREETER: &str = "import os\n\ndef handle(event):\n    return {'greeting': os.environ.get('GREETING', 'none')}\n";

fn python(entrypoint: &str, env: &[(&str, &str)], memory_mb: u32) -> FunctionSpec {
    FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: entrypoint.into(),
        memory_mb,
        timeout_sec: 30,
        env_vars: env
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect(),
        scale_to_zero_after_sec: None,
        scaling: Default::default(),
    }
}

async fn get_json(url: String) -> serde_json::Value {
    reqwest::get(url).await.unwrap().json().await.unwrap()
}

/// Enqueues one more reconcile of `key` and runs it.
async fn reconcile_again(h: &Harness, key: &sless_domain::FunctionKey) {
    sless_store::queue::enqueue_reconcile(&h.db.pool, &key.queue_key())
        .await
        .unwrap();
    h.worker.run_once(10).await.unwrap();
}

fn types(events: &[FunctionEvent]) -> Vec<&'static str> {
    events.iter().map(|e| e.type_name()).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spec_change_redeploys_the_built_version_with_the_new_spec() {
    let h = Harness::new().await;
    let key = Harness::key("greeter");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", GREETER)], true).await;
    h.worker.run_once(10).await.unwrap();
    let before = h.state(&key).await;
    assert_eq!(before.phase, Phase::Ready, "{:?}", before.last_error);
    let endpoint = before.endpoint.clone().unwrap();
    assert_eq!(get_json(format!("{endpoint}/")).await["greeting"], "none");

    let spec = python("handler.handle", &[("GREETING", "hej")], 128);
    h.append(
        &key,
        &[FunctionEvent::FunctionSpecChanged { spec: spec.clone() }],
        true,
    )
    .await;
    assert_eq!(h.state(&key).await.phase, Phase::Pending);
    h.worker.run_once(10).await.unwrap();

    let after = h.state(&key).await;
    assert_eq!(after.phase, Phase::Ready, "{:?}", after.last_error);
    assert_eq!(after.deployed_version, Some(1));
    assert!(after.deployed_with_current_spec());
    let events = h.events(&key).await;
    assert_eq!(
        types(&events[before.stream_version as usize..]),
        ["FunctionSpecChanged", "FunctionDeployed"],
        "redeployed without a rebuild"
    );
    let new_endpoint = after.endpoint.unwrap();
    assert_ne!(
        new_endpoint, endpoint,
        "a new process with the new environment"
    );
    assert_eq!(
        get_json(format!("{new_endpoint}/")).await["greeting"],
        "hej"
    );

    // Converged: running it again changes nothing.
    reconcile_again(&h, &key).await;
    assert_eq!(h.events(&key).await.len(), events.len());

    // Memory alone: the local driver keeps the process, the log records
    // that the new spec is deployed.
    let bigger = python("handler.handle", &[("GREETING", "hej")], 512);
    h.append(
        &key,
        &[FunctionEvent::FunctionSpecChanged { spec: bigger }],
        true,
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert_eq!(state.phase, Phase::Ready);
    assert!(state.deployed_with_current_spec());
    assert_eq!(state.endpoint.as_deref(), Some(new_endpoint.as_str()));
    assert_eq!(pending(&h.db.pool).await, 0);
    h.driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_spec_change_gives_a_failed_deploy_another_try() {
    let h = Harness::new().await;
    let key = Harness::key("typo");
    h.append(
        &key,
        &[FunctionEvent::FunctionCreated {
            spec: python("handler.handel", &[], 128),
        }],
        false,
    )
    .await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    assert_eq!(h.state(&key).await.phase, Phase::Failed);

    h.append(
        &key,
        &[FunctionEvent::FunctionSpecChanged {
            spec: python("handler.handle", &[], 128),
        }],
        true,
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert_eq!(state.phase, Phase::Ready, "{:?}", state.last_error);
    let body = get_json(format!("{}/x", state.endpoint.unwrap())).await;
    assert_eq!(body["reply"], "v1");
    h.driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_deleted_function_has_what_runs_removed_and_records_nothing_more() {
    let h = Harness::new().await;
    let key = Harness::key("doomed");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let endpoint = h.state(&key).await.endpoint.expect("deployed");
    assert!(h.driver.status(&key).await.is_some());
    let pid = h.driver.pid(&key).expect("a process");

    h.append(&key, &[FunctionEvent::FunctionDeleted {}], true)
        .await;
    let at = h.events(&key).await.len();
    h.worker.run_once(10).await.unwrap();
    assert_eq!(h.driver.status(&key).await, None);
    assert_eq!(h.driver.pid(&key), None);
    assert!(
        reqwest::get(format!("{endpoint}/")).await.is_err(),
        "the old endpoint is closed"
    );
    assert!(
        !std::path::Path::new(&format!("/proc/{pid}")).exists()
            || std::fs::read_to_string(format!("/proc/{pid}/stat"))
                .is_ok_and(|s| s.contains(") Z ")),
        "process {pid} is gone"
    );
    assert_eq!(h.events(&key).await.len(), at, "removal records no event");
    assert_eq!(h.state(&key).await.phase, Phase::Deleted);

    // Created again, nothing uploaded yet: still nothing runs; the next
    // upload is version 2 and runs.
    h.create(&key).await;
    h.worker.run_once(10).await.unwrap();
    assert_eq!(h.driver.status(&key).await, None);
    h.upload(&key, 2, &[("handler.py", &handler("v2"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert_eq!(
        (state.phase, state.deployed_version),
        (Phase::Ready, Some(2)),
        "{:?}",
        state.last_error
    );
    let body = get_json(format!("{}/x", state.endpoint.unwrap())).await;
    assert_eq!(body["reply"], "v2");
    h.driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_delete_that_lands_before_the_build_leaves_nothing_running() {
    let h = Harness::new().await;
    let key = Harness::key("short-lived");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    // Deleted before any worker looked: the pending reconcile sees the delete.
    h.append(&key, &[FunctionEvent::FunctionDeleted {}], true)
        .await;
    assert_eq!(pending(&h.db.pool).await, 1);
    h.worker.run_once(10).await.unwrap();
    assert_eq!(h.driver.status(&key).await, None);
    assert_eq!(
        types(&h.events(&key).await),
        ["FunctionCreated", "FunctionUploaded", "FunctionDeleted"],
        "nothing built for a deleted function"
    );
    h.driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_upgrade_leaves_the_old_process_serving_and_the_log_says_so() {
    let h = Harness::new().await;
    let key = Harness::key("upgrade");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let endpoint = h.state(&key).await.endpoint.unwrap();

    // Version 2 cannot be imported: it never becomes healthy.
    h.upload(&key, 2, &[("handler.py", "def handle(event:\n")], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let events = h.events(&key).await;
    assert_eq!(
        types(&events[events.len() - 2..]),
        ["DeployFailed", "DeployRolledBack"]
    );
    assert_eq!(
        events.last(),
        Some(&FunctionEvent::DeployRolledBack {
            failed_version: 2,
            restored_version: 1
        })
    );
    let state = h.state(&key).await;
    assert_eq!(state.phase, Phase::Failed);
    assert_eq!(state.deployed_version, Some(1));
    assert!(
        state.last_error.as_deref().is_some_and(|e| e.starts_with(
            "version 2 failed to deploy and was rolled back; version 1 still serves\n"
        )),
        "{:?}",
        state.last_error
    );
    let body = get_json(format!("{endpoint}/x")).await;
    assert_eq!(body["reply"], "v1");

    // A first deploy that fails has nothing serving: no rollback recorded.
    let other = Harness::key("broken");
    h.create(&other).await;
    h.upload(&other, 1, &[("handler.py", "def handle(event:\n")], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    assert_eq!(types(&h.events(&other).await).last(), Some(&"DeployFailed"));
    h.driver.shutdown().await;
}

/// A rollback to the version that still serves, made before a newer
/// upload was deployed (as a user who uploads and rolls back at once
/// does): nothing needs to run anew, and the log says it is Ready again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_rollback_to_the_version_that_serves_is_ready_without_a_new_process() {
    let h = Harness::new().await;
    let key = Harness::key("back");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("one"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let served = h.state(&key).await;
    assert_eq!(served.phase, Phase::Ready, "{:?}", served.last_error);

    h.upload(&key, 2, &[("handler.py", &handler("two"))], false)
        .await;
    h.append(
        &key,
        &[FunctionEvent::FunctionRolledBack { version: 1 }],
        true,
    )
    .await;
    assert_eq!(h.state(&key).await.phase, Phase::Pending);
    h.worker.run_once(10).await.unwrap();

    let after = h.state(&key).await;
    assert_eq!(after.phase, Phase::Ready, "{:?}", after.last_error);
    assert_eq!(after.deployed_version, Some(1));
    assert_eq!(after.endpoint, served.endpoint, "the same process serves");
    let events = h.events(&key).await;
    assert_eq!(
        types(&events[served.stream_version as usize..]),
        ["FunctionUploaded", "FunctionRolledBack", "FunctionDeployed"]
    );
    // Converged: running it again changes nothing.
    reconcile_again(&h, &key).await;
    assert_eq!(h.events(&key).await.len(), events.len());
    h.driver.shutdown().await;
}
