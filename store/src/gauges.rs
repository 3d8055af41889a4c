//! What the metrics read from the database when they are scraped: each
//! projection's checkpoint and how far it is behind the log, the work
//! queue's items by kind and state, and each function's instances and
//! calls in flight.

use sqlx::{PgPool, Row};

use crate::Result;

/// Where one projection stands.
#[derive(Debug, Clone, PartialEq)]
pub struct Projection {
    pub name: String,
    /// The position of the last event it applied.
    pub position: i64,
    /// Committed events after its checkpoint.
    pub behind: i64,
    /// How long ago the oldest of those was recorded, in seconds (0 when
    /// none is).
    pub behind_secs: f64,
}

/// Every projection's checkpoint and lag, behind the events committed now.
pub async fn projections(pool: &PgPool) -> Result<Vec<Projection>> {
    let rows = sqlx::query(
        "select c.name, c.position, l.behind, l.oldest
         from projector_checkpoints c
         cross join lateral (
             select count(*) as behind,
                    coalesce(extract(epoch from now() - min(e.recorded_at)), 0)::float8 as oldest
             from events e
             where (e.xid, e.position) > (c.xid, c.position)
         ) l
         order by c.name",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| Projection {
            name: r.get("name"),
            position: r.get("position"),
            behind: r.get("behind"),
            behind_secs: r.get::<f64, _>("oldest").max(0.0),
        })
        .collect())
}

/// Work items by kind and state: `pending`, `running`, and `dead` (out of
/// attempts).
pub async fn queue(pool: &PgPool) -> Result<Vec<(String, String, i64)>> {
    let rows = sqlx::query(
        "select kind, state, count(*) as n from work_items group by kind, state
         union all
         select kind, 'dead', count(*) from work_dead group by kind
         order by 1, 2",
    )
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect())
}

/// Each function that has instances serving or calls in flight:
/// `(namespace, name, instances, in_flight)`, the calls summed over the
/// fresh reports of every API process.
pub async fn functions(pool: &PgPool) -> Result<Vec<(String, String, i64, f64)>> {
    let rows = sqlx::query(
        "with load as (
             select namespace, name, sum(in_flight) as in_flight from function_load
             where reported_at > now() - make_interval(secs => $1)
             group by namespace, name
         )
         select f.namespace, f.name,
                case when f.endpoint is null then 0 else f.instances end::int8 as instances,
                coalesce(l.in_flight, 0)::float8 as in_flight
         from functions f
         left join load l on l.namespace = f.namespace and l.name = f.name
         where f.phase <> 'Deleted'
           and ((f.endpoint is not null and f.instances > 0) or l.in_flight > 0)
         order by f.namespace, f.name",
    )
    .bind(crate::scaling::LOAD_FRESH_SECS)
    .fetch_all(pool)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| {
            (
                r.get("namespace"),
                r.get("name"),
                r.get("instances"),
                r.get("in_flight"),
            )
        })
        .collect())
}
