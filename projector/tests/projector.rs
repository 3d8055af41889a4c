//! The projector's invariants against a real PostgreSQL: no committed event
//! is ever skipped, each stream is applied in version order, and the
//! checkpoint moves in the same transaction as the read-model rows.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use rand::Rng;
use sless_domain::{Function, FunctionEvent, FunctionSpec, Phase, Runtime, SourceVersion};
use sless_projector::Projector;
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::readmodel;
use sless_testkit::TestDb;

fn spec() -> FunctionSpec {
    FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        scaling: Default::default(),
    }
}

fn uploaded(version: u32) -> FunctionEvent {
    FunctionEvent::FunctionUploaded(SourceVersion {
        version,
        sha256: format!("{version:064}"),
        size: 100,
        files: 1,
        zip_key: format!("blobs/zips/{version}.zip"),
        context_sha256: format!("c{version}"),
        context_key: format!("blobs/contexts/c{version}.tar.gz"),
        runtime: None,
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

async fn fold(pool: &PgPool, stream: &str) -> Function {
    let events = eventlog::read_stream(pool, stream).await.unwrap();
    let decoded: Vec<FunctionEvent> = events
        .iter()
        .map(|e| FunctionEvent::from_stored(&e.event_type, &e.data).unwrap())
        .collect();
    Function::fold(&decoded)
}

/// Every function's read-model row equals a fold over its whole stream, and
/// every upload has its version row.
async fn assert_read_models_equal_fold(pool: &PgPool) {
    let streams: Vec<String> = sqlx::query_scalar(
        "select distinct stream from events where stream like 'function/%' order by stream",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    assert!(!streams.is_empty());
    for stream in streams {
        let (_, rest) = stream.split_once('/').unwrap();
        let (ns, name) = rest.split_once('/').unwrap();
        let folded = fold(pool, &stream).await;
        let row = readmodel::function_row_any(pool, ns, name)
            .await
            .unwrap()
            .unwrap_or_else(|| panic!("{stream} has no row"));
        assert!(
            row.matches(&folded),
            "{stream}: read model {row:?}\nfold {folded:?}"
        );
        let versions: i64 = sqlx::query_scalar(
            "select count(*) from function_versions where namespace = $1 and name = $2",
        )
        .bind(ns)
        .bind(name)
        .fetch_one(pool)
        .await
        .unwrap();
        assert_eq!(
            versions as usize,
            folded.versions.len(),
            "{stream}: version rows"
        );
    }
}

/// One projector step that did something: repeats while every event is held
/// back by transactions of other tests (the watermark is cluster-wide).
async fn step_past_other_tests(pool: &PgPool) -> sless_projector::Result<sless_projector::Step> {
    sless_testkit::eventually(
        "a projector step that is not held back",
        std::time::Duration::from_secs(30),
        || async {
            match sless_projector::step(pool, 100).await {
                Ok(s) if s.applied == 0 && s.held_back => None,
                other => Some(other),
            }
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_event_committed_after_a_later_position_is_not_skipped() {
    let db = TestDb::new().await;
    let created = FunctionEvent::FunctionCreated { spec: spec() };

    // A takes the lower position and stays open.
    let mut a = db.pool.begin().await.unwrap();
    let pos_a = eventlog::append(
        &mut a,
        "function/ns/a",
        0,
        &[new_event("function/ns/a", &created)],
    )
    .await
    .unwrap();
    // B takes a higher position and commits first. In another namespace:
    // creates in one namespace take turns on its row of `namespace_counts`.
    let mut b = db.pool.begin().await.unwrap();
    let pos_b = eventlog::append(
        &mut b,
        "function/ns2/b",
        0,
        &[new_event("function/ns2/b", &created)],
    )
    .await
    .unwrap();
    b.commit().await.unwrap();
    assert!(pos_a.position < pos_b.position);

    // The projector runs while A is still open: it must not move past A.
    let step = sless_projector::step(&db.pool, 100).await.unwrap();
    assert_eq!(
        step.applied, 0,
        "nothing may be applied past a transaction still running"
    );
    assert!(step.held_back);

    a.commit().await.unwrap();
    let applied = sless_projector::catch_up(&db.pool).await.unwrap();
    assert_eq!(applied, 2);
    assert!(
        readmodel::function_row(&db.pool, "ns", "a")
            .await
            .unwrap()
            .is_some(),
        "A's event was skipped"
    );
    assert!(
        readmodel::function_row(&db.pool, "ns2", "b")
            .await
            .unwrap()
            .is_some()
    );
    assert_read_models_equal_fold(&db.pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stream_is_applied_in_version_order_when_its_appends_overlap() {
    let db = TestDb::new().await;
    let stream = "function/ns/f";
    let mut a = db.pool.begin().await.unwrap();
    eventlog::append(
        &mut a,
        stream,
        0,
        &[new_event(
            stream,
            &FunctionEvent::FunctionCreated { spec: spec() },
        )],
    )
    .await
    .unwrap();
    // B appends version 2 to the same stream: it waits for A's stream lock.
    let pool = db.pool.clone();
    let b = tokio::spawn(async move {
        let mut b = pool.begin().await.unwrap();
        eventlog::append(&mut b, stream, 1, &[new_event(stream, &uploaded(1))])
            .await
            .unwrap();
        b.commit().await.unwrap();
    });
    // Meanwhile a commit on another stream (of another namespace: creates in
    // one namespace take turns on its row of `namespace_counts`), and a
    // projector step.
    let mut c = db.pool.begin().await.unwrap();
    eventlog::append(
        &mut c,
        "function/ns2/g",
        0,
        &[new_event(
            "function/ns2/g",
            &FunctionEvent::FunctionCreated { spec: spec() },
        )],
    )
    .await
    .unwrap();
    c.commit().await.unwrap();
    sless_projector::step(&db.pool, 100).await.unwrap();
    assert!(
        !b.is_finished(),
        "the second append must wait for the first's lock"
    );
    a.commit().await.unwrap();
    b.await.unwrap();
    sless_projector::catch_up(&db.pool).await.unwrap();
    let row = readmodel::function_row(&db.pool, "ns", "f")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.stream_version, 2);
    assert_eq!(row.current_version, Some(1));
    assert_read_models_equal_fold(&db.pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_checkpoint_moves_only_with_the_read_models() {
    let db = TestDb::new().await;
    let stream = "function/ns/f";
    let mut tx = db.pool.begin().await.unwrap();
    let created = new_event(stream, &FunctionEvent::FunctionCreated { spec: spec() });
    let poisoned = NewEvent {
        event_type: "NoSuchEvent".into(),
        ..created.clone()
    };
    eventlog::append(&mut tx, stream, 0, &[created, poisoned])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let err = step_past_other_tests(&db.pool).await.unwrap_err();
    assert!(
        matches!(err, sless_projector::Error::BadEvent { .. }),
        "{err:?}"
    );
    // The good event before it was not applied either: same transaction.
    assert!(
        readmodel::function_row(&db.pool, "ns", "f")
            .await
            .unwrap()
            .is_none()
    );
    let cp: Option<i64> =
        sqlx::query_scalar("select position from projector_checkpoints where name = $1")
            .bind(sless_projector::NAME)
            .fetch_optional(&db.pool)
            .await
            .unwrap();
    assert!(
        cp.is_none_or(|p| p == 0),
        "checkpoint moved without its read models: {cp:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn applying_the_same_events_twice_changes_nothing() {
    let db = TestDb::new().await;
    let stream = "function/ns/f";
    let mut tx = db.pool.begin().await.unwrap();
    let events = [
        FunctionEvent::FunctionCreated { spec: spec() },
        uploaded(1),
        uploaded(2),
    ];
    let new: Vec<_> = events.iter().map(|e| new_event(stream, e)).collect();
    eventlog::append(&mut tx, stream, 0, &new).await.unwrap();
    tx.commit().await.unwrap();
    assert_eq!(sless_projector::catch_up(&db.pool).await.unwrap(), 3);
    // Rewind the checkpoint, as a crash between apply and commit would look
    // to a second copy: the rows must come out the same.
    sqlx::query("update projector_checkpoints set xid = 0, position = 0")
        .execute(&db.pool)
        .await
        .unwrap();
    assert_eq!(sless_projector::catch_up(&db.pool).await.unwrap(), 3);
    assert_read_models_equal_fold(&db.pool).await;
}

/// One step of `projector` that did something (see `step_past_other_tests`).
async fn step_with(projector: &mut Projector, pool: &PgPool, limit: i64) -> sless_projector::Step {
    let deadline = tokio::time::Instant::now() + std::time::Duration::from_secs(30);
    loop {
        let s = projector.step(pool, limit).await.expect("projector step");
        if s.applied > 0 || !s.held_back {
            return s;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "held back for 30 s by another transaction"
        );
        tokio::time::sleep(std::time::Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_projector_forgets_the_rows_it_remembers_when_another_copy_moved_the_checkpoint() {
    let db = TestDb::new().await;
    let stream = "function/ns/f";
    let append = async |expected: u64, events: &[FunctionEvent]| {
        let mut tx = db.pool.begin().await.unwrap();
        let new: Vec<_> = events.iter().map(|e| new_event(stream, e)).collect();
        eventlog::append(&mut tx, stream, expected, &new)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    };
    append(
        0,
        &[FunctionEvent::FunctionCreated { spec: spec() }, uploaded(1)],
    )
    .await;
    let mut remembering = Projector::new();
    assert_eq!(step_with(&mut remembering, &db.pool, 100).await.applied, 2);

    // Another copy applies version 3 behind the first one's back.
    append(2, &[uploaded(2), uploaded(3)]).await;
    let mut other = Projector::default();
    assert_eq!(
        step_with(&mut other, &db.pool, 1).await.applied,
        1,
        "the other copy applies one event"
    );

    // The first copy remembers the row at version 2; the table holds 3.
    let next = step_with(&mut remembering, &db.pool, 100).await;
    assert_eq!(next.applied, 1);
    let row = readmodel::function_row(&db.pool, "ns", "f")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.stream_version, 4);
    assert_eq!(row.current_version, Some(3));
    assert_read_models_equal_fold(&db.pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn run_wakes_up_for_an_append_while_it_sleeps() {
    let db = TestDb::new().await;
    let (stop, stopped) = tokio::sync::watch::channel(false);
    // The polling fallback is far off: only the append's NOTIFY can wake it.
    let projector = tokio::spawn(sless_projector::run(
        db.pool.clone(),
        std::time::Duration::from_secs(600),
        stopped,
    ));
    let (k1, k2) = eventlog::DOORBELL;
    sless_testkit::eventually(
        "the projector to fall asleep at the doorbell",
        std::time::Duration::from_secs(30),
        || async {
            let asleep: bool = sqlx::query_scalar(
                "select exists (select 1 from pg_locks
                     where locktype = 'advisory' and mode = 'ExclusiveLock' and granted
                       and database = (select oid from pg_database where datname = current_database())
                       and classid::bigint = $1 and objid::bigint = $2 and objsubid = 2)",
            )
            .bind(i64::from(k1))
            .bind(i64::from(k2))
            .fetch_one(&db.pool)
            .await
            .unwrap();
            asleep.then_some(())
        },
    )
    .await;

    let stream = "function/ns/woken";
    let mut tx = db.pool.begin().await.unwrap();
    let created = new_event(stream, &FunctionEvent::FunctionCreated { spec: spec() });
    eventlog::append(&mut tx, stream, 0, &[created])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    sless_testkit::eventually(
        "the sleeping projector to apply the append",
        std::time::Duration::from_secs(30),
        || async {
            readmodel::function_row(&db.pool, "ns", "woken")
                .await
                .unwrap()
        },
    )
    .await;
    stop.send(true).unwrap();
    projector.await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_deleted_function_keeps_a_marked_row_and_a_new_life_goes_on_from_it() {
    let db = TestDb::new().await;
    let stream = "function/ns/f";
    let append = async |expected: u64, events: &[FunctionEvent]| {
        let mut tx = db.pool.begin().await.unwrap();
        let new: Vec<_> = events.iter().map(|e| new_event(stream, e)).collect();
        eventlog::append(&mut tx, stream, expected, &new)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    };
    // A projector that remembers its rows across batches, and the plain step.
    let mut remembering = Projector::new();
    append(
        0,
        &[
            FunctionEvent::FunctionCreated { spec: spec() },
            uploaded(1),
            FunctionEvent::FunctionDeployed {
                version: 1,
                endpoint: "http://f".into(),
                node: None,
                instances: vec![],
            },
        ],
    )
    .await;
    step_with(&mut remembering, &db.pool, 100).await;
    append(3, &[FunctionEvent::FunctionDeleted {}]).await;
    step_with(&mut remembering, &db.pool, 100).await;

    assert_eq!(
        readmodel::function_row(&db.pool, "ns", "f").await.unwrap(),
        None,
        "queries do not see a deleted function"
    );
    assert_eq!(
        readmodel::function_rows_after(&db.pool, "ns", None, 10)
            .await
            .unwrap(),
        vec![]
    );
    let row = readmodel::function_row_any(&db.pool, "ns", "f")
        .await
        .unwrap()
        .expect("the row stays");
    assert_eq!(row.phase, Phase::Deleted);
    assert_eq!(
        (
            row.current_version,
            row.deployed_version,
            row.endpoint.as_deref()
        ),
        (None, None, None)
    );
    assert_eq!(row.stream_version, 4);
    assert_read_models_equal_fold(&db.pool).await;

    let node = FunctionSpec {
        runtime: Runtime::Nodejs20,
        entrypoint: "index.handler".into(),
        ..spec()
    };
    append(
        4,
        &[
            FunctionEvent::FunctionCreated { spec: node.clone() },
            uploaded(2),
        ],
    )
    .await;
    // The plain step this time: it reads the deleted row from the table.
    step_past_other_tests(&db.pool).await.unwrap();
    let row = readmodel::function_row(&db.pool, "ns", "f")
        .await
        .unwrap()
        .expect("alive again");
    assert_eq!(row.spec, node);
    assert_eq!((row.phase, row.current_version), (Phase::Pending, Some(2)));
    assert_eq!(row.stream_version, 6);
    append(
        6,
        &[FunctionEvent::FunctionSpecChanged {
            spec: FunctionSpec {
                memory_mb: 1024,
                ..node
            },
        }],
    )
    .await;
    sless_projector::catch_up(&db.pool).await.unwrap();
    let row = readmodel::function_row(&db.pool, "ns", "f")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.spec.memory_mb, 1024);
    assert_read_models_equal_fold(&db.pool).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolled_back_deploy_shows_the_failure_and_the_version_that_still_serves() {
    let db = TestDb::new().await;
    let stream = "function/ns/f";
    let append = async |expected: u64, events: &[FunctionEvent]| {
        let mut tx = db.pool.begin().await.unwrap();
        let new: Vec<_> = events.iter().map(|e| new_event(stream, e)).collect();
        eventlog::append(&mut tx, stream, expected, &new)
            .await
            .unwrap();
        tx.commit().await.unwrap();
    };
    append(
        0,
        &[
            FunctionEvent::FunctionCreated { spec: spec() },
            uploaded(1),
            FunctionEvent::FunctionDeployed {
                version: 1,
                endpoint: "http://f".into(),
                node: None,
                instances: vec![],
            },
            uploaded(2),
        ],
    )
    .await;
    step_past_other_tests(&db.pool).await.unwrap();
    // The worker's append: the failure, and what still serves. The plain
    // step reads the row back from the table before it applies them.
    append(
        4,
        &[
            FunctionEvent::DeployFailed {
                version: 2,
                error: "version 2 does not start: ImagePullBackOff".into(),
                log_tail: "pulling".into(),
            },
            FunctionEvent::DeployRolledBack {
                failed_version: 2,
                restored_version: 1,
            },
        ],
    )
    .await;
    step_past_other_tests(&db.pool).await.unwrap();
    let row = readmodel::function_row(&db.pool, "ns", "f")
        .await
        .unwrap()
        .unwrap();
    assert_eq!(row.phase, Phase::Failed);
    assert_eq!(
        (
            row.current_version,
            row.deployed_version,
            row.endpoint.as_deref()
        ),
        (Some(2), Some(1), Some("http://f"))
    );
    assert_eq!(
        row.last_error.as_deref(),
        Some(
            "version 2 failed to deploy and was rolled back; version 1 still serves\n\
             version 2 does not start: ImagePullBackOff\npulling"
        )
    );
    assert_read_models_equal_fold(&db.pool).await;
}

/// 16 writers on 6 streams, ~10% of transactions rolled back, a projector
/// running throughout: afterwards every read model equals a fold over the log.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_models_equal_a_fold_of_the_log_after_concurrent_writers_with_rollbacks() {
    concurrent_writers_with_rollbacks(false).await;
}

/// The same with the projector `run` and `catch_up` use: it remembers the rows
/// it wrote and reads the next batch while it applies a full one (small
/// batches here, so that it does all the time).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn read_models_equal_a_fold_of_the_log_after_concurrent_writers_with_a_projector_that_reads_ahead()
 {
    concurrent_writers_with_rollbacks(true).await;
}

async fn concurrent_writers_with_rollbacks(remembering: bool) {
    let db = TestDb::new().await;
    const WRITERS: usize = 16;
    const STREAMS: usize = 6;
    const COMMITS_PER_WRITER: usize = 40;
    // Open the pool's every connection one at a time, up front. Under churn
    // the pool opens new connections rather than wait for returning ones,
    // and on a busy machine a burst of new connections (each authenticating)
    // can outlast its acquire timeout.
    let mut warm = Vec::new();
    while warm.len() < db.pool.options().get_max_connections() as usize {
        warm.push(db.pool.acquire().await.unwrap());
    }
    drop(warm);
    let done = Arc::new(AtomicBool::new(false));
    let rolled_back = Arc::new(AtomicUsize::new(0));
    let applied_live = Arc::new(AtomicUsize::new(0));

    let projector = {
        let (pool, done, applied) = (db.pool.clone(), done.clone(), applied_live.clone());
        tokio::spawn(async move {
            let mut projector = Projector::new();
            while !done.load(Ordering::Relaxed) {
                let s = if remembering {
                    projector.step(&pool, 7).await
                } else {
                    sless_projector::step(&pool, 50).await
                }
                .expect("projector step");
                applied.fetch_add(s.applied, Ordering::Relaxed);
                if s.applied == 0 {
                    tokio::task::yield_now().await;
                }
            }
        })
    };

    let mut writers = Vec::new();
    for w in 0..WRITERS {
        let (pool, rolled_back) = (db.pool.clone(), rolled_back.clone());
        writers.push(tokio::spawn(async move {
            let mut commits = 0;
            while commits < COMMITS_PER_WRITER {
                let (stream, rollback, batch) = {
                    let mut rng = rand::rng();
                    let s = rng.random_range(0..STREAMS);
                    (
                        format!("function/stress/f{s}"),
                        rng.random_bool(0.1),
                        rng.random_range(1..=3usize),
                    )
                };
                let state = fold(&pool, &stream).await;
                let mut events = Vec::new();
                let mut next = state.clone();
                for i in 0..batch {
                    let e = if !next.exists() {
                        FunctionEvent::FunctionCreated { spec: spec() }
                    } else {
                        match (w + i + commits) % 11 {
                            0 => FunctionEvent::FunctionDeleted {},
                            1 | 2 => FunctionEvent::FunctionSpecChanged {
                                spec: FunctionSpec {
                                    memory_mb: 64 + commits as u32,
                                    ..spec()
                                },
                            },
                            3..=5 => FunctionEvent::FunctionDeployed {
                                version: next.current_version.unwrap_or(0),
                                endpoint: format!("http://w{w}"),
                                node: None,
                                instances: vec![],
                            },
                            _ => uploaded(next.next_version()),
                        }
                    };
                    next = next.evolve(&e);
                    events.push(new_event(&stream, &e));
                }
                let mut tx = pool.begin().await.unwrap();
                match eventlog::append(&mut tx, &stream, state.stream_version, &events).await {
                    Ok(_) => {}
                    Err(sless_store::Error::Conflict { .. }) => continue,
                    Err(e) => panic!("append: {e}"),
                }
                if rollback {
                    tx.rollback().await.unwrap();
                    rolled_back.fetch_add(1, Ordering::Relaxed);
                } else {
                    tx.commit().await.unwrap();
                    commits += 1;
                }
            }
        }));
    }
    for w in writers {
        w.await.unwrap();
    }
    done.store(true, Ordering::Relaxed);
    projector.await.unwrap();
    let rest = sless_projector::catch_up(&db.pool).await.unwrap();

    let total: i64 = sqlx::query_scalar("select count(*) from events")
        .fetch_one(&db.pool)
        .await
        .unwrap();
    let applied = applied_live.load(Ordering::Relaxed) + rest;
    assert_eq!(
        applied as i64, total,
        "the projector applied {applied} of {total} committed events"
    );
    assert!(
        rolled_back.load(Ordering::Relaxed) > 0,
        "the test must roll some transactions back"
    );
    assert!(
        applied_live.load(Ordering::Relaxed) > 0,
        "the projector must run while writers write"
    );
    assert_read_models_equal_fold(&db.pool).await;
}
