//! Version manifests: each function's version index, mirrored as JSON in
//! S3 next to the blobs (`blobs/manifests/{ns}/{name}.json`).
//!
//! An operator who lost the read models, or the database itself, can see
//! from the bucket alone which versions each function had, which one was
//! live, who uploaded each and when, and which blobs hold them. The
//! manifests are a projection of the log like the read models: a reader
//! with its own checkpoint (`NAME`), the same watermark rule, and writes
//! that may be repeated (a manifest is rewritten whole from the function's
//! stream), so a crash between the write and the checkpoint costs only a
//! rewrite.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use chrono::{DateTime, Utc};
use serde::{Deserialize, Serialize};
use sless_domain::{Function, FunctionEvent};
use sless_store::PgPool;
use sless_store::blobs::BlobStore;
use sless_store::eventlog::{self, RecordedEvent};
use tokio::sync::watch;

use crate::{Error, Result};

/// The checkpoint of the manifest writer.
pub const NAME: &str = "manifests";

/// Events read per transaction at most: what a stop throws away and a start
/// writes again, and what the writer holds in memory at once.
pub const BATCH: i64 = 1_000;

/// The event types that change a function's version index.
const INDEX_EVENTS: [&str; 5] = [
    "FunctionCreated",
    "FunctionUploaded",
    "FunctionRolledBack",
    "VersionsPruned",
    "FunctionDeleted",
];

/// Where the manifest of a function lives.
pub fn key(namespace: &str, name: &str) -> String {
    format!("blobs/manifests/{namespace}/{name}.json")
}

/// A function's version index as the bucket keeps it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct Manifest {
    pub namespace: String,
    pub name: String,
    /// False once the function is deleted (until it is created again).
    pub exists: bool,
    pub live_version: Option<u32>,
    /// The highest version number the function ever had.
    pub last_version: u32,
    /// The kept versions, oldest first.
    pub versions: Vec<ManifestVersion>,
    /// Position of the newest event of the stream this manifest reflects.
    pub position: i64,
}

/// One kept version.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ManifestVersion {
    pub version: u32,
    pub sha256: String,
    pub size: u64,
    pub files: u32,
    pub zip_key: String,
    pub context_sha256: String,
    pub context_key: String,
    pub runtime: Option<String>,
    pub uploaded_by: Option<String>,
    pub uploaded_at: DateTime<Utc>,
}

/// The manifest of the function whose whole stream is `events`.
pub fn manifest_of(namespace: &str, name: &str, events: &[RecordedEvent]) -> Result<Manifest> {
    let mut state = Function::default();
    let mut uploads: BTreeMap<u32, (Option<String>, DateTime<Utc>)> = BTreeMap::new();
    for e in events {
        let event =
            FunctionEvent::from_stored(&e.event_type, &e.data).map_err(|err| Error::BadEvent {
                position: e.position,
                event_type: e.event_type.clone(),
                error: err.to_string(),
            })?;
        if let FunctionEvent::FunctionUploaded(v) = &event {
            let actor = e
                .metadata
                .get("actor")
                .and_then(|a| a.as_str())
                .map(str::to_owned);
            uploads.insert(v.version, (actor, e.recorded_at));
        }
        state = state.evolve(&event);
    }
    let versions = state
        .versions
        .iter()
        .map(|v| {
            let (by, at) = uploads.get(&v.version).cloned().unzip();
            ManifestVersion {
                version: v.version,
                sha256: v.sha256.clone(),
                size: v.size,
                files: v.files,
                zip_key: v.zip_key.clone(),
                context_sha256: v.context_sha256.clone(),
                context_key: v.context_key.clone(),
                runtime: v.runtime.map(|r| r.as_str().to_owned()),
                uploaded_by: by.flatten(),
                uploaded_at: at.unwrap_or_default(),
            }
        })
        .collect();
    Ok(Manifest {
        namespace: namespace.to_owned(),
        name: name.to_owned(),
        exists: state.exists(),
        live_version: state.current_version.filter(|_| state.exists()),
        last_version: state.last_version,
        versions,
        position: events.last().map_or(0, |e| e.position),
    })
}

