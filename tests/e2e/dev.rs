//! `sless dev`: the embedded default, as a new user runs it.

use std::path::Path;
use std::time::{Duration, Instant};

use serde_json::json;

use crate::{Client, Proc, processes_mentioning, sless, zip_dir};

/// Starts `sless dev` on `dir` (logging to `dir` with the extension
/// `log`) and waits until it wrote `dev.json`.
pub async fn start_dev(dir: &Path, log: &str) -> (Proc, Client) {
    start_dev_with(dir, log, &[]).await
}

/// [`start_dev`] with more arguments.
pub async fn start_dev_with(dir: &Path, log: &str, args: &[&str]) -> (Proc, Client) {
    start_dev_configured(dir, log, args, &[]).await
}

/// [`start_dev`] with more arguments and settings in its environment.
pub async fn start_dev_configured(
    dir: &Path,
    log: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Proc, Client) {
    let listen = [&["--listen", "127.0.0.1:0"], args].concat();
    start_dev_listening(dir, log, &listen, env).await
}

/// [`start_dev`] with `args`, which say where it listens, and settings in
/// its environment.
pub async fn start_dev_listening(
    dir: &Path,
    log: &str,
    args: &[&str],
    env: &[(&str, &str)],
) -> (Proc, Client) {
    let _ = std::fs::remove_file(dir.join("dev.json"));
    let mut cmd = sless();
    cmd.args(["dev", "--data-dir", dir.to_str().unwrap()])
        .args(args);
    cmd.env_remove("DATABASE_URL")
        .env_remove("S3_ENDPOINT")
        .env_remove("S3_BUCKET")
        .envs(env.iter().copied());
    let proc = Proc::spawn(cmd, &dir.with_extension(log));
    let info: serde_json::Value =
        sless_testkit::eventually("dev.json", Duration::from_secs(90), || async {
            let text = std::fs::read_to_string(dir.join("dev.json")).ok()?;
            serde_json::from_str(&text).ok()
        })
        .await;
    let client = Client {
        url: info["url"].as_str().unwrap().to_owned(),
        fn_url: info["fn_url"].as_str().unwrap().to_owned(),
        token: info["token"].as_str().unwrap().to_owned(),
        namespace: info["namespace"].as_str().unwrap().to_owned(),
        http: reqwest::Client::new(),
    };
    (proc, client)
}

