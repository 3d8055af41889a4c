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
                }
                other => panic!("round {round}: unexpected {other}: {}", a.body),
            }
        }
        assert!(
            !accepted.is_empty(),
            "round {round}: at least one upload wins"
        );

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
