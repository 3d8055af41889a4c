//! The autoscaler against a real PostgreSQL: one worker at a time decides;
//! what the API processes reported, summed, becomes a `FunctionScaled`
//! with the measurement that caused it, once; `min_instances` starts a
//! function at zero again. (The driver's side, instances converging on
//! the decision, is the reconciler's tests'.)

use std::time::Duration;

use serde_json::json;
use sless_domain::events::SourceVersion;
use sless_domain::{
    FunctionEvent, FunctionKey, FunctionName, FunctionSpec, Namespace, Runtime, ScaleWindow,
    Scaling,
};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_store::scaling::{LoadReport, report_load};
use sless_testkit::{TestDb, eventually};
use sless_workers::autoscale::{AutoscaleConfig, Autoscaler, lead};

const NS: &str = "sless-00000000000000a5";

/// A function that serves one instance (or, when `idle`, is scaled to
/// zero) with `scaling`: its events in the log, and its row as the
/// projector would have written it.
async fn function(pool: &PgPool, name: &str, scaling: Scaling, idle: bool) -> FunctionKey {
    let key = FunctionKey::new(
        Namespace::parse(NS).unwrap(),
        FunctionName::parse(name).unwrap(),
    );
    let spec = FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        scaling,
    };
    let mut events = vec![
        FunctionEvent::FunctionCreated { spec },
        FunctionEvent::FunctionUploaded(SourceVersion {
            version: 1,
            sha256: "ab".into(),
            size: 1,
            files: 1,
            zip_key: "z".into(),
            context_sha256: "cd".into(),
            context_key: "c".into(),
            runtime: Some(Runtime::Python311),
        }),
        FunctionEvent::BuildSucceeded {
            version: 1,
            artifact: "art".into(),
        },
        FunctionEvent::FunctionDeployed {
            version: 1,
            endpoint: "http://127.0.0.1:9".into(),
            node: None,
            instances: vec![],
        },
    ];
    if idle {
        events.push(FunctionEvent::FunctionScaledToZero {
            version: 1,
            reason: "idle".into(),
        });
    }
    let new: Vec<NewEvent> = events
        .iter()
        .map(|e| NewEvent::function(&key, e, Metadata::default()))
        .collect();
    let mut tx = pool.begin().await.unwrap();
    eventlog::append(&mut tx, &key.stream(), 0, &new)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    sqlx::query(
        "insert into functions (namespace, name, runtime, entrypoint, memory_mb, timeout_sec,
             env_vars, current_version, deployed_version, endpoint, phase, stream_version,
             created_at, updated_at, idle, scaling, instances)
         values ($1, $2, 'python3.11', 'handler.handle', 128, 30, '{}', 1, 1, $3, 'Ready', $4,
             now(), now(), $5, $6, $7)",
    )
    .bind(NS)
    .bind(name)
    .bind((!idle).then_some("http://127.0.0.1:9"))
    .bind(events.len() as i32)
    .bind(idle)
    .bind(serde_json::to_value(scaling).unwrap())
    .bind(i32::from(!idle))
    .execute(pool)
    .await
    .unwrap();
    key
}

async fn events_of(pool: &PgPool, key: &FunctionKey, ty: &str) -> Vec<eventlog::RecordedEvent> {
    eventlog::read_stream(pool, &key.stream())
        .await
        .unwrap()
        .into_iter()
        .filter(|e| e.event_type == ty)
        .collect()
}

fn report(name: &str, in_flight: f64) -> LoadReport {
    LoadReport {
        namespace: NS.into(),
        name: name.into(),
        in_flight,
        called: true,
    }
}

