//! How fast `sless dev` accepts large uploads: a zip of about `--mib` MiB
//! with realistic content (many source files that compress, some binary
//! files that do not) uploaded once, `--rounds` times, then `--concurrent`
//! at once to as many functions; from the POST to the 202, with the
//! throughput in MiB of zip per second. Before that, the same zip checked
//! and packed in this process, for where the time goes (what is left of an
//! accept is the blob store, the database and HTTP).

use std::time::{Duration, Instant};

use serde_json::json;
use sless_domain::Runtime;
use sless_domain::archive::{self, ArchiveLimits};

use sless_testkit::zips::realistic_zip;

use crate::Server;
use crate::sless_dev::{DevArgs, SlessDev};

#[derive(clap::Args)]
pub struct AcceptArgs {
    #[command(flatten)]
    dev: DevArgs,
    /// The zip's size, about, in MiB.
    #[arg(long, default_value_t = 10)]
    mib: usize,
    /// Single uploads, one after another (each new bytes).
    #[arg(long, default_value_t = 3)]
    rounds: usize,
    /// Uploads sent at once, after the single ones.
    #[arg(long, default_value_t = 4)]
    concurrent: usize,
}

fn mib(bytes: usize) -> f64 {
    bytes as f64 / (1024.0 * 1024.0)
}

/// Checking and packing the zip in this process, phase by phase.
fn phases(zip: &[u8]) -> anyhow::Result<serde_json::Value> {
    let timed = |f: &mut dyn FnMut()| {
        let started = Instant::now();
        f();
        started.elapsed().as_secs_f64() * 1000.0
    };
    let mut checked = None;
    let check_ms = timed(&mut || {
        checked = Some(archive::validate_zip(zip, &ArchiveLimits::default()));
    });
    let checked = checked.expect("timed")?;
    let mut packed = None;
    let pack_ms = timed(&mut || {
        let limits = ArchiveLimits::default();
        packed = Some(archive::pack_zip(
            zip,
            &limits,
            Runtime::Python311,
            &mut |_| {},
        ));
    });
    let packed = packed.expect("timed")?;
    let zip_sha_ms = timed(&mut || drop(archive::sha256_hex(zip)));
    let unpacked: usize = checked.files.values().map(Vec::len).sum();
    eprintln!(
        "in process: {:.1} MiB zip, {} files, {:.1} MiB unpacked, {:.1} MiB context: \
         checked and packed in one pass (what an upload does) in {pack_ms:.0} ms; \
         checked alone (unpacked in memory) in {check_ms:.0} ms; sha256 of the zip {zip_sha_ms:.0} ms",
        mib(zip.len()),
        packed.files,
        mib(unpacked),
        mib(packed.context.len()),
    );
    Ok(json!({
        "zip_bytes": zip.len(), "files": packed.files, "unpacked_bytes": unpacked,
        "context_bytes": packed.context.len(), "pack_ms": pack_ms, "check_ms": check_ms,
        "zip_sha256_ms": zip_sha_ms,
    }))
}

/// One upload's accept time.
async fn timed_upload(dev: &SlessDev, name: &str, zip: Vec<u8>) -> anyhow::Result<Duration> {
    let posted = Instant::now();
    dev.upload(name, zip).await?;
    Ok(posted.elapsed())
}

pub async fn run(server: &Server, args: AcceptArgs) -> anyhow::Result<serde_json::Value> {
    let zip = realistic_zip(args.mib, 0);
    let in_process = phases(&zip)?;
    let figures = SlessDev::measured(server, &args.dev, async |dev| {
        let mut single_ms = Vec::new();
        dev.create("one").await?;
        for round in 0..args.rounds {
            let zip = realistic_zip(args.mib, 1 + round as u64);
            let size = zip.len();
            let took = timed_upload(dev, "one", zip).await?;
            eprintln!(
                "single upload {round}: {:.1} MiB accepted in {:.0} ms, {:.1} MiB/s",
                mib(size),
                took.as_secs_f64() * 1000.0,
                mib(size) / took.as_secs_f64()
            );
            single_ms.push(took.as_secs_f64() * 1000.0);
        }
        let mut zips = Vec::new();
        for i in 0..args.concurrent {
            dev.create(&format!("many-{i}")).await?;
            zips.push(realistic_zip(args.mib, 1000 + i as u64));
        }
        let total: usize = zips.iter().map(Vec::len).sum();
        let started = Instant::now();
        let sent = zips
            .into_iter()
            .enumerate()
            .map(|(i, zip)| async move { timed_upload(dev, &format!("many-{i}"), zip).await });
        let each: Vec<Duration> = futures_util::future::try_join_all(sent).await?;
        let wall = started.elapsed();
        let each_ms: Vec<f64> = each.iter().map(|d| d.as_secs_f64() * 1000.0).collect();
        eprintln!(
            "{} concurrent uploads, {:.1} MiB in all: all accepted in {:.0} ms, {:.1} MiB/s \
             together; each in {:?} ms",
            args.concurrent,
            mib(total),
            wall.as_secs_f64() * 1000.0,
            mib(total) / wall.as_secs_f64(),
            each_ms.iter().map(|ms| ms.round()).collect::<Vec<_>>()
        );
        let best = single_ms.iter().copied().fold(f64::INFINITY, f64::min);
        Ok(json!({
            "single_ms": single_ms,
            "single_best_mib_per_s": mib(zip.len()) / (best / 1000.0),
            "concurrent": args.concurrent,
            "concurrent_each_ms": each_ms,
            "concurrent_wall_ms": wall.as_secs_f64() * 1000.0,
            "concurrent_mib_per_s": mib(total) / wall.as_secs_f64(),
        }))
    })
    .await?;
    Ok(
        json!({ "bench": "upload-accept", "mib": args.mib, "in_process": in_process,
               "sless_dev": figures }),
    )
}
