//! The reconciler driving the Kubernetes driver: the same events that run
//! a function locally build it with kaniko and roll it out on a cluster
//! (an in-memory API server playing the controllers), and a rollback
//! deploys the image already built.

#[path = "kube_driver/cluster.rs"]
mod cluster;
mod support;

use std::sync::Arc;

use serde_json::Value;
use sless_domain::trigger::{self, Schedule, TriggerEvent, TriggerKind, TriggerSpec};
use sless_domain::{FunctionEvent, Phase, TriggerName};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_testkit::TestS3;
use sless_testkit::kube_api::Outcome;
use sless_workers::kube::cron_runs::Recorded;
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
    cluster::kaniko(&fake);
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
    // What runs is what the build recorded: the image pinned by its digest.
    assert!(v1.contains("@sha256:"), "{v1}");
    assert_eq!(state.artifacts.get(&1), Some(&v1));

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

/// Appends a trigger event and asks for a reconcile of `function`, as the
/// API does.
async fn trigger_event<D: sless_workers::Driver>(
    h: &Harness<D>,
    key: &sless_domain::FunctionKey,
    name: &str,
    at: u64,
    event: TriggerEvent,
) {
    let stream = trigger::stream(&key.namespace, &TriggerName::parse(name).unwrap());
    let mut tx = h.db.pool.begin().await.unwrap();
    let new = NewEvent::trigger(&key.namespace, &event, Metadata::default());
    eventlog::append(&mut tx, &stream, at, &[new])
        .await
        .unwrap();
    sless_store::queue::enqueue_reconcile(&mut *tx, &key.queue_key())
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cron_triggers_are_cron_jobs_and_their_runs_are_recorded_once() {
    let fake = cluster::fake_cluster().await;
    cluster::kaniko(&fake);
    fake.roll_out_deployments("sless.dev/component=function", Outcome::succeeded(""));
    let s3 = TestS3::new().await;
    let driver = Arc::new(cluster::driver(&fake, s3.blobs()));
    let h = Harness::with_driver(s3, driver.clone()).await;
    let key = Harness::key("hello");
    let ns = key.namespace.as_str().to_owned();
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();

    let spec = TriggerSpec {
        name: TriggerName::parse("nightly").unwrap(),
        function: key.name.clone(),
        kind: TriggerKind::Cron,
        schedule: Some(Schedule {
            cron: "0 3 * * *".into(),
            timezone: "Europe/Paris".into(),
        }),
        enabled: true,
    };
    trigger_event(
        &h,
        &key,
        "nightly",
        0,
        TriggerEvent::TriggerCreated { spec },
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    let cronjob_path = format!("/apis/batch/v1/namespaces/{ns}/cronjobs/cron-nightly");
    let cronjob = fake.get(&cronjob_path).expect("the trigger's CronJob");
    assert_eq!(cronjob["spec"]["schedule"], "0 3 * * *");
    let template = &cronjob["spec"]["jobTemplate"];
    assert_eq!(
        template["spec"]["template"]["spec"]["containers"][0]["image"],
        image_of(
            &fake
                .get(&format!("/apis/apps/v1/namespaces/{ns}/deployments/hello"))
                .unwrap()
        )
    );

    // The CronJob controller starts a Job for 03:00 on 2026-12-01 (Paris).
    let scheduled = "2026-12-01T02:00:00Z";
    let job_path = format!("/apis/batch/v1/namespaces/{ns}/jobs/cron-nightly-29411160");
    let mut job = template.clone();
    job["apiVersion"] = "batch/v1".into();
    job["kind"] = "Job".into();
    job["metadata"]["name"] = "cron-nightly-29411160".into();
    job["metadata"]["namespace"] = ns.clone().into();
    job["metadata"]["annotations"] =
        serde_json::json!({"batch.kubernetes.io/cronjob-scheduled-timestamp": scheduled});
    let job = fake.put_object(&job_path, job);
    let recorder = driver.cron_run_recorder(h.db.pool.clone());
    let as_job =
        |v: &Value| serde_json::from_value::<k8s_openapi::api::batch::v1::Job>(v.clone()).unwrap();
    let stream = format!(
        "cron/{ns}/nightly/{}",
        chrono::DateTime::parse_from_rfc3339(scheduled)
            .unwrap()
            .timestamp()
    );
    // Two workers see it at once: one records it.
    let seen = as_job(&job);
    let (a, b) = tokio::join!(recorder.record(&seen), recorder.record(&seen));
    let started = [a.unwrap(), b.unwrap()];
    assert_eq!(
        started
            .iter()
            .filter(|r| **r == Recorded::Started(stream.clone()))
            .count(),
        1,
        "{started:?}"
    );
    let types = |h: &Harness<_>| {
        let stream = stream.clone();
        let pool = h.db.pool.clone();
        async move {
            eventlog::read_stream(&pool, &stream)
                .await
                .unwrap()
                .into_iter()
                .map(|e| e.event_type)
                .collect::<Vec<_>>()
        }
    };
    assert_eq!(types(&h).await, ["JobRequested", "JobStarted"]);

    // It ends: its pod printed the result.
    let t = "2026-12-01T02:00:07Z";
    fake.set_pod_log(&ns, "cron-nightly-29411160-abcde", "{\"done\": 1}\n");
    let mut pod = serde_json::json!({
        "apiVersion": "v1", "kind": "Pod",
        "metadata": {"name": "cron-nightly-29411160-abcde", "namespace": ns,
            "labels": template["spec"]["template"]["metadata"]["labels"],
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": "cron-nightly-29411160",
                                 "uid": job["metadata"]["uid"], "controller": true}]},
        "spec": template["spec"]["template"]["spec"],
    });
    pod["status"] = serde_json::json!({"phase": "Succeeded", "containerStatuses": [{
        "name": "function", "image": "x", "imageID": "", "ready": false, "restartCount": 0,
        "state": {"terminated": {"exitCode": 0, "reason": "Completed", "startedAt": t, "finishedAt": t}}}]});
    fake.put_object(
        &format!("/api/v1/namespaces/{ns}/pods/cron-nightly-29411160-abcde"),
        pod,
    );
    let done = fake
        .set_status(
            &job_path,
            serde_json::json!({"startTime": scheduled, "completionTime": t, "succeeded": 1,
                "conditions": [{"type": "Complete", "status": "True", "reason": "CompletionsReached"}]}),
        )
        .unwrap();
    assert_eq!(
        recorder.record(&as_job(&done)).await.unwrap(),
        Recorded::Finished(stream.clone())
    );
    assert_eq!(
        recorder.record(&as_job(&done)).await.unwrap(),
        Recorded::Nothing
    );
    assert_eq!(
        types(&h).await,
        ["JobRequested", "JobStarted", "JobSucceeded"]
    );
    let finished = eventlog::read_stream(&h.db.pool, &stream).await.unwrap();
    let stdout = &finished[2].data["stdout"]["text"];
    assert_eq!(stdout, "{\"done\": 1}\n", "{:?}", finished[2].data);
    let origins: Vec<String> = sqlx::query_scalar("select origin from invocations")
        .fetch_all(&h.db.pool)
        .await
        .unwrap();
    assert_eq!(origins, ["cron"]);

    // Running, the recorder finds the namespace (the read model names it)
    // and records a run it sees through its watch.
    sqlx::query(
        "insert into triggers (namespace, name, function, kind, schedule, timezone, enabled,
                               active_since, stream_version, created_at, updated_at)
         values ($1, 'nightly', 'hello', 'cron', '0 3 * * *', 'Europe/Paris', true, now(), 1, now(), now())",
    )
    .bind(&ns)
    .execute(&h.db.pool)
    .await
    .unwrap();
    let (stop_tx, stop) = tokio::sync::watch::channel(false);
    let running = tokio::spawn(recorder.clone().run(stop));
    let next = "2026-12-02T02:00:00Z";
    let mut second = template.clone();
    second["apiVersion"] = "batch/v1".into();
    second["kind"] = "Job".into();
    second["metadata"]["name"] = "cron-nightly-29412600".into();
    second["metadata"]["namespace"] = ns.clone().into();
    second["metadata"]["annotations"] =
        serde_json::json!({"batch.kubernetes.io/cronjob-scheduled-timestamp": next});
    fake.put_object(
        &format!("/apis/batch/v1/namespaces/{ns}/jobs/cron-nightly-29412600"),
        second,
    );
    let next_stream = format!(
        "cron/{ns}/nightly/{}",
        chrono::DateTime::parse_from_rfc3339(next)
            .unwrap()
            .timestamp()
    );
    sless_testkit::eventually(
        "the running recorder to record the next tick",
        std::time::Duration::from_secs(20),
        || async {
            let events = eventlog::read_stream(&h.db.pool, &next_stream)
                .await
                .unwrap();
            (events.len() == 2).then_some(())
        },
    )
    .await;
    stop_tx.send(true).unwrap();
    running.await.unwrap();

    // Disabled: the CronJob goes.
    trigger_event(
        &h,
        &key,
        "nightly",
        1,
        TriggerEvent::TriggerToggled { enabled: false },
    )
    .await;
    h.worker.run_once(10).await.unwrap();
    assert!(fake.get(&cronjob_path).is_none());
    cluster::assert_rbac_allows_every_request(&fake);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_rollout_is_rolled_back_and_the_log_records_what_still_serves() {
    let fake = cluster::fake_cluster().await;
    cluster::kaniko(&fake);
    // Version 2's image cannot be pulled.
    fake.roll_out_deployments_with("sless.dev/component=function", |d| {
        match d["spec"]["template"]["metadata"]["labels"]["sless.dev/version"].as_str() {
            Some("2") => Outcome::failed("ImagePullBackOff", ""),
            _ => Outcome::succeeded(""),
        }
    });
    let s3 = TestS3::new().await;
    let driver = Arc::new(cluster::driver(&fake, s3.blobs()));
    let h = Harness::with_driver(s3, driver).await;
    let key = Harness::key("hello");
    let deployment = || {
        fake.get(&format!(
            "/apis/apps/v1/namespaces/{}/deployments/hello",
            key.namespace
        ))
    };
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let v1 = image_of(&deployment().unwrap());
    let endpoint = h.state(&key).await.endpoint;

    h.upload(&key, 2, &[("handler.py", &handler("v2"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let events = h.events(&key).await;
    let tail = &events[events.len() - 2..];
    assert!(
        matches!(&tail[0], FunctionEvent::DeployFailed { version: 2, error, .. } if error.contains("ImagePullBackOff")),
        "{tail:?}"
    );
    assert_eq!(
        tail[1],
        FunctionEvent::DeployRolledBack {
            failed_version: 2,
            restored_version: 1
        }
    );
    let state = h.state(&key).await;
    assert_eq!(state.phase, Phase::Failed);
    assert_eq!(
        (state.current_version, state.deployed_version),
        (Some(2), Some(1))
    );
    assert_eq!(state.endpoint, endpoint);
    let error = state.last_error.unwrap();
    assert!(
        error.starts_with(
            "version 2 failed to deploy and was rolled back; version 1 still serves\n"
        ),
        "{error}"
    );
    assert!(error.contains("ImagePullBackOff"), "{error}");
    assert_eq!(image_of(&deployment().unwrap()), v1);

    // It waits for a new upload: reconciling again changes nothing.
    let before = fake.resource_version();
    sless_store::queue::enqueue_reconcile(&h.db.pool, &key.queue_key())
        .await
        .unwrap();
    h.worker.run_once(10).await.unwrap();
    assert_eq!(fake.resource_version(), before);
    assert_eq!(h.events(&key).await.len(), events.len());
    cluster::assert_rbac_allows_every_request(&fake);
}

/// Scaling to zero on a cluster: the Deployment goes to 0 replicas, and
/// the start a call asks for scales it back to 1 and waits for the rollout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_function_scaled_to_zero_has_no_replicas_until_a_call_scales_it_up() {
    use sless_domain::function::FunctionCommand;
    let fake = cluster::fake_cluster().await;
    cluster::kaniko(&fake);
    fake.roll_out_deployments("sless.dev/component=function", Outcome::succeeded(""));
    let s3 = TestS3::new().await;
    let driver = Arc::new(cluster::driver(&fake, s3.blobs()));
    let h = Harness::with_driver(s3, driver).await;
    let key = Harness::key("napper");
    let ns = key.namespace.as_str();
    let replicas = || {
        fake.get(&format!("/apis/apps/v1/namespaces/{ns}/deployments/napper"))
            .unwrap()["spec"]["replicas"]
            .as_i64()
    };
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    assert_eq!(h.state(&key).await.phase, Phase::Ready);
    assert_eq!(replicas(), Some(1));

    let ask = |command: FunctionCommand| {
        sless_store::scaling::decide_and_enqueue(&h.db.pool, &key, command, Metadata::default())
    };
    let down = ask(FunctionCommand::ScaleToZero {
        reason: "no call for 1 s".into(),
    })
    .await
    .unwrap();
    assert!(down.appended.is_some());
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert!(state.idle);
    assert_eq!((state.phase, state.endpoint), (Phase::Ready, None));
    assert_eq!(replicas(), Some(0));

    let up = ask(FunctionCommand::Activate {
        reason: "a call".into(),
    })
    .await
    .unwrap();
    assert!(up.appended.is_some());
    // A second proxy asking at once records nothing more.
    let again = ask(FunctionCommand::Activate {
        reason: "a call".into(),
    })
    .await
    .unwrap();
    assert!(again.appended.is_none());
    h.worker.run_once(10).await.unwrap();
    let state = h.state(&key).await;
    assert!(!state.idle);
    assert_eq!(state.phase, Phase::Ready, "{:?}", state.last_error);
    assert_eq!(
        state.endpoint.as_deref(),
        Some(format!("http://napper.{ns}.svc.cluster.local:8080").as_str())
    );
    assert_eq!(replicas(), Some(1));
    cluster::assert_rbac_allows_every_request(&fake);
}
