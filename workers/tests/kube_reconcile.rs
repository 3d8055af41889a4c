//! The reconciler driving the Kubernetes driver: the same events that run
//! a function locally build it with kaniko and roll it out on a cluster (a
//! real control plane, the test node playing the kubelet and kaniko; see
//! `kube_driver/cluster.rs`), and a rollback deploys the image already
//! built.

#[path = "kube_driver/cluster.rs"]
mod cluster;
mod support;

use std::sync::Arc;

use cluster::{BUILD_NS, Cluster, DEADLINE, REGISTRY, gone, name_of, template_image};
use k8s_openapi::api::apps::v1::Deployment as K8sDeployment;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use kube::api::{Api, PostParams};
use serde_json::Value;
use sless_domain::trigger::{self, Schedule, TriggerEvent, TriggerKind, TriggerSpec};
use sless_domain::{FunctionEvent, Phase, TriggerName};
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_testkit::kube::Outcome;
use sless_testkit::{TestS3, eventually};
use sless_workers::kube::KubeSettings;
use sless_workers::kube::cron_runs::Recorded;
use support::{Harness, handler};

/// A cluster for one test and a harness whose worker drives it, reading
/// build contexts from the harness's S3 server.
async fn harness() -> (Cluster, Harness<sless_workers::kube::KubeDriver>) {
    let s3 = TestS3::new().await;
    let c = Cluster::with(s3.blobs(), KubeSettings::new(REGISTRY)).await;
    let h = Harness::with_driver(s3, Arc::new(c.driver.clone())).await;
    (c, h)
}

