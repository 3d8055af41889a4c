//! What functions print, exported: `sless dev` with an OTLP endpoint sends
//! each line a function prints as an OpenTelemetry log record over
//! OTLP/HTTP with protobuf to a receiver inside the test, which decodes
//! them with `opentelemetry-proto`. A line printed in a call carries the
//! call's invocation id, and the trace and span the function got for the
//! call: the caller's trace, the proxy's span; a job's line its run's
//! record and trace; a line printed outside a call neither; and past the
//! function's budget, only the lines kept are exported.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::KeyValue;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::logs::v1::LogRecord;
use prost::Message;
use serde_json::json;

use crate::dev::{start_dev_configured, stop_dev};
use crate::zip_files;

/// Prints at import, and in each call a line on each stream (`?spew=N`:
/// N lines instead; run as a job, one line); answers with the
/// `traceparent` it was called with.
const PRINTER: &str = r#"
import sys

print("imported", flush=True)

def handle(event):
    if (event.get("json") or {}).get("job"):
        print("from the job", flush=True)
        return {}
    for i in range(int(event["query"].get("spew", "0"))):
        print(f"spew {i}")
    if "spew" in event["query"]:
        sys.stdout.flush()
        return {}
    print("hello from the call", flush=True)
    print("and to stderr", file=sys.stderr, flush=True)
    return {"traceparent": event["headers"].get("traceparent")}
"#;

/// A record as the receiver got it, with its service.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    record: LogRecord,
}

fn text(attributes: &[KeyValue], key: &str) -> Option<String> {
    let v = attributes.iter().find(|a| a.key == key)?;
    Some(match v.value.as_ref()?.value.as_ref()? {
        Value::StringValue(s) => s.clone(),
        Value::BoolValue(b) => b.to_string(),
        other => format!("{other:?}"),
    })
}

impl Got {
    fn attr(&self, key: &str) -> Option<String> {
        text(&self.record.attributes, key)
    }

    fn body(&self) -> Option<&str> {
        match self.record.body.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => Some(s),
            _ => None,
        }
    }
}

/// An OTLP/HTTP receiver of logs on loopback (and of traces, unread): what
/// it got, and its address.
async fn receiver() -> (Arc<Mutex<Vec<Got>>>, String) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let kept = got.clone();
    let ok = || {
        (
            [("content-type", "application/x-protobuf")],
            Vec::<u8>::new(),
        )
    };
    let app = axum::Router::new()
        .route(
            "/v1/logs",
            axum::routing::post(move |body: Bytes| {
                let kept = kept.clone();
                async move {
                    let req = ExportLogsServiceRequest::decode(body).expect("OTLP protobuf");
                    let mut kept = kept.lock().unwrap();
                    for rl in req.resource_logs {
                        let service = rl
                            .resource
                            .as_ref()
                            .and_then(|r| text(&r.attributes, "service.name"))
                            .unwrap_or_default();
                        for sl in rl.scope_logs {
                            for record in sl.log_records {
                                kept.push(Got {
                                    service: service.clone(),
                                    record,
                                });
                            }
                        }
                    }
                    ok()
                }
            }),
        )
        .route(
            "/v1/traces",
            axum::routing::post(move || async move { ok() }),
        );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (got, format!("http://{addr}"))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The record of `body` the receiver has, once it has it.
