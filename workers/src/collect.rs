//! Deleting the blob of a pruned version once nothing uses it
//! (`sless_store::retention` has the protocol).

use sless_store::PgPool;
use sless_store::blobs::BlobStore;
use sless_store::queue::WorkItem;
use sless_store::{eventlog, readmodel, retention};

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
    // Every command that could use the blob has committed (or waits for
    // this lock); its version counts once the projector has it.
    if !retention::read_models_current(&mut tx, eventlog::READ_MODELS)
        .await
        .map_err(HandlerError::retry)?
    {
        return Err(HandlerError::Retry(
            "the read models have not caught up with the log yet".into(),
        ));
    }
    if readmodel::blob_in_use(&mut *tx, key)
        .await
        .map_err(HandlerError::retry)?
    {
        return Ok(Collected::InUse);
    }
    blobs.delete(key).await.map_err(HandlerError::retry)?;
    tx.commit().await.map_err(HandlerError::retry)?;
    tracing::info!(key, "deleted the blob of pruned versions");
    Ok(Collected::Deleted)
}
