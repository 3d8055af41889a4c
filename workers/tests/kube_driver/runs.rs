//! Jobs and CronJobs.

use std::collections::BTreeMap;
use std::time::Duration;

use sless_domain::archive::sha256_hex;
use sless_domain::job::{self, JobSpec, MAX_INPUT_BYTES};
use sless_domain::{FunctionKey, FunctionName, Runtime};
use sless_testkit::kube_api::Outcome;
use sless_workers::driver::{Artifact, CronRequest, Driver, JobRequest};

use super::{Cluster, NS, key};

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

fn job_req(k: &FunctionKey, name: &str) -> JobRequest {
    JobRequest {
        key: k.clone(),
        run: format!("job/{NS}/{name}"),
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
    }
}

#[tokio::test]
async fn cron_triggers_become_cron_jobs_that_follow_the_triggers() {
    let c = Cluster::start().await;
    let k = key("hello");
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
    let names = |c: &Cluster| {
        let mut n: Vec<String> = c
            .objects("batch/v1", "cronjobs", NS, "sless.dev/function=hello")
            .iter()
            .map(|o| o["metadata"]["name"].as_str().unwrap().to_owned())
            .collect();
        n.sort();
        n
    };
    assert_eq!(names(&c), ["cron-hourly", "cron-nightly"]);
    let nightly = c
        .fake
        .get(&c.path("batch/v1", "cronjobs", NS, "cron-nightly"))
        .unwrap();
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
    let nightly = c
        .fake
        .get(&c.path("batch/v1", "cronjobs", NS, "cron-nightly"))
        .unwrap();
    assert_eq!(nightly["spec"]["schedule"], "30 4 * * *");
    // Deleted (or disabled): its CronJob goes, the other stays.
    c.driver
        .sync_cron(&k, vec![cron("hourly", "@hourly", image)])
        .await
        .unwrap();
    assert_eq!(names(&c), ["cron-hourly"]);
    c.driver.sync_cron(&k, vec![]).await.unwrap();
    assert!(names(&c).is_empty());
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_job_run_reports_its_exit_and_its_pod_log() {
    let c = Cluster::start().await;
    c.fake.complete_jobs(
        "sless.dev/job=good",
        Outcome::succeeded("working\n{\"done\": true}\n"),
    );
    c.fake.complete_jobs(
        "sless.dev/job=bad",
        Outcome::failed("BackoffLimitExceeded", "Traceback\nValueError: no"),
    );
    c.fake.complete_jobs(
        "sless.dev/job=slow",
        Outcome::failed("DeadlineExceeded", "still going"),
    );
    let k = key("hello");

    let out = c.driver.run_job(job_req(&k, "good")).await.unwrap();
    assert_eq!(out.exit_code, Some(0));
    assert!(!out.timed_out);
    assert!(
        out.stdout.text.ends_with("{\"done\": true}\n"),
        "{:?}",
        out.stdout
    );
    let job = &c.objects("batch/v1", "jobs", NS, "sless.dev/job=good")[0];
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

    let out = c.driver.run_job(job_req(&k, "slow")).await.unwrap();
    assert!(out.timed_out);
    c.assert_writes_are_ours();
}

#[tokio::test]
async fn a_cancelled_run_deletes_its_job() {
    let c = Cluster::start().await;
    let k = key("hello");
    // Nothing completes this Job: the run waits until it is dropped.
    let driver = c.driver.clone();
    let run = tokio::spawn(async move { driver.run_job(job_req(&k, "forever")).await });
    sless_testkit::eventually("the run's Job", Duration::from_secs(10), || async {
        (!c.objects("batch/v1", "jobs", NS, "sless.dev/job=forever")
            .is_empty())
        .then_some(())
    })
    .await;
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    sless_testkit::eventually(
        "the cancelled run's Job to go",
        Duration::from_secs(10),
        || async {
            c.objects("batch/v1", "jobs", NS, "sless.dev/job=forever")
                .is_empty()
                .then_some(())
        },
    )
    .await;
}

#[tokio::test]
async fn a_jobs_input_just_under_the_api_limit_arrives_whole_through_its_secret() {
    let c = Cluster::start().await;
    // What the container reads from the file SLESS_JOB_EVENT_FILE names.
    c.fake.complete_jobs_with("sless.dev/job=big", |container| {
        let Some(path) = container.env("SLESS_JOB_EVENT_FILE") else {
            return Outcome::failed("BackoffLimitExceeded", "no SLESS_JOB_EVENT_FILE");
        };
        match container.file(path) {
            Some(data) => Outcome::succeeded(&format!("{} {}\n", data.len(), sha256_hex(data))),
            None => Outcome::failed("BackoffLimitExceeded", &format!("nothing at {path}")),
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

    let k = key("hello");
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
    let jobs = c.objects("batch/v1", "jobs", NS, "sless.dev/job=big");
    let text = serde_json::to_string(&jobs[0]).unwrap();
    assert!(
        text.len() < MAX_INPUT_BYTES,
        "the Job holds the event: {} bytes",
        text.len()
    );
    let secrets = c.objects("", "secrets", NS, "sless.dev/job=big");
    assert_eq!(secrets.len(), 1, "{secrets:#?}");
    let owner = &secrets[0]["metadata"]["ownerReferences"][0];
    assert_eq!(owner["uid"], jobs[0]["metadata"]["uid"]);
    assert_eq!(secrets[0]["immutable"], true);
    c.assert_writes_are_ours();

    // Deleted with its Job (its TTL, or a cancelled run).
    c.fake.delete(&c.path("batch/v1", "jobs", NS, "job-big"));
    assert!(c.objects("", "secrets", NS, "sless.dev/job=big").is_empty());
}
