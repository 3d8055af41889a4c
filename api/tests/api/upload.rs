//! Uploads: blobs first, then the event and the work item in one commit;
//! versions count up, identical bytes change nothing.

use axum::http::StatusCode;
use zip::write::SimpleFileOptions;

use std::time::Duration;

use futures_util::StreamExt;

use super::archives::temp_entries;
use super::support::*;

const SUB: &str = "erin@example.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_stores_both_blobs_appends_one_event_and_enqueues_one_reconcile() {
    let env = Env::new().await;
    let ns = ns(SUB);
    assert_eq!(env.create(SUB, "hello").await.status, StatusCode::CREATED);
    let zip = handler_zip("v1");
    let sha = sha256_hex(&zip);

    let first = env.upload(SUB, "hello", &zip).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    assert_eq!(first.body["version"], 1);
    assert_eq!(first.body["sha256"], sha.as_str());
    assert_eq!(first.body["size"], zip.len());
    assert_eq!(first.body["files"], 2);
    assert_eq!(
        first.body["status_url"],
        function_uri(&ns, "hello"),
        "a URL to poll"
    );
    assert!(
        first.body["position"].as_i64().is_some_and(|p| p > 0),
        "{}",
        first.body
    );

    // The event references both blobs and is the one the answer names.
    let uploaded: Vec<_> = env
        .stream(SUB, "hello")
        .await
        .into_iter()
        .filter(|e| e.event_type == "FunctionUploaded")
        .collect();
    assert_eq!(uploaded.len(), 1);
    let event = &uploaded[0];
    assert_eq!(first.body["position"], event.position);
    assert_eq!(event.version, 2, "the stream's second event");
    assert_eq!(event.metadata["actor"], SUB);
    let data = &event.data;
    assert_eq!(data["version"], 1);
    assert_eq!(data["sha256"], sha.as_str());
    let zip_key = format!("blobs/zips/{sha}.zip");
    assert_eq!(data["zip_key"], zip_key.as_str());
    let ctx_sha = data["context_sha256"]
        .as_str()
        .expect("context sha")
        .to_owned();
    let ctx_key = format!("blobs/contexts/{ctx_sha}.tar.gz");
    assert_eq!(data["context_key"], ctx_key.as_str());

    // Both blobs exist, and nothing else; the zip is byte-identical and the
    // context is stored under its own sha256.
    let blobs = env.s3.blobs();
    let mut keys = blobs.list("").await.unwrap();
    keys.sort();
    let mut want = vec![ctx_key.clone(), zip_key.clone()];
    want.sort();
    assert_eq!(keys, want);
    assert_eq!(
        blobs.get(&zip_key).await.unwrap(),
        zip,
        "the zip blob is what was uploaded"
    );
    let context = blobs.get(&ctx_key).await.unwrap();
    assert_eq!(
        sha256_hex(&context),
        ctx_sha,
        "the context is content-addressed"
    );
    assert_eq!(&context[..2], &[0x1f, 0x8b], "the context is gzip");
    // Recorded in flight before they were stored, and landed by the commit.
    assert!(env.blobs_in_flight().await.is_empty());

    // Exactly one pending reconcile for the function.
    let key = format!("{ns}/hello");
    assert_eq!(
        env.work_items().await,
        vec![(
            "ReconcileFunction".to_owned(),
            key.clone(),
            "pending".to_owned()
        )]
    );

    // A different upload: version 2, and the pending item is refreshed, not doubled.
    let zip2 = handler_zip("v2");
    let second = env.upload(SUB, "hello", &zip2).await;
    assert_eq!(second.status, StatusCode::ACCEPTED, "{}", second.body);
    assert_eq!(second.body["version"], 2);
    assert_eq!(second.body["sha256"], sha256_hex(&zip2).as_str());
    assert_eq!(
        env.work_items().await,
        vec![(
            "ReconcileFunction".to_owned(),
            key.clone(),
            "pending".to_owned()
        )]
    );
    assert_eq!(
        env.events_of_type(SUB, "hello", "FunctionUploaded")
            .await
            .len(),
        2
    );
    assert_eq!(env.s3.blobs().list("").await.unwrap().len(), 4);

    // The same bytes again: 200, unchanged, the same version, no event, no blob.
    let before = env.counts().await;
    let same = env.upload(SUB, "hello", &zip2).await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.body);
    assert_eq!(same.body["unchanged"], true);
    assert_eq!(same.body["version"], 2);
    assert_eq!(same.body["sha256"], sha256_hex(&zip2).as_str());
    assert_eq!(env.counts().await, before);

    // The read model follows the log.
    env.catch_up().await;
    let view = env
        .send(get(&function_uri(&ns, "hello"), Some(&token(SUB))))
        .await;
    assert_eq!(view.body["version"], 2, "{}", view.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_over_the_json_limit_but_under_the_zip_limit_is_accepted() {
    // The API's default body limit is 1 MiB; uploads have their own, 50 MiB.
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "big").await.status, StatusCode::CREATED);
    let data: Vec<u8> = (0..3 * 1024 * 1024u32)
        .map(|i| (i.wrapping_mul(2_654_435_761) >> 24) as u8)
        .collect();
    let zip = zip_with(|w| {
        use std::io::Write;
        let stored =
            SimpleFileOptions::default().compression_method(zip::CompressionMethod::Stored);
        w.start_file("handler.py", stored).unwrap();
        w.write_all(b"def handle(req):\n    return 'big'\n")
            .unwrap();
        w.start_file("data.bin", stored).unwrap();
        w.write_all(&data).unwrap();
    });
    assert!(zip.len() > 3 * 1024 * 1024);
    let answer = env.upload(SUB, "big", &zip).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    assert_eq!(answer.body["size"], zip.len());
    assert_eq!(
        env.s3
            .blobs()
            .get(&format!("blobs/zips/{}.zip", sha256_hex(&zip)))
            .await
            .unwrap(),
        zip
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_same_zip_for_two_functions_is_stored_once() {
    let env = Env::new().await;
    for name in ["one", "two"] {
        assert_eq!(env.create(SUB, name).await.status, StatusCode::CREATED);
    }
    let zip = handler_zip("shared");
    for name in ["one", "two"] {
        let a = env.upload(SUB, name, &zip).await;
        assert_eq!(a.status, StatusCode::ACCEPTED, "{name}: {}", a.body);
        assert_eq!(a.body["version"], 1);
    }
    assert_eq!(
        env.s3.blobs().list("").await.unwrap().len(),
        2,
        "content-addressed: one zip, one context"
    );
    let keys: Vec<_> = env
        .work_items()
        .await
        .into_iter()
        .map(|(_, k, _)| k)
        .collect();
    assert_eq!(
        keys,
        vec![format!("{}/one", ns(SUB)), format!("{}/two", ns(SUB))]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_that_finds_no_turn_is_503_with_retry_after_and_writes_nothing() {
    let mut env = Env::new().await;
    let gate = sless_api::rest::upload::UploadGate::new(1, std::time::Duration::from_millis(200));
    env.app = super::proxy::app_with(&env, |s| s.uploads = gate.clone());
    assert_eq!(env.create(SUB, "busy").await.status, StatusCode::CREATED);
    let before = env.counts().await;

    // Another upload holds the only turn.
    let held = gate.permits().clone().acquire_owned().await.unwrap();
    let refused = env.upload(SUB, "busy", &handler_zip("v1")).await;
    assert_eq!(
        refused.status,
        StatusCode::SERVICE_UNAVAILABLE,
        "{}",
        refused.body
    );
    assert_eq!(refused.content_type(), PROBLEM_JSON);
    assert!(
        refused.body["type"]
            .as_str()
            .unwrap()
            .ends_with("uploads-busy"),
        "{}",
        refused.body
    );
    assert_eq!(refused.headers["retry-after"], "1");
    assert_eq!(
        env.counts().await,
        before,
        "a refused upload writes nothing"
    );

    // Its turn comes once the other upload is done.
    let waiting = {
        let env_app = env.app.clone();
        tokio::spawn(async move {
            send(
                &env_app,
                post_zip(
                    &upload_uri(&ns(SUB), "busy"),
                    Some(&token(SUB)),
                    handler_zip("v1"),
                    ZIP,
                ),
            )
            .await
        })
    };
    drop(held);
    let accepted = waiting.await.unwrap();
    assert_eq!(accepted.status, StatusCode::ACCEPTED, "{}", accepted.body);
    assert_eq!(
        gate.permits().available_permits(),
        1,
        "the turn is given back"
    );
}

const OCTET_STREAM: &str = "application/octet-stream";

/// What generated clients send bytes as: the same checks and answers as a
/// zip sent as `application/zip`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_sent_as_octet_stream_is_checked_and_answered_as_a_zip_is() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    assert_eq!(env.create(SUB, "bytes").await.status, StatusCode::CREATED);
    let upload = |body: Vec<u8>, content_type: &str| {
        send(
            &env.app,
            post_zip(&upload_uri(&ns, "bytes"), Some(&tok), body, content_type),
        )
    };

    let zip = handler_zip("v1");
    let first = upload(zip.clone(), OCTET_STREAM).await;
    assert_eq!(first.status, StatusCode::ACCEPTED, "{}", first.body);
    assert_eq!(first.body["version"], 1);
    assert_eq!(first.body["sha256"], sha256_hex(&zip).as_str());
    assert_eq!(first.body["files"], 2);
    assert_eq!(
        env.s3
            .blobs()
            .get(&format!("blobs/zips/{}.zip", sha256_hex(&zip)))
            .await
            .unwrap(),
        zip,
        "stored byte for byte"
    );
    assert_eq!(
        env.events_of_type(SUB, "bytes", "FunctionUploaded")
            .await
            .len(),
        1
    );

    // The same bytes as a zip: the same version, unchanged.
    let same = upload(zip.clone(), ZIP).await;
    assert_eq!(same.status, StatusCode::OK, "{}", same.body);
    assert_eq!(same.body["unchanged"], true);
    assert_eq!(same.body["version"], 1);

    // Not a zip, or a zip that is no function, is refused alike.
    let before = env.counts().await;
    let not_a_zip = upload(b"this is not a zip file".to_vec(), OCTET_STREAM).await;
    not_a_zip.assert_problem(
        "octet-stream, not a zip",
        StatusCode::UNPROCESSABLE_ENTITY,
        "invalid-archive",
    );
    assert_eq!(not_a_zip.field(), Some("body"));
    let as_zip = upload(b"this is not a zip file".to_vec(), ZIP).await;
    assert_eq!(as_zip.body["type"], not_a_zip.body["type"]);
    assert_eq!(as_zip.body["detail"], not_a_zip.body["detail"]);
    let escaping = zip_of(&[("handler.py", b"x = 1\n"), ("../evil.py", b"x = 2\n")]);
    let escaping_bytes = upload(escaping.clone(), OCTET_STREAM).await;
    let escaping_zip = upload(escaping, ZIP).await;
    assert_eq!(
        escaping_bytes.status,
        StatusCode::UNPROCESSABLE_ENTITY,
        "{}",
        escaping_bytes.body
    );
    assert_eq!(escaping_bytes.body, escaping_zip.body);
    assert_eq!(
        env.counts().await,
        before,
        "a refused upload writes nothing"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upload_of_another_content_type_is_still_415_and_writes_nothing() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    assert_eq!(env.create(SUB, "typed").await.status, StatusCode::CREATED);
    let before = env.counts().await;
    for content_type in [
        "application/json",
        "text/plain",
        "application/x-tar",
        "multipart/form-data; boundary=x",
        "",
    ] {
        let a = send(
            &env.app,
            post_zip(
                &upload_uri(&ns, "typed"),
                Some(&tok),
                handler_zip("v1"),
                content_type,
            ),
        )
        .await;
        let what = format!("Content-Type {content_type:?}");
        a.assert_problem(
            &what,
            StatusCode::UNSUPPORTED_MEDIA_TYPE,
            "unsupported-media-type",
        );
        assert_eq!(a.field(), Some("Content-Type"), "{what}");
        let detail = a.body["detail"].as_str().unwrap_or_default();
        assert!(
            detail.contains(ZIP) && detail.contains(OCTET_STREAM),
            "{what}: the detail names what is taken: {detail}"
        );
    }
    assert_eq!(
        env.counts().await,
        before,
        "a refused upload writes nothing"
    );
}

/// An upload whose body comes in `chunks`, `every` apart, and then ends
/// (or, with `stall`, never ends).
fn trickled(
    uri: &str,
    zip: Vec<u8>,
    chunks: usize,
    every: Duration,
    stall: bool,
) -> axum::http::Request<axum::body::Body> {
    let size = zip.len().div_ceil(chunks);
    let parts: Vec<Vec<u8>> = zip.chunks(size).map(<[u8]>::to_vec).collect();
    let sent = futures_util::stream::iter(parts.into_iter().enumerate()).then(
        move |(i, part)| async move {
            if i > 0 {
                tokio::time::sleep(every).await;
            }
            Ok::<_, std::io::Error>(axum::body::Bytes::from(part))
        },
    );
    let body = if stall {
        axum::body::Body::from_stream(sent.chain(futures_util::stream::pending()))
    } else {
        axum::body::Body::from_stream(sent)
    };
    request(axum::http::Method::POST, uri, Some(&token(SUB)))
        .header(axum::http::header::CONTENT_TYPE, ZIP)
        .body(body)
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn four_concurrent_ten_mib_uploads_are_all_accepted() {
    let env = Env::new().await;
    let names: Vec<String> = (0..4).map(|i| format!("big-{i}")).collect();
    for name in &names {
        assert_eq!(env.create(SUB, name).await.status, StatusCode::CREATED);
    }
    let zips: Vec<Vec<u8>> = (0..4)
        .map(|i| sless_testkit::zips::realistic_zip(10, 100 + i))
        .collect();
    for zip in &zips {
        assert!(zip.len() >= 9 << 20, "about 10 MiB: {} bytes", zip.len());
    }
    let before = env.counts().await;
    // The deadline is the test's, generous: the API's own deadlines are the
    // defaults, and none may cut these uploads short on a busy machine.
    let answers = tokio::time::timeout(
        Duration::from_secs(600),
        futures_util::future::join_all(
            names
                .iter()
                .zip(&zips)
                .map(|(name, zip)| env.upload(SUB, name, zip)),
        ),
    )
    .await
    .expect("answered within the test's deadline");
    for ((name, zip), answer) in names.iter().zip(&zips).zip(&answers) {
        assert_eq!(
            answer.status,
            StatusCode::ACCEPTED,
            "{name}: {}",
            answer.body
        );
        assert_eq!(answer.body["sha256"], sha256_hex(zip).as_str(), "{name}");
        assert_eq!(answer.body["version"], 1, "{name}");
    }
    let after = env.counts().await;
    assert_eq!(after.events, before.events + 4, "one event each");
    assert_eq!(after.blobs, before.blobs + 8, "a zip and a context each");
    assert_eq!(after.blobs_in_flight, 0, "every blob landed");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_upload_is_refused_with_408_and_writes_nothing() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "hello").await.status, StatusCode::CREATED);
    let idle = Duration::from_millis(800);
    let gate = sless_api::rest::upload::UploadGate::default();
    let app = super::proxy::app_with(&env, |s| {
        s.deadlines.upload_idle = idle;
        s.uploads = gate.clone();
    });
    let zip = sless_testkit::zips::realistic_zip(1, 7);
    let before = env.counts().await;
    let temp_before = temp_entries();
    // Half the zip arrives, then nothing more.
    let started = std::time::Instant::now();
    let stalled = trickled(
        &upload_uri(&ns(SUB), "hello"),
        zip[..zip.len() / 2].to_vec(),
        2,
        Duration::from_millis(300),
        true,
    );
    let answer = tokio::time::timeout(Duration::from_secs(30), send(&app, stalled))
        .await
        .expect("a stalled upload is answered");
    answer.assert_problem("stalled", StatusCode::REQUEST_TIMEOUT, "body-timeout");
    let detail = answer.body["detail"].as_str().unwrap_or_default();
    assert!(
        detail.contains("stalled") && detail.contains("nothing was stored"),
        "{detail}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "refused after {:?}",
        started.elapsed()
    );
    assert_eq!(env.counts().await, before, "nothing written");
    let left: Vec<_> = temp_entries().difference(&temp_before).cloned().collect();
    assert!(left.is_empty(), "temp files left: {left:?}");
    // Its turn at the gate is free again, and the whole zip goes through.
    assert_eq!(
        gate.permits().available_permits(),
        sless_api::rest::upload::UploadGate::DEFAULT_CONCURRENCY
    );
    let whole = send(
        &app,
        post_zip(&upload_uri(&ns(SUB), "hello"), Some(&token(SUB)), zip, ZIP),
    )
    .await;
    assert_eq!(whole.status, StatusCode::ACCEPTED, "{}", whole.body);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_upload_that_keeps_coming_is_accepted() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "hello").await.status, StatusCode::CREATED);
    // The body takes about 2.4 s, three times what the API allows a body
    // that stalls, and more than it allows any other request's body.
    let app = super::proxy::app_with(&env, |s| {
        s.deadlines.upload_idle = Duration::from_millis(800);
        s.deadlines.body = Duration::from_millis(800);
    });
    let zip = sless_testkit::zips::realistic_zip(1, 8);
    let started = std::time::Instant::now();
    let slow = trickled(
        &upload_uri(&ns(SUB), "hello"),
        zip.clone(),
        9,
        Duration::from_millis(300),
        false,
    );
    let answer = send(&app, slow).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    assert_eq!(answer.body["sha256"], sha256_hex(&zip).as_str());
    assert!(
        started.elapsed() >= Duration::from_millis(2400),
        "the body took {:?}",
        started.elapsed()
    );
}
