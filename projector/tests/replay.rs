//! Replay against a real PostgreSQL: the rebuilt read models equal the live
//! ones after many mixed events, repair corrupted ones, survive being killed
//! midway, and a live projector goes on correctly across the swap.

mod mixed;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use rand::Rng;
use rand::SeedableRng;
use rand::rngs::StdRng;
use sless_domain::{Function, FunctionEvent, FunctionSpec, Runtime, SourceVersion};
use sless_projector::Projector;
use sless_projector::replay::{self, Mode, Replay};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::readmodel;
use sless_testkit::TestDb;

fn spec(memory_mb: u32) -> FunctionSpec {
    FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb,
        timeout_sec: 30,
        env_vars: [("A".to_owned(), format!("{memory_mb}"))].into(),
        scale_to_zero_after_sec: None,
        scaling: Default::default(),
    }
}

fn uploaded(version: u32) -> FunctionEvent {
    FunctionEvent::FunctionUploaded(SourceVersion {
        version,
        sha256: format!("{version:064}"),
        size: 100 + version as u64,
        files: 1,
        zip_key: format!("blobs/zips/{version}.zip"),
        context_sha256: format!("c{version}"),
        context_key: format!("blobs/contexts/c{version}.tar.gz"),
        runtime: Some(sless_domain::Runtime::Python311),
    })
}

fn new_event(stream: &str, e: &FunctionEvent) -> NewEvent {
    let ns = stream.split('/').nth(1).unwrap().to_owned();
    NewEvent {
        event_type: e.type_name().into(),
        namespace: ns,
        data: e.data(),
        metadata: Metadata {
            actor: "test".into(),
            ..Default::default()
        },
    }
}

/// One function's stream while events are made up for it.
#[derive(Default)]
struct Stream {
    version: u64,
    exists: bool,
    uploads: u32,
}

/// The next event of a stream: every kind of function event, at random,
/// in an order a function can see them (worker events name a version
/// uploaded, possibly not the current one).
fn next_event(rng: &mut StdRng, s: &mut Stream) -> FunctionEvent {
    if !s.exists {
        s.exists = true;
        return FunctionEvent::FunctionCreated {
            spec: spec(128 * rng.random_range(1..4)),
        };
    }
    let v = if s.uploads == 0 {
        1
    } else {
        rng.random_range(1..=s.uploads)
    };
    match rng.random_range(0..100) {
        0..20 => {
            s.uploads += 1;
            uploaded(s.uploads)
        }
        20..28 => FunctionEvent::FunctionSpecChanged {
            spec: spec(128 * rng.random_range(1..8)),
        },
        28..43 => FunctionEvent::BuildStarted { version: v },
        43..55 => FunctionEvent::BuildSucceeded {
            version: v,
            artifact: format!("local:{v}"),
        },
        55..62 => FunctionEvent::BuildFailed {
            version: v,
            error: "pip failed".into(),
            log_tail: format!("line {v}"),
        },
        62..80 => FunctionEvent::FunctionDeployed {
            version: v,
            endpoint: format!("http://127.0.0.1:{}", 20_000 + v),
            node: None,
            instances: vec![],
        },
        80..84 => FunctionEvent::DeployFailed {
            version: v,
            error: "health check".into(),
            log_tail: String::new(),
        },
        84..86 => FunctionEvent::DeployRolledBack {
            failed_version: v,
            restored_version: rng.random_range(1..=v),
        },
        86..87 => FunctionEvent::FunctionCrashed {
            version: v,
            cause: sless_domain::CrashCause::Oom,
            detail: format!("killed for memory {v}"),
            memory_mb: Some(v),
        },
        87..90 => FunctionEvent::ReconcileAbandoned {
            attempts: 5,
            error: "S3 unavailable".into(),
        },
        _ => {
            s.exists = false;
            FunctionEvent::FunctionDeleted {}
        }
    }
}

