//! Retention: how many of a function's versions are kept, and what an
//! append that passes that number prunes with it.

use super::{Decision, Function};
use crate::events::FunctionEvent;

/// How many versions a function keeps besides the live one: the newest
/// `keep` (at least one), and the live version, however old. An upload or
/// a change of spec that appends events (a runtime change makes a version)
/// prunes the others in the same append (`VersionsPruned`): the versions
/// it passes the number by, or all past a number lowered since.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Retention {
    pub keep: usize,
}

impl Retention {
    /// Every version is kept: nothing is pruned.
    pub const ALL: Retention = Retention { keep: usize::MAX };

    /// The decision of appending `events` to `state`: `events`, and
    /// `VersionsPruned` after them when the state they make holds more
    /// versions than kept.
    pub(super) fn apply(self, state: &Function, mut events: Vec<FunctionEvent>) -> Decision {
        let after = events.iter().fold(state.clone(), Function::evolve);
        let mut pruned = Vec::new();
        if let Some(event) = prune_versions(&after, self.keep) {
            if let FunctionEvent::VersionsPruned { versions } = &event {
                pruned = versions
                    .iter()
                    .filter_map(|v| after.version(*v))
                    .cloned()
                    .collect();
            }
            events.push(event);
        }
        Decision { events, pruned }
    }
}

/// The versions retention drops from `state`: all but the newest `keep`
/// and the current one. `None` when nothing goes.
pub fn prune_versions(state: &Function, keep: usize) -> Option<FunctionEvent> {
    let newest = state.versions.len().saturating_sub(keep.max(1));
    let versions: Vec<u32> = state.versions[..newest]
        .iter()
        .map(|v| v.version)
        .filter(|v| state.current_version != Some(*v))
        .collect();
    (!versions.is_empty()).then_some(FunctionEvent::VersionsPruned { versions })
}
