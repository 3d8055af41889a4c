//! Versions: uploads, rollbacks, and retention's pruning.

use super::*;

fn upload(state: &Function, sha: &str) -> Vec<FunctionEvent> {
    decide(
        state,
        FunctionCommand::Upload {
            source: source(sha),
            retention: Retention::ALL,
        },
    )
    .unwrap()
}

#[test]
fn uploads_record_the_runtime_they_were_packed_for() {
    let state = given(&[FunctionEvent::FunctionCreated { spec: spec() }]);
    let events = upload(&state, "a");
    let [FunctionEvent::FunctionUploaded(v)] = events.as_slice() else {
        panic!("an upload: {events:?}")
    };
    assert_eq!(v.runtime, Some(Runtime::Python311));
}

#[test]
fn reuploading_an_earlier_versions_files_rolls_back_to_it_without_a_new_number() {
    let state = given(&[
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
        uploaded(2, "b"),
    ]);
    assert_eq!(
        upload(&state, "a"),
        [FunctionEvent::FunctionRolledBack { version: 1 }]
    );
    assert_eq!(upload(&state, "b"), [], "the current one changes nothing");
    let after = Function::fold(&[
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
        uploaded(2, "b"),
        FunctionEvent::FunctionRolledBack { version: 1 },
    ]);
    assert_eq!(after.current_version, Some(1));
    assert_eq!(after.phase, Phase::Pending);
    assert_eq!(after.next_version(), 3);
}

#[test]
fn rolling_back_makes_a_kept_version_current_and_refuses_what_cannot_be() {
    let mut events = ready_at_v1();
    events.push(uploaded(2, "b"));
    events.push(FunctionEvent::VersionsPruned { versions: vec![] });
    let state = given(&events);
    let rollback = |version| decide(&state, FunctionCommand::Rollback { version });
    assert_eq!(
        rollback(1).unwrap(),
        [FunctionEvent::FunctionRolledBack { version: 1 }]
    );
    assert_eq!(rollback(2).unwrap(), [], "already current");
    let missing = rollback(3).unwrap_err();
    assert!(
        matches!(&missing, DomainError::Invalid { field: "version", detail } if detail.contains("does not exist")),
        "{missing}"
    );

    let mut pruned = events.clone();
    pruned.push(FunctionEvent::VersionsPruned { versions: vec![1] });
    let state = given(&pruned);
    let gone = decide(&state, FunctionCommand::Rollback { version: 1 }).unwrap_err();
    assert!(
        matches!(&gone, DomainError::Invalid { detail, .. } if detail.contains("pruned")),
        "{gone}"
    );
    let mut deleted = events.clone();
    deleted.push(FunctionEvent::FunctionDeleted {});
    let state = given(&deleted);
    assert!(matches!(
        decide(&state, FunctionCommand::Rollback { version: 1 }),
        Err(DomainError::NotFound(_))
    ));
}

#[test]
fn rolling_back_across_a_runtime_change_is_refused_until_the_runtime_matches() {
    let mut python_v1 = source("a");
    python_v1.context_sha256 = "ctx-python".into();
    let mut state = given(&[FunctionEvent::FunctionCreated { spec: spec() }]);
    for e in decide(
        &state,
        FunctionCommand::Upload {
            source: python_v1,
            retention: Retention::ALL,
        },
    )
    .unwrap()
    {
        state = state.evolve(&e);
    }
    let mut node = spec();
    node.runtime = Runtime::Nodejs20;
    let rebuilt = UploadedSource {
        context_sha256: "ctx-node".into(),
        ..source("a")
    };
    for e in decide(
        &state,
        FunctionCommand::ChangeSpec {
            spec: node,
            rebuilt: Some(rebuilt),
            retention: Retention::ALL,
        },
    )
    .unwrap()
    {
        state = state.evolve(&e);
    }
    assert_eq!(state.current().unwrap().runtime, Some(Runtime::Nodejs20));
    let e = decide(&state, FunctionCommand::Rollback { version: 1 }).unwrap_err();
    assert!(
        matches!(&e, DomainError::Conflict(m) if m.contains("packed for python3.11")),
        "{e}"
    );
}

