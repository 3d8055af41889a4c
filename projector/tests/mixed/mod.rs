//! Trigger and job streams with mixed events, made with the domain's own
//! deciders (so every sequence is one the API and the workers can write),
//! and the check that the `triggers` and `jobs` read models equal a fold
//! of the log.

use chrono::{DateTime, Utc};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sless_domain::job::{self, CronTick, Job, JobCommand, Output, RunResult};
use sless_domain::trigger::{self, Trigger, TriggerCommand, TriggerFields, TriggerSpec};
use sless_domain::{FunctionName, Namespace, TriggerName};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};

fn metadata() -> Metadata {
    Metadata {
        actor: "test".into(),
        ..Default::default()
    }
}

fn trigger_spec(rng: &mut StdRng, name: &str) -> TriggerSpec {
    let function = format!("f{}", rng.random_range(0..3));
    let cron = rng.random_bool(0.5);
    TriggerSpec::parse(TriggerFields {
        name,
        function: &function,
        kind: if cron { "cron" } else { "http" },
        schedule: cron.then_some(["* * * * *", "0 3 * * *", "@hourly"][rng.random_range(0..3)]),
        timezone: (cron && rng.random_bool(0.5)).then_some("Europe/Berlin"),
        enabled: Some(rng.random_bool(0.7)),
    })
    .unwrap()
}

fn output(rng: &mut StdRng) -> Output {
    let n = rng.random_range(0..40);
    Output {
        text: "x".repeat(n),
        bytes: n as u64 + rng.random_range(0..2) * 1000,
        truncated: rng.random_bool(0.2),
    }
}

fn job_command(rng: &mut StdRng, state: &Job, tick: Option<&CronTick>) -> JobCommand {
    let attempt = rng.random_range(1..4);
    match rng.random_range(0..100) {
        0..25 => JobCommand::Request {
            function: FunctionName::parse(&format!("f{}", rng.random_range(0..3))).unwrap(),
            version: rng.random_range(1..5),
            input: serde_json::json!({ "n": rng.random_range(0..100) }),
            timeout_sec: rng.random_range(1..60),
            cron: tick.cloned(),
        },
        25..50 => JobCommand::Start { attempt },
        50..80 => JobCommand::Finish {
            attempt: state.attempt.unwrap_or(attempt),
            result: RunResult {
                exit_code: [Some(0), Some(0), Some(3), None][rng.random_range(0..4)],
                timed_out: rng.random_bool(0.1),
                error: None,
                stdout: output(rng),
                stderr: output(rng),
                duration_ms: rng.random_range(0..5000),
            },
        },
        80..90 => JobCommand::Skip {
            reason: "the run before is still going".into(),
        },
        _ => JobCommand::Delete,
    }
}

/// Appends about `total` events (each append one command's events) to
/// `streams` trigger streams, as many job streams and as many cron run
/// streams, in namespaces `tns0`…`tns2`, named after `seed`. With
/// `project_every` > 0, the projector catches up after every that many
/// appends, so rows are read back and changed across batches. Returns how
/// many events it appended.
pub async fn append_mixed(
    pool: &PgPool,
    seed: u64,
    streams: usize,
    total: usize,
    project_every: usize,
) -> usize {
    let mut rng = StdRng::seed_from_u64(seed);
    let t0 = DateTime::<Utc>::from_timestamp(1_798_675_200, 0).unwrap();
    let mut triggers: Vec<(Namespace, String, String, Trigger)> = (0..streams)
        .map(|i| {
            let ns = Namespace::parse(&format!("tns{}", i % 3)).unwrap();
            let name = format!("t{i}-{seed}");
            let stream = trigger::stream(&ns, &TriggerName::parse(&name).unwrap());
            (ns, name, stream, Trigger::default())
        })
        .collect();
    let mut jobs: Vec<(Namespace, String, Option<CronTick>, Job)> = (0..2 * streams)
        .map(|i| {
            let ns = Namespace::parse(&format!("tns{}", i % 3)).unwrap();
            if i < streams {
                let name = sless_domain::JobName::parse(&format!("j{i}-{seed}")).unwrap();
                (ns.clone(), job::stream(&ns, &name), None, Job::default())
            } else {
                let trigger = TriggerName::parse(&format!("t{}-{seed}", i % streams)).unwrap();
                let scheduled_at = t0 + chrono::Duration::minutes(i as i64);
                let tick = CronTick {
                    trigger: trigger.clone(),
                    schedule: "* * * * *".into(),
                    timezone: "UTC".into(),
                    scheduled_at,
                    missed: rng.random_range(0..3),
                };
                let stream = job::cron_stream(&ns, &trigger, scheduled_at);
                (ns, stream, Some(tick), Job::default())
            }
        })
        .collect();
    let (mut written, mut appends) = (0, 0);
    while written < total {
        let mut tx = pool.begin().await.unwrap();
        if rng.random_bool(0.4) {
            let (ns, name, stream, state) = &mut triggers[rng.random_range(0..streams)];
            let command = match rng.random_range(0..10) {
                0..3 => TriggerCommand::Create(trigger_spec(&mut rng, name)),
                3..8 => TriggerCommand::Toggle {
                    enabled: rng.random_bool(0.5),
                },
                _ => TriggerCommand::Delete,
            };
            let Ok(events) = trigger::decide(state, command) else {
                continue;
            };
            if events.is_empty() {
                continue;
            }
            let new: Vec<NewEvent> = events
                .iter()
                .map(|e| NewEvent::trigger(ns, e, metadata()))
                .collect();
            eventlog::append(&mut tx, stream, state.stream_version, &new)
                .await
                .unwrap();
            *state = events
                .iter()
                .fold(std::mem::take(state), |t, e| t.evolve(e));
            written += events.len();
        } else {
            let (ns, stream, tick, state) = &mut jobs[rng.random_range(0..2 * streams)];
            let command = job_command(&mut rng, state, tick.as_ref());
            let Ok(events) = job::decide(state, command) else {
                continue;
            };
            if events.is_empty() {
                continue;
            }
            let new: Vec<NewEvent> = events
                .iter()
                .map(|e| NewEvent::job(ns, e, metadata()))
                .collect();
            eventlog::append(&mut tx, stream, state.stream_version, &new)
                .await
                .unwrap();
            *state = events
                .iter()
                .fold(std::mem::take(state), |j, e| j.evolve(e));
            written += events.len();
        }
        tx.commit().await.unwrap();
        appends += 1;
        if project_every > 0 && appends % project_every == 0 {
            sless_projector::catch_up(pool).await.unwrap();
        }
    }
    written
}

