//! What the reconciler does next for one function: a pure decision on what
//! the log says the function should be (`Function`) and what was seen of
//! what runs (`Observed`), carried out by `Reconciler::act`.

use sless_domain::{Function, FunctionEvent, Phase};
use sless_store::trigger_index::HttpTriggers;

use crate::driver::Deployment;

/// What was seen of a function outside its stream, for [`next`].
#[derive(Debug, Clone, Default)]
pub struct Observed {
    /// Its http triggers (it runs only while it has none or one is enabled).
    pub triggers: HttpTriggers,
    /// What the driver runs for it, if anything.
    pub running: Option<Deployment>,
    /// This worker's id, for a driver whose functions run on one worker
    /// each (`Driver::node`).
    pub here: Option<String>,
    /// The worker the log says it runs on (`deployed_node`), when that is
    /// another one, is alive.
    pub there_alive: bool,
}

/// The next thing a function needs.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Converged: nothing to do.
    Nothing,
    /// Nothing should run (deleted, never created, nothing uploaded since
    /// it was created again): remove whatever runs for it.
    Remove,
    /// Stop what runs (no http trigger of it is enabled, or it is scaled to
    /// zero), then record `then`, if anything.
    Stop { then: Option<FunctionEvent> },
    /// Record a fact no driver call is needed for (the current version
    /// serves as it is; a build is about to start).
    Record(FunctionEvent),
    /// The current version failed while nothing ran: start `version`, the
    /// one that served before, again.
    Restore { version: u32 },
    /// Build the current version `version`.
    Build { version: u32 },
    /// Deploy the current version `version`, built already (its artifact is
    /// checked first).
    Deploy { version: u32 },
}

/// Decides the next action for `state` given `observed`.
pub fn next(state: &Function, observed: &Observed) -> Action {
    let (Some(spec), Some(current)) = (state.spec.as_ref(), state.current()) else {
        return Action::Remove;
    };
    // A function with http triggers runs only while one of them is
    // enabled; otherwise it is stopped (and not built: enabling a trigger
    // builds and deploys its current version).
    if !observed.triggers.served() {
        let then = state
            .deployed_version
            .map(|version| FunctionEvent::FunctionStopped {
                version,
                reason: format!(
                    "no http trigger of it is enabled ({})",
                    observed.triggers.names.join(", ")
                ),
            });
        return Action::Stop { then };
    }
    // Scaled to zero: nothing runs until a call scales it up (the build is
    // kept, so that it deploys at once).
    if state.idle {
        return Action::Stop { then: None };
    }
    if state.failed_version == Some(current.version) {
        // Waits for a new upload, with what served before serving.
        return restore(state, spec.runtime);
    }
    // A driver whose functions run on one worker each: the log says which.
    // The current version with the current spec on another worker that is
    // alive is where it should be (no second copy here); an older one, or
    // one on a worker that is gone, is deployed here.
    let elsewhere = matches!(
        (observed.here.as_deref(), state.deployed_node.as_deref()),
        (Some(here), Some(there)) if here != there
    );
    let current_there =
        state.deployed_version == Some(current.version) && state.deployed_with_current_spec();
    if elsewhere && current_there && observed.there_alive {
        return serving_as_it_is(state);
    }
    // Converged: the current version runs, where the log says, started
    // with the spec the log has now (a spec change redeploys), as many
    // instances of it as should, at the endpoints the log has (a count
    // that changed, or an instance started again elsewhere, deploys again
    // and records where they serve now).
    let converged = !elsewhere
        && observed.running.as_ref().is_some_and(|d| {
            d.version == current.version
                && state.deployed_version == Some(current.version)
                && state.endpoint.as_deref() == Some(d.endpoint.as_str())
                && state.deployed_with_current_spec()
                && d.ready == state.instances()
                && d.instances == state.instance_endpoints
        });
    if converged {
        return serving_as_it_is(state);
    }
    match &state.built {
        Some((v, _)) if *v == current.version => Action::Deploy {
            version: current.version,
        },
        _ if state.phase != Phase::Building => Action::Record(FunctionEvent::BuildStarted {
            version: current.version,
        }),
        _ => Action::Build {
            version: current.version,
        },
    }
}

/// The current version serves, as deployed: converged. Made current again
/// while it served (a rollback to the live version before a newer upload
/// was deployed), it is `Pending` in the log, which records that it serves
/// as it is (the same endpoint and node).
fn serving_as_it_is(state: &Function) -> Action {
    match (state.deployed_version, &state.endpoint) {
        (Some(version), Some(endpoint)) if state.phase == Phase::Pending => {
            Action::Record(FunctionEvent::FunctionDeployed {
                version,
                endpoint: endpoint.clone(),
                node: state.deployed_node.clone(),
                instances: state.instance_endpoints.clone(),
            })
        }
        _ => Action::Nothing,
    }
}

/// The current version failed to build or deploy and nothing runs,
/// although a version served before (it was stopped while the function was
/// scaled to zero, and the upload that failed made it warm): that version
/// is started again, as a failed deploy leaves what served before it
/// serving. The function stays `Failed` with its error.
fn restore(state: &Function, runtime: sless_domain::Runtime) -> Action {
    let Some(served) = state.deployed_version else {
        return Action::Nothing;
    };
    let runs_here = state.version(served).is_some_and(|v| {
        v.runtime.is_none_or(|r| r == runtime) && state.artifacts.contains_key(&served)
    });
    if state.endpoint.is_some() || state.idle || state.current_version == Some(served) || !runs_here
    {
        return Action::Nothing;
    }
    Action::Restore { version: served }
}

#[cfg(test)]
mod tests;
