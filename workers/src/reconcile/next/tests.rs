//! `next`, table-driven: each row is a function's history, what was seen
//! of what runs, and the action it calls for.

use sless_domain::{
    Function, FunctionEvent, FunctionSpec, InFlight, Runtime, ScaleWindow, SourceVersion,
};
use sless_store::trigger_index::HttpTriggers;

use super::{Action, Observed, next};
use crate::driver::{Artifact, Deployment};

fn spec(memory_mb: u32) -> FunctionSpec {
    FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        scaling: Default::default(),
    }
}

fn created() -> FunctionEvent {
    FunctionEvent::FunctionCreated { spec: spec(128) }
}

fn uploaded(version: u32) -> FunctionEvent {
    FunctionEvent::FunctionUploaded(SourceVersion {
        version,
        sha256: format!("sha{version}"),
        size: 10,
        files: 1,
        zip_key: format!("zip{version}"),
        context_sha256: format!("ctx{version}"),
        context_key: format!("c{version}"),
        runtime: Some(Runtime::Python311),
    })
}

fn started(version: u32) -> FunctionEvent {
    FunctionEvent::BuildStarted { version }
}

fn built(version: u32) -> FunctionEvent {
    FunctionEvent::BuildSucceeded {
        version,
        artifact: format!("image{version}"),
    }
}

fn deployed(version: u32, node: Option<&str>) -> FunctionEvent {
    FunctionEvent::FunctionDeployed {
        version,
        endpoint: format!("http://127.0.0.1:{}", 9000 + version),
        node: node.map(str::to_owned),
        instances: vec![],
    }
}

fn build_failed(version: u32) -> FunctionEvent {
    FunctionEvent::BuildFailed {
        version,
        error: "no".into(),
        log_tail: String::new(),
    }
}

/// The history of a function that serves `version` on worker `node` (on
/// none: a cluster).
fn serving_on(version: u32, node: Option<&str>) -> Vec<FunctionEvent> {
    let mut events = vec![created()];
    for v in 1..=version {
        events.extend([uploaded(v), started(v), built(v)]);
    }
    events.push(deployed(version, node));
    events
}

fn serving(version: u32) -> Vec<FunctionEvent> {
    serving_on(version, None)
}

/// Seen from worker `here`, with the worker the log names alive or not.
fn from(here: &str, there_alive: bool, running: Option<Deployment>) -> Observed {
    Observed {
        here: Some(here.into()),
        there_alive,
        ..seen(running)
    }
}

fn running(version: u32) -> Option<Deployment> {
    Some(Deployment {
        version,
        endpoint: format!("http://127.0.0.1:{}", 9000 + version),
        artifact: Artifact {
            reference: format!("image{version}"),
        },
        node: None,
        ready: 1,
        instances: vec![],
    })
}

fn fold(events: &[FunctionEvent]) -> Function {
    events.iter().fold(Function::default(), |s, e| s.evolve(e))
}

fn seen(running: Option<Deployment>) -> Observed {
    Observed {
        running,
        ..Observed::default()
    }
}

fn with<T>(mut v: Vec<T>, more: impl IntoIterator<Item = T>) -> Vec<T> {
    v.extend(more);
    v
}

