//! What a function prints, kept, on a real `sless dev`: a line printed in a
//! call is under that call's invocation id within a second; two calls in
//! one instance at once, printing in turns, each get only their own lines;
//! a crash's traceback hangs off the 502 it caused; a function printing
//! far past its budget loses lines, counted, and its calls still answer;
//! a process of the function writing 20 MB/s is never held back by it and
//! the function's calls take no longer meanwhile; and a job's output is in
//! the same log, under its run's record.

use std::time::Duration;

use serde_json::{Value, json};

use crate::dev::{start_dev_configured, stop_dev};
use crate::{Client, zip_files};

/// Prints a line naming the call's tag; `?wait=1` makes it wait between
/// its two lines until a call with `?release=1` comes (so two calls in the
/// one instance interleave); `?crash=1` prints a traceback and dies;
/// `?spew=N` prints N lines as fast as it can; `?flood=BYTES` starts a
/// process writing BYTES of 4 KiB lines to the instance's stdout as fast as
/// it can, and `?flooded=1` says whether it is done and in how long.
const HANDLER: &str = r#"
import os, subprocess, sys, threading, time, traceback

print("imported", flush=True)
released = threading.Event()
FLOOD = """
import os, sys
chunk = (b"f" * 4095 + b"\\n") * 16
left = int(sys.argv[1])
while left > 0:
    left -= os.write(1, chunk)
"""
flood = {}

def flooding(n):
    start = time.monotonic()
    subprocess.run([sys.executable, "-c", FLOOD, str(n)], check=True)
    flood["seconds"] = time.monotonic() - start

def handle(event):
    q = event["query"]
    if "release" in q:
        released.set()
        return {"released": True}
    if "flood" in q:
        threading.Thread(target=flooding, args=(int(q["flood"]),)).start()
        return {"flooding": True}
    if "flooded" in q:
        return {"seconds": flood.get("seconds")}
    tag = q.get("tag", "none")
    print(f"{tag}: first", flush=True)
    if "wait" in q:
        released.wait(20)
    print(f"{tag}: second", file=sys.stderr, flush=True)
    if "crash" in q:
        try:
            raise RuntimeError("the disk is on fire")
        except RuntimeError:
            traceback.print_exc()
        sys.stderr.flush()
        os._exit(1)
    for i in range(int(q.get("spew", "0"))):
        print(f"{tag}: spew {i} " + "x" * 200)
    sys.stdout.flush()
    return {"tag": tag}
"#;

async fn logs(c: &Client, name: &str, query: &str) -> Value {
    let res = c
        .http
        .get(c.v1(&format!("/functions/{name}/logs{query}")))
        .bearer_auth(&c.token)
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);
    res.json().await.unwrap()
}

fn lines(page: &Value) -> Vec<String> {
    page["items"]
        .as_array()
        .unwrap()
        .iter()
        .map(|l| l["line"].as_str().unwrap().to_owned())
        .collect()
}

/// Calls the function; its status and invocation id.
async fn call(c: &Client, name: &str, query: &str) -> (u16, String) {
    let url = format!("{}/fn/{}/{name}/{query}", c.fn_url, c.namespace);
    let res = c.http.get(&url).send().await.unwrap();
    let id = res
        .headers()
        .get("sless-invocation-id")
        .expect("every call says its invocation id")
        .to_str()
        .unwrap()
        .to_owned();
    (res.status().as_u16(), id)
}

