//! The projector: catch-up over a log it has not seen, replay of the same log
//! from zero into emptied read models, and live lag under a steady append
//! rate (`lag`).

use std::time::Instant;

use serde_json::json;
use sless_store::PgPool;
use sqlx::{Connection, PgConnection};

use crate::{Server, lag};

#[derive(Clone, Copy, PartialEq, Eq, Debug, clap::ValueEnum)]
pub enum Part {
    /// Apply a pre-written log from an empty read model.
    CatchUp,
    /// Empty the read models and the checkpoint, apply the same log again.
    Replay,
    /// Append at `--rate` while the projector runs live; append commit →
    /// read model visible.
    Lag,
}

#[derive(clap::Args)]
pub struct ProjectorArgs {
    /// What to measure, comma-separated (replay needs catch-up).
    #[arg(
        long,
        value_enum,
        value_delimiter = ',',
        default_value = "catch-up,replay,lag"
    )]
    parts: Vec<Part>,
    /// Events in the log, spread over `--streams` functions.
    #[arg(long, default_value_t = 1_000_000)]
    events: i64,
    #[arg(long, default_value_t = 10_000)]
    streams: i64,
    #[command(flatten)]
    lag: lag::LagArgs,
}

/// Writes a log of `streams` functions with `per_stream` events each:
/// version 1 creates each function, every later version is an upload.
async fn write_log(conn: &mut PgConnection, streams: i64, per_stream: i64) -> anyhow::Result<()> {
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
    .bind(streams)
    .bind(per_stream)
    .execute(&mut *conn)
    .await?;
    sqlx::raw_sql("vacuum analyze events")
        .execute(&mut *conn)
        .await?;
    sqlx::raw_sql("checkpoint").execute(conn).await?;
    Ok(())
}

/// A digest of the read models, to show a replay gives the same rows.
async fn read_model_digest(conn: &mut PgConnection) -> anyhow::Result<String> {
    Ok(sqlx::query_scalar(
        "select coalesce((select md5(string_agg(f::text, '|' order by namespace, name)) from functions f), '')
             || '/' ||
             coalesce((select md5(string_agg(v::text, '|' order by namespace, name, version))
                       from function_versions v), '')",
    )
    .fetch_one(conn)
    .await?)
}

/// Applies everything past the checkpoint; (events, seconds).
async fn apply_all(pool: &PgPool) -> anyhow::Result<(usize, f64)> {
    let started = Instant::now();
    let applied = sless_projector::catch_up(pool).await?;
    Ok((applied, started.elapsed().as_secs_f64()))
}

pub async fn run(server: &Server, args: ProjectorArgs) -> anyhow::Result<serde_json::Value> {
    let mut figures = json!({ "bench": "projector" });
    if args.parts.contains(&Part::CatchUp) {
        let (pool, url) = server.database(4).await?;
        // Set-up and checks on a connection of their own, without the
        // statement timeout sless's sessions run with.
        let mut admin = PgConnection::connect(&url).await?;
        let per_stream = (args.events / args.streams).max(1);
        let total = args.streams * per_stream;
        let started = Instant::now();
        write_log(&mut admin, args.streams, per_stream).await?;
        eprintln!(
            "wrote {total} events over {} streams in {:.1} s; catching up",
            args.streams,
            started.elapsed().as_secs_f64()
        );
        let (applied, seconds) = apply_all(&pool).await?;
        let per_s = applied as f64 / seconds;
        eprintln!("catch-up: {applied} events in {seconds:.2} s = {per_s:.0} events/s");
        figures["events"] = json!(applied);
        figures["streams"] = json!(args.streams);
        figures["catch_up"] =
            json!({ "events": applied, "seconds": seconds, "events_per_s": per_s });

        if args.parts.contains(&Part::Replay) {
            let before = read_model_digest(&mut admin).await?;
            sqlx::query("truncate functions, function_versions")
                .execute(&mut admin)
                .await?;
            sqlx::query("delete from projector_checkpoints where name = $1")
                .bind(sless_projector::NAME)
                .execute(&mut admin)
                .await?;
            sqlx::raw_sql("checkpoint").execute(&mut admin).await?;
            let (applied, seconds) = apply_all(&pool).await?;
            let identical = read_model_digest(&mut admin).await? == before;
            let per_s = applied as f64 / seconds;
            eprintln!(
                "replay from zero: {applied} events in {seconds:.2} s = {per_s:.0} events/s; \
                 read models identical to the first pass: {identical}"
            );
            figures["replay"] = json!({
                "events": applied, "seconds": seconds, "events_per_s": per_s,
                "identical": identical,
            });
        }
        admin.close().await?;
        pool.close().await;
    } else if args.parts.contains(&Part::Replay) {
        anyhow::bail!("--parts replay needs catch-up: it replays the log catch-up wrote");
    }
    if args.parts.contains(&Part::Lag) {
        figures["lag"] = lag::run(server, &args.lag).await?;
    }
    Ok(figures)
}
