//! given(events) / when(command) / then(events)

use super::*;
use crate::spec::Runtime;

mod lost;
mod versions;

fn spec() -> FunctionSpec {
    FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        scaling: Default::default(),
    }
}

fn source(sha: &str) -> UploadedSource {
    UploadedSource {
        sha256: sha.into(),
        size: 100,
        files: 2,
        zip_key: format!("zips/{sha}.zip"),
        context_sha256: format!("ctx{sha}"),
        context_key: format!("contexts/ctx{sha}.tar.gz"),
    }
}

fn given(events: &[FunctionEvent]) -> Function {
    Function::fold(events)
}

fn uploaded(version: u32, sha: &str) -> FunctionEvent {
    let s = source(sha);
    FunctionEvent::FunctionUploaded(SourceVersion {
        version,
        sha256: s.sha256,
        size: s.size,
        files: s.files,
        zip_key: s.zip_key,
        context_sha256: s.context_sha256,
        context_key: s.context_key,
        runtime: Some(Runtime::Python311),
    })
}

#[test]
fn creating_a_new_function_records_its_spec() {
    let then = decide(&given(&[]), FunctionCommand::Create { spec: spec() }).unwrap();
    assert_eq!(then, vec![FunctionEvent::FunctionCreated { spec: spec() }]);
}

#[test]
fn creating_an_existing_function_is_refused() {
    let state = given(&[FunctionEvent::FunctionCreated { spec: spec() }]);
    let err = decide(&state, FunctionCommand::Create { spec: spec() }).unwrap_err();
    assert!(matches!(err, DomainError::AlreadyExists(_)));
}

#[test]
fn creating_with_an_invalid_spec_is_refused() {
    let mut bad = spec();
    bad.entrypoint = "nodot".into();
    let err = decide(&given(&[]), FunctionCommand::Create { spec: bad }).unwrap_err();
    assert!(matches!(
        err,
        DomainError::Invalid {
            field: "entrypoint",
            ..
        }
    ));
}

#[test]
fn uploads_get_consecutive_versions() {
    let state = given(&[
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
    ]);
    let then = decide(
        &state,
        FunctionCommand::Upload {
            source: source("b"),
            retention: Retention::ALL,
        },
    )
    .unwrap();
    assert_eq!(then, vec![uploaded(2, "b")]);
}

#[test]
fn uploading_to_a_missing_function_is_not_found() {
    let err = decide(
        &given(&[]),
        FunctionCommand::Upload {
            source: source("a"),
            retention: Retention::ALL,
        },
    )
    .unwrap_err();
    assert!(matches!(err, DomainError::NotFound(_)));
}

#[test]
fn identical_reupload_of_the_current_version_appends_nothing() {
    let state = given(&[
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
    ]);
    let then = decide(
        &state,
        FunctionCommand::Upload {
            source: source("a"),
            retention: Retention::ALL,
        },
    )
    .unwrap();
    assert!(then.is_empty());
}

#[test]
fn phase_follows_build_and_deploy() {
    let mut s = given(&[FunctionEvent::FunctionCreated { spec: spec() }]);
    assert_eq!(s.phase, Phase::Pending);
    s = s.evolve(&uploaded(1, "a"));
    assert_eq!(s.phase, Phase::Pending);
    s = s.evolve(&FunctionEvent::BuildStarted { version: 1 });
    assert_eq!(s.phase, Phase::Building);
    s = s.evolve(&FunctionEvent::BuildSucceeded {
        version: 1,
        artifact: "dir".into(),
    });
    s = s.evolve(&FunctionEvent::FunctionDeployed {
        version: 1,
        endpoint: "http://e".into(),
        node: None,
        instances: vec![],
    });
    assert_eq!(s.phase, Phase::Ready);
    assert_eq!(s.deployed_version, Some(1));
    assert_eq!(s.stream_version, 5);
}

#[test]
fn a_failed_build_shows_its_error_and_log_tail() {
    let s = given(&[
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
        FunctionEvent::BuildFailed {
            version: 1,
            error: "pip install failed".into(),
            log_tail: "No matching distribution".into(),
        },
    ]);
    assert_eq!(s.phase, Phase::Failed);
    let err = s.last_error.unwrap();
    assert!(err.contains("pip install failed") && err.contains("No matching distribution"));
}

