//! Where the functions of a driver that runs them on one worker each (the
//! local driver) run: where the log says (`FunctionDeployed`'s `node`).
//!
//! Every such worker beats (table `workers`) with its lease heartbeat, and
//! sweeps with its lease sweep:
//! - a function the read model places on a worker that has not beaten for
//!   a lease (its process was killed), or that left (it stopped), gets a
//!   reconcile, which whichever worker takes it turns into a deploy there;
//! - a copy this worker runs that the log no longer places here (another
//!   worker deployed a newer version, or the function was deleted or
//!   stopped by a reconcile another worker ran) is stopped.
//!
//! The reconciler (`reconcile`) never starts a second copy of what runs,
//! current, on a worker that is alive.

use std::time::Duration;

use sless_domain::{FunctionKey, Phase};
use sless_store::PgPool;
use sless_store::{eventlog, queue, readmodel, workers};

use crate::driver::{Driver, Node};

/// How long a copy must have run before the sweep may stop it: its
/// `FunctionDeployed` is appended right after it became healthy.
const SETTLE: Duration = Duration::from_secs(10);

/// Says this worker is alive.
pub async fn beat<D: Driver>(pool: &PgPool, driver: &D) {
    if let Some(node) = driver.node()
        && let Err(e) = workers::beat(pool, &node.id).await
    {
        tracing::warn!(error = %e, "the worker's placement heartbeat failed");
    }
}

/// One sweep (see the module docs).
pub async fn sweep<D: Driver>(pool: &PgPool, driver: &D) -> sless_store::Result<()> {
    let Some(node) = driver.node() else {
        return Ok(());
    };
    let mut orphaned = workers::functions_to_place(pool, node.dead_after, None).await?;
    // Placed here, while this worker's own beat is late (a slow machine):
    // not an orphan.
    let here: Vec<String> = driver
        .running_here()
        .iter()
        .map(|r| r.key.queue_key())
        .collect();
    orphaned.retain(|k| !here.contains(k));
    for key in &orphaned {
        queue::enqueue_reconcile(pool, key).await?;
    }
    if !orphaned.is_empty() {
        tracing::info!(
            functions = orphaned.len(),
            "functions whose worker is gone are placed again"
        );
    }
    for copy in driver.running_here() {
        if copy.age < SETTLE || placed_here(pool, &node, &copy.key, &copy.endpoint).await? {
            continue;
        }
        tracing::info!(function = %copy.key, version = copy.version, "the log no longer places it here; stopped");
        if let Err(e) = driver.remove(&copy.key).await {
            tracing::warn!(function = %copy.key, error = %e, "stopping a copy placed elsewhere failed");
        }
    }
    Ok(())
}

/// Whether the log places `key` here, at `endpoint` (the read model first;
/// the log itself when the read model says otherwise, since it may lag).
async fn placed_here(
    pool: &PgPool,
    node: &Node,
    key: &FunctionKey,
    endpoint: &str,
) -> sless_store::Result<bool> {
    let here = |deployed: Option<&str>, at: Option<&str>, live: bool| {
        live && deployed == Some(node.id.as_str()) && at == Some(endpoint)
    };
    let row = readmodel::function_row_any(pool, key.namespace.as_str(), key.name.as_str()).await?;
    if row.as_ref().is_some_and(|r| {
        here(
            r.deployed_node.as_deref(),
            r.endpoint.as_deref(),
            r.phase != Phase::Deleted,
        )
    }) {
        return Ok(true);
    }
    let (state, _) = eventlog::load::<sless_domain::Function>(pool, &key.stream()).await?;
    Ok(here(
        state.deployed_node.as_deref(),
        state.endpoint.as_deref(),
        state.exists(),
    ))
}

/// This worker leaves (it stops cleanly, having stopped what it ran):
/// what it ran is placed elsewhere at once, not after a lease.
pub async fn leave(pool: &PgPool, node: &Node) -> sless_store::Result<usize> {
    workers::leave(pool, &node.id).await?;
    let mine = workers::functions_to_place(pool, node.dead_after, Some(&node.id)).await?;
    for key in &mine {
        queue::enqueue_reconcile(pool, key).await?;
    }
    Ok(mine.len())
}
