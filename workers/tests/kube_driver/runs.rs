//! Jobs and CronJobs.

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::Secret;
use sless_domain::archive::sha256_hex;
use sless_domain::job::{self, JobSpec, MAX_INPUT_BYTES};
use sless_domain::{FunctionKey, FunctionName, Runtime};
use sless_testkit::eventually;
use sless_testkit::kube::Outcome;
use sless_workers::driver::{Artifact, CronRequest, Driver, JobRequest};

use super::Cluster;
use super::cluster::{DEADLINE, gone, names, owned_by};

fn cron(trigger: &str, schedule: &str, image: &str) -> CronRequest {
    CronRequest {
        trigger: trigger.into(),
        schedule: schedule.into(),
        timezone: "Europe/Paris".into(),
        version: 1,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        env_vars: BTreeMap::new(),
        memory_mb: 128,
        timeout: Duration::from_secs(60),
        artifact: Artifact {
            reference: image.into(),
        },
    }
}

pub async fn sync_cron(c: &Cluster, k: &FunctionKey, triggers: &[&str], image: &str) {
    let wanted = triggers
        .iter()
        .map(|t| cron(t, "0 3 * * *", image))
        .collect();
    c.driver.sync_cron(k, wanted).await.unwrap();
}

pub fn job_req(k: &FunctionKey, name: &str) -> JobRequest {
    JobRequest {
        key: k.clone(),
        run: format!("job/{}/{name}", k.namespace),
        version: 1,
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        env_vars: BTreeMap::new(),
        memory_mb: 128,
        timeout: Duration::from_secs(30),
        artifact: Artifact {
            reference: "registry.test/sless/x:v1-00000000".into(),
        },
        event: serde_json::json!({"method": "JOB", "json": {"n": 1}}),
        invocation: None,
    }
}

#[tokio::test]
async fn cron_triggers_become_cron_jobs_that_follow_the_triggers() {
    let c = Cluster::start().await;
    let k = c.key("hello");
    let ns = c.ns.as_str();
    let image = "registry.test/sless/x:v1-00000000";
    c.driver
        .sync_cron(
            &k,
            vec![
                cron("nightly", "0 3 * * *", image),
                cron("hourly", "@hourly", image),
            ],
        )
        .await
        .unwrap();
    let names = || async { names(&c.list::<CronJob>(ns, "sless.dev/function=hello").await) };
    assert_eq!(names().await, ["cron-hourly", "cron-nightly"]);
    let nightly = c.get::<CronJob>(ns, "cron-nightly").await.unwrap();
    assert_eq!(nightly["spec"]["concurrencyPolicy"], "Forbid");
    assert_eq!(nightly["spec"]["timeZone"], "Europe/Paris");

    // Updated: the schedule changes in place.
    c.driver
        .sync_cron(
            &k,
            vec![
                cron("nightly", "30 4 * * *", image),
                cron("hourly", "@hourly", image),
            ],
        )
        .await
        .unwrap();
    let nightly = c.get::<CronJob>(ns, "cron-nightly").await.unwrap();
    assert_eq!(nightly["spec"]["schedule"], "30 4 * * *");
    // Deleted (or disabled): its CronJob goes, the other stays.
    c.driver
        .sync_cron(&k, vec![cron("hourly", "@hourly", image)])
        .await
        .unwrap();
    assert_eq!(names().await, ["cron-hourly"]);
    c.driver.sync_cron(&k, vec![]).await.unwrap();
    assert!(names().await.is_empty());
    c.assert_writes_are_ours();
}