#[test]
fn a_stale_version_deploying_does_not_make_a_newer_upload_ready() {
    let s = given(&[
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
        uploaded(2, "b"),
        FunctionEvent::FunctionDeployed {
            version: 1,
            endpoint: "http://e".into(),
            node: None,
            instances: vec![],
        },
    ]);
    assert_eq!(s.phase, Phase::Pending);
    assert_eq!(s.current_version, Some(2));
}

#[test]
fn abandoned_reconcile_fails_the_function_with_the_error() {
    let s = given(&[
        FunctionEvent::FunctionCreated { spec: spec() },
        FunctionEvent::ReconcileAbandoned {
            attempts: 5,
            error: "s3 unreachable".into(),
        },
    ]);
    assert_eq!(s.phase, Phase::Failed);
    assert!(
        s.last_error
            .unwrap()
            .contains("after 5 attempts: s3 unreachable")
    );
}

fn ready_at_v1() -> Vec<FunctionEvent> {
    vec![
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
        FunctionEvent::BuildStarted { version: 1 },
        FunctionEvent::BuildSucceeded {
            version: 1,
            artifact: "dir".into(),
        },
        FunctionEvent::FunctionDeployed {
            version: 1,
            endpoint: "http://e".into(),
            node: None,
            instances: vec![],
        },
    ]
}

fn change(spec: FunctionSpec) -> FunctionCommand {
    FunctionCommand::ChangeSpec {
        spec,
        rebuilt: None,
        retention: Retention::ALL,
    }
}

#[test]
fn changing_the_spec_records_the_whole_new_spec_and_redeploys() {
    let state = given(&ready_at_v1());
    assert!(state.deployed_with_current_spec());
    let mut new = spec();
    new.memory_mb = 512;
    new.env_vars.insert("K".into(), "v".into());
    let then = decide(&state, change(new.clone())).unwrap();
    assert_eq!(
        then,
        vec![FunctionEvent::FunctionSpecChanged { spec: new.clone() }]
    );
    let after = then.iter().fold(state, Function::evolve);
    assert_eq!(after.spec.as_ref(), Some(&new));
    assert_eq!(after.phase, Phase::Pending, "until it is redeployed");
    assert!(!after.deployed_with_current_spec());
    assert_eq!(
        after.deployed_version,
        Some(1),
        "the old one serves meanwhile"
    );
    assert_eq!(after.built, Some((1, "dir".into())), "no rebuild needed");
    let redeployed = after.evolve(&FunctionEvent::FunctionDeployed {
        version: 1,
        endpoint: "http://e2".into(),
        node: None,
        instances: vec![],
    });
    assert_eq!(redeployed.phase, Phase::Ready);
    assert!(redeployed.deployed_with_current_spec());
}

#[test]
fn an_unchanged_spec_appends_nothing() {
    let state = given(&ready_at_v1());
    assert_eq!(decide(&state, change(spec())).unwrap(), vec![]);
}

#[test]
fn changing_the_spec_of_a_missing_or_deleted_function_is_not_found() {
    for events in [
        vec![],
        vec![
            FunctionEvent::FunctionCreated { spec: spec() },
            FunctionEvent::FunctionDeleted {},
        ],
    ] {
        let err = decide(&given(&events), change(spec())).unwrap_err();
        assert!(matches!(err, DomainError::NotFound(_)), "{err:?}");
    }
}

#[test]
fn changing_to_an_invalid_spec_is_refused() {
    let mut bad = spec();
    bad.timeout_sec = 901;
    let err = decide(&given(&ready_at_v1()), change(bad)).unwrap_err();
    assert!(matches!(
        err,
        DomainError::Invalid {
            field: "timeout_sec",
            ..
        }
    ));
}

#[test]
fn a_spec_change_gives_a_failed_deploy_another_chance() {
    let state = given(&[
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
        FunctionEvent::DeployFailed {
            version: 1,
            error: "no module named handler".into(),
            log_tail: String::new(),
        },
    ]);
    assert_eq!(state.failed_version, Some(1));
    let mut fixed = spec();
    fixed.entrypoint = "main.handle".into();
    let then = decide(&state, change(fixed)).unwrap();
    let after = then.iter().fold(state, Function::evolve);
    assert_eq!(after.phase, Phase::Pending);
    assert_eq!(after.failed_version, None);
    assert_eq!(after.last_error, None);
}

