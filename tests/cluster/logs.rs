//! What a function's pod prints, kept: a call's line read back under its
//! invocation with the pod as its instance, and every line kept once
//! when the follow starts again (the follower's session ended: the lock
//! passes, here to the same worker, which resumes after the last kept
//! line) and when the pod is deleted and another replaces it.

use std::collections::HashMap;
use std::future::Future;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::api::ListParams;
use reqwest::Method;
use serde_json::{Value, json};
use sless_testkit::TestDb;

use crate::support::kube::Platform;
use crate::support::zip_files;
use crate::{cluster_tier, platform};

/// How long a printed line may take to be readable.
const LINES_WITHIN: Duration = Duration::from_secs(90);

/// The follower's advisory lock (`sless_workers::kube::pod_logs`), as
/// `pg_locks` shows a bigint key: its high and low halves.
const FOLLOWER_LOCK: i64 = 0x736c_6573_735f_706c;

/// What the worker logs when it takes the follower's lock.
const FOLLOWS: &str = "this worker follows the function pods' output";

const HANDLER: &str = r#"
print("printer imported")


def handle(event):
    n = event["query"].get("n", "?")
    print(f"printed {n}")
    return {"n": n}
"#;

/// `check` until it is `Ok`, within [`LINES_WITHIN`]; else panics with
/// what it said last and the processes' logs.
async fn within<T, Fut>(p: &Platform, what: &str, mut check: impl FnMut() -> Fut) -> T
where
    Fut: Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    loop {
        let last = match check().await {
            Ok(v) => {
                eprintln!("{what}: {:?}", started.elapsed());
                return v;
            }
            Err(e) => e,
        };
        if started.elapsed() > LINES_WITHIN {
            panic!(
                "timed out after {LINES_WITHIN:?} waiting for {what}; last seen: {last}\n{}",
                p.logs()
            );
        }
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
}

/// Calls the function with `n`; the call's invocation id.
async fn call(p: &Platform, url: &str, n: u32) -> String {
    let res = reqwest::get(format!("{url}?n={n}")).await.unwrap();
    let id = res
        .headers()
        .get("sless-invocation-id")
        .map(|v| v.to_str().unwrap().to_owned());
    let status = res.status();
    let body = res.text().await.unwrap();
    assert_eq!(status, 200, "{body}\n{}", p.logs());
    id.expect("the call's Sless-Invocation-Id")
}

/// The function's lines, oldest first, `query` added.
async fn lines(p: &Platform, query: &str) -> Vec<Value> {
    let (status, page) = p
        .call(
            Method::GET,
            &format!("/functions/printer/logs?order=oldest&limit=1000{query}"),
            None,
        )
        .await;
    assert_eq!(status, 200, "{page}");
    page["items"].as_array().cloned().unwrap_or_default()
}

