//! Read models: the rows the projector keeps from the log and the API
//! queries. Only the projector writes them.
//!
//! A deleted function keeps its row, in phase `Deleted` (the projector
//! needs its stream version to go on when the name is created again), and
//! its version rows. The queries the API and the invoke proxy make
//! (`function_row`, `function_rows_after`, `function_rows_page`) do not
//! see deleted rows.

use chrono::{DateTime, Utc};
use serde::Serialize;
use sless_domain::{Function, FunctionSpec, Phase, Runtime};
use sqlx::{PgExecutor, PgPool, Row};

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
    /// The worker it runs on (local driver).
    pub deployed_node: Option<String>,
    /// Scaled to zero: nothing runs until a call starts it.
    pub idle: bool,
    /// How many instances should serve (`Function::instances`).
    pub instances: u32,
    /// Each instance's endpoint, when the proxy sends calls to each.
    pub instance_endpoints: Vec<String>,
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
            deployed_node: self.deployed_node.clone(),
            built: None,
            artifacts: Default::default(),
            phase: self.phase,
            last_error: self.last_error.clone(),
            failed_version: None,
            deployed_spec: None,
            idle: self.idle,
            // The count within the spec's bounds is the one decided.
            scaled_to: Some(self.instances).filter(|n| *n > 0),
            instance_endpoints: self.instance_endpoints.clone(),
            // Not kept in the row (the projector does not decide).
            last_version: 0,
            earlier_lives: 0,
        }
    }

    /// True when the row shows what a fold of the stream shows.
    pub fn matches(&self, folded: &Function) -> bool {
        Some(&self.spec) == folded.spec.as_ref()
            && self.current_version == folded.current_version
            && self.deployed_version == folded.deployed_version
            && self.endpoint == folded.endpoint
            && self.deployed_node == folded.deployed_node
            && self.idle == folded.idle
            && self.instances == folded.instances()
            && self.instance_endpoints == folded.instance_endpoints
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
            scale_to_zero_after_sec: r
                .get::<Option<i32>, _>("scale_to_zero_after_sec")
                .map(|v| v as u32),
            scaling: serde_json::from_value(r.get("scaling")).map_err(|e| bad(e.to_string()))?,
        },
        current_version: r.get::<Option<i32>, _>("current_version").map(|v| v as u32),
        deployed_version: r
            .get::<Option<i32>, _>("deployed_version")
            .map(|v| v as u32),
        endpoint: r.get("endpoint"),
        deployed_node: r.get("deployed_node"),
        idle: r.get("idle"),
        instances: r.get::<i32, _>("instances") as u32,
        instance_endpoints: serde_json::from_value(r.get("instance_endpoints"))
            .map_err(|e| bad(e.to_string()))?,
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

/// At most `limit` functions of a namespace that are not deleted, by name,
/// after the name `after` (from the first when None): a page of the list
/// (the primary key `(namespace, name)` walks it). The cursor is a bound
/// of that walk in any plan: `name > coalesce($2, '')` (every name is
/// longer than ''), where `$2 is null or name > $2` left a plan prepared
/// for every cursor (PostgreSQL's generic plan, after five calls) walking
/// from the namespace's first name and filtering, so the page at depth d
/// read d rows and listing a namespace page by page was quadratic.
pub async fn function_rows_after<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    after: Option<&str>,
    limit: i64,
) -> Result<Vec<FunctionRow>> {
    let rows = sqlx::query(
        "select * from functions
         where namespace = $1 and phase <> 'Deleted' and name > coalesce($2, '')
         order by name limit $3",
    )
    .bind(namespace)
    .bind(after)
    .bind(limit)
    .fetch_all(exec)
    .await?;
    rows.into_iter().map(row_of).collect()
}

