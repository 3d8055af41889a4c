//! The metrics of every role of sless, in one registry per process
//! ([`Metrics`]), written in the Prometheus text format (0.0.4) or, when a
//! scraper asks for it, OpenMetrics (docs/observability.md lists them).
//!
//! Labels that name a function are bounded: each namespace gets at most
//! [`FunctionLabels::per_namespace`] function names, the rest are counted
//! under `function="other"`; with per-function labels off, every function
//! is `function=""`. A tenant creating 10,000 functions adds at most that
//! many series per metric.
//!
//! This crate sits at the bottom of the dependency graph: it depends on no
//! other crate of sless.

mod labels;
pub mod logs;
pub mod trace;

pub use labels::*;

use std::collections::{HashMap, HashSet};
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex, OnceLock};

use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;

/// The `Content-Type` of the Prometheus text format.
pub const PROMETHEUS_TEXT: &str = prometheus_client::encoding::prometheus_text::CONTENT_TYPE;
/// The `Content-Type` of OpenMetrics' text format.
pub const OPENMETRICS_TEXT: &str = "application/openmetrics-text; version=1.0.0; charset=utf-8";
/// The function label of the functions past a namespace's cap.
pub const OTHER: &str = "other";

/// How function names become labels.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FunctionLabels {
    /// `SLESS_METRICS_FUNCTION_LABELS` (default true).
    pub enabled: bool,
    /// `SLESS_METRICS_FUNCTIONS_PER_NAMESPACE` (default 100).
    pub per_namespace: usize,
}

impl Default for FunctionLabels {
    fn default() -> Self {
        FunctionLabels {
            enabled: true,
            per_namespace: 100,
        }
    }
}

/// The metrics of one process.
pub struct Metrics {
    registry: Registry,
    labels: FunctionLabels,
    /// `false`: nothing is counted (`SLESS_METRICS=off`).
    on: bool,
    /// The function names given a label of their own, per namespace.
    named: Mutex<HashMap<String, HashSet<String>>>,
    pub http_requests: Family<HttpLabels, Counter>,
    pub http_duration: Family<RouteLabels, Histogram>,
    pub invocations: Family<InvocationLabels, Counter>,
    pub invocation_duration: Family<FunctionLabelSet, Histogram>,
    pub cold_starts: Family<FunctionLabelSet, Counter>,
    /// Lines functions printed that were kept.
    pub log_lines: Family<FunctionLabelSet, Counter>,
    /// Lines functions printed that were not kept: over their budget, or
    /// while the writer could not keep up.
    pub log_lines_dropped: Family<FunctionLabelSet, Counter>,
    /// Kept lines not sent as OTLP log records ([`logs`]).
    pub log_lines_not_exported: Family<FunctionLabelSet, Counter>,
    pub proxy_errors: Family<StatusLabels, Counter>,
    pub projector_position: Family<ProjectionLabels, Gauge>,
    pub projector_lag_events: Family<ProjectionLabels, Gauge>,
    pub projector_lag_seconds: Family<ProjectionLabels, Gauge<f64, AtomicU64>>,
    pub projector_batch_events: Family<ProjectionLabels, Histogram>,
    pub projector_apply_duration: Family<ProjectionLabels, Histogram>,
    pub queue_items: Family<QueueLabels, Gauge>,
    pub function_instances: Family<FunctionLabelSet, Gauge>,
    pub function_in_flight: Family<FunctionLabelSet, Gauge<f64, AtomicU64>>,
    pub builds: Family<StepLabels, Counter>,
    pub build_duration: Family<RuntimeLabels, Histogram>,
    pub deploys: Family<StepLabels, Counter>,
    pub deploy_duration: Family<RuntimeLabels, Histogram>,
    /// Function processes (local driver) this process runs.
    pub processes: Gauge,
    pub work: Family<WorkLabels, Counter>,
    pub work_duration: Family<KindLabels, Histogram>,
    pub appends: Family<OutcomeLabels, Counter>,
    pub append_duration: Histogram,
    pub s3: Family<OpOutcomeLabels, Counter>,
    pub s3_duration: Family<OpLabels, Histogram>,
    pub db_connections: Family<ConnectionLabels, Gauge>,
    /// The most connections this process's PostgreSQL pool opens.
    pub db_max_connections: Gauge,
    /// Clients following the audit log (its Server-Sent Events tail).
    pub audit_followers: Gauge,
    /// Clients following a build's log live (`?follow=true`, or SSE).
    pub build_log_followers: Gauge,
    /// Clients following a function's log live.
    pub function_log_followers: Gauge,
    /// From the claim of a work item to the start of its handling.
    pub work_start_delay: Family<KindLabels, Histogram>,
    /// The attempt number a work item was started with.
    pub work_attempts: Family<KindLabels, Histogram>,
}

