//! What functions print, kept by the workers' shipper: a function held to
//! its budget with the rest counted and another function untouched, lines
//! cut at the limit, and retention by day and by namespace.

use std::collections::BTreeMap;
use std::time::Duration;

use chrono::{Days, Utc};
use sless_store::function_logs::{self, Filter, LINE_LIMIT, NewLine, Stream};
use sless_testkit::{TestDb, eventually};
use sless_workers::logs::{LogsConfig, Shipper, Source, sweep};
use uuid::Uuid;

fn source(ns: &str, function: &str) -> Source {
    Source {
        namespace: ns.into(),
        function: function.into(),
        version: Some(3),
        instance: "127.0.0.1:4100".into(),
        invocation: None,
    }
}

async fn kept(db: &TestDb, ns: &str, function: &str) -> i64 {
    sqlx::query_scalar("select count(*) from function_logs where namespace = $1 and function = $2")
        .bind(ns)
        .bind(function)
        .fetch_one(&db.pool)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_past_its_budget_loses_lines_counted_and_another_keeps_all_of_its() {
    let db = TestDb::new().await;
    let config = LogsConfig {
        lines_per_sec: 100,
        bytes_per_sec: 1024 * 1024,
        ..LogsConfig::default()
    };
    let (shipper, _writer) = Shipper::start(db.pool.clone(), config);
    let (loud, quiet) = (source("ns-a", "loud"), source("ns-a", "quiet"));
    const LOUD: usize = 5_000;
    for i in 0..LOUD {
        shipper.push(loud.line(Stream::Stdout, &format!("loud {i}\n"), false));
    }
    for i in 0..50 {
        shipper.push(quiet.line(Stream::Stderr, &format!("quiet {i}\n"), false));
    }
    let (kept_loud, dropped) = eventually(
        "the loud function's lines counted",
        Duration::from_secs(10),
        || async {
            let kept = kept(&db, "ns-a", "loud").await as u64;
            let dropped = function_logs::dropped(&db.pool, "ns-a", "loud")
                .await
                .unwrap();
            (kept + dropped == LOUD as u64).then_some((kept, dropped))
        },
    )
    .await;
    // Two seconds' worth at once, and what a second refills meanwhile.
    assert!((200..=400).contains(&kept_loud), "kept {kept_loud}");
    assert_eq!(dropped, LOUD as u64 - kept_loud);
    eventually(
        "the quiet function's lines",
        Duration::from_secs(10),
        || async { (kept(&db, "ns-a", "quiet").await == 50).then_some(()) },
    )
    .await;
    assert_eq!(
        function_logs::dropped(&db.pool, "ns-a", "quiet")
            .await
            .unwrap(),
        0
    );
    let quiet_lines = function_logs::page(
        &db.pool,
        &Filter {
            namespace: "ns-a".into(),
            function: "quiet".into(),
            limit: 100,
            ..Filter::default()
        },
    )
    .await
    .unwrap();
    let last = &quiet_lines[quiet_lines.len() - 1];
    assert_eq!(
        (
            last.line.as_str(),
            last.stream,
            last.version,
            last.instance.as_str()
        ),
        ("quiet 49", Stream::Stderr, Some(3), "127.0.0.1:4100")
    );
}

#[test]
fn a_marked_line_is_its_calls_and_a_long_line_is_cut_at_the_limit() {
    let s = source("ns", "f");
    let id = Uuid::now_v7();
    let marked = s.line(Stream::Stdout, &format!("\u{1e}{id}\u{1f}hello\n"), false);
    assert_eq!(
        (marked.invocation, marked.line.as_str()),
        (Some(id), "hello")
    );
    let plain = s.line(Stream::Stdout, "no mark\r\n", false);
    assert_eq!((plain.invocation, plain.line.as_str()), (None, "no mark"));
    // Not a mark: an id that is none, or no end.
    for text in ["\u{1e}nope\u{1f}x", "\u{1e}x"] {
        let l = s.line(Stream::Stdout, text, false);
        assert_eq!((l.invocation, l.line.as_str()), (None, text));
    }
    // A job's lines are its record's, unless marked otherwise.
    let run = Uuid::now_v7();
    let job = Source {
        invocation: Some(run),
        ..source("ns", "f")
    };
    assert_eq!(job.line(Stream::Stdout, "x", false).invocation, Some(run));
    // Cut at the limit, at a character's boundary.
    let long = format!("{}é{}", "a".repeat(LINE_LIMIT - 1), "b".repeat(100));
    let cut = s.line(Stream::Stdout, &long, false);
    assert!(cut.truncated);
    assert_eq!(cut.line.len(), LINE_LIMIT - 1);
    assert!(
        s.line(Stream::Stdout, "short", true).truncated,
        "cut while read"
    );
    assert!(!s.line(Stream::Stdout, "short", false).truncated);
}

fn at_days_ago(ns: &str, days: u64) -> NewLine {
    NewLine {
        at: Utc::now().checked_sub_days(Days::new(days)).unwrap(),
        namespace: ns.into(),
        function: "f".into(),
        version: None,
        instance: "i".into(),
        invocation: None,
        stream: Stream::Stdout,
        line: format!("{ns} {days} days ago"),
        truncated: false,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_drops_old_days_and_a_namespaces_lines_past_its_own() {
    let db = TestDb::new().await;
    let today = function_logs::today(&db.pool).await.unwrap();
    let first = today.checked_sub_days(Days::new(12)).unwrap();
    let mut lines = Vec::new();
    for ns in ["keeps-week", "keeps-two", "keeps-month"] {
        for days in [10, 3, 0] {
            lines.push(at_days_ago(ns, days));
        }
    }
    // Written before their days had partitions: the sweep moves them.
    function_logs::insert(&db.pool, &lines).await.unwrap();
    function_logs::ensure_days(&db.pool, first, 13)
        .await
        .unwrap();
    let in_default: i64 = sqlx::query_scalar("select count(*) from function_logs_default")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    assert_eq!(in_default, 0, "each line is in its day's partition");

    let mut config = LogsConfig {
        retention: BTreeMap::from([("keeps-two".into(), 2), ("keeps-month".into(), 30)]),
        ..LogsConfig::default()
    };
    sweep(&db.pool, &config).await.unwrap();
    assert_eq!(kept(&db, "keeps-month", "f").await, 3, "30 days keeps all");
    assert_eq!(
        kept(&db, "keeps-week", "f").await,
        2,
        "the 10-day-old line went"
    );
    assert_eq!(kept(&db, "keeps-two", "f").await, 1, "only today's stays");
    let days = function_logs::days(&db.pool).await.unwrap();
    assert!(days.contains(&first), "a month's retention keeps the day");
    assert!(days.contains(&today.checked_add_days(Days::new(2)).unwrap()));

    // Without the month, whole days past a week go.
    config.retention.remove("keeps-month");
    sweep(&db.pool, &config).await.unwrap();
    let days = function_logs::days(&db.pool).await.unwrap();
    assert_eq!(
        days.first().copied(),
        today.checked_sub_days(Days::new(7)),
        "{days:?}"
    );
    assert_eq!(kept(&db, "keeps-month", "f").await, 2);
}