fn image_of(deployment: &Value) -> String {
    template_image(deployment).to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn uploads_build_and_roll_out_and_a_rollback_reuses_its_image() {
    let (c, h) = harness().await;
    c.kaniko();
    c.serve_functions();
    let key = c.key("hello");
    let ns = key.namespace.as_str();
    let builds = || c.builds();
    let deployment = || c.get::<K8sDeployment>(ns, "hello");

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
    let v1 = image_of(&deployment().await.unwrap());
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
    assert_ne!(image_of(&deployment().await.unwrap()), v1);
    assert_eq!(builds().await.len(), 2);

    // Finished builds are gone after their TTL; the log still knows.
    for job in builds().await {
        c.delete::<Job>(BUILD_NS, name_of(&job)).await;
        gone::<Job>(&c, BUILD_NS, name_of(&job)).await;
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
    assert_eq!(image_of(&deployment().await.unwrap()), v1);
    let rebuilt = builds().await;
    assert!(rebuilt.is_empty(), "the rollback built again: {rebuilt:#?}");

    // Converged: reconciling again writes nothing to the cluster.
    let before = c.versions().await;
    sless_store::queue::enqueue_reconcile(&h.db.pool, &key.queue_key())
        .await
        .unwrap();
    h.worker.run_once(10).await.unwrap();
    assert_eq!(c.versions().await, before);

    h.append(&key, &[FunctionEvent::FunctionDeleted {}], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    assert!(deployment().await.is_none());
    assert!(builds().await.is_empty());
    c.assert_writes_are_ours();
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

/// A Job of the CronJob as its controller starts one (the real controller
/// fires on its schedule only, 03:00 here): the CronJob's template, the
/// tick in `batch.kubernetes.io/cronjob-scheduled-timestamp`, named
/// `{cronjob}-{minutes since the epoch}` and owned by the CronJob, as
/// `kubectl create job --from=cronjob/...` makes it.
fn job_of(cronjob: &Value, scheduled: &str) -> Job {
    let at = chrono::DateTime::parse_from_rfc3339(scheduled).unwrap();
    let template = &cronjob["spec"]["jobTemplate"];
    let mut annotations = template["metadata"]["annotations"].clone();
    annotations["batch.kubernetes.io/cronjob-scheduled-timestamp"] = scheduled.into();
    serde_json::from_value(serde_json::json!({
        "metadata": {
            "name": format!("{}-{}", name_of(cronjob), at.timestamp() / 60),
            "namespace": cronjob["metadata"]["namespace"],
            "labels": template["metadata"]["labels"],
            "annotations": annotations,
            "ownerReferences": [{"apiVersion": "batch/v1", "kind": "CronJob",
                "name": name_of(cronjob), "uid": cronjob["metadata"]["uid"],
                "controller": true, "blockOwnerDeletion": true}],
        },
        "spec": template["spec"],
    }))
    .unwrap()
}

/// The real CronJob controller fires at 03:00 only: the runs are Jobs
/// made from the CronJob as its controller makes them ([`job_of`]), for
/// ticks of December 2026, and run by the real Job controller.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn cron_triggers_are_cron_jobs_and_their_runs_are_recorded_once() {
    let (c, h) = harness().await;
    c.kaniko();
    c.serve_functions();
    let key = c.key("hello");
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
    let cronjob = c
        .get::<CronJob>(&ns, "cron-nightly")
        .await
        .expect("the trigger's CronJob");
    assert_eq!(cronjob["spec"]["schedule"], "0 3 * * *");
    let template = &cronjob["spec"]["jobTemplate"];
    assert_eq!(
        template["spec"]["template"]["spec"]["containers"][0]["image"],
        image_of(&c.get::<K8sDeployment>(&ns, "hello").await.unwrap())
    );

    // The CronJob's Job for 03:00 on 2026-12-01 (Paris); its pod prints
    // the result and exits.
    let scheduled = "2026-12-01T02:00:00Z";
    let first = job_of(&cronjob, scheduled);
    assert_eq!(
        first.metadata.name.as_deref(),
        Some("cron-nightly-29934840")
    );
    c.play_all(
        "batch.kubernetes.io/job-name=cron-nightly-29934840",
        Outcome::succeeds("{\"done\": 1}\n"),
    );
    let jobs = Api::<Job>::namespaced(c.admin.clone(), &ns);
    let created = jobs.create(&PostParams::default(), &first).await.unwrap();
    let recorder = c.driver.cron_run_recorder(h.db.pool.clone());
    let stream = format!(
        "cron/{ns}/nightly/{}",
        chrono::DateTime::parse_from_rfc3339(scheduled)
            .unwrap()
            .timestamp()
    );
    // Two workers see it at once: one records it.
    let (a, b) = tokio::join!(recorder.record(&created), recorder.record(&created));
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

    // It ends.
    let done = eventually("the run to complete", DEADLINE, || async {
        let job = jobs.get(&created.metadata.name.clone()?).await.ok()?;
        let complete = job
            .status
            .as_ref()?
            .conditions
            .iter()
            .flatten()
            .any(|c| c.type_ == "Complete" && c.status == "True");
        complete.then_some(job)
    })
    .await;
    assert_eq!(
        recorder.record(&done).await.unwrap(),
        Recorded::Finished(stream.clone())
    );
    assert_eq!(recorder.record(&done).await.unwrap(), Recorded::Nothing);
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
    // and records a run it sees through its watch (this one's pod stays
    // Pending: no play matches it).
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
    jobs.create(&PostParams::default(), &job_of(&cronjob, next))
        .await
        .unwrap();
    let next_stream = format!(
        "cron/{ns}/nightly/{}",
        chrono::DateTime::parse_from_rfc3339(next)
            .unwrap()
            .timestamp()
    );
    eventually(
        "the running recorder to record the next tick",
        DEADLINE,
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
    assert!(c.get::<CronJob>(&ns, "cron-nightly").await.is_none());
    c.assert_writes_are_ours();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_rollout_is_rolled_back_and_the_log_records_what_still_serves() {
    let (c, h) = harness().await;
    c.kaniko();
    // Version 2's image cannot be pulled.
    c.play("sless.dev/component=function", |pod| {
        match pod.label("sless.dev/version") {
            Some("2") => Outcome::waits("ImagePullBackOff", ""),
            _ => Outcome::serves(),
        }
    });
    let key = c.key("hello");
    let deployment = || c.get::<K8sDeployment>(key.namespace.as_str(), "hello");
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let v1 = image_of(&deployment().await.unwrap());
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
    assert_eq!(image_of(&deployment().await.unwrap()), v1);

    // It waits for a new upload: reconciling again changes nothing.
    let before = c.versions().await;
    sless_store::queue::enqueue_reconcile(&h.db.pool, &key.queue_key())
        .await
        .unwrap();
    h.worker.run_once(10).await.unwrap();
    assert_eq!(c.versions().await, before);
    assert_eq!(h.events(&key).await.len(), events.len());
    c.assert_writes_are_ours();
}

/// Scaling to zero on a cluster: the Deployment goes to 0 replicas, and
/// the start a call asks for scales it back to 1 and waits for the rollout.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_function_scaled_to_zero_has_no_replicas_until_a_call_scales_it_up() {
    use sless_domain::function::FunctionCommand;
    let (c, h) = harness().await;
    c.kaniko();
    c.serve_functions();
    let key = c.key("napper");
    let ns = key.namespace.as_str();
    let replicas = || async {
        c.get::<K8sDeployment>(ns, "napper").await.unwrap()["spec"]["replicas"].as_i64()
    };
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    assert_eq!(h.state(&key).await.phase, Phase::Ready);
    assert_eq!(replicas().await, Some(1));

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
    assert_eq!(replicas().await, Some(0));

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
    assert_eq!(replicas().await, Some(1));
    c.assert_writes_are_ours();
}

/// A function deleted before anything of it ran, in a tenant namespace
/// sless never set up (where its ServiceAccount holds no permission yet):
/// there is nothing to remove, and removing it converges at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_function_deleted_before_it_ran_is_removed_at_once() {
    let (c, h) = harness().await;
    let key = c.key("brief");
    h.create(&key).await;
    h.append(&key, &[FunctionEvent::FunctionDeleted {}], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    let dead: i64 = sqlx::query_scalar("select count(*) from work_dead")
        .fetch_one(&h.db.pool)
        .await
        .unwrap();
    assert_eq!(
        (support::pending(&h.db.pool).await, dead),
        (0, 0),
        "the reconcile failed: {:?}",
        h.events(&key).await
    );
    assert!(c.namespace().await.is_none(), "a namespace was made for it");
    c.assert_writes_are_ours();
}

/// The autoscaler's decisions on a cluster: the Deployment's replicas
/// follow them through its scale subresource (the pod template untouched:
/// no new ReplicaSet), the log records the instances serving once they
/// are available, and a second reconcile changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn replicas_follow_the_autoscalers_decisions() {
    use sless_domain::function::FunctionCommand;
    use sless_domain::{InFlight, ScaleWindow};
    let (c, h) = harness().await;
    c.kaniko();
    c.serve_functions();
    let key = c.key("crowd");
    let ns = key.namespace.as_str();
    let deployment = || async { c.get::<K8sDeployment>(ns, "crowd").await.unwrap() };
    h.create(&key).await;
    h.upload(&key, 1, &[("handler.py", &handler("v1"))], true)
        .await;
    h.worker.run_once(10).await.unwrap();
    assert_eq!(h.state(&key).await.phase, Phase::Ready);
    assert_eq!(deployment().await["spec"]["replicas"], 1);
    let generation = deployment().await["metadata"]["generation"].clone();
    let replica_sets = || async {
        c.list::<k8s_openapi::api::apps::v1::ReplicaSet>(ns, "sless.dev/function=crowd")
            .await
            .len()
    };
    let before = replica_sets().await;

    for to in [3, 2] {
        let scaled = sless_store::scaling::decide_and_enqueue(
            &h.db.pool,
            &key,
            FunctionCommand::Scale {
                to,
                observed: InFlight(to as f64),
                window: ScaleWindow::Stable,
                reason: "the test's load".into(),
            },
            Metadata::default(),
        )
        .await
        .unwrap();
        assert!(scaled.appended.is_some());
        h.worker.run_once(10).await.unwrap();
        let d = deployment().await;
        assert_eq!(d["spec"]["replicas"], to, "{d}");
        assert_eq!(d["status"]["availableReplicas"], to, "{d}");
        let state = h.state(&key).await;
        assert_eq!((state.instances(), state.phase), (to, Phase::Ready));
        assert!(matches!(
            h.events(&key).await.last(),
            Some(FunctionEvent::FunctionDeployed { version: 1, .. })
        ));
    }
    assert_eq!(
        c.scaled("crowd"),
        2,
        "the count changes through the scale subresource"
    );
    assert_eq!(replica_sets().await, before, "scaling rolled the pods over");
    assert_ne!(deployment().await["metadata"]["generation"], generation);
    // Converged: another reconcile records nothing.
    let events = h.events(&key).await.len();
    sless_store::queue::enqueue_reconcile(&h.db.pool, &key.queue_key())
        .await
        .unwrap();
    h.worker.run_once(10).await.unwrap();
    assert_eq!(h.events(&key).await.len(), events);
    c.assert_writes_are_ours();
}
