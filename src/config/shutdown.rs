//! How the API role stops (`sless api`, and the API of `sless dev` and
//! `serve`): how long it goes on serving once told to stop, and how long
//! the calls in flight then have to finish.

use std::time::Duration;

use anyhow::bail;

use super::{Get, number_from};

/// The API's stop, from `SLESS_SHUTDOWN_DELAY_SECS` and `SLESS_DRAIN_SECS`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Shutdown {
    /// From the stop signal until the listeners close: `/readyz` answers
    /// 503 and everything else is served as before, so that a load
    /// balancer polling readiness has moved away first (0 to 300 s).
    pub delay: Duration,
    /// Then how long the calls in flight have to finish before their
    /// connections are closed under them (0 to 3600 s).
    pub drain: Duration,
}

impl Shutdown {
    pub const DEFAULT_DELAY: Duration = Duration::ZERO;
    pub const DEFAULT_DRAIN: Duration = Duration::from_secs(30);

    pub(super) fn from(get: Get<'_>) -> anyhow::Result<Shutdown> {
        let delay: f64 = number_from(
            get,
            "SLESS_SHUTDOWN_DELAY_SECS",
            Self::DEFAULT_DELAY.as_secs_f64(),
        )?;
        if !(0.0..=300.0).contains(&delay) {
            bail!("SLESS_SHUTDOWN_DELAY_SECS must be between 0 and 300 (seconds)");
        }
        let drain: f64 = number_from(get, "SLESS_DRAIN_SECS", Self::DEFAULT_DRAIN.as_secs_f64())?;
        if !(0.0..=3600.0).contains(&drain) {
            bail!("SLESS_DRAIN_SECS must be between 0 and 3600 (seconds)");
        }
        Ok(Shutdown {
            delay: Duration::from_secs_f64(delay),
            drain: Duration::from_secs_f64(drain),
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with(vars: &[(&str, &str)]) -> anyhow::Result<Shutdown> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Shutdown::from(&|name| vars.get(name).cloned())
    }

    #[test]
    fn a_stop_drains_for_30_seconds_without_a_delay_by_default() {
        let d = with(&[]).unwrap();
        assert_eq!(d.delay, Duration::ZERO);
        assert_eq!(d.drain, Duration::from_secs(30));
    }

    #[test]
    fn the_delay_and_the_drain_take_seconds_with_fractions() {
        let s = with(&[
            ("SLESS_SHUTDOWN_DELAY_SECS", "5"),
            ("SLESS_DRAIN_SECS", "0.5"),
        ])
        .unwrap();
        assert_eq!(s.delay, Duration::from_secs(5));
        assert_eq!(s.drain, Duration::from_millis(500));
        let none = with(&[("SLESS_DRAIN_SECS", "0")]).unwrap();
        assert_eq!(none.drain, Duration::ZERO);
    }

    #[test]
    fn a_bad_delay_or_drain_is_refused_naming_its_variable() {
        for (name, value) in [
            ("SLESS_SHUTDOWN_DELAY_SECS", "-1"),
            ("SLESS_SHUTDOWN_DELAY_SECS", "301"),
            ("SLESS_SHUTDOWN_DELAY_SECS", "soon"),
            ("SLESS_SHUTDOWN_DELAY_SECS", "NaN"),
            ("SLESS_DRAIN_SECS", "-0.5"),
            ("SLESS_DRAIN_SECS", "3601"),
            ("SLESS_DRAIN_SECS", "inf"),
            ("SLESS_DRAIN_SECS", "30s"),
        ] {
            let e = with(&[(name, value)]).unwrap_err().to_string();
            assert!(e.starts_with(name), "{name}={value}: {e}");
        }
    }
}