/// Appends `total` mixed events to `functions` streams in namespaces
/// `ns0`…`ns4`, 1–4 events per append, from `writers` concurrent writers
/// (each its own streams, named after `seed`).
async fn append_mixed(pool: &PgPool, seed: u64, functions: usize, total: usize, writers: usize) {
    let per_writer = total / writers;
    let mut tasks = Vec::new();
    for w in 0..writers {
        let pool = pool.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(seed + w as u64);
            let keys: Vec<String> = (0..functions / writers)
                .map(|i| format!("function/ns{}/f{w}-{i}-{seed}", i % 5))
                .collect();
            let mut streams: Vec<Stream> = keys.iter().map(|_| Stream::default()).collect();
            let mut written = 0;
            while written < per_writer {
                let i = rng.random_range(0..keys.len());
                let n = rng.random_range(1..=4).min(per_writer - written);
                let s = &mut streams[i];
                let events: Vec<NewEvent> = (0..n)
                    .map(|_| new_event(&keys[i], &next_event(&mut rng, s)))
                    .collect();
                let mut tx = pool.begin().await.unwrap();
                eventlog::append(&mut tx, &keys[i], s.version, &events)
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                s.version += n as u64;
                written += n;
            }
        }));
    }
    for t in tasks {
        t.await.unwrap();
    }
}

async fn fold(pool: &PgPool, stream: &str) -> Function {
    let events = eventlog::read_stream(pool, stream).await.unwrap();
    let decoded: Vec<FunctionEvent> = events
        .iter()
        .map(|e| FunctionEvent::from_stored(&e.event_type, &e.data).unwrap())
        .collect();
    Function::fold(&decoded)
}

