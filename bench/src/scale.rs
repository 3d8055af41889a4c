//! Cost curves: how what sless costs grows with the number of functions.
//!
//! For each layout (`one`: every function in one namespace; `spread`: the
//! same number over `--namespaces` namespaces, function `i` in namespace
//! `i % namespaces`) and each size, on a fresh database and data directory
//! of `sless dev`:
//!
//! - **create**: the functions created through the API, `--concurrency` at
//!   a time (`POST .../functions`, python3.11, no source); functions/s.
//! - **list**: `GET .../functions?limit=100` one request at a time: the
//!   first page of the (first) namespace, and the page 90% of the way
//!   through it, reached by following `next_cursor` (when it has more than
//!   one page); p50/p99.
//! - **audit**: `GET .../events?limit=100` of that namespace: its newest
//!   page, one function's events (`function=`), and the newest page
//!   before the middle of its log (`until=`, the middle event's time);
//!   p50/p99.
//! - **reconcile_all's scan**: the read of the statement that enqueues a
//!   reconcile of every function at start (`sless_store::queue::
//!   enqueue_reconcile_all`), `select stream from function_streams`, timed
//!   by `explain analyze`.
//! - **size**: `pg_database_size` after the creates, less the size of the
//!   freshly migrated database, per function.
//! - **restart**: `sless dev` stopped (SIGTERM) and started again on the same
//!   database and data directory: the time until it announced itself
//!   (`dev.json`: migrations checked, every function's reconcile enqueued,
//!   the API listening), and until every function was reconciled: no
//!   `ReconcileFunction` work item is left (each was claimed, run and
//!   acknowledged) and `/readyz` answers 200.
//! - **memory**: `sless dev`'s VmRSS and RssAnon once every function was
//!   reconciled.
//! - **replay**: the projector's replay from zero
//!   (`sless_projector::replay`, verify mode: every read model rebuilt
//!   from the first event into shadow tables and compared with the live
//!   ones by checksum), beside the running instance.
//!
//! What a "function" is here: one `FunctionCreated` (python3.11, an
//! entrypoint, no source uploaded). Its phase stays `Pending`; its
//! reconcile loads its stream, finds nothing uploaded and has the driver
//! remove whatever runs for it (nothing), deletes the build logs of pruned
//! versions (none) and syncs its cron triggers (none), appending nothing.
//! No process runs for it, so ten thousand of them fit on one machine; the
//! reconcile's cost is what the platform spends per function, not what a
//! build or a process costs (see the cold-start benchmark for those).
//!
//! The growth of each measure is judged on the last step of `--sizes`
//! (1,000 → 10,000 by default): the ratio of its cost per function at the
//! larger size to that at the smaller. A latency is the cost of one
//! request, so one that does not grow gives 0.1 over a tenfold step.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use chrono::{DateTime, SecondsFormat, Utc};
use futures_util::future::try_join_all;
use serde_json::{Value, json};
use sless_domain::Namespace;
use sless_projector::replay::{self, Mode};
use sless_store::queue::RECONCILE_FUNCTION;
use sqlx::{Connection, PgConnection};

use crate::sless_dev::{DevArgs, SlessDev, tail};
use crate::{Server, percentile};

#[derive(clap::ValueEnum, Clone, Copy, Debug, PartialEq, Eq)]
pub enum Layout {
    /// Every function in one namespace (the dev user's).
    One,
    /// Spread evenly over `--namespaces` namespaces.
    Spread,
}

impl Layout {
    fn as_str(self) -> &'static str {
        match self {
            Layout::One => "one",
            Layout::Spread => "spread",
        }
    }
}

#[derive(clap::Args)]
pub struct ScaleArgs {
    #[command(flatten)]
    dev: DevArgs,
    /// Functions per run, comma-separated.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    sizes: Vec<usize>,
    /// Layouts, comma-separated.
    #[arg(long, value_enum, value_delimiter = ',', default_value = "one,spread")]
    layouts: Vec<Layout>,
    /// Namespaces of the spread layout.
    #[arg(long, default_value_t = 100)]
    namespaces: usize,
    /// Creates in flight.
    #[arg(long, default_value_t = 8)]
    concurrency: usize,
    /// Requests timed per latency figure, one at a time (after 10 untimed).
    #[arg(long, default_value_t = 200)]
    samples: usize,
}

/// The longest wait for the instance to converge.
const CONVERGE: Duration = Duration::from_secs(900);

