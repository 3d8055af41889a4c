//! The `triggers` read model: one row per trigger that exists (the
//! projector removes a deleted one's row). The API lists and shows them,
//! the scheduler walks the enabled cron triggers, the Kubernetes driver's
//! cron run recorder finds the namespaces to watch, and the invoke proxy
//! asks whether a function's http triggers let it be served. The
//! reconciler, which must not see a lagging answer, asks the log's own
//! index instead (`trigger_index`).

use chrono::{DateTime, Utc};
use serde::Serialize;
use sqlx::{PgExecutor, Row};

use crate::Result;

/// One row of `triggers`.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct TriggerRow {
    pub namespace: String,
    pub name: String,
    pub function: String,
    /// `http` or `cron`.
    pub kind: String,
    /// A cron trigger's schedule and time zone.
    pub schedule: Option<String>,
    pub timezone: Option<String>,
    pub enabled: bool,
    /// When it was created or last enabled, while it is enabled.
    pub active_since: Option<DateTime<Utc>>,
    pub stream_version: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

fn row_of(r: sqlx::postgres::PgRow) -> TriggerRow {
    TriggerRow {
        namespace: r.get("namespace"),
        name: r.get("name"),
        function: r.get("function"),
        kind: r.get("kind"),
        schedule: r.get("schedule"),
        timezone: r.get("timezone"),
        enabled: r.get("enabled"),
        active_since: r.get("active_since"),
        stream_version: r.get::<i32, _>("stream_version") as u64,
        created_at: r.get("created_at"),
        updated_at: r.get("updated_at"),
    }
}

/// One trigger's row, if the projector has seen it.
pub async fn trigger_row(
    exec: impl PgExecutor<'_>,
    ns: &str,
    name: &str,
) -> Result<Option<TriggerRow>> {
    let row = sqlx::query("select * from triggers where namespace = $1 and name = $2")
        .bind(ns)
        .bind(name)
        .fetch_optional(exec)
        .await?;
    Ok(row.map(row_of))
}

/// At most `limit` triggers of a namespace, by name, after the name
/// `after` (from the first when None): a page of the list (the primary
/// key walks it, from the cursor on in any plan: see
/// `readmodel::function_rows_after`).
pub async fn trigger_rows(
    exec: impl PgExecutor<'_>,
    ns: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<TriggerRow>> {
    let rows = sqlx::query(
        "select * from triggers
         where namespace = $1 and name > coalesce($2, '')
         order by name limit $3",
    )
    .bind(ns)
    .bind(after)
    .bind(limit)
    .fetch_all(exec)
    .await?;
    Ok(rows.into_iter().map(row_of).collect())
}

/// An enabled cron trigger, as the scheduler needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CronTrigger {
    pub namespace: String,
    pub name: String,
    pub function: String,
    pub schedule: String,
    pub timezone: String,
    /// No tick from before this time is run.
    pub active_since: DateTime<Utc>,
}

/// Every enabled cron trigger, by namespace and name.
pub async fn enabled_cron(exec: impl PgExecutor<'_>) -> Result<Vec<CronTrigger>> {
    // The projector sets schedule, timezone and active_since on every
    // enabled cron trigger; the coalesces keep one row that lacks them
    // from failing the whole walk.
    let rows = sqlx::query(
        "select namespace, name, function, schedule, coalesce(timezone, 'UTC') as timezone,
                coalesce(active_since, updated_at) as active_since
         from triggers
         where kind = 'cron' and enabled and schedule is not null
         order by namespace, name",
    )
    .fetch_all(exec)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| CronTrigger {
            namespace: r.get("namespace"),
            name: r.get("name"),
            function: r.get("function"),
            schedule: r.get("schedule"),
            timezone: r.get("timezone"),
            active_since: r.get("active_since"),
        })
        .collect())
}

/// The namespaces with at least one cron trigger, enabled or not, by name:
/// where the Kubernetes driver's CronJobs may start Jobs to watch. From the
/// read model, so a namespace's first cron trigger shows once the
/// projector has applied it.
pub async fn namespaces_with_cron(exec: impl PgExecutor<'_>) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "select distinct namespace from triggers where kind = 'cron' order by namespace",
    )
    .fetch_all(exec)
    .await?)
}

