//! Scaling to zero and back on `sless dev`: a function idle past its
//! window is stopped and the log says so; the calls that find it at zero
//! are held, start one instance between them, and are recorded cold with
//! their activation time; a start that takes too long, or too many held
//! calls, get the documented 503s.

use std::time::{Duration, Instant};

use serde_json::{Value, json};

use crate::dev::{start_dev_configured, stop_dev};
use crate::fleet::{Platform, count};
use crate::{Client, zip_files};

const HANDLER: &str = "def handle(event):\n    return {\"ok\": True}\n";

/// A function that takes `secs` to import.
fn slow_handler(secs: u32) -> String {
    format!("import time\ntime.sleep({secs})\n\n{HANDLER}")
}

/// A GET of `url`: its status, `Retry-After` and JSON body.
async fn get(http: &reqwest::Client, url: &str) -> (u16, Option<String>, Value) {
    let res = http.get(url).send().await.unwrap();
    let status = res.status().as_u16();
    let retry = res
        .headers()
        .get("retry-after")
        .map(|v| v.to_str().unwrap().to_owned());
    let body: Value = res.json().await.unwrap();
    (status, retry, body)
}

/// The types of the function's events, oldest first (the audit log lists
/// them newest first).
async fn event_types(c: &Client, name: &str) -> Vec<String> {
    let page: Value = c
        .http
        .get(c.v1(&format!("/events?function={name}&limit=1000")))
        .bearer_auth(&c.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .rev()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

/// Deploys `name` with `code` and an idle window of 1 s, and waits until
/// it has been scaled to zero.
async fn deploy_and_idle(c: &Client, dir: &std::path::Path, name: &str, code: &str) {
    let res = c
        .create(
            json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle",
                        "scale_to_zero_after_sec": 1}),
        )
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let res = c.upload(name, zip_files(&[("handler.py", code)])).await;
    assert_eq!(res.status(), 202);
    let f = c.wait_ready(name, Duration::from_secs(120)).await;
    assert_eq!(f["scale_to_zero_after_sec"], 1, "{f}");
    let f = sless_testkit::eventually(
        &format!("{name} to be scaled to zero"),
        Duration::from_secs(60),
        || async {
            let f = c.function(name).await;
            (f["instances"] == 0).then_some(f)
        },
    )
    .await;
    assert_eq!(f["phase"], "Ready", "a function at zero stays Ready: {f}");
    sless_testkit::eventually("its process to end", Duration::from_secs(30), || async {
        sless_testkit::processes::jailed_programs(dir.to_str().unwrap())
            .is_empty()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_idle_function_is_stopped_and_fifty_first_calls_start_one_instance() {
    let dir = sless_testkit::scratch_dir("scale-zero").join("data");
    let (proc, c) = start_dev_configured(&dir, "log", &[], &[]).await;
    // The instance takes 2 s to import, so all fifty calls reach the proxy
    // while it starts, however slowly the machine opens their connections.
    deploy_and_idle(&c, &dir, "sleepy", &slow_handler(2)).await;
    let types = event_types(&c, "sleepy").await;
    assert_eq!(
        types
            .iter()
            .filter(|t| *t == "FunctionScaledToZero")
            .count(),
        1,
        "{types:?}"
    );

    // Fifty calls at once: all answered, by one instance started for them.
    let url = format!("{}/fn/{}/sleepy", c.fn_url, c.namespace);
    let started = Instant::now();
    let calls = (0..50).map(|_| {
        let (http, url) = (c.http.clone(), url.clone());
        async move { http.get(&url).send().await.unwrap().status().as_u16() }
    });
    let statuses = futures_util::future::join_all(calls).await;
    println!(
        "50 first calls of a function at zero: {:?}",
        started.elapsed()
    );
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    let types = event_types(&c, "sleepy").await;
    let after_zero: Vec<&String> = types
        .iter()
        .skip_while(|t| *t != "FunctionScaledToZero")
        .collect();
    assert_eq!(
        after_zero
            .iter()
            .filter(|t| **t == "FunctionScaledUp")
            .count(),
        1,
        "one start: {types:?}"
    );
    assert_eq!(
        after_zero
            .iter()
            .filter(|t| **t == "FunctionDeployed")
            .count(),
        1,
        "one deploy: {types:?}"
    );

    // Each held call is recorded cold, with how long it was held.
    let records =
        sless_testkit::eventually("the 50 calls' records", Duration::from_secs(30), || async {
            let r = c.invocations("sleepy").await?;
            (r.len() >= 50).then_some(r)
        })
        .await;
    let held: Vec<&Value> = records
        .iter()
        .filter(|r| r["activation_ms"].is_number())
        .collect();
    assert_eq!(held.len(), 50, "every call was held");
    let warm = held.iter().filter(|r| r["cold"] != true).count();
    assert_eq!(warm, 0, "every held call is cold");
    assert!(
        held.iter()
            .any(|r| r["instance_start_ms"].as_f64() > Some(0.0)),
        "the instance's start is in the records: {:?}",
        held[0]
    );
    let first = held.iter().map(|r| r["activation_ms"].as_f64().unwrap());
    println!(
        "held for {:.1} to {:.1} ms",
        first.clone().fold(f64::MAX, f64::min),
        first.fold(0.0, f64::max)
    );
    stop_dev(proc, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn calls_past_the_activation_queue_or_timeout_get_503_and_the_start_completes() {
    let dir = sless_testkit::scratch_dir("scale-503").join("data");
    let (proc, c) = start_dev_configured(
        &dir,
        "log",
        &[],
        &[
            ("SLESS_ACTIVATION_QUEUE", "2"),
            ("SLESS_ACTIVATION_TIMEOUT_SECS", "0.5"),
        ],
    )
    .await;
    deploy_and_idle(&c, &dir, "slow", &slow_handler(3)).await;

    let url = format!("{}/fn/{}/slow", c.fn_url, c.namespace);
    let calls = (0..5).map(|_| get(&c.http, &url));
    let answers = futures_util::future::join_all(calls).await;
    for (status, retry, body) in &answers {
        assert_eq!(*status, 503, "{body}");
        assert_eq!(
            body["type"]
                .as_str()
                .map(|t| t.ends_with("function-activating")),
            Some(true),
            "{body}"
        );
        assert_eq!(retry.as_deref(), Some("1"), "{body}");
    }
    let said = |what: &str| {
        answers
            .iter()
            .filter(|(_, _, b)| b["detail"].as_str().unwrap().contains(what))
            .count()
    };
    assert_eq!(said("did not start within 0.5 s"), 2, "{answers:?}");
    assert_eq!(said("calls already wait"), 3, "{answers:?}");

    // The start goes on, and the next call is served by it; one instance.
    sless_testkit::eventually(
        "the started instance to answer",
        Duration::from_secs(60),
        || async {
            let res = c.http.get(&url).send().await.ok()?;
            (res.status() == 200).then_some(())
        },
    )
    .await;
    let programs = sless_testkit::processes::jailed_programs(dir.to_str().unwrap());
    assert!(programs.len() <= 1, "one instance: {programs:?}");
    let types = event_types(&c, "slow").await;
    assert_eq!(
        types.iter().filter(|t| *t == "FunctionScaledUp").count(),
        1,
        "{types:?}"
    );
    stop_dev(proc, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_start_from_zero_that_fails_says_why_and_the_next_call_tries_again_after_a_pause() {
    let dir = sless_testkit::scratch_dir("scale-fail").join("data");
    let (proc, c) = start_dev_configured(&dir, "log", &[], &[]).await;
    // Imports well until `broken_after`, then fails: its first start
    // works, a start from zero later does not.
    let broken_after = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_secs()
        + 15;
    let code = format!(
        "import time\nif time.time() > {broken_after}:\n    raise SystemExit(\"the disk of doom is full\")\n\n{HANDLER}"
    );
    deploy_and_idle(&c, &dir, "fragile", &code).await;
    sless_testkit::eventually("the code to break", Duration::from_secs(30), || async {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_secs();
        (now > broken_after).then_some(())
    })
    .await;

    let url = format!("{}/fn/{}/fragile", c.fn_url, c.namespace);
    let call = || get(&c.http, &url);
    let (status, retry, body) = call().await;
    assert_eq!(status, 503, "{body}");
    assert!(
        body["type"]
            .as_str()
            .unwrap()
            .ends_with("function-activation-failed"),
        "{body}"
    );
    assert!(
        body["detail"].as_str().unwrap().contains("disk of doom"),
        "the reason: {body}"
    );
    assert!(retry.is_some(), "{body}");
    let f = c.function("fragile").await;
    assert_eq!(f["phase"], "Failed", "{f}");
    assert!(
        f["last_error"].as_str().unwrap().contains("disk of doom"),
        "{f}"
    );
    // At once again: refused without another start.
    let (status, _, body) = call().await;
    assert_eq!(status, 503, "{body}");
    let ups = |types: &[String]| types.iter().filter(|t| *t == "FunctionScaledUp").count();
    assert_eq!(ups(&event_types(&c, "fragile").await), 1);
    // After the pause, the next call starts it again (and fails again).
    let tried = sless_testkit::eventually(
        "a call after the pause to try again",
        Duration::from_secs(30),
        || async {
            let (status, _, body) = call().await;
            assert_eq!(status, 503, "{body}");
            let n = ups(&event_types(&c, "fragile").await);
            (n == 2).then_some(n)
        },
    )
    .await;
    assert_eq!(tried, 2);
    stop_dev(proc, &dir).await;
}

/// Two API processes and two workers on one database: the function is
/// scaled down once, the calls through both proxies start one instance,
/// and both send their calls to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_apis_and_two_workers_scale_down_once_and_start_one_instance() {
    let p = Platform::start("scale-replicas", 2, 2, "twins").await;
    let c = &p.client;
    p.deploy("shared", json!({"scale_to_zero_after_sec": 1}))
        .await;
    sless_testkit::eventually("the function at zero", Duration::from_secs(60), || async {
        (c.function("shared").await["instances"] == 0).then_some(())
    })
    .await;

    let calls = p.fn_urls.iter().cycle().take(20).map(|base| {
        let url = format!("{base}/fn/{}/shared", c.namespace);
        let http = c.http.clone();
        async move { http.get(&url).send().await.unwrap().status().as_u16() }
    });
    let statuses = futures_util::future::join_all(calls).await;
    assert!(statuses.iter().all(|s| *s == 200), "{statuses:?}");
    // Both workers swept every second meanwhile.
    assert_eq!(
        count(&p, "FunctionScaledToZero").await,
        1,
        "scaled down once"
    );
    assert_eq!(count(&p, "FunctionScaledUp").await, 1, "one start");
    assert_eq!(
        count(&p, "FunctionDeployed").await,
        2,
        "the first deploy and the one start"
    );
}

/// A call right after its function was scaled to zero, while the proxy
/// still remembers where it ran and holds a kept-alive connection to the
/// stopped process: it is held for a new instance, not answered 502.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_right_after_a_scale_down_is_held_not_sent_to_the_stopped_process() {
    let p = Platform::start("scale-stale", 1, 1, "quick").await;
    let c = &p.client;
    p.deploy("quick", json!({"scale_to_zero_after_sec": 0}))
        .await;
    let url = format!("{}/fn/{}/quick", c.fn_url, c.namespace);
    let key = sless_domain::FunctionKey::new(
        sless_domain::Namespace::parse(&c.namespace).unwrap(),
        sless_domain::FunctionName::parse("quick").unwrap(),
    );
    for round in 0..3 {
        assert_eq!(c.http.get(&url).send().await.unwrap().status(), 200);
        let endpoint: String =
            sqlx::query_scalar("select endpoint from functions where name = 'quick'")
                .fetch_one(&p.db.pool)
                .await
                .unwrap();
        let down = sless_store::scaling::decide_and_enqueue(
            &p.db.pool,
            &key,
            sless_domain::function::FunctionCommand::ScaleToZero {
                reason: "test".into(),
            },
            sless_store::eventlog::Metadata::default(),
        )
        .await
        .unwrap();
        assert!(down.appended.is_some(), "round {round}");
        // At once once the process no longer listens, before the proxy
        // forgets where it ran.
        let addr = endpoint.trim_start_matches("http://").to_owned();
        sless_testkit::eventually(
            "the process to stop listening",
            Duration::from_secs(30),
            || async {
                tokio::net::TcpStream::connect(&addr)
                    .await
                    .is_err()
                    .then_some(())
            },
        )
        .await;
        let res = c.http.get(&url).send().await.unwrap();
        let status = res.status();
        assert_eq!(status, 200, "round {round}: {}", res.text().await.unwrap());
    }
}

/// A function at zero whose next upload fails to build: the version that
/// served before serves again, as a failed deploy leaves what served.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_fails_to_build_while_at_zero_leaves_the_old_version_serving() {
    let dir = sless_testkit::scratch_dir("scale-restore").join("data");
    let (proc, c) = start_dev_configured(&dir, "log", &[], &[]).await;
    deploy_and_idle(&c, &dir, "steady", HANDLER).await;
    let broken = zip_files(&[
        ("handler.py", "def handle(event):\n    return 'v2'\n"),
        ("requirements.txt", "this is not a requirement ===\n"),
    ]);
    assert_eq!(c.upload("steady", broken).await.status(), 202);
    // The failure is recorded, then version 1 is started again.
    let f = sless_testkit::eventually(
        "v2's build to fail and v1 to serve",
        Duration::from_secs(120),
        || async {
            let f = c.function("steady").await;
            (f["phase"] == "Failed" && f["instances"] == 1).then_some(f)
        },
    )
    .await;
    assert_eq!(f["version"], 2, "{f}");
    let (status, _, body) = get(&c.http, &format!("{}/fn/{}/steady", c.fn_url, c.namespace)).await;
    assert_eq!(status, 200, "version 1 serves: {body}");
    assert_eq!(body, json!({"ok": true}));
    let f = c.function("steady").await;
    assert_eq!(
        (&f["phase"], &f["deployed_version"], &f["instances"]),
        (&json!("Failed"), &json!(1), &json!(1)),
        "{f}"
    );
    stop_dev(proc, &dir).await;
}

/// The idle window counts from the last call's end: a call longer than
/// the window is neither cut nor scaled away under it, and the function is
/// scaled to zero about a window after the call ended (not a window after
/// its start plus its `timeout_sec`, 60 s here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_idle_window_counts_from_the_last_calls_end() {
    let p = Platform::start("scale-end", 1, 1, "lingers").await;
    let c = &p.client;
    let body = json!({"name": "lingers", "runtime": "python3.11", "entrypoint": "handler.handle",
                      "scale_to_zero_after_sec": 2, "timeout_sec": 60});
    assert_eq!(c.create(body).await.status(), 201);
    let code = "import time\n\ndef handle(event):\n    time.sleep(4)\n    return {\"ok\": True}\n";
    let res = c
        .upload("lingers", zip_files(&[("handler.py", code)]))
        .await;
    assert_eq!(res.status(), 202);
    c.wait_ready("lingers", Duration::from_secs(120)).await;
    let pool = &p.db.pool;
    let db_now = || async {
        sqlx::query_scalar::<_, chrono::DateTime<chrono::Utc>>("select clock_timestamp()")
            .fetch_one(pool)
            .await
            .unwrap()
    };
    let scaled_down_between = |from, to| async move {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from events where type = 'FunctionScaledToZero'
             and recorded_at > $1 and recorded_at <= $2",
        )
        .bind(from)
        .bind(to)
        .fetch_one(pool)
        .await
        .unwrap()
    };
    let url = format!("{}/fn/{}/lingers", c.fn_url, c.namespace);
    let started = db_now().await;
    let res = c.http.get(&url).send().await.unwrap();
    assert_eq!(res.status(), 200, "{}", res.text().await.unwrap());
    let ended = db_now().await;
    assert!((ended - started).num_milliseconds() >= 4000);
    assert_eq!(
        scaled_down_between(started, ended).await,
        0,
        "scaled to zero while a call was in flight"
    );
    let down = sless_testkit::eventually(
        "a scale to zero after the call's end",
        Duration::from_secs(20),
        || async {
            let at: Option<chrono::DateTime<chrono::Utc>> = sqlx::query_scalar(
                "select max(recorded_at) from events where type = 'FunctionScaledToZero'
                 and recorded_at > $1",
            )
            .bind(ended)
            .fetch_one(pool)
            .await
            .unwrap();
            at
        },
    )
    .await;
    let after = (down - ended).to_std().unwrap();
    println!("scaled to zero {after:?} after the call's end (window 2 s)");
    assert!(after >= Duration::from_millis(1500), "{after:?}");
    assert!(after < Duration::from_secs(10), "{after:?}");
}
