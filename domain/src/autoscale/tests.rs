use super::*;

const BOUNDS: Bounds = Bounds {
    min: 1,
    max: 16,
    concurrency: 1,
};

/// Feeds `in_flight` every half second from `from` to `to` and decides
/// after each sample, as the worker does; returns the count at the end and
/// every decision.
fn run(
    load: &mut Load,
    policy: &Policy,
    mut current: u32,
    from: f64,
    to: f64,
    in_flight: impl Fn(f64) -> f64,
) -> (u32, Vec<(f64, Scale)>) {
    let mut decisions = Vec::new();
    let mut t = from;
    while t < to {
        load.record(policy, t, in_flight(t));
        if let Some(s) = load.decide(policy, BOUNDS, current, t) {
            current = s.to;
            decisions.push((t, s));
        }
        t += 0.5;
    }
    (current, decisions)
}

#[test]
fn a_burst_panics_and_scales_out_within_seconds() {
    let policy = Policy::default();
    let mut load = Load::default();
    // Quiet for a minute, then 32 callers of a one-at-a-time function.
    let (n, quiet) = run(&mut load, &policy, 1, 0.0, 60.0, |_| 0.5);
    assert_eq!((n, quiet.len()), (1, 0));
    let (n, decisions) = run(&mut load, &policy, 1, 60.0, 65.0, |_| 32.0);
    assert_eq!(n, 16, "{decisions:?}");
    let (at, first) = &decisions[0];
    assert!(*at < 61.0, "the first decision came at {at}");
    assert_eq!(first.window, ScaleWindow::Panic);
    assert!(load.panicking());
}

#[test]
fn no_scale_in_while_panicking_then_in_by_at_most_half_per_step() {
    let policy = Policy::default();
    let mut load = Load::default();
    let (n, _) = run(&mut load, &policy, 1, 0.0, 10.0, |_| 12.0);
    assert_eq!(n, 16);
    // The load drops: the panic lasts a stable window past the last burst.
    let (n, during) = run(&mut load, &policy, n, 10.0, 60.0, |_| 0.0);
    assert_eq!((n, during.len()), (16, 0), "{during:?}");
    let (n, after) = run(&mut load, &policy, n, 60.0, 200.0, |_| 0.0);
    assert_eq!(n, 1);
    let mut from = 16;
    for (_, s) in &after {
        assert!(s.to * 2 >= from, "{from} -> {}", s.to);
        assert_eq!(s.window, ScaleWindow::Stable);
        from = s.to;
    }
    // Spaced by the scale-down delay: a bounded rate of events.
    for pair in after.windows(2) {
        assert!(pair[1].0 - pair[0].0 >= policy.scale_down_delay);
    }
}

#[test]
fn a_steady_load_holds_a_steady_count_without_decisions() {
    let policy = Policy::default();
    let mut load = Load::default();
    // 3.3 in flight at 0.7 per instance: five instances.
    let (n, _) = run(&mut load, &policy, 1, 0.0, 120.0, |_| 3.3);
    assert_eq!(n, 5);
    let (n, later) = run(&mut load, &policy, n, 120.0, 600.0, |t| {
        3.3 + if (t as u64).is_multiple_of(2) {
            0.3
        } else {
            -0.3
        }
    });
    assert_eq!((n, later.len()), (5, 0), "{later:?}");
}

#[test]
fn the_bounds_hold_and_the_reason_names_the_measurement() {
    let policy = Policy::default();
    let mut load = Load::default();
    load.record(&policy, 0.0, 100.0);
    let bounds = Bounds {
        min: 2,
        max: 4,
        concurrency: 10,
    };
    let s = load.decide(&policy, bounds, 2, 0.0).unwrap();
    assert_eq!(s.to, 4);
    assert_eq!(s.observed, InFlight(100.0));
    assert!(s.reason.contains("100.0 calls in flight"), "{}", s.reason);
    assert!(s.reason.contains("concurrency 10"), "{}", s.reason);
    // Nothing measured: nothing decided.
    assert_eq!(Load::default().decide(&policy, bounds, 3, 0.0), None);
}
