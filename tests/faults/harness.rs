//! What the scenarios share: users and tokens, the API and the projector in
//! this process, the real `sless api` binary, PostgreSQL URLs rewritten to go
//! through a fault proxy, and a load held at a steady rate.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use sless_api::AppState;
use sless_store::PgPool;
use tokio::sync::watch;

use crate::checker::{Checker, Effect, Op, Request};
use crate::{Proc, zip_files};

pub const SECRET: &[u8] = b"fault-suite-secret-of-at-least-32-bytes";

/// How long a client waits for one attempt before calling it indeterminate.
/// Longer than every deadline of the API, so a timeout here is a hang there.
pub const CLIENT_TIMEOUT: Duration = Duration::from_secs(15);

/// A checker acting as a user of its own (its namespace derives from `sub`).
pub fn checker(url: &str, sub: &str) -> Checker {
    let token = sless_api::issue_hs256(SECRET, sub, Duration::from_secs(3600));
    let namespace = sless_domain::Namespace::for_subject(sub).to_string();
    Checker::new(url, &token, sub, &namespace, CLIENT_TIMEOUT)
}

pub fn auth() -> sless_api::Auth {
    sless_api::Auth::hs256(SECRET, None, None)
}

/// Serves the API in this process on a loopback port; returns its URL.
pub async fn serve_api(state: AppState) -> String {
    crate::serve_origins(state).await.0
}

/// Opens `n` connections of `pool` before any load: a load that meets a
/// cold pool measures connection set-up, not the fault.
pub async fn warm(pool: &PgPool, n: u32) {
    sless_testkit::eventually(
        "the pool to open its connections",
        Duration::from_secs(60),
        || async {
            let mut held = Vec::new();
            for _ in 0..n {
                held.push(pool.acquire().await.ok()?);
            }
            Some(())
        },
    )
    .await
}

/// Runs the projector in this process until the returned sender is dropped
/// or set.
pub fn projector(pool: PgPool) -> watch::Sender<bool> {
    let (stop_tx, stop) = watch::channel(false);
    tokio::spawn(sless_projector::run(pool, Duration::from_millis(100), stop));
    stop_tx
}

/// `host:port` of a `postgres://user:password@host:port/db` URL.
pub fn pg_addr(url: &str) -> SocketAddr {
    let after_at = url.rsplit_once('@').expect("credentials in the URL").1;
    let host_port = after_at.split('/').next().unwrap();
    host_port.parse().expect("a numeric host:port")
}

/// The same URL, pointing at `addr` (a fault proxy) instead.
pub fn pg_url_via(url: &str, addr: SocketAddr) -> String {
    url.replacen(&pg_addr(url).to_string(), &addr.to_string(), 1)
}

/// The environment `sless api` needs, for a database and an S3 server.
pub fn api_command(db_url: &str, s3: &sless_testkit::TestS3) -> std::process::Command {
    let mut cmd = crate::sless_on(db_url, s3);
    cmd.env("SLESS_JWT_SECRET", std::str::from_utf8(SECRET).unwrap())
        .env_remove(sless_api::plumbing::command::CRASH_AFTER_COMMIT_ENV);
    cmd
}

/// Starts `sless api` on a free port and waits until it listens; returns
/// the process and its URL.
pub async fn start_api_binary(mut cmd: std::process::Command, log: &Path) -> (Proc, String) {
    cmd.args(["api", "--listen", "127.0.0.1:0"]);
    let proc = Proc::spawn(cmd, log);
    let url = sless_testkit::eventually("sless api to listen", Duration::from_secs(30), || async {
        sless_testkit::after_on_whole_line(log, "sless api listening on ")
    })
    .await;
    (proc, url)
}

/// A small zip, unique by `tag` (so its sha256 identifies its upload).
pub fn unique_zip(tag: &str) -> Vec<u8> {
    let handler = format!("# {tag}\ndef handle(event):\n    return '{tag}'\n");
    zip_files(&[("handler.py", &handler)])
}

