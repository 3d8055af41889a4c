//! `/metrics` on `sless dev`: for admin tokens only on the API's origin,
//! on a listener of its own with `SLESS_METRICS_LISTEN`; what Prometheus's
//! own `promtool check metrics` accepts; and after a known sequence of
//! commands and calls, counters that hold exactly those numbers.

use std::path::Path;
use std::time::Duration;

use serde_json::json;

use crate::dev::{json_log_line, start_dev_configured, stop_dev};
use crate::support::sless;
use crate::{Client, zip_files};

const HANDLER: &str = "def handle(event):\n    if event['path'] == '/boom':\n        return {'statusCode': 500, 'body': 'boom'}\n    return {'ok': True}\n";

/// `promtool`, installed when missing (`scripts/ensure-promtool`).
fn promtool() -> &'static str {
    let ensure = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ensure-promtool");
    let installed = std::process::Command::new(ensure).status().unwrap();
    assert!(installed.success(), "installing promtool");
    "promtool"
}

/// What `promtool check metrics` says of `text`: its exit status and output.
fn check(text: &str) -> (bool, String) {
    use std::io::Write;
    let mut child = std::process::Command::new(promtool())
        .args(["check", "metrics"])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    child
        .stdin
        .take()
        .unwrap()
        .write_all(text.as_bytes())
        .unwrap();
    let out = child.wait_with_output().unwrap();
    let said = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    (out.status.success(), said)
}

/// The value of the series `series` (name and labels, as written) in `text`.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.parse().ok())
}

fn admin_token(dir: &Path) -> String {
    let out = sless()
        .args([
            "token",
            "--data-dir",
            dir.to_str().unwrap(),
            "--sub",
            "ops",
            "--admin",
        ])
        .output()
        .unwrap();
    assert!(out.status.success());
    String::from_utf8(out.stdout).unwrap().trim().to_owned()
}

/// Every metric family `text` has is listed in docs/observability.md, and
/// so is every metric the Grafana dashboard (deploy/observability/) charts.
fn documented_and_charted(text: &str) {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let families: Vec<&str> = text
        .lines()
        .filter_map(|l| l.strip_prefix("# TYPE ")?.split(' ').next())
        .collect();
    // A family with no series yet is not written.
    assert!(families.len() >= 12, "{families:?}");
    let docs = std::fs::read_to_string(root.join("docs/observability.md")).unwrap();
    let listed = |family: &str| docs.contains(&format!("| `{family}` |"));
    for family in &families {
        assert!(listed(family), "{family} is not in docs/observability.md");
    }
    let dashboard =
        std::fs::read_to_string(root.join("deploy/observability/sless-dashboard.json")).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&dashboard).unwrap();
    let mut charted = 0;
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if !word.starts_with("sless_") {
                    continue;
                }
                let family = ["_bucket", "_sum", "_count"]
                    .iter()
                    .find_map(|s| word.strip_suffix(s))
                    .unwrap_or(word);
                assert!(
                    listed(family),
                    "the dashboard charts {word}, which docs/observability.md does not list"
                );
                charted += 1;
            }
        }
    }
    assert!(charted >= 10, "{charted}");
}

