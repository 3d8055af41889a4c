//! The `functions` and `function_versions` read models.
//!
//! A batch is applied in memory: the rows of every function it touches are
//! read in one query, each event is folded into its row with the domain's
//! `Function::evolve` (in stream order, skipping what was applied already),
//! and the changed rows and new versions are written back in one statement
//! each.

use std::collections::HashMap;

use chrono::{DateTime, Utc};
use sless_domain::{Function, FunctionEvent, SourceVersion};
use sless_store::eventlog::RecordedEvent;
use sless_store::readmodel::function_rows_for_update;
use sqlx::PgConnection;

use crate::{Error, Result};

fn parse_stream(stream: &str) -> Option<(&str, &str)> {
    stream.strip_prefix("function/")?.split_once('/')
}

/// One function while a batch is applied to it.
struct Pending {
    state: Function,
    created_at: Option<DateTime<Utc>>,
    updated_at: DateTime<Utc>,
    changed: bool,
}

/// A version row to insert.
struct NewVersion {
    key: (String, String),
    version: SourceVersion,
    by: Option<String>,
    at: DateTime<Utc>,
}

/// Applies the function events among `events` (in their order).
pub(crate) async fn apply_batch(tx: &mut PgConnection, events: &[RecordedEvent]) -> Result<()> {
    let mut decoded = Vec::new();
    for event in events.iter().filter(|e| e.stream.starts_with("function/")) {
        let bad = |error: String| Error::BadEvent {
            position: event.position,
            event_type: event.event_type.clone(),
            error,
        };
        let (ns, name) =
            parse_stream(&event.stream).ok_or_else(|| bad(format!("stream {:?}", event.stream)))?;
        let e = FunctionEvent::from_stored(&event.event_type, &event.data)
            .map_err(|e| bad(e.to_string()))?;
        decoded.push(((ns.to_owned(), name.to_owned()), event, e));
    }
    if decoded.is_empty() {
        return Ok(());
    }
    let mut keys: Vec<(String, String)> = decoded.iter().map(|(k, _, _)| k.clone()).collect();
    keys.sort();
    keys.dedup();
    let (namespaces, names): (Vec<String>, Vec<String>) = keys.iter().cloned().unzip();
    let mut functions: HashMap<(String, String), Pending> =
        function_rows_for_update(&mut *tx, &namespaces, &names)
            .await?
            .into_iter()
            .map(|r| {
                let pending = Pending {
                    state: r.state(),
                    created_at: Some(r.created_at),
                    updated_at: r.updated_at,
                    changed: false,
                };
                ((r.namespace, r.name), pending)
            })
            .collect();

    let mut versions = Vec::new();
    for (key, event, e) in decoded {
        let f = functions.entry(key.clone()).or_insert_with(|| Pending {
            state: Function::default(),
            created_at: None,
            updated_at: event.recorded_at,
            changed: false,
        });
        let at = f.state.stream_version as i64;
        if event.version <= at {
            continue; // applied already
        }
        if event.version != at + 1 {
            return Err(Error::OutOfOrder {
                stream: event.stream.clone(),
                version: event.version,
                at,
                position: event.position,
            });
        }
        f.state = std::mem::take(&mut f.state).evolve(&e);
        if f.state.spec.is_none() {
            return Err(Error::BadEvent {
                position: event.position,
                event_type: event.event_type.clone(),
                error: "an event before FunctionCreated".into(),
            });
        }
        f.created_at.get_or_insert(event.recorded_at);
        f.updated_at = event.recorded_at;
        f.changed = true;
        if let FunctionEvent::FunctionUploaded(v) = e {
            let by = event
                .metadata
                .get("actor")
                .and_then(|a| a.as_str())
                .map(str::to_owned);
            versions.push(NewVersion {
                key,
                version: v,
                by,
                at: event.recorded_at,
            });
        }
    }
    write_functions(tx, &functions).await?;
    write_versions(tx, &versions).await
}

