//! The Namespace aggregate: a user's namespace, ensured once.
//!
//! Its stream (`namespace/{ns}`) holds one `NamespaceEnsured`, appended by
//! the first `POST /v1/namespaces/{ns}/ensure`; later calls append nothing.
//! The event records who first asked for the namespace and when (the audit
//! log has it), and it is what a driver that has to create something per
//! namespace (a Kubernetes Namespace) converges on.

use serde::{Deserialize, Serialize};

use crate::names::Namespace;

/// Everything that can happen to a namespace.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "type", content = "data")]
pub enum NamespaceEvent {
    NamespaceEnsured {},
}

impl NamespaceEvent {
    /// The type name stored in the log's `type` column.
    pub fn type_name(&self) -> &'static str {
        match self {
            NamespaceEvent::NamespaceEnsured {} => "NamespaceEnsured",
        }
    }

    /// The `data` column: the variant's fields as JSON.
    pub fn data(&self) -> serde_json::Value {
        match self {
            NamespaceEvent::NamespaceEnsured {} => serde_json::json!({}),
        }
    }

    /// Rebuilds an event from the log's `type` and `data` columns.
    pub fn from_stored(
        type_name: &str,
        data: &serde_json::Value,
    ) -> Result<Self, serde_json::Error> {
        crate::events::from_type_and_data(type_name, data)
    }
}

/// A namespace's state: a fold over its stream.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct NamespaceState {
    /// Number of events applied (the stream version).
    pub stream_version: u64,
    pub ensured: bool,
}

impl NamespaceState {
    pub fn evolve(mut self, event: &NamespaceEvent) -> NamespaceState {
        self.stream_version += 1;
        match event {
            NamespaceEvent::NamespaceEnsured {} => self.ensured = true,
        }
        self
    }
}

/// What can be asked of a namespace.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NamespaceCommand {
    /// Make sure it exists: recorded the first time, and never again.
    Ensure,
}

/// Decides a command for a namespace in `state`.
pub fn decide(state: &NamespaceState, command: NamespaceCommand) -> Vec<NamespaceEvent> {
    match command {
        NamespaceCommand::Ensure => decide_ensure(state.stream_version),
    }
}

impl Namespace {
    /// The event stream of this namespace.
    pub fn stream(&self) -> String {
        format!("namespace/{self}")
    }
}

/// Decides `ensure` for a namespace whose stream is at `stream_version`:
/// the first time it is ensured, and never again.
pub fn decide_ensure(stream_version: u64) -> Vec<NamespaceEvent> {
    if stream_version == 0 {
        vec![NamespaceEvent::NamespaceEnsured {}]
    } else {
        vec![]
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_namespace_is_ensured_once() {
        assert_eq!(decide_ensure(0), vec![NamespaceEvent::NamespaceEnsured {}]);
        assert_eq!(decide_ensure(1), vec![]);
        let ns = Namespace::for_subject("someone");
        assert_eq!(ns.stream(), format!("namespace/{ns}"));
        let e = NamespaceEvent::NamespaceEnsured {};
        assert_eq!(e.type_name(), "NamespaceEnsured");
        assert_eq!(e.data(), serde_json::json!({}));
    }
}
