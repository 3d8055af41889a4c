//! The slot of each namespace in the local driver's range of sandbox uids
//! (table `sandbox_uids`): given on first use, the lowest one never given,
//! kept for good.

use sqlx::PgPool;

use crate::Result;

/// The namespace's slot, giving it the next free one on first use. Two
/// namespaces asking at once never get the same slot (the unique
/// constraint refuses the second, which asks again).
pub async fn slot(pool: &PgPool, namespace: &str) -> Result<u32> {
    for _ in 0..16 {
        if let Some(slot) =
            sqlx::query_scalar::<_, i32>("select slot from sandbox_uids where namespace = $1")
                .bind(namespace)
                .fetch_optional(pool)
                .await?
        {
            return Ok(u32::try_from(slot).unwrap_or(0));
        }
        let given = sqlx::query(
            "insert into sandbox_uids (namespace, slot)
             select $1, coalesce(max(slot) + 1, 0) from sandbox_uids
             on conflict do nothing",
        )
        .bind(namespace)
        .execute(pool)
        .await;
        match given {
            Ok(_) => {}
            Err(sqlx::Error::Database(e)) if e.is_unique_violation() => {}
            Err(e) => return Err(e.into()),
        }
    }
    Err(crate::Error::Internal(format!(
        "no sandbox uid slot could be given to {namespace}"
    )))
}
