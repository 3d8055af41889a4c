use std::collections::BTreeMap;

use sless_domain::trigger::{self, Trigger, TriggerEvent, TriggerFields, TriggerKind, TriggerSpec};
use sless_domain::{Namespace, TriggerName};
use sless_testkit::TestDb;
use sqlx::{PgPool, Row};

use super::*;
use crate::eventlog::{self, Metadata, NewEvent};

const NS1: &str = "sless-0000000000000001";
const NS2: &str = "sless-0000000000000002";

fn ns(s: &str) -> Namespace {
    Namespace::parse(s).unwrap()
}

fn http(name: &str, function: &str, enabled: bool) -> TriggerEvent {
    created(name, function, "http", None, enabled)
}

fn cron(name: &str, function: &str, schedule: &str, timezone: &str) -> TriggerEvent {
    created(name, function, "cron", Some((schedule, timezone)), true)
}

fn created(
    name: &str,
    function: &str,
    kind: &str,
    schedule: Option<(&str, &str)>,
    enabled: bool,
) -> TriggerEvent {
    TriggerEvent::TriggerCreated {
        spec: TriggerSpec::parse(TriggerFields {
            name,
            function,
            kind,
            schedule: schedule.map(|s| s.0),
            timezone: schedule.map(|s| s.1),
            enabled: Some(enabled),
        })
        .unwrap(),
    }
}

fn toggled(enabled: bool) -> TriggerEvent {
    TriggerEvent::TriggerToggled { enabled }
}

fn deleted() -> TriggerEvent {
    TriggerEvent::TriggerDeleted {}
}

/// Appends, in order, each `(namespace, trigger, events)` to the trigger's
/// stream in a transaction of its own, expecting the version the stream is
/// at; calls `after_each` after every commit.
async fn append_all<F: AsyncFnMut()>(
    pool: &PgPool,
    script: &[(&str, &str, Vec<TriggerEvent>)],
    mut after_each: F,
) {
    for (namespace, name, events) in script {
        let namespace = ns(namespace);
        let stream = trigger::stream(&namespace, &TriggerName::parse(name).unwrap());
        let (_, version) = eventlog::load::<Trigger>(pool, &stream).await.unwrap();
        let new: Vec<NewEvent> = events
            .iter()
            .map(|e| NewEvent::trigger(&namespace, e, Metadata::default()))
            .collect();
        let mut tx = pool.begin().await.unwrap();
        eventlog::append(&mut tx, &stream, version, &new)
            .await
            .unwrap();
        tx.commit().await.unwrap();
        after_each().await;
    }
}

/// Triggers of two namespaces and two functions: created, toggled,
/// deleted, created again (once for another function), several events in
/// one append, and a function's event that must leave the index alone.
fn script() -> Vec<(&'static str, &'static str, Vec<TriggerEvent>)> {
    vec![
        (NS1, "web-a", vec![http("web-a", "f", true)]),
        (NS1, "web-b", vec![http("web-b", "f", false)]),
        (
            NS1,
            "tick",
            vec![cron("tick", "f", "*/5 * * * *", "Europe/Berlin")],
        ),
        (NS1, "web-a", vec![toggled(false)]),
        (NS1, "tick", vec![deleted()]),
        (NS1, "web-c", vec![http("web-c", "g", true), toggled(false)]),
        (NS1, "tick", vec![cron("tick", "g", "0 * * * *", "UTC")]),
        (NS2, "web-a", vec![http("web-a", "f", false)]),
        (NS1, "web-a", vec![toggled(true)]),
        (NS1, "web-b", vec![deleted()]),
        (NS1, "web-b", vec![http("web-b", "f", true)]),
        (NS1, "web-d", vec![http("web-d", "f", true)]),
        (
            NS1,
            "web-d",
            vec![deleted(), http("web-d", "g", true), toggled(false)],
        ),
        (NS2, "gone", vec![http("gone", "f", true), deleted()]),
    ]
}

