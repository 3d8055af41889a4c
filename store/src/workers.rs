//! The workers alive (table `workers`): each one's heartbeat, so that a
//! function placed on a worker that is gone (its process ended, or was
//! killed) is placed again by another (the local driver's functions run on
//! one worker each; the log's `FunctionDeployed` names it).

use std::time::Duration;

use sqlx::{PgExecutor, PgPool};

use crate::Result;

/// Says `worker` is alive now.
pub async fn beat<'e>(exec: impl PgExecutor<'e>, worker: &str) -> Result<()> {
    sqlx::query(
        "insert into workers (id, seen_at) values ($1, now())
         on conflict (id) do update set seen_at = now()",
    )
    .bind(worker)
    .execute(exec)
    .await?;
    Ok(())
}

/// `worker` is gone (it stopped cleanly): what it ran is placed elsewhere
/// at once.
pub async fn leave<'e>(exec: impl PgExecutor<'e>, worker: &str) -> Result<()> {
    sqlx::query("delete from workers where id = $1")
        .bind(worker)
        .execute(exec)
        .await?;
    Ok(())
}

/// Forgets every worker: on a private database the process starting is
/// the only worker there is (`sless dev` after a stop).
pub async fn forget_all(pool: &PgPool) -> Result<u64> {
    Ok(sqlx::query("delete from workers")
        .execute(pool)
        .await?
        .rows_affected())
}

/// Whether `worker` beat within `within`.
pub async fn alive<'e>(exec: impl PgExecutor<'e>, worker: &str, within: Duration) -> Result<bool> {
    let alive: bool = sqlx::query_scalar(
        "select exists (select 1 from workers
                        where id = $1 and seen_at > now() - make_interval(secs => $2))",
    )
    .bind(worker)
    .bind(within.as_secs_f64())
    .fetch_one(exec)
    .await?;
    Ok(alive)
}

/// The functions (`{ns}/{name}`) the read model places on a worker that
/// did not beat within `within` or left, or, with `only`, on that worker;
/// each with the worker it is placed on.
pub async fn functions_to_place<'e>(
    exec: impl PgExecutor<'e>,
    within: Duration,
    only: Option<&str>,
) -> Result<Vec<(String, String)>> {
    let keys: Vec<(String, String)> = sqlx::query_as(
        "select f.namespace || '/' || f.name, f.deployed_node from functions f
         where f.deployed_node is not null and f.phase <> 'Deleted'
           and ($2::text is null or f.deployed_node = $2)
           and ($2::text is not null or not exists (
                 select 1 from workers w
                 where w.id = f.deployed_node and w.seen_at > now() - make_interval(secs => $1)))",
    )
    .bind(within.as_secs_f64())
    .bind(only)
    .fetch_all(exec)
    .await?;
    Ok(keys)
}