type TriggerRow = (
    String,
    String,
    Option<String>,
    Option<String>,
    bool,
    Option<DateTime<Utc>>,
    i32,
);

type JobRow = (
    String,
    i32,
    serde_json::Value,
    i32,
    String,
    Option<String>,
    Option<DateTime<Utc>>,
    Option<i32>,
    String,
    i32,
    Option<DateTime<Utc>>,
);

/// Every trigger and job stream of the log has the row its fold says (none
/// for one that does not exist), and the tables hold no other row.
pub async fn assert_equal_fold(pool: &PgPool) {
    let streams: Vec<String> = sqlx::query_scalar(
        "select distinct stream from events
         where stream like 'trigger/%' or stream like 'job/%' or stream like 'cron/%'",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let (mut triggers, mut jobs) = (0, 0);
    for stream in &streams {
        let parts: Vec<&str> = stream.split('/').collect();
        if parts[0] == "trigger" {
            let (folded, _) = eventlog::load::<Trigger>(pool, stream).await.unwrap();
            let row: Option<TriggerRow> = sqlx::query_as(
                "select function, kind, schedule, timezone, enabled, active_since, stream_version
                 from triggers where namespace = $1 and name = $2",
            )
            .bind(parts[1])
            .bind(parts[2])
            .fetch_optional(pool)
            .await
            .unwrap();
            let Some(spec) = &folded.spec else {
                assert_eq!(row, None, "{stream} was deleted");
                continue;
            };
            triggers += 1;
            let row = row.unwrap_or_else(|| panic!("{stream} has no row"));
            let schedule = spec.schedule.as_ref();
            assert_eq!(
                row,
                (
                    spec.function.to_string(),
                    spec.kind.as_str().to_owned(),
                    schedule.map(|s| s.cron.clone()),
                    schedule.map(|s| s.timezone.clone()),
                    spec.enabled,
                    row.5.filter(|_| spec.enabled),
                    folded.stream_version as i32,
                ),
                "{stream}"
            );
            assert_eq!(row.5.is_some(), spec.enabled, "{stream}: active_since");
        } else {
            let (folded, _) = eventlog::load::<Job>(pool, stream).await.unwrap();
            let row: Option<JobRow> = sqlx::query_as(
                "select function, version, input, timeout_sec, origin, trigger, scheduled_at,
                        missed, status, stream_version, finished_at
                 from jobs where stream = $1",
            )
            .bind(stream)
            .fetch_optional(pool)
            .await
            .unwrap();
            let Some(request) = &folded.request else {
                assert_eq!(row, None, "{stream} was deleted");
                continue;
            };
            jobs += 1;
            let row = row.unwrap_or_else(|| panic!("{stream} has no row"));
            let tick = request.cron.as_ref();
            assert_eq!(
                row,
                (
                    request.function.to_string(),
                    request.version as i32,
                    request.input.clone(),
                    request.timeout_sec as i32,
                    if tick.is_some() { "cron" } else { "api" }.to_owned(),
                    tick.map(|t| t.trigger.to_string()),
                    tick.map(|t| t.scheduled_at),
                    tick.map(|t| t.missed as i32),
                    folded.status.as_str().to_owned(),
                    folded.stream_version as i32,
                    row.10.filter(|_| folded.status.finished()),
                ),
                "{stream}"
            );
            assert_eq!(
                row.10.is_some(),
                folded.status.finished(),
                "{stream}: finished_at"
            );
        }
    }
    let count = |table: &'static str| async move {
        sqlx::query_scalar::<_, i64>(sqlx::AssertSqlSafe(format!("select count(*) from {table}")))
            .fetch_one(pool)
            .await
            .unwrap()
    };
    assert_eq!(count("triggers").await, triggers, "no row of no trigger");
    assert_eq!(count("jobs").await, jobs, "no row of no job");
}
