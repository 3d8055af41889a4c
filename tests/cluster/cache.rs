//! kaniko's layer cache: a second version of a python3.11 function that
//! changes its handler and not its `requirements.txt` takes the dependency
//! step's layer from the registry instead of running `pip install` again.

use std::time::{Duration, Instant};

use reqwest::Method;
use serde_json::{Value, json};

use crate::support::kube::Platform;
use crate::support::zip_files;
use crate::{cluster_tier, platform};

/// What kaniko prints for a RUN step it took from the cache, and for one
/// it had to run.
const CACHE_HIT: &str = "Using caching version of cmd: RUN pip install";
const CACHE_MISS: &str = "No cached layer found for cmd RUN pip install";

fn handler(answer: &str) -> String {
    format!("def handle(event):\n    return {{\"answer\": \"{answer}\"}}\n")
}

/// Uploads `zip` as version `version` of `name` and waits until that
/// version is Ready: how long it took, and the build's log.
async fn upload(p: &Platform, name: &str, version: u64, zip: Vec<u8>) -> (Duration, String) {
    let started = Instant::now();
    let res = p.client.upload(name, zip).await;
    assert_eq!(res.status(), 202);
    let log = || async {
        let res = p
            .client
            .http
            .get(
                p.client
                    .v1(&format!("/functions/{name}/versions/{version}/build-log")),
            )
            .bearer_auth(&p.client.token)
            .send()
            .await
            .unwrap();
        res.text().await.unwrap()
    };
    p.wait(
        &format!("version {version} of {name} to be Ready"),
        || async {
            let f = p.client.function(name).await;
            if f["phase"] == "Failed" {
                panic!(
                    "{name} failed: {f}\nbuild log: {}\n{}",
                    log().await,
                    p.logs()
                );
            }
            if f["phase"] == "Ready" && f["version"] == version {
                Ok(())
            } else {
                Err(f.to_string())
            }
        },
    )
    .await;
    (started.elapsed(), log().await)
}

/// kaniko's lines about the Dockerfile's steps and its cache.
fn steps(log: &str) -> String {
    log.lines()
        .filter(|l| {
            ["cmd", "COPY", "RUN", "cache", "Pushing"]
                .iter()
                .any(|w| l.contains(w))
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// What the function answers through its pod.
async fn answer(p: &Platform, name: &str) -> Value {
    let f = p.client.function(name).await;
    let url = f["url"].as_str().expect("the function's url");
    let res = reqwest::get(url).await.unwrap();
    let status = res.status();
    let body = res.text().await.unwrap();
    assert_eq!(status, 200, "{body}\n{}", p.logs());
    serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_second_version_with_the_same_requirements_reuses_the_installed_layer() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-cache").await;
    let (status, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(
                json!({"name": "cached", "runtime": "python3.11", "entrypoint": "handler.handle"}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    // Pods reach no index: requirements that install nothing, made unique
    // to this run so that the first build cannot find a layer of an
    // earlier run in the registry.
    let requirements = format!(
        "# the dependencies of run {}: none yet\n",
        uuid::Uuid::new_v4()
    );

    let v1 = handler("one");
    let (cold, log) = upload(
        &p,
        "cached",
        1,
        zip_files(&[("handler.py", &v1), ("requirements.txt", &requirements)]),
    )
    .await;
    eprintln!("the first build:\n{}", steps(&log));
    assert!(log.contains(CACHE_MISS), "the first build installs:\n{log}");
    assert!(!log.contains(CACHE_HIT), "{log}");
    assert_eq!(answer(&p, "cached").await["answer"], "one");

    let v2 = handler("two");
    let (warm, log) = upload(
        &p,
        "cached",
        2,
        zip_files(&[("handler.py", &v2), ("requirements.txt", &requirements)]),
    )
    .await;
    eprintln!("the second build:\n{}", steps(&log));
    assert!(
        log.contains(CACHE_HIT),
        "the second build takes the installed layer:\n{log}"
    );
    assert!(!log.contains(CACHE_MISS), "{log}");
    assert_eq!(answer(&p, "cached").await["answer"], "two");
    eprintln!("upload to Ready: cold {cold:?}, warm (one file changed) {warm:?}");
}
