//! Following a function's change to one version until it serves or fails:
//! which events of its stream say what, read from the audit log's tail as
//! they commit. The command line's `deploy` draws these steps; the
//! Terraform provider waits on them.

use std::time::Duration;

use sless_api_types::EventEntry;

use crate::Client;
use crate::error::Result;
use crate::events::{EventFilter, EventStream};

/// Where a change to a version stands, as one event of the function's
/// stream says.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Step {
    /// `BuildStarted`.
    Building,
    /// `BuildSucceeded`: what was built is being started.
    Deploying,
    /// `FunctionDeployed`: the version serves.
    Ready,
    /// `BuildFailed` or `DeployFailed`.
    Failed {
        /// Which stage failed; `None` when the failure was read from the
        /// function's state rather than from its event.
        stage: Option<Stage>,
        error: String,
        /// The last lines of the build's (or the start's) log.
        log_tail: String,
    },
    /// `FunctionDeleted`.
    Deleted,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Stage {
    Build,
    Deploy,
}

impl Stage {
    pub fn as_str(self) -> &'static str {
        match self {
            Stage::Build => "build",
            Stage::Deploy => "deploy",
        }
    }
}

impl Step {
    /// What `event` says of the change to `version`: `None` for an event
    /// about something else (another version, another kind of change).
    pub fn of(event: &EventEntry, version: u32) -> Option<Step> {
        let ours = event.data.get("version").and_then(|v| v.as_u64()) == Some(u64::from(version));
        let text = |key: &str| {
            event
                .data
                .get(key)
                .and_then(|v| v.as_str())
                .unwrap_or_default()
                .to_owned()
        };
        match event.event_type.as_str() {
            "BuildStarted" if ours => Some(Step::Building),
            "BuildSucceeded" if ours => Some(Step::Deploying),
            "FunctionDeployed" if ours => Some(Step::Ready),
            "BuildFailed" | "DeployFailed" if ours => Some(Step::Failed {
                stage: Some(if event.event_type == "BuildFailed" {
                    Stage::Build
                } else {
                    Stage::Deploy
                }),
                error: text("error"),
                log_tail: text("log_tail"),
            }),
            "FunctionDeleted" => Some(Step::Deleted),
            _ => None,
        }
    }

    /// True for the steps a change ends with.
    pub fn is_end(&self) -> bool {
        matches!(self, Step::Ready | Step::Failed { .. } | Step::Deleted)
    }
}

impl Client {
    /// The audit log's tail of one function's stream. Open it before the
    /// command whose effect is to be followed, so no step is missed.
    pub async fn tail_function(&self, name: &str) -> Result<EventStream> {
        self.tail_events(&EventFilter {
            function: Some(name.to_owned()),
            ..EventFilter::default()
        })
        .await
    }

    /// Waits until `version` of `name` serves (`Ok(Step::Ready)`) or its
    /// change ended otherwise (`Ok` with the failure, or `Deleted`), on a
    /// tail opened before the command. `after` is the position of the event
    /// the command appended, when it appended one and its effect is a new
    /// deploy of a version that may already serve (a spec change): only the
    /// steps after it count, and the function's state, which may not show
    /// the command yet, is not read. Without it the state is read once
    /// first, so a change that ended before the tail saw it (an upload of
    /// the code already there) is not waited for. `Err(Error::Timeout)`
    /// once `within` has passed; `on_step` hears each step on the way.
    pub async fn wait_for_version(
        &self,
        name: &str,
        version: u32,
        after: Option<i64>,
        mut tail: EventStream,
        within: Duration,
        mut on_step: impl FnMut(&Step),
    ) -> Result<Step> {
        let deadline = tokio::time::Instant::now() + within;
        let now = match after {
            Some(_) => None,
            None => Some(self.get_function(name).await?),
        };
        if let Some(now) = now
            && now.version == Some(version)
        {
            if now.phase == "Ready" && now.deployed_version == Some(version) {
                return Ok(Step::Ready);
            }
            if now.phase == "Failed" {
                return Ok(Step::Failed {
                    stage: None,
                    error: now.last_error.clone().unwrap_or_default(),
                    log_tail: String::new(),
                });
            }
        }
        loop {
            let event = tail.next_by(deadline, within).await?;
            if after.is_some_and(|a| event.position <= a) {
                continue;
            }
            if let Some(step) = Step::of(&event, version) {
                on_step(&step);
                if step.is_end() {
                    return Ok(step);
                }
            }
        }
    }
}
