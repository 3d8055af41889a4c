//! Scaling out on the local driver, the real parts together (API
//! processes, a projector, `sless worker` processes, sandboxed functions):
//! a busy function gets more instances and throughput, and goes back to
//! zero after; `min_instances` keeps instances warm; past `max_instances`
//! calls get 429, never a 5xx; an instance killed under load fails only
//! the calls it held; two API processes and two workers agree on one
//! count; a new version rolls the instances over without losing a call.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sless_api::proxy::ProxyLimits;
use sless_testkit::eventually;

use crate::fleet::Platform;

/// The autoscaler's windows, short enough for a test.
const FAST: &[(&str, &str)] = &[
    ("SLESS_AUTOSCALE_STABLE_WINDOW_SECS", "6"),
    ("SLESS_AUTOSCALE_PANIC_WINDOW_SECS", "2"),
];

/// A function that takes `secs` per call and says `says`.
fn sleeper(secs: f64, says: &str) -> String {
    format!(
        "import time\n\ndef handle(event):\n    time.sleep({secs})\n    return {{\"says\": \"{says}\"}}\n"
    )
}

/// Statuses of the calls a load made, by status.
#[derive(Default)]
struct Tally {
    by_status: std::sync::Mutex<std::collections::BTreeMap<u16, usize>>,
    retry_after_missing: AtomicUsize,
    bodies: std::sync::Mutex<Vec<String>>,
}

impl Tally {
    fn count(&self, status: u16) -> usize {
        self.by_status
            .lock()
            .unwrap()
            .get(&status)
            .copied()
            .unwrap_or(0)
    }

    fn total(&self) -> usize {
        self.by_status.lock().unwrap().values().sum()
    }

    fn server_errors(&self) -> Vec<(u16, usize)> {
        let by = self.by_status.lock().unwrap();
        by.iter()
            .filter(|(s, _)| **s >= 500)
            .map(|(s, n)| (*s, *n))
            .collect()
    }
}

/// `callers` loops of GETs of `urls` (round robin over them), until
/// stopped.
struct Load {
    tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    callers: Vec<tokio::task::JoinHandle<()>>,
}

impl Load {
    fn start(urls: Vec<String>, callers: usize) -> Load {
        let http = reqwest::Client::builder()
            .pool_max_idle_per_host(callers)
            .build()
            .unwrap();
        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let callers = (0..callers)
            .map(|i| {
                let (http, urls, stop, tally) =
                    (http.clone(), urls.clone(), stop.clone(), tally.clone());
                tokio::spawn(async move {
                    while !stop.load(Ordering::SeqCst) {
                        let url = &urls[i % urls.len()];
                        let Ok(res) = http.get(url).send().await else {
                            *tally.by_status.lock().unwrap().entry(0).or_default() += 1;
                            continue;
                        };
                        let status = res.status().as_u16();
                        if status == 429 && res.headers().get("retry-after").is_none() {
                            tally.retry_after_missing.fetch_add(1, Ordering::SeqCst);
                        }
                        let body = res.text().await.unwrap_or_default();
                        *tally.by_status.lock().unwrap().entry(status).or_default() += 1;
                        if status != 200 {
                            tally.bodies.lock().unwrap().push(body);
                        } else if let Ok(v) = serde_json::from_str::<Value>(&body) {
                            tally.bodies.lock().unwrap().push(v["says"].to_string());
                        }
                        if status == 429 {
                            tokio::time::sleep(Duration::from_millis(100)).await;
                        }
                    }
                })
            })
            .collect();
        Load {
            tally,
            stop,
            callers,
        }
    }

    /// Stops the callers once their calls are answered.
    async fn stop(self) {
        self.stop.store(true, Ordering::SeqCst);
        for c in self.callers {
            c.await.unwrap();
        }
    }
}

