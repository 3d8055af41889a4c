//! A python3.11 function, built by kaniko and served by its pod.

use std::time::Instant;

use crate::{cluster_tier, deploy, platform};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_python_function_is_built_by_kaniko_and_answered_by_its_pod() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let (_cluster, p) = platform("cluster-python").await;
    let started = Instant::now();
    let f = deploy(&p, "hello", "python3.11", "handler.handle", "hello-python").await;
    eprintln!("upload to Ready: {:?}", started.elapsed());
    let url = f["url"].as_str().expect("the function's url");
    let res = reqwest::get(format!("{url}?name=kube")).await.unwrap();
    let status = res.status();
    let body = res.text().await.unwrap();
    assert_eq!(status, 200, "{body}\n{}", p.logs());
    assert!(body.contains("hello, kube"), "{body}");
}