/// The index as its table holds it: stream to (namespace, spec). Checks
/// that the columns read out of the spec say what the spec says.
async fn index_rows(pool: &PgPool) -> BTreeMap<String, (String, TriggerSpec)> {
    let rows = sqlx::query(
        "select stream, namespace, spec, name, function, kind, enabled from trigger_index",
    )
    .fetch_all(pool)
    .await
    .unwrap();
    let mut found = BTreeMap::new();
    for r in rows {
        let spec: TriggerSpec = serde_json::from_value(r.get("spec")).unwrap();
        let columns: (String, String, String, bool) = (
            r.get("name"),
            r.get("function"),
            r.get("kind"),
            r.get("enabled"),
        );
        let from_spec = (
            spec.name.to_string(),
            spec.function.to_string(),
            spec.kind.as_str().to_owned(),
            spec.enabled,
        );
        assert_eq!(
            columns,
            from_spec,
            "columns of {}",
            r.get::<String, _>("stream")
        );
        found.insert(r.get("stream"), (r.get("namespace"), spec));
    }
    found
}

/// The triggers that exist, folded from the log by the domain's own
/// `Trigger::evolve`: stream to (namespace, spec).
async fn fold_of_log(pool: &PgPool) -> BTreeMap<String, (String, TriggerSpec)> {
    let streams: Vec<(String, String)> =
        sqlx::query_as("select distinct stream, namespace from events where type = any($1)")
            .bind(TriggerEvent::TYPES.to_vec())
            .fetch_all(pool)
            .await
            .unwrap();
    let mut found = BTreeMap::new();
    for (stream, namespace) in streams {
        let (t, _) = eventlog::load::<Trigger>(pool, &stream).await.unwrap();
        if let Some(spec) = t.spec {
            found.insert(stream, (namespace, spec));
        }
    }
    found
}

/// `function_triggers` and `http_triggers` of every namespace and function
/// of the script agree with the fold.
async fn assert_queries_agree_with(pool: &PgPool, fold: &BTreeMap<String, (String, TriggerSpec)>) {
    for namespace in [NS1, NS2] {
        for function in ["f", "g"] {
            let want: Vec<TriggerSpec> = fold
                .values()
                .filter(|(n, s)| n == namespace && s.function.as_str() == function)
                .map(|(_, s)| s.clone())
                .collect();
            let got = function_triggers(pool, &ns(namespace), function)
                .await
                .unwrap();
            assert_eq!(got, want, "triggers of {namespace}/{function}");
            let http: Vec<&TriggerSpec> = want
                .iter()
                .filter(|s| s.kind == TriggerKind::Http)
                .collect();
            let want = HttpTriggers {
                names: http.iter().map(|s| s.name.to_string()).collect(),
                enabled: http.iter().filter(|s| s.enabled).count(),
            };
            let got = http_triggers(pool, &ns(namespace), function).await.unwrap();
            assert_eq!(got, want, "http triggers of {namespace}/{function}");
        }
    }
}

#[tokio::test]
async fn the_index_is_the_fold_of_the_log_after_every_append() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    append_all(pool, &script(), async || {
        let fold = fold_of_log(pool).await;
        assert_eq!(index_rows(pool).await, fold);
        assert_queries_agree_with(pool, &fold).await;
    })
    .await;
    // Another aggregate's events are not triggers, whatever their data.
    let f = NewEvent::of(
        &ns(NS1),
        "FunctionCreated",
        TriggerEvent::data(&http("web-e", "f", true)),
        Metadata::default(),
    );
    let mut tx = pool.begin().await.unwrap();
    eventlog::append(&mut tx, &format!("function/{NS1}/f"), 0, &[f])
        .await
        .unwrap();
    tx.commit().await.unwrap();
    assert_eq!(index_rows(pool).await, fold_of_log(pool).await);

    // Where the script leaves the functions of the first namespace.
    let names = |specs: Vec<TriggerSpec>| -> Vec<String> {
        specs.into_iter().map(|s| s.name.to_string()).collect()
    };
    let f = function_triggers(pool, &ns(NS1), "f").await.unwrap();
    assert_eq!(names(f), ["web-a", "web-b"]);
    let g = function_triggers(pool, &ns(NS1), "g").await.unwrap();
    assert_eq!(
        g.iter()
            .find(|s| s.name.as_str() == "tick")
            .unwrap()
            .schedule,
        Some(trigger::Schedule {
            cron: "0 * * * *".into(),
            timezone: "UTC".into(),
        })
    );
    assert_eq!(names(g), ["tick", "web-c", "web-d"]);
    let g = http_triggers(pool, &ns(NS1), "g").await.unwrap();
    assert_eq!((g.enabled, g.served()), (0, false));
    let f = http_triggers(pool, &ns(NS2), "f").await.unwrap();
    assert!(!f.served());
    assert_eq!(
        f,
        HttpTriggers {
            names: vec!["web-a".into()],
            enabled: 0
        }
    );
    assert!(http_triggers(pool, &ns(NS2), "g").await.unwrap().served());
}

