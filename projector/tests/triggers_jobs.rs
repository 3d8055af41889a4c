//! The `triggers` and `jobs` read models against a real PostgreSQL: rows
//! follow their streams through every event type, deletes remove them and
//! a name asked for again brings them back, and after many mixed events the
//! tables equal a fold of the log.

mod mixed;

use std::collections::BTreeSet;

use chrono::{DateTime, Utc};
use serde_json::json;
use sless_domain::job::{CronTick, JobEvent, Output};
use sless_domain::trigger::{TriggerEvent, TriggerFields, TriggerSpec};
use sless_domain::{FunctionName, Namespace, TriggerName};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_testkit::TestDb;

const NS: &str = "sless-00000000000000aa";

fn ns() -> Namespace {
    Namespace::parse(NS).unwrap()
}

fn metadata() -> Metadata {
    Metadata {
        actor: "ivan@example.com".into(),
        ..Default::default()
    }
}

/// Appends `events` to `stream` (at version `expected`) in one transaction.
async fn append(pool: &PgPool, stream: &str, expected: u64, events: Vec<NewEvent>) {
    let mut tx = pool.begin().await.unwrap();
    eventlog::append(&mut tx, stream, expected, &events)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

async fn append_trigger(pool: &PgPool, stream: &str, expected: u64, events: &[TriggerEvent]) {
    let new = events
        .iter()
        .map(|e| NewEvent::trigger(&ns(), e, metadata()))
        .collect();
    append(pool, stream, expected, new).await;
}

async fn append_job(pool: &PgPool, stream: &str, expected: u64, events: &[JobEvent]) {
    let new = events
        .iter()
        .map(|e| NewEvent::job(&ns(), e, metadata()))
        .collect();
    append(pool, stream, expected, new).await;
}

async fn catch_up(pool: &PgPool) {
    sless_projector::catch_up(pool).await.unwrap();
}

/// When version `version` of `stream` was recorded.
async fn recorded_at(pool: &PgPool, stream: &str, version: i64) -> DateTime<Utc> {
    let events = eventlog::read_stream(pool, stream).await.unwrap();
    events
        .iter()
        .find(|e| e.version == version)
        .unwrap_or_else(|| panic!("{stream} has no version {version}"))
        .recorded_at
}

fn cron_trigger(name: &str) -> TriggerSpec {
    TriggerSpec::parse(TriggerFields {
        name,
        function: "report",
        kind: "cron",
        schedule: Some("0 3 * * *"),
        timezone: Some("Europe/Berlin"),
        enabled: None,
    })
    .unwrap()
}

fn http_trigger(name: &str, enabled: bool) -> TriggerSpec {
    TriggerSpec::parse(TriggerFields {
        name,
        function: "web",
        kind: "http",
        enabled: Some(enabled),
        ..Default::default()
    })
    .unwrap()
}

#[derive(Debug, PartialEq)]
struct TriggerRow {
    function: String,
    kind: String,
    schedule: Option<String>,
    timezone: Option<String>,
    enabled: bool,
    active_since: Option<DateTime<Utc>>,
    stream_version: i32,
    created_at: DateTime<Utc>,
    updated_at: DateTime<Utc>,
}

async fn trigger_row(pool: &PgPool, name: &str) -> Option<TriggerRow> {
    type Row = (
        String,
        String,
        Option<String>,
        Option<String>,
        bool,
        Option<DateTime<Utc>>,
        i32,
        DateTime<Utc>,
        DateTime<Utc>,
    );
    let row: Option<Row> = sqlx::query_as(
        "select function, kind, schedule, timezone, enabled, active_since, stream_version,
                created_at, updated_at
         from triggers where namespace = $1 and name = $2",
    )
    .bind(NS)
    .bind(name)
    .fetch_optional(pool)
    .await
    .unwrap();
    row.map(|r| TriggerRow {
        function: r.0,
        kind: r.1,
        schedule: r.2,
        timezone: r.3,
        enabled: r.4,
        active_since: r.5,
        stream_version: r.6,
        created_at: r.7,
        updated_at: r.8,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_trigger_row_follows_create_toggle_delete_and_create_again() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let stream = format!("trigger/{NS}/nightly");
    let spec = cron_trigger("nightly");
    append_trigger(pool, &stream, 0, &[TriggerEvent::TriggerCreated { spec }]).await;
    catch_up(pool).await;
    let created = recorded_at(pool, &stream, 1).await;
    assert_eq!(
        trigger_row(pool, "nightly").await,
        Some(TriggerRow {
            function: "report".into(),
            kind: "cron".into(),
            schedule: Some("0 3 * * *".into()),
            timezone: Some("Europe/Berlin".into()),
            enabled: true,
            active_since: Some(created),
            stream_version: 1,
            created_at: created,
            updated_at: created,
        })
    );

    // Off: not active; on again: active since the toggle.
    let off = TriggerEvent::TriggerToggled { enabled: false };
    append_trigger(pool, &stream, 1, &[off]).await;
    catch_up(pool).await;
    let row = trigger_row(pool, "nightly").await.unwrap();
    let toggled = recorded_at(pool, &stream, 2).await;
    assert_eq!(
        (row.enabled, row.active_since, row.stream_version),
        (false, None, 2)
    );
    assert_eq!((row.created_at, row.updated_at), (created, toggled));

    let on = TriggerEvent::TriggerToggled { enabled: true };
    append_trigger(pool, &stream, 2, &[on]).await;
    catch_up(pool).await;
    let row = trigger_row(pool, "nightly").await.unwrap();
    let enabled = recorded_at(pool, &stream, 3).await;
    assert!(enabled > created);
    assert_eq!(
        (row.enabled, row.active_since, row.updated_at),
        (true, Some(enabled), enabled)
    );

    // Deleted: the row goes.
    append_trigger(pool, &stream, 3, &[TriggerEvent::TriggerDeleted {}]).await;
    catch_up(pool).await;
    assert_eq!(trigger_row(pool, "nightly").await, None);

    // Created again, now a disabled http trigger: a new row at version 5.
    let again = TriggerEvent::TriggerCreated {
        spec: http_trigger("nightly", false),
    };
    append_trigger(pool, &stream, 4, &[again]).await;
    catch_up(pool).await;
    let recreated = recorded_at(pool, &stream, 5).await;
    assert_eq!(
        trigger_row(pool, "nightly").await,
        Some(TriggerRow {
            function: "web".into(),
            kind: "http".into(),
            schedule: None,
            timezone: None,
            enabled: false,
            active_since: None,
            stream_version: 5,
            created_at: recreated,
            updated_at: recreated,
        })
    );

    // The same life, all in one batch, gives the same row.
    let burst = format!("trigger/{NS}/burst");
    append_trigger(
        pool,
        &burst,
        0,
        &[
            TriggerEvent::TriggerCreated {
                spec: cron_trigger("burst"),
            },
            TriggerEvent::TriggerToggled { enabled: false },
            TriggerEvent::TriggerDeleted {},
            TriggerEvent::TriggerCreated {
                spec: http_trigger("burst", true),
            },
        ],
    )
    .await;
    catch_up(pool).await;
    let row = trigger_row(pool, "burst").await.unwrap();
    let at = recorded_at(pool, &burst, 4).await;
    assert_eq!(
        (row.kind.as_str(), row.enabled, row.active_since),
        ("http", true, Some(at))
    );
    assert_eq!((row.stream_version, row.created_at), (4, at));
    mixed::assert_equal_fold(pool).await;
}

#[derive(Debug, PartialEq, sqlx::FromRow)]
struct JobRow {
    name: String,
    function: String,
    version: i32,
    input: serde_json::Value,
    timeout_sec: i32,
    origin: String,
    trigger: Option<String>,
    scheduled_at: Option<DateTime<Utc>>,
    missed: Option<i32>,
    status: String,
    exit_code: Option<i32>,
    error: Option<String>,
    timed_out: bool,
    stdout: Option<String>,
    stdout_bytes: Option<i64>,
    stdout_truncated: bool,
    stderr: Option<String>,
    stderr_bytes: Option<i64>,
    stderr_truncated: bool,
    duration_ms: Option<i64>,
    requested_at: DateTime<Utc>,
    started_at: Option<DateTime<Utc>>,
    finished_at: Option<DateTime<Utc>>,
    stream_version: i32,
}

async fn job_row(pool: &PgPool, stream: &str) -> Option<JobRow> {
    sqlx::query_as(
        "select name, function, version, input, timeout_sec, origin, trigger, scheduled_at,
                missed, status, exit_code, error, timed_out, stdout, stdout_bytes,
                stdout_truncated, stderr, stderr_bytes, stderr_truncated, duration_ms,
                requested_at, started_at, finished_at, stream_version
         from jobs where stream = $1",
    )
    .bind(stream)
    .fetch_optional(pool)
    .await
    .unwrap()
}

fn requested(input: serde_json::Value, cron: Option<CronTick>) -> JobEvent {
    JobEvent::JobRequested {
        function: FunctionName::parse("report").unwrap(),
        version: 2,
        input,
        timeout_sec: 30,
        cron,
    }
}

fn out(text: &str, bytes: u64, truncated: bool) -> Output {
    Output {
        text: text.into(),
        bytes,
        truncated,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_job_row_shows_its_status_timings_and_output() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let stream = format!("job/{NS}/once");
    append_job(pool, &stream, 0, &[requested(json!({"n": 1}), None)]).await;
    catch_up(pool).await;
    let asked = recorded_at(pool, &stream, 1).await;
    let pending = job_row(pool, &stream).await.unwrap();
    assert_eq!(
        pending,
        JobRow {
            name: "once".into(),
            function: "report".into(),
            version: 2,
            input: json!({"n": 1}),
            timeout_sec: 30,
            origin: "api".into(),
            trigger: None,
            scheduled_at: None,
            missed: None,
            status: "Pending".into(),
            exit_code: None,
            error: None,
            timed_out: false,
            stdout: None,
            stdout_bytes: None,
            stdout_truncated: false,
            stderr: None,
            stderr_bytes: None,
            stderr_truncated: false,
            duration_ms: None,
            requested_at: asked,
            started_at: None,
            finished_at: None,
            stream_version: 1,
        }
    );

    append_job(pool, &stream, 1, &[JobEvent::JobStarted { attempt: 1 }]).await;
    catch_up(pool).await;
    let started = recorded_at(pool, &stream, 2).await;
    let running = job_row(pool, &stream).await.unwrap();
    assert_eq!(
        (running.status.as_str(), running.started_at),
        ("Running", Some(started))
    );

    let done = JobEvent::JobSucceeded {
        exit_code: 0,
        stdout: out("{\"n\": 2}\n", 9, false),
        stderr: out("warming up\n", 11, false),
        duration_ms: 1234,
    };
    append_job(pool, &stream, 2, &[done]).await;
    catch_up(pool).await;
    let finished = recorded_at(pool, &stream, 3).await;
    assert_eq!(
        job_row(pool, &stream).await.unwrap(),
        JobRow {
            status: "Succeeded".into(),
            exit_code: Some(0),
            stdout: Some("{\"n\": 2}\n".into()),
            stdout_bytes: Some(9),
            stderr: Some("warming up\n".into()),
            stderr_bytes: Some(11),
            duration_ms: Some(1234),
            started_at: Some(started),
            finished_at: Some(finished),
            stream_version: 3,
            ..pending
        }
    );

    // Past its timeout: failed, with what it printed until then, cut.
    let late = format!("job/{NS}/late");
    append_job(
        pool,
        &late,
        0,
        &[
            requested(json!(null), None),
            JobEvent::JobStarted { attempt: 2 },
            JobEvent::JobFailed {
                exit_code: None,
                error: "timed out after 30 s".into(),
                stdout: out("tick\ntick\n", 1 << 20, true),
                stderr: Output::default(),
                timed_out: true,
                duration_ms: 30_004,
            },
        ],
    )
    .await;
    catch_up(pool).await;
    let row = job_row(pool, &late).await.unwrap();
    assert_eq!(
        (
            row.status.as_str(),
            row.exit_code,
            row.error.as_deref(),
            row.timed_out
        ),
        ("Failed", None, Some("timed out after 30 s"), true)
    );
    assert_eq!(
        (
            row.stdout.as_deref(),
            row.stdout_bytes,
            row.stdout_truncated
        ),
        (Some("tick\ntick\n"), Some(1 << 20), true)
    );
    assert_eq!(
        (row.stderr.as_deref(), row.stderr_bytes, row.duration_ms),
        (Some(""), Some(0), Some(30_004))
    );
    let at = recorded_at(pool, &late, 3).await;
    assert_eq!(row.finished_at, Some(at));
    assert!(row.started_at.is_some());
    mixed::assert_equal_fold(pool).await;
}

fn tick(trigger: &str, at: DateTime<Utc>, missed: u32) -> CronTick {
    CronTick {
        trigger: TriggerName::parse(trigger).unwrap(),
        schedule: "0 3 * * *".into(),
        timezone: "UTC".into(),
        scheduled_at: at,
        missed,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cron_runs_are_named_for_their_tick_and_a_skipped_one_says_why() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let at = DateTime::<Utc>::from_timestamp(1_798_686_000, 0).unwrap();
    let stream = format!("cron/{NS}/nightly/{}", at.timestamp());
    append_job(
        pool,
        &stream,
        0,
        &[
            requested(json!({"cron": true}), Some(tick("nightly", at, 2))),
            JobEvent::JobStarted { attempt: 1 },
            JobEvent::JobFailed {
                exit_code: Some(3),
                error: "exited with code 3".into(),
                stdout: Output::default(),
                stderr: out("Traceback ...\n", 14, false),
                timed_out: false,
                duration_ms: 80,
            },
        ],
    )
    .await;
    catch_up(pool).await;
    let row = job_row(pool, &stream).await.unwrap();
    assert_eq!(row.name, format!("nightly-{}", at.timestamp()));
    assert_eq!(
        (
            row.origin.as_str(),
            row.trigger.as_deref(),
            row.scheduled_at,
            row.missed
        ),
        ("cron", Some("nightly"), Some(at), Some(2))
    );
    assert_eq!(
        (row.status.as_str(), row.exit_code, row.timed_out),
        ("Failed", Some(3), false)
    );
    assert_eq!(row.stderr.as_deref(), Some("Traceback ...\n"));

    // The next tick came while a run was still going: skipped.
    let next = at + chrono::Duration::days(1);
    let skipped = format!("cron/{NS}/nightly/{}", next.timestamp());
    let reason = "the run of the tick before is still going";
    append_job(
        pool,
        &skipped,
        0,
        &[requested(json!({}), Some(tick("nightly", next, 0)))],
    )
    .await;
    catch_up(pool).await;
    append_job(
        pool,
        &skipped,
        1,
        &[JobEvent::JobSkipped {
            reason: reason.into(),
        }],
    )
    .await;
    catch_up(pool).await;
    let row = job_row(pool, &skipped).await.unwrap();
    let when = recorded_at(pool, &skipped, 2).await;
    assert_eq!(
        (
            row.status.as_str(),
            row.error.as_deref(),
            row.finished_at,
            row.started_at
        ),
        ("Skipped", Some(reason), Some(when), None)
    );
    assert_eq!(
        (row.exit_code, row.stdout, row.duration_ms),
        (None, None, None)
    );
    assert_eq!(row.missed, Some(0));
    mixed::assert_equal_fold(pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_job_loses_its_row_and_its_name_can_be_asked_for_again() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let stream = format!("job/{NS}/again");
    append_job(
        pool,
        &stream,
        0,
        &[
            requested(json!({"first": true}), None),
            JobEvent::JobStarted { attempt: 1 },
        ],
    )
    .await;
    catch_up(pool).await;
    assert!(job_row(pool, &stream).await.is_some());
    append_job(pool, &stream, 2, &[JobEvent::JobDeleted {}]).await;
    catch_up(pool).await;
    assert_eq!(job_row(pool, &stream).await, None);

    // Asked for again, in a later batch: a fresh row, nothing of the first run.
    append_job(
        pool,
        &stream,
        3,
        &[requested(json!({"second": true}), None)],
    )
    .await;
    catch_up(pool).await;
    let row = job_row(pool, &stream).await.unwrap();
    let asked = recorded_at(pool, &stream, 4).await;
    assert_eq!(
        (
            row.status.as_str(),
            &row.input,
            row.started_at,
            row.requested_at,
            row.stream_version
        ),
        ("Pending", &json!({"second": true}), None, asked, 4)
    );

    // Deleted and asked for again within one batch.
    let quick = format!("job/{NS}/quick");
    append_job(
        pool,
        &quick,
        0,
        &[
            requested(json!(1), None),
            JobEvent::JobDeleted {},
            requested(json!(2), None),
            JobEvent::JobStarted { attempt: 1 },
        ],
    )
    .await;
    // And one deleted for good, never seen by the projector with a row.
    let gone = format!("job/{NS}/gone");
    append_job(
        pool,
        &gone,
        0,
        &[requested(json!(1), None), JobEvent::JobDeleted {}],
    )
    .await;
    catch_up(pool).await;
    let row = job_row(pool, &quick).await.unwrap();
    assert_eq!(
        (row.status.as_str(), &row.input, row.stream_version),
        ("Running", &json!(2), 4)
    );
    assert_eq!(job_row(pool, &gone).await, None);
    mixed::assert_equal_fold(pool).await;
}

/// Appends a stream that ends in each event type of the trigger and job
/// aggregates, with one catch-up before that last event, and checks that
/// the projector applied it: the row is at that event's version (or gone,
/// for a delete). A projector that skipped any type fails here.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_trigger_and_job_event_type_moves_its_row() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let mut covered = BTreeSet::new();

    let trigger_lives: Vec<Vec<TriggerEvent>> = vec![
        vec![TriggerEvent::TriggerCreated {
            spec: cron_trigger("t-a"),
        }],
        vec![
            TriggerEvent::TriggerCreated {
                spec: cron_trigger("t-b"),
            },
            TriggerEvent::TriggerToggled { enabled: false },
        ],
        vec![
            TriggerEvent::TriggerCreated {
                spec: cron_trigger("t-c"),
            },
            TriggerEvent::TriggerDeleted {},
        ],
    ];
    for (i, events) in trigger_lives.iter().enumerate() {
        let name = format!("t-{}", ["a", "b", "c"][i]);
        let stream = format!("trigger/{NS}/{name}");
        let (last, before) = events.split_last().unwrap();
        append_trigger(pool, &stream, 0, before).await;
        catch_up(pool).await;
        append_trigger(
            pool,
            &stream,
            before.len() as u64,
            std::slice::from_ref(last),
        )
        .await;
        catch_up(pool).await;
        let row = trigger_row(pool, &name).await;
        match last {
            TriggerEvent::TriggerDeleted {} => assert_eq!(row, None, "{stream}"),
            _ => assert_eq!(
                row.map(|r| r.stream_version),
                Some(events.len() as i32),
                "{stream}: {last:?} applied"
            ),
        }
        covered.insert(last.type_name());
    }

    let failed = JobEvent::JobFailed {
        exit_code: Some(1),
        error: "exited with code 1".into(),
        stdout: Output::default(),
        stderr: Output::default(),
        timed_out: false,
        duration_ms: 5,
    };
    let succeeded = JobEvent::JobSucceeded {
        exit_code: 0,
        stdout: Output::default(),
        stderr: Output::default(),
        duration_ms: 5,
    };
    let started = JobEvent::JobStarted { attempt: 1 };
    let job_lives: Vec<Vec<JobEvent>> = vec![
        vec![requested(json!(0), None)],
        vec![requested(json!(0), None), started.clone()],
        vec![requested(json!(0), None), started.clone(), succeeded],
        vec![requested(json!(0), None), started, failed],
        vec![
            requested(json!(0), None),
            JobEvent::JobSkipped { reason: "r".into() },
        ],
        vec![requested(json!(0), None), JobEvent::JobDeleted {}],
    ];
    for (i, events) in job_lives.iter().enumerate() {
        let stream = format!("job/{NS}/j{i}");
        let (last, before) = events.split_last().unwrap();
        append_job(pool, &stream, 0, before).await;
        catch_up(pool).await;
        append_job(
            pool,
            &stream,
            before.len() as u64,
            std::slice::from_ref(last),
        )
        .await;
        catch_up(pool).await;
        let row = job_row(pool, &stream).await;
        match last {
            JobEvent::JobDeleted {} => assert_eq!(row, None, "{stream}"),
            _ => {
                let row = row.unwrap_or_else(|| panic!("{stream} has no row"));
                let at = recorded_at(pool, &stream, events.len() as i64).await;
                assert_eq!(
                    row.stream_version,
                    events.len() as i32,
                    "{stream}: {last:?} applied"
                );
                let moved = [Some(row.requested_at), row.started_at, row.finished_at];
                assert!(moved.contains(&Some(at)), "{stream}: {row:?}");
            }
        }
        covered.insert(last.type_name());
    }
    let all: BTreeSet<&str> = TriggerEvent::TYPES
        .into_iter()
        .chain(JobEvent::TYPES)
        .collect();
    assert_eq!(covered, all, "every event type is tried");
    mixed::assert_equal_fold(pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_read_models_equal_a_fold_of_the_log_after_mixed_events() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    // Batches of a few dozen events: rows are read back, changed, deleted
    // and created again across batches.
    let written = mixed::append_mixed(pool, 10, 30, 3_000, 17).await;
    assert!(written >= 3_000);
    sless_projector::catch_up(pool).await.unwrap();
    mixed::assert_equal_fold(pool).await;
    let (triggers, jobs, statuses): (i64, i64, i64) = sqlx::query_as(
        "select (select count(*) from triggers), (select count(*) from jobs),
                (select count(distinct status) from jobs)",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(
        triggers > 0 && jobs > 0 && statuses >= 4,
        "the mix leaves rows of every kind: {triggers} triggers, {jobs} jobs, {statuses} statuses"
    );
    let deletes: i64 = sqlx::query_scalar(
        "select count(*) from events where type in ('TriggerDeleted', 'JobDeleted')",
    )
    .fetch_one(pool)
    .await
    .unwrap();
    assert!(deletes > 10, "the mix deletes: {deletes}");
}

/// Every row of `triggers` and `jobs`, written out in key order.
async fn rows_as_text(pool: &PgPool) -> (String, String) {
    sqlx::query_as(
        "select (select coalesce(string_agg(t::text, E'\\n' order by namespace, name), '')
                 from triggers t),
                (select coalesce(string_agg(j::text, E'\\n' order by stream), '') from jobs j)",
    )
    .fetch_one(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn trigger_and_job_events_read_again_are_skipped_and_change_no_row() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    // Deletes and creations again across batches: some streams have a row
    // that applied only the end of its stream, some have none.
    let written = mixed::append_mixed(pool, 11, 10, 600, 13).await;
    sless_projector::catch_up(pool).await.unwrap();
    let before = rows_as_text(pool).await;
    assert!(!before.0.is_empty() && !before.1.is_empty());
    // Rewind the checkpoint, as a second copy that lost its commit would
    // find it: every row meets events it applied already.
    sqlx::query("update projector_checkpoints set xid = 0, position = 0")
        .execute(pool)
        .await
        .unwrap();
    assert_eq!(sless_projector::catch_up(pool).await.unwrap(), written);
    assert_eq!(rows_as_text(pool).await, before);
    mixed::assert_equal_fold(pool).await;
}