pub async fn run(server: &Server, args: ScaleArgs) -> anyhow::Result<Value> {
    let mut sizes = args.sizes.clone();
    sizes.sort_unstable();
    sizes.dedup();
    let mut runs = Vec::new();
    for &layout in &args.layouts {
        for &size in &sizes {
            eprintln!("== {} functions, layout {}", size, layout.as_str());
            let started = Instant::now();
            let mut dev = SlessDev::start(server, &args.dev).await?;
            let figures = measure(&mut dev, &args, layout, size).await;
            if figures.is_err() {
                eprintln!("sless dev log:\n{}", tail(&dev.log_path()));
            }
            dev.stop().await?;
            let mut figures = figures?;
            figures["run_s"] = json!(started.elapsed().as_secs_f64());
            runs.push(figures);
        }
    }
    print_table(&runs);
    let growth = growth(&runs);
    print_growth(&growth);
    Ok(json!({
        "bench": "scale",
        "function": "created through the API (python3.11, no source): reconciled to nothing running",
        "namespaces_spread": args.namespaces, "concurrency": args.concurrency,
        "samples": args.samples, "runs": runs, "growth": growth,
    }))
}

/// The namespaces of a layout, and a token that may act in all of them.
async fn namespaces(
    dev: &SlessDev,
    layout: Layout,
    n: usize,
) -> anyhow::Result<(Vec<String>, String)> {
    if layout == Layout::One {
        return Ok((vec![dev.namespace.clone()], dev.token.clone()));
    }
    let out = tokio::process::Command::new(dev.binary())
        .arg("token")
        .arg("--data-dir")
        .arg(dev.data_dir().join("data"))
        .args(["--sub", "scale-admin", "--admin"])
        .output()
        .await?;
    if !out.status.success() {
        anyhow::bail!("sless token: {}", String::from_utf8_lossy(&out.stderr));
    }
    let token = String::from_utf8(out.stdout)?.trim().to_owned();
    let names = (0..n.max(1))
        .map(|j| Namespace::for_subject(&format!("scale-{j}")).to_string())
        .collect();
    Ok((names, token))
}

/// A request's answer, failing on any status but 2xx.
async fn get(dev: &SlessDev, token: &str, url: &str) -> anyhow::Result<Value> {
    let res = dev.http.get(url).bearer_auth(token).send().await?;
    let status = res.status();
    if !status.is_success() {
        anyhow::bail!("GET {url}: {status} {}", res.text().await?);
    }
    Ok(res.json().await?)
}

/// p50/p99 of `samples` GETs of `url`, one at a time, after 10 untimed.
async fn latency(dev: &SlessDev, token: &str, url: &str, samples: usize) -> anyhow::Result<Value> {
    for _ in 0..10 {
        get(dev, token, url).await?;
    }
    let mut ms = Vec::with_capacity(samples);
    for _ in 0..samples {
        let t = Instant::now();
        get(dev, token, url).await?;
        ms.push(t.elapsed().as_secs_f64() * 1000.0);
    }
    ms.sort_by(f64::total_cmp);
    Ok(json!({ "n": ms.len(), "p50_ms": percentile(&ms, 50.0), "p99_ms": percentile(&ms, 99.0) }))
}

/// Creates `size` functions, function `i` as `f-{i / k}` in namespace
/// `i % k`; the seconds it took.
async fn create_all(
    dev: &SlessDev,
    token: &str,
    namespaces: &[String],
    size: usize,
    concurrency: usize,
) -> anyhow::Result<f64> {
    let started = Instant::now();
    let next = AtomicUsize::new(0);
    let k = namespaces.len();
    let creator = || async {
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            if i >= size {
                return anyhow::Ok(());
            }
            let url = format!("{}/v1/namespaces/{}/functions", dev.url, namespaces[i % k]);
            let body = json!({ "name": format!("f-{:05}", i / k), "runtime": "python3.11",
                               "entrypoint": "handler.handle" });
            let key = uuid::Uuid::new_v4().to_string();
            for attempt in 1.. {
                let res = dev
                    .http
                    .post(&url)
                    .bearer_auth(token)
                    .header("idempotency-key", &key)
                    .json(&body)
                    .send()
                    .await?;
                match res.status().as_u16() {
                    201 => break,
                    503 if attempt < 10 => {
                        tokio::time::sleep(Duration::from_millis(200 * attempt)).await
                    }
                    s => anyhow::bail!("create {i}: {s} {}", res.text().await?),
                }
            }
        }
    };
    try_join_all((0..concurrency.max(1)).map(|_| creator())).await?;
    Ok(started.elapsed().as_secs_f64())
}

