//! The tail's delay from a push to its reader, beside the build log's and
//! a bare NOTIFY's.

use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::json;
use sless_store::build_logs::{self, End, Outcome};
use sless_store::function_logs::{self, Stream};
use sless_workers::logs::{Shipper, Source};
use sqlx::postgres::PgListener;
use tokio::sync::mpsc;
use uuid::Uuid;

use super::*;
use crate::sless_dev::SlessDev;
use crate::wait_for;

/// A line's text with when it was pushed (µs after `base`) and its number.
fn stamped(base: Instant, seq: u64) -> String {
    padded(format!("sent@{};{seq};", base.elapsed().as_micros()))
}

/// The push time and number of a stamped line, wherever it sits in `data`.
fn stamp_of(data: &str) -> Option<(u64, u64)> {
    let rest = &data[data.find("sent@")? + "sent@".len()..];
    let mut parts = rest.split(';');
    Some((parts.next()?.parse().ok()?, parts.next()?.parse().ok()?))
}

/// Each stamped line received: its number and its delay in ms.
type Received = Arc<Mutex<Vec<(u64, f64)>>>;

/// Reads a Server-Sent Events answer, recording every stamped line as it
/// arrives.
async fn read_events(
    mut res: reqwest::Response,
    base: Instant,
    got: Received,
) -> anyhow::Result<()> {
    let mut pending: Vec<u8> = Vec::new();
    while let Some(chunk) = res.chunk().await? {
        let now = base.elapsed().as_micros() as u64;
        pending.extend_from_slice(&chunk);
        let Some(end) = pending.iter().rposition(|b| *b == b'\n') else {
            continue;
        };
        let whole: Vec<u8> = pending.drain(..=end).collect();
        let text = String::from_utf8_lossy(&whole);
        let mut got = got.lock().unwrap();
        for line in text.lines() {
            if let Some((sent, seq)) = line.strip_prefix("data:").and_then(stamp_of) {
                got.push((seq, now.saturating_sub(sent) as f64 / 1000.0));
            }
        }
    }
    Ok(())
}

/// Opens `url` as a tail (retrying while the function is not in the read
/// model yet) and reads it in a task of its own.
async fn follow(
    dev: &SlessDev,
    url: &str,
    base: Instant,
) -> anyhow::Result<(Received, tokio::task::JoinHandle<anyhow::Result<()>>)> {
    let res = wait_for(
        "the tail to open",
        Duration::from_secs(60),
        Duration::from_millis(100),
        || async {
            let res = dev
                .http
                .get(url)
                .bearer_auth(&dev.token)
                .header("accept", "text/event-stream")
                .send()
                .await?;
            match res.status().as_u16() {
                200 => Ok(Some(res)),
                404 => Ok(None),
                _ => anyhow::bail!("{url}: {} {}", res.status(), res.text().await?),
            }
        },
    )
    .await?;
    let got = Received::default();
    let reader = tokio::spawn(read_events(res, base, got.clone()));
    Ok((got, reader))
}

