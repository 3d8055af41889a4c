//! Blobs stored ahead of their event, and the orphans a lost upload leaves.
//!
//! An upload stores its zip and build context in S3 before it appends the
//! event that names them (the event must never exist without its blobs).
//! When that append loses (a 409, a crash between the put and the commit,
//! a client gone), the blobs would stay with nothing naming them. So an
//! upload records each key in `blobs_in_flight` before its put, in a
//! statement of its own (`record_in_flight`), and the transaction that
//! appends the event deletes the record (`landed`). A record older than the
//! grace period (`overdue`) names a possible orphan; the workers' sweep
//! deletes the blob under the protocol of `retention` (the blob's lock
//! exclusive, the read models current, no kept version using it).
//!
//! Why a record and not a listing of the bucket: a sweep then reads a table
//! as small as the uploads in flight, through one index, instead of every
//! key of the bucket and every kept version; with nothing to do it costs one
//! index probe. Blobs orphaned before this record existed are not found.

use std::time::Duration;

use sqlx::{PgConnection, PgExecutor, PgPool};

use crate::Result;

/// Records that the blobs `keys` are being stored ahead of their event
/// (again: a later upload of the same bytes starts the grace period over).
/// Runs on its own, committed before the blobs are put.
pub async fn record_in_flight(pool: &PgPool, keys: &[&str]) -> Result<()> {
    sqlx::query(
        "insert into blobs_in_flight (key)
         select * from unnest($1::text[])
         on conflict (key) do update set stored_at = now()",
    )
    .bind(keys)
    .execute(pool)
    .await?;
    Ok(())
}

/// The event naming `keys` is being appended in this transaction: their
/// records go with its commit.
pub async fn landed<'e>(exec: impl PgExecutor<'e>, keys: &[String]) -> Result<()> {
    if keys.is_empty() {
        return Ok(());
    }
    sqlx::query("delete from blobs_in_flight where key = any($1)")
        .bind(keys)
        .execute(exec)
        .await?;
    Ok(())
}

/// Up to `limit` keys recorded longer than `grace` ago, oldest first.
pub async fn overdue(pool: &PgPool, grace: Duration, limit: i64) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "select key from blobs_in_flight
         where stored_at < now() - make_interval(secs => $1)
         order by stored_at
         limit $2",
    )
    .bind(grace.as_secs_f64())
    .bind(limit)
    .fetch_all(pool)
    .await?)
}

/// Locks `key`'s record for the rest of the transaction if it is still
/// older than `grace`. False when it is not: an upload of the same bytes
/// recorded it again, its event landed, or another sweep holds it (never
/// waits).
pub async fn lock_overdue(conn: &mut PgConnection, key: &str, grace: Duration) -> Result<bool> {
    let found: Option<String> = sqlx::query_scalar(
        "select key from blobs_in_flight
         where key = $1 and stored_at < now() - make_interval(secs => $2)
         for update skip locked",
    )
    .bind(key)
    .bind(grace.as_secs_f64())
    .fetch_optional(conn)
    .await?;
    Ok(found.is_some())
}

/// Deletes `key`'s record (its blob was dealt with).
pub async fn forget<'e>(exec: impl PgExecutor<'e>, key: &str) -> Result<()> {
    sqlx::query("delete from blobs_in_flight where key = $1")
        .bind(key)
        .execute(exec)
        .await?;
    Ok(())
}