#[test]
fn a_runtime_change_makes_the_current_source_rebuilt_for_it_the_next_version() {
    let state = given(&ready_at_v1());
    let mut node = spec();
    node.runtime = Runtime::Nodejs20;
    let rebuilt = UploadedSource {
        context_sha256: "ctx-node".into(),
        context_key: "contexts/ctx-node.tar.gz".into(),
        ..source("a")
    };
    let then = decide(
        &state,
        FunctionCommand::ChangeSpec {
            spec: node.clone(),
            rebuilt: Some(rebuilt.clone()),
            retention: Retention::ALL,
        },
    )
    .unwrap();
    assert_eq!(
        then,
        vec![
            FunctionEvent::FunctionSpecChanged { spec: node.clone() },
            FunctionEvent::FunctionUploaded(
                rebuilt.clone().into_version(2, Some(Runtime::Nodejs20))
            ),
        ]
    );
    let after = then.iter().fold(state.clone(), Function::evolve);
    assert_eq!(after.current_version, Some(2));
    assert_eq!(after.current().unwrap().sha256, "a", "the same source");
    assert_eq!(after.current().unwrap().context_sha256, "ctx-node");
    assert_eq!(after.phase, Phase::Pending);

    // Without the rebuilt source, or with another source, it is refused.
    let err = decide(&state, change(node.clone())).unwrap_err();
    assert!(matches!(err, DomainError::Conflict(_)), "{err:?}");
    let other = UploadedSource {
        sha256: "b".into(),
        ..rebuilt
    };
    let err = decide(
        &state,
        FunctionCommand::ChangeSpec {
            spec: node,
            rebuilt: Some(other),
            retention: Retention::ALL,
        },
    )
    .unwrap_err();
    assert!(matches!(err, DomainError::Conflict(_)), "{err:?}");
}

#[test]
fn a_runtime_change_before_any_upload_is_only_a_spec_change() {
    let state = given(&[FunctionEvent::FunctionCreated { spec: spec() }]);
    let mut go = spec();
    go.runtime = Runtime::Go123;
    go.entrypoint = "handler.Handle".into();
    assert_eq!(state.rebuild_for(&go), None);
    let then = decide(&state, change(go.clone())).unwrap();
    assert_eq!(then, vec![FunctionEvent::FunctionSpecChanged { spec: go }]);
}

#[test]
fn deleting_records_the_deletion_and_nothing_runs_or_is_current_after_it() {
    let state = given(&ready_at_v1());
    let then = decide(&state, FunctionCommand::Delete).unwrap();
    assert_eq!(then, vec![FunctionEvent::FunctionDeleted {}]);
    let after = then.iter().fold(state, Function::evolve);
    assert!(!after.exists());
    assert_eq!(after.phase, Phase::Deleted);
    assert_eq!(after.current(), None);
    assert_eq!(
        (after.deployed_version, after.endpoint.as_deref()),
        (None, None)
    );
    assert_eq!(
        after.spec,
        Some(spec()),
        "the last spec stays for the record"
    );
    assert_eq!(after.stream_version, 6);

    // Deleting again, uploading or changing it: not found.
    for command in [
        FunctionCommand::Delete,
        FunctionCommand::Upload {
            source: source("b"),
            retention: Retention::ALL,
        },
        change(spec()),
    ] {
        let err = decide(&after, command).unwrap_err();
        assert!(matches!(err, DomainError::NotFound(_)), "{err:?}");
    }
}

#[test]
fn a_function_created_again_after_a_delete_numbers_its_uploads_after_the_old_ones() {
    let mut events = ready_at_v1();
    events.push(uploaded(2, "b"));
    events.push(FunctionEvent::FunctionDeleted {});
    let state = given(&events);
    let mut node = spec();
    node.runtime = Runtime::Nodejs20;
    let created = decide(&state, FunctionCommand::Create { spec: node.clone() }).unwrap();
    assert_eq!(
        created,
        vec![FunctionEvent::FunctionCreated { spec: node.clone() }]
    );
    let state = created.iter().fold(state, Function::evolve);
    assert!(state.exists());
    assert_eq!(state.phase, Phase::Pending);
    assert_eq!(state.spec, Some(node));
    assert_eq!(state.current_version, None, "nothing uploaded in this life");
    assert_eq!(state.built, None);
    // The same bytes as the old current version are a new upload now.
    let then = decide(
        &state,
        FunctionCommand::Upload {
            source: source("b"),
            retention: Retention::ALL,
        },
    )
    .unwrap();
    let FunctionEvent::FunctionUploaded(mut want) = uploaded(3, "b") else {
        unreachable!()
    };
    want.runtime = Some(Runtime::Nodejs20);
    assert_eq!(then, vec![FunctionEvent::FunctionUploaded(want)]);
}

