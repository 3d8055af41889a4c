//! Traces: OpenTelemetry spans sent over OTLP/HTTP with protobuf, switched
//! on by the standard variables (`OTEL_EXPORTER_OTLP_ENDPOINT` or
//! `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`; `OTEL_SERVICE_NAME`,
//! `OTEL_TRACES_SAMPLER` and `OTEL_TRACES_SAMPLER_ARG`, `OTEL_BSP_*`,
//! `OTEL_EXPORTER_OTLP_HEADERS` are read by the SDK). Off by default; off,
//! no exporter runs and the spans made only for traces (target [`TARGET`])
//! are never built.
//!
//! One trace runs from the API request through the log and the queue: the
//! request's span continues the caller's `traceparent`; each event records
//! the W3C trace context it was appended in (`eventlog::Metadata`), each
//! work item the one it was enqueued in (its payload's `traceparent`, or
//! `links` when a cron tick or several superseded requests caused it); the
//! worker's span for an item continues that context; the proxy sends the
//! function its own `traceparent`.

use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use bytes::Bytes;
use http_body_util::{BodyExt, Full, Limited};
use hyper_util::client::legacy::Client;
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::rt::TokioExecutor;
use opentelemetry::trace::{TraceContextExt, TracerProvider as _};
use opentelemetry_http::{HttpClient, HttpError, Request, Response};
use opentelemetry_otlp::{Protocol, WithExportConfig, WithHttpConfig};
use opentelemetry_sdk::Resource;
use opentelemetry_sdk::trace::SdkTracerProvider;
use tracing::Span;
use tracing_opentelemetry::OpenTelemetrySpanExt;
use tracing_subscriber::Layer;
use tracing_subscriber::registry::LookupSpan;

/// The target of the spans made only for traces (the append, a build, a
/// call through the proxy): the log's filter leaves them out.
pub const TARGET: &str = "sless_trace";

/// The most bytes of a collector's answer that are read.
const MAX_ANSWER: usize = 64 * 1024;
/// How long one export may take.
const EXPORT_TIMEOUT: Duration = Duration::from_secs(10);

static ENABLED: AtomicBool = AtomicBool::new(false);
static IDS_LOGGED: AtomicBool = AtomicBool::new(false);

/// Whether [`record_ids`] writes the trace and span ids into the spans'
/// fields, for JSON log lines (otherwise they would only be sent again as
/// attributes of every span).
pub fn log_ids(on: bool) {
    IDS_LOGGED.store(on, Ordering::Relaxed);
}

/// Whether this process sends traces.
pub fn enabled() -> bool {
    ENABLED.load(Ordering::Relaxed)
}

/// What the environment asks for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Settings {
    /// Whether an OTLP endpoint is set (and the SDK is not disabled).
    pub on: bool,
    /// The URL spans are posted to: `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`
    /// as it is, or `OTEL_EXPORTER_OTLP_ENDPOINT` with `/v1/traces`.
    pub endpoint: String,
    /// `OTEL_SERVICE_NAME` when set, else `sless-{role}`.
    pub service_name: String,
}

