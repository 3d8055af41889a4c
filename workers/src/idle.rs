//! Scaling idle functions to zero: every worker looks, every
//! `WorkerConfig::idle_sweep`, for functions that serve and had no call
//! for their window (`sless_store::scaling::idle`, by the database's
//! clock and the calls every API process recorded), and appends
//! `FunctionScaledToZero` for each with a reconcile, which stops what
//! runs. The append expects the stream version it decided on, so when
//! several workers sweep at once a function is scaled down once.

use sless_domain::function::FunctionCommand;
use sless_domain::{FunctionKey, FunctionName, Namespace};
use sless_store::PgPool;
use sless_store::eventlog::Metadata;
use sless_store::scaling;

/// Most functions one sweep scales down; the next sweep takes the rest.
const PER_SWEEP: i64 = 100;

/// One sweep: the functions scaled to zero.
pub async fn sweep(pool: &PgPool, default_after_sec: u32) -> sless_store::Result<Vec<FunctionKey>> {
    let mut scaled = Vec::new();
    for idle in scaling::idle(pool, default_after_sec, PER_SWEEP).await? {
        let (Ok(namespace), Ok(name)) = (
            Namespace::parse(&idle.namespace),
            FunctionName::parse(&idle.name),
        ) else {
            continue;
        };
        let key = FunctionKey::new(namespace, name);
        let command = FunctionCommand::ScaleToZero {
            reason: format!("no call for {} s", idle.after_sec),
        };
        let metadata = Metadata {
            actor: "system:idle-sweep".into(),
            ..Default::default()
        };
        if scaling::decide_and_enqueue(pool, &key, command, metadata)
            .await?
            .appended
            .is_some()
        {
            tracing::info!(function = %key.queue_key(), after_sec = idle.after_sec, "scaled to zero");
            scaled.push(key);
        }
    }
    Ok(scaled)
}