#[tokio::test]
async fn what_every_api_process_measured_becomes_one_scale_with_its_cause() {
    let db = TestDb::new().await;
    let scaling = Scaling {
        min_instances: None,
        max_instances: Some(8),
        concurrency: Some(1),
    };
    let key = function(&db.pool, "busy", scaling, false).await;
    let quiet = function(&db.pool, "quiet", scaling, false).await;
    // Two API processes: 6 and 2 calls in flight.
    report_load(
        &db.pool,
        "api-1",
        &[report("busy", 6.0), report("quiet", 0.0)],
    )
    .await
    .unwrap();
    report_load(&db.pool, "api-2", &[report("busy", 2.0)])
        .await
        .unwrap();
    let mut autoscaler = Autoscaler::new(db.pool.clone(), AutoscaleConfig::default());
    let decided = autoscaler.tick().await.unwrap();
    // 8 in flight at 0.7 per instance asks for 12: at most 8.
    assert_eq!(decided.scaled, vec![(key.clone(), 1, 8)]);
    let scaled = events_of(&db.pool, &key, "FunctionScaled").await;
    assert_eq!(scaled.len(), 1);
    let data = &scaled[0].data;
    assert_eq!(
        (data["from"].clone(), data["to"].clone()),
        (json!(1), json!(8))
    );
    assert_eq!(data["observed"], json!(8.0));
    assert_eq!(data["window"], json!(ScaleWindow::Panic.as_str()));
    assert_eq!(scaled[0].metadata["actor"], "system:autoscaler");
    assert!(
        events_of(&db.pool, &quiet, "FunctionScaled")
            .await
            .is_empty()
    );
    // The reconcile that makes the driver converge, in the same commit.
    let pending: i64 =
        sqlx::query_scalar("select count(*) from work_items where key = $1 and state = 'pending'")
            .bind(key.queue_key())
            .fetch_one(&db.pool)
            .await
            .unwrap();
    assert_eq!(pending, 1);

    // The same load again, the read model not caught up yet: decided on
    // the log, which has 8 already: no second event.
    let again = autoscaler.tick().await.unwrap();
    assert_eq!(again.scaled, vec![]);
    assert_eq!(events_of(&db.pool, &key, "FunctionScaled").await.len(), 1);
}

#[tokio::test]
async fn one_worker_decides_and_another_takes_over_when_its_session_ends() {
    let db = TestDb::new().await;
    let first = lead(&db.pool)
        .await
        .unwrap()
        .expect("the first worker decides");
    assert!(
        lead(&db.pool).await.unwrap().is_none(),
        "two workers decide"
    );
    drop(first);
    eventually(
        "another worker to decide",
        Duration::from_secs(10),
        || async { lead(&db.pool).await.unwrap() },
    )
    .await;
}

#[tokio::test]
async fn min_instances_starts_a_function_at_zero_again() {
    let db = TestDb::new().await;
    let warm = Scaling {
        min_instances: Some(2),
        ..Scaling::default()
    };
    let kept = function(&db.pool, "kept", warm, true).await;
    let let_go = function(&db.pool, "let-go", Scaling::default(), true).await;
    let mut autoscaler = Autoscaler::new(db.pool.clone(), AutoscaleConfig::default());
    let decided = autoscaler.tick().await.unwrap();
    assert_eq!(decided.started, vec![kept.clone()]);
    let up = events_of(&db.pool, &kept, "FunctionScaledUp").await;
    assert_eq!(up.len(), 1);
    assert_eq!(up[0].data["reason"], "min_instances 2 keeps it running");
    assert!(
        events_of(&db.pool, &let_go, "FunctionScaledUp")
            .await
            .is_empty()
    );
}

#[tokio::test]
async fn the_reports_of_api_processes_long_gone_are_deleted() {
    let db = TestDb::new().await;
    report_load(&db.pool, "gone", &[report("f", 1.0)])
        .await
        .unwrap();
    report_load(&db.pool, "alive", &[report("f", 2.0)])
        .await
        .unwrap();
    sqlx::query("update function_load set reported_at = now() - interval '11 minutes' where replica = 'gone'")
        .execute(&db.pool)
        .await
        .unwrap();
    let deleted = sless_store::scaling::forget_stale_load(&db.pool, 600.0)
        .await
        .unwrap();
    assert_eq!(deleted, 1);
    let left: Vec<String> = sqlx::query_scalar("select replica from function_load")
        .fetch_all(&db.pool)
        .await
        .unwrap();
    assert_eq!(left, vec!["alive".to_owned()]);
}
