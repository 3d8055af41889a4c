//! Traces: `sless dev` with an OTLP endpoint sends its spans over OTLP/HTTP
//! with protobuf to a receiver inside the test, which decodes them with
//! `opentelemetry-proto`. One upload is one trace, from the API request
//! through the append and the worker's items to the build and the deploy;
//! a call through `/fn` hands the function a `traceparent` of the caller's
//! trace whose parent is the proxy's span for the call.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::body::Bytes;
use opentelemetry_proto::tonic::collector::trace::v1::ExportTraceServiceRequest;
use opentelemetry_proto::tonic::common::v1::any_value::Value;
use opentelemetry_proto::tonic::trace::v1::Span;
use prost::Message;
use serde_json::json;

use crate::dev::{json_log_line, start_dev_configured, stop_dev};
use crate::zip_files;

/// Answers with the `traceparent` it was called with; dies on `/die`.
const ECHO: &str = "import os\n\ndef handle(event):\n    if event['path'] == '/die':\n        os._exit(3)\n    return {'traceparent': event['headers'].get('traceparent')}\n";

/// A span as the receiver got it, with its service.
#[derive(Debug, Clone)]
struct Got {
    service: String,
    span: Span,
}

impl Got {
    fn attr(&self, key: &str) -> Option<String> {
        let v = self.span.attributes.iter().find(|a| a.key == key)?;
        Some(match v.value.as_ref()?.value.as_ref()? {
            Value::StringValue(s) => s.clone(),
            Value::BoolValue(b) => b.to_string(),
            Value::IntValue(i) => i.to_string(),
            other => format!("{other:?}"),
        })
    }
}

