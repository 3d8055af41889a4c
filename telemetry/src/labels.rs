//! The label sets of the metrics.

use prometheus_client::encoding::EncodeLabelSet;

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct HttpLabels {
    /// The route's template (`/v1/namespaces/{namespace}/functions`), never
    /// the path asked for.
    pub route: String,
    pub method: String,
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RouteLabels {
    pub route: String,
    pub method: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct InvocationLabels {
    pub namespace: String,
    pub function: String,
    /// `2xx`, `3xx`, `4xx` or `5xx`.
    pub code_class: String,
    /// What made the call: `http`, `job`, `cron`.
    pub origin: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct FunctionLabelSet {
    pub namespace: String,
    pub function: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StatusLabels {
    pub status: u16,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ProjectionLabels {
    pub projection: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct StepLabels {
    pub runtime: String,
    /// `local` or `kubernetes`.
    pub driver: String,
    /// `succeeded`; `failed` (the function's build or start failed);
    /// `error` (the platform's: sless tries again).
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct RuntimeLabels {
    pub runtime: String,
    pub driver: String,
}

/// A step of the worker's that [`Metrics::step`] counts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Step {
    Build,
    Deploy,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct WorkLabels {
    pub kind: String,
    /// `done`, `retried`, `dead` (out of attempts, or failed for good),
    /// `lease_lost`, `handed_back` (at shutdown).
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OutcomeLabels {
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpLabels {
    pub operation: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct OpOutcomeLabels {
    pub operation: String,
    /// `ok` or `error`.
    pub outcome: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ConnectionLabels {
    /// `idle` or `in_use`.
    pub state: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct KindLabels {
    pub kind: String,
}

#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct QueueLabels {
    pub kind: String,
    pub state: String,
}