async fn scalar_i64(conn: &mut PgConnection, sql: &'static str) -> anyhow::Result<i64> {
    Ok(sqlx::query_scalar(sql).fetch_one(conn).await?)
}

/// Checks `done` every `every` until it is true; fails after `CONVERGE`.
async fn until(
    what: &str,
    every: Duration,
    mut done: impl AsyncFnMut() -> anyhow::Result<bool>,
) -> anyhow::Result<()> {
    let start = Instant::now();
    while !done().await? {
        if start.elapsed() > CONVERGE {
            anyhow::bail!("timed out after {CONVERGE:?} waiting for {what}");
        }
        tokio::time::sleep(every).await;
    }
    Ok(())
}

/// Reconciles not yet done.
async fn reconciles_left(conn: &mut PgConnection) -> anyhow::Result<i64> {
    Ok(
        sqlx::query_scalar("select count(*) from work_items where kind = $1")
            .bind(RECONCILE_FUNCTION)
            .fetch_one(conn)
            .await?,
    )
}

/// Waits until the read model has `size` functions and every reconcile
/// the creates enqueued is done.
async fn settled(conn: &mut PgConnection, size: usize) -> anyhow::Result<()> {
    until(
        "every function projected and reconciled",
        Duration::from_millis(100),
        async || {
            let functions = scalar_i64(conn, "select count(*) from functions").await?;
            Ok(functions as usize == size && reconciles_left(conn).await? == 0)
        },
    )
    .await
}

/// The execution time of `enqueue_reconcile_all`'s read, by `explain
/// analyze`: the median of three, in ms.
async fn reconcile_all_scan(conn: &mut PgConnection) -> anyhow::Result<f64> {
    let mut ms = Vec::new();
    for _ in 0..3 {
        let plan: Value = sqlx::query_scalar(
            "explain (analyze, format json) select stream from function_streams",
        )
        .fetch_one(&mut *conn)
        .await?;
        ms.push(plan[0]["Execution Time"].as_f64().unwrap_or(f64::NAN));
    }
    ms.sort_by(f64::total_cmp);
    Ok(ms[1])
}