#[test]
fn a_workers_event_that_raced_a_delete_changes_nothing() {
    let mut events = ready_at_v1();
    events.push(FunctionEvent::FunctionDeleted {});
    let deleted = given(&events);
    for late in [
        FunctionEvent::FunctionDeployed {
            version: 1,
            endpoint: "http://late".into(),
            node: None,
            instances: vec![],
        },
        FunctionEvent::ReconcileAbandoned {
            attempts: 3,
            error: "x".into(),
        },
        FunctionEvent::BuildStarted { version: 1 },
    ] {
        let after = deleted.clone().evolve(&late);
        assert_eq!(after.stream_version, deleted.stream_version + 1);
        assert_eq!(
            Function {
                stream_version: deleted.stream_version,
                ..after
            },
            deleted,
            "{late:?}"
        );
    }
}

#[test]
fn a_rolled_back_deploy_fails_the_version_and_names_the_one_that_still_serves() {
    let failed = FunctionEvent::DeployFailed {
        version: 2,
        error: "version 2 does not start: ImagePullBackOff".into(),
        log_tail: String::new(),
    };
    let mut events = ready_at_v1();
    events.extend([
        uploaded(2, "b"),
        failed.clone(),
        FunctionEvent::DeployRolledBack {
            failed_version: 2,
            restored_version: 1,
        },
    ]);
    let s = given(&events);
    assert_eq!(s.phase, Phase::Failed);
    assert_eq!(s.failed_version, Some(2));
    assert_eq!((s.current_version, s.deployed_version), (Some(2), Some(1)));
    assert_eq!(s.endpoint.as_deref(), Some("http://e"));
    assert_eq!(
        s.last_error.as_deref(),
        Some(
            "version 2 failed to deploy and was rolled back; version 1 still serves\n\
             version 2 does not start: ImagePullBackOff"
        )
    );

    // Only the spec changed: the same version serves with its old settings.
    let mut changed = spec();
    changed.memory_mb = 999;
    let mut events = ready_at_v1();
    events.extend([
        FunctionEvent::FunctionSpecChanged { spec: changed },
        FunctionEvent::DeployFailed {
            version: 1,
            error: "OOMKilled".into(),
            log_tail: String::new(),
        },
        FunctionEvent::DeployRolledBack {
            failed_version: 1,
            restored_version: 1,
        },
    ]);
    let s = given(&events);
    assert_eq!(s.deployed_version, Some(1));
    assert!(
        s.last_error.as_deref().is_some_and(|e| e.starts_with(
            "the new settings of version 1 failed to deploy and were rolled back; \
             version 1 still serves with the settings it had\nOOMKilled"
        )),
        "{:?}",
        s.last_error
    );

    // A version that is no longer current keeps the current one's state.
    let mut events = ready_at_v1();
    events.extend([
        uploaded(2, "b"),
        failed,
        uploaded(3, "c"),
        FunctionEvent::DeployRolledBack {
            failed_version: 2,
            restored_version: 1,
        },
    ]);
    let s = given(&events);
    assert_eq!((s.phase, s.last_error.as_deref()), (Phase::Pending, None));
}

#[test]
fn a_crash_of_what_serves_is_its_last_error_and_leaves_it_ready() {
    let crashed = |version| FunctionEvent::FunctionCrashed {
        version,
        cause: crate::CrashCause::Oom,
        detail: "killed for using more memory than its memory_mb of 128; started again".into(),
        memory_mb: Some(128),
    };
    let mut events = ready_at_v1();
    events.push(crashed(1));
    let s = given(&events);
    assert_eq!(s.phase, Phase::Ready, "its driver starts it again");
    assert_eq!(
        (s.deployed_version, s.endpoint.as_deref()),
        (Some(1), Some("http://e"))
    );
    assert_eq!(
        s.last_error.as_deref(),
        Some(
            "version 1 crashed: killed for using more memory than its memory_mb of 128; started again"
        )
    );

    // A crash of a version that no longer serves changes nothing.
    let mut events = ready_at_v1();
    events.push(crashed(7));
    assert_eq!(given(&events).last_error, None);

    // The next deploy clears it.
    let mut events = ready_at_v1();
    events.extend([
        crashed(1),
        uploaded(2, "b"),
        FunctionEvent::FunctionDeployed {
            version: 2,
            endpoint: "http://f".into(),
            node: None,
            instances: vec![],
        },
    ]);
    assert_eq!(given(&events).last_error, None);
}