/// Lines numbered `first..`, `rate` a second for `seconds` (those due by
/// now, every millisecond), each stamped as it is pushed; how many.
async fn produce(
    base: Instant,
    first: u64,
    rate: u64,
    seconds: u64,
    mut push: impl FnMut(String),
) -> u64 {
    let total = rate * seconds;
    let start = Instant::now();
    let mut i = 0;
    while i < total {
        let due = ((start.elapsed().as_secs_f64() * rate as f64) as u64 + 1).min(total);
        while i < due {
            push(stamped(base, first + i));
            i += 1;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    total
}

/// Waits (up to 20 s) until lines `first..first + n` arrived; their delays.
async fn arrived(what: &str, got: &Received, first: u64, n: u64) -> serde_json::Value {
    let seen = || {
        let got = got.lock().unwrap();
        let mut seqs: Vec<u64> = got
            .iter()
            .map(|(s, _)| *s)
            .filter(|s| (first..first + n).contains(s))
            .collect();
        seqs.sort_unstable();
        seqs.dedup();
        seqs.len() as u64
    };
    let waited = wait_for(
        what,
        Duration::from_secs(20),
        Duration::from_millis(10),
        || {
            let all = seen() >= n;
            async move { Ok(all.then_some(())) }
        },
    )
    .await;
    if let Err(e) = waited {
        eprintln!("{e:#}");
    }
    let delays: Vec<f64> = got
        .lock()
        .unwrap()
        .iter()
        .filter(|(s, _)| (first..first + n).contains(s))
        .map(|(_, d)| *d)
        .collect();
    let over_500ms = delays.iter().filter(|d| **d >= 500.0).count();
    let received = seen();
    let mut s = summary(delays);
    s["pushed"] = json!(n);
    s["received"] = json!(received);
    s["missing"] = json!(n - received.min(n));
    s["over_500ms"] = json!(over_500ms);
    eprintln!(
        "{what}: push → received p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms; {received} of {n} \
         received, {over_500ms} took 500 ms or more",
        f(&s["p50_ms"]),
        f(&s["p99_ms"]),
        f(&s["max_ms"]),
    );
    s
}

/// A warm-up line, then the steady rate, then the burst, into `push`,
/// read back from `got`.
async fn rates(
    what: &str,
    args: &LogsArgs,
    base: Instant,
    got: &Received,
    mut push: impl FnMut(String),
) -> anyhow::Result<serde_json::Value> {
    // Warm up: the follower's LISTEN is up and its first read done.
    push(stamped(base, 0));
    wait_for(
        &format!("{what}: the warm-up line"),
        Duration::from_secs(30),
        Duration::from_millis(10),
        || {
            let any = got.lock().unwrap().iter().any(|(s, _)| *s == 0);
            async move { Ok(any.then_some(())) }
        },
    )
    .await?;
    let mut runs = serde_json::Map::new();
    let mut first = 1;
    for (name, rate) in [("steady", args.tail_rate), ("burst", args.burst_rate)] {
        let n = produce(base, first, rate, args.tail_seconds, &mut push).await;
        let mut s = arrived(&format!("{what}, {rate} lines/s"), got, first, n).await;
        s["rate"] = json!(rate);
        runs.insert(name.to_owned(), s);
        first += n;
        tokio::time::sleep(Duration::from_secs(1)).await;
    }
    Ok(serde_json::Value::Object(runs))
}

/// The function log's tail, lines pushed into a `Shipper` of this process.
pub(super) async fn function_log_tail(
    dev: &SlessDev,
    args: &LogsArgs,
    base: Instant,
) -> anyhow::Result<serde_json::Value> {
    dev.create(TAILED).await?;
    let pool = sless_store::connect(dev.db_url(), 4).await?;
    let (shipper, writer) = Shipper::start(pool.clone(), unbounded());
    let url = dev.v1(&format!("/functions/{TAILED}/logs?follow=true"));
    let (got, reader) = follow(dev, &url, base).await?;
    let source = Source {
        namespace: dev.namespace.clone(),
        function: TAILED.into(),
        version: None,
        instance: "bench".into(),
        invocation: None,
    };
    let figures = rates("function log tail", args, base, &got, |text| {
        shipper.push(source.line(Stream::Stdout, &text, false))
    })
    .await;
    reader.abort();
    drop(shipper);
    writer.await?;
    let dropped = function_logs::dropped(&pool, &dev.namespace, TAILED).await?;
    pool.close().await;
    let mut figures = figures?;
    figures["dropped"] = json!(dropped);
    Ok(figures)
}

/// The build log's tail of `version` of `name`, in a new attempt of its
/// own, written as the workers' build-log writer writes it.
pub(super) async fn build_log_tail(
    dev: &SlessDev,
    args: &LogsArgs,
    base: Instant,
    name: &str,
    version: u32,
) -> anyhow::Result<serde_json::Value> {
    let pool = sless_store::connect(dev.db_url(), 2).await?;
    let attempt = Uuid::now_v7();
    build_logs::start(&pool, &dev.namespace, name, version, attempt).await?;
    let (tx, mut rx) = mpsc::unbounded_channel::<String>();
    let writer = {
        let (pool, ns, name) = (pool.clone(), dev.namespace.clone(), name.to_owned());
        tokio::spawn(async move {
            let mut seq = 0;
            while let Some(first) = rx.recv().await {
                tokio::time::sleep(sless_workers::build_log::BATCH).await;
                let mut text = format!("{first}\n");
                while let Ok(line) = rx.try_recv() {
                    text.push_str(&line);
                    text.push('\n');
                }
                seq += 1;
                build_logs::append(&pool, &ns, &name, version, attempt, seq, &text).await?;
            }
            anyhow::Ok(seq)
        })
    };
    let url = dev.v1(&format!(
        "/functions/{name}/versions/{version}/build-log?follow=true"
    ));
    let (got, reader) = follow(dev, &url, base).await?;
    let figures = rates("build log tail", args, base, &got, |text| {
        let _ = tx.send(text);
    })
    .await;
    reader.abort();
    drop(tx);
    let chunks = writer.await??;
    let end = End {
        outcome: Outcome::Succeeded,
        error: None,
    };
    build_logs::finish(&pool, &dev.namespace, name, version, attempt, &end, false).await?;
    pool.close().await;
    let mut figures = figures?;
    figures["chunks"] = json!(chunks);
    Ok(figures)
}

/// A LISTEN connection receiving a NOTIFY sent after a one-row insert:
/// from the transaction's begin, and from its commit's return.
pub(super) async fn notify_floor(url: &str, samples: usize) -> anyhow::Result<serde_json::Value> {
    let pool = sless_store::connect(url, 2).await?;
    sqlx::raw_sql("create table bench_notify (id bigserial primary key, line text not null)")
        .execute(&pool)
        .await?;
    let mut listener = PgListener::connect(url).await?;
    listener.listen("bench_logs_floor").await?;
    let (mut from_begin, mut from_commit) = (Vec::new(), Vec::new());
    for i in 0..samples {
        let began = Instant::now();
        let mut tx = pool.begin().await?;
        sqlx::query("insert into bench_notify (line) values ($1)")
            .bind(padded(format!("line {i}")))
            .execute(&mut *tx)
            .await?;
        sqlx::query("select pg_notify('bench_logs_floor', $1)")
            .bind(i.to_string())
            .execute(&mut *tx)
            .await?;
        tx.commit().await?;
        let committed = Instant::now();
        listener.recv().await?;
        from_begin.push(ms(began.elapsed()));
        from_commit.push(ms(committed.elapsed()));
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    sqlx::raw_sql("drop table bench_notify")
        .execute(&pool)
        .await?;
    pool.close().await;
    let (begin, commit) = (summary(from_begin), summary(from_commit));
    eprintln!(
        "NOTIFY after a one-row insert, {samples} times: begin → received p50 {:.2} ms, p99 {:.2} ms, \
         max {:.2} ms; commit's return → received p50 {:.3} ms, p99 {:.3} ms",
        f(&begin["p50_ms"]),
        f(&begin["p99_ms"]),
        f(&begin["max_ms"]),
        f(&commit["p50_ms"]),
        f(&commit["p99_ms"]),
    );
    Ok(json!({ "from_begin": begin, "from_commit": commit }))
}