async fn measure(
    dev: &mut SlessDev,
    args: &ScaleArgs,
    layout: Layout,
    size: usize,
) -> anyhow::Result<Value> {
    let mut admin = PgConnection::connect(dev.db_url()).await?;
    let baseline = scalar_i64(&mut admin, "select pg_database_size(current_database())").await?;
    let (namespaces, token) = namespaces(dev, layout, args.namespaces).await?;
    for ns in &namespaces {
        let url = format!("{}/v1/namespaces/{ns}/ensure", dev.url);
        dev.http
            .post(&url)
            .bearer_auth(&token)
            .send()
            .await?
            .error_for_status()?;
    }
    let create_s = create_all(dev, &token, &namespaces, size, args.concurrency).await?;
    let creates_per_s = size as f64 / create_s;
    eprintln!("created {size} functions in {create_s:.1} s ({creates_per_s:.0}/s)");
    settled(&mut admin, size).await?;

    // The first namespace: its first page, and the page 90% of the way in.
    let ns = &namespaces[0];
    let list_url = format!("{}/v1/namespaces/{ns}/functions?limit=100", dev.url);
    let in_ns = size.div_ceil(namespaces.len());
    let pages = in_ns.div_ceil(100);
    let list_first = latency(dev, &token, &list_url, args.samples).await?;
    let mut deep_url = None;
    let deep_page = pages * 9 / 10;
    if deep_page > 0 {
        let mut url = list_url.clone();
        for _ in 0..deep_page {
            let page = get(dev, &token, &url).await?;
            let cursor = page["next_cursor"]
                .as_str()
                .ok_or_else(|| anyhow::anyhow!("the list ended before page {deep_page}"))?;
            url = format!("{list_url}&cursor={cursor}");
        }
        deep_url = Some(url);
    }
    let list_deep = match &deep_url {
        Some(url) => latency(dev, &token, url, args.samples).await?,
        None => Value::Null,
    };

    let events_url = format!("{}/v1/namespaces/{ns}/events?limit=100", dev.url);
    let middle: DateTime<Utc> = sqlx::query_scalar(
        "select recorded_at from events where namespace = $1 order by position
         offset (select count(*) / 2 from events where namespace = $1) limit 1",
    )
    .bind(ns)
    .fetch_one(&mut admin)
    .await?;
    let middle = middle.to_rfc3339_opts(SecondsFormat::Micros, true);
    let audit = json!({
        "newest": latency(dev, &token, &events_url, args.samples).await?,
        "function": latency(dev, &token, &format!("{events_url}&function=f-00000"), args.samples).await?,
        "until_middle": latency(dev, &token, &format!("{events_url}&until={middle}"), args.samples).await?,
    });
    let scan_ms = reconcile_all_scan(&mut admin).await?;
    let events = scalar_i64(&mut admin, "select count(*) from events").await?;
    let db_bytes = scalar_i64(&mut admin, "select pg_database_size(current_database())").await?;
    let bytes_per_function = (db_bytes - baseline) as f64 / size as f64;

    // Restart: to announced, then until every reconcile is done.
    let dead_before = scalar_i64(&mut admin, "select count(*) from work_dead").await?;
    let started = Instant::now();
    let announced = dev.restart().await?;
    let readyz = format!("{}/readyz", dev.url);
    let mut most_pending = 0;
    until(
        "every function reconciled after the restart",
        Duration::from_millis(20),
        async || {
            let left = reconciles_left(&mut admin).await?;
            most_pending = most_pending.max(left);
            Ok(left == 0 && dev.http.get(&readyz).send().await?.status().is_success())
        },
    )
    .await?;
    let reconciled = started.elapsed();
    let dead = scalar_i64(&mut admin, "select count(*) from work_dead").await? - dead_before;
    let memory = dev.memory()?;
    eprintln!(
        "restart: announced in {:.2} s, every function reconciled in {:.2} s \
         (at most {most_pending} reconciles waiting; {dead} given up); \
         VmRSS {} KiB, RssAnon {} KiB",
        announced.as_secs_f64(),
        reconciled.as_secs_f64(),
        memory.rss_kib,
        memory.anon_kib
    );

    let outcome = replay::replay(&dev.pool, Mode::Verify, "sless-bench scale", |_| {}).await?;
    let replay = json!({
        "events": outcome.applied, "seconds": outcome.elapsed.as_secs_f64(),
        "equal": outcome.differing().is_empty(),
    });
    eprintln!(
        "replay (verify) of {} events: {:.2} s, equal: {}",
        outcome.applied,
        outcome.elapsed.as_secs_f64(),
        outcome.differing().is_empty()
    );
    admin.close().await?;
    Ok(json!({
        "layout": layout.as_str(), "functions": size, "namespaces": namespaces.len(),
        "events": events,
        "create": { "seconds": create_s, "per_s": creates_per_s },
        "list": { "pages": pages, "first": list_first, "deep_page": deep_url.is_some().then_some(deep_page), "deep": list_deep },
        "audit": audit,
        "reconcile_all_scan_ms": scan_ms,
        "db": { "baseline_bytes": baseline, "bytes": db_bytes, "bytes_per_function": bytes_per_function },
        "restart": {
            "announced_s": announced.as_secs_f64(), "all_reconciled_s": reconciled.as_secs_f64(),
            "most_pending": most_pending, "given_up": dead,
        },
        "memory": memory,
        "replay": replay,
    }))
}

/// How a measure's figure relates to its cost.
#[derive(Clone, Copy)]
enum Cost {
    /// The figure is the cost of all the functions (seconds, KiB) or of one
    /// request: per function, it is divided by their number.
    Total,
    /// The figure is already per function.
    PerFunction,
}

/// The measures judged for growth: name, JSON pointer into a run, cost.
const MEASURES: [(&str, &str, Cost); 14] = [
    ("create (s for all)", "/create/seconds", Cost::Total),
    ("list first page p50", "/list/first/p50_ms", Cost::Total),
    ("list deep page p50", "/list/deep/p50_ms", Cost::Total),
    ("audit newest p50", "/audit/newest/p50_ms", Cost::Total),
    ("audit function= p50", "/audit/function/p50_ms", Cost::Total),
    (
        "audit until= p50",
        "/audit/until_middle/p50_ms",
        Cost::Total,
    ),
    ("reconcile_all scan", "/reconcile_all_scan_ms", Cost::Total),
    (
        "database bytes",
        "/db/bytes_per_function",
        Cost::PerFunction,
    ),
    ("restart: announced", "/restart/announced_s", Cost::Total),
    (
        "restart: all reconciled",
        "/restart/all_reconciled_s",
        Cost::Total,
    ),
    ("replay", "/replay/seconds", Cost::Total),
    ("VmRSS", "/memory/rss_kib", Cost::Total),
    ("RssAnon", "/memory/anon_kib", Cost::Total),
    ("events", "/events", Cost::Total),
];

