//! Instances lost with what ran them: at zero at once, and started again.

use super::*;

fn on(node: &str) -> Vec<FunctionEvent> {
    let mut events = serving();
    events.push(FunctionEvent::FunctionDeployed {
        version: 1,
        endpoint: "http://127.0.0.1:9001".into(),
        node: Some(node.into()),
        instances: vec!["http://127.0.0.1:9001".into()],
    });
    events
}

fn lost(node: Option<&str>) -> FunctionCommand {
    FunctionCommand::InstancesLost {
        node: node.map(str::to_owned),
        reason: "worker w1 stopped".into(),
    }
}

#[test]
fn what_served_on_a_lost_worker_is_at_zero_and_starts_again() {
    let mut events = on("w1");
    let then = decide(&given(&events), lost(Some("w1"))).unwrap();
    assert_eq!(
        then,
        vec![
            FunctionEvent::FunctionScaledToZero {
                version: 1,
                reason: "worker w1 stopped".into(),
            },
            FunctionEvent::FunctionScaledUp {
                reason: "started again: worker w1 stopped".into(),
            },
        ]
    );
    events.extend(then);
    let state = given(&events);
    // No call goes to where it served; it is not idle, so it is deployed
    // again, with the version that served.
    assert_eq!((state.endpoint.as_deref(), state.idle), (None, false));
    assert!(state.instance_endpoints.is_empty());
    assert_eq!(
        (state.deployed_version, state.phase),
        (Some(1), Phase::Ready)
    );
    // Told twice (the sweep and a stop raced): nothing more.
    assert_eq!(decide(&state, lost(Some("w1"))).unwrap(), vec![]);
}

#[test]
fn a_function_served_elsewhere_idle_or_deleted_loses_nothing() {
    let events = on("w2");
    assert_eq!(decide(&given(&events), lost(Some("w1"))).unwrap(), vec![]);
    let mut idle = on("w1");
    idle.push(FunctionEvent::FunctionScaledToZero {
        version: 1,
        reason: "idle".into(),
    });
    assert_eq!(decide(&given(&idle), lost(Some("w1"))).unwrap(), vec![]);
    let mut deleted = on("w1");
    deleted.push(FunctionEvent::FunctionDeleted {});
    assert_eq!(decide(&given(&deleted), lost(None)).unwrap(), vec![]);
    // Without a node: whatever serves it.
    assert_eq!(decide(&given(&on("w2")), lost(None)).unwrap().len(), 2);
}
