//! What functions print, sent as OpenTelemetry log records over OTLP/HTTP
//! with protobuf, switched on by the standard variables
//! (`OTEL_EXPORTER_OTLP_ENDPOINT` or `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`;
//! `OTEL_LOGS_EXPORTER=none` switches it off). Off by default; off, no task
//! runs and no record is built ([`enabled`] is false).
//!
//! The function logs' writer hands each line it keeps to [`export`], which
//! never waits: the records go into a bounded queue (a record that finds it
//! full is dropped and counted in `sless_function_log_lines_not_exported`)
//! and a task on the process's runtime posts them in batches with the
//! traces' HTTP client. A record carries the trace and span of the call
//! that printed its line ([`Trace`]), so a collector joins it to the call's
//! spans.

use std::collections::HashMap;
use std::sync::OnceLock;
use std::time::Duration;

use bytes::Bytes;
use opentelemetry_http::HttpClient;
use opentelemetry_proto::tonic::collector::logs::v1::ExportLogsServiceRequest;
use opentelemetry_proto::tonic::common::v1::{AnyValue, InstrumentationScope, KeyValue, any_value};
use opentelemetry_proto::tonic::logs::v1::{LogRecord, ResourceLogs, ScopeLogs, SeverityNumber};
use opentelemetry_proto::tonic::resource::v1::Resource;
use prost::Message;
use tokio::sync::{mpsc, oneshot};

use crate::trace::OnRuntime;

/// Records waiting to be sent, at most.
pub const QUEUE: usize = 2048;
/// Records in one export, at most.
pub const BATCH: usize = 512;
/// How long a record waits for others to fill its batch, at most.
pub const DELAY: Duration = Duration::from_secs(1);

static QUEUED: OnceLock<Queue> = OnceLock::new();

/// Whether this process exports function log lines.
pub fn enabled() -> bool {
    QUEUED.get().is_some()
}

/// Queues `record` for export; a no-op when export is off. Never waits: a
/// full queue drops the record and counts it.
pub fn export(record: Record) {
    if let Some(queue) = QUEUED.get() {
        queue.offer(record);
    }
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Whether an OTLP endpoint is set (and logs are not switched off).
    pub on: bool,
    /// The URL records are posted to: `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`
    /// as it is, or `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/logs`.
    pub endpoint: String,
    /// `OTEL_SERVICE_NAME` when set, else `sless-{role}`.
    pub service_name: String,
    /// Headers sent with each export: `OTEL_EXPORTER_OTLP_LOGS_HEADERS`,
    /// else `OTEL_EXPORTER_OTLP_HEADERS` (`key=value,…`, values
    /// percent-encoded).
    pub headers: Vec<(String, String)>,
}

