//! The nodejs20 and go1.23 runtimes on the node: an upload of the example
//! is built by kaniko from the runtime's base image (`npm install` and
//! `go build` run inside the build) and answered by its pod through `/fn`.

use std::time::Instant;

use serde_json::Value;

use crate::{cluster_tier, deploy, platform};

/// Deploys `examples/{example}` as `hello` and calls it with a query and
/// with a JSON body: what the example answers, through the pod.
async fn deployed_and_answered(sub: &str, runtime: &str, entrypoint: &str, example: &str) {
    let (_cluster, p) = platform(sub).await;
    let started = Instant::now();
    let f = deploy(&p, "hello", runtime, entrypoint, example).await;
    eprintln!("{runtime}: upload to Ready: {:?}", started.elapsed());
    let url = f["url"].as_str().expect("the function's url");
    let http = reqwest::Client::new();

    let res = http.get(format!("{url}?name=kube")).send().await.unwrap();
    let status = res.status();
    let body = res.text().await.unwrap();
    assert_eq!(status, 200, "{body}\n{}", p.logs());
    let answer: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(answer["message"], "hello, kube", "{body}");
    assert_eq!(answer["method"], "GET", "{body}");
    assert_eq!(answer["path"], "/", "{body}");

    // The body reaches the handler too, parsed as JSON.
    let res = http
        .post(format!("{url}/greet"))
        .json(&serde_json::json!({"name": "pod"}))
        .send()
        .await
        .unwrap();
    let status = res.status();
    let body = res.text().await.unwrap();
    assert_eq!(status, 200, "{body}");
    let answer: Value = serde_json::from_str(&body).unwrap_or_else(|e| panic!("{e}: {body}"));
    assert_eq!(answer["message"], "hello, pod", "{body}");
    assert_eq!(answer["method"], "POST", "{body}");
    assert_eq!(answer["path"], "/greet", "{body}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_nodejs_function_is_built_by_kaniko_and_answered_by_its_pod() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    deployed_and_answered("cluster-nodejs", "nodejs20", "handler.handle", "hello-node").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_go_function_is_built_by_kaniko_and_answered_by_its_pod() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    deployed_and_answered("cluster-go", "go1.23", "handler.Handle", "hello-go").await;
}