async fn record(got: &Arc<Mutex<Vec<Got>>>, body: &str) -> Got {
    sless_testkit::eventually(body, Duration::from_secs(30), || {
        let got = got.clone();
        async move {
            let got = got.lock().unwrap();
            got.iter().find(|g| g.body() == Some(body)).cloned()
        }
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_functions_print_is_exported_with_its_invocation_and_trace_within_its_budget() {
    let (got, endpoint) = receiver().await;
    let dir = sless_testkit::scratch_dir("log_export").join("data");
    let (proc, c) = start_dev_configured(
        &dir,
        "log",
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_TRACES_SAMPLER", "always_on"),
            // 40 lines at once, then 20 a second.
            ("SLESS_LOG_LINES_PER_SEC", "20"),
        ],
    )
    .await;
    let res = c
        .create(json!({"name": "printer", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201);
    let res = c
        .upload("printer", zip_files(&[("handler.py", PRINTER)]))
        .await;
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    c.wait_ready("printer", Duration::from_secs(120)).await;

    let caller_trace = "0af7651916cd43dd8448eb211c80319c";
    let res = c
        .http
        .get(format!("{}/fn/{}/printer", c.fn_url, c.namespace))
        .header(
            "traceparent",
            format!("00-{caller_trace}-b7ad6b7169203331-01"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let invocation = res
        .headers()
        .get("sless-invocation-id")
        .expect("every call says its invocation id")
        .to_str()
        .unwrap()
        .to_owned();
    let body: serde_json::Value = res.json().await.unwrap();
    // What the function got: the caller's trace, the proxy's span.
    let received = body["traceparent"].as_str().expect("a traceparent");
    let parts: Vec<&str> = received.split('-').collect();
    assert_eq!(parts.len(), 4, "{received}");
    assert_eq!(parts[1], caller_trace, "{received}");
    assert_ne!(parts[2], "b7ad6b7169203331", "{received}");

    let out = record(&got, "hello from the call").await;
    assert_eq!(out.service, "sless-dev");
    assert_eq!(out.attr("sless.invocation_id"), Some(invocation.clone()));
    assert_eq!(hex(&out.record.trace_id), caller_trace, "{out:?}");
    assert_eq!(hex(&out.record.span_id), parts[2], "{out:?}");
    assert_eq!(out.record.flags & 1, 1);
    assert_eq!(
        out.attr("sless.namespace").as_deref(),
        Some(c.namespace.as_str())
    );
    assert_eq!(out.attr("faas.name").as_deref(), Some("printer"));
    assert_eq!(out.attr("faas.version").as_deref(), Some("1"));
    assert!(out.attr("faas.instance").is_some(), "{out:?}");
    assert_eq!(out.attr("log.iostream").as_deref(), Some("stdout"));
    assert_eq!(out.record.severity_text, "INFO");
    assert!(out.record.time_unix_nano > 0);
    let err = record(&got, "and to stderr").await;
    assert_eq!(err.attr("log.iostream").as_deref(), Some("stderr"));
    assert_eq!(err.record.severity_text, "ERROR");
    assert_eq!(err.attr("sless.invocation_id"), Some(invocation));
    assert_eq!(hex(&err.record.span_id), parts[2]);
    // Printed outside any call: no invocation, no trace.
    let imported = record(&got, "imported").await;
    assert_eq!(imported.attr("sless.invocation_id"), None);
    assert!(imported.record.trace_id.is_empty(), "{imported:?}");

    // A job's line: its run's record, and its run's trace (the request's
    // that started it).
    let job_trace = "5b8efff798038103d269b633813fc60c";
    let res = c
        .http
        .post(c.v1("/jobs"))
        .bearer_auth(&c.token)
        .header("traceparent", format!("00-{job_trace}-eee19b7ec3c1b174-01"))
        .json(&json!({"name": "printing", "function": "printer", "input": {"job": true}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    let job = record(&got, "from the job").await;
    assert_eq!(hex(&job.record.trace_id), job_trace, "{job:?}");
    assert_eq!(job.record.span_id.len(), 8, "{job:?}");
    assert!(job.attr("sless.invocation_id").is_some(), "{job:?}");

    // Past its budget: only the lines kept are exported.
    let res = c
        .http
        .get(format!("{}/fn/{}/printer?spew=500", c.fn_url, c.namespace))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let spew = res.headers()["sless-invocation-id"]
        .to_str()
        .unwrap()
        .to_owned();
    let exported = || {
        let got = got.lock().unwrap();
        got.iter()
            .filter(|g| g.attr("sless.invocation_id").as_deref() == Some(spew.as_str()))
            .count()
    };
    let (kept, dropped) = sless_testkit::eventually(
        "the kept lines exported, the dropped ones counted",
        Duration::from_secs(30),
        || async {
            let page: serde_json::Value = c
                .http
                .get(c.v1(&format!(
                    "/functions/printer/logs?invocation={spew}&limit=1000"
                )))
                .bearer_auth(&c.token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap();
            let kept = page["items"].as_array().unwrap().len();
            let dropped = page["dropped"].as_u64().unwrap_or(0) as usize;
            (kept + dropped >= 500 && exported() == kept).then_some((kept, dropped))
        },
    )
    .await;
    assert!(kept > 0 && dropped > 0, "{kept} kept, {dropped} dropped");

    stop_dev(proc, &dir).await;
}