/// Whether a function's http triggers keep it from being served:
/// `Some(names of its http triggers)` when it has http triggers and none
/// of them is enabled; `None` when it is served (no http trigger at all,
/// as before triggers existed, or at least one enabled).
pub async fn http_gate(
    exec: impl PgExecutor<'_>,
    ns: &str,
    function: &str,
) -> Result<Option<Vec<String>>> {
    let rows = sqlx::query(
        "select name, enabled from triggers
         where namespace = $1 and function = $2 and kind = 'http'
         order by name",
    )
    .bind(ns)
    .bind(function)
    .fetch_all(exec)
    .await?;
    if rows.is_empty() || rows.iter().any(|r| r.get::<bool, _>("enabled")) {
        return Ok(None);
    }
    Ok(Some(rows.into_iter().map(|r| r.get("name")).collect()))
}

#[cfg(test)]
mod tests {
    use super::*;
    use sless_testkit::TestDb;

    /// Rows as the projector would write them (this crate does not depend
    /// on the projector; the queries only read the table).
    async fn put(db: &TestDb, ns: &str, name: &str, function: &str, cron: bool, enabled: bool) {
        sqlx::query(
            "insert into triggers (namespace, name, function, kind, schedule, timezone, enabled,
                                   active_since, stream_version, created_at, updated_at)
             values ($1, $2, $3, $4, $5, $6, $7, case when $7 then now() end, 1, now(), now())",
        )
        .bind(ns)
        .bind(name)
        .bind(function)
        .bind(if cron { "cron" } else { "http" })
        .bind(cron.then_some("*/5 * * * *"))
        .bind(cron.then_some("Europe/Berlin"))
        .bind(enabled)
        .execute(&db.pool)
        .await
        .unwrap();
    }

    #[tokio::test]
    async fn a_function_is_gated_only_when_it_has_http_triggers_and_none_is_enabled() {
        let db = TestDb::new().await;
        let ns = "sless-0000000000000001";
        assert_eq!(http_gate(&db.pool, ns, "f").await.unwrap(), None);
        // A cron trigger does not gate serving.
        put(&db, ns, "tick", "f", true, false).await;
        assert_eq!(http_gate(&db.pool, ns, "f").await.unwrap(), None);
        put(&db, ns, "web-b", "f", false, false).await;
        put(&db, ns, "web-a", "f", false, false).await;
        assert_eq!(
            http_gate(&db.pool, ns, "f").await.unwrap(),
            Some(vec!["web-a".to_owned(), "web-b".to_owned()])
        );
        // Another namespace's function of the same name is its own.
        assert_eq!(
            http_gate(&db.pool, "sless-0000000000000002", "f")
                .await
                .unwrap(),
            None
        );
        sqlx::query("update triggers set enabled = true where name = 'web-b'")
            .execute(&db.pool)
            .await
            .unwrap();
        assert_eq!(http_gate(&db.pool, ns, "f").await.unwrap(), None);
    }

    #[tokio::test]
    async fn the_scheduler_sees_every_enabled_cron_trigger_and_nothing_else() {
        let db = TestDb::new().await;
        put(&db, "sless-0000000000000002", "b", "f", true, true).await;
        put(&db, "sless-0000000000000001", "a", "f", true, true).await;
        put(&db, "sless-0000000000000001", "off", "f", true, false).await;
        put(&db, "sless-0000000000000001", "web", "f", false, true).await;
        let got = enabled_cron(&db.pool).await.unwrap();
        let names: Vec<_> = got.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "b"]);
        assert_eq!(got[0].schedule, "*/5 * * * *");
        assert_eq!(got[0].timezone, "Europe/Berlin");
        let rows = trigger_rows(&db.pool, "sless-0000000000000001", None, 10)
            .await
            .unwrap();
        let names: Vec<_> = rows.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["a", "off", "web"]);
        // A page: after a name, at most so many.
        let rows = trigger_rows(&db.pool, "sless-0000000000000001", Some("a"), 1)
            .await
            .unwrap();
        let names: Vec<_> = rows.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, ["off"]);
        let off = trigger_row(&db.pool, "sless-0000000000000001", "off")
            .await
            .unwrap()
            .unwrap();
        assert_eq!((off.enabled, off.active_since), (false, None));
    }

    #[tokio::test]
    async fn the_namespaces_with_cron_are_those_with_a_cron_trigger_enabled_or_not() {
        let db = TestDb::new().await;
        assert!(namespaces_with_cron(&db.pool).await.unwrap().is_empty());
        put(&db, "sless-0000000000000003", "web", "f", false, true).await;
        put(&db, "sless-0000000000000002", "off", "f", true, false).await;
        put(&db, "sless-0000000000000001", "a", "f", true, true).await;
        put(&db, "sless-0000000000000001", "b", "g", true, true).await;
        assert_eq!(
            namespaces_with_cron(&db.pool).await.unwrap(),
            ["sless-0000000000000001", "sless-0000000000000002"]
        );
    }
}
