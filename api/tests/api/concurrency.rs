//! Optimistic concurrency at the API: racing uploads never share a version
//! and never overwrite each other silently (DESIGN §4.2).

use std::collections::BTreeMap;
use std::sync::Arc;

use axum::http::StatusCode;
use tokio::sync::Barrier;

use super::support::*;

const SUB: &str = "grace@example.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_uploads_get_distinct_versions_or_a_409_version_conflict() {
    let env = Arc::new(Env::new().await);
    let mut conflicts = 0;
    for round in 0..6 {
        let name = format!("race-{round}");
        assert_eq!(env.create(SUB, &name).await.status, StatusCode::CREATED);
        let barrier = Arc::new(Barrier::new(2));
        let tasks: Vec<_> = ["left", "right"]
            .into_iter()
            .map(|side| {
                let (env, barrier, name) = (env.clone(), barrier.clone(), name.clone());
                tokio::spawn(async move {
                    let zip = handler_zip(&format!("{side} {round}"));
                    let req = post_zip(
                        &upload_uri(&ns(SUB), &name),
                        Some(&token(SUB)),
                        zip.clone(),
                        ZIP,
                    );
                    barrier.wait().await;
                    (sha256_hex(&zip), env.send(req).await)
                })
            })
            .collect();
        let mut answers = Vec::new();
        for t in tasks {
            answers.push(t.await.unwrap());
        }

        // Both requests read the stream at version 1 (the create) and decide
        // "version 1 of the source" from it. The appends are serialised by the
        // stream's advisory lock: the first commits stream version 2; the
        // second then finds the stream at 2 where it expected 1, and gets a
        // 409 version-conflict instead of overwriting. Only when one request
        // finished before the other read the stream do both succeed, as
        // versions 1 and 2.
        let mut accepted = Vec::new();
        let mut lost = Vec::new();
        for (sha, a) in &answers {
            match a.status {
                StatusCode::ACCEPTED => {
                    accepted.push((sha.clone(), a.body["version"].as_u64().expect("version")))
                }
                StatusCode::CONFLICT => {
                    a.assert_problem(
                        "the loser of the race",
                        StatusCode::CONFLICT,
                        "version-conflict",
                    );
                    conflicts += 1;
                    lost.push(format!("blobs/zips/{sha}.zip"));
                }
                other => panic!("round {round}: unexpected {other}: {}", a.body),
            }
        }
        assert!(
            !accepted.is_empty(),
            "round {round}: at least one upload wins"
        );

        // The loser's blobs were stored before its append lost: their
        // records stay, for the orphan sweep; the winner's landed with it.
        let in_flight = env.blobs_in_flight().await;
        assert_eq!(
            in_flight.len(),
            2 * lost.len(),
            "round {round}: {in_flight:?}"
        );
        for zip in &lost {
            assert!(in_flight.contains(zip), "round {round}: {in_flight:?}");
        }
        sqlx::query("delete from blobs_in_flight")
            .execute(&env.db.pool)
            .await
            .unwrap();

        let uploaded = env.events_of_type(SUB, &name, "FunctionUploaded").await;
        let mut by_version: BTreeMap<u64, Vec<String>> = BTreeMap::new();
        for data in &uploaded {
            let v = data["version"].as_u64().unwrap();
            by_version
                .entry(v)
                .or_default()
                .push(data["sha256"].as_str().unwrap().to_owned());
        }
        for (v, shas) in &by_version {
            assert_eq!(
                shas.len(),
                1,
                "round {round}: version {v} appears {} times",
                shas.len()
            );
        }
        assert_eq!(
            uploaded.len(),
            accepted.len(),
            "round {round}: one event per accepted upload, none for a 409"
        );
        for (sha, v) in &accepted {
            assert_eq!(
                by_version.get(v),
                Some(&vec![sha.clone()]),
                "round {round}: version {v} is the accepted zip"
            );
        }
        let mut versions: Vec<_> = by_version.keys().copied().collect();
        versions.sort();
        assert_eq!(
            versions,
            (1..=accepted.len() as u64).collect::<Vec<_>>(),
            "round {round}: versions count up from 1"
        );
        // The stream itself has no gaps or duplicates.
        let stream: Vec<_> = env
            .stream(SUB, &name)
            .await
            .iter()
            .map(|e| e.version)
            .collect();
        assert_eq!(
            stream,
            (1..=stream.len() as i64).collect::<Vec<_>>(),
            "round {round}"
        );
    }
    eprintln!("racing uploads: {conflicts} of 6 rounds ended in a 409");
}

/// An upload whose read of the stream is overtaken by a worker's event (a
/// build starting) is decided again on the newer state: the user did nothing
/// that conflicts, so they get a new version, not a 409.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_overtaken_by_a_workers_event_is_decided_again_not_refused() {
    use sless_domain::{FunctionEvent, FunctionKey, FunctionName, Namespace};
    use sless_store::eventlog::{self, Metadata, NewEvent};

    let env = Arc::new(Env::new().await);
    assert_eq!(env.create(SUB, "busy").await.status, StatusCode::CREATED);
    let v1 = env.upload(SUB, "busy", &handler_zip("one")).await;
    assert_eq!(v1.status, StatusCode::ACCEPTED);
    let key = FunctionKey::new(
        Namespace::parse(&ns(SUB)).unwrap(),
        FunctionName::parse("busy").unwrap(),
    );

    // A worker starts building version 1 and holds its append open (its
    // transaction holds the stream's lock) while the user uploads version 2.
    let mut worker_tx = env.db.pool.begin().await.unwrap();
    let started = FunctionEvent::BuildStarted { version: 1 };
    let event = NewEvent::function(&key, &started, Metadata::system("worker", 1));
    eventlog::append(&mut worker_tx, &key.stream(), 2, &[event])
        .await
        .unwrap();
    let upload = {
        let env = env.clone();
        tokio::spawn(async move {
            let req = post_zip(
                &upload_uri(&ns(SUB), "busy"),
                Some(&token(SUB)),
                handler_zip("two"),
                ZIP,
            );
            env.send(req).await
        })
    };
    // The upload has read the stream (at version 2) and waits for the lock.
    env.until_a_request_waits_for_a_stream_lock().await;
    worker_tx.commit().await.unwrap();

    let answer = upload.await.unwrap();
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{:?}", answer.body);
    assert_eq!(answer.body["version"], 2);
    let types: Vec<String> = env
        .stream(SUB, "busy")
        .await
        .into_iter()
        .map(|e| e.event_type)
        .collect();
    assert_eq!(
        types,
        [
            "FunctionCreated",
            "FunctionUploaded",
            "BuildStarted",
            "FunctionUploaded"
        ]
    );
}
