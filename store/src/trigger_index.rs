//! Which triggers a function has, as the log has them now: the table
//! `trigger_index` (migration `20261202000001_trigger_index.sql`), one row
//! per trigger that exists, kept by a database trigger on `events` in each
//! append's own transaction. So it is exact as soon as the append commits,
//! unlike the read model `triggers` (which waits for the projector), and a
//! function's triggers are one index probe however many triggers its
//! namespace has. The reconciler decides from it.
//!
//! Only `append` writes it (through that trigger); nothing here does.

use sless_domain::Namespace;
use sless_domain::trigger::{TriggerKind, TriggerSpec};
use sqlx::PgExecutor;

use crate::{Error, Result};

/// A function's http triggers, as the log has them now.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct HttpTriggers {
    /// Names of the http triggers of the function that exist.
    pub names: Vec<String>,
    /// How many of them are enabled.
    pub enabled: usize,
}

impl HttpTriggers {
    /// Served at its URL: it has no http trigger, or one that is enabled.
    pub fn served(&self) -> bool {
        self.names.is_empty() || self.enabled > 0
    }
}

/// The http triggers of `function` in `ns`, by stream (and so by name).
pub async fn http_triggers<'e>(
    exec: impl PgExecutor<'e>,
    ns: &Namespace,
    function: &str,
) -> Result<HttpTriggers> {
    let mut found = HttpTriggers::default();
    for spec in function_triggers(exec, ns, function).await? {
        if spec.kind == TriggerKind::Http {
            found.enabled += usize::from(spec.enabled);
            found.names.push(spec.name.to_string());
        }
    }
    Ok(found)
}

/// The triggers of `function` in `ns` that exist (enabled or not), by
/// stream (and so by name), each as its last `TriggerCreated` gave it with
/// `enabled` as the toggles since left it.
pub async fn function_triggers<'e>(
    exec: impl PgExecutor<'e>,
    ns: &Namespace,
    function: &str,
) -> Result<Vec<TriggerSpec>> {
    let rows: Vec<(String, serde_json::Value)> = sqlx::query_as(
        "select stream, spec from trigger_index
         where namespace = $1 and function = $2
         order by stream",
    )
    .bind(ns.as_str())
    .bind(function)
    .fetch_all(exec)
    .await?;
    rows.into_iter()
        .map(|(stream, spec)| {
            serde_json::from_value(spec).map_err(|e| {
                Error::Internal(format!(
                    "the trigger index's row of {stream} is not a trigger spec: {e}"
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod tests;
