//! One-shot jobs end to end, with a real Python function run by the
//! worker: one that returns its input, one that prints 1 MiB, one that
//! exits 3, one that runs past its timeout, one deleted while it runs;
//! each ends in the right state with the right output, and each run is an
//! invocation record with its origin.

use std::time::Duration;

use reqwest::Method;
use serde_json::{Value, json};
use sless_testkit::eventually;

use crate::platform::Platform;
use crate::zip_files;

const WORK: &str = "\
import json, os, subprocess, sys, time
def handle(event):
    mode = event['json']['mode']
    if mode == 'big':
        sys.stdout.write('x' * (1024 * 1024) + '\\n')
    elif mode == 'exit':
        print('leaving with 3', file=sys.stderr)
        sys.exit(3)
    elif mode == 'sleep':
        # `sh -c CMD NAME`: NAME (the marker) is in the child's command line.
        subprocess.Popen(['sh', '-c', 'sleep 600; true', event['json']['marker']])
        time.sleep(event['json']['seconds'])
    elif mode == 'raise':
        raise ValueError('bad input')
    return {'method': event['method'], 'input': event['json'], 'body': event['body']}
";

async fn job(p: &Platform, name: &str, input: Value, timeout: Option<u32>) -> (u16, Value) {
    let mut body = json!({"name": name, "function": "work", "input": input});
    if let Some(t) = timeout {
        body["timeout_sec"] = json!(t);
    }
    p.call(Method::POST, "/jobs", Some(body)).await
}

