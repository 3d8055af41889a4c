//! The ceiling for one write per transaction: `pgbench` running a one-row
//! INSERT (a ~200-byte jsonb row into a table with a bigserial key) per
//! transaction, on the same server as the benchmark beside it.

use std::process::Stdio;

use serde_json::json;
use sqlx::Connection;

use crate::Server;

const SCHEMA: &str = "create table jobs_ins (
    id         bigserial primary key,
    queue      text        not null default 'default',
    payload    jsonb       not null,
    created_at timestamptz not null default now()
)";

const INSERT: &str = r#"insert into jobs_ins (queue, payload) values ('default', '{"kind":"email.send","user_id":123456789,"template":"welcome_v2","to":"someone@example.com","attempt":0,"trace":"0123456789abcdef0123456789abcdef","tags":["a","b","c"],"note":"xxxxxxxxxxxxxxxxxxxxxx"}'::jsonb);
"#;

/// A database with the INSERT target, ready for repeated runs.
pub struct Ceiling {
    url: String,
    script: tempfile::NamedTempFile,
}

impl Ceiling {
    pub async fn prepare(server: &Server) -> anyhow::Result<Ceiling> {
        let (_, url) = server.empty_database().await?;
        let mut conn = sqlx::PgConnection::connect(&url).await?;
        sqlx::query(SCHEMA).execute(&mut conn).await?;
        conn.close().await?;
        let script = tempfile::Builder::new()
            .prefix("sless-bench-insert-")
            .suffix(".sql")
            .tempfile()?;
        std::fs::write(script.path(), INSERT)?;
        Ok(Ceiling { url, script })
    }

    /// Runs pgbench with `clients` for `seconds`; its figures as JSON
    /// (`tps`, `latency_avg_ms`).
    pub async fn run(&self, clients: usize, seconds: u64) -> anyhow::Result<serde_json::Value> {
        let mut conn = sqlx::PgConnection::connect(&self.url).await?;
        sqlx::query("truncate jobs_ins").execute(&mut conn).await?;
        sqlx::raw_sql("checkpoint").execute(&mut conn).await?;
        conn.close().await?;
        let threads = clients.min(2);
        let out = tokio::process::Command::new("pgbench")
            .args(["-n", "-M", "prepared"])
            .args(["-c", &clients.to_string(), "-j", &threads.to_string()])
            .args(["-T", &seconds.to_string(), "-f"])
            .arg(self.script.path())
            .arg(&self.url)
            .stdin(Stdio::null())
            .output()
            .await
            .map_err(|e| anyhow::anyhow!("running pgbench: {e}"))?;
        let text = String::from_utf8_lossy(&out.stdout);
        if !out.status.success() {
            anyhow::bail!(
                "pgbench failed ({}): {}{}",
                out.status,
                text,
                String::from_utf8_lossy(&out.stderr)
            );
        }
        let field = |prefix: &str| -> Option<f64> {
            text.lines()
                .find(|l| l.starts_with(prefix))
                .and_then(|l| l[prefix.len()..].split_whitespace().next())
                .and_then(|v| v.parse().ok())
        };
        let tps = field("tps = ").ok_or_else(|| anyhow::anyhow!("no tps in: {text}"))?;
        let latency = field("latency average = ");
        eprintln!("pgbench insert x{clients}: {tps:.0} tps");
        Ok(json!({ "clients": clients, "seconds": seconds, "tps": tps, "latency_avg_ms": latency }))
    }
}