/// The slow run is ended by the Job controller at its deadline
/// (`activeDeadlineSeconds`, the run's timeout of 2 s): its pod serves,
/// never exiting on its own.
#[tokio::test]
async fn a_job_run_reports_its_exit_and_its_pod_log() {
    let c = Cluster::start().await;
    c.play_all(
        "sless.dev/job=good",
        Outcome::succeeds("working\n{\"done\": true}\n"),
    );
    c.play_all(
        "sless.dev/job=bad",
        Outcome::fails("Traceback\nValueError: no"),
    );
    c.play_all("sless.dev/job=slow", Outcome::serves());
    let k = c.key("hello");
    let ns = c.ns.as_str();

    let out = c.driver.run_job(job_req(&k, "good")).await.unwrap();
    assert_eq!(out.exit_code, Some(0));
    assert!(!out.timed_out);
    assert!(
        out.stdout.text.ends_with("{\"done\": true}\n"),
        "{:?}",
        out.stdout
    );
    let job = &c.list::<Job>(ns, "sless.dev/job=good").await[0];
    assert!(job["metadata"]["labels"].get("job-name").is_none());
    let env =
        serde_json::to_string(&job["spec"]["template"]["spec"]["containers"][0]["env"]).unwrap();
    assert!(env.contains("SLESS_JOB_EVENT_FILE"), "{env}");

    let out = c.driver.run_job(job_req(&k, "bad")).await.unwrap();
    assert_eq!(out.exit_code, Some(1));
    assert!(
        out.stdout.text.contains("ValueError: no"),
        "{:?}",
        out.stdout
    );

    let slow = JobRequest {
        timeout: Duration::from_secs(2),
        ..job_req(&k, "slow")
    };
    let out = c.driver.run_job(slow).await.unwrap();
    assert!(out.timed_out, "{out:?}");
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_cancelled_run_deletes_its_job() {
    let c = Cluster::start().await;
    let k = c.key("hello");
    let ns = c.ns.as_str();
    // No play: the run's pod stays Pending, and the run waits until it is
    // dropped.
    let driver = c.driver.clone();
    let run = tokio::spawn(async move { driver.run_job(job_req(&k, "forever")).await });
    eventually("the run's Job", DEADLINE, || async {
        (!c.list::<Job>(ns, "sless.dev/job=forever").await.is_empty()).then_some(())
    })
    .await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    eventually("the cancelled run's Job to go", DEADLINE, || async {
        c.list::<Job>(ns, "sless.dev/job=forever")
            .await
            .is_empty()
            .then_some(())
    })
    .await;
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_jobs_input_just_under_the_api_limit_arrives_whole_through_its_secret() {
    let c = Cluster::start().await;
    // What the container reads from the file SLESS_JOB_EVENT_FILE names.
    c.play("sless.dev/job=big", |pod| {
        let Some(path) = pod.env("SLESS_JOB_EVENT_FILE") else {
            return Outcome::fails("no SLESS_JOB_EVENT_FILE");
        };
        match pod.file(path) {
            Some(data) => Outcome::succeeds(&format!("{} {}\n", data.len(), sha256_hex(data))),
            None => Outcome::fails(&format!("nothing at {path}")),
        }
    });
    // Quotes and backslashes: every one is escaped again in the event's
    // `body`, which makes the event as large as an input can.
    let input = serde_json::json!("\"\\".repeat((MAX_INPUT_BYTES - 2) / 4 - 1));
    let size = serde_json::to_string(&input).unwrap().len();
    assert!(
        size > MAX_INPUT_BYTES - 8 && size <= MAX_INPUT_BYTES,
        "{size}"
    );
    assert!(
        JobSpec::parse("big", "hello", input.clone(), None).is_ok(),
        "the API takes it"
    );
    let event = sless_workers::jobs::handler_event(&job::JobRequest {
        function: FunctionName::parse("hello").unwrap(),
        version: 1,
        input,
        timeout_sec: 30,
        cron: None,
    });
    let bytes = serde_json::to_vec(&event).unwrap();
    assert!(bytes.len() > 3 * MAX_INPUT_BYTES, "{} bytes", bytes.len());

    let k = c.key("hello");
    let ns = c.ns.as_str();
    let out = c
        .driver
        .run_job(JobRequest {
            event: event.clone(),
            ..job_req(&k, "big")
        })
        .await
        .unwrap();
    assert_eq!(out.exit_code, Some(0), "{out:?}");
    assert_eq!(
        out.stdout.text,
        format!("{} {}\n", bytes.len(), sha256_hex(&bytes))
    );

    // The event is in a Secret owned by the Job, not in the Job.
    let jobs = c.list::<Job>(ns, "sless.dev/job=big").await;
    let text = serde_json::to_string(&jobs[0]).unwrap();
    assert!(
        text.len() < MAX_INPUT_BYTES,
        "the Job holds the event: {} bytes",
        text.len()
    );
    let secrets = c.list::<Secret>(ns, "sless.dev/job=big").await;
    assert_eq!(secrets.len(), 1, "{secrets:#?}");
    assert!(owned_by(&secrets[0], &jobs[0]), "{secrets:#?}");
    assert_eq!(secrets[0]["immutable"], true);
    c.assert_writes_are_ours();

    // Deleted with its Job (its TTL, or a cancelled run): the garbage
    // collector takes it.
    c.delete::<Job>(ns, "job-big").await;
    gone::<Secret>(&c, ns, secrets[0]["metadata"]["name"].as_str().unwrap()).await;
}