impl Settings {
    /// Reads the standard variables through `get` (unset and empty are the
    /// same). A protocol other than `http/protobuf`, an exporter other than
    /// `otlp` or `none`, or an endpoint that is not `http://`, is refused.
    pub fn read(role: &str, get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let get = |name: &str| get(name).filter(|v| !v.is_empty());
        let service_name = get("OTEL_SERVICE_NAME").unwrap_or_else(|| format!("sless-{role}"));
        let mut settings = Settings {
            on: false,
            endpoint: String::new(),
            service_name,
            headers: Vec::new(),
        };
        let exporter = get("OTEL_LOGS_EXPORTER");
        if let Some(e) = exporter.as_ref().filter(|e| *e != "otlp" && *e != "none") {
            return Err(format!(
                "OTEL_LOGS_EXPORTER={e:?}: sless exports function logs with otlp, or none"
            ));
        }
        let disabled = get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || exporter.as_deref() == Some("none");
        let endpoint = get("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT")
            .map(|e| ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", e))
            .or_else(|| {
                get("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| ("OTEL_EXPORTER_OTLP_ENDPOINT", e))
            });
        let Some((variable, endpoint)) = endpoint.filter(|_| !disabled) else {
            return Ok(settings);
        };
        if !endpoint.starts_with("http://") {
            return Err(format!(
                "{variable}={endpoint:?}: sless sends function logs over plain http:// (to a collector beside it, which may forward them over TLS)"
            ));
        }
        for variable in [
            "OTEL_EXPORTER_OTLP_LOGS_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(p) = get(variable).filter(|p| p != "http/protobuf") {
                return Err(format!(
                    "{variable}={p:?}: sless sends function logs as OTLP over HTTP with protobuf; set it to http/protobuf or leave it unset"
                ));
            }
        }
        let headers = get("OTEL_EXPORTER_OTLP_LOGS_HEADERS")
            .map(|h| ("OTEL_EXPORTER_OTLP_LOGS_HEADERS", h))
            .or_else(|| {
                get("OTEL_EXPORTER_OTLP_HEADERS").map(|h| ("OTEL_EXPORTER_OTLP_HEADERS", h))
            });
        if let Some((variable, list)) = headers {
            settings.headers =
                parse_headers(&list).ok_or_else(|| format!("{variable}: expected key=value,…"))?;
        }
        settings.on = true;
        settings.endpoint = match variable {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => format!("{}/v1/logs", endpoint.trim_end_matches('/')),
            _ => endpoint,
        };
        Ok(settings)
    }
}

/// `key=value,…` with percent-encoded values, as the OTLP variables have
/// them; `None` when an entry has no `=`, an empty key, or a bad escape.
fn parse_headers(list: &str) -> Option<Vec<(String, String)>> {
    let decode = |s: &str| -> Option<String> {
        let (mut out, bytes, mut i) = (Vec::new(), s.as_bytes(), 0);
        while i < bytes.len() {
            if bytes[i] == b'%' {
                let hex = std::str::from_utf8(bytes.get(i + 1..i + 3)?).ok()?;
                out.push(u8::from_str_radix(hex, 16).ok()?);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        String::from_utf8(out).ok()
    };
    list.split(',')
        .filter(|e| !e.trim().is_empty())
        .map(|entry| {
            let (k, v) = entry.split_once('=')?;
            let k = decode(k.trim())?;
            (!k.is_empty()).then_some(())?;
            Some((k, decode(v.trim())?))
        })
        .collect()
}

/// The trace and span a line belongs to, and the trace's flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Trace {
    pub trace_id: [u8; 16],
    pub span_id: [u8; 8],
    pub flags: u8,
}

impl Trace {
    /// The trace context a W3C `traceparent` names; `None` unless it is
    /// well formed.
    pub fn parse(traceparent: &str) -> Option<Trace> {
        let sc = crate::trace::parse(traceparent)?;
        Some(Trace {
            trace_id: sc.trace_id().to_bytes(),
            span_id: sc.span_id().to_bytes(),
            flags: sc.trace_flags().to_u8(),
        })
    }
}

/// One line a function printed, as it is exported.
#[derive(Debug, Clone, PartialEq)]
pub struct Record {
    /// When sless read it, in nanoseconds since the Unix epoch.
    pub at_unix_nanos: u64,
    /// Printed on stderr (else stdout).
    pub stderr: bool,
    pub text: String,
    pub namespace: String,
    pub function: String,
    pub version: Option<u32>,
    pub instance: String,
    /// The invocation record of the call (or run) that printed it.
    pub invocation: Option<String>,
    pub truncated: bool,
    /// The trace and span of that call, when known.
    pub trace: Option<Trace>,
}

impl Record {
    fn encode(self) -> LogRecord {
        let text = |s: String| {
            Some(AnyValue {
                value: Some(any_value::Value::StringValue(s)),
            })
        };
        let attr = |key: &str, value: Option<AnyValue>| KeyValue {
            key: key.to_owned(),
            value,
            ..KeyValue::default()
        };
        let mut attributes = vec![
            attr("sless.namespace", text(self.namespace)),
            attr("faas.name", text(self.function)),
        ];
        if let Some(v) = self.version {
            attributes.push(attr("faas.version", text(v.to_string())));
        }
        attributes.push(attr("faas.instance", text(self.instance)));
        if let Some(id) = self.invocation {
            attributes.push(attr("sless.invocation_id", text(id)));
        }
        let stream = if self.stderr { "stderr" } else { "stdout" };
        attributes.push(attr("log.iostream", text(stream.to_owned())));
        if self.truncated {
            let yes = Some(AnyValue {
                value: Some(any_value::Value::BoolValue(true)),
            });
            attributes.push(attr("sless.truncated", yes));
        }
        let (severity, severity_text) = if self.stderr {
            (SeverityNumber::Error, "ERROR")
        } else {
            (SeverityNumber::Info, "INFO")
        };
        let (trace_id, span_id, flags) = match self.trace {
            Some(t) => (t.trace_id.to_vec(), t.span_id.to_vec(), u32::from(t.flags)),
            None => (Vec::new(), Vec::new(), 0),
        };
        LogRecord {
            time_unix_nano: self.at_unix_nanos,
            observed_time_unix_nano: self.at_unix_nanos,
            severity_number: severity as i32,
            severity_text: severity_text.to_owned(),
            body: text(self.text),
            attributes,
            flags,
            trace_id,
            span_id,
            ..LogRecord::default()
        }
    }
}

/// The export request of `records`, from the service `service_name`.
fn request(service_name: &str, records: Vec<Record>) -> ExportLogsServiceRequest {
    let service = KeyValue {
        key: "service.name".to_owned(),
        value: Some(AnyValue {
            value: Some(any_value::Value::StringValue(service_name.to_owned())),
        }),
        ..KeyValue::default()
    };
    ExportLogsServiceRequest {
        resource_logs: vec![ResourceLogs {
            resource: Some(Resource {
                attributes: vec![service],
                ..Resource::default()
            }),
            scope_logs: vec![ScopeLogs {
                scope: Some(InstrumentationScope {
                    name: "sless".to_owned(),
                    ..InstrumentationScope::default()
                }),
                log_records: records.into_iter().map(Record::encode).collect(),
                schema_url: String::new(),
            }],
            schema_url: String::new(),
        }],
    }
}

/// The sending end of the export queue.
#[derive(Debug)]
struct Queue {
    tx: mpsc::Sender<Record>,
}

impl Queue {
    /// Queues `record`, or counts it not exported when the queue is full
    /// (or its task is gone).
    fn offer(&self, record: Record) {
        if let Err(e) = self.tx.try_send(record) {
            let (mpsc::error::TrySendError::Full(r) | mpsc::error::TrySendError::Closed(r)) = e;
            not_exported(&r.namespace, &r.function, 1);
        }
    }
}

fn not_exported(namespace: &str, function: &str, n: u64) {
    let metrics = crate::global();
    metrics
        .log_lines_not_exported
        .get_or_create(&metrics.function(namespace, function))
        .inc_by(n);
}

/// The exporter of a process that exports function logs: shut it down
/// before exiting ([`Exporter::shutdown`]), while the runtime still runs.
#[derive(Debug)]
pub struct Exporter {
    stop: oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl Exporter {
    /// Sends what is queued (for at most a few seconds) and stops.
    pub async fn shutdown(self) {
        let _ = self.stop.send(());
        if tokio::time::timeout(Duration::from_secs(5), self.task)
            .await
            .is_err()
        {
            eprintln!("sless: sending the last function log records took too long");
        }
    }
}

/// When `settings` are on, starts the export task on `rt` and makes
/// [`export`] queue for it. `None` when off, or when this process already
/// exports.
pub fn install(settings: &Settings, rt: tokio::runtime::Handle) -> Option<Exporter> {
    if !settings.on {
        return None;
    }
    let (tx, rx) = mpsc::channel(QUEUE);
    QUEUED.set(Queue { tx }).ok()?;
    let (stop, stopped) = oneshot::channel();
    let sender = Sender {
        http: OnRuntime::new(rt.clone()),
        settings: settings.clone(),
    };
    let task = rt.spawn(sender.run(rx, stopped));
    Some(Exporter { stop, task })
}

struct Sender {
    http: OnRuntime,
    settings: Settings,
}

impl Sender {
    async fn run(self, mut rx: mpsc::Receiver<Record>, mut stopped: oneshot::Receiver<()>) {
        let mut batch = Vec::with_capacity(BATCH);
        loop {
            let first = tokio::select! {
                r = rx.recv() => r,
                _ = &mut stopped => break,
            };
            let Some(first) = first else { break };
            batch.push(first);
            let window = tokio::time::sleep(DELAY);
            tokio::pin!(window);
            while batch.len() < BATCH {
                tokio::select! {
                    r = rx.recv() => match r {
                        Some(r) => batch.push(r),
                        None => break,
                    },
                    _ = &mut window => break,
                }
            }
            self.send(std::mem::take(&mut batch)).await;
        }
        // Stopping: what is queued goes in the last batches.
        rx.close();
        while let Some(r) = rx.recv().await {
            batch.push(r);
            if batch.len() == BATCH {
                self.send(std::mem::take(&mut batch)).await;
            }
        }
        if !batch.is_empty() {
            self.send(batch).await;
        }
    }

    async fn send(&self, records: Vec<Record>) {
        let mut whose: HashMap<(String, String), u64> = HashMap::new();
        for r in &records {
            let key = (r.namespace.clone(), r.function.clone());
            *whose.entry(key).or_default() += 1;
        }
        let count = records.len();
        let body = request(&self.settings.service_name, records).encode_to_vec();
        let mut req = http::Request::post(&self.settings.endpoint)
            .header(http::header::CONTENT_TYPE, "application/x-protobuf");
        for (k, v) in &self.settings.headers {
            req = req.header(k.as_str(), v.as_str());
        }
        let failed = match req.body(Bytes::from(body)) {
            Ok(req) => match self.http.send_bytes(req).await {
                Ok(answer) if answer.status().is_success() => None,
                Ok(answer) => Some(format!("the collector answered {}", answer.status())),
                Err(e) => Some(e.to_string()),
            },
            Err(e) => Some(e.to_string()),
        };
        if let Some(error) = failed {
            tracing::warn!(%error, records = count, "function log records not exported");
            for ((namespace, function), n) in whose {
                not_exported(&namespace, &function, n);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Settings, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::read("worker", |k| vars.get(k).cloned())
    }

    #[test]
    fn logs_are_exported_only_with_an_endpoint_and_refuse_what_sless_cannot_send() {
        let off = read(&[]).unwrap();
        assert!(!off.on);
        assert_eq!(off.service_name, "sless-worker");
        let on = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]).unwrap();
        assert!(on.on);
        assert_eq!(on.endpoint, "http://127.0.0.1:4318/v1/logs");
        let named = read(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
            ("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://c:4318/logs"),
            ("OTEL_SERVICE_NAME", "edge"),
            ("OTEL_EXPORTER_OTLP_HEADERS", "ignored=1"),
            (
                "OTEL_EXPORTER_OTLP_LOGS_HEADERS",
                "x-tenant=a%20b, api-key=k=1",
            ),
            ("OTEL_TRACES_EXPORTER", "none"),
        ])
        .unwrap();
        assert_eq!((named.on, named.service_name.as_str()), (true, "edge"));
        assert_eq!(named.endpoint, "http://c:4318/logs");
        assert_eq!(
            named.headers,
            [
                ("x-tenant".to_owned(), "a b".to_owned()),
                ("api-key".to_owned(), "k=1".to_owned())
            ]
        );
        let only_logs = read(&[("OTEL_EXPORTER_OTLP_LOGS_ENDPOINT", "http://c:4318/v1/logs")]);
        assert!(only_logs.unwrap().on);
        for disabled in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_LOGS_EXPORTER", "none"),
        ] {
            let s = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), disabled]).unwrap();
            assert!(!s.on, "{disabled:?}");
        }
        let refused = [
            (("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"), "http://"),
            (("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), "http/protobuf"),
            (
                ("OTEL_EXPORTER_OTLP_LOGS_PROTOCOL", "http/json"),
                "http/protobuf",
            ),
            (("OTEL_LOGS_EXPORTER", "console"), "otlp"),
            (("OTEL_EXPORTER_OTLP_HEADERS", "novalue"), "key=value"),
            (("OTEL_EXPORTER_OTLP_LOGS_HEADERS", "k=%zz"), "key=value"),
        ];
        for ((k, v), says) in refused {
            let mut vars = vec![(k, v)];
            if k != "OTEL_EXPORTER_OTLP_ENDPOINT" {
                vars.push(("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"));
            }
            let e = read(&vars).unwrap_err();
            assert!(e.contains(k) && e.contains(says), "{k}={v}: {e}");
        }
    }

    fn record(stderr: bool, trace: Option<Trace>) -> Record {
        Record {
            at_unix_nanos: 1_765_000_000_000_000_000,
            stderr,
            text: "hello".into(),
            namespace: "ns".into(),
            function: "f".into(),
            version: Some(3),
            instance: "127.0.0.1:4100".into(),
            invocation: Some("0193a7c4-5b1e-7d2a-9c41-3f6d2e8b1a07".into()),
            truncated: stderr,
            trace,
        }
    }

    #[test]
    fn a_record_holds_the_line_its_function_and_its_calls_trace() {
        let trace = Trace::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01");
        assert!(Trace::parse("00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01").is_none());
        let req = request("sless-dev", vec![record(false, trace), record(true, None)]);
        let req = ExportLogsServiceRequest::decode(req.encode_to_vec().as_slice()).unwrap();
        let rl = &req.resource_logs[0];
        let service = &rl.resource.as_ref().unwrap().attributes[0];
        assert_eq!(service.key, "service.name");
        let [out, err] = &rl.scope_logs[0].log_records[..] else {
            panic!("two records")
        };
        let attrs = |r: &LogRecord| -> HashMap<String, String> {
            r.attributes
                .iter()
                .map(|a| {
                    let v = match a.value.as_ref().and_then(|v| v.value.as_ref()) {
                        Some(any_value::Value::StringValue(s)) => s.clone(),
                        Some(any_value::Value::BoolValue(b)) => b.to_string(),
                        other => format!("{other:?}"),
                    };
                    (a.key.clone(), v)
                })
                .collect()
        };
        let a = attrs(out);
        assert_eq!(a["sless.namespace"], "ns");
        assert_eq!(a["faas.name"], "f");
        assert_eq!(a["faas.version"], "3");
        assert_eq!(a["faas.instance"], "127.0.0.1:4100");
        assert_eq!(
            a["sless.invocation_id"],
            "0193a7c4-5b1e-7d2a-9c41-3f6d2e8b1a07"
        );
        assert_eq!(a["log.iostream"], "stdout");
        assert!(!a.contains_key("sless.truncated"));
        assert_eq!(out.severity_number, SeverityNumber::Info as i32);
        assert_eq!(out.time_unix_nano, 1_765_000_000_000_000_000);
        assert_eq!(
            out.body.as_ref().unwrap().value,
            Some(any_value::Value::StringValue("hello".into()))
        );
        let trace = trace.unwrap();
        assert_eq!(out.trace_id, trace.trace_id);
        assert_eq!(out.span_id, trace.span_id);
        assert_eq!(out.flags, 1);
        let a = attrs(err);
        assert_eq!(
            (a["log.iostream"].as_str(), a["sless.truncated"].as_str()),
            ("stderr", "true")
        );
        assert_eq!(err.severity_number, SeverityNumber::Error as i32);
        assert!(err.trace_id.is_empty() && err.span_id.is_empty());
    }

    #[test]
    fn a_full_queue_drops_the_record_and_counts_it() {
        let (tx, _rx) = mpsc::channel(1);
        let queue = Queue { tx };
        let mut r = record(false, None);
        r.namespace = "full-queue".into();
        let counted = || {
            let m = crate::global();
            m.log_lines_not_exported
                .get_or_create(&m.function("full-queue", "f"))
                .get()
        };
        let before = counted();
        queue.offer(r.clone());
        assert_eq!(counted(), before);
        queue.offer(r.clone());
        queue.offer(r);
        assert_eq!(counted(), before + 2);
    }
}