/// Waits until `n` instances of `name` serve.
async fn until_instances(p: &Platform, name: &str, n: i64) {
    eventually(
        &format!("{n} instances"),
        Duration::from_secs(30),
        || async { (instances(p, name).await == n).then_some(()) },
    )
    .await;
}

async fn instances(p: &Platform, name: &str) -> i64 {
    p.client.function(name).await["instances"]
        .as_i64()
        .unwrap_or(-1)
}

async fn events(p: &Platform, name: &str, ty: &str) -> Vec<Value> {
    sqlx::query_scalar::<_, Value>(
        "select data from events where stream like '%/' || $1 and type = $2 order by position",
    )
    .bind(name)
    .bind(ty)
    .fetch_all(&p.db.pool)
    .await
    .unwrap()
}

/// Calls answered in `window` by `callers` looping on the function.
async fn throughput(p: &Platform, name: &str, callers: usize, window: Duration) -> f64 {
    let url = format!("{}/fn/{}/{name}", p.client.fn_url, p.client.namespace);
    let running = Load::start(vec![url], callers);
    let tally = running.tally.clone();
    tokio::time::sleep(window).await; // the window measured
    running.stop().await;
    assert!(
        tally.server_errors().is_empty(),
        "{:?}",
        tally.server_errors()
    );
    tally.count(200) as f64 / window.as_secs_f64()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_busy_function_scales_out_to_its_max_and_back_to_zero_after() {
    let p = Platform::start_with("scale-out", 1, 1, "busy", FAST, ProxyLimits::default()).await;
    let spec = json!({"concurrency": 1, "max_instances": 8, "scale_to_zero_after_sec": 3});
    // A quarter of a second a call: the calls wait, they do not compute, so
    // the figure is the instances' pace even on a busy machine (at 0.1 s,
    // eight instances asked for ~80 calls a second of the proxy, and a
    // machine running the rest of the suite gave 44).
    p.deploy_code("busy", spec, &sleeper(0.25, "v1")).await;
    // One caller: one instance's pace, ~4 calls a second.
    let one = throughput(&p, "busy", 1, Duration::from_secs(3)).await;
    // 32 callers: the autoscaler panics and scales out to 8.
    let url = format!("{}/fn/{}/busy", p.client.fn_url, p.client.namespace);
    let running = Load::start(vec![url], 32);
    let tally = running.tally.clone();
    until_instances(&p, "busy", 8).await;
    let before = tally.count(200);
    let measured = Instant::now();
    tokio::time::sleep(Duration::from_secs(4)).await; // the window measured
    let many = (tally.count(200) - before) as f64 / measured.elapsed().as_secs_f64();
    running.stop().await;
    println!("one caller: {one:.1} calls/s; 32 callers at 8 instances: {many:.1} calls/s");
    assert!(
        tally.server_errors().is_empty(),
        "{:?}",
        tally.server_errors()
    );
    assert_eq!(
        tally.count(200),
        tally.total(),
        "{:?}",
        tally.bodies.lock().unwrap()
    );
    assert!(many >= 5.0 * one, "{many:.1} calls/s is not 5x {one:.1}");
    // Every decision is in the log with what caused it: the step to 32
    // callers panicked (the one caller before may have asked for a second
    // instance already: 1 in flight is more than 0.7 of one).
    let scaled = events(&p, "busy", "FunctionScaled").await;
    let step = scaled
        .iter()
        .find(|e| e["observed"].as_f64().unwrap() >= 4.0)
        .unwrap_or_else(|| panic!("no decision saw the step: {scaled:?}"));
    assert_eq!(step["window"], "panic", "{step}");
    assert!(
        step["to"].as_u64().unwrap() > step["from"].as_u64().unwrap(),
        "{step}"
    );
    assert!(
        step["reason"].as_str().unwrap().contains("calls in flight"),
        "{step}"
    );
    for pair in scaled.windows(2) {
        assert_eq!(pair[1]["from"], pair[0]["to"], "{scaled:?}");
    }
    // Quiet: back to zero a window after the last call.
    eventually("back to zero", Duration::from_secs(60), || async {
        (instances(&p, "busy").await == 0).then_some(())
    })
    .await;
    eventually("its processes to end", Duration::from_secs(30), || async {
        sless_testkit::processes::jailed_programs(p.worker_dir(1).to_str().unwrap())
            .is_empty()
            .then_some(())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn min_instances_keeps_two_warm_through_idle_windows() {
    let p = Platform::start_with("scale-warm", 1, 1, "warm", FAST, ProxyLimits::default()).await;
    p.deploy(
        "warm",
        json!({"min_instances": 2, "scale_to_zero_after_sec": 1}),
    )
    .await;
    until_instances(&p, "warm", 2).await;
    // The bounded wait is the assertion: four idle windows pass.
    tokio::time::sleep(Duration::from_secs(4)).await;
    assert_eq!(instances(&p, "warm").await, 2);
    assert!(events(&p, "warm", "FunctionScaledToZero").await.is_empty());
    let running = sless_testkit::processes::jailed_programs(p.worker_dir(1).to_str().unwrap());
    assert_eq!(running.len(), 2, "{running:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn calls_past_max_instances_get_429_with_retry_after_and_never_a_5xx() {
    let limits = ProxyLimits {
        activation_queue: 4,
        activation_timeout: Duration::from_secs(2),
        ..ProxyLimits::default()
    };
    let p = Platform::start_with("scale-over", 1, 1, "over", FAST, limits).await;
    p.deploy_code(
        "over",
        json!({"concurrency": 1, "max_instances": 2}),
        &sleeper(0.3, "v1"),
    )
    .await;
    let url = format!("{}/fn/{}/over", p.client.fn_url, p.client.namespace);
    // Ten times what two instances take.
    let running = Load::start(vec![url], 20);
    let tally = running.tally.clone();
    eventually(
        "some calls refused and some answered",
        Duration::from_secs(30),
        || async { (tally.count(429) >= 10 && tally.count(200) >= 10).then_some(()) },
    )
    .await;
    running.stop().await;
    println!(
        "20 callers of 2 instances: {} answered, {} refused",
        tally.count(200),
        tally.count(429)
    );
    assert!(
        tally.server_errors().is_empty(),
        "{:?}",
        tally.server_errors()
    );
    assert_eq!(tally.count(0), 0, "connections failed");
    assert_eq!(tally.retry_after_missing.load(Ordering::SeqCst), 0);
    assert!(instances(&p, "over").await <= 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_instance_killed_under_load_fails_only_the_calls_it_held() {
    let p = Platform::start_with("scale-kill", 1, 1, "kill", FAST, ProxyLimits::default()).await;
    p.deploy_code(
        "victim",
        json!({"concurrency": 1, "min_instances": 3, "max_instances": 3}),
        &sleeper(0.2, "v1"),
    )
    .await;
    until_instances(&p, "victim", 3).await;
    let url = format!("{}/fn/{}/victim", p.client.fn_url, p.client.namespace);
    let running = Load::start(vec![url], 3);
    let tally = running.tally.clone();
    eventually("calls answered", Duration::from_secs(10), || async {
        (tally.count(200) >= 10).then_some(())
    })
    .await;
    let dir = p.worker_dir(1);
    let programs = sless_testkit::processes::jailed_programs(dir.to_str().unwrap());
    assert_eq!(programs.len(), 3, "{programs:?}");
    let (pid, _) = &programs[0];
    let killed = std::process::Command::new("kill")
        .args(["-9", &pid.to_string()])
        .status()
        .unwrap();
    assert!(killed.success());
    let before = tally.count(200);
    eventually(
        "calls answered after the kill",
        Duration::from_secs(10),
        || async { (tally.count(200) >= before + 20).then_some(()) },
    )
    .await;
    eventually("the instance replaced", Duration::from_secs(30), || async {
        let now = sless_testkit::processes::jailed_programs(dir.to_str().unwrap());
        (now.len() == 3 && !now.iter().any(|(p, _)| p == pid)).then_some(())
    })
    .await;
    running.stop().await;
    let failed = tally.total() - tally.count(200);
    println!(
        "{} calls, {failed} failed: {:?}",
        tally.total(),
        tally
            .bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| !b.starts_with('"'))
            .collect::<Vec<_>>()
    );
    // The one call the killed instance held (concurrency 1), at most.
    assert!(failed <= 1, "{failed} failed: {:?}", tally.server_errors());
    assert_eq!(tally.count(0), 0, "connections failed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_apis_and_two_workers_agree_on_one_count() {
    let p = Platform::start_with("scale-agree", 2, 2, "agree", FAST, ProxyLimits::default()).await;
    p.deploy_code(
        "shared",
        json!({"concurrency": 1, "max_instances": 6}),
        &sleeper(0.1, "v1"),
    )
    .await;
    let urls: Vec<String> = p
        .fn_urls
        .iter()
        .map(|f| format!("{f}/fn/{}/shared", p.client.namespace))
        .collect();
    let running = Load::start(urls, 16);
    let tally = running.tally.clone();
    eventually("scaled out", Duration::from_secs(30), || async {
        (instances(&p, "shared").await >= 4).then_some(())
    })
    .await;
    running.stop().await;
    assert!(
        tally.server_errors().is_empty(),
        "{:?}",
        tally.server_errors()
    );
    // One decider: each decision starts where the one before ended.
    let scaled = events(&p, "shared", "FunctionScaled").await;
    for pair in scaled.windows(2) {
        assert_eq!(pair[1]["from"], pair[0]["to"], "{scaled:?}");
    }
    let actors: Vec<String> = sqlx::query_scalar(
        "select distinct metadata->>'actor' from events where type = 'FunctionScaled'",
    )
    .fetch_all(&p.db.pool)
    .await
    .unwrap();
    assert_eq!(actors, vec!["system:autoscaler".to_owned()]);
    // What runs is what the log says (looked at together, as the count
    // goes back down).
    eventually(
        "the processes to match the count",
        Duration::from_secs(60),
        || async {
            let n = instances(&p, "shared").await as usize;
            let running: usize = (1..=2)
                .map(|i| {
                    sless_testkit::processes::jailed_programs(p.worker_dir(i).to_str().unwrap())
                        .len()
                })
                .sum();
            (running == n && n == instances(&p, "shared").await as usize).then_some(())
        },
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_new_version_rolls_the_instances_over_without_losing_a_call() {
    let p = Platform::start_with("scale-roll", 1, 1, "roll", FAST, ProxyLimits::default()).await;
    p.deploy_code(
        "rolling",
        json!({"concurrency": 1, "min_instances": 3, "max_instances": 3}),
        &sleeper(0.05, "v1"),
    )
    .await;
    until_instances(&p, "rolling", 3).await;
    let url = format!("{}/fn/{}/rolling", p.client.fn_url, p.client.namespace);
    let running = Load::start(vec![url], 6);
    let tally = running.tally.clone();
    let res = p
        .client
        .upload(
            "rolling",
            crate::zip_files(&[("handler.py", &sleeper(0.05, "v2"))]),
        )
        .await;
    assert_eq!(res.status(), 202);
    eventually("only v2 answering", Duration::from_secs(120), || async {
        let bodies = tally.bodies.lock().unwrap();
        (bodies.len() > 20 && bodies.iter().rev().take(20).all(|b| b == "\"v2\"")).then_some(())
    })
    .await;
    running.stop().await;
    assert_eq!(
        tally.count(200),
        tally.total(),
        "calls lost in the rollover: {:?}",
        tally
            .bodies
            .lock()
            .unwrap()
            .iter()
            .filter(|b| !b.starts_with('"'))
            .collect::<Vec<_>>()
    );
    assert_eq!(instances(&p, "rolling").await, 3);
}
