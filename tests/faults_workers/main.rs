//! The fault suite's worker and projector scenarios (F1, F7–F10 in
//! docs/reliability.md). Each holds a load, injects its fault, prints one
//! line to stderr —
//! `FAULT F<n> load=… faults=… acked=<n> lost=<n> duplicated=<n> …` — and
//! then asserts that nothing acknowledged was lost or doubled.
//!
//! F10 holds a transaction id for a minute, which holds back the watermark
//! of every projector and the vacuum horizon of the whole test cluster: it
//! runs alone (`exclusive`); the others run beside each other (`shared`).

mod driver_faults;
mod harness;
mod held_xmin;
mod kill;
mod redelivery;
mod shutdown;
#[path = "../support/mod.rs"]
mod support;

pub use support::*;

use tokio::sync::{RwLock, RwLockReadGuard, RwLockWriteGuard};

static CLUSTER: RwLock<()> = RwLock::const_new(());

/// Held by a scenario that can share the test cluster with others.
pub async fn shared() -> RwLockReadGuard<'static, ()> {
    CLUSTER.read().await
}

/// Held by a scenario that must have the test cluster to itself.
pub async fn exclusive() -> RwLockWriteGuard<'static, ()> {
    CLUSTER.write().await
}
