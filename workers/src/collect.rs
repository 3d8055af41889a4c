//! Deleting blobs nothing uses: the blob of a pruned version once no kept
//! version uses it (a `CollectBlob` item), orphans, blobs an upload
//! stored whose event never came (the worker's periodic sweep), and the
//! build logs of pruned versions (the reconciler, once the function has
//! converged). `sless_store::retention` has the protocol,
//! `sless_store::orphans` the records orphans are found by, and
//! `sless_store::build_logs` the rows build logs are found by.

use std::time::Duration;

use sless_domain::{Function, FunctionKey};
use sless_store::PgPool;
use sless_store::blobs::{self, BlobStore};
use sless_store::queue::WorkItem;
use sless_store::{build_logs, eventlog, orphans, readmodel, retention};
use sqlx::PgConnection;

use crate::{HandlerError, HandlerResult};

pub use sless_store::retention::COLLECT_BLOB as KIND;

/// What collecting a blob did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Collected {
    Deleted,
    /// A kept version still uses it.
    InUse,
}

/// Deletes the blob the item names unless a kept version of any function
/// still uses it. Retries while the read models lag the log.
pub async fn collect(pool: &PgPool, blobs: &BlobStore, item: &WorkItem) -> HandlerResult<()> {
    let Some(key) = item.payload.get("key").and_then(|k| k.as_str()) else {
        return Err(HandlerError::Fatal(format!(
            "a {KIND} item without a key: {}",
            item.payload
        )));
    };
    collect_key(pool, blobs, key).await.map(|_| ())
}

/// `collect` for one blob key.
pub async fn collect_key(pool: &PgPool, blobs: &BlobStore, key: &str) -> HandlerResult<Collected> {
    let mut tx = pool.begin().await.map_err(HandlerError::retry)?;
    retention::lock_exclusive(&mut tx, key)
        .await
        .map_err(HandlerError::retry)?;
    let decided = delete_unless_used(&mut tx, blobs, key).await;
    let Some(collected) = decided.map_err(HandlerError::retry)? else {
        return Err(HandlerError::Retry(
            "the read models have not caught up with the log yet".into(),
        ));
    };
    tx.commit().await.map_err(HandlerError::retry)?;
    if collected == Collected::Deleted {
        tracing::info!(key, "deleted the blob of pruned versions");
    }
    Ok(collected)
}

/// With the blob's lock held exclusive: deletes it unless a kept version
/// uses it. None, deleting nothing, while the read models lag the log.
async fn delete_unless_used(
    tx: &mut PgConnection,
    blobs: &BlobStore,
    key: &str,
) -> sless_store::Result<Option<Collected>> {
    // Every command that could use the blob has committed (or waits for
    // this lock); its version counts once the projector has it.
    if !retention::read_models_current(tx, eventlog::READ_MODELS).await? {
        return Ok(None);
    }
    if readmodel::blob_in_use(&mut *tx, key).await? {
        return Ok(Some(Collected::InUse));
    }
    blobs.delete(key).await?;
    Ok(Some(Collected::Deleted))
}

/// What one orphan sweep did.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Swept {
    /// Orphans deleted from the bucket.
    pub deleted: Vec<String>,
    /// Records dropped because a kept version uses the same bytes.
    pub in_use: usize,
    /// Blobs passed over because their lock was held: a command naming
    /// them is committing, or another worker's sweep has them.
    pub busy: usize,
    /// The sweep stopped early: the read models lag the log, so a version
    /// using a blob might not show yet. The next sweep goes on.
    pub lagging: bool,
}

/// Deletes the orphans whose record is older than `grace`, up to `limit`
/// of them, under the blob protocol. Never waits for a lock: several
/// workers sweeping at once share the work, and a blob a command is about
/// to name (its lock held shared) is left for a later sweep.
pub async fn sweep_orphans(
    pool: &PgPool,
    blobs: &BlobStore,
    grace: Duration,
    limit: i64,
) -> sless_store::Result<Swept> {
    let mut swept = Swept::default();
    let keys = orphans::overdue(pool, grace, limit).await?;
    for key in keys {
        let mut tx = pool.begin().await?;
        // The blob's lock first, then its record: a command holds or waits
        // for the record (it deletes it) before it takes the lock shared.
        if !retention::try_lock_exclusive(&mut tx, &key).await? {
            swept.busy += 1;
            continue;
        }
        if !orphans::lock_overdue(&mut tx, &key, grace).await? {
            continue; // recorded again, landed, or another sweep's
        }
        let Some(collected) = delete_unless_used(&mut tx, blobs, &key).await? else {
            swept.lagging = true;
            return Ok(swept);
        };
        orphans::forget(&mut *tx, &key).await?;
        tx.commit().await?;
        match collected {
            Collected::InUse => swept.in_use += 1,
            Collected::Deleted => {
                tracing::info!(
                    key,
                    "deleted an orphan blob: the upload that stored it never appended an event naming it"
                );
                swept.deleted.push(key);
            }
        }
    }
    Ok(swept)
}

/// Deletes the build log (its object, then its row) of every version of
/// `key` that has one and that `f`, the function as its stream has it, no
/// longer keeps. A build log is a version's own (its key names the
/// version, and a number is never given twice), so no lock is needed: a
/// pruned version is never built again, and a build of it that was still
/// running when it was pruned is left until it ends, or its worker has
/// been silent for `build_log::SILENT_AFTER`. Returns how many went.
pub async fn build_logs_of_pruned(
    pool: &PgPool,
    blobs: &BlobStore,
    key: &FunctionKey,
    f: &Function,
) -> sless_store::Result<usize> {
    let (ns, name) = (key.namespace.as_str(), key.name.as_str());
    let kept: Vec<u32> = f.versions.iter().map(|v| v.version).collect();
    let pruned =
        build_logs::not_kept(pool, ns, name, &kept, crate::build_log::SILENT_AFTER).await?;
    for version in &pruned {
        blobs
            .delete(&blobs::build_log_key(ns, name, *version))
            .await?;
        build_logs::forget(pool, ns, name, *version).await?;
    }
    Ok(pruned.len())
}
