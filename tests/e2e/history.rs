//! Version history end to end: uploads v1..v3 of a real Python function,
//! the list, a version's files and zip, a diff, a rollback that serves v1
//! again, an identical re-upload, and retention deleting a pruned blob.

use std::time::Duration;

use serde_json::json;

use crate::platform::Platform;
use crate::zip_files;

fn handler(says: &str, extra: &[(&str, &str)]) -> Vec<u8> {
    let code = format!("def handle(event):\n    return {says:?}\n");
    let mut files = vec![("handler.py", code.as_str())];
    files.extend_from_slice(extra);
    zip_files(&files)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn versions_can_be_listed_read_compared_and_rolled_back_to() {
    let p = Platform::start(50).await;
    let res = p
        .client
        .create(json!({"name": "greet", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201);
    let zips = [
        handler("v1", &[("notes.txt", "first\n")]),
        handler("v2", &[("notes.txt", "first\n")]),
        handler("v3", &[("extra.txt", "new\n")]),
    ];
    for (i, zip) in zips.iter().enumerate() {
        let (status, body) = p.upload("greet", zip.clone()).await;
        assert_eq!((status, &body["version"]), (202, &json!(i + 1)), "{body}");
        p.wait_deployed("greet", i as u64 + 1).await;
    }
    assert_eq!(p.invoke("greet").await, "v3");

    // The list: newest first, who uploaded each, which one is live.
    let list = sless_testkit::eventually("3 versions listed", Duration::from_secs(10), || async {
        let l = p.get_json("/functions/greet/versions").await;
        (l["items"].as_array().unwrap().len() == 3).then_some(l)
    })
    .await;
    let items = list["items"].as_array().unwrap();
    let numbers: Vec<_> = items.iter().map(|v| v["version"].clone()).collect();
    assert_eq!(numbers, [json!(3), json!(2), json!(1)]);
    assert!(items.iter().all(|v| v["uploaded_by"] == "historian"));
    assert_eq!(items[0]["live"], true);
    assert_eq!(items[2]["runtime"], "python3.11");
    assert_eq!(list["live_version"], 3);

    // A version's files, and its zip byte for byte.
    let v1 = p.get_json("/functions/greet/versions/1/source").await;
    let handler_py = v1["files"]
        .as_array()
        .unwrap()
        .iter()
        .find(|f| f["path"] == "handler.py")
        .unwrap();
    assert!(handler_py["content"].as_str().unwrap().contains("\"v1\""));
    let zip = p.get("/functions/greet/versions/2/archive").await;
    assert_eq!(zip.headers()["content-type"], "application/zip");
    assert_eq!(zip.bytes().await.unwrap().as_ref(), zips[1].as_slice());

    // The diff from v1 to v3.
    let diff = p.get_json("/functions/greet/versions/1/diff/3").await;
    let changes: Vec<_> = diff["files"]
        .as_array()
        .unwrap()
        .iter()
        .map(|f| (f["path"].as_str().unwrap(), f["change"].as_str().unwrap()))
        .collect();
    assert_eq!(
        changes,
        [
            ("extra.txt", "added"),
            ("handler.py", "modified"),
            ("notes.txt", "removed")
        ]
    );
    let text = diff["files"][1]["diff"].as_str().unwrap();
    assert!(
        text.contains("-    return \"v1\"\n+    return \"v3\"\n"),
        "{text}"
    );

    // Rollback: v1 serves again, without a new version.
    let (status, body) = p.rollback("greet", json!(1)).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(body["version"], 1);
    p.wait_deployed("greet", 1).await;
    assert_eq!(p.invoke("greet").await, "v1");
    let (status, body) = p.rollback("greet", json!(1)).await;
    assert_eq!((status, &body["unchanged"]), (200, &json!(true)), "{body}");

    // Re-uploading v2's bytes makes v2 live again; no version 4.
    let (status, body) = p.upload("greet", zips[1].clone()).await;
    assert_eq!(status, 202, "{body}");
    assert_eq!(
        (&body["version"], &body["reused"]),
        (&json!(2), &json!(true))
    );
    p.wait_deployed("greet", 2).await;
    assert_eq!(p.invoke("greet").await, "v2");
    let uploads: i64 =
        sqlx::query_scalar("select count(*) from events where type = 'FunctionUploaded'")
            .fetch_one(&p.db.pool)
            .await
            .unwrap();
    assert_eq!(uploads, 3);

    // What cannot be rolled back to, or read.
    for (version, status) in [(json!(9), 422), (json!(0), 422), (json!("one"), 422)] {
        let (got, body) = p.rollback("greet", version.clone()).await;
        assert_eq!(got, status, "rollback to {version}: {body}");
    }
    for path in [
        "/functions/greet/versions/9/source",
        "/functions/greet/versions/x/archive",
        "/functions/nope/versions",
    ] {
        assert_eq!(p.get(path).await.status(), 404, "{path}");
    }
    p.driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retention_prunes_the_oldest_versions_and_deletes_their_blobs() {
    let p = Platform::start(2).await;
    let res = p
        .client
        .create(json!({"name": "keep", "runtime": "python3.11", "entrypoint": "handler.handle"}))
        .await;
    assert_eq!(res.status(), 201);
    let mut zip_keys = Vec::new();
    for i in 1..=4 {
        let (status, body) = p.upload("keep", handler(&format!("v{i}"), &[])).await;
        assert_eq!(status, 202, "{body}");
        zip_keys.push(sless_store::blobs::zip_key(
            body["sha256"].as_str().unwrap(),
        ));
        if i == 3 {
            assert_eq!(body["pruned"], json!([1]), "{body}");
        }
    }
    let blobs = p.s3.blobs();
    for pruned in &zip_keys[..2] {
        sless_testkit::eventually(
            &format!("{pruned} deleted"),
            Duration::from_secs(30),
            || async { (!blobs.exists(pruned).await.unwrap()).then_some(()) },
        )
        .await;
    }
    for kept in &zip_keys[2..] {
        assert!(blobs.exists(kept).await.unwrap(), "{kept} is kept");
    }
    let list = sless_testkit::eventually("2 versions listed", Duration::from_secs(10), || async {
        let l = p.get_json("/functions/keep/versions").await;
        (l["items"].as_array().unwrap().len() == 2).then_some(l)
    })
    .await;
    assert_eq!(list["items"][0]["version"], 4);
    assert_eq!(
        p.get("/functions/keep/versions/1/source").await.status(),
        404
    );
    p.driver.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pruned_blob_that_another_function_uses_is_kept() {
    let p = Platform::start(1).await;
    for name in ["first", "second"] {
        let res = p
            .client
            .create(json!({"name": name, "runtime": "python3.11", "entrypoint": "handler.handle"}))
            .await;
        assert_eq!(res.status(), 201);
    }
    let shared = handler("shared", &[]);
    let (_, body) = p.upload("second", shared.clone()).await;
    let shared_key = sless_store::blobs::zip_key(body["sha256"].as_str().unwrap());
    assert_eq!(p.upload("first", shared).await.0, 202);
    let (status, body) = p.upload("first", handler("own", &[])).await;
    assert_eq!((status, &body["pruned"]), (202, &json!([1])), "{body}");

    // The collection ran (its work item is gone, not dead) and kept the blob.
    sless_testkit::eventually(
        "the collection to finish",
        Duration::from_secs(30),
        || async {
            let left: i64 = sqlx::query_scalar(
                "select (select count(*) from work_items where kind = 'CollectBlob')
                  + (select count(*) from work_dead where kind = 'CollectBlob')",
            )
            .fetch_one(&p.db.pool)
            .await
            .unwrap();
            (left == 0).then_some(())
        },
    )
    .await;
    assert!(p.s3.blobs().exists(&shared_key).await.unwrap());
    p.driver.shutdown().await;
}