#[tokio::test]
async fn a_rolled_back_append_leaves_the_index_as_it_was() {
    let db = TestDb::new().await;
    let pool = &db.pool;
    let script = [(NS1, "web", vec![http("web", "f", true)])];
    append_all(pool, &script, async || {}).await;
    let before = index_rows(pool).await;
    let stream = trigger::stream(&ns(NS1), &TriggerName::parse("web").unwrap());
    let other = trigger::stream(&ns(NS1), &TriggerName::parse("other").unwrap());
    let attempts: [(&str, u64, TriggerEvent); 3] = [
        (&stream, 1, toggled(false)),
        (&stream, 1, deleted()),
        (&other, 0, http("other", "f", true)),
    ];
    for (stream, version, event) in attempts {
        let mut tx = pool.begin().await.unwrap();
        let new = NewEvent::trigger(&ns(NS1), &event, Metadata::default());
        eventlog::append(&mut tx, stream, version, &[new])
            .await
            .unwrap();
        // The append's own transaction sees it at once...
        let inside = function_triggers(&mut *tx, &ns(NS1), "f").await.unwrap();
        let shown: Vec<(String, bool)> = inside
            .into_iter()
            .map(|s| (s.name.to_string(), s.enabled))
            .collect();
        let expected: &[(&str, bool)] = match event {
            TriggerEvent::TriggerToggled { .. } => &[("web", false)],
            TriggerEvent::TriggerDeleted {} => &[],
            TriggerEvent::TriggerCreated { .. } => &[("other", true), ("web", true)],
        };
        let expected: Vec<(String, bool)> = expected
            .iter()
            .map(|(n, e)| ((*n).to_owned(), *e))
            .collect();
        assert_eq!(shown, expected, "inside the append of {event:?}");
        tx.rollback().await.unwrap();
        // ...and nothing of it is left once it rolled back.
        assert_eq!(
            index_rows(pool).await,
            before,
            "after {event:?} rolled back"
        );
    }
}

/// The last migration before the index's.
fn version_before_the_index() -> i64 {
    crate::MIGRATOR
        .iter()
        .map(|m| m.version)
        .filter(|v| *v < 20261202000001)
        .max()
        .unwrap()
}

#[tokio::test]
async fn the_migration_fills_the_index_from_the_events_appended_before_it() {
    // The trigger's index: the script appended after the migration.
    let after = TestDb::new().await;
    append_all(&after.pool, &script(), async || {}).await;
    let kept = index_rows(&after.pool).await;
    assert_eq!(kept, fold_of_log(&after.pool).await);
    assert!(kept.len() > 3, "{kept:?}");

    // The backfill's: the same script appended to a database of the same
    // server migrated up to the migration before, then migrated on.
    let name = format!("{}_early", after.name);
    sqlx::query(sqlx::AssertSqlSafe(format!("create database {name}")))
        .execute(&after.pool)
        .await
        .unwrap();
    let url = format!("{}_early", after.url);
    let before = crate::connect(&url, 4).await.unwrap();
    crate::MIGRATOR
        .run_to(version_before_the_index(), &before)
        .await
        .unwrap();
    let has_index: bool = sqlx::query_scalar("select to_regclass('trigger_index') is not null")
        .fetch_one(&before)
        .await
        .unwrap();
    assert!(!has_index, "migrated too far");
    append_all(&before, &script(), async || {}).await;
    crate::migrate(&before).await.unwrap();
    assert_eq!(index_rows(&before).await, kept);
    // And the trigger keeps it from there.
    let more = [
        (NS1, "web-a", vec![deleted()]),
        (NS2, "web-a", vec![toggled(true)]),
    ];
    append_all(&before, &more, async || {}).await;
    append_all(&after.pool, &more, async || {}).await;
    assert_eq!(index_rows(&before).await, index_rows(&after.pool).await);
    assert_eq!(index_rows(&before).await, fold_of_log(&before).await);
    before.close().await;
}