/// Times the worker took the follower's lock, by its log.
fn follows(p: &Platform) -> usize {
    std::fs::read_to_string(p.dir.join("worker.log"))
        .unwrap_or_default()
        .matches(FOLLOWS)
        .count()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_pod_prints_is_kept_under_its_call_once_across_a_new_follow() {
    let Some(_turn) = cluster_tier().await else {
        return;
    };
    let (cluster, p) = platform("cluster-logs").await;
    let (status, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(
                json!({"name": "printer", "runtime": "python3.11", "entrypoint": "handler.handle"}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let res = p
        .client
        .upload("printer", zip_files(&[("handler.py", HANDLER)]))
        .await;
    assert_eq!(res.status(), 202);
    let f = p
        .wait("printer to be Ready", || async {
            let f = p.client.function("printer").await;
            match f["phase"].as_str() {
                Some("Ready") => Ok(f),
                Some("Failed") => panic!("printer failed: {f}\n{}", p.logs()),
                _ => Err(f.to_string()),
            }
        })
        .await;
    let url = f["url"].as_str().expect("the function's url").to_owned();
    let pods = p.names::<Pod>(&p.ns, "sless.dev/function=printer").await;
    let [pod] = pods.as_slice() else {
        panic!("one pod of printer: {pods:?}");
    };

    // A call's line, under its invocation, with the pod as its instance.
    let first = call(&p, &url, 1).await;
    let query = format!("&invocation={first}");
    let got = within(&p, "the first call's line", || async {
        let items = lines(&p, &query).await;
        match items.iter().find(|l| l["line"] == "printed 1") {
            Some(l) => Ok(l.clone()),
            None => Err(json!(items).to_string()),
        }
    })
    .await;
    assert_eq!(got["invocation"], first.as_str(), "{got}");
    assert_eq!(got["instance"], pod.as_str(), "{got}");
    assert_eq!(got["stream"], "stdout", "{got}");
    assert_eq!(got["version"], 1, "{got}");
    let imported = lines(&p, "&q=printer%20imported").await;
    assert_eq!(imported.len(), 1, "printed at import, once: {imported:?}");
    assert_eq!(imported[0]["invocation"], Value::Null, "{imported:?}");

    // The follower's session ends; the lock passes (to the same worker,
    // the only one) and the new follow starts after the last kept line.
    assert_eq!(follows(&p), 1, "{}", p.logs());
    let other = TestDb::new().await;
    let ended: Vec<i32> = sqlx::query_scalar(
        "with holders as materialized (
           select pid from pg_locks
            where locktype = 'advisory' and objsubid = 1 and granted
              and classid::bigint = $1 and objid::bigint = $2
         )
         select pid from holders where pg_terminate_backend(pid)",
    )
    .bind(FOLLOWER_LOCK >> 32)
    .bind(FOLLOWER_LOCK & 0xffff_ffff)
    .fetch_all(&other.pool)
    .await
    .unwrap();
    assert_eq!(ended.len(), 1, "the follower's one session: {ended:?}");
    within(&p, "the worker to follow again", || async {
        let n = follows(&p);
        if n >= 2 {
            Ok(())
        } else {
            Err(format!("took the lock {n} times"))
        }
    })
    .await;
    let second = call(&p, &url, 2).await;
    let query = format!("&invocation={second}");
    within(&p, "the second call's line", || async {
        let items = lines(&p, &query).await;
        if items.iter().any(|l| l["line"] == "printed 2") {
            Ok(())
        } else {
            Err(json!(items).to_string())
        }
    })
    .await;

    // The pod deleted: its last lines are read to its end, the pod that
    // replaces it is followed under its own name.
    cluster
        .plane()
        .kubectl_ok(&["delete", "pod", pod, "-n", &p.ns, "--wait=false"], None);
    let next = p
        .wait("the pod that replaces it, alone and running", || async {
            let all = p
                .api::<Pod>(&p.ns)
                .list(&ListParams::default().labels("sless.dev/function=printer"))
                .await
                .unwrap()
                .items;
            let names: Vec<String> = all.iter().map(|p| p.name_any()).collect();
            let running = all.iter().any(|p| {
                p.status.as_ref().and_then(|s| s.phase.as_deref()) == Some("Running")
                    && p.metadata.deletion_timestamp.is_none()
            });
            match names.as_slice() {
                [one] if one != pod && running => Ok(one.clone()),
                _ => Err(format!("{names:?}")),
            }
        })
        .await;
    let third = within(&p, "a call answered by the new pod", || async {
        let res = reqwest::get(format!("{url}?n=3")).await.unwrap();
        let id = res.headers().get("sless-invocation-id").cloned();
        match (res.status().as_u16(), id) {
            (200, Some(id)) => Ok(id.to_str().unwrap().to_owned()),
            (status, _) => Err(format!("{status}: {}", res.text().await.unwrap())),
        }
    })
    .await;
    let query = format!("&invocation={third}");
    let got = within(&p, "the third call's line", || async {
        let items = lines(&p, &query).await;
        match items.iter().find(|l| l["line"] == "printed 3") {
            Some(l) => Ok(l.clone()),
            None => Err(json!(items).to_string()),
        }
    })
    .await;
    assert_eq!(got["instance"], next.as_str(), "{got}");

    // Every line the pods printed is kept once.
    let all = lines(&p, "").await;
    let mut seen: HashMap<(String, String, String), usize> = HashMap::new();
    for l in &all {
        let key = (
            l["at"].to_string(),
            l["instance"].to_string(),
            l["line"].to_string(),
        );
        *seen.entry(key).or_default() += 1;
    }
    let twice: Vec<_> = seen.iter().filter(|(_, n)| **n > 1).collect();
    assert!(
        twice.is_empty(),
        "lines kept twice: {twice:?}\nall: {all:?}"
    );
    for (text, times) in [
        ("printer imported", 2),
        ("printed 1", 1),
        ("printed 2", 1),
        ("printed 3", 1),
    ] {
        let n = all.iter().filter(|l| l["line"] == text).count();
        assert_eq!(n, times, "{text:?} kept {n} times: {all:?}");
    }
}
