//! What the functions read model keeps of how many instances serve: the
//! count and each instance's endpoint, and a `updated_at` that a change of
//! the count alone leaves as it was (the idle sweep counts a function's
//! idle window from it and from its last call's end: a scale-in must not
//! start the window again).

use chrono::{DateTime, Utc};
use sless_domain::{FunctionEvent, FunctionSpec, InFlight, Runtime, ScaleWindow, SourceVersion};
use sless_store::PgPool;
use sless_store::eventlog::{self, Metadata, NewEvent};
use sless_testkit::TestDb;

const STREAM: &str = "function/ns/f";

async fn append(pool: &PgPool, events: &[FunctionEvent]) {
    let at: i64 = sqlx::query_scalar("select count(*) from events where stream = $1")
        .bind(STREAM)
        .fetch_one(pool)
        .await
        .unwrap();
    let new: Vec<NewEvent> = events
        .iter()
        .map(|e| NewEvent {
            event_type: e.type_name().into(),
            namespace: "ns".into(),
            data: e.data(),
            metadata: Metadata::default(),
        })
        .collect();
    let mut tx = pool.begin().await.unwrap();
    eventlog::append(&mut tx, STREAM, at as u64, &new)
        .await
        .unwrap();
    tx.commit().await.unwrap();
    sless_projector::catch_up(pool).await.unwrap();
}

async fn row(pool: &PgPool) -> (i32, serde_json::Value, DateTime<Utc>) {
    sqlx::query_as("select instances, instance_endpoints, updated_at from functions")
        .fetch_one(pool)
        .await
        .unwrap()
}

fn deployed(version: u32, instances: &[&str]) -> FunctionEvent {
    FunctionEvent::FunctionDeployed {
        version,
        endpoint: instances[0].into(),
        node: None,
        instances: instances.iter().map(|e| e.to_string()).collect(),
    }
}

fn uploaded(version: u32) -> FunctionEvent {
    FunctionEvent::FunctionUploaded(SourceVersion {
        version,
        sha256: format!("{version:064}"),
        size: 100,
        files: 1,
        zip_key: format!("z{version}"),
        context_sha256: format!("c{version}"),
        context_key: format!("k{version}"),
        runtime: None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_of_the_count_alone_keeps_the_rows_last_change() {
    let db = TestDb::new().await;
    let spec = FunctionSpec {
        runtime: Runtime::Python311,
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        scaling: Default::default(),
    };
    append(
        &db.pool,
        &[
            FunctionEvent::FunctionCreated { spec },
            uploaded(1),
            FunctionEvent::BuildSucceeded {
                version: 1,
                artifact: "a1".into(),
            },
            deployed(1, &["http://a"]),
        ],
    )
    .await;
    let (n, endpoints, deployed_at) = row(&db.pool).await;
    assert_eq!((n, endpoints), (1, serde_json::json!(["http://a"])));

    append(
        &db.pool,
        &[FunctionEvent::FunctionScaled {
            from: 1,
            to: 3,
            observed: InFlight(2.5),
            window: ScaleWindow::Panic,
            reason: "a burst".into(),
        }],
    )
    .await;
    append(
        &db.pool,
        &[deployed(1, &["http://a", "http://b", "http://c"])],
    )
    .await;
    let (n, endpoints, at) = row(&db.pool).await;
    assert_eq!(n, 3);
    assert_eq!(
        endpoints,
        serde_json::json!(["http://a", "http://b", "http://c"])
    );
    assert_eq!(at, deployed_at, "scaling out changed the row's last change");

    // A new version is a change of the function.
    append(
        &db.pool,
        &[
            uploaded(2),
            FunctionEvent::BuildSucceeded {
                version: 2,
                artifact: "a2".into(),
            },
            deployed(2, &["http://d", "http://e", "http://f"]),
        ],
    )
    .await;
    let (n, _, at) = row(&db.pool).await;
    assert_eq!(n, 3);
    assert!(at > deployed_at, "a new version left the row's last change");
}