/// The class of a per-function cost ratio over a step.
fn class(ratio: f64) -> &'static str {
    if !ratio.is_finite() {
        "n/a"
    } else if ratio < 0.7 {
        "sub-linear"
    } else if ratio <= 1.4 {
        "linear"
    } else {
        "worse than linear"
    }
}

/// For each layout, each measure's per-function cost ratio over the last
/// step of the sizes, and its class.
fn growth(runs: &[Value]) -> Value {
    let mut out = serde_json::Map::new();
    for layout in [Layout::One, Layout::Spread] {
        let of: Vec<&Value> = runs
            .iter()
            .filter(|r| r["layout"] == layout.as_str())
            .collect();
        let [.., a, b] = of[..] else { continue };
        let (na, nb) = (
            a["functions"].as_f64().unwrap_or(f64::NAN),
            b["functions"].as_f64().unwrap_or(f64::NAN),
        );
        let mut measures = serde_json::Map::new();
        for (name, pointer, cost) in MEASURES {
            let va = a.pointer(pointer).and_then(Value::as_f64);
            let vb = b.pointer(pointer).and_then(Value::as_f64);
            let ratio = match (va, vb, cost) {
                (Some(va), Some(vb), Cost::Total) => (vb / nb) / (va / na),
                (Some(va), Some(vb), Cost::PerFunction) => vb / va,
                _ => f64::NAN,
            };
            measures.insert(
                name.to_owned(),
                json!({ "ratio": ratio.is_finite().then_some(ratio), "class": class(ratio) }),
            );
        }
        out.insert(
            layout.as_str().to_owned(),
            json!({ "from": na, "to": nb, "measures": measures }),
        );
    }
    Value::Object(out)
}

fn figure(run: &Value, pointer: &str) -> String {
    match run.pointer(pointer).and_then(Value::as_f64) {
        Some(v) if v >= 100.0 => format!("{v:.0}"),
        Some(v) if v >= 10.0 => format!("{v:.1}"),
        Some(v) => format!("{v:.2}"),
        None => "-".into(),
    }
}

fn print_table(runs: &[Value]) {
    let columns: [(&str, &str); 17] = [
        ("functions", "/functions"),
        ("events", "/events"),
        ("create/s", "/create/per_s"),
        ("list1 p50", "/list/first/p50_ms"),
        ("list1 p99", "/list/first/p99_ms"),
        ("deep p50", "/list/deep/p50_ms"),
        ("deep p99", "/list/deep/p99_ms"),
        ("aud new p50", "/audit/newest/p50_ms"),
        ("aud fn p50", "/audit/function/p50_ms"),
        ("aud until p50", "/audit/until_middle/p50_ms"),
        ("scan ms", "/reconcile_all_scan_ms"),
        ("B/function", "/db/bytes_per_function"),
        ("announced s", "/restart/announced_s"),
        ("reconciled s", "/restart/all_reconciled_s"),
        ("replay s", "/replay/seconds"),
        ("RSS KiB", "/memory/rss_kib"),
        ("anon KiB", "/memory/anon_kib"),
    ];
    let mut header = format!("{:<7}", "layout");
    for (name, _) in columns {
        header.push_str(&format!(" {name:>13}"));
    }
    println!("{header}");
    for run in runs {
        let mut line = format!("{:<7}", run["layout"].as_str().unwrap_or("?"));
        for (_, pointer) in columns {
            line.push_str(&format!(" {:>13}", figure(run, pointer)));
        }
        println!("{line}");
    }
    println!(
        "(latencies in ms, one request at a time; sizes after the creates)\n\
         a function: created through the API (python3.11, no source), Pending, \
         nothing runs for it; its reconcile appends nothing\n\
         announced: the restarted sless dev wrote dev.json (every reconcile enqueued, \
         the API listening); reconciled: no ReconcileFunction work item left and /readyz 200"
    );
}

fn print_growth(growth: &Value) {
    let Some(layouts) = growth.as_object() else {
        return;
    };
    for (layout, g) in layouts {
        println!(
            "growth, layout {layout}, {} -> {} functions: per-function cost ratio \
             (~1 linear, < 0.7 sub-linear, > 1.4 worse than linear)",
            g["from"], g["to"]
        );
        for (name, _, _) in MEASURES {
            let m = &g["measures"][name];
            let ratio = m["ratio"]
                .as_f64()
                .map_or_else(|| "-".to_owned(), |r| format!("{r:.2}"));
            println!(
                "  {name:<24} {ratio:>6}  {}",
                m["class"].as_str().unwrap_or("")
            );
        }
    }
}