#[test]
fn each_state_calls_for_its_action() {
    let disabled = HttpTriggers {
        names: vec!["web".into()],
        enabled: 0,
    };
    let rows: Vec<(&str, Vec<FunctionEvent>, Observed, Action)> = vec![
        ("never created", vec![], seen(None), Action::Remove),
        (
            "created, nothing uploaded",
            vec![created()],
            seen(None),
            Action::Remove,
        ),
        (
            "deleted",
            with(serving(1), [FunctionEvent::FunctionDeleted {}]),
            seen(running(1)),
            Action::Remove,
        ),
        (
            "uploaded, no build yet",
            vec![created(), uploaded(1)],
            seen(None),
            Action::Record(started(1)),
        ),
        (
            "building",
            vec![created(), uploaded(1), started(1)],
            seen(None),
            Action::Build { version: 1 },
        ),
        (
            "built, not deployed",
            vec![created(), uploaded(1), started(1), built(1)],
            seen(None),
            Action::Deploy { version: 1 },
        ),
        (
            "serving, running",
            serving(1),
            seen(running(1)),
            Action::Nothing,
        ),
        (
            "serving in the log, nothing runs",
            serving(1),
            seen(None),
            Action::Deploy { version: 1 },
        ),
        (
            "serving, an older version runs",
            with(serving(1), [uploaded(2)]),
            seen(running(1)),
            Action::Record(started(2)),
        ),
        (
            "spec changed while it runs",
            with(
                serving(1),
                [FunctionEvent::FunctionSpecChanged { spec: spec(256) }],
            ),
            seen(running(1)),
            Action::Deploy { version: 1 },
        ),
        (
            "every http trigger disabled",
            serving(1),
            Observed {
                triggers: disabled.clone(),
                ..seen(running(1))
            },
            Action::Stop {
                then: Some(FunctionEvent::FunctionStopped {
                    version: 1,
                    reason: "no http trigger of it is enabled (web)".into(),
                }),
            },
        ),
        (
            "every http trigger disabled, never deployed",
            vec![created(), uploaded(1)],
            Observed {
                triggers: disabled,
                ..seen(None)
            },
            Action::Stop { then: None },
        ),
        (
            "scaled to zero",
            with(
                serving(1),
                [FunctionEvent::FunctionScaledToZero {
                    version: 1,
                    reason: "idle".into(),
                }],
            ),
            seen(None),
            Action::Stop { then: None },
        ),
        (
            "rolled back to the version that serves",
            with(
                with(serving(1), [uploaded(2)]),
                [FunctionEvent::FunctionRolledBack { version: 1 }],
            ),
            seen(running(1)),
            Action::Record(deployed(1, None)),
        ),
        (
            "the current version failed while the one before serves",
            with(serving(1), [uploaded(2), started(2), build_failed(2)]),
            seen(running(1)),
            Action::Nothing,
        ),
        (
            "the current version failed while nothing ran",
            with(
                serving(1),
                [
                    FunctionEvent::FunctionScaledToZero {
                        version: 1,
                        reason: "idle".into(),
                    },
                    uploaded(2),
                    started(2),
                    build_failed(2),
                ],
            ),
            seen(None),
            Action::Restore { version: 1 },
        ),
        (
            "serving on another worker that is alive",
            serving_on(1, Some("b")),
            from("a", true, None),
            Action::Nothing,
        ),
        (
            "serving on another worker that is gone",
            serving_on(1, Some("b")),
            from("a", false, None),
            Action::Deploy { version: 1 },
        ),
        (
            "serving here",
            serving_on(1, Some("a")),
            from("a", false, running(1)),
            Action::Nothing,
        ),
    ];
    for (what, history, observed, want) in rows {
        let state = fold(&history);
        assert_eq!(next(&state, &observed), want, "{what}");
    }
}

fn scaled(from: u32, to: u32) -> FunctionEvent {
    FunctionEvent::FunctionScaled {
        from,
        to,
        observed: InFlight(f64::from(to)),
        window: ScaleWindow::Stable,
        reason: "load".into(),
    }
}

/// Instance `n` of version 1's endpoints.
fn instance(n: u32) -> String {
    format!("http://127.0.0.1:{}", 9100 + n)
}

/// Version 1 deployed as the instances `ns` (the first one's endpoint the
/// function's).
fn deployed_as(ns: &[u32]) -> FunctionEvent {
    FunctionEvent::FunctionDeployed {
        version: 1,
        endpoint: instance(ns[0]),
        node: None,
        instances: ns.iter().copied().map(instance).collect(),
    }
}

/// Version 1 running as the instances `ns`.
fn running_as(ns: &[u32]) -> Option<Deployment> {
    Some(Deployment {
        endpoint: instance(ns[0]),
        ready: u32::try_from(ns.len()).unwrap(),
        instances: ns.iter().copied().map(instance).collect(),
        ..running(1).unwrap()
    })
}

#[test]
fn the_count_and_the_instances_that_serve_are_part_of_converged() {
    let serving_three = with(serving(1), [scaled(1, 3), deployed_as(&[1, 2, 3])]);
    let rows: Vec<(&str, Vec<FunctionEvent>, Observed, Action)> = vec![
        (
            "scaled out, one instance runs",
            with(serving(1), [scaled(1, 3)]),
            seen(running(1)),
            Action::Deploy { version: 1 },
        ),
        (
            "three instances at the endpoints the log has",
            serving_three.clone(),
            seen(running_as(&[1, 2, 3])),
            Action::Nothing,
        ),
        (
            "an instance serves elsewhere now",
            serving_three.clone(),
            seen(running_as(&[1, 2, 4])),
            Action::Deploy { version: 1 },
        ),
        (
            "an instance is down",
            serving_three.clone(),
            seen(running_as(&[1, 2])),
            Action::Deploy { version: 1 },
        ),
        (
            "scaled in, three run",
            with(serving_three, [scaled(3, 2)]),
            seen(running_as(&[1, 2, 3])),
            Action::Deploy { version: 1 },
        ),
    ];
    for (what, history, observed, want) in rows {
        let state = fold(&history);
        assert_eq!(next(&state, &observed), want, "{what}");
    }
}
