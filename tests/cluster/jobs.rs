//! Runs to completion on the node, and a build that fails: a cron trigger
//! is a CronJob whose Kubernetes Jobs sless records as the trigger's runs,
//! with what their pods printed; a one-shot job is a Job whose pod's
//! output the job keeps; a build kaniko cannot finish leaves its log and
//! the function's `BuildFailed` error.

use std::time::Instant;

use k8s_openapi::api::batch::v1::{CronJob, Job};
use reqwest::Method;
use serde_json::{Value, json};

use crate::support::kube::Platform;
use crate::support::{sless, zip_files};
use crate::{cluster_tier, deploy, platform};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cron_trigger_runs_a_job_per_tick_and_keeps_its_output() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-cron").await;
    deploy(&p, "hello", "python3.11", "handler.handle", "hello-python").await;
    let (status, body) = p
        .call(
            Method::POST,
            "/triggers",
            Some(json!({
                "name": "every-minute", "function": "hello", "type": "cron", "schedule": "* * * * *",
            })),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let created = Instant::now();
    let ns = p.ns.clone();
    let mine = "sless.dev/function=hello";
    p.wait("the trigger's CronJob", || async {
        let names = p.names::<CronJob>(&ns, mine).await;
        if names.is_empty() {
            Err("no CronJob".to_owned())
        } else {
            Ok(names)
        }
    })
    .await;

    // The next whole minute starts a Job; sless records it as the trigger's
    // run, and its end with what the pod printed.
    let run = p
        .wait("the first tick's run to succeed", || async {
            let (_, t) = p.call(Method::GET, "/triggers/every-minute", None).await;
            match t["runs"].as_array().and_then(|r| r.first()) {
                Some(run) if run["status"] == "Succeeded" => Ok(run.clone()),
                Some(run) if run["status"] == "Failed" => {
                    panic!("the cron run failed: {t}\n{}", p.logs())
                }
                _ => Err(t.to_string()),
            }
        })
        .await;
    eprintln!(
        "trigger created to its first run's end: {:?}",
        created.elapsed()
    );
    assert_eq!(run["exit_code"], 0, "{run}");
    let scheduled_at: chrono::DateTime<chrono::Utc> =
        serde_json::from_value(run["scheduled_at"].clone()).unwrap();
    let unix = scheduled_at.timestamp();
    assert_eq!(unix % 60, 0, "a tick is a whole minute: {run}");

    // What the pod printed is in the run's JobSucceeded.
    let stream = format!("cron/{ns}/every-minute/{unix}");
    let (status, page) = p
        .call(
            Method::GET,
            &format!("/events?stream={stream}&order=oldest"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    let events = page["items"].as_array().expect("events");
    let types: Vec<&str> = events.iter().filter_map(|e| e["type"].as_str()).collect();
    assert_eq!(
        types,
        ["JobRequested", "JobStarted", "JobSucceeded"],
        "{page}"
    );
    let succeeded = &events[2]["data"];
    // From the Job's start to its end: never nothing (the pod alone takes
    // more than a second to start and run).
    assert!(
        succeeded["duration_ms"].as_u64().is_some_and(|d| d > 0),
        "{succeeded}"
    );
    let out = succeeded["stdout"]["text"].as_str().unwrap_or("");
    let answer: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {out}"));
    assert_eq!(
        answer,
        json!({"message": "hello, world", "method": "CRON", "path": "/"}),
        "the handler's answer, printed by its pod"
    );

    // One Kubernetes Job per run, each for its tick; and the run is an
    // invocation of origin cron.
    let (_, t) = p.call(Method::GET, "/triggers/every-minute", None).await;
    let runs = t["runs"].as_array().unwrap().len();
    let jobs = p
        .names::<Job>(&ns, &format!("{mine},sless.dev/component=cron"))
        .await;
    assert_eq!(jobs.len(), runs, "a Job per recorded run: {jobs:?}\n{t}");
    let invocations = p.client.invocations("hello").await.unwrap_or_default();
    let cron = invocations
        .iter()
        .find(|i| i["origin"] == "cron")
        .unwrap_or_else(|| panic!("no cron invocation: {invocations:?}"));
    assert_eq!(cron["status"], 200, "{cron}");
    assert_eq!(cron["run"], stream, "{cron}");
    assert!(
        cron["duration_ms"].as_f64().is_some_and(|d| d > 0.0),
        "{cron}"
    );
    // And what it printed is in the function's log, under that record.
    printed_under(&p, &cron["id"], r#""method": "CRON""#).await;
}

/// Waits until the function `hello`'s log holds a line containing `text`
/// under the invocation `id` (one function, one log: runs included).
async fn printed_under(p: &Platform, id: &Value, text: &str) {
    let id = id.as_str().expect("an invocation id");
    p.wait(&format!("{text} in the log under {id}"), || async {
        let (status, page) = p
            .call(
                Method::GET,
                &format!("/functions/hello/logs?invocation={id}"),
                None,
            )
            .await;
        assert_eq!(status, 200, "{page}");
        let lines = page["items"].as_array().cloned().unwrap_or_default();
        if lines
            .iter()
            .any(|l| l["line"].as_str().is_some_and(|l| l.contains(text)))
        {
            Ok(())
        } else {
            Err(page.to_string())
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_runs_once_in_a_pod_and_keeps_its_output() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-job").await;
    deploy(&p, "hello", "python3.11", "handler.handle", "hello-python").await;
    let started = Instant::now();
    let (status, body) = p
        .call(
            Method::POST,
            "/jobs",
            Some(json!({"name": "once", "function": "hello", "input": {"name": "job"}})),
        )
        .await;
    assert_eq!(status, 202, "{body}");
    let job = p
        .wait("the job to end", || async {
            let (_, j) = p.call(Method::GET, "/jobs/once", None).await;
            if j["status"] == "Succeeded" || j["status"] == "Failed" {
                Ok(j)
            } else {
                Err(j.to_string())
            }
        })
        .await;
    eprintln!("job created to its end: {:?}", started.elapsed());
    assert_eq!(job["status"], "Succeeded", "{job}\n{}", p.logs());
    assert_eq!(job["exit_code"], 0, "{job}");
    let out = job["stdout"]["text"].as_str().unwrap_or("");
    let answer: Value = serde_json::from_str(out.trim()).unwrap_or_else(|e| panic!("{e}: {job}"));
    assert_eq!(
        answer,
        json!({"message": "hello, job", "method": "JOB", "path": "/"}),
        "{job}"
    );
    // It ran as one Kubernetes Job of the function, labelled with its name.
    let jobs = p
        .names::<Job>(&p.ns, "sless.dev/function=hello,sless.dev/job=once")
        .await;
    assert_eq!(jobs.len(), 1, "{jobs:?}");
    let invocations = p.client.invocations("hello").await.unwrap_or_default();
    let run = invocations
        .iter()
        .find(|i| i["origin"] == "job" && i["status"] == 200)
        .unwrap_or_else(|| panic!("no job invocation: {invocations:?}"));
    printed_under(&p, &run["id"], r#""method": "JOB""#).await;
}

/// A go1.23 function whose package does not compile.
const BROKEN_GO: &str = "package handler\n\nfunc Handle(event map[string]any) (any, error) {\n\treturn notDeclaredAnywhere, nil\n}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_fails_keeps_kanikos_log_and_says_why() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-build-fails").await;
    let (status, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({"name": "broken", "runtime": "go1.23", "entrypoint": "handler.Handle"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let zip = zip_files(&[
        ("go.mod", "module example.com/broken\n\ngo 1.21\n"),
        ("handler.go", BROKEN_GO),
    ]);
    let started = Instant::now();
    assert_eq!(p.client.upload("broken", zip).await.status(), 202);
    let f = p
        .wait("broken to fail its build", || async {
            let f = p.client.function("broken").await;
            match f["phase"].as_str() {
                Some("Failed") => Ok(f),
                Some("Ready") => panic!("a package that does not compile was deployed: {f}"),
                _ => Err(f.to_string()),
            }
        })
        .await;
    eprintln!("upload to BuildFailed: {:?}", started.elapsed());
    let error = f["last_error"].as_str().unwrap_or("");
    assert!(
        error.contains("notDeclaredAnywhere"),
        "the function's error names what did not compile: {f}"
    );
    assert_eq!(f["deployed_version"], Value::Null, "{f}");

    // The event says so too, with the log's tail.
    let (_, page) = p
        .call(
            Method::GET,
            "/events?function=broken&type=BuildFailed",
            None,
        )
        .await;
    let failed = page["items"]
        .as_array()
        .and_then(|e| e.first())
        .unwrap_or_else(|| panic!("no BuildFailed: {page}"));
    assert!(
        failed["data"].to_string().contains("notDeclaredAnywhere"),
        "{failed}"
    );

    // kaniko's log, as the API keeps it.
    let c = &p.client;
    let res = c
        .http
        .get(c.v1("/functions/broken/versions/1/build-log"))
        .bearer_auth(&c.token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let state = res.headers().get("sless-build-state").cloned();
    let log = res.text().await.unwrap();
    assert_eq!(
        state.as_ref().and_then(|s| s.to_str().ok()),
        Some("failed"),
        "{log}"
    );
    assert!(
        log.contains("undefined: notDeclaredAnywhere"),
        "the compiler's error is in the build log:\n{log}"
    );
    assert!(
        log.contains("sless-build"),
        "the log is the build's, from its first steps:\n{log}"
    );

    // And as `sless build-log` prints it.
    let out = sless()
        .env("SLESS_ENDPOINT", &c.url)
        .env("SLESS_TOKEN", &c.token)
        .args(["build-log", "broken", "--version", "1"])
        .output()
        .unwrap();
    let printed = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{:?}: {printed}{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        printed.contains("undefined: notDeclaredAnywhere"),
        "{printed}"
    );
}