/// A live tail whose followers [`Metrics::follow`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tail {
    /// The audit log's (`GET …/events/stream`): `sless_audit_followers`.
    Audit,
    /// A build's log (`GET …/build-log?follow=true`):
    /// `sless_build_log_followers`.
    BuildLog,
    /// A function's log (`GET …/logs?follow=true`):
    /// `sless_function_log_followers`.
    FunctionLog,
}

/// One client counted by [`Metrics::follow`] while this lives.
pub struct Following(Option<Gauge>);

impl Drop for Following {
    fn drop(&mut self) {
        if let Some(level) = &self.0 {
            level.dec();
        }
    }
}

static GLOBAL: OnceLock<Arc<Metrics>> = OnceLock::new();

/// Makes `metrics` the process's registry, which [`global`] returns from
/// now on; `false` when one was installed (or used) already.
pub fn install(metrics: Metrics) -> bool {
    GLOBAL.set(Arc::new(metrics)).is_ok()
}

/// The process's registry: what [`install`] made it, else one with the
/// default labels, made on first use.
pub fn global() -> &'static Arc<Metrics> {
    GLOBAL.get_or_init(|| Arc::new(Metrics::default()))
}

fn seconds_histogram() -> Histogram {
    // 0.5 ms to about 65 s.
    Histogram::new(exponential_buckets(0.0005, 2.0, 18))
}

fn attempts_histogram() -> Histogram {
    Histogram::new([1.0, 2.0, 3.0, 5.0, 8.0])
}

impl Default for Metrics {
    fn default() -> Self {
        Metrics::new(FunctionLabels::default())
    }
}

