//! Stopping the API without failing a call: on SIGTERM `/readyz` answers
//! 503 at once, both origins serve on for `SLESS_SHUTDOWN_DELAY_SECS`,
//! then refuse new connections while the calls in flight finish, up to
//! `SLESS_DRAIN_SECS`; past it they are cut and the process exits anyway.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use sless_testkit::{eventually, scratch_dir};
use sless_workers::WorkerConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::dev::start_dev_configured;
use crate::platform::Platform;
use crate::support::Beacon;
use crate::{Client, Proc, processes_mentioning, zip_files};

/// A function that tells the beacon its call (`?id=`) has arrived, then
/// takes `secs` to answer.
fn slow_handler(beacon: &str, secs: u32) -> String {
    format!(
        "import time, urllib.request\n\
         def handle(event):\n    \
             call = event['query'].get('id', '')\n    \
             urllib.request.urlopen('{beacon}/hit/' + call).read()\n    \
             time.sleep({secs})\n    \
             return {{'id': call}}\n"
    )
}

/// `host:port` of an origin's URL.
fn addr(url: &str) -> String {
    url.trim_start_matches("http://").to_owned()
}

/// The answer to a GET of `path` on a connection of its own.
async fn fresh_get(url: &str, path: &str) -> (u16, Value) {
    let http = reqwest::Client::builder()
        .pool_max_idle_per_host(0)
        .build()
        .unwrap();
    let res = http.get(format!("{url}{path}")).send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Waits until `addr` refuses new connections.
async fn until_refused(addr: &str, deadline: Duration) {
    eventually(
        &format!("{addr} to refuse new connections"),
        deadline,
        || async {
            match TcpStream::connect(addr).await {
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionRefused => Some(()),
                _ => None,
            }
        },
    )
    .await
}

/// Sends `GET /healthz` on `conn`, keeping it open, and reads the answer's
/// head (in lower case) and body.
async fn healthz_on(conn: &mut TcpStream, host: &str) -> String {
    let head = format!("GET /healthz HTTP/1.1\r\nHost: {host}\r\n\r\n");
    conn.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    // `/healthz` answers `{"status":"ok"}` with its length.
    while !answer.ends_with(b"\"ok\"}") {
        let n = tokio::time::timeout(Duration::from_secs(10), conn.read(&mut buf))
            .await
            .expect("an answer to /healthz")
            .unwrap();
        assert!(n > 0, "the connection closed before its answer");
        answer.extend_from_slice(&buf[..n]);
    }
    String::from_utf8_lossy(&answer).to_ascii_lowercase()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sless_dev_on_sigterm_fails_readiness_serves_on_for_the_delay_and_finishes_every_call() {
    const DELAY: Duration = Duration::from_secs(2);
    const DRAIN: Duration = Duration::from_secs(20);
    let beacon = Beacon::start().await;
    let dir = scratch_dir("drain-dev").join("data");
    let (mut proc, c) = start_dev_configured(
        &dir,
        "log",
        &[],
        &[
            ("SLESS_SHUTDOWN_DELAY_SECS", "2"),
            ("SLESS_DRAIN_SECS", "20"),
            // Its function calls the test's beacon on loopback.
            ("SLESS_SANDBOX_NETWORK", "host"),
        ],
    )
    .await;
    let res = c
        .create(json!({"name": "slow", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201);
    // Each call answers 5 s after it arrived: after the delay has passed.
    let handler = slow_handler(&beacon.url, 5);
    let res = c
        .upload("slow", zip_files(&[("handler.py", &handler)]))
        .await;
    assert_eq!(res.status(), 202);
    c.wait_ready("slow", Duration::from_secs(120)).await;
    let (api, functions) = (addr(&c.url), addr(&c.fn_url));

    // A kept-alive connection that is idle when the drain starts.
    let mut idle = TcpStream::connect(&api).await.unwrap();
    assert!(
        healthz_on(&mut idle, &api)
            .await
            .starts_with("http/1.1 200")
    );

    let calls: Vec<_> = (0..4)
        .map(|i| {
            let url = format!("{}/fn/{}/slow?id=c{i}", c.fn_url, c.namespace);
            tokio::spawn(async move {
                let res = reqwest::get(url).await.unwrap();
                let close = res.headers().get("connection").cloned();
                (res.status().as_u16(), close, res.text().await.unwrap())
            })
        })
        .collect();
    eventually(
        "every call in the function",
        Duration::from_secs(30),
        || async { (beacon.hits().len() == 4).then_some(()) },
    )
    .await;

    proc.signal(libc::SIGTERM);
    let signalled = Instant::now();
    let (status, ready) = fresh_get(&c.url, "/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["status"], "stopping", "{ready}");
    // Everything else is served as before meanwhile, on a new connection
    // and on one kept alive, on both origins.
    assert_eq!(fresh_get(&c.url, "/healthz").await.0, 200);
    assert_eq!(fresh_get(&c.fn_url, "/healthz").await.0, 200);
    // Its answer tells the client to open a new connection for the next
    // request, which a load balancer sends elsewhere.
    let again = healthz_on(&mut idle, &api).await;
    assert!(again.starts_with("http/1.1 200"), "{again}");
    assert!(again.contains("connection: close"), "{again}");
    assert!(
        signalled.elapsed() < DELAY,
        "the checks of the delay took {:?}",
        signalled.elapsed()
    );

    until_refused(&api, Duration::from_secs(10)).await;
    let refused = signalled.elapsed();
    assert!(
        refused >= DELAY,
        "new connections refused {refused:?} after SIGTERM"
    );
    until_refused(&functions, Duration::from_secs(1)).await;
    // The kept-alive connection is closed (after that answer).
    let n = tokio::time::timeout(Duration::from_secs(1), idle.read(&mut [0u8; 64]))
        .await
        .expect("the idle connection closed when the drain started")
        .unwrap();
    assert_eq!(n, 0, "the idle connection got no more than its close");

    for (i, call) in calls.into_iter().enumerate() {
        let (status, close, body) = call.await.unwrap();
        assert_eq!(status, 200, "call {i}: {body}");
        let answer: Value = serde_json::from_str(&body).unwrap();
        assert_eq!(answer["id"], format!("c{i}"), "{body}");
        assert_eq!(
            close.as_ref().and_then(|v| v.to_str().ok()),
            Some("close"),
            "call {i}: its connection closes after its answer"
        );
    }
    let status = proc.wait_exit(DRAIN).await;
    assert!(status.success(), "sless dev exited with {status}");
    let left = processes_mentioning(dir.to_str().unwrap());
    assert!(left.is_empty(), "processes left running: {left:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sless_api_cuts_a_call_longer_than_the_drain_time_and_exits_in_time() {
    const DELAY: Duration = Duration::from_secs(1);
    const DRAIN: Duration = Duration::from_secs(1);
    // The function runs beside this test; `sless api` is the process stopped.
    let p = Platform::start_sharing_loopback(10, WorkerConfig::default()).await;
    let beacon = Beacon::start().await;
    let (code, body) = p
        .call(
            reqwest::Method::POST,
            "/functions",
            Some(json!({"name": "long", "runtime": "python3.11", "entrypoint": "handler.handle"})),
        )
        .await;
    assert_eq!(code, 201, "{body}");
    let handler = slow_handler(&beacon.url, 60);
    let (code, body) = p
        .upload("long", zip_files(&[("handler.py", &handler)]))
        .await;
    assert_eq!(code, 202, "{body}");
    p.client.wait_ready("long", Duration::from_secs(60)).await;

    let log = scratch_dir("drain-api").join("api.log");
    let mut cmd = crate::sless_on(&p.db.url, &p.s3);
    cmd.env("SLESS_JWT_SECRET", "drain-test-secret-of-32-bytes-or-more")
        .env("SLESS_SHUTDOWN_DELAY_SECS", "1")
        .env("SLESS_DRAIN_SECS", "1")
        .args(["api", "--listen", "127.0.0.1:0"]);
    let mut api = Proc::spawn(cmd, &log);
    let url = eventually("sless api to listen", Duration::from_secs(30), || async {
        sless_testkit::after_on_whole_line(&log, "sless api listening on ")
    })
    .await;
    let fn_url = eventually("its functions' origin", Duration::from_secs(5), || async {
        let line = sless_testkit::after_on_whole_line(&log, "functions served on ")?;
        Some(line.split_whitespace().next()?.to_owned())
    })
    .await;
    let through_api = Client {
        url: url.clone(),
        fn_url,
        ..p.client.clone()
    };

    let call_url = format!(
        "{}/fn/{}/long?id=long",
        through_api.fn_url, through_api.namespace
    );
    let call = tokio::spawn(async move {
        let outcome = match reqwest::get(call_url).await {
            Ok(res) => res.text().await.map(|_| ()),
            Err(e) => Err(e),
        };
        (outcome, Instant::now())
    });
    eventually(
        "the call in the function",
        Duration::from_secs(30),
        || async { (beacon.hits() == ["long"]).then_some(()) },
    )
    .await;

    api.signal(libc::SIGTERM);
    let signalled = Instant::now();
    let (status, ready) = fresh_get(&url, "/readyz").await;
    assert_eq!(status, 503, "{ready}");
    assert_eq!(ready["status"], "stopping", "{ready}");

    let exit = api.wait_exit(DELAY + DRAIN + Duration::from_secs(4)).await;
    assert!(exit.success(), "sless api exited with {exit}");
    let (outcome, ended) = call.await.unwrap();
    assert!(outcome.is_err(), "the call was cut, not answered");
    let cut_after = ended - signalled;
    assert!(
        cut_after >= DELAY + DRAIN,
        "the call was cut {cut_after:?} after SIGTERM, before the delay and the drain time"
    );
    let line =
        sless_testkit::whole_line_with(&log, "the drain time ran out").expect("the cut is logged");
    assert!(line.contains("cut=1"), "{line}");
    assert!(line.contains("functions' origin"), "{line}");
}

/// The types of the events of `name`.
async fn event_types(c: &Client, name: &str) -> Vec<String> {
    let page: Value = c
        .http
        .get(c.v1(&format!("/events?function={name}&limit=100")))
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
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sless_dev_answers_a_call_held_for_a_start_from_zero_when_the_stop_comes_meanwhile() {
    let dir = scratch_dir("drain-held").join("data");
    let (mut proc, c) = start_dev_configured(&dir, "log", &[], &[("SLESS_DRAIN_SECS", "20")]).await;
    let res = c
        .create(
            json!({"name": "sleepy", "runtime": "python3.11", "entrypoint": "handler.handle",
                       "scale_to_zero_after_sec": 1}),
        )
        .await;
    assert_eq!(res.status(), 201);
    // An instance takes 3 s to start: the stop comes while it does.
    let handler = "import time\ntime.sleep(3)\n\ndef handle(event):\n    return 'awake'\n";
    let res = c
        .upload("sleepy", zip_files(&[("handler.py", handler)]))
        .await;
    assert_eq!(res.status(), 202);
    c.wait_ready("sleepy", Duration::from_secs(120)).await;
    eventually(
        "sleepy to be scaled to zero",
        Duration::from_secs(60),
        || async { (c.function("sleepy").await["instances"] == 0).then_some(()) },
    )
    .await;

    let url = format!("{}/fn/{}/sleepy", c.fn_url, c.namespace);
    let call = tokio::spawn(async move {
        let res = reqwest::get(url).await.unwrap();
        (res.status().as_u16(), res.text().await.unwrap())
    });
    eventually(
        "the call to start an instance",
        Duration::from_secs(10),
        || async {
            let types = event_types(&c, "sleepy").await;
            types.iter().any(|t| t == "FunctionScaledUp").then_some(())
        },
    )
    .await;

    // No delay: the listeners close at once, while the call is held.
    proc.signal(libc::SIGTERM);
    let (status, body) = call.await.unwrap();
    assert_eq!((status, body.as_str()), (200, "awake"));
    let exit = proc.wait_exit(Duration::from_secs(20)).await;
    assert!(exit.success(), "sless dev exited with {exit}");
}