fn serving() -> Vec<FunctionEvent> {
    vec![
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
        FunctionEvent::BuildStarted { version: 1 },
        FunctionEvent::BuildSucceeded {
            version: 1,
            artifact: "build-a".into(),
        },
        FunctionEvent::FunctionDeployed {
            version: 1,
            endpoint: "http://127.0.0.1:9000".into(),
            node: None,
            instances: vec![],
        },
    ]
}

fn idle(reason: &str) -> FunctionCommand {
    FunctionCommand::ScaleToZero {
        reason: reason.into(),
    }
}

fn call() -> FunctionCommand {
    FunctionCommand::Activate {
        reason: "a call".into(),
    }
}

#[test]
fn a_serving_function_is_scaled_to_zero_once_and_stays_ready_without_an_endpoint() {
    let mut events = serving();
    let then = decide(&given(&events), idle("no call for 60 s")).unwrap();
    assert_eq!(
        then,
        vec![FunctionEvent::FunctionScaledToZero {
            version: 1,
            reason: "no call for 60 s".into()
        }]
    );
    events.extend(then);
    let state = given(&events);
    assert!(state.idle);
    assert_eq!(state.phase, Phase::Ready);
    assert_eq!((state.endpoint, state.deployed_version), (None, Some(1)));
    // A second sweep, or one that raced it, records nothing more.
    assert_eq!(decide(&given(&events), idle("again")).unwrap(), vec![]);
}

#[test]
fn only_what_serves_as_uploaded_is_scaled_to_zero() {
    let building = &serving()[..3];
    assert_eq!(decide(&given(building), idle("x")).unwrap(), vec![]);
    let mut newer = serving();
    newer.push(uploaded(2, "b"));
    assert_eq!(decide(&given(&newer), idle("x")).unwrap(), vec![]);
    let mut deleted = serving();
    deleted.push(FunctionEvent::FunctionDeleted {});
    assert_eq!(decide(&given(&deleted), idle("x")).unwrap(), vec![]);
}

#[test]
fn a_call_scales_an_idle_function_up_once_and_a_warm_one_not_at_all() {
    assert_eq!(decide(&given(&serving()), call()).unwrap(), vec![]);
    let mut events = serving();
    events.push(FunctionEvent::FunctionScaledToZero {
        version: 1,
        reason: "idle".into(),
    });
    let then = decide(&given(&events), call()).unwrap();
    assert_eq!(
        then,
        vec![FunctionEvent::FunctionScaledUp {
            reason: "a call".into()
        }]
    );
    events.extend(then);
    assert!(!given(&events).idle);
    assert_eq!(decide(&given(&events), call()).unwrap(), vec![]);
    assert!(matches!(
        decide(&given(&[]), call()).unwrap_err(),
        DomainError::NotFound(_)
    ));
}

#[test]
fn an_upload_to_an_idle_function_deploys_it_at_once() {
    let mut events = serving();
    events.push(FunctionEvent::FunctionScaledToZero {
        version: 1,
        reason: "idle".into(),
    });
    events.push(uploaded(2, "b"));
    assert!(!given(&events).idle);
}

#[test]
fn changing_only_the_idle_window_does_not_redeploy() {
    let mut events = serving();
    let mut longer = spec();
    longer.scale_to_zero_after_sec = Some(3600);
    events.push(FunctionEvent::FunctionSpecChanged { spec: longer });
    assert!(given(&events).deployed_with_current_spec());
    let mut bigger = spec();
    bigger.memory_mb = 256;
    events.push(FunctionEvent::FunctionSpecChanged { spec: bigger });
    assert!(!given(&events).deployed_with_current_spec());
}