impl Metrics {
    /// Every metric, registered, at zero.
    pub fn new(labels: FunctionLabels) -> Metrics {
        let mut registry = Registry::default();
        let http_requests = Family::<HttpLabels, Counter>::default();
        let http_duration =
            Family::<RouteLabels, Histogram>::new_with_constructor(seconds_histogram as fn() -> _);
        let invocations = Family::<InvocationLabels, Counter>::default();
        let invocation_duration = Family::<FunctionLabelSet, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> _,
        );
        let cold_starts = Family::<FunctionLabelSet, Counter>::default();
        let log_lines = Family::<FunctionLabelSet, Counter>::default();
        let log_lines_dropped = Family::<FunctionLabelSet, Counter>::default();
        let log_lines_not_exported = Family::<FunctionLabelSet, Counter>::default();
        let proxy_errors = Family::<StatusLabels, Counter>::default();
        let projector_position = Family::<ProjectionLabels, Gauge>::default();
        let projector_lag_events = Family::<ProjectionLabels, Gauge>::default();
        let projector_lag_seconds = Family::<ProjectionLabels, Gauge<f64, AtomicU64>>::default();
        let projector_batch_events = Family::<ProjectionLabels, Histogram>::new_with_constructor(
            (|| Histogram::new(exponential_buckets(1.0, 4.0, 8))) as fn() -> _,
        );
        let projector_apply_duration = Family::<ProjectionLabels, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> _,
        );
        let queue_items = Family::<QueueLabels, Gauge>::default();
        let function_instances = Family::<FunctionLabelSet, Gauge>::default();
        let function_in_flight = Family::<FunctionLabelSet, Gauge<f64, AtomicU64>>::default();
        let builds = Family::<StepLabels, Counter>::default();
        let build_duration = Family::<RuntimeLabels, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> _,
        );
        let deploys = Family::<StepLabels, Counter>::default();
        let deploy_duration = Family::<RuntimeLabels, Histogram>::new_with_constructor(
            seconds_histogram as fn() -> _,
        );
        let processes = Gauge::default();
        let appends = Family::<OutcomeLabels, Counter>::default();
        let append_duration = seconds_histogram();
        let s3 = Family::<OpOutcomeLabels, Counter>::default();
        let s3_duration =
            Family::<OpLabels, Histogram>::new_with_constructor(seconds_histogram as fn() -> _);
        let db_connections = Family::<ConnectionLabels, Gauge>::default();
        let db_max_connections = Gauge::default();
        let audit_followers = Gauge::default();
        registry.register(
            "sless_audit_followers",
            "Clients following the audit log's Server-Sent Events tail in this process",
            audit_followers.clone(),
        );
        let build_log_followers = Gauge::default();
        let function_log_followers = Gauge::default();
        registry.register(
            "sless_function_log_followers",
            "Clients following a function's log live",
            function_log_followers.clone(),
        );
        registry.register(
            "sless_build_log_followers",
            "Clients following a build's log live (follow=true or Server-Sent Events) in this process",
            build_log_followers.clone(),
        );
        registry.register(
            "sless_event_appends",
            "Appends to the event log by this process, by outcome (appended, conflict: the stream had moved on)",
            appends.clone(),
        );
        registry.register(
            "sless_event_append_duration_seconds",
            "How long an append to the event log took (one statement)",
            append_duration.clone(),
        );
        registry.register(
            "sless_s3_operations",
            "Operations on the blob store, by operation and outcome",
            s3.clone(),
        );
        registry.register(
            "sless_s3_operation_duration_seconds",
            "How long operations on the blob store took, by operation",
            s3_duration.clone(),
        );
        registry.register(
            "sless_db_pool_connections",
            "Connections of this process's PostgreSQL pool, idle or in use",
            db_connections.clone(),
        );
        registry.register(
            "sless_db_pool_max_connections",
            "The most connections this process's PostgreSQL pool opens; at in_use = max, acquirers wait",
            db_max_connections.clone(),
        );
        let work = Family::<WorkLabels, Counter>::default();
        let work_duration =
            Family::<KindLabels, Histogram>::new_with_constructor(seconds_histogram as fn() -> _);
        registry.register(
            "sless_queue_work",
            "Work items this worker handled, by kind and outcome (done, retried, dead, lease_lost, handed_back)",
            work.clone(),
        );
        registry.register(
            "sless_queue_work_duration_seconds",
            "How long handling a work item took, by kind",
            work_duration.clone(),
        );
        let work_start_delay =
            Family::<KindLabels, Histogram>::new_with_constructor(seconds_histogram as fn() -> _);
        registry.register(
            "sless_work_start_delay_seconds",
            "From the claim of a work item to the start of its handling, by kind",
            work_start_delay.clone(),
        );
        let work_attempts =
            Family::<KindLabels, Histogram>::new_with_constructor(attempts_histogram as fn() -> _);
        registry.register(
            "sless_work_attempts",
            "The attempt number work items were started with (1: the first), by kind",
            work_attempts.clone(),
        );
        registry.register(
            "sless_builds",
            "Builds a worker ran, by runtime, driver and outcome",
            builds.clone(),
        );
        registry.register(
            "sless_build_duration_seconds",
            "How long builds took, by runtime and driver",
            build_duration.clone(),
        );
        registry.register(
            "sless_deploys",
            "Deploys (starts of a version) a worker ran, by runtime, driver and outcome",
            deploys.clone(),
        );
        registry.register(
            "sless_deploy_duration_seconds",
            "How long deploys took, until the function answered its health check",
            deploy_duration.clone(),
        );
        registry.register(
            "sless_function_processes_running",
            "Function processes this worker's local driver runs",
            processes.clone(),
        );
        registry.register(
            "sless_http_requests",
            "Requests the API and the functions' origin answered, by route template, method and status",
            http_requests.clone(),
        );
        registry.register(
            "sless_http_request_duration_seconds",
            "How long the API and the functions' origin took to answer, by route template and method",
            http_duration.clone(),
        );
        registry.register(
            "sless_function_invocations",
            "Calls of functions through /fn, by namespace, function, status class and origin",
            invocations.clone(),
        );
        registry.register(
            "sless_function_duration_seconds",
            "How long calls of functions through /fn took, held calls' wait included",
            invocation_duration.clone(),
        );
        registry.register(
            "sless_function_cold_starts",
            "Calls of functions through /fn that found the function at zero and were held while it started",
            cold_starts.clone(),
        );
        registry.register(
            "sless_function_log_lines",
            "Lines functions printed (stdout and stderr) that sless kept",
            log_lines.clone(),
        );
        registry.register(
            "sless_function_log_lines_dropped",
            "Lines functions printed that sless did not keep: over the function's budget, or while the writer could not keep up",
            log_lines_dropped.clone(),
        );
        registry.register(
            "sless_function_log_lines_not_exported",
            "Kept lines functions printed that were not sent as OTLP log records: the export queue was full, or the collector refused them",
            log_lines_not_exported.clone(),
        );
        registry.register(
            "sless_proxy_errors",
            "Calls through /fn the proxy answered itself with an error, by status (413, 502, 503, 504)",
            proxy_errors.clone(),
        );
        registry.register(
            "sless_projector_checkpoint_position",
            "The last event position each projection has applied",
            projector_position.clone(),
        );
        registry.register(
            "sless_projector_lag_events",
            "Events committed that a projection has not applied yet",
            projector_lag_events.clone(),
        );
        registry.register(
            "sless_projector_lag_seconds",
            "How long ago the oldest event a projection has not applied was recorded (0 when caught up)",
            projector_lag_seconds.clone(),
        );
        registry.register(
            "sless_projector_batch_events",
            "Events in each batch a projection applied",
            projector_batch_events.clone(),
        );
        registry.register(
            "sless_projector_apply_duration_seconds",
            "How long applying one batch took, its transaction's commit included",
            projector_apply_duration.clone(),
        );
        registry.register(
            "sless_queue_items",
            "Work items in the queue, by kind and state (pending, running, dead)",
            queue_items.clone(),
        );
        registry.register(
            "sless_function_instances",
            "Instances that serve each function, as the log says (the autoscaler's last decision within the function's bounds); functions at zero are left out",
            function_instances.clone(),
        );
        registry.register(
            "sless_function_in_flight",
            "Calls of each function in flight through /fn, summed over every API process's last report; the same in every process's scrape",
            function_in_flight.clone(),
        );
        Metrics {
            registry,
            labels,
            on: true,
            named: Mutex::new(HashMap::new()),
            http_requests,
            http_duration,
            invocations,
            invocation_duration,
            cold_starts,
            log_lines,
            log_lines_dropped,
            log_lines_not_exported,
            proxy_errors,
            projector_position,
            projector_lag_events,
            projector_lag_seconds,
            projector_batch_events,
            projector_apply_duration,
            queue_items,
            function_instances,
            function_in_flight,
            builds,
            build_duration,
            deploys,
            deploy_duration,
            processes,
            work,
            work_duration,
            appends,
            append_duration,
            s3,
            s3_duration,
            db_connections,
            db_max_connections,
            audit_followers,
            build_log_followers,
            function_log_followers,
            work_start_delay,
            work_attempts,
        }
    }

    /// Counts a build or deploy that ended with `outcome`.
    pub fn step(&self, step: Step, runtime: &str, driver: &str, outcome: &str, seconds: f64) {
        if !self.on {
            return;
        }
        let (count, took) = match step {
            Step::Build => (&self.builds, &self.build_duration),
            Step::Deploy => (&self.deploys, &self.deploy_duration),
        };
        count
            .get_or_create(&StepLabels {
                runtime: runtime.to_owned(),
                driver: driver.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        took.get_or_create(&RuntimeLabels {
            runtime: runtime.to_owned(),
            driver: driver.to_owned(),
        })
        .observe(seconds);
    }

    /// A registry that counts nothing: what `SLESS_METRICS=off` asks for.
    pub fn off() -> Metrics {
        Metrics {
            on: false,
            ..Metrics::default()
        }
    }

    /// Whether anything is counted.
    pub fn is_on(&self) -> bool {
        self.on
    }

    /// Counts one more client following `tail`, until the handle is
    /// dropped.
    pub fn follow(&self, tail: Tail) -> Following {
        if !self.on {
            return Following(None);
        }
        let followers = match tail {
            Tail::Audit => &self.audit_followers,
            Tail::BuildLog => &self.build_log_followers,
            Tail::FunctionLog => &self.function_log_followers,
        };
        followers.inc();
        Following(Some(followers.clone()))
    }

    /// The label of function `name` of `namespace`: its name while the
    /// namespace has room, else [`OTHER`]; `""` with function labels off.
    pub fn function_label(&self, namespace: &str, name: &str) -> String {
        if !self.labels.enabled {
            return String::new();
        }
        let mut named = self.named.lock().unwrap_or_else(|p| p.into_inner());
        let names = named.entry(namespace.to_owned()).or_default();
        if names.contains(name) {
            return name.to_owned();
        }
        if names.len() < self.labels.per_namespace {
            names.insert(name.to_owned());
            return name.to_owned();
        }
        OTHER.to_owned()
    }

    /// The labels of function `name` of `namespace`.
    pub fn function(&self, namespace: &str, name: &str) -> FunctionLabelSet {
        FunctionLabelSet {
            namespace: namespace.to_owned(),
            function: self.function_label(namespace, name),
        }
    }

    /// Records one call through `/fn`.
    pub fn invocation(
        &self,
        namespace: &str,
        name: &str,
        status: u16,
        origin: &str,
        seconds: f64,
        cold: bool,
    ) {
        if !self.on {
            return;
        }
        let function = self.function(namespace, name);
        self.invocations
            .get_or_create(&InvocationLabels {
                namespace: function.namespace.clone(),
                function: function.function.clone(),
                code_class: format!("{}xx", (status / 100).clamp(1, 5)),
                origin: origin.to_owned(),
            })
            .inc();
        self.invocation_duration
            .get_or_create(&function)
            .observe(seconds);
        if cold {
            self.cold_starts.get_or_create(&function).inc();
        }
    }

    /// Counts a work item handled in `seconds` that ended with `outcome`.
    pub fn work(&self, kind: &str, outcome: &str, seconds: f64) {
        if !self.on {
            return;
        }
        self.work
            .get_or_create(&WorkLabels {
                kind: kind.to_owned(),
                outcome: outcome.to_owned(),
            })
            .inc();
        self.work_duration
            .get_or_create(&KindLabels {
                kind: kind.to_owned(),
            })
            .observe(seconds);
    }

    /// Counts a work item of `kind` started `waited_secs` after its claim,
    /// on its `attempt`th attempt.
    pub fn work_started(&self, kind: &str, waited_secs: f64, attempt: i32) {
        if !self.on {
            return;
        }
        let kind = KindLabels {
            kind: kind.to_owned(),
        };
        self.work_start_delay
            .get_or_create(&kind)
            .observe(waited_secs);
        self.work_attempts
            .get_or_create(&kind)
            .observe(f64::from(attempt));
    }

    /// Counts a batch of `events` that `projection` applied in `seconds`.
    pub fn projector_batch(&self, projection: &str, events: usize, seconds: f64) {
        if !self.on {
            return;
        }
        let labels = ProjectionLabels {
            projection: projection.to_owned(),
        };
        self.projector_batch_events
            .get_or_create(&labels)
            .observe(events as f64);
        self.projector_apply_duration
            .get_or_create(&labels)
            .observe(seconds);
    }

    /// Counts an append to the event log.
    pub fn append(&self, conflict: bool, seconds: f64) {
        if !self.on {
            return;
        }
        let outcome = if conflict { "conflict" } else { "appended" };
        self.appends
            .get_or_create(&OutcomeLabels {
                outcome: outcome.to_owned(),
            })
            .inc();
        self.append_duration.observe(seconds);
    }

    /// Counts an operation on the blob store.
    pub fn s3(&self, operation: &str, ok: bool, seconds: f64) {
        if !self.on {
            return;
        }
        self.s3
            .get_or_create(&OpOutcomeLabels {
                operation: operation.to_owned(),
                outcome: if ok { "ok" } else { "error" }.to_owned(),
            })
            .inc();
        self.s3_duration
            .get_or_create(&OpLabels {
                operation: operation.to_owned(),
            })
            .observe(seconds);
    }

    /// Everything, in the Prometheus text format, or OpenMetrics when
    /// `openmetrics`: the body and its `Content-Type`.
    pub fn encode(&self, openmetrics: bool) -> (String, &'static str) {
        let mut out = String::new();
        let written = if openmetrics {
            prometheus_client::encoding::text::encode(&mut out, &self.registry)
                .map(|()| OPENMETRICS_TEXT)
        } else {
            prometheus_client::encoding::prometheus_text::encode(&mut out, &self.registry)
                .map(|()| PROMETHEUS_TEXT)
        };
        // Writing to a String cannot fail.
        (out, written.unwrap_or(PROMETHEUS_TEXT))
    }

    /// Whether an `Accept` header asks for OpenMetrics.
    pub fn wants_openmetrics(accept: &str) -> bool {
        accept.contains("application/openmetrics-text")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_gets_its_cap_of_function_names_and_the_rest_is_other() {
        let m = Metrics::new(FunctionLabels {
            enabled: true,
            per_namespace: 3,
        });
        for i in 0..500 {
            m.invocation("ns-a", &format!("f{i}"), 200, "http", 0.01, false);
        }
        m.invocation("ns-b", "g", 500, "http", 0.01, true);
        let (text, _) = m.encode(false);
        let series = |metric: &str| {
            text.lines()
                .filter(|l| l.starts_with(&format!("{metric}{{")))
                .count()
        };
        assert_eq!(
            series("sless_function_invocations_total"),
            3 + 1 + 1,
            "{text}"
        );
        assert!(
            text.contains(
                "sless_function_invocations_total{namespace=\"ns-a\",function=\"other\",code_class=\"2xx\",origin=\"http\"} 497"
            ),
            "{text}"
        );
        assert!(
            text.contains("sless_function_cold_starts_total{namespace=\"ns-b\",function=\"g\"} 1")
        );
        assert!(text.contains("code_class=\"5xx\""));
        // A name seen before keeps its label.
        assert_eq!(m.function_label("ns-a", "f1"), "f1");
    }

    #[test]
    fn function_labels_off_name_no_function() {
        let m = Metrics::new(FunctionLabels {
            enabled: false,
            per_namespace: 100,
        });
        m.invocation("ns", "f", 204, "http", 0.001, false);
        m.invocation("ns", "g", 204, "http", 0.001, false);
        let (text, _) = m.encode(false);
        assert!(
            text.contains(
                "sless_function_invocations_total{namespace=\"ns\",function=\"\",code_class=\"2xx\",origin=\"http\"} 2"
            ),
            "{text}"
        );
    }

    #[test]
    fn a_registry_that_is_off_counts_nothing() {
        let m = Metrics::off();
        m.invocation("ns", "f", 200, "http", 0.001, true);
        m.step(Step::Build, "python3.11", "local", "succeeded", 1.0);
        let (text, _) = m.encode(false);
        assert!(
            !text.contains("sless_function_invocations_total{"),
            "{text}"
        );
        assert!(!text.contains("sless_builds_total{"), "{text}");
    }

    #[test]
    fn a_follower_is_counted_on_its_tail_until_it_is_dropped() {
        let m = Metrics::default();
        let (a, b) = (m.follow(Tail::BuildLog), m.follow(Tail::BuildLog));
        let audit = m.follow(Tail::Audit);
        let (text, _) = m.encode(false);
        assert!(text.contains("\nsless_build_log_followers 2\n"), "{text}");
        assert!(text.contains("\nsless_audit_followers 1\n"), "{text}");
        drop(a);
        assert_eq!(m.build_log_followers.get(), 1);
        drop((b, audit));
        assert_eq!(
            (m.build_log_followers.get(), m.audit_followers.get()),
            (0, 0)
        );
        let off = Metrics::off();
        let _following = off.follow(Tail::BuildLog);
        assert_eq!(off.build_log_followers.get(), 0);
    }

    #[test]
    fn a_started_work_item_counts_its_wait_and_its_attempt() {
        let m = Metrics::default();
        m.work_started("RunJob", 0.003, 1);
        m.work_started("RunJob", 0.25, 3);
        m.work_started("ReconcileFunction", 0.001, 9);
        let (text, _) = m.encode(false);
        let has = |line: &str| assert!(text.lines().any(|l| l == line), "{line}\n{text}");
        has("# TYPE sless_work_start_delay_seconds histogram");
        has("sless_work_start_delay_seconds_count{kind=\"RunJob\"} 2");
        has("sless_work_start_delay_seconds_sum{kind=\"RunJob\"} 0.253");
        has("sless_work_start_delay_seconds_bucket{kind=\"RunJob\",le=\"0.004\"} 1");
        has("sless_work_start_delay_seconds_bucket{kind=\"RunJob\",le=\"0.256\"} 2");
        has("# TYPE sless_work_attempts histogram");
        has("sless_work_attempts_bucket{kind=\"RunJob\",le=\"1\"} 1");
        has("sless_work_attempts_bucket{kind=\"RunJob\",le=\"2\"} 1");
        has("sless_work_attempts_bucket{kind=\"RunJob\",le=\"3\"} 2");
        has("sless_work_attempts_bucket{kind=\"ReconcileFunction\",le=\"8\"} 0");
        has("sless_work_attempts_bucket{kind=\"ReconcileFunction\",le=\"+Inf\"} 1");
        let off = Metrics::off();
        off.work_started("RunJob", 0.003, 1);
        let (text, _) = off.encode(false);
        assert!(!text.contains("kind=\"RunJob\""), "{text}");
    }

    #[test]
    fn both_formats_are_written() {
        let m = Metrics::default();
        m.http_requests
            .get_or_create(&HttpLabels {
                route: "/v1/namespaces/{namespace}/functions".into(),
                method: "GET".into(),
                status: 200,
            })
            .inc();
        let (text, kind) = m.encode(false);
        assert_eq!(kind, PROMETHEUS_TEXT);
        assert!(
            text.contains("# TYPE sless_http_requests_total counter"),
            "{text}"
        );
        assert!(!text.contains("# EOF"));
        let (open, kind) = m.encode(true);
        assert_eq!(kind, OPENMETRICS_TEXT);
        assert!(open.ends_with("# EOF\n"), "{open}");
        assert!(Metrics::wants_openmetrics(
            "application/openmetrics-text;version=1.0.0,text/plain;q=0.5"
        ));
    }
}