async fn write_functions(
    tx: &mut PgConnection,
    functions: &HashMap<(String, String), Pending>,
) -> Result<()> {
    let changed: Vec<_> = functions.iter().filter(|(_, f)| f.changed).collect();
    if changed.is_empty() {
        return Ok(());
    }
    let text = |f: &dyn Fn(&Pending) -> String| -> Vec<String> {
        changed.iter().map(|(_, p)| f(p)).collect()
    };
    let spec = |p: &Pending| p.state.spec.clone().expect("checked while applying");
    let ns: Vec<String> = changed.iter().map(|(k, _)| k.0.clone()).collect();
    let name: Vec<String> = changed.iter().map(|(k, _)| k.1.clone()).collect();
    let runtime = text(&|p| spec(p).runtime.as_str().to_owned());
    let entrypoint = text(&|p| spec(p).entrypoint);
    let phase = text(&|p| p.state.phase.as_str().to_owned());
    let memory: Vec<i32> = changed
        .iter()
        .map(|(_, p)| spec(p).memory_mb as i32)
        .collect();
    let timeout: Vec<i32> = changed
        .iter()
        .map(|(_, p)| spec(p).timeout_sec as i32)
        .collect();
    let env: Vec<serde_json::Value> = changed
        .iter()
        .map(|(_, p)| serde_json::to_value(spec(p).env_vars).expect("env serializes"))
        .collect();
    let current: Vec<Option<i32>> = changed
        .iter()
        .map(|(_, p)| p.state.current_version.map(|v| v as i32))
        .collect();
    let deployed: Vec<Option<i32>> = changed
        .iter()
        .map(|(_, p)| p.state.deployed_version.map(|v| v as i32))
        .collect();
    let endpoint: Vec<Option<String>> = changed
        .iter()
        .map(|(_, p)| p.state.endpoint.clone())
        .collect();
    let last_error: Vec<Option<String>> = changed
        .iter()
        .map(|(_, p)| p.state.last_error.clone())
        .collect();
    let stream_version: Vec<i32> = changed
        .iter()
        .map(|(_, p)| p.state.stream_version as i32)
        .collect();
    let created: Vec<DateTime<Utc>> = changed
        .iter()
        .map(|(_, p)| p.created_at.expect("set while applying"))
        .collect();
    let updated: Vec<DateTime<Utc>> = changed.iter().map(|(_, p)| p.updated_at).collect();
    sqlx::query(
        "insert into functions (namespace, name, runtime, entrypoint, memory_mb, timeout_sec, env_vars,
             current_version, deployed_version, endpoint, phase, last_error, stream_version, created_at, updated_at)
         select * from unnest($1::text[], $2::text[], $3::text[], $4::text[], $5::int[], $6::int[], $7::jsonb[],
             $8::int[], $9::int[], $10::text[], $11::text[], $12::text[], $13::int[], $14::timestamptz[], $15::timestamptz[])
         on conflict (namespace, name) do update set
             runtime = excluded.runtime, entrypoint = excluded.entrypoint, memory_mb = excluded.memory_mb,
             timeout_sec = excluded.timeout_sec, env_vars = excluded.env_vars,
             current_version = excluded.current_version, deployed_version = excluded.deployed_version,
             endpoint = excluded.endpoint, phase = excluded.phase, last_error = excluded.last_error,
             stream_version = excluded.stream_version, updated_at = excluded.updated_at",
    )
    .bind(&ns)
    .bind(&name)
    .bind(&runtime)
    .bind(&entrypoint)
    .bind(&memory)
    .bind(&timeout)
    .bind(&env)
    .bind(&current)
    .bind(&deployed)
    .bind(&endpoint)
    .bind(&phase)
    .bind(&last_error)
    .bind(&stream_version)
    .bind(&created)
    .bind(&updated)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

async fn write_versions(tx: &mut PgConnection, versions: &[NewVersion]) -> Result<()> {
    if versions.is_empty() {
        return Ok(());
    }
    let text =
        |f: &dyn Fn(&NewVersion) -> String| -> Vec<String> { versions.iter().map(f).collect() };
    let ns = text(&|v| v.key.0.clone());
    let name = text(&|v| v.key.1.clone());
    let sha = text(&|v| v.version.sha256.clone());
    let zip_key = text(&|v| v.version.zip_key.clone());
    let ctx_sha = text(&|v| v.version.context_sha256.clone());
    let ctx_key = text(&|v| v.version.context_key.clone());
    let number: Vec<i32> = versions.iter().map(|v| v.version.version as i32).collect();
    let size: Vec<i64> = versions.iter().map(|v| v.version.size as i64).collect();
    let files: Vec<i32> = versions.iter().map(|v| v.version.files as i32).collect();
    let by: Vec<Option<String>> = versions.iter().map(|v| v.by.clone()).collect();
    let at: Vec<DateTime<Utc>> = versions.iter().map(|v| v.at).collect();
    sqlx::query(
        "insert into function_versions (namespace, name, version, sha256, size, files, zip_key,
             context_sha256, context_key, uploaded_by, uploaded_at)
         select * from unnest($1::text[], $2::text[], $3::int[], $4::text[], $5::bigint[], $6::int[],
             $7::text[], $8::text[], $9::text[], $10::text[], $11::timestamptz[])",
    )
    .bind(&ns)
    .bind(&name)
    .bind(&number)
    .bind(&sha)
    .bind(&size)
    .bind(&files)
    .bind(&zip_key)
    .bind(&ctx_sha)
    .bind(&ctx_key)
    .bind(&by)
    .bind(&at)
    .execute(&mut *tx)
    .await?;
    Ok(())
}