#[test]
fn retention_prunes_the_oldest_but_never_the_current_version() {
    let mut events = vec![FunctionEvent::FunctionCreated { spec: spec() }];
    for (v, sha) in (1..=5).zip(["a", "b", "c", "d", "e"]) {
        events.push(uploaded(v, sha));
    }
    let state = given(&events);
    assert_eq!(
        prune_versions(&state, 3),
        Some(FunctionEvent::VersionsPruned {
            versions: vec![1, 2]
        })
    );
    assert_eq!(prune_versions(&state, 5), None);
    assert_eq!(prune_versions(&state, 50), None);

    events.push(FunctionEvent::FunctionRolledBack { version: 1 });
    let state = given(&events);
    assert_eq!(
        prune_versions(&state, 2),
        Some(FunctionEvent::VersionsPruned {
            versions: vec![2, 3]
        }),
        "the live version stays, beyond the newest two"
    );
    events.push(FunctionEvent::VersionsPruned {
        versions: vec![2, 3],
    });
    let state = given(&events);
    let kept: Vec<u32> = state.versions.iter().map(|v| v.version).collect();
    assert_eq!(kept, [1, 4, 5]);
    assert_eq!(state.next_version(), 6, "numbers are never given again");
}

#[test]
fn every_kept_version_remembers_its_build_for_a_rollback() {
    let built = |version, artifact: &str| FunctionEvent::BuildSucceeded {
        version,
        artifact: artifact.into(),
    };
    let s = given(&[
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1, "a"),
        built(1, "image:v1"),
        uploaded(2, "b"),
        built(2, "image:v2"),
        FunctionEvent::FunctionRolledBack { version: 1 },
    ]);
    assert_eq!(s.current_version, Some(1));
    assert_eq!(s.built, Some((2, "image:v2".into())));
    assert_eq!(s.artifacts.get(&1).map(String::as_str), Some("image:v1"));
    let s = s.evolve(&FunctionEvent::VersionsPruned { versions: vec![2] });
    assert_eq!(s.artifacts.keys().copied().collect::<Vec<_>>(), [1]);
    let s = s.evolve(&FunctionEvent::FunctionDeleted {});
    assert!(s.artifacts.is_empty());
}

/// Versions 1 to `n` uploaded (files `a`, `b`, …), the last one live.
fn with_versions(n: u32) -> Vec<FunctionEvent> {
    let mut events = vec![FunctionEvent::FunctionCreated { spec: spec() }];
    for v in 1..=n {
        events.push(uploaded(v, &sha_of(v)));
    }
    events
}

fn sha_of(version: u32) -> String {
    char::from(b'a' + version as u8 - 1).to_string()
}

fn keep(keep: usize) -> Retention {
    Retention { keep }
}

fn pruned(versions: &[u32]) -> FunctionEvent {
    FunctionEvent::VersionsPruned {
        versions: versions.to_vec(),
    }
}

fn upload_with(sha: &str, retention: Retention) -> FunctionCommand {
    FunctionCommand::Upload {
        source: source(sha),
        retention,
    }
}

fn to_node(retention: Retention) -> FunctionCommand {
    let mut node = spec();
    node.runtime = Runtime::Nodejs20;
    FunctionCommand::ChangeSpec {
        spec: node,
        rebuilt: Some(UploadedSource {
            context_sha256: "ctx-node".into(),
            context_key: "contexts/ctx-node.tar.gz".into(),
            ..source(&sha_of(3))
        }),
        retention,
    }
}

fn more_memory(retention: Retention) -> FunctionCommand {
    FunctionCommand::ChangeSpec {
        spec: FunctionSpec {
            memory_mb: 256,
            ..spec()
        },
        rebuilt: None,
        retention,
    }
}

/// A decision retention takes part in: on `given`, `command` makes the
/// events it makes with every version kept, then `more`, and prunes
/// `pruned`.
struct Case {
    what: &'static str,
    given: Vec<FunctionEvent>,
    command: FunctionCommand,
    more: Vec<FunctionEvent>,
    pruned: Vec<u32>,
}