/// The lines of one invocation, oldest first, once there are `n`.
async fn lines_of(c: &Client, name: &str, id: &str, n: usize, within: Duration) -> Vec<Value> {
    sless_testkit::eventually(&format!("{n} lines of {id}"), within, || async {
        let page = logs(c, name, &format!("?invocation={id}&order=oldest")).await;
        let items = page["items"].as_array().unwrap().clone();
        (items.len() >= n).then_some(items)
    })
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn what_a_function_prints_is_kept_under_the_call_that_printed_it() {
    let dir = sless_testkit::scratch_dir("function-logs").join("data");
    let (proc, c) =
        start_dev_configured(&dir, "log", &[], &[("SLESS_LOG_LINES_PER_SEC", "200")]).await;
    let res = c
        .create(json!({"name": "talker", "runtime": "python3.11",
                       "entrypoint": "handler.handle", "concurrency": 4,
                       "max_instances": 1}))
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let res = c
        .upload("talker", zip_files(&[("handler.py", HANDLER)]))
        .await;
    assert_eq!(res.status(), 202);
    c.wait_ready("talker", Duration::from_secs(120)).await;

    // One call: both its lines, on their streams, within a second.
    let (status, id) = call(&c, "talker", "?tag=solo").await;
    assert_eq!(status, 200);
    let solo = lines_of(&c, "talker", &id, 2, Duration::from_secs(1)).await;
    // stdout and stderr are two pipes, read apart: each keeps its order,
    // not the order between them.
    let mut got: Vec<(&str, &str)> = solo
        .iter()
        .map(|l| (l["line"].as_str().unwrap(), l["stream"].as_str().unwrap()))
        .collect();
    got.sort_unstable();
    assert_eq!(got, [("solo: first", "stdout"), ("solo: second", "stderr")]);
    assert_eq!(solo[0]["version"], 1);
    // What it printed at import belongs to no call.
    let all = logs(&c, "talker", "?q=imported").await;
    assert_eq!(all["items"][0]["invocation"], Value::Null, "{all}");

    // Two calls in one instance at once, printing in turns.
    let wait = "&wait=1";
    let (a, b) = (
        tokio::spawn({
            let c = c.clone();
            let q = format!("?tag=a{wait}");
            async move { call(&c, "talker", &q).await }
        }),
        tokio::spawn({
            let c = c.clone();
            let q = format!("?tag=b{wait}");
            async move { call(&c, "talker", &q).await }
        }),
    );
    sless_testkit::eventually(
        "both calls to print their first line",
        Duration::from_secs(20),
        || async {
            let page = logs(&c, "talker", "?q=%3A%20first&limit=10").await;
            let l = lines(&page);
            (l.contains(&"a: first".to_owned()) && l.contains(&"b: first".to_owned())).then_some(())
        },
    )
    .await;
    assert_eq!(call(&c, "talker", "?release=1").await.0, 200);
    let ((sa, ia), (sb, ib)) = (a.await.unwrap(), b.await.unwrap());
    assert_eq!((sa, sb), (200, 200));
    assert_ne!(ia, ib);
    for (id, tag) in [(&ia, "a"), (&ib, "b")] {
        let of = lines_of(&c, "talker", id, 2, Duration::from_secs(5)).await;
        let mut texts: Vec<&str> = of.iter().map(|l| l["line"].as_str().unwrap()).collect();
        texts.sort_unstable();
        assert_eq!(
            texts,
            [format!("{tag}: first"), format!("{tag}: second")],
            "call {tag} has its own lines and only those"
        );
    }

    // A crash: its traceback hangs off the 502.
    let (status, crash) = call(&c, "talker", "?tag=crash&crash=1").await;
    assert_eq!(status, 502);
    let tb = lines_of(&c, "talker", &crash, 4, Duration::from_secs(5)).await;
    let text: Vec<&str> = tb.iter().map(|l| l["line"].as_str().unwrap()).collect();
    assert!(
        text.contains(&"RuntimeError: the disk is on fire"),
        "{text:?}"
    );
    assert!(text.iter().any(|l| l.starts_with("Traceback")), "{text:?}");
    let record =
        sless_testkit::eventually("the crash's record", Duration::from_secs(10), || async {
            let res = c
                .http
                .get(c.v1(&format!("/functions/talker/invocations/{crash}")))
                .bearer_auth(&c.token)
                .send()
                .await
                .unwrap();
            (res.status() == 200).then_some(res)
        })
        .await;
    let record: Value = record.json().await.unwrap();
    assert_eq!(record["status"], 502, "{record}");
    assert!(
        record["lines"]
            .as_array()
            .unwrap()
            .iter()
            .any(|l| l["line"] == "RuntimeError: the disk is on fire"),
        "{record}"
    );

    // Far past the budget (200 lines a second): lines dropped and
    // counted, and the call still answers.
    c.wait_ready("talker", Duration::from_secs(60)).await;
    let (status, spew) = call(&c, "talker", "?tag=spew&spew=20000").await;
    assert_eq!(status, 200);
    let page = sless_testkit::eventually("drops counted", Duration::from_secs(10), || async {
        let page = logs(&c, "talker", &format!("?invocation={spew}&limit=1000")).await;
        let kept = page["items"].as_array().unwrap().len() as u64;
        (kept + page["dropped"].as_u64().unwrap_or(0) >= 20_000).then_some(page)
    })
    .await;
    let kept = page["items"].as_array().unwrap().len() as u64;
    let dropped = page["dropped"].as_u64().unwrap();
    assert!(kept < 1000, "held to its budget: {kept} kept");
    assert!(kept + dropped >= 20_000, "{kept} kept, {dropped} dropped");
    let (status, _) = call(&c, "talker", "?tag=after").await;
    assert_eq!(status, 200);

    // A job run of the function: what it prints is in the same log, under
    // the run's invocation record.
    let res = c
        .http
        .post(c.v1("/jobs"))
        .bearer_auth(&c.token)
        .json(&json!({"name": "talked", "function": "talker", "input": {"tag": "job"}}))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    let run = sless_testkit::eventually("the job's record", Duration::from_secs(60), || async {
        let records = c.invocations("talker").await?;
        records.into_iter().find(|i| i["origin"] == "job")
    })
    .await;
    let id = run["id"].as_str().unwrap();
    // Its process's import, the handler's two lines (a job's input is its
    // body, so no tag) and the answer it printed.
    let printed = lines_of(&c, "talker", id, 4, Duration::from_secs(5)).await;
    let mut texts: Vec<&str> = printed
        .iter()
        .map(|l| l["line"].as_str().unwrap())
        .collect();
    texts.sort_unstable();
    assert_eq!(
        texts,
        [
            "imported",
            "none: first",
            "none: second",
            r#"{"tag": "none"}"#
        ],
        "{printed:?}"
    );

    // A process of the function writing 20 MB/s and more: the instance's
    // pipe is read at its pace, whatever is kept, and the function's calls
    // answer as fast as before.
    let quick = async || {
        let started = std::time::Instant::now();
        assert_eq!(call(&c, "talker", "?tag=quick").await.0, 200);
        started.elapsed()
    };
    let mut before = Vec::new();
    for _ in 0..15 {
        before.push(quick().await);
    }
    const FLOODED: u64 = 160 * 1024 * 1024;
    assert_eq!(
        call(&c, "talker", &format!("?flood={FLOODED}")).await.0,
        200
    );
    let mut during = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let seconds = loop {
        during.push(quick().await);
        let url = format!("{}/fn/{}/talker/?flooded=1", c.fn_url, c.namespace);
        let said: Value = c.http.get(&url).send().await.unwrap().json().await.unwrap();
        if let Some(s) = said["seconds"].as_f64() {
            break s;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "the flood of {FLOODED} bytes did not end in a minute: held back"
        );
    };
    let rate = FLOODED as f64 / 1e6 / seconds;
    let (b, d) = (median(before), median(during.clone()));
    println!(
        "the flood: {FLOODED} bytes in {seconds:.2} s, {rate:.0} MB/s; \
         a call's median before {b:?}, during {d:?} ({} calls)",
        during.len()
    );
    assert!(rate >= 20.0, "the flood was held back to {rate:.1} MB/s");
    assert!(
        d <= b * 2 + Duration::from_millis(50),
        "a call took {d:?} during the flood, {b:?} before"
    );
    let page = logs(&c, "talker", "?q=fffff&limit=1").await;
    assert_eq!(page["items"][0]["truncated"], false, "{page}");

    stop_dev(proc, &dir).await;
}

fn median(mut took: Vec<Duration>) -> Duration {
    took.sort_unstable();
    took[took.len() / 2]
}
