//! Cron triggers and http triggers end to end, with a real Python function:
//! two schedulers driven through one clock run each tick once; a scheduler
//! killed mid-tick loses no tick; a tick that comes while the last run is
//! going is skipped; missed ticks fire once; disabling a function's only
//! http trigger stops its process and answers 503, enabling serves it again.

use std::time::Duration;

use chrono::{DateTime, DurationRound, TimeDelta, Utc};
use reqwest::Method;
use serde_json::{Value, json};
use sless_testkit::eventually;
use sless_workers::Scheduler;

use crate::platform::Platform;
use crate::zip_files;

const HOUR: Duration = Duration::from_secs(3600);

/// A function that answers with the event's method and its JSON, after
/// sleeping `json.sleep` seconds when it has one (a cron event has none;
/// the `SLOW` env var makes every run sleep).
fn ticker() -> Vec<u8> {
    zip_files(&[(
        "handler.py",
        "import os, time\n\
         def handle(event):\n    \
             time.sleep(float(os.environ.get('SLOW', '0')))\n    \
             return {'method': event['method'], 'json': event['json']}\n",
    )])
}

async fn function(p: &Platform, name: &str, env: Value) {
    let (status, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle", "env_vars": env})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let (status, body) = p.upload(name, ticker()).await;
    assert_eq!(status, 202, "{body}");
    p.wait_deployed(name, 1).await;
}

/// Creates an every-minute cron trigger and waits until the scheduler can
/// see it; returns the first whole minute after it was created.
async fn every_minute(p: &Platform, name: &str, function: &str) -> DateTime<Utc> {
    let (status, body) = p
        .call(
            Method::POST,
            "/triggers",
            Some(json!({"name": name, "function": function, "type": "cron", "schedule": "* * * * *"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let since = eventually("the trigger projected", Duration::from_secs(10), || async {
        let all = sless_store::triggers::enabled_cron(&p.db.pool)
            .await
            .unwrap();
        all.into_iter()
            .find(|t| t.name == name)
            .map(|t| t.active_since)
    })
    .await;
    since.duration_trunc(TimeDelta::minutes(1)).unwrap() + TimeDelta::minutes(1)
}

/// The cron runs of `trigger` as the log has them: (stream, event types).
async fn runs(p: &Platform, trigger: &str) -> Vec<(String, Vec<String>)> {
    let rows: Vec<(String, Vec<String>)> = sqlx::query_as(
        "select stream, array_agg(type order by version) from events
         where stream like 'cron/%/' || $1 || '/%' group by stream order by stream",
    )
    .bind(trigger)
    .fetch_all(&p.db.pool)
    .await
    .unwrap();
    rows
}

/// Waits until the run of `stream` has ended, in the log and in the
/// `jobs` read model (which the scheduler reads to skip a tick while a run
/// goes on); the types of its events.
async fn finished(p: &Platform, stream: &str) -> Vec<String> {
    eventually(
        &format!("{stream} finished"),
        Duration::from_secs(60),
        || async {
            let types: Vec<String> =
                sqlx::query_scalar("select type from events where stream = $1 order by version")
                    .bind(stream)
                    .fetch_all(&p.db.pool)
                    .await
                    .unwrap();
            let status: Option<String> =
                sqlx::query_scalar("select status from jobs where stream = $1")
                    .bind(stream)
                    .fetch_optional(&p.db.pool)
                    .await
                    .unwrap();
            let ended = types
                .iter()
                .any(|t| ["JobSucceeded", "JobFailed", "JobSkipped"].contains(&t.as_str()));
            let projected = status.is_some_and(|s| !["Pending", "Running"].contains(&s.as_str()));
            (ended && projected).then_some(types)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_schedulers_run_each_tick_once() {
    let p = Platform::start(50).await;
    function(&p, "tick", json!({})).await;
    let t0 = every_minute(&p, "each-minute", "tick").await;
    let (a, b) = (
        Scheduler::new(p.db.pool.clone(), HOUR),
        Scheduler::new(p.db.pool.clone(), HOUR),
    );
    for k in 0..3 {
        let now = t0 + TimeDelta::minutes(k) + TimeDelta::seconds(3);
        let (ra, rb) = tokio::join!(a.tick(now), b.tick(now));
        let (ra, rb) = (ra.unwrap(), rb.unwrap());
        assert_eq!(
            ra.fired.len() + rb.fired.len(),
            1,
            "tick {k}: {ra:?} {rb:?}"
        );
        assert_eq!(ra.already + rb.already, 1, "tick {k}: {ra:?} {rb:?}");
        // Looking again at the same time, or a little later, fires nothing.
        let again = a.tick(now + TimeDelta::seconds(20)).await.unwrap();
        assert!(
            again.fired.is_empty() && again.skipped.is_empty(),
            "{again:?}"
        );
        let stream = ra.fired.iter().chain(&rb.fired).next().unwrap().clone();
        let at = (t0 + TimeDelta::minutes(k)).timestamp();
        assert!(stream.ends_with(&format!("/each-minute/{at}")), "{stream}");
        let types = finished(&p, &stream).await;
        assert_eq!(
            types,
            ["JobRequested", "JobStarted", "JobSucceeded"],
            "{stream}"
        );
    }
    let all = runs(&p, "each-minute").await;
    assert_eq!(all.len(), 3, "{all:?}");

    // The handler was told it came from cron, and which tick.
    let out: String = sqlx::query_scalar(
        "select data->'stdout'->>'text' from events where type = 'JobSucceeded'
         and stream = $1",
    )
    .bind(&all[0].0)
    .fetch_one(&p.db.pool)
    .await
    .unwrap();
    let answer: Value = serde_json::from_str(out.trim().lines().last().unwrap()).unwrap();
    assert_eq!(answer["method"], "CRON", "{out}");
    assert_eq!(answer["json"]["trigger"], "each-minute");
    assert_eq!(
        answer["json"]["scheduled_at"]
            .as_str()
            .map(|s| s.parse::<DateTime<Utc>>().unwrap()),
        Some(t0)
    );
    // Each run is an invocation record with its origin.
    let origins: Vec<(String, Option<String>)> = sqlx::query_as(
        "select origin, run from invocations where function = 'tick' order by started_at",
    )
    .fetch_all(&p.db.pool)
    .await
    .unwrap();
    assert_eq!(origins.len(), 3, "{origins:?}");
    assert!(
        origins
            .iter()
            .all(|(o, r)| o == "cron" && r.as_deref().is_some_and(|r| r.starts_with("cron/")))
    );
    // The trigger shows its runs, newest first.
    let trigger = eventually("3 runs shown", Duration::from_secs(10), || async {
        let (_, t) = p.call(Method::GET, "/triggers/each-minute", None).await;
        (t["runs"].as_array().map(Vec::len) == Some(3)).then_some(t)
    })
    .await;
    assert_eq!(trigger["runs"][0]["status"], "Succeeded", "{trigger}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scheduler_killed_mid_tick_loses_no_tick() {
    let p = Platform::start(50).await;
    function(&p, "tick", json!({})).await;
    let t0 = every_minute(&p, "each-minute", "tick").await;
    let now = t0 + TimeDelta::seconds(1);

    // Hold the queue so the scheduler's transaction stops after its append,
    // before it commits; then kill its session, as a crash would.
    let mut blocker = p.db.pool.begin().await.unwrap();
    sqlx::query("lock table work_items in share mode")
        .execute(&mut *blocker)
        .await
        .unwrap();
    let doomed = Scheduler::new(p.db.pool.clone(), HOUR);
    let tick = tokio::spawn(async move { doomed.tick(now).await });
    let pid: i32 = eventually(
        "the scheduler blocked mid-tick",
        Duration::from_secs(10),
        || async {
            sqlx::query_scalar(
                "select pid from pg_stat_activity
             where wait_event_type = 'Lock' and query like '%work_items%'",
            )
            .fetch_optional(&p.db.pool)
            .await
            .unwrap()
        },
    )
    .await;
    tick.abort();
    let killed: bool = sqlx::query_scalar("select pg_terminate_backend($1)")
        .bind(pid)
        .fetch_one(&p.db.pool)
        .await
        .unwrap();
    assert!(killed);
    blocker.rollback().await.unwrap();
    assert!(
        runs(&p, "each-minute").await.is_empty(),
        "the killed tick committed"
    );

    // Another scheduler, at the same moment, fires the tick: once.
    let fresh = Scheduler::new(p.db.pool.clone(), HOUR);
    let report = fresh.tick(now).await.unwrap();
    assert_eq!(report.fired.len(), 1, "{report:?}");
    let types = finished(&p, &report.fired[0]).await;
    assert_eq!(types, ["JobRequested", "JobStarted", "JobSucceeded"]);
    assert_eq!(runs(&p, "each-minute").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_tick_during_a_run_is_skipped_and_missed_ticks_fire_once() {
    let p = Platform::start(50).await;
    function(&p, "slow", json!({"SLOW": "4"})).await;
    let t0 = every_minute(&p, "each-minute", "slow").await;
    let s = Scheduler::new(p.db.pool.clone(), HOUR);
    let first = s.tick(t0).await.unwrap();
    assert_eq!(first.fired.len(), 1, "{first:?}");
    // The next tick comes while the first run is still going.
    eventually(
        "the first run projected",
        Duration::from_secs(10),
        || async {
            let row =
                sless_store::jobs::last_cron_run(&p.db.pool, &p.client.namespace, "each-minute")
                    .await
                    .unwrap();
            row.filter(|r| r.status == "Pending" || r.status == "Running")
        },
    )
    .await;
    let second = s.tick(t0 + TimeDelta::minutes(1)).await.unwrap();
    assert_eq!(second.skipped.len(), 1, "{second:?}");
    assert!(second.fired.is_empty());
    assert_eq!(
        finished(&p, &second.skipped[0]).await,
        ["JobRequested", "JobSkipped"]
    );
    assert_eq!(
        finished(&p, &first.fired[0]).await,
        ["JobRequested", "JobStarted", "JobSucceeded"]
    );
    eventually(
        "the first run's end projected",
        Duration::from_secs(10),
        || async {
            let row = sless_store::jobs::unfinished_cron_run(
                &p.db.pool,
                &p.client.namespace,
                "each-minute",
            )
            .await
            .unwrap();
            row.is_none().then_some(())
        },
    )
    .await;

    // The scheduler was away for nine ticks: only the latest fires, once,
    // and says how many it passed over.
    let late = t0 + TimeDelta::minutes(10) + TimeDelta::seconds(30);
    let back = s.tick(late).await.unwrap();
    assert_eq!(back.fired.len(), 1, "{back:?}");
    let missed: i64 = sqlx::query_scalar(
        "select (data->'cron'->>'missed')::bigint from events where stream = $1 and version = 1",
    )
    .bind(&back.fired[0])
    .fetch_one(&p.db.pool)
    .await
    .unwrap();
    assert_eq!(missed, 8);
    assert!(back.fired[0].ends_with(&(t0 + TimeDelta::minutes(10)).timestamp().to_string()));
    finished(&p, &back.fired[0]).await;

    // A tick older than the starting deadline does not fire at all.
    let strict = Scheduler::new(p.db.pool.clone(), Duration::from_secs(10));
    let too_late = strict
        .tick(t0 + TimeDelta::minutes(12) + TimeDelta::seconds(30))
        .await
        .unwrap();
    assert!(
        too_late.fired.is_empty() && too_late.skipped.is_empty(),
        "{too_late:?}"
    );
    assert_eq!(runs(&p, "each-minute").await.len(), 3);
}

fn alive(pid: u32) -> bool {
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn disabling_the_http_trigger_stops_the_function_and_enabling_serves_it_again() {
    let p = Platform::start(50).await;
    function(&p, "web", json!({})).await;
    let invoke = || async {
        let c = &p.client;
        let res = c
            .http
            .get(format!("{}/fn/{}/web", c.fn_url, c.namespace))
            .send()
            .await
            .unwrap();
        let status = res.status().as_u16();
        (status, res.json::<Value>().await.unwrap_or(Value::Null))
    };
    assert_eq!(invoke().await.0, 200);
    let (status, body) = p
        .call(
            Method::POST,
            "/triggers",
            Some(json!({"name": "web-http", "function": "web", "type": "http"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    assert_eq!(invoke().await.0, 200);
    let key =
        sless_domain::FunctionKey::from_queue_key(&format!("{}/web", p.client.namespace)).unwrap();
    let pid = p.driver.pid(&key).expect("web runs");

    let (status, body) = p
        .call(
            Method::PATCH,
            "/triggers/web-http",
            Some(json!({"enabled": false})),
        )
        .await;
    assert_eq!((status, &body["enabled"]), (200, &json!(false)), "{body}");
    let refused = eventually("503 trigger-disabled", Duration::from_secs(15), || async {
        let (status, body) = invoke().await;
        (status == 503).then_some(body)
    })
    .await;
    assert!(
        refused["type"]
            .as_str()
            .unwrap()
            .ends_with("trigger-disabled"),
        "{refused}"
    );
    assert!(
        refused["detail"].as_str().unwrap().contains("web-http"),
        "{refused}"
    );
    eventually("the process gone", Duration::from_secs(15), || async {
        (!alive(pid) && p.driver.pid(&key).is_none()).then_some(())
    })
    .await;
    // The reconciler records the stop once the process is gone.
    let stopped = || async {
        sqlx::query_scalar::<_, i64>(
            "select count(*) from events where type = 'FunctionStopped' and stream like '%/web'",
        )
        .fetch_one(&p.db.pool)
        .await
        .unwrap()
    };
    eventually("FunctionStopped", Duration::from_secs(15), || async {
        (stopped().await >= 1).then_some(())
    })
    .await;
    assert_eq!(stopped().await, 1);

    let (status, _) = p
        .call(
            Method::PATCH,
            "/triggers/web-http",
            Some(json!({"enabled": true})),
        )
        .await;
    assert_eq!(status, 200);
    let (status, answer) = eventually("served again", Duration::from_secs(30), || async {
        let r = invoke().await;
        (r.0 == 200).then_some(r)
    })
    .await;
    assert_eq!(
        (status, &answer["method"]),
        (200, &json!("GET")),
        "{answer}"
    );
    // Enabling what is enabled appends nothing.
    let before: i64 = sqlx::query_scalar("select count(*) from events")
        .fetch_one(&p.db.pool)
        .await
        .unwrap();
    let (status, _) = p
        .call(
            Method::PATCH,
            "/triggers/web-http",
            Some(json!({"enabled": true})),
        )
        .await;
    assert_eq!(status, 200);
    let after: i64 = sqlx::query_scalar("select count(*) from events")
        .fetch_one(&p.db.pool)
        .await
        .unwrap();
    assert_eq!(before, after);
}
