//! The reconciler driving the Kubernetes driver: the same events that run
//! a function locally build it with kaniko and roll it out on a cluster
//! (an in-memory API server playing the controllers), and a rollback
//! deploys the image already built.

#[path = "kube_driver/cluster.rs"]
mod cluster;
mod support;

use std::sync::Arc;

use serde_json::Value;
use sless_domain::{FunctionEvent, Phase};
use sless_testkit::TestS3;
use sless_testkit::kube_api::Outcome;
use support::{Harness, handler};

fn image_of(deployment: &Value) -> String {
    deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_build_and_roll_out_and_a_rollback_reuses_its_image() {
    let fake = cluster::fake_cluster().await;
    fake.complete_jobs("sless.dev/component=build", Outcome::succeeded("pushed"));
    fake.roll_out_deployments("sless.dev/component=function", Outcome::succeeded(""));
    let s3 = TestS3::new().await;
    let driver = Arc::new(cluster::driver(&fake, s3.blobs()));
    let h = Harness::with_driver(s3, driver).await;
    let key = Harness::key("hello");
    let ns = key.namespace.as_str();
    let builds = || fake.list("/apis/batch/v1/namespaces/sless-builds/jobs", "");
    let deployment = || fake.get(&format!("/apis/apps/v1/namespaces/{ns}/deployments/hello"));

    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert_eq!(state.phase, Phase::Ready, "{:?}", state.last_error);
    assert_eq!(
        state.endpoint.as_deref(),
        Some(format!("http://hello.{ns}.svc.cluster.local:8080").as_str())
    );
    let v1 = image_of(&deployment().unwrap());

    h.upload(&key, 2, &[("handler.py", &handler("v2"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert_eq!(
        (state.phase, state.deployed_version),
        (Phase::Ready, Some(2))
    );
    assert_ne!(image_of(&deployment().unwrap()), v1);
    assert_eq!(builds().len(), 2);

    // Finished builds are gone after their TTL; the log still knows.
    for job in builds() {
        let name = job["metadata"]["name"].as_str().unwrap();
        fake.delete(&format!(
            "/apis/batch/v1/namespaces/sless-builds/jobs/{name}"
        ));
    }
    h.append(
        &key,
        &[FunctionEvent::FunctionRolledBack { version: 1 }],
        true,
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert_eq!(
        (state.phase, state.deployed_version),
        (Phase::Ready, Some(1))
    );
    assert_eq!(image_of(&deployment().unwrap()), v1);
    assert!(
        builds().is_empty(),
        "the rollback built again: {:#?}",
        builds()
    );

    // Converged: reconciling again writes nothing to the cluster.
    let before = fake.resource_version();
    sless_store::queue::enqueue_reconcile(&h.db.pool, &key.queue_key())
        .await
        .unwrap();
    h.worker.run_once(10).await.unwrap();
    assert_eq!(fake.resource_version(), before);

    h.append(&key, &[FunctionEvent::FunctionDeleted {}], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    assert!(deployment().is_none());
    assert!(builds().is_empty());
    cluster::assert_rbac_allows_every_request(&fake);
}
