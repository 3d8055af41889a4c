//! Projector catch-up: how fast a projector applies a log it has not seen.

use std::time::Instant;

use serde_json::json;

use crate::Server;

#[derive(clap::Args)]
pub struct CatchUpArgs {
    /// Events in the log, spread over `--streams` functions.
    #[arg(long, default_value_t = 100_000)]
    events: i64,
    #[arg(long, default_value_t = 1_000)]
    streams: i64,
}

pub async fn catch_up(server: &Server, args: CatchUpArgs) -> anyhow::Result<serde_json::Value> {
    let (pool, _) = server.database(4).await?;
    let per_stream = (args.events / args.streams).max(1);
    // Version 1 creates each function; every later version is an upload.
    sqlx::query(
        "insert into events (stream, version, type, namespace, data, metadata)
         select 'function/bench/f' || s, v,
                case when v = 1 then 'FunctionCreated' else 'FunctionUploaded' end,
                'bench',
                case when v = 1 then jsonb_build_object('spec', jsonb_build_object(
                         'runtime', 'python3.11', 'entrypoint', 'handler.handle',
                         'memory_mb', 128, 'timeout_sec', 30, 'env_vars', '{}'::jsonb))
                     else jsonb_build_object('version', v - 1, 'sha256', md5(s || '/' || v), 'size', 1000,
                         'files', 3, 'zip_key', 'blobs/zips/x.zip', 'context_sha256', 'c',
                         'context_key', 'blobs/contexts/c.tar.gz') end,
                '{\"actor\": \"bench\"}'::jsonb
         from generate_series(1, $1) s, generate_series(1, $2) v
         order by v, s",
    )
    .bind(args.streams)
    .bind(per_stream)
    .execute(&pool)
    .await?;
    let total = args.streams * per_stream;
    eprintln!(
        "wrote {total} events over {} streams; catching up",
        args.streams
    );
    let started = Instant::now();
    let applied = sless_projector::catch_up(&pool).await?;
    let seconds = started.elapsed().as_secs_f64();
    let per_s = applied as f64 / seconds;
    eprintln!("applied {applied} events in {seconds:.2} s: {per_s:.0} events/s");
    Ok(
        json!({ "bench": "projector-catch-up", "events": applied, "streams": args.streams, "seconds": seconds, "events_per_s": per_s }),
    )
}
