//! The `functions` and `function_versions` read models.

use sless_domain::FunctionEvent;
use sless_store::eventlog::RecordedEvent;
use sless_store::readmodel::{FunctionRow, function_row};
use sqlx::PgConnection;

use crate::{Error, Result};

fn parse_stream(stream: &str) -> Option<(&str, &str)> {
    stream.strip_prefix("function/")?.split_once('/')
}

pub(crate) async fn apply(tx: &mut PgConnection, event: &RecordedEvent) -> Result<()> {
    let bad = |error: String| Error::BadEvent {
        position: event.position,
        event_type: event.event_type.clone(),
        error,
    };
    let (ns, name) =
        parse_stream(&event.stream).ok_or_else(|| bad(format!("stream {:?}", event.stream)))?;
    let decoded = FunctionEvent::from_stored(&event.event_type, &event.data)
        .map_err(|e| bad(e.to_string()))?;
    let existing = function_row(&mut *tx, ns, name).await?;
    let at = existing.as_ref().map_or(0, |r| r.stream_version as i64);
    if event.version <= at {
        return Ok(()); // applied already
    }
    if event.version != at + 1 {
        return Err(Error::OutOfOrder {
            stream: event.stream.clone(),
            version: event.version,
            at,
            position: event.position,
        });
    }
    let before = existing
        .as_ref()
        .map(FunctionRow::state)
        .unwrap_or_default();
    let after = before.evolve(&decoded);
    let spec = after
        .spec
        .as_ref()
        .ok_or_else(|| bad("an event before FunctionCreated".into()))?;
    sqlx::query(
        "insert into functions (namespace, name, runtime, entrypoint, memory_mb, timeout_sec, env_vars,
             current_version, deployed_version, endpoint, phase, last_error, stream_version, created_at, updated_at)
         values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $14)
         on conflict (namespace, name) do update set
             runtime = excluded.runtime, entrypoint = excluded.entrypoint, memory_mb = excluded.memory_mb,
             timeout_sec = excluded.timeout_sec, env_vars = excluded.env_vars,
             current_version = excluded.current_version, deployed_version = excluded.deployed_version,
             endpoint = excluded.endpoint, phase = excluded.phase, last_error = excluded.last_error,
             stream_version = excluded.stream_version, updated_at = excluded.updated_at",
    )
    .bind(ns)
    .bind(name)
    .bind(spec.runtime.as_str())
    .bind(&spec.entrypoint)
    .bind(spec.memory_mb as i32)
    .bind(spec.timeout_sec as i32)
    .bind(serde_json::to_value(&spec.env_vars).expect("env serializes"))
    .bind(after.current_version.map(|v| v as i32))
    .bind(after.deployed_version.map(|v| v as i32))
    .bind(&after.endpoint)
    .bind(after.phase.as_str())
    .bind(&after.last_error)
    .bind(after.stream_version as i32)
    .bind(event.recorded_at)
    .execute(&mut *tx)
    .await?;
    if let FunctionEvent::FunctionUploaded(v) = &decoded {
        let actor = event.metadata.get("actor").and_then(|a| a.as_str());
        sqlx::query(
            "insert into function_versions (namespace, name, version, sha256, size, files, zip_key,
                 context_sha256, context_key, uploaded_by, uploaded_at)
             values ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)",
        )
        .bind(ns)
        .bind(name)
        .bind(v.version as i32)
        .bind(&v.sha256)
        .bind(v.size as i64)
        .bind(v.files as i32)
        .bind(&v.zip_key)
        .bind(&v.context_sha256)
        .bind(&v.context_key)
        .bind(actor)
        .bind(event.recorded_at)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}