/// Stops it (SIGTERM) and checks it left nothing running.
pub async fn stop_dev(mut proc: Proc, dir: &Path) {
    proc.signal(libc::SIGTERM);
    let status = proc.wait_exit(Duration::from_secs(60)).await;
    assert!(status.success(), "sless dev exited with {status}");
    let left = processes_mentioning(dir.to_str().unwrap());
    assert!(
        left.is_empty(),
        "processes left running after sless dev stopped: {left:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sless_dev_runs_an_uploaded_python_function_and_keeps_it_across_a_restart() {
    let dir = sless_testkit::scratch_dir("dev").join("data");
    let (proc, c) = start_dev(&dir, "log1").await;

    let res = c
        .create(json!({"name": "hello", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello-python");
    let started = Instant::now();
    let res = c.upload("hello", zip_dir(&example)).await;
    assert_eq!(res.status(), 202);
    let body: serde_json::Value = res.json().await.unwrap();
    assert_eq!(body["version"], 1);
    let f = c.wait_ready("hello", Duration::from_secs(120)).await;
    println!("upload to Ready: {:?}", started.elapsed());
    assert_eq!(f["version"], 1);

    let url = format!("{}/fn/{}/hello/greet?name=e2e", c.fn_url, c.namespace);
    let answer: serde_json::Value = c.http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(answer["message"], "hello, e2e");
    assert_eq!(answer["path"], "/greet");

    // Another user of the same instance has a namespace of their own.
    let out = sless()
        .args([
            "token",
            "--data-dir",
            dir.to_str().unwrap(),
            "--sub",
            "someone-else",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    let other_token = String::from_utf8(out.stdout).unwrap().trim().to_owned();
    let other = Client {
        token: other_token,
        namespace: sless_domain::Namespace::for_subject("someone-else").to_string(),
        ..c.clone()
    };
    let own: serde_json::Value = other.list_as(&other.token).await.json().await.unwrap();
    assert_eq!(own["items"], json!([]));
    let theirs = c
        .http
        .get(c.v1("/functions/hello"))
        .bearer_auth(&other.token)
        .send()
        .await
        .unwrap();
    assert_eq!(theirs.status(), 404);

    stop_dev(proc, &dir).await;

    // A second start on the same data directory keeps the function and runs it again.
    let (proc, c) = start_dev(&dir, "log2").await;
    let list: serde_json::Value = c.list_as(&c.token).await.json().await.unwrap();
    assert_eq!(list["items"][0]["name"], "hello");
    let url = format!("{}/fn/{}/hello?name=again", c.fn_url, c.namespace);
    let answer: serde_json::Value = sless_testkit::eventually(
        "the function to answer after a restart",
        Duration::from_secs(60),
        || async {
            let res = c.http.get(&url).send().await.ok()?;
            if !res.status().is_success() {
                return None;
            }
            res.json().await.ok()
        },
    )
    .await;
    assert_eq!(answer["message"], "hello, again");
    stop_dev(proc, &dir).await;
}

/// The README's cron trigger and job, on `sless dev` with its own clock:
/// the trigger fires at the next whole minute (its scheduler runs in the
/// binary), and the job runs once with its input.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sless_dev_runs_a_cron_trigger_and_a_job_as_the_readme_shows() {
    let dir = sless_testkit::scratch_dir("dev-cron").join("data");
    let (proc, c) = start_dev(&dir, "log").await;
    let res = c
        .create(json!({"name": "hello", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201);
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello-python");
    assert_eq!(c.upload("hello", zip_dir(&example)).await.status(), 202);
    c.wait_ready("hello", Duration::from_secs(120)).await;

    let post = |path: &'static str, body: serde_json::Value| {
        let c = c.clone();
        async move {
            let res = c
                .http
                .post(c.v1(path))
                .bearer_auth(&c.token)
                .json(&body)
                .send()
                .await
                .unwrap();
            (
                res.status().as_u16(),
                res.json::<serde_json::Value>().await.unwrap(),
            )
        }
    };
    let get = |path: String| {
        let c = c.clone();
        async move {
            let res = c
                .http
                .get(c.v1(&path))
                .bearer_auth(&c.token)
                .send()
                .await
                .unwrap();
            res.json::<serde_json::Value>().await.unwrap()
        }
    };
    let (status, trigger) = post(
        "/triggers",
        json!({"name": "every-minute", "function": "hello", "type": "cron", "schedule": "* * * * *", "timezone": "Europe/Berlin"}),
    )
    .await;
    assert_eq!(status, 201, "{trigger}");
    let (status, job) = post(
        "/jobs",
        json!({"name": "once", "function": "hello", "input": {"name": "job"}}),
    )
    .await;
    assert_eq!(status, 202, "{job}");
    let job = sless_testkit::eventually("the job done", Duration::from_secs(60), || async {
        let j = get("/jobs/once".into()).await;
        (j["status"] == "Succeeded" || j["status"] == "Failed").then_some(j)
    })
    .await;
    assert_eq!(job["status"], "Succeeded", "{job}");
    assert!(
        job["stdout"]["text"]
            .as_str()
            .unwrap()
            .contains("hello, job"),
        "{job}"
    );

    // The next whole minute is at most 60 s away.
    let run = sless_testkit::eventually("a cron run done", Duration::from_secs(100), || async {
        let t = get("/triggers/every-minute".into()).await;
        let run = t["runs"].as_array()?.first()?.clone();
        (run["status"] == "Succeeded").then_some(run)
    })
    .await;
    assert!(run["scheduled_at"].is_string(), "{run}");
    stop_dev(proc, &dir).await;
}

/// The first JSON log line of `sless dev` (its log `log`) that mentions
/// `needle`, once it has been written.
pub async fn json_log_line(log: &Path, needle: &str) -> serde_json::Value {
    let line = sless_testkit::eventually("the log line", Duration::from_secs(30), || async {
        sless_testkit::whole_line_with(log, needle)
    })
    .await;
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{e}: {line}"))
}