impl Settings {
    /// Reads the standard variables through `get` (unset and empty are the
    /// same). A protocol other than `http/protobuf`, or an endpoint that is
    /// not `http://`, is refused: say what to set instead.
    pub fn read(role: &str, get: impl Fn(&str) -> Option<String>) -> Result<Settings, String> {
        let get = |name: &str| get(name).filter(|v| !v.is_empty());
        let disabled = get("OTEL_SDK_DISABLED").is_some_and(|v| v.eq_ignore_ascii_case("true"))
            || get("OTEL_TRACES_EXPORTER").is_some_and(|v| v == "none");
        let endpoint = get("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT")
            .map(|e| ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", e))
            .or_else(|| {
                get("OTEL_EXPORTER_OTLP_ENDPOINT").map(|e| ("OTEL_EXPORTER_OTLP_ENDPOINT", e))
            });
        let service_name = get("OTEL_SERVICE_NAME").unwrap_or_else(|| format!("sless-{role}"));
        let Some((variable, endpoint)) = endpoint.filter(|_| !disabled) else {
            return Ok(Settings {
                on: false,
                endpoint: String::new(),
                service_name,
            });
        };
        if !endpoint.starts_with("http://") {
            return Err(format!(
                "{variable}={endpoint:?}: sless sends traces over plain http:// (to a collector beside it, which may forward them over TLS)"
            ));
        }
        for variable in [
            "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL",
            "OTEL_EXPORTER_OTLP_PROTOCOL",
        ] {
            if let Some(p) = get(variable).filter(|p| p != "http/protobuf") {
                return Err(format!(
                    "{variable}={p:?}: sless sends traces as OTLP over HTTP with protobuf; set it to http/protobuf or leave it unset"
                ));
            }
        }
        if let Some(e) = get("OTEL_TRACES_EXPORTER").filter(|e| e != "otlp") {
            return Err(format!(
                "OTEL_TRACES_EXPORTER={e:?}: sless exports traces with otlp, or none"
            ));
        }
        let endpoint = match variable {
            "OTEL_EXPORTER_OTLP_ENDPOINT" => {
                format!("{}/v1/traces", endpoint.trim_end_matches('/'))
            }
            _ => endpoint,
        };
        Ok(Settings {
            on: true,
            endpoint,
            service_name,
        })
    }
}

/// The exporter of a process that sends traces: flush it before exiting
/// ([`Exporter::shutdown`]), while the runtime still runs.
#[derive(Debug)]
pub struct Exporter {
    provider: SdkTracerProvider,
}

impl Exporter {
    /// Sends what is left and stops the exporter's thread.
    pub fn shutdown(self) {
        ENABLED.store(false, Ordering::Relaxed);
        if let Err(e) = self.provider.shutdown() {
            eprintln!("sless: sending the last traces failed: {e}");
        }
    }
}

/// When `settings` are on: the layer that turns sless's spans into
/// OpenTelemetry spans and its exporter, whose HTTP requests run on `rt`.
/// It sees spans and warnings of sless's own crates only.
pub fn install<S>(
    settings: &Settings,
    rt: tokio::runtime::Handle,
) -> Result<Option<(impl Layer<S> + use<S>, Exporter)>, String>
where
    S: tracing::Subscriber + for<'a> LookupSpan<'a>,
{
    if !settings.on {
        return Ok(None);
    }
    let exporter = opentelemetry_otlp::SpanExporter::builder()
        .with_http()
        .with_protocol(Protocol::HttpBinary)
        .with_endpoint(settings.endpoint.clone())
        .with_http_client(OnRuntime::new(rt))
        .with_timeout(EXPORT_TIMEOUT)
        .build()
        .map_err(|e| format!("the OTLP trace exporter: {e}"))?;
    let resource = Resource::builder()
        .with_service_name(settings.service_name.clone())
        .build();
    let provider = SdkTracerProvider::builder()
        .with_batch_exporter(exporter)
        .with_resource(resource)
        .build();
    let tracer = provider.tracer("sless");
    let layer = tracing_opentelemetry::layer()
        .with_tracer(tracer)
        .with_threads(false)
        .with_location(false)
        .with_tracked_inactivity(false)
        // A span is started when it is first asked for its context (or
        // ends), not when it is entered: the request's span is named after
        // its route once the router has matched it.
        .with_context_activation(false)
        .with_filter(tracing_subscriber::filter::filter_fn(|meta| {
            meta.target().starts_with("sless")
                && (meta.is_span() || *meta.level() <= tracing::Level::WARN)
        }));
    ENABLED.store(true, Ordering::Relaxed);
    Ok(Some((layer, Exporter { provider })))
}

/// Whether a log layer shows this span or event: everything but the spans
/// made only for traces.
pub fn logged(meta: &tracing::Metadata<'_>) -> bool {
    meta.target() != TARGET
}

/// Makes `span` continue the W3C trace context `traceparent` (a caller's
/// header, a work item's cause); one that does not parse is ignored.
/// Nothing when traces are off.
pub fn continue_from(span: &Span, traceparent: Option<&str>) {
    if !enabled() {
        return;
    }
    if let Some(parent) = traceparent.and_then(parse) {
        let _ = span.set_parent(opentelemetry::Context::new().with_remote_span_context(parent));
    }
}

/// Records the `trace_id` and `span_id` fields of `span`, where it has
/// them, for JSON logs ([`log_ids`]). This starts the span: its name
/// (`otel.name`) and parent are fixed from then on.
pub fn record_ids(span: &Span) {
    if !enabled() || !IDS_LOGGED.load(Ordering::Relaxed) {
        return;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    if sc.is_valid() {
        span.record("trace_id", sc.trace_id().to_string());
        span.record("span_id", sc.span_id().to_string());
    }
}

/// Adds to `span` a link to each trace context of `links` (what a cron tick
/// or several superseded requests caused).
pub fn link(span: &Span, links: &[&str]) {
    if !enabled() {
        return;
    }
    for parsed in links.iter().filter_map(|l| parse(l)) {
        span.add_link(parsed);
    }
}

/// The W3C `traceparent` of `span`, when traces are on.
pub fn traceparent_of(span: &Span) -> Option<String> {
    if !enabled() {
        return None;
    }
    let cx = span.context();
    let sc = cx.span().span_context().clone();
    sc.is_valid().then(|| {
        format!(
            "00-{}-{}-{:02x}",
            sc.trace_id(),
            sc.span_id(),
            sc.trace_flags().to_u8() & 1
        )
    })
}

/// The W3C `traceparent` of the span this runs in, when traces are on.
pub fn current() -> Option<String> {
    if !enabled() {
        return None;
    }
    traceparent_of(&Span::current())
}

/// A W3C `traceparent` (`00-{32 hex}-{16 hex}-{2 hex}`, ids not zero), as
/// the remote parent it names.
pub(crate) fn parse(traceparent: &str) -> Option<opentelemetry::trace::SpanContext> {
    use opentelemetry::trace::{SpanContext, SpanId, TraceFlags, TraceId, TraceState};
    let hex = |s: &str, len: usize| {
        s.len() == len && s.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f'))
    };
    let mut parts = traceparent.trim().split('-');
    let (version, trace, span, flags) =
        (parts.next()?, parts.next()?, parts.next()?, parts.next()?);
    if !(hex(version, 2) && version != "ff" && hex(trace, 32) && hex(span, 16) && hex(flags, 2))
        || (version == "00" && parts.next().is_some())
    {
        return None;
    }
    let flags = u8::from_str_radix(flags, 16).ok()?;
    let sc = SpanContext::new(
        TraceId::from_hex(trace).ok()?,
        SpanId::from_hex(span).ok()?,
        TraceFlags::new(flags & 1),
        true,
        TraceState::default(),
    );
    sc.is_valid().then_some(sc)
}

/// The exporter's HTTP client: hyper's, each request run on the process's
/// tokio runtime (the batch exporter calls it from a thread of its own).
#[derive(Debug, Clone)]
pub(crate) struct OnRuntime {
    rt: tokio::runtime::Handle,
    http: Client<HttpConnector, Full<Bytes>>,
}

impl OnRuntime {
    pub(crate) fn new(rt: tokio::runtime::Handle) -> OnRuntime {
        let http = {
            let _in = rt.enter();
            Client::builder(TokioExecutor::new()).build_http()
        };
        OnRuntime { rt, http }
    }
}

#[async_trait::async_trait]
impl HttpClient for OnRuntime {
    async fn send_bytes(&self, request: Request<Bytes>) -> Result<Response<Bytes>, HttpError> {
        let http = self.http.clone();
        let sent = self.rt.spawn(async move {
            let (parts, body) = request.into_parts();
            let request = http::Request::from_parts(parts, Full::new(body));
            let answer = tokio::time::timeout(EXPORT_TIMEOUT, http.request(request))
                .await
                .map_err(|_| "the collector did not answer in time")??;
            let (parts, body) = answer.into_parts();
            let body = Limited::new(body, MAX_ANSWER).collect().await?.to_bytes();
            Ok::<_, HttpError>(Response::from_parts(parts, body))
        });
        sent.await?
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn read(vars: &[(&str, &str)]) -> Result<Settings, String> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Settings::read("api", |k| vars.get(k).cloned())
    }

    #[test]
    fn traces_are_on_only_with_an_endpoint_and_refuse_what_sless_cannot_send() {
        let off = read(&[]).unwrap();
        assert!(!off.on);
        assert_eq!(off.service_name, "sless-api");
        let on = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://127.0.0.1:4318/")]).unwrap();
        assert!(on.on);
        assert_eq!(on.endpoint, "http://127.0.0.1:4318/v1/traces");
        let named = read(&[
            ("OTEL_EXPORTER_OTLP_ENDPOINT", "http://ignored:4318"),
            ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://c:4318/traces"),
            ("OTEL_SERVICE_NAME", "edge"),
        ])
        .unwrap();
        assert_eq!((named.on, named.service_name.as_str()), (true, "edge"));
        assert_eq!(named.endpoint, "http://c:4318/traces");
        for disabled in [
            ("OTEL_SDK_DISABLED", "true"),
            ("OTEL_TRACES_EXPORTER", "none"),
        ] {
            let s = read(&[("OTEL_EXPORTER_OTLP_ENDPOINT", "http://c:4318"), disabled]).unwrap();
            assert!(!s.on, "{disabled:?}");
        }
        let refused = [
            (("OTEL_EXPORTER_OTLP_ENDPOINT", "https://c:4318"), "http://"),
            (("OTEL_EXPORTER_OTLP_PROTOCOL", "grpc"), "http/protobuf"),
            (
                ("OTEL_EXPORTER_OTLP_TRACES_PROTOCOL", "http/json"),
                "http/protobuf",
            ),
            (("OTEL_TRACES_EXPORTER", "zipkin"), "otlp"),
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

    #[test]
    fn a_traceparent_parses_only_when_well_formed() {
        let tp = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01";
        let sc = parse(tp).unwrap();
        assert_eq!(
            sc.trace_id().to_string(),
            "4bf92f3577b34da6a3ce929d0e0e4736"
        );
        assert_eq!(sc.span_id().to_string(), "00f067aa0ba902b7");
        for bad in [
            "",
            "00-00000000000000000000000000000000-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01",
            "00-4bf92f3577b34da6a3ce929d0e0e47-00f067aa0ba902b7-01",
            "00-4BF92F3577B34DA6A3CE929D0E0E4736-00f067aa0ba902b7-01",
            "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01-extra",
            "ff-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
            "junk",
        ] {
            assert!(parse(bad).is_none(), "{bad:?}");
        }
    }
}