/// Waits until job `name` is in `status`; its document.
async fn until(p: &Platform, name: &str, status: &str) -> Value {
    eventually(
        &format!("job {name} {status}"),
        Duration::from_secs(60),
        || async {
            let (code, doc) = p.call(Method::GET, &format!("/jobs/{name}"), None).await;
            assert_eq!(code, 200, "{doc}");
            if ["Succeeded", "Failed"].contains(&doc["status"].as_str().unwrap_or_default()) {
                assert_eq!(doc["status"], status, "{doc}");
            }
            (doc["status"] == status).then_some(doc)
        },
    )
    .await
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn jobs_end_in_the_right_state_with_their_output() {
    let p = Platform::start(50).await;
    let (status, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({"name": "work", "runtime": "python3.11", "entrypoint": "handler.handle", "timeout_sec": 60})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // A job of a function with nothing uploaded is refused, writing nothing.
    let (status, body) = job(&p, "early", json!({"mode": "ok"}), None).await;
    assert_eq!(status, 409, "{body}");
    let (status, body) = p.upload("work", zip_files(&[("handler.py", WORK)])).await;
    assert_eq!(status, 202, "{body}");

    let input = json!({"mode": "ok", "n": [1, 2], "s": "é"});
    let (status, created) = job(&p, "echo", input.clone(), None).await;
    assert_eq!(status, 202, "{created}");
    assert_eq!(created["status"], "Pending", "{created}");
    for (name, input, timeout) in [
        ("big", json!({"mode": "big"}), None),
        ("exit", json!({"mode": "exit"}), None),
        ("raise", json!({"mode": "raise"}), None),
        (
            "late",
            json!({"mode": "sleep", "seconds": 30, "marker": "sless-job-timeout-unused"}),
            Some(2),
        ),
    ] {
        let (status, body) = job(&p, name, input, timeout).await;
        assert_eq!(status, 202, "{name}: {body}");
    }

    let echo = until(&p, "echo", "Succeeded").await;
    assert_eq!(echo["exit_code"], 0, "{echo}");
    let last = echo["stdout"]["text"]
        .as_str()
        .unwrap()
        .trim()
        .lines()
        .last()
        .unwrap()
        .to_owned();
    let answer: Value = serde_json::from_str(&last).unwrap();
    assert_eq!(answer["method"], "JOB");
    assert_eq!(answer["input"], input);
    assert_eq!(
        serde_json::from_str::<Value>(answer["body"].as_str().unwrap()).unwrap(),
        input
    );
    assert_eq!(echo["version"], 1);
    assert!(
        echo["started_at"].is_string() && echo["finished_at"].is_string(),
        "{echo}"
    );

    let big = until(&p, "big", "Succeeded").await;
    let out = &big["stdout"];
    assert_eq!(out["truncated"], true, "{}", out["bytes"]);
    assert!(out["bytes"].as_u64().unwrap() > 1024 * 1024);
    let text = out["text"].as_str().unwrap();
    assert!(text.len() < 80 * 1024, "{} bytes kept", text.len());
    assert!(text.contains("omitted"));
    assert!(
        text.trim_end().ends_with('}'),
        "the return value is kept at the end"
    );

    let exit = until(&p, "exit", "Failed").await;
    assert_eq!(exit["exit_code"], 3, "{exit}");
    assert!(
        exit["stderr"]["text"]
            .as_str()
            .unwrap()
            .contains("leaving with 3")
    );

    let raised = until(&p, "raise", "Failed").await;
    assert_eq!(raised["exit_code"], 1, "{raised}");
    assert!(
        raised["stderr"]["text"]
            .as_str()
            .unwrap()
            .contains("ValueError: bad input")
    );

    let late = until(&p, "late", "Failed").await;
    assert_eq!(late["timed_out"], true, "{late}");
    assert!(
        late["error"].as_str().unwrap().contains("timed out"),
        "{late}"
    );

    // A job that exists is reported as such, with how it is doing.
    let (status, again) = job(&p, "exit", json!({"mode": "ok"}), None).await;
    assert_eq!(status, 409, "{again}");
    assert_eq!(again["job_status"], "Failed", "{again}");
    assert_eq!(again["job"]["exit_code"], 3, "{again}");

    // Every run is an invocation record of origin `job`.
    let records: Vec<(String, i16, Option<String>)> = sqlx::query_as(
        "select origin, status, run from invocations where function = 'work' order by run",
    )
    .fetch_all(&p.db.pool)
    .await
    .unwrap();
    let runs: Vec<_> = records
        .iter()
        .map(|(o, s, r)| (o.as_str(), *s, r.clone().unwrap()))
        .collect();
    assert_eq!(runs.len(), 5, "{runs:?}");
    assert!(
        runs.iter()
            .all(|(o, _, r)| *o == "job" && r.starts_with("job/")),
        "{runs:?}"
    );
    assert_eq!(
        runs.iter().filter(|(_, s, _)| *s == 200).count(),
        2,
        "{runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deleting_a_running_job_stops_it() {
    let p = Platform::start(50).await;
    let (status, _) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({"name": "work", "runtime": "python3.11", "entrypoint": "handler.handle"})),
        )
        .await;
    assert_eq!(status, 201);
    let (status, _) = p.upload("work", zip_files(&[("handler.py", WORK)])).await;
    assert_eq!(status, 202);
    let marker = format!("sless-job-forever-{}", uuid::Uuid::new_v4().simple());
    let (status, body) = job(
        &p,
        "forever",
        json!({"mode": "sleep", "seconds": 600, "marker": marker}),
        Some(900),
    )
    .await;
    assert_eq!(status, 202, "{body}");
    until(&p, "forever", "Running").await;
    let pid: u32 = eventually(
        "the job started its child",
        Duration::from_secs(60),
        || async {
            crate::support::processes_mentioning(&marker)
                .first()
                .map(|(pid, _)| *pid)
        },
    )
    .await;
    assert!(alive(pid));
    let (status, body) = p.call(Method::DELETE, "/jobs/forever", None).await;
    assert!((200..300).contains(&status), "{status} {body}");
    eventually("the job's child gone", Duration::from_secs(15), || async {
        (!alive(pid)).then_some(())
    })
    .await;
    let (status, _) = p.call(Method::GET, "/jobs/forever", None).await;
    assert_eq!(status, 404);
    // Nothing was recorded after the delete: the run was stopped, not finished.
    let types: Vec<String> = sqlx::query_scalar(
        "select type from events where stream like 'job/%/forever' order by version",
    )
    .fetch_all(&p.db.pool)
    .await
    .unwrap();
    assert_eq!(types, ["JobRequested", "JobStarted", "JobDeleted"]);
    // The name is free again.
    let (status, body) = job(&p, "forever", json!({"mode": "ok"}), None).await;
    assert_eq!(status, 202, "{body}");
    until(&p, "forever", "Succeeded").await;
}
