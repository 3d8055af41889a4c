//! Restarting sless under a steady load of calls fails none of them: the
//! functions' instances stop with the process that ran them, and until
//! they run again each function is at zero, so its calls are held, never
//! sent where nothing listens (docs/reliability.md).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;

use sless_api::proxy::ProxyLimits;
use sless_testkit::eventually;

use crate::fleet::Platform;
use crate::{Client, Proc, zip_files};

const HANDLER: &str = "def handle(event):\n    return {\"ok\": True}\n";

/// What the callers saw.
#[derive(Default)]
pub struct Tally {
    pub answered: AtomicU64,
    /// Connections refused while no process listened (a restart), tried
    /// again as a load balancer does: the request was never sent.
    pub refused: AtomicU64,
    /// GETs whose connection broke before any answer, sent again (a GET
    /// may be: it is idempotent).
    pub broken: AtomicU64,
    /// Calls answered with anything but 200, by status, with a body each.
    pub failed: Mutex<BTreeMap<u16, Vec<String>>>,
    /// The longest a call took, in ms, retries included.
    pub longest_ms: AtomicU64,
}

impl Tally {
    pub fn failures(&self) -> usize {
        self.failed.lock().unwrap().values().map(Vec::len).sum()
    }
}

/// Callers that loop GETs of their URLs until stopped.
pub struct Steady {
    pub tally: Arc<Tally>,
    stop: Arc<AtomicBool>,
    callers: Vec<tokio::task::JoinHandle<()>>,
}

impl Steady {
    /// One caller per list of URLs, each going round its list, `pause`
    /// between two calls.
    pub fn start(lists: Vec<Vec<String>>, pause: Duration) -> Steady {
        let tally = Arc::new(Tally::default());
        let stop = Arc::new(AtomicBool::new(false));
        let callers = lists
            .into_iter()
            .map(|urls| {
                let (tally, stop) = (tally.clone(), stop.clone());
                tokio::spawn(async move {
                    let http = reqwest::Client::builder()
                        .timeout(Duration::from_secs(60))
                        .build()
                        .unwrap();
                    for url in urls.iter().cycle() {
                        if stop.load(Ordering::SeqCst) {
                            return;
                        }
                        call(&http, url, &tally).await;
                        if !pause.is_zero() {
                            tokio::time::sleep(pause).await;
                        }
                    }
                })
            })
            .collect();
        Steady {
            tally,
            stop,
            callers,
        }
    }

    /// Waits until `more` calls were answered from now.
    pub async fn until_answered(&self, more: u64, within: Duration) {
        let target = self.tally.answered.load(Ordering::SeqCst) + more;
        eventually(&format!("{more} more calls answered"), within, || async {
            (self.tally.answered.load(Ordering::SeqCst) >= target).then_some(())
        })
        .await;
    }

    /// Stops the callers once their calls are answered.
    pub async fn stop(self) -> Arc<Tally> {
        self.stop.store(true, Ordering::SeqCst);
        for c in self.callers {
            c.await.unwrap();
        }
        self.tally
    }
}

