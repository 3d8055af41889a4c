//! Where the functions of a driver that runs them on one worker each (the
//! local driver) run: where the log says (`FunctionDeployed`'s `node`).
//!
//! Every such worker beats (table `workers`) with its lease heartbeat, and
//! sweeps with its lease sweep:
//! - a function the read model places on a worker that left (it stopped)
//!   gets a reconcile, which another worker turns into a deploy there (the
//!   proxy holds the calls its refused instances get meanwhile);
//! - one placed on a worker that has not beaten for a lease (its process
//!   was killed) has lost its instances (`FunctionCommand::InstancesLost`): it is at zero at
//!   once, so the proxy holds its calls instead of sending them where
//!   nothing listens, and starts again on whichever worker takes its
//!   reconcile;
//! - a copy this worker runs that the log no longer places here (another
//!   worker deployed a newer version, or the function was deleted or
//!   stopped by a reconcile another worker ran) is stopped.
//!
//! A worker that starts again under the id it had (`SLESS_WORKER_ID`)
//! runs nothing of what the log places on it: those functions lost their
//! instances too ([`arrive`]).
//!
//! The reconciler (`reconcile`) never starts a second copy of what runs,
//! current, on a worker that is alive.

use std::time::Duration;

use sless_domain::function::FunctionCommand;
use sless_domain::{FunctionKey, Phase};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata};
use sless_store::{readmodel, scaling, workers};

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
    orphaned.retain(|(k, _)| !here.contains(k));
    let lease = node.dead_after.as_secs_f64();
    let lost = instances_lost(pool, &orphaned, |gone| {
        format!("worker {gone} is gone (it left, or sent no heartbeat for {lease:.0} s), and its instances with it")
    })
    .await?;
    if lost > 0 {
        tracing::info!(
            functions = lost,
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
    for (key, _) in &mine {
        sless_store::queue::enqueue_reconcile(pool, key).await?;
    }
    Ok(mine.len())
}

/// This worker starts (before it serves anything): what the log places on
/// it under its id, from an earlier run that ended without leaving (a
/// kill, a crash), no longer runs.
pub async fn arrive<D: Driver>(pool: &PgPool, driver: &D) -> sless_store::Result<usize> {
    let Some(node) = driver.node() else {
        return Ok(0);
    };
    let here: Vec<String> = driver
        .running_here()
        .iter()
        .map(|r| r.key.queue_key())
        .collect();
    let mut mine = workers::functions_to_place(pool, node.dead_after, Some(&node.id)).await?;
    mine.retain(|(k, _)| !here.contains(k));
    instances_lost(pool, &mine, |me| {
        format!("worker {me} started again; the instances it ran before ended with its last run")
    })
    .await
}

/// How many functions' losses are recorded at once.
const LOST_AT_ONCE: usize = 8;

/// Records that each of `placed` (a function, and the worker the log
/// places it on) lost its instances with that worker (`why`, of the
/// worker, says what became of it), and has it started again: how many
/// had instances there.
async fn instances_lost(
    pool: &PgPool,
    placed: &[(String, String)],
    why: impl Fn(&str) -> String,
) -> sless_store::Result<usize> {
    let mut lost = 0;
    for some in placed.chunks(LOST_AT_ONCE) {
        let decided = futures_util::future::join_all(
            some.iter()
                .map(|(key, node)| lose(pool, key.clone(), node.clone(), why(node))),
        )
        .await;
        for d in decided {
            lost += usize::from(d?);
        }
    }
    Ok(lost)
}

/// `InstancesLost` for one function (`{ns}/{name}`), placed on `node`.
async fn lose(
    pool: &PgPool,
    key: String,
    node: String,
    reason: String,
) -> sless_store::Result<bool> {
    let Ok(key) = FunctionKey::from_queue_key(&key) else {
        return Ok(false);
    };
    let metadata = Metadata {
        actor: "system:placement".into(),
        correlation_id: Some(format!("worker-{node}")),
        ..Default::default()
    };
    let command = FunctionCommand::InstancesLost {
        node: Some(node),
        reason,
    };
    let decided = scaling::decide_and_enqueue(pool, &key, command, metadata).await?;
    if decided.appended.is_none() {
        // Not served from there after all: converged by a reconcile.
        sless_store::queue::enqueue_reconcile(pool, &key.queue_key()).await?;
    }
    Ok(decided.appended.is_some())
}
