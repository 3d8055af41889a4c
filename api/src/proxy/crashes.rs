//! Why a call failed when its function's process ended under it: the
//! invoke proxy asks the log for the crash the function's driver recorded
//! (`FunctionCrashed`), waiting briefly, since the driver sees the process
//! end at the moment the proxy sees its connection break. A function killed
//! for passing its `memory_mb` answers 502 `function-out-of-memory`, naming
//! the limit; another crash 502 `function-crashed`.

use std::time::Duration;

use axum::http::StatusCode;
use chrono::{DateTime, Utc};
use sless_domain::{CrashCause, FunctionEvent, FunctionKey, FunctionName, Namespace};

use crate::AppState;
use crate::plumbing::error::ApiError;

/// How long the proxy waits for the crash's record: a local process's is
/// there at once; a pod's waits for the kubelet to notice the container
/// ended (it looks every second) and for a worker to watch it.
const WAIT: Duration = Duration::from_secs(4);
/// How often it looks meanwhile.
const POLL: Duration = Duration::from_millis(20);
/// How much earlier than the call the crash may have been recorded (the
/// database's clock against this process's).
const SKEW: chrono::TimeDelta = chrono::TimeDelta::milliseconds(500);

/// The problem for a call to `ns`/`name` begun at `started_at` whose
/// connection broke, if the log records its function crashing since.
pub(crate) async fn explain(
    state: &AppState,
    ns: &str,
    name: &str,
    started_at: DateTime<Utc>,
) -> Option<ApiError> {
    let key = FunctionKey::new(Namespace::parse(ns).ok()?, FunctionName::parse(name).ok()?);
    let deadline = tokio::time::Instant::now() + WAIT;
    loop {
        match sless_store::crashes::since(&state.pool, &key, started_at - SKEW).await {
            Ok(Some(FunctionEvent::FunctionCrashed {
                version,
                cause,
                detail,
                memory_mb,
            })) => return Some(problem(name, version, cause, &detail, memory_mb)),
            Ok(_) => {}
            Err(e) => {
                tracing::debug!(error = %e, "looking for a crash failed");
                return None;
            }
        }
        if tokio::time::Instant::now() >= deadline {
            return None;
        }
        tokio::time::sleep(POLL).await;
    }
}

fn problem(
    name: &str,
    version: u32,
    cause: CrashCause,
    detail: &str,
    memory_mb: Option<u32>,
) -> ApiError {
    let mut error = match cause {
        CrashCause::Oom => ApiError::new(
            StatusCode::BAD_GATEWAY,
            OUT_OF_MEMORY,
            "Function out of memory",
            format!("function {name:?} (version {version}) was {detail}"),
        ),
        _ => ApiError::new(
            StatusCode::BAD_GATEWAY,
            CRASHED,
            "Function crashed",
            format!("function {name:?} (version {version}) crashed: {detail}"),
        ),
    };
    let mut members = serde_json::Map::from_iter([("cause".to_owned(), cause.as_str().into())]);
    if let Some(mb) = memory_mb {
        members.insert("memory_mb".to_owned(), mb.into());
    }
    error.members = Some(Box::new(members));
    error
}

/// The problem kind of a call whose function was killed for memory.
pub const OUT_OF_MEMORY: &str = "function-out-of-memory";
/// The problem kind of a call whose function's process ended otherwise.
pub const CRASHED: &str = "function-crashed";
