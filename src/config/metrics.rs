//! The metrics of every role (`SLESS_METRICS_*`, docs/observability.md),
//! and its traces (the standard `OTEL_*` variables).

use std::net::SocketAddr;

use anyhow::bail;
use sless_telemetry::FunctionLabels;

use super::source::var;
use super::{Get, number_from};

/// How a process exposes its metrics.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Metrics {
    /// `SLESS_METRICS`: `on` (the default) or `off` (nothing is counted,
    /// and `/metrics` is not served).
    pub on: bool,
    /// `SLESS_METRICS_LISTEN`: a listener of its own for `/metrics`, with
    /// no token asked (for a scraper on a private network). Unset: the API
    /// role and `sless dev` serve it on the API's port to admin tokens;
    /// a worker or projector alone does not serve it.
    pub listen: Option<SocketAddr>,
    /// `SLESS_METRICS_FUNCTION_LABELS` and
    /// `SLESS_METRICS_FUNCTIONS_PER_NAMESPACE`.
    pub labels: FunctionLabels,
}

impl Metrics {
    pub fn from_env() -> anyhow::Result<Metrics> {
        Metrics::from(&var)
    }

    pub(super) fn from(get: Get<'_>) -> anyhow::Result<Metrics> {
        let on = match get("SLESS_METRICS").as_deref() {
            None | Some("on") => true,
            Some("off") => false,
            Some(other) => bail!("SLESS_METRICS={other:?}: on or off"),
        };
        let listen = match get("SLESS_METRICS_LISTEN") {
            None => None,
            Some(v) => Some(v.parse::<SocketAddr>().map_err(|_| {
                anyhow::anyhow!(
                    "SLESS_METRICS_LISTEN={v:?}: an address and port, e.g. 127.0.0.1:9464"
                )
            })?),
        };
        let enabled = match get("SLESS_METRICS_FUNCTION_LABELS").as_deref() {
            None | Some("true" | "1") => true,
            Some("false" | "0") => false,
            Some(other) => bail!("SLESS_METRICS_FUNCTION_LABELS={other:?}: true or false"),
        };
        let per_namespace: usize = number_from(get, "SLESS_METRICS_FUNCTIONS_PER_NAMESPACE", 100)?;
        if !(1..=10_000).contains(&per_namespace) {
            bail!("SLESS_METRICS_FUNCTIONS_PER_NAMESPACE={per_namespace} must be from 1 to 10000");
        }
        Ok(Metrics {
            on,
            listen,
            labels: FunctionLabels {
                enabled,
                per_namespace,
            },
        })
    }
}

/// Whether the process of `role` sends traces, and whether it exports what
/// functions print as OTLP log records, as the standard variables say
/// (`OTEL_EXPORTER_OTLP_ENDPOINT`, `OTEL_EXPORTER_OTLP_TRACES_ENDPOINT`,
/// `OTEL_EXPORTER_OTLP_LOGS_ENDPOINT`, `OTEL_SERVICE_NAME`,
/// `OTEL_SDK_DISABLED`, `OTEL_TRACES_EXPORTER`, `OTEL_LOGS_EXPORTER`,
/// `OTEL_EXPORTER_OTLP_PROTOCOL` and the `_TRACES_`/`_LOGS_` ones; for logs
/// `OTEL_EXPORTER_OTLP_HEADERS` and `OTEL_EXPORTER_OTLP_LOGS_HEADERS`); the
/// OpenTelemetry SDK itself reads the traces' sampler, batches, headers
/// and timeout.
pub fn traces(
    role: &str,
) -> anyhow::Result<(
    sless_telemetry::trace::Settings,
    sless_telemetry::logs::Settings,
)> {
    let traces = sless_telemetry::trace::Settings::read(role, var).map_err(anyhow::Error::msg)?;
    let logs = sless_telemetry::logs::Settings::read(role, var).map_err(anyhow::Error::msg)?;
    Ok((traces, logs))
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with(vars: &[(&str, &str)]) -> anyhow::Result<Metrics> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Metrics::from(&|name| vars.get(name).cloned())
    }

    #[test]
    fn metrics_settings_have_defaults_and_name_a_bad_value() {
        let d = with(&[]).unwrap();
        assert_eq!(d.listen, None);
        assert!(d.on);
        assert!(!with(&[("SLESS_METRICS", "off")]).unwrap().on);
        assert_eq!(d.labels, FunctionLabels::default());
        let s = with(&[
            ("SLESS_METRICS_LISTEN", "127.0.0.1:9464"),
            ("SLESS_METRICS_FUNCTION_LABELS", "false"),
            ("SLESS_METRICS_FUNCTIONS_PER_NAMESPACE", "20"),
        ])
        .unwrap();
        assert_eq!(s.listen, Some("127.0.0.1:9464".parse().unwrap()));
        assert!(!s.labels.enabled);
        assert_eq!(s.labels.per_namespace, 20);
        for (name, value) in [
            ("SLESS_METRICS_LISTEN", "9464"),
            ("SLESS_METRICS", "maybe"),
            ("SLESS_METRICS_FUNCTION_LABELS", "maybe"),
            ("SLESS_METRICS_FUNCTIONS_PER_NAMESPACE", "0"),
            ("SLESS_METRICS_FUNCTIONS_PER_NAMESPACE", "many"),
        ] {
            let e = with(&[(name, value)]).unwrap_err().to_string();
            assert!(e.starts_with(name), "{name}={value}: {e}");
        }
    }
}