/// One page of a namespace's functions by name (`limit` from `offset`),
/// and how many it has in all.
pub async fn function_rows_page(
    pool: &PgPool,
    namespace: &str,
    offset: usize,
    limit: usize,
) -> Result<(Vec<FunctionRow>, usize)> {
    let total: i64 = sqlx::query_scalar(
        "select count(*) from functions where namespace = $1 and phase <> 'Deleted'",
    )
    .bind(namespace)
    .fetch_one(pool)
    .await?;
    let rows = sqlx::query(
        "select * from functions where namespace = $1 and phase <> 'Deleted'
         order by name limit $2 offset $3",
    )
    .bind(namespace)
    .bind(limit as i64)
    .bind(offset as i64)
    .fetch_all(pool)
    .await?;
    let rows = rows.into_iter().map(row_of).collect::<Result<_>>()?;
    Ok((rows, total.max(0) as usize))
}

/// One kept version of a function, as `function_versions` holds it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct VersionRow {
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

/// At most `limit` kept versions of a function, newest first, below the
/// version `before` (from the newest when None): versions of the name
/// before a delete included (the stream, and its numbering, goes on).
pub async fn version_rows<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    name: &str,
    before: Option<u32>,
    limit: i64,
) -> Result<Vec<VersionRow>> {
    let rows = sqlx::query(
        "select version, sha256, size, files, zip_key, context_sha256, context_key, runtime,
                uploaded_by, uploaded_at
         from function_versions
         where namespace = $1 and name = $2 and ($3::int is null or version < $3)
         order by version desc limit $4",
    )
    .bind(namespace)
    .bind(name)
    .bind(before.map(|v| v.min(i32::MAX as u32) as i32))
    .bind(limit)
    .fetch_all(exec)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| VersionRow {
            version: r.get::<i32, _>("version") as u32,
            sha256: r.get("sha256"),
            size: r.get::<i64, _>("size") as u64,
            files: r.get::<i32, _>("files") as u32,
            zip_key: r.get("zip_key"),
            context_sha256: r.get("context_sha256"),
            context_key: r.get("context_key"),
            runtime: r.get("runtime"),
            uploaded_by: r.get("uploaded_by"),
            uploaded_at: r.get("uploaded_at"),
        })
        .collect())
}

/// The upload of a function's live version: which, by whom, when.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveUpload {
    pub function: String,
    pub version: u32,
    pub uploaded_by: Option<String>,
    pub uploaded_at: DateTime<Utc>,
}

/// The live version's upload of the functions `names` of a namespace (those
/// that have one).
pub async fn live_uploads<'e>(
    exec: impl PgExecutor<'e>,
    namespace: &str,
    names: &[String],
) -> Result<Vec<LiveUpload>> {
    let rows = sqlx::query(
        "select f.name, v.version, v.uploaded_by, v.uploaded_at
         from functions f
         join function_versions v
           on v.namespace = f.namespace and v.name = f.name and v.version = f.current_version
         where f.namespace = $1 and f.name = any($2) and f.phase <> 'Deleted'",
    )
    .bind(namespace)
    .bind(names)
    .fetch_all(exec)
    .await?;
    Ok(rows
        .into_iter()
        .map(|r| LiveUpload {
            function: r.get("name"),
            version: r.get::<i32, _>("version") as u32,
            uploaded_by: r.get("uploaded_by"),
            uploaded_at: r.get("uploaded_at"),
        })
        .collect())
}

/// Whether a kept version of any function still uses the blob `key` (as
/// its zip or its build context).
pub async fn blob_in_use<'e>(exec: impl PgExecutor<'e>, key: &str) -> Result<bool> {
    Ok(sqlx::query_scalar(
        "select exists(select 1 from function_versions where zip_key = $1)
             or exists(select 1 from function_versions where context_key = $1)",
    )
    .bind(key)
    .fetch_one(exec)
    .await?)
}

/// The namespaces that hold a function (deployed, or about to be: the
/// read model learns of a deploy after the driver has made it).
pub async fn namespaces_with_functions<'e>(exec: impl PgExecutor<'e>) -> Result<Vec<String>> {
    Ok(sqlx::query_scalar(
        "select distinct namespace from functions where phase <> 'Deleted' order by namespace",
    )
    .fetch_all(exec)
    .await?)
}