#[test]
fn an_idle_window_past_a_week_is_refused() {
    let mut s = spec();
    s.scale_to_zero_after_sec = Some(crate::spec::MAX_SCALE_TO_ZERO_AFTER_SEC + 1);
    let err = decide(&given(&[]), FunctionCommand::Create { spec: s }).unwrap_err();
    assert!(
        matches!(
            err,
            DomainError::Invalid {
                field: "scale_to_zero_after_sec",
                ..
            }
        ),
        "{err:?}"
    );
}

#[test]
fn a_start_from_zero_that_failed_is_tried_again_by_the_next_call() {
    let mut events = serving();
    events.push(FunctionEvent::FunctionScaledToZero {
        version: 1,
        reason: "idle".into(),
    });
    events.push(FunctionEvent::FunctionScaledUp {
        reason: "a call".into(),
    });
    events.push(FunctionEvent::DeployFailed {
        version: 1,
        error: "exited with code 1".into(),
        log_tail: String::new(),
    });
    let failed = given(&events);
    assert!(failed.start_failed());
    let then = decide(&failed, call()).unwrap();
    assert_eq!(then.len(), 1, "{then:?}");
    events.extend(then);
    let again = given(&events);
    assert_eq!((again.phase, again.failed_version), (Phase::Pending, None));
    // A version that never served is not started by calls.
    let first = [
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
        FunctionEvent::DeployFailed {
            version: 1,
            error: "x".into(),
            log_tail: String::new(),
        },
    ];
    assert_eq!(decide(&given(&first), call()).unwrap(), vec![]);
}

mod scaling {
    use super::*;
    use crate::{InFlight, ScaleWindow};

    fn serving(spec: FunctionSpec) -> Vec<FunctionEvent> {
        vec![
            FunctionEvent::FunctionCreated { spec },
            uploaded(1, "a"),
            FunctionEvent::BuildSucceeded {
                version: 1,
                artifact: "art".into(),
            },
            FunctionEvent::FunctionDeployed {
                version: 1,
                endpoint: "http://127.0.0.1:1".into(),
                node: None,
                instances: vec![],
            },
        ]
    }

    fn scale(to: u32) -> FunctionCommand {
        FunctionCommand::Scale {
            to,
            observed: InFlight(to as f64),
            window: ScaleWindow::Stable,
            reason: "load".into(),
        }
    }

    #[test]
    fn a_scale_records_from_and_to_within_the_spec_and_only_real_changes() {
        let mut s = spec();
        s.scaling.max_instances = Some(8);
        let mut events = serving(s.clone());
        let state = given(&events);
        assert_eq!(state.instances(), 1);
        assert_eq!(decide(&state, scale(1)).unwrap(), vec![]);
        let then = decide(&state, scale(20)).unwrap();
        assert!(
            matches!(
                then.as_slice(),
                [FunctionEvent::FunctionScaled { from: 1, to: 8, .. }]
            ),
            "{then:?}"
        );
        events.extend(then);
        let state = given(&events);
        assert_eq!(state.instances(), 8);
        assert_eq!(decide(&state, scale(9)).unwrap(), vec![]);
        // Lowering max_instances applies at once, without a decision.
        s.scaling.max_instances = Some(3);
        events.push(FunctionEvent::FunctionSpecChanged { spec: s.clone() });
        assert_eq!(given(&events).instances(), 3);
    }

    #[test]
    fn min_instances_is_the_floor_and_zero_is_not_a_scale() {
        let mut s = spec();
        s.scaling.min_instances = Some(2);
        let state = given(&serving(s));
        assert_eq!(state.instances(), 2);
        assert_eq!(decide(&state, scale(0)).unwrap(), vec![]);
        assert_eq!(decide(&state, scale(1)).unwrap(), vec![]);
    }

    #[test]
    fn scaled_to_zero_it_starts_again_with_one_and_is_not_scaled_while_idle() {
        let mut events = serving(spec());
        events.push(FunctionEvent::FunctionScaled {
            from: 1,
            to: 5,
            observed: InFlight(4.0),
            window: ScaleWindow::Panic,
            reason: "burst".into(),
        });
        events.push(FunctionEvent::FunctionScaledToZero {
            version: 1,
            reason: "idle".into(),
        });
        let state = given(&events);
        assert_eq!(state.instances(), 0);
        assert_eq!(decide(&state, scale(3)).unwrap(), vec![]);
        events.push(FunctionEvent::FunctionScaledUp {
            reason: "a call".into(),
        });
        assert_eq!(given(&events).instances(), 1);
    }
}
