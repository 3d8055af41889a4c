//! How many instances a function's load calls for: a pure decision on the
//! calls in flight measured over time, after Knative's autoscaler. Each
//! instance is given a target of `concurrency × utilisation` calls in
//! flight; the average over a long *stable* window says how many
//! instances serve, the average over a short *panic* window catches a
//! burst. When the panic window asks for at least `panic_threshold` times
//! what serves, it panics: it scales out on the panic window and never in,
//! until a whole stable window has passed without a burst. Scaling in
//! goes at most `max_scale_down_rate` times lower per decision, and no
//! sooner than `scale_down_delay` after the last change. Scaling to zero
//! is not decided here: it is the idle sweep's, after a function's idle
//! window.
//!
//! Times are seconds on any clock that only goes forward; the caller
//! samples and keeps one [`Load`] per function.

use std::collections::VecDeque;

use crate::events::{InFlight, ScaleWindow};

/// The autoscaler's settings (the same for every function).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Policy {
    /// The long window, in seconds (Knative: 60).
    pub stable_window: f64,
    /// The short window, in seconds (Knative: 6).
    pub panic_window: f64,
    /// The share of `concurrency` each instance is aimed at (Knative: 0.7).
    pub utilisation: f64,
    /// Panics when the panic window asks for this many times what serves
    /// (Knative: 2, "200%").
    pub panic_threshold: f64,
    /// At most this many times fewer instances per decision (Knative: 2).
    pub max_scale_down_rate: f64,
    /// No scaling in sooner than this after a change, in seconds.
    pub scale_down_delay: f64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            stable_window: 60.0,
            panic_window: 6.0,
            utilisation: 0.7,
            panic_threshold: 2.0,
            max_scale_down_rate: 2.0,
            scale_down_delay: 6.0,
        }
    }
}

/// The share of its target an instance may be loaded to after scaling in.
const SCALE_IN_MARGIN: f64 = 0.9;

/// What bounds one function's count.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Bounds {
    /// At least one: scaling to zero is not this decision's.
    pub min: u32,
    pub max: u32,
    /// Calls one instance takes at once.
    pub concurrency: u32,
}

/// One function's measurements and where its decisions stand.
#[derive(Debug, Clone, Default)]
pub struct Load {
    /// (when, calls in flight), oldest first, over the stable window.
    samples: VecDeque<(f64, f64)>,
    /// When it last saw a burst, while it panics.
    panicking_since: Option<f64>,
    /// When the count last changed (as this autoscaler saw it).
    changed_at: Option<f64>,
    /// The count it last saw.
    last_count: Option<u32>,
}

/// A decision: serve with `to` instances.
#[derive(Debug, Clone, PartialEq)]
pub struct Scale {
    pub to: u32,
    pub observed: InFlight,
    pub window: ScaleWindow,
    /// For people: what it measured and aimed at.
    pub reason: String,
}

impl Load {
    /// Records `in_flight` calls (summed over every API process) at `at`,
    /// and forgets what is older than the stable window.
    pub fn record(&mut self, policy: &Policy, at: f64, in_flight: f64) {
        self.samples.push_back((at, in_flight.max(0.0)));
        while self
            .samples
            .front()
            .is_some_and(|(t, _)| *t < at - policy.stable_window)
        {
            self.samples.pop_front();
        }
    }

    /// The average over the samples of the last `window` seconds.
    fn average(&self, now: f64, window: f64) -> Option<f64> {
        let (sum, n) = self
            .samples
            .iter()
            .rev()
            .take_while(|(t, _)| *t >= now - window)
            .fold((0.0, 0usize), |(s, n), (_, v)| (s + v, n + 1));
        (n > 0).then(|| sum / n as f64)
    }

    /// True while it panics.
    pub fn panicking(&self) -> bool {
        self.panicking_since.is_some()
    }

    /// How many instances the load calls for, given that `current` serve
    /// now: `None` when that is `current` (or nothing was measured yet).
    pub fn decide(
        &mut self,
        policy: &Policy,
        bounds: Bounds,
        current: u32,
        now: f64,
    ) -> Option<Scale> {
        if self.last_count != Some(current) {
            // Changed by someone else's decision, a start from zero or a
            // change of the settings: counts as a change.
            self.changed_at = Some(now);
            self.last_count = Some(current);
        }
        let stable = self.average(now, policy.stable_window)?;
        let burst = self.average(now, policy.panic_window)?;
        let per_instance = (bounds.concurrency as f64 * policy.utilisation).max(f64::MIN_POSITIVE);
        let wanted = |load: f64| (load / per_instance).ceil().min(u32::MAX as f64) as u32;
        let (min, max) = (bounds.min.max(1), bounds.max.max(bounds.min.max(1)));
        let (want_stable, want_burst) = (wanted(stable), wanted(burst));
        if current > 0 && want_burst as f64 >= policy.panic_threshold * current as f64 {
            self.panicking_since = Some(now);
        } else if self
            .panicking_since
            .is_some_and(|since| now - since >= policy.stable_window)
        {
            self.panicking_since = None;
        }
        let (to, observed, window) = if self.panicking() {
            (want_burst.max(current), burst, ScaleWindow::Panic)
        } else {
            let floor = (current as f64 / policy.max_scale_down_rate).ceil() as u32;
            let recently = self
                .changed_at
                .is_some_and(|at| now - at < policy.scale_down_delay);
            // Scaling in asks for room: the load must fit the fewer
            // instances at `SCALE_IN_MARGIN` of their target, or a load
            // at a boundary would add and take an instance each step.
            let want_in = wanted(stable / SCALE_IN_MARGIN);
            let to = if want_stable > current {
                want_stable
            } else if want_in < current && !recently {
                want_in.max(floor)
            } else {
                current
            };
            (to, stable, ScaleWindow::Stable)
        };
        let to = to.clamp(min, max);
        if to == current {
            return None;
        }
        let seconds = match window {
            ScaleWindow::Panic => policy.panic_window,
            ScaleWindow::Stable => policy.stable_window,
        };
        let reason = format!(
            "{observed:.1} calls in flight over the last {seconds} s ({} window); each instance is aimed at {per_instance:.1} ({:.0}% of concurrency {}); bounded by {min} to {max}",
            window.as_str(),
            policy.utilisation * 100.0,
            bounds.concurrency
        );
        self.changed_at = Some(now);
        self.last_count = Some(to);
        Some(Scale {
            to,
            observed: InFlight((observed * 1000.0).round() / 1000.0),
            window,
            reason,
        })
    }
}

#[cfg(test)]
mod tests;
