//! Read models: the rows the projector keeps from the log and the API
//! queries. Only the projector writes them.
//!
//! A deleted function keeps its row, in phase `Deleted` (the projector
//! needs its stream version to go on when the name is created again), and
//! its version rows. The queries the API and the invoke proxy make
//! (`function_row`, `function_rows`) do not see deleted rows.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sless_domain::{Function, FunctionSpec, Phase, Runtime};
use sqlx::{PgExecutor, Row};

use crate::{Error, Result};

/// One row of the `functions` read model.
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct FunctionRow {
    pub namespace: String,
    pub name: String,
    pub spec: FunctionSpec,
    pub current_version: Option<u32>,
    pub deployed_version: Option<u32>,
    pub endpoint: Option<String>,
    pub phase: Phase,
    pub last_error: Option<String>,
    pub stream_version: u64,
    pub created_at: DateTime<Utc>,
    pub updated_at: DateTime<Utc>,
}

impl FunctionRow {
    /// The state this row summarises, as the domain sees it (without the
    /// version list, which lives in `function_versions`).
    pub fn state(&self) -> Function {
        Function {
            stream_version: self.stream_version,
            spec: Some(self.spec.clone()),
            versions: vec![],
            current_version: self.current_version,
            deployed_version: self.deployed_version,
            endpoint: self.endpoint.clone(),
            built: None,
            phase: self.phase,
            last_error: self.last_error.clone(),
            failed_version: None,
            deployed_spec: None,
        }
    }

    /// True when the row shows what a fold of the stream shows.
    pub fn matches(&self, folded: &Function) -> bool {
        Some(&self.spec) == folded.spec.as_ref()
            && self.current_version == folded.current_version
            && self.deployed_version == folded.deployed_version
            && self.endpoint == folded.endpoint
            && self.phase == folded.phase
            && self.last_error == folded.last_error
            && self.stream_version == folded.stream_version
    }
}

fn row_of(r: sqlx::postgres::PgRow) -> Result<FunctionRow> {
    let runtime: String = r.get("runtime");
    let phase: String = r.get("phase");
    let bad = |what: String| Error::Internal(format!("functions read model: {what}"));
    Ok(FunctionRow {
        namespace: r.get("namespace"),
        name: r.get("name"),
        spec: FunctionSpec {
            runtime: runtime.parse::<Runtime>().map_err(|e| bad(e.to_string()))?,
            entrypoint: r.get("entrypoint"),
            memory_mb: r.get::<i32, _>("memory_mb") as u32,
            timeout_sec: r.get::<i32, _>("timeout_sec") as u32,
            env_vars: serde_json::from_value(r.get("env_vars")).map_err(|e| bad(e.to_string()))?,
        },
        current_version: r.get::<Option<i32>, _>("current_version").map(|v| v as u32),
        deployed_version: r
            .get::<Option<i32>, _>("deployed_version")
            .map(|v| v as u32),
        endpoint: r.get("endpoint"),
        phase: Phase::parse(&phase).ok_or_else(|| bad(format!("phase {phase}")))?,
        last_error: r.get("last_error"),
        stream_version: r.get::<i32, _>("stream_version") as u64,
        created_at: r.get("created_at"),
        updated_at: r.get("updated_at"),
    })
}

/// One function's row, if the projector has seen it and it is not deleted.
pub async fn function_row<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
) -> Result<Option<FunctionRow>> {
    let row = sqlx::query(
        "select * from functions where namespace = $1 and name = $2 and phase <> 'Deleted'",
    )
    .bind(namespace)
    .bind(name)
    .fetch_optional(exec)
    .await?;
    row.map(row_of).transpose()
}

/// One function's row as the projector keeps it, deleted or not.
pub async fn function_row_any<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
) -> Result<Option<FunctionRow>> {
    let row = sqlx::query("select * from functions where namespace = $1 and name = $2")
        .bind(namespace)
        .bind(name)
        .fetch_optional(exec)
        .await?;
    row.map(row_of).transpose()
}

/// The rows of the given (namespace, name) pairs that exist, deleted ones
/// included, in `table`: `functions`, or a copy of it that a replay builds
/// (for the projector; the name is the projector's own, never a caller's).
/// Takes no row locks: only the projector writes these rows, and two copies
/// of it are already kept apart by their checkpoint's row lock.
pub async fn function_rows_by_key<'e>(
    exec: impl PgExecutor<'e>,
    table: &str,
    namespaces: &[&str],
    names: &[&str],
) -> Result<Vec<FunctionRow>> {
    let rows = sqlx::query(sqlx::AssertSqlSafe(format!(
        "select f.* from {table} f
         join unnest($1::text[], $2::text[]) as k(namespace, name)
           on f.namespace = k.namespace and f.name = k.name"
    )))
    .bind(namespaces)
    .bind(names)
    .fetch_all(exec)
    .await?;
    rows.into_iter().map(row_of).collect()
}

/// Every function of a namespace that is not deleted, by name.
pub async fn function_rows<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
) -> Result<Vec<FunctionRow>> {
    let rows = sqlx::query(
        "select * from functions where namespace = $1 and phase <> 'Deleted' order by name",
    )
    .bind(namespace)
    .fetch_all(exec)
    .await?;
    rows.into_iter().map(row_of).collect()
}
