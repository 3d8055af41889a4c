//! Deleting the blobs of pruned versions, safely.
//!
//! Blobs are content-addressed and shared: two functions (or two versions
//! of one) that uploaded the same bytes use one object. A blob may go only
//! when no kept version of any function uses it, and an upload may not
//! start using it while it goes. Both sides take an advisory lock named
//! after the blob: a command that appends an event naming blobs takes it
//! shared, checks the blobs are there, and holds it until it commits; the
//! collector takes it exclusive, so it runs either before such a command
//! (which then finds the blob gone and stores it again) or after it has
//! committed (and then sees the version that uses it).
//!
//! The collector decides from the `function_versions` read model, so it
//! waits until the projector has applied every event of the log: a version
//! committed but not yet projected would otherwise look unused.
//!
//! The same protocol deletes orphans, blobs an upload stored whose event
//! never came (`crate::orphans`); their sweep only tries the lock, and
//! passes over a blob whose lock is held.

use sqlx::PgConnection;

use crate::Result;
use crate::eventlog;

pub use crate::queue::COLLECT_BLOB;

/// The advisory lock of the blob `key` (the same hash on both sides).
const LOCK_KEY: &str = "hashtextextended('sless-blob:' || $1, 0)";

/// Takes the blob's lock shared, until the transaction ends.
pub async fn lock_shared(conn: &mut PgConnection, key: &str) -> Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "select pg_advisory_xact_lock_shared({LOCK_KEY})"
    )))
    .bind(key)
    .execute(conn)
    .await?;
    Ok(())
}

/// Takes the blob's lock exclusive, until the transaction ends.
pub async fn lock_exclusive(conn: &mut PgConnection, key: &str) -> Result<()> {
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "select pg_advisory_xact_lock({LOCK_KEY})"
    )))
    .bind(key)
    .execute(conn)
    .await?;
    Ok(())
}

/// Takes the blob's lock exclusive if no one holds it, until the
/// transaction ends; false (and no lock) when someone does. Never waits.
pub async fn try_lock_exclusive(conn: &mut PgConnection, key: &str) -> Result<bool> {
    Ok(sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
        "select pg_try_advisory_xact_lock({LOCK_KEY})"
    )))
    .bind(key)
    .fetch_one(conn)
    .await?)
}

/// Enqueues the collection of `key`, in the caller's transaction.
pub async fn enqueue_collect(conn: &mut PgConnection, key: &str) -> Result<()> {
    crate::queue::enqueue(
        conn,
        COLLECT_BLOB,
        &format!("blob/{key}"),
        &serde_json::json!({ "key": key }),
    )
    .await
}

/// Whether the read models have every event of the log: nothing past the
/// projector's checkpoint, committed or not.
pub async fn read_models_current(conn: &mut PgConnection, projector: &str) -> Result<bool> {
    let p = eventlog::pending(conn, projector).await?;
    Ok(!p.ready && !p.held_back)
}
