//! given(events) / when(command) / then(events)

use super::*;
use crate::spec::Runtime;

fn spec() -> FunctionSpec {
    FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
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