async fn scrape(c: &Client, url: &str, token: Option<&str>) -> (u16, String, String) {
    let mut req = c.http.get(url);
    if let Some(token) = token {
        req = req.bearer_auth(token);
    }
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    let kind = res
        .headers()
        .get("content-type")
        .map(|v| v.to_str().unwrap().to_owned())
        .unwrap_or_default();
    (status, kind, res.text().await.unwrap())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_count_a_known_sequence_and_pass_promtool() {
    let dir = sless_testkit::scratch_dir("metrics").join("data");
    let listen = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap()
    };
    let listen = listen.to_string();
    let (proc, c) =
        start_dev_configured(&dir, "log", &[], &[("SLESS_METRICS_LISTEN", &listen)]).await;

    let res = c
        .create(json!({"name": "counted", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201);
    let res = c
        .upload("counted", zip_files(&[("handler.py", HANDLER)]))
        .await;
    assert_eq!(res.status(), 202);
    c.wait_ready("counted", Duration::from_secs(120)).await;
    let url = format!("{}/fn/{}/counted", c.fn_url, c.namespace);
    for i in 0..10 {
        let path = if i % 5 == 4 { "/boom" } else { "/fine" };
        let res = c.http.get(format!("{url}{path}")).send().await.unwrap();
        let expected = if path == "/boom" { 500 } else { 200 };
        assert_eq!(res.status().as_u16(), expected);
    }

    // One job of it.
    let res = c
        .http
        .post(c.v1("/jobs"))
        .bearer_auth(&c.token)
        .json(&json!({"name": "once", "function": "counted", "input": {"n": 1}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    sless_testkit::eventually("the job to succeed", Duration::from_secs(60), || async {
        let job: serde_json::Value = c
            .http
            .get(c.v1("/jobs/once"))
            .bearer_auth(&c.token)
            .send()
            .await
            .ok()?
            .json()
            .await
            .ok()?;
        (job["status"] == "Succeeded").then_some(())
    })
    .await;

    // The API's origin: admin tokens only.
    let on_api = format!("{}/metrics", c.url);
    let (status, _, _) = scrape(&c, &on_api, None).await;
    assert_eq!(status, 401, "no token");
    let (status, _, _) = scrape(&c, &on_api, Some(&c.token)).await;
    assert_eq!(status, 403, "a tenant's token");
    let admin = admin_token(&dir);
    let (status, kind, text) = scrape(&c, &on_api, Some(&admin)).await;
    assert_eq!(status, 200, "{text}");
    assert!(kind.starts_with("text/plain; version=0.0.4"), "{kind}");
    let (ok, said) = check(&text);
    assert!(ok, "promtool check metrics: {said}\n{text}");

    let ns = &c.namespace;
    let invocations = |class: &str| {
        format!(
            "sless_function_invocations_total{{namespace=\"{ns}\",function=\"counted\",code_class=\"{class}\",origin=\"http\"}}"
        )
    };
    let job = format!(
        "sless_function_invocations_total{{namespace=\"{ns}\",function=\"counted\",code_class=\"2xx\",origin=\"job\"}}"
    );
    assert_eq!(value(&text, &job), Some(1.0), "{text}");
    // The log, the blob store and the database pool.
    let appended = value(&text, "sless_event_appends_total{outcome=\"appended\"}");
    assert!(appended.is_some_and(|n| n >= 5.0), "{text}");
    let put = value(
        &text,
        "sless_s3_operations_total{operation=\"put\",outcome=\"ok\"}",
    );
    assert!(put.is_some_and(|n| n >= 1.0), "{text}");
    assert!(
        value(&text, "sless_db_pool_connections{state=\"idle\"}").is_some(),
        "{text}"
    );
    assert_eq!(value(&text, &invocations("2xx")), Some(8.0), "{text}");
    assert_eq!(value(&text, &invocations("5xx")), Some(2.0), "{text}");
    assert_eq!(
        value(
            &text,
            &format!(
                "sless_function_duration_seconds_count{{namespace=\"{ns}\",function=\"counted\"}}"
            )
        ),
        Some(11.0),
        "ten calls and one job"
    );
    assert_eq!(
        value(
            &text,
            "sless_http_requests_total{route=\"/v1/namespaces/{ns}/functions\",method=\"POST\",status=\"201\"}"
        ),
        Some(1.0),
        "{text}"
    );
    assert_eq!(
        value(
            &text,
            "sless_http_requests_total{route=\"/fn/{ns}/{name}/{*rest}\",method=\"GET\",status=\"500\"}"
        ),
        Some(2.0),
        "{text}"
    );
    assert!(!text.contains("/fine"), "routes are templates, never paths");
    // One build and one deploy, by the local driver; one process runs.
    for step in ["builds", "deploys"] {
        assert_eq!(
            value(
                &text,
                &format!(
                    "sless_{step}_total{{runtime=\"python3.11\",driver=\"local\",outcome=\"succeeded\"}}"
                )
            ),
            Some(1.0),
            "{step}: {text}"
        );
    }
    assert_eq!(value(&text, "sless_function_processes_running"), Some(1.0));
    // The worker's reconciles of it: done, none retried or dead.
    let done = value(
        &text,
        "sless_queue_work_total{kind=\"ReconcileFunction\",outcome=\"done\"}",
    );
    assert!(done.is_some_and(|n| n >= 1.0), "{text}");
    assert!(!text.contains("outcome=\"dead\""), "{text}");
    // Every item it started was counted with its wait since the claim, and
    // the job's run too; none was started again.
    for kind in ["ReconcileFunction", "RunJob"] {
        let started = value(
            &text,
            &format!("sless_work_attempts_count{{kind=\"{kind}\"}}"),
        );
        assert!(started.is_some_and(|n| n >= 1.0), "{kind}: {text}");
        let first = value(
            &text,
            &format!("sless_work_attempts_bucket{{kind=\"{kind}\",le=\"1\"}}"),
        );
        assert_eq!(first, started, "{kind}: {text}");
        let waited = value(
            &text,
            &format!("sless_work_start_delay_seconds_count{{kind=\"{kind}\"}}"),
        );
        assert_eq!(waited, started, "{kind}: {text}");
    }
    documented_and_charted(&text);

    // The projector catches up: its lag reads 0.
    let (_, _, text) = sless_testkit::eventually(
        "the projector's lag to be 0",
        Duration::from_secs(30),
        || {
            let (c, on_api, admin) = (c.clone(), on_api.clone(), admin.clone());
            async move {
                let scraped = scrape(&c, &on_api, Some(&admin)).await;
                (value(
                    &scraped.2,
                    "sless_projector_lag_events{projection=\"read_models\"}",
                ) == Some(0.0))
                .then_some(scraped)
            }
        },
    )
    .await;
    // It applied the sequence's events in batches, each one counted.
    let batches = value(
        &text,
        "sless_projector_batch_events_count{projection=\"read_models\"}",
    );
    assert!(batches.is_some_and(|n| n >= 1.0), "{text}");
    let applied = value(
        &text,
        "sless_projector_apply_duration_seconds_count{projection=\"read_models\"}",
    );
    assert_eq!(applied, batches, "{text}");
    let events = value(
        &text,
        "sless_projector_batch_events_sum{projection=\"read_models\"}",
    );
    assert!(
        events.is_some_and(|n| n >= 8.0),
        "create, upload, build, deploy, job: {text}"
    );
    assert!(
        value(
            &text,
            "sless_projector_checkpoint_position{projection=\"read_models\"}"
        )
        .unwrap()
            > 0.0,
        "{text}"
    );

    // A client following the audit log is counted while it does.
    let follower = c
        .http
        .get(c.v1("/events/stream"))
        .bearer_auth(&c.token)
        .header("accept", "text/event-stream")
        .send()
        .await
        .unwrap();
    assert_eq!(follower.status(), 200);
    let followers = |text: &str| value(text, "sless_audit_followers");
    let (c2, on_api2, admin2) = (c.clone(), on_api.clone(), admin.clone());
    sless_testkit::eventually("one follower counted", Duration::from_secs(30), || {
        let (c, on_api, admin) = (c2.clone(), on_api2.clone(), admin2.clone());
        async move {
            let (_, _, text) = scrape(&c, &on_api, Some(&admin)).await;
            (followers(&text) == Some(1.0)).then_some(())
        }
    })
    .await;
    drop(follower);
    sless_testkit::eventually("the follower gone", Duration::from_secs(30), || {
        let (c, on_api, admin) = (c.clone(), on_api.clone(), admin.clone());
        async move {
            let (_, _, text) = scrape(&c, &on_api, Some(&admin)).await;
            (followers(&text) == Some(0.0)).then_some(())
        }
    })
    .await;

    // Its own listener: no token, and OpenMetrics when asked.
    let own = format!("http://{listen}/metrics");
    let res = c
        .http
        .get(&own)
        .header("accept", "application/openmetrics-text; version=1.0.0")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    assert!(
        res.headers()["content-type"]
            .to_str()
            .unwrap()
            .starts_with("application/openmetrics-text"),
    );
    let open = res.text().await.unwrap();
    assert!(open.ends_with("# EOF\n"), "{open}");
    assert_eq!(value(&open, &invocations("2xx")), Some(8.0), "{open}");
    stop_dev(proc, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn json_logs_are_one_object_a_line_with_the_request_id_and_namespace() {
    let dir = sless_testkit::scratch_dir("json-logs").join("data");
    let (proc, c) = start_dev_configured(&dir, "log", &[], &[("SLESS_LOG_FORMAT", "json")]).await;
    // A function that dies on each call: the failed call is logged.
    let res = c
        .create(json!({"name": "dies", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201);
    let code = "import os\n\ndef handle(event):\n    os._exit(3)\n";
    let res = c.upload("dies", zip_files(&[("handler.py", code)])).await;
    assert_eq!(res.status(), 202);
    c.wait_ready("dies", Duration::from_secs(120)).await;
    let res = c
        .http
        .get(format!("{}/fn/{}/dies", c.fn_url, c.namespace))
        .header("x-request-id", "json-logs-test-1")
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    let log = dir.with_extension("log");
    let entry = json_log_line(&log, "json-logs-test-1").await;
    assert_eq!(entry["span"]["request_id"], "json-logs-test-1", "{entry}");
    assert_eq!(entry["span"]["namespace"], c.namespace.as_str(), "{entry}");
    assert_eq!(entry["fields"]["message"], "request failed", "{entry}");
    assert!(
        entry["fields"]["detail"]
            .as_str()
            .unwrap()
            .contains("\"dies\""),
        "{entry}"
    );
    stop_dev(proc, &dir).await;
    // Every log line is an object (what sless dev prints for people is not
    // a log line: it does not start with `{`).
    let text = std::fs::read_to_string(&log).unwrap();
    let objects = text.lines().filter(|l| l.starts_with('{')).count();
    assert!(objects > 5, "{text}");
    for l in text.lines().filter(|l| l.starts_with('{')) {
        let v: serde_json::Value = serde_json::from_str(l).unwrap_or_else(|e| panic!("{e}: {l}"));
        assert!(v["timestamp"].is_string() && v["level"].is_string(), "{l}");
    }
    assert!(
        !text
            .lines()
            .any(|l| l.contains(" INFO ") || l.contains(" WARN ")),
        "no line in the text format: {text}"
    );
}