/// Every function's read-model row equals a fold over its whole stream,
/// every upload has its version row, and there are no other rows.
async fn assert_read_models_equal_fold(pool: &PgPool) {
    let streams: Vec<String> = sqlx::query_scalar(
        "select distinct stream from events where stream like 'function/%' order by stream",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(!streams.is_empty());
    let mut uploads = 0;
    for stream in &streams {
        let (_, rest) = stream.split_once('/').unwrap();
        let (ns, name) = rest.split_once('/').unwrap();
        let folded = fold(pool, stream).await;
        let row = readmodel::function_row_any(pool, ns, name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{stream} has no row"));
        assert!(
            row.matches(&folded),
            "{stream}: read model {row:?}\nfold {folded:?}"
        );
        let versions: Vec<i32> = sqlx::query_scalar(
            "select version from function_versions where namespace = $1 and name = $2
             order by version",
        )
        .bind(ns)
        .bind(name)
        .fetch_all(pool)
        .await
        .unwrap();
        let folded_versions: Vec<i32> = folded.versions.iter().map(|v| v.version as i32).collect();
        assert_eq!(versions, folded_versions, "{stream}: version rows");
        uploads += versions.len();
    }
    let rows: i64 = sqlx::query_scalar("select count(*) from functions")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(
        rows as usize,
        streams.len(),
        "a row for every stream, no more"
    );
    let version_rows: i64 = sqlx::query_scalar("select count(*) from function_versions")
        .fetch_one(pool)
        .await
        .unwrap();
    assert_eq!(
        version_rows as usize, uploads,
        "no version row of no upload"
    );
}

async fn shadow_tables(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "select relname::text from pg_class
         where relname like '%\\_replay' and relkind = 'r' order by 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

async fn index_names(pool: &PgPool) -> Vec<String> {
    sqlx::query_scalar(
        "select indexrelid::regclass::text from pg_index
         where indrelid in ('functions'::regclass, 'function_versions'::regclass,
                            'triggers'::regclass, 'jobs'::regclass)
         order by 1",
    )
    .fetch_all(pool)
    .await
    .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_after_10000_mixed_events_gives_identical_checksums() {
    let db = TestDb::new().await;
    append_mixed(&db.pool, 1, 500, 10_000, 4).await;
    // Triggers and jobs too, with a catch-up now and then: their rows are
    // read back, changed and deleted across batches.
    let others = mixed::append_mixed(&db.pool, 1, 40, 2_000, 50).await;
    let total = 10_000 + others as u64;
    sless_projector::catch_up(&db.pool).await.unwrap();
    let applied: i64 = sqlx::query_scalar(
        "select count(*) from events e, projector_checkpoints c
         where c.name = 'read_models' and (e.xid, e.position) <= (c.xid, c.position)",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(
        applied as u64, total,
        "the live projector applies every event"
    );
    let indexes = index_names(&db.pool).await;

    let verified = replay::replay(&db.pool, Mode::Verify, "test", |_| {})
        .await
        .unwrap();
    assert!(!verified.swapped);
    assert_eq!(verified.applied, total);
    assert!(verified.differing().is_empty(), "{verified:?}");
    assert!(
        shadow_tables(&db.pool).await.is_empty(),
        "verify leaves no table"
    );

    let mut reports = 0;
    let started = Instant::now();
    let outcome = replay::replay(&db.pool, Mode::Replay, "test", |p| {
        reports += 1;
        assert!(p.applied <= p.total);
    })
    .await
    .unwrap();
    let took = started.elapsed();
    eprintln!(
        "replayed {} events in {took:?}: {:.0} events/s",
        outcome.applied,
        outcome.applied as f64 / took.as_secs_f64()
    );
    assert!(outcome.swapped);
    assert_eq!(outcome.applied, total);
    assert!(reports >= 1);
    assert!(outcome.differing().is_empty(), "{outcome:?}");
    assert_eq!(
        outcome
            .models
            .iter()
            .map(|m| m.table.as_str())
            .collect::<Vec<_>>(),
        ["functions", "function_versions", "triggers", "jobs"]
    );
    assert!(
        outcome.models.iter().all(|m| m.rebuilt_rows > 0),
        "{outcome:?}"
    );
    assert_eq!(verified.models, outcome.models, "same checksums, same rows");
    assert!(shadow_tables(&db.pool).await.is_empty());
    assert_eq!(
        index_names(&db.pool).await,
        indexes,
        "the indexes keep their names"
    );
    let fillfactor: Option<Vec<String>> =
        sqlx::query_scalar("select reloptions from pg_class where oid = 'functions'::regclass")
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(fillfactor, Some(vec!["fillfactor=50".to_owned()]));
    assert_read_models_equal_fold(&db.pool).await;
    mixed::assert_equal_fold(&db.pool).await;

    let run = replay::last(&db.pool).await.unwrap().unwrap();
    assert_eq!((run.mode.as_str(), run.state.as_str()), ("replay", "equal"));
    assert_eq!(run.applied as u64, total);
    let checksums = run.checksums.unwrap();
    for table in ["functions", "function_versions", "triggers", "jobs"] {
        assert_eq!(checksums[table]["equal"], true, "{table}");
    }

    // The live projector goes on from its checkpoint on the new tables.
    append_mixed(&db.pool, 99, 50, 400, 1).await;
    let more = mixed::append_mixed(&db.pool, 99, 10, 200, 0).await;
    assert_eq!(
        sless_projector::catch_up(&db.pool).await.unwrap(),
        400 + more
    );
    assert_read_models_equal_fold(&db.pool).await;
    mixed::assert_equal_fold(&db.pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_repairs_read_models_that_were_corrupted_or_dropped() {
    let db = TestDb::new().await;
    append_mixed(&db.pool, 2, 100, 2_000, 2).await;
    mixed::append_mixed(&db.pool, 2, 20, 500, 0).await;
    sless_projector::catch_up(&db.pool).await.unwrap();
    let good = replay::replay(&db.pool, Mode::Verify, "test", |_| {})
        .await
        .unwrap();
    assert!(good.differing().is_empty());

    for corruption in [
        "delete from functions where name like 'f0-1%'",
        "update functions set phase = 'Ready', endpoint = 'http://nowhere' where name = 'f1-3-2'",
        "update functions set env_vars = '{\"A\": \"x\"}' where name = 'f0-7-2'",
    ] {
        sqlx::query(corruption).execute(&db.pool).await.unwrap();
    }
    sqlx::query("delete from function_versions where version = 2")
        .execute(&db.pool)
        .await
        .unwrap();
    for corruption in [
        "update triggers set enabled = not enabled where name like 't1-%'",
        "update jobs set stdout = 'not what it printed' where status in ('Succeeded', 'Failed')",
        "delete from jobs where origin = 'cron'",
    ] {
        let hit = sqlx::query(corruption).execute(&db.pool).await.unwrap();
        assert!(hit.rows_affected() > 0, "{corruption}");
    }
    let all = ["functions", "function_versions", "triggers", "jobs"];

    let verified = replay::replay(&db.pool, Mode::Verify, "test", |_| {})
        .await
        .unwrap();
    assert_eq!(verified.differing(), all);
    assert!(!verified.swapped);
    let after_verify = replay::last(&db.pool).await.unwrap().unwrap();
    assert_eq!(after_verify.state, "differs");

    let replayed = replay::replay(&db.pool, Mode::Replay, "test", |_| {})
        .await
        .unwrap();
    assert_eq!(replayed.differing(), all);
    assert!(replayed.swapped);
    for (m, g) in replayed.models.iter().zip(&good.models) {
        assert_eq!(
            m.rebuilt, g.rebuilt,
            "{}: rebuilt as before the damage",
            m.table
        );
    }
    assert_read_models_equal_fold(&db.pool).await;
    mixed::assert_equal_fold(&db.pool).await;
    let again = replay::replay(&db.pool, Mode::Verify, "test", |_| {})
        .await
        .unwrap();
    assert!(again.differing().is_empty());

    // Dropped altogether: emptied tables (a table that is gone entirely
    // comes back with `sless migrate` only on a new database).
    sqlx::query("truncate functions, function_versions, triggers, jobs")
        .execute(&db.pool)
        .await
        .unwrap();
    let replayed = replay::replay(&db.pool, Mode::Replay, "test", |_| {})
        .await
        .unwrap();
    assert_eq!(replayed.differing(), all);
    assert_read_models_equal_fold(&db.pool).await;
    mixed::assert_equal_fold(&db.pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_killed_midway_changes_nothing_and_the_next_one_completes() {
    let db = TestDb::new().await;
    append_mixed(&db.pool, 3, 200, 5_000, 2).await;
    sless_projector::catch_up(&db.pool).await.unwrap();
    let before = replay::replay(&db.pool, Mode::Verify, "test", |_| {})
        .await
        .unwrap();

    let applied = Arc::new(AtomicU64::new(0));
    let seen = applied.clone();
    let killed = Replay::begin(&db.pool, Mode::Replay, "test")
        .await
        .unwrap()
        .batch(100);
    let task = tokio::spawn(killed.run(move |p| seen.store(p.applied, Ordering::SeqCst)));
    sless_testkit::eventually(
        "the replay to be halfway",
        Duration::from_secs(60),
        || async { (applied.load(Ordering::SeqCst) >= 2_000).then_some(()) },
    )
    .await;
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    assert!(
        applied.load(Ordering::SeqCst) < 5_000,
        "killed before the end"
    );
    assert_eq!(
        shadow_tables(&db.pool).await,
        [
            "function_versions_replay",
            "functions_replay",
            "jobs_replay",
            "triggers_replay"
        ],
        "the killed replay left its tables"
    );
    let run = sless_testkit::eventually(
        "the killed replay's session to end",
        Duration::from_secs(30),
        || async {
            let run = replay::last(&db.pool).await.unwrap().unwrap();
            (run.state == "abandoned").then_some(run)
        },
    )
    .await;
    assert!(run.applied >= 2_000 && run.applied < 5_000, "{run:?}");

    let again = replay::replay(&db.pool, Mode::Replay, "test", |_| {})
        .await
        .unwrap();
    assert_eq!(again.applied, 5_000);
    assert!(again.differing().is_empty(), "{again:?}");
    assert_eq!(again.models, before.models);
    assert!(shadow_tables(&db.pool).await.is_empty());
    assert_read_models_equal_fold(&db.pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_replay_runs_at_a_time() {
    let db = TestDb::new().await;
    append_mixed(&db.pool, 4, 10, 100, 1).await;
    sless_projector::catch_up(&db.pool).await.unwrap();
    let first = Replay::begin(&db.pool, Mode::Verify, "test").await.unwrap();
    let second = Replay::begin(&db.pool, Mode::Replay, "test").await;
    assert!(
        matches!(second, Err(sless_projector::Error::ReplayRunning { .. })),
        "a second replay is refused while one runs"
    );
    assert_eq!(
        replay::last(&db.pool).await.unwrap().unwrap().state,
        "running"
    );
    let outcome = first.run(|_| {}).await.unwrap();
    assert!(outcome.differing().is_empty());
    replay::replay(&db.pool, Mode::Verify, "test", |_| {})
        .await
        .unwrap();
}

async fn append(pool: &PgPool, stream: &str, expected: u64, events: &[FunctionEvent]) {
    let mut tx = pool.begin().await.unwrap();
    let new: Vec<_> = events.iter().map(|e| new_event(stream, e)).collect();
    eventlog::append(&mut tx, stream, expected, &new)
        .await
        .unwrap();
    tx.commit().await.unwrap();
}

/// One step of `projector` that applied something.
async fn step_with(projector: &mut Projector, pool: &PgPool) -> usize {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let s = projector.step(pool, 1000).await.expect("projector step");
        if s.applied > 0 || !s.held_back {
            return s.applied;
        }
        assert!(Instant::now() < deadline, "events stayed held back");
        // Held back by another test's transaction: the watermark is cluster-wide.
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_live_projector_forgets_the_rows_it_remembers_when_a_replay_swaps_the_tables() {
    let db = TestDb::new().await;
    let stream = "function/ns/f";
    append(
        &db.pool,
        stream,
        0,
        &[FunctionEvent::FunctionCreated { spec: spec(128) }],
    )
    .await;
    assert_eq!(sless_projector::catch_up(&db.pool).await.unwrap(), 1);
    // The row goes wrong; a live projector that reads it remembers it so.
    sqlx::query("update functions set entrypoint = 'wrong.handle'")
        .execute(&db.pool)
        .await
        .unwrap();
    let mut live = Projector::new();
    append(&db.pool, stream, 1, &[uploaded(1)]).await;
    assert_eq!(step_with(&mut live, &db.pool).await, 1);

    let outcome = replay::replay(&db.pool, Mode::Replay, "test", |_| {})
        .await
        .unwrap();
    assert_eq!(outcome.differing(), ["functions"]);
    let row = readmodel::function_row(&db.pool, "ns", "f")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.spec.entrypoint, "handler.handle", "repaired");

    // The same live projector applies the next event to the repaired row,
    // not to what it remembered from the old table.
    append(
        &db.pool,
        stream,
        2,
        &[FunctionEvent::BuildStarted { version: 1 }],
    )
    .await;
    assert_eq!(step_with(&mut live, &db.pool).await, 1);
    let row = readmodel::function_row(&db.pool, "ns", "f")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.stream_version, 3);
    assert_eq!(row.spec.entrypoint, "handler.handle");
    assert_read_models_equal_fold(&db.pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 3)]
async fn a_running_projector_and_writers_go_on_across_a_swap() {
    let db = TestDb::new().await;
    append_mixed(&db.pool, 5, 200, 4_000, 2).await;
    sless_projector::catch_up(&db.pool).await.unwrap();
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let projector = tokio::spawn(sless_projector::run(
        db.pool.clone(),
        Duration::from_millis(50),
        stopped,
    ));
    // Writers on streams of their own go on appending during the replays.
    let writing = Arc::new(AtomicBool::new(true));
    let writer = {
        let pool = db.pool.clone();
        let writing = writing.clone();
        tokio::spawn(async move {
            let mut rng = StdRng::seed_from_u64(6);
            let keys: Vec<String> = (0..20).map(|i| format!("function/live/g{i}")).collect();
            let mut streams: Vec<Stream> = keys.iter().map(|_| Stream::default()).collect();
            let mut appended = 0;
            while writing.load(Ordering::SeqCst) || appended < 200 {
                let i = rng.random_range(0..keys.len());
                let s = &mut streams[i];
                let e = new_event(&keys[i], &next_event(&mut rng, s));
                let mut tx = pool.begin().await.unwrap();
                eventlog::append(&mut tx, &keys[i], s.version, &[e])
                    .await
                    .unwrap();
                tx.commit().await.unwrap();
                s.version += 1;
                appended += 1;
            }
            appended
        })
    };
    for _ in 0..3 {
        let outcome = Replay::begin(&db.pool, Mode::Replay, "test")
            .await
            .unwrap()
            .batch(500)
            .run(|_| {})
            .await
            .unwrap();
        assert!(outcome.differing().is_empty(), "{outcome:?}");
    }
    writing.store(false, Ordering::SeqCst);
    let appended = writer.await.unwrap();
    let total = 4_000 + appended;
    sless_testkit::eventually(
        "the projector to apply every event",
        Duration::from_secs(60),
        || async {
            let at: i64 = sqlx::query_scalar(
                "select count(*) from events e, projector_checkpoints c
             where c.name = 'read_models' and (e.xid, e.position) <= (c.xid, c.position)",
            )
            .fetch_one(&db.pool)
            .await
            .unwrap();
            (at as usize == total).then_some(())
        },
    )
    .await;
    stop.send(true).unwrap();
    projector.await.unwrap().unwrap();
    assert_read_models_equal_fold(&db.pool).await;
    let generation: i64 = sqlx::query_scalar(
        "select generation from projector_checkpoints where name = 'read_models'",
    )
    .fetch_one(&db.pool)
    .await
    .unwrap();
    assert_eq!(generation, 3, "every swap bumps the generation");
    let verified = replay::replay(&db.pool, Mode::Verify, "test", |_| {})
        .await
        .unwrap();
    assert!(verified.differing().is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_of_an_empty_log_swaps_in_empty_tables() {
    let db = TestDb::new().await;
    let outcome = replay::replay(&db.pool, Mode::Replay, "test", |_| {})
        .await
        .unwrap();
    assert_eq!(outcome.applied, 0);
    assert!(outcome.differing().is_empty());
    assert!(outcome.models.iter().all(|m| m.rebuilt_rows == 0));
}