/// An OTLP/HTTP receiver on loopback: what it got, and its address.
async fn receiver() -> (Arc<Mutex<Vec<Got>>>, String) {
    let got = Arc::new(Mutex::new(Vec::new()));
    let kept = got.clone();
    let app = axum::Router::new().route(
        "/v1/traces",
        axum::routing::post(move |body: Bytes| {
            let kept = kept.clone();
            async move {
                let req = ExportTraceServiceRequest::decode(body).expect("OTLP protobuf");
                let mut kept = kept.lock().unwrap();
                for rs in req.resource_spans {
                    let service = rs
                        .resource
                        .iter()
                        .flat_map(|r| &r.attributes)
                        .find(|a| a.key == "service.name")
                        .and_then(|a| match a.value.as_ref()?.value.as_ref()? {
                            Value::StringValue(s) => Some(s.clone()),
                            _ => None,
                        })
                        .unwrap_or_default();
                    for ss in rs.scope_spans {
                        for span in ss.spans {
                            kept.push(Got {
                                service: service.clone(),
                                span,
                            });
                        }
                    }
                }
                (
                    [("content-type", "application/x-protobuf")],
                    Vec::<u8>::new(),
                )
            }
        }),
    );
    // The function logs exported to the same endpoint: taken, unread
    // (tests/e2e/log_export.rs reads them).
    let app = app.route(
        "/v1/logs",
        axum::routing::post(|| async { [("content-type", "application/x-protobuf")] }),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (got, format!("http://{addr}"))
}

fn hex(b: &[u8]) -> String {
    b.iter().map(|x| format!("{x:02x}")).collect()
}

/// The spans of trace `trace_id` the receiver has.
fn trace(got: &Mutex<Vec<Got>>, trace_id: &str) -> Vec<Got> {
    got.lock()
        .unwrap()
        .iter()
        .filter(|g| hex(&g.span.trace_id) == trace_id)
        .cloned()
        .collect()
}

fn named<'a>(spans: &'a [Got], name: &str) -> Vec<&'a Got> {
    spans.iter().filter(|g| g.span.name == name).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_is_one_trace_from_the_request_to_the_deploy_and_functions_get_traceparent() {
    let (got, endpoint) = receiver().await;
    let dir = sless_testkit::scratch_dir("traces").join("data");
    let (proc, c) = start_dev_configured(
        &dir,
        "log",
        &[],
        &[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", &endpoint),
            ("OTEL_BSP_SCHEDULE_DELAY", "100"),
            ("OTEL_TRACES_SAMPLER", "always_on"),
            ("SLESS_LOG_FORMAT", "json"),
        ],
    )
    .await;
    // The exporter runs on a thread of its own.
    let pid = proc.child.id();
    assert!(
        threads(pid).iter().any(|t| t.starts_with("OpenTelemetry")),
        "{:?}",
        threads(pid)
    );

    let res = c
        .create(json!({"name": "traced", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201);
    // The upload continues the caller's trace.
    let caller_trace = "4bf92f3577b34da6a3ce929d0e0e4736";
    let caller_span = "00f067aa0ba902b7";
    let res = c
        .http
        .post(c.v1("/functions/traced/upload"))
        .bearer_auth(&c.token)
        .header("content-type", "application/zip")
        .header("traceparent", format!("00-{caller_trace}-{caller_span}-01"))
        .body(zip_files(&[("handler.py", ECHO)]))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    c.wait_ready("traced", Duration::from_secs(120)).await;

    let spans = sless_testkit::eventually(
        "the upload's trace to reach the deploy",
        Duration::from_secs(30),
        || {
            let got = got.clone();
            async move {
                // Every span ended: each one's parent has arrived (but
                // the request's, which is the caller's).
                let spans = trace(&got, caller_trace);
                let ids: Vec<&[u8]> = spans.iter().map(|g| g.span.span_id.as_slice()).collect();
                let whole = spans.iter().all(|g| {
                    hex(&g.span.parent_span_id) == caller_span
                        || ids.contains(&g.span.parent_span_id.as_slice())
                });
                let deployed = spans.iter().any(|g| g.span.name == "deploy");
                (deployed && whole).then_some(spans)
            }
        },
    )
    .await;
    let names: Vec<&str> = spans.iter().map(|g| g.span.name.as_str()).collect();
    assert!(spans.iter().all(|g| g.service == "sless-dev"), "{names:?}");
    // The request continues the caller's span.
    let request = named(&spans, "POST /v1/namespaces/{ns}/functions/{name}/upload");
    assert_eq!(request.len(), 1, "{names:?}");
    let request = request[0];
    assert_eq!(hex(&request.span.parent_span_id), caller_span);
    assert_eq!(
        request.attr("http.response.status_code").as_deref(),
        Some("202")
    );
    // Every other span hangs below it, in this trace.
    let ids: HashMap<String, &Got> = spans.iter().map(|g| (hex(&g.span.span_id), g)).collect();
    let parent_of = |g: &Got| ids.get(&hex(&g.span.parent_span_id)).copied();
    let below_request = |g: &Got| {
        let mut at = g;
        for _ in 0..20 {
            match parent_of(at) {
                Some(p) if p.span.span_id == request.span.span_id => return true,
                Some(p) => at = p,
                None => return false,
            }
        }
        false
    };
    for g in spans
        .iter()
        .filter(|g| g.span.span_id != request.span.span_id)
    {
        assert!(
            below_request(g),
            "{} is not below the request: {names:?}",
            g.span.name
        );
    }
    // The upload's append is the request's child.
    assert!(
        named(&spans, "append")
            .iter()
            .any(|a| a.span.parent_span_id == request.span.span_id
                && a.attr("stream").is_some_and(|s| s.ends_with("/traced"))),
        "{names:?}"
    );
    // The worker's item for it continues the request.
    let work = named(&spans, "process ReconcileFunction");
    assert!(
        work.iter()
            .any(|w| w.span.parent_span_id == request.span.span_id),
        "{names:?}"
    );
    // The build and the deploy are children of a worker's item.
    for step in ["build", "deploy"] {
        let s = named(&spans, step);
        assert!(!s.is_empty(), "no {step}: {names:?}");
        for s in s {
            let parent = parent_of(s).expect("the step's parent is in the trace");
            assert_eq!(parent.span.name, "process ReconcileFunction", "{step}");
            assert_eq!(s.attr("runtime").as_deref(), Some("python3.11"));
            assert_eq!(s.attr("driver").as_deref(), Some("local"));
        }
    }

    // A call through /fn: the function gets the caller's trace, with the
    // proxy's span for the call as its parent.
    let call_trace = "0af7651916cd43dd8448eb211c80319c";
    let res = c
        .http
        .get(format!("{}/fn/{}/traced", c.fn_url, c.namespace))
        .header(
            "traceparent",
            format!("00-{call_trace}-b7ad6b7169203331-01"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    let body: serde_json::Value = res.json().await.unwrap();
    let received = body["traceparent"]
        .as_str()
        .expect("a traceparent")
        .to_owned();
    let parts: Vec<&str> = received.split('-').collect();
    assert_eq!(parts.len(), 4, "{received}");
    assert_eq!(parts[1], call_trace, "{received}");
    let call = sless_testkit::eventually("the call's span", Duration::from_secs(30), || {
        let got = got.clone();
        let proxy_span = parts[2].to_owned();
        async move {
            trace(&got, call_trace)
                .into_iter()
                .find(|g| hex(&g.span.span_id) == proxy_span)
        }
    })
    .await;
    assert_eq!(call.span.name, "GET /fn/{ns}/{name}");
    assert_eq!(hex(&call.span.parent_span_id), "b7ad6b7169203331");
    assert_eq!(call.attr("faas.name").as_deref(), Some("traced"));
    assert_eq!(call.attr("faas.version").as_deref(), Some("1"));
    assert!(call.attr("faas.coldstart").is_some(), "{call:?}");
    assert_eq!(
        call.attr("http.response.status_code").as_deref(),
        Some("200")
    );

    // A JSON log line written in a request names its trace and span.
    let failing_trace = "5b8efff798038103d269b633813fc60c";
    let res = c
        .http
        .get(format!("{}/fn/{}/traced/die", c.fn_url, c.namespace))
        .header(
            "traceparent",
            format!("00-{failing_trace}-eee19b7ec3c1b174-01"),
        )
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 502);
    let log = dir.with_extension("log");
    let entry = json_log_line(&log, failing_trace).await;
    assert_eq!(entry["span"]["trace_id"], failing_trace, "{entry}");
    assert_eq!(
        entry["span"]["span_id"].as_str().map(str::len),
        Some(16),
        "{entry}"
    );
    assert_eq!(entry["span"]["namespace"], c.namespace.as_str(), "{entry}");
    assert!(entry["span"]["request_id"].is_string(), "{entry}");

    stop_dev(proc, &dir).await;
}

/// The names of the threads of process `pid`.
pub fn threads(pid: u32) -> Vec<String> {
    let tasks = std::fs::read_dir(format!("/proc/{pid}/task")).unwrap();
    tasks
        .filter_map(|t| std::fs::read_to_string(t.ok()?.path().join("comm")).ok())
        .map(|c| c.trim().to_owned())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_an_endpoint_no_exporter_runs_and_a_callers_traceparent_passes_unchanged() {
    let dir = sless_testkit::scratch_dir("traces-off").join("data");
    let (proc, c) =
        start_dev_configured(&dir, "log", &[], &[("OTEL_SERVICE_NAME", "unused")]).await;
    let pid = proc.child.id();
    let res = c
        .create(
            json!({"name": "untraced", "runtime": "python3.11", "entrypoint": "handler.handle"}),
        )
        .await;
    assert_eq!(res.status(), 201);
    let res = c
        .upload("untraced", zip_files(&[("handler.py", ECHO)]))
        .await;
    assert_eq!(res.status(), 202);
    c.wait_ready("untraced", Duration::from_secs(120)).await;
    let url = format!("{}/fn/{}/untraced", c.fn_url, c.namespace);
    let given = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
    let body: serde_json::Value = c
        .http
        .get(&url)
        .header("traceparent", given)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    assert_eq!(body["traceparent"], given);
    let body: serde_json::Value = c.http.get(&url).send().await.unwrap().json().await.unwrap();
    assert_eq!(body["traceparent"], serde_json::Value::Null);
    let names = threads(pid);
    assert!(
        !names.iter().any(|t| t.starts_with("OpenTelemetry")),
        "{names:?}"
    );
    stop_dev(proc, &dir).await;
}