/// Sends `command(i)` for i = 0, 1, ... at `rate` per second until `until`
/// resolves, each on its own task, and waits for every answer (each is
/// bounded by the client timeout). Returns the commands' ops, in the order
/// they were sent.
pub async fn hold_load<F>(
    c: &Checker,
    rate: u32,
    until: impl std::future::Future<Output = ()>,
    command: F,
) -> Vec<Op>
where
    F: Fn(u64) -> (Effect, Request),
{
    let mut tick = tokio::time::interval(Duration::from_secs(1) / rate);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
    tokio::pin!(until);
    let mut sent = tokio::task::JoinSet::new();
    let mut i = 0;
    loop {
        tokio::select! {
            biased;
            _ = &mut until => break,
            _ = tick.tick() => {
                let (c, cmd) = (c.clone(), command(i));
                sent.spawn(async move { c.send(cmd).await });
                i += 1;
            }
        }
    }
    let mut ops = Vec::new();
    while let Some(op) = sent.join_next().await {
        ops.push(op.unwrap());
    }
    ops.sort_by_key(|o| o.sent_at);
    ops
}

/// Creates `n` functions (`{prefix}-{i}`) for the load to upload to, all
/// acked before any fault.
pub async fn base_functions(c: &Checker, prefix: &str, n: usize) -> Vec<String> {
    let mut names = Vec::new();
    for i in 0..n {
        let name = format!("{prefix}-{i}");
        let op = c.send(c.create(&name)).await;
        assert!(op.first.is_acked(), "{:?}", op.first);
        names.push(name);
    }
    names
}

/// The mixed load of F3 and F4: creates of new functions, and every
/// `UPLOAD_EVERY`th request an upload of a unique zip to a base function.
/// (An upload costs far more CPU than a create: archive checks, the build
/// context, four signed S3 requests; a debug build on two cores keeps up
/// with 50 requests/s of this mix, not of half uploads.)
pub fn mixed_command(c: &Checker, scenario: &str, base: &[String], i: u64) -> (Effect, Request) {
    const UPLOAD_EVERY: u64 = 10;
    if i % UPLOAD_EVERY == UPLOAD_EVERY - 1 {
        let target = &base[(i / UPLOAD_EVERY) as usize % base.len()];
        c.upload(target, unique_zip(&format!("{scenario}-{i}")))
    } else {
        c.create(&format!("{scenario}-new-{i}"))
    }
}

/// Latency statistics of some ops' first attempts: (count, p50, max) in ms.
pub fn latency_ms(ops: &[&Op]) -> (usize, u128, u128) {
    let mut ms: Vec<u128> = ops.iter().map(|o| o.latency.as_millis()).collect();
    ms.sort_unstable();
    let p50 = ms.get(ms.len() / 2).copied().unwrap_or(0);
    (ms.len(), p50, ms.last().copied().unwrap_or(0))
}

/// How long after `since` the first op sent at or after it was acked (when
/// its answer came), if any was.
pub fn first_ack_after(ops: &[Op], since: Instant) -> Option<Duration> {
    ops.iter()
        .filter(|o| o.sent_at >= since && o.first.is_acked())
        .map(|o| (o.sent_at + o.latency).saturating_duration_since(since))
        .min()
}

/// The share of `ops` whose first attempt was acked (1.0 when there are none).
pub fn ack_ratio<'a>(ops: impl Iterator<Item = &'a Op>) -> f64 {
    let (mut n, mut acked) = (0, 0);
    for o in ops {
        n += 1;
        acked += usize::from(o.first.is_acked());
    }
    if n == 0 { 1.0 } else { acked as f64 / n as f64 }
}

/// Events in the log, all streams.
pub async fn event_count(pool: &PgPool) -> i64 {
    sqlx::query_scalar("select count(*) from events")
        .fetch_one(pool)
        .await
        .unwrap()
}