#[test]
fn a_decision_that_passes_the_versions_kept_prunes_the_oldest_in_the_same_append() {
    let rolled_back_to_1 = || {
        let mut events = with_versions(3);
        events.push(FunctionEvent::FunctionRolledBack { version: 1 });
        events
    };
    let cases = [
        Case {
            what: "an upload within the number",
            given: with_versions(3),
            command: upload_with("d", keep(4)),
            more: vec![],
            pruned: vec![],
        },
        Case {
            what: "an upload past the number",
            given: with_versions(3),
            command: upload_with("d", keep(3)),
            more: vec![pruned(&[1])],
            pruned: vec![1],
        },
        Case {
            what: "an upload far past a number lowered since",
            given: with_versions(3),
            command: upload_with("d", keep(1)),
            more: vec![pruned(&[1, 2, 3])],
            pruned: vec![1, 2, 3],
        },
        Case {
            what: "keeping none keeps one",
            given: with_versions(3),
            command: upload_with("d", keep(0)),
            more: vec![pruned(&[1, 2, 3])],
            pruned: vec![1, 2, 3],
        },
        Case {
            what: "keeping every version",
            given: with_versions(3),
            command: upload_with("d", Retention::ALL),
            more: vec![],
            pruned: vec![],
        },
        Case {
            what: "an earlier version's files again: it is live, the others go",
            given: with_versions(3),
            command: upload_with("a", keep(1)),
            more: vec![pruned(&[2])],
            pruned: vec![2],
        },
        Case {
            what: "the live version stays, however old",
            given: rolled_back_to_1(),
            command: more_memory(keep(1)),
            more: vec![pruned(&[2])],
            pruned: vec![2],
        },
        Case {
            what: "a runtime change makes a version, and prunes for it",
            given: with_versions(3),
            command: to_node(keep(3)),
            more: vec![pruned(&[1])],
            pruned: vec![1],
        },
        Case {
            what: "a change of spec alone prunes past a number lowered since",
            given: with_versions(3),
            command: more_memory(keep(2)),
            more: vec![pruned(&[1])],
            pruned: vec![1],
        },
        Case {
            what: "a change of spec within the number",
            given: with_versions(3),
            command: more_memory(keep(3)),
            more: vec![],
            pruned: vec![],
        },
        Case {
            what: "a rollback prunes nothing",
            given: rolled_back_to_1(),
            command: FunctionCommand::Rollback { version: 2 },
            more: vec![],
            pruned: vec![],
        },
    ];
    for case in cases {
        let what = case.what;
        let state = given(&case.given);
        let mut want = decide(&state, every_version_kept(&case.command)).unwrap();
        assert!(!want.is_empty(), "{what}: the command makes events");
        want.extend(case.more);
        let decision = state.decide(case.command).unwrap();
        assert_eq!(decision.events, want, "{what}: the events");
        assert_eq!(decision.pruned_versions(), case.pruned, "{what}: pruned");
        let after = decision.events.iter().fold(state.clone(), Function::evolve);
        for v in &case.pruned {
            assert!(after.version(*v).is_none(), "{what}: version {v} is gone");
        }
        assert!(after.current().is_some(), "{what}: the live version stays");
    }
}

/// `command` with every version kept: the events before retention.
fn every_version_kept(command: &FunctionCommand) -> FunctionCommand {
    match command.clone() {
        FunctionCommand::Upload { source, .. } => upload_with(&source.sha256, Retention::ALL),
        FunctionCommand::ChangeSpec { spec, rebuilt, .. } => FunctionCommand::ChangeSpec {
            spec,
            rebuilt,
            retention: Retention::ALL,
        },
        other => other,
    }
}

#[test]
fn a_decision_that_changes_nothing_prunes_nothing() {
    let state = given(&with_versions(3));
    for (what, command) in [
        ("the live version's files again", upload_with("c", keep(1))),
        (
            "the same spec",
            FunctionCommand::ChangeSpec {
                spec: spec(),
                rebuilt: None,
                retention: keep(1),
            },
        ),
    ] {
        let decision = state.decide(command).unwrap();
        assert_eq!(decision, Decision::default(), "{what}");
    }
}

#[test]
fn the_pruned_versions_blobs_are_named_for_the_collector() {
    let state = given(&with_versions(3));
    let decision = state.decide(upload_with("d", keep(2))).unwrap();
    assert_eq!(decision.pruned_versions(), [1, 2]);
    assert_eq!(
        decision.pruned_blobs(),
        [
            "zips/a.zip",
            "contexts/ctxa.tar.gz",
            "zips/b.zip",
            "contexts/ctxb.tar.gz"
        ]
    );
    assert_eq!(decision.pruned[0], *state.version(1).unwrap());
    assert_eq!(
        decide(&state, upload_with("d", keep(2))).unwrap(),
        decision.events,
        "the plain decider gives the same events"
    );
}