/// `(namespace, name)` of a function stream (`function/{ns}/{name}`).
fn function_of(stream: &str) -> Option<(&str, &str)> {
    stream.strip_prefix("function/")?.split_once('/')
}

/// Writes the manifests a batch of up to `limit` events changes, and moves
/// the checkpoint past them. Returns the number of events read.
pub async fn step(pool: &PgPool, blobs: &BlobStore, limit: i64) -> Result<usize> {
    let mut tx = pool.begin().await?;
    // No row lock: the S3 writes below take seconds after many creates, and
    // an xid held that long would hold back every reader of the log.
    let locked = eventlog::take_turn_below_watermark(&mut tx, NAME).await?;
    let batch = eventlog::read_committed_batch(&mut tx, locked.at, locked.watermark, limit).await?;
    let Some(last) = batch.last() else {
        tx.commit().await?;
        return Ok(0);
    };
    let started = std::time::Instant::now();
    let touched: BTreeSet<&str> = batch
        .iter()
        .filter(|e| INDEX_EVENTS.contains(&e.event_type.as_str()))
        .map(|e| e.stream.as_str())
        .collect();
    for stream in touched {
        let Some((namespace, name)) = function_of(stream) else {
            continue;
        };
        let events = eventlog::read_stream(&mut *tx, stream).await?;
        let manifest = manifest_of(namespace, name, &events)?;
        let json = serde_json::to_vec_pretty(&manifest).expect("manifests serialize");
        blobs
            .put(&key(namespace, name), json, "application/json")
            .await?;
    }
    let at = eventlog::Checkpoint {
        xid: last.xid,
        position: last.position,
    };
    eventlog::save_checkpoint(&mut tx, NAME, at).await?;
    tx.commit().await?;
    sless_telemetry::global().projector_batch(NAME, batch.len(), started.elapsed().as_secs_f64());
    Ok(batch.len())
}

/// Steps until nothing committed is left. Returns the events read.
pub async fn catch_up(pool: &PgPool, blobs: &BlobStore) -> Result<usize> {
    let mut total = 0;
    loop {
        let n = step(pool, blobs, BATCH).await?;
        if n == 0 {
            return Ok(total);
        }
        total += n;
    }
}

/// Keeps the manifests current until `shutdown`, looking every `poll`.
pub async fn run(
    pool: PgPool,
    blobs: BlobStore,
    poll: Duration,
    mut shutdown: watch::Receiver<bool>,
) -> Result<()> {
    loop {
        if *shutdown.borrow() {
            return Ok(());
        }
        // A stop does not wait for the rest of a batch (up to `BATCH`
        // events, one S3 write per function they touch: seconds, after many
        // creates). Dropping the step rolls its transaction back, so the
        // checkpoint stays before the batch and the next start writes those
        // manifests again, each the same as before.
        let stepped = tokio::select! {
            stepped = step(&pool, &blobs, BATCH) => stepped,
            _ = shutdown.changed() => return Ok(()),
        };
        let read = match stepped {
            Ok(n) => n,
            Err(e @ Error::BadEvent { .. }) => return Err(e),
            Err(e) => {
                tracing::warn!(error = %e, "writing version manifests failed; retrying");
                0
            }
        };
        if read > 0 {
            continue;
        }
        tokio::select! {
            _ = tokio::time::sleep(poll) => {}
            _ = shutdown.changed() => {}
        }
    }
}

/// The manifest of a function, if one was written.
pub async fn read(blobs: &BlobStore, namespace: &str, name: &str) -> Result<Option<Manifest>> {
    let key = key(namespace, name);
    if !blobs.exists(&key).await? {
        return Ok(None);
    }
    let bytes = blobs.get(&key).await?;
    let manifest = serde_json::from_slice(&bytes).map_err(|e| {
        Error::Store(sless_store::Error::Internal(format!(
            "the manifest {key} cannot be read: {e}"
        )))
    })?;
    Ok(Some(manifest))
}