/// One call, tried again while its request could not be sent (nothing
/// listened) or its connection broke before an answer, for up to a minute.
async fn call(http: &reqwest::Client, url: &str, tally: &Tally) {
    let started = Instant::now();
    loop {
        match http.get(url).send().await {
            Ok(res) => {
                let status = res.status().as_u16();
                let body = res.text().await.unwrap_or_default();
                if status == 200 {
                    tally.answered.fetch_add(1, Ordering::SeqCst);
                } else {
                    let mut failed = tally.failed.lock().unwrap();
                    failed.entry(status).or_default().push(body);
                }
                break;
            }
            Err(e) if started.elapsed() < Duration::from_secs(60) && !e.is_timeout() => {
                let counter = if e.is_connect() {
                    &tally.refused
                } else {
                    &tally.broken
                };
                counter.fetch_add(1, Ordering::SeqCst);
                // Nothing listens yet: a load balancer's pause.
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            Err(e) => {
                let mut failed = tally.failed.lock().unwrap();
                failed.entry(0).or_default().push(e.to_string());
                break;
            }
        }
    }
    let ms = started.elapsed().as_millis() as u64;
    tally.longest_ms.fetch_max(ms, Ordering::SeqCst);
}

/// Two ports free now, for an instance that keeps its addresses across
/// restarts.
fn free_ports() -> (u16, u16) {
    let a = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let b = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    (
        a.local_addr().unwrap().port(),
        b.local_addr().unwrap().port(),
    )
}

/// `sless dev` on `dir`, at fixed addresses, once it wrote `dev.json`.
async fn dev_at(dir: &Path, api: SocketAddr, functions: SocketAddr, log: &str) -> (Proc, Client) {
    let (api, functions) = (api.to_string(), functions.to_string());
    let listen = ["--listen", &api, "--fn-listen", &functions];
    crate::dev::start_dev_listening(dir, log, &listen, &[]).await
}

/// Creates and deploys `names`, each with `spec` besides.
pub async fn deploy_all(c: &Client, names: &[String], spec: serde_json::Value) {
    for name in names {
        let mut body =
            json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle"});
        body.as_object_mut()
            .unwrap()
            .extend(spec.as_object().unwrap().clone());
        assert_eq!(c.create(body).await.status(), 201);
        let res = c.upload(name, zip_files(&[("handler.py", HANDLER)])).await;
        assert_eq!(res.status(), 202);
    }
    for name in names {
        c.wait_ready(name, Duration::from_secs(180)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sless_dev_restarted_five_times_under_load_fails_no_call() {
    let dir = sless_testkit::scratch_dir("restart-dev").join("data");
    let (api_port, fn_port) = free_ports();
    let api: SocketAddr = ([127, 0, 0, 1], api_port).into();
    let functions: SocketAddr = ([127, 0, 0, 1], fn_port).into();
    let (mut proc, c) = dev_at(&dir, api, functions, "log0").await;

    // Twenty functions: ten called all the time, ten now and then, which
    // an idle window of a second scales to zero between calls.
    let warm: Vec<String> = (0..10).map(|i| format!("warm{i}")).collect();
    let cold: Vec<String> = (0..10).map(|i| format!("cold{i}")).collect();
    deploy_all(&c, &warm, json!({})).await;
    deploy_all(&c, &cold, json!({"scale_to_zero_after_sec": 1})).await;
    let url = |name: &String| format!("{}/fn/{}/{name}", c.fn_url, c.namespace);
    let mut lists: Vec<Vec<String>> = (0..4)
        .map(|i| warm.iter().skip(i).step_by(4).map(url).collect())
        .collect();
    lists.push(cold.iter().map(url).collect());
    let load = Steady::start(lists, Duration::ZERO);
    load.until_answered(50, Duration::from_secs(60)).await;

    for restart in 1..=5 {
        proc.signal(libc::SIGTERM);
        let status = proc.wait_exit(Duration::from_secs(60)).await;
        assert!(status.success(), "sless dev exited with {status}");
        (proc, _) = dev_at(&dir, api, functions, &format!("log{restart}")).await;
        // Calls flow again, to every function.
        load.until_answered(60, Duration::from_secs(90)).await;
    }
    let tally = load.stop().await;
    let answered = tally.answered.load(Ordering::SeqCst);
    println!(
        "5 restarts: {answered} calls answered, {} failed, {} connections refused while nothing listened and {} broken before an answer (tried again), longest call {} ms",
        tally.failures(),
        tally.refused.load(Ordering::SeqCst),
        tally.broken.load(Ordering::SeqCst),
        tally.longest_ms.load(Ordering::SeqCst),
    );
    assert_eq!(
        tally.failures(),
        0,
        "calls failed across restarts: {:?}",
        tally.failed.lock().unwrap()
    );
    // The log says why each function was at zero for a moment.
    let (status, events) = {
        let res = c
            .http
            .get(c.v1("/events?type=FunctionScaledToZero&limit=200"))
            .bearer_auth(&c.token)
            .send()
            .await
            .unwrap();
        (res.status(), res.json::<serde_json::Value>().await.unwrap())
    };
    assert_eq!(status, 200, "{events}");
    let lost = events["items"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|e| {
            e["data"]["reason"]
                .as_str()
                .is_some_and(|r| r.contains("and its instances with it"))
        })
        .count();
    assert!(
        lost >= 10,
        "instances lost with sless, in the log: {events}"
    );
    proc.signal(libc::SIGTERM);
    proc.wait_exit(Duration::from_secs(60)).await;
}

/// The worker the read model places most functions on (1 for `w1`), and
/// how many.
async fn busiest(p: &Platform) -> (usize, i64) {
    let (node, n): (String, i64) = sqlx::query_as(
        "select deployed_node, count(*) from functions where deployed_node is not null
         group by 1 order by 2 desc, 1 limit 1",
    )
    .fetch_one(&p.db.pool)
    .await
    .unwrap();
    (node.trim_start_matches('w').parse().unwrap(), n)
}

/// Events whose reason says `says`.
async fn lost_because(p: &Platform, says: &str) -> i64 {
    sqlx::query_scalar(
        "select count(*) from events where type = 'FunctionScaledToZero'
         and data->>'reason' like '%' || $1 || '%'",
    )
    .bind(says)
    .fetch_one(&p.db.pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn workers_stopped_killed_and_started_again_under_load() {
    // A lease long enough for a worker killed and started again at once
    // to be back before the other one takes it for gone.
    let env = [("SLESS_LEASE_SECS", "5"), ("SLESS_SWEEP_SECS", "0.5")];
    let mut p = Platform::start_with(
        "restart-workers",
        1,
        2,
        "restarter",
        &env,
        ProxyLimits::default(),
    )
    .await;
    let names: Vec<String> = (0..6).map(|i| format!("f{i}")).collect();
    for name in &names {
        p.deploy(name, json!({})).await;
    }
    let url = |name: &String| format!("{}/fn/{}/{name}", p.fn_urls[0], p.client.namespace);
    let callers = 3;
    let lists = (0..callers)
        .map(|i| names.iter().skip(i).step_by(callers).map(url).collect())
        .collect();
    let load = Steady::start(lists, Duration::ZERO);
    load.until_answered(30, Duration::from_secs(60)).await;

    // A worker stopped (SIGTERM) hands its functions over at once (a
    // reconcile each); calls to its stopped instances are held: none fails.
    let (stopped, _) = busiest(&p).await;
    p.workers[stopped - 1].signal(libc::SIGTERM);
    let status = p.workers[stopped - 1]
        .wait_exit(Duration::from_secs(60))
        .await;
    assert!(status.success(), "the worker exited with {status}");
    load.until_answered(60, Duration::from_secs(90)).await;
    assert_eq!(load.tally.failures(), 0, "{:?}", load.tally.failed);
    p.workers[stopped - 1] = p.start_worker(stopped, "log2");

    // Killed and started again at once under its id: what the log placed
    // on it is started again, and calls meanwhile are held. Only a call
    // in flight on its instances may fail, with a clear 502.
    let (killed, n) = busiest(&p).await;
    p.workers[killed - 1].signal(libc::SIGKILL);
    p.workers[killed - 1]
        .wait_exit(Duration::from_secs(10))
        .await;
    p.workers[killed - 1] = p.start_worker(killed, "log3");
    let (again, gone) = (
        format!("worker w{killed} started again"),
        format!("worker w{killed} is gone"),
    );
    let started_again = eventually(
        "the killed worker's functions to be started again",
        Duration::from_secs(60),
        || async {
            let (a, g) = (
                lost_because(&p, &again).await,
                lost_because(&p, &gone).await,
            );
            (a + g == n).then_some(a)
        },
    )
    .await;
    // Back within its lease, the worker itself found them lost (only a
    // start slower than the rest of its lease leaves that to the other).
    assert!(
        started_again > 0,
        "none found lost by the worker that started again"
    );
    load.until_answered(60, Duration::from_secs(90)).await;
    // A call in flight on a killed worker's instance may fail, with a 502.
    // One held past the activation timeout (30 s) while the instances start
    // elsewhere gets 503 `function-activating`: only a machine too busy to
    // start them in time (seen with other tests beside it) does that.
    let at_most_in_flight = |tally: &Tally| {
        let failed = tally.failed.lock().unwrap();
        let in_flight = failed.get(&502).map_or(0, Vec::len);
        let held_too_long = failed.get(&503).map_or(&[][..], Vec::as_slice);
        assert!(
            in_flight <= callers
                && failed.keys().all(|s| *s == 502 || *s == 503)
                && held_too_long
                    .iter()
                    .all(|b| b.contains("function-activating")),
            "only the calls in flight may fail, with a 502: {failed:?}"
        );
        if !held_too_long.is_empty() {
            println!("held past the activation timeout: {held_too_long:?}");
        }
        in_flight
    };
    let after_restart = at_most_in_flight(&load.tally);

    // Killed for good: once its lease has passed, its functions run on the
    // other worker, and calls meanwhile are held.
    let (killed, n) = busiest(&p).await;
    let gone = format!("worker w{killed} is gone");
    let before = lost_because(&p, &gone).await;
    p.workers[killed - 1].signal(libc::SIGKILL);
    p.workers[killed - 1]
        .wait_exit(Duration::from_secs(10))
        .await;
    eventually(
        "the other worker to find the killed one gone",
        Duration::from_secs(60),
        || async { (lost_because(&p, &gone).await - before == n).then_some(()) },
    )
    .await;
    load.until_answered(60, Duration::from_secs(90)).await;
    let tally = load.stop().await;
    let failed = at_most_in_flight(&tally) - after_restart;
    assert!(failed <= callers, "{:?}", tally.failed);
    println!(
        "workers stopped, killed and started again: {} calls answered, {} failed (in flight on a killed worker), longest call {} ms",
        tally.answered.load(Ordering::SeqCst),
        tally.failures(),
        tally.longest_ms.load(Ordering::SeqCst)
    );
}

/// `sless api` on the platform's database, at fixed addresses.
fn api_process(p: &Platform, api: SocketAddr, functions: SocketAddr, log: &Path) -> Proc {
    let mut cmd = crate::sless_on(&p.db.url, p.s3());
    cmd.env(
        "SLESS_JWT_SECRET",
        "restart-test-secret-of-32-bytes-or-more",
    )
    .args(["api", "--listen", &api.to_string()])
    .args(["--fn-listen", &functions.to_string()]);
    Proc::spawn(cmd, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn sless_api_restarted_while_the_worker_runs_fails_no_call() {
    let p = Platform::start("restart-api", 1, 1, "api-restarter").await;
    let names: Vec<String> = (0..4).map(|i| format!("a{i}")).collect();
    for name in &names {
        p.deploy(name, json!({})).await;
    }
    let (api_port, fn_port) = free_ports();
    let api: SocketAddr = ([127, 0, 0, 1], api_port).into();
    let functions: SocketAddr = ([127, 0, 0, 1], fn_port).into();
    let logs = sless_testkit::scratch_dir("restart-api-logs");
    let mut proc = api_process(&p, api, functions, &logs.join("api0.log"));
    let url = |name: &String| format!("http://{functions}/fn/{}/{name}", p.client.namespace);
    let load = Steady::start(
        (0..2)
            .map(|i| names.iter().skip(i).step_by(2).map(url).collect())
            .collect(),
        Duration::ZERO,
    );
    load.until_answered(30, Duration::from_secs(60)).await;
    for restart in 1..=3 {
        proc.signal(libc::SIGTERM);
        let status = proc.wait_exit(Duration::from_secs(60)).await;
        assert!(status.success(), "sless api exited with {status}");
        proc = api_process(&p, api, functions, &logs.join(format!("api{restart}.log")));
        load.until_answered(30, Duration::from_secs(60)).await;
    }
    let tally = load.stop().await;
    println!(
        "sless api restarted 3 times: {} calls answered, {} failed, {} connections refused while nothing listened and {} broken before an answer (sent again), longest call {} ms",
        tally.answered.load(Ordering::SeqCst),
        tally.failures(),
        tally.refused.load(Ordering::SeqCst),
        tally.broken.load(Ordering::SeqCst),
        tally.longest_ms.load(Ordering::SeqCst)
    );
    assert_eq!(tally.failures(), 0, "{:?}", tally.failed);
    proc.signal(libc::SIGTERM);
    proc.wait_exit(Duration::from_secs(60)).await;
}
