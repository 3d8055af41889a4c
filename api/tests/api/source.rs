//! `GET .../functions/{name}/source`: the current version's files as JSON,
//! read back from its build context without the generated Dockerfile.

use axum::http::StatusCode;
use serde_json::json;

use super::requests::*;
use super::support::*;

const SUB: &str = "ken@example.com";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_of_the_current_version_lists_its_files_with_text_inlined() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    assert_eq!(env.create(SUB, "src").await.status, StatusCode::CREATED);
    let png: &[u8] = &[0x89, b'P', b'N', b'G', 0x0d, 0x0a, 0x1a, 0x0a, 0, 0];
    let v1 = zip_of(&[
        ("handler.py", b"def handle(req):\n    return 'hi'\n"),
        ("lib/util.py", "X = 'é'\n".as_bytes()),
        ("static/logo.png", png),
        ("lib/Dockerfile", b"FROM mine"),
    ]);
    assert_eq!(
        env.upload(SUB, "src", &v1).await.status,
        StatusCode::ACCEPTED
    );

    let answer = env.send(get(&source_uri(&ns, "src"), Some(&tok))).await;
    assert_eq!(answer.status, StatusCode::OK, "{}", answer.body);
    assert_eq!(answer.body["version"], 1);
    assert_eq!(answer.body["sha256"], sha256_hex(&v1).as_str());
    assert_eq!(answer.body["truncated"], false);
    assert_eq!(
        answer.body["files"],
        json!([
            { "path": "handler.py", "size": 33, "binary": false, "truncated": false,
              "content": "def handle(req):\n    return 'hi'\n" },
            { "path": "lib/Dockerfile", "size": 9, "binary": false, "truncated": false,
              "content": "FROM mine" },
            { "path": "lib/util.py", "size": 9, "binary": false, "truncated": false,
              "content": "X = 'é'\n" },
            { "path": "static/logo.png", "size": 10, "binary": true, "truncated": false },
        ]),
        "sorted, the generated Dockerfile left out, binary not inlined"
    );

    // A new upload: the source follows the current version.
    let v2 = zip_of(&[("handler.py", b"def handle(req):\n    return 'v2'\n")]);
    assert_eq!(
        env.upload(SUB, "src", &v2).await.status,
        StatusCode::ACCEPTED
    );
    let answer = env.send(get(&source_uri(&ns, "src"), Some(&tok))).await;
    assert_eq!(answer.body["version"], 2);
    assert_eq!(answer.body["files"].as_array().unwrap().len(), 1);
}

/// `n` bytes of pseudo-random lower-case letters: text that does not
/// compress like a bomb.
fn letters(n: usize, seed: u32) -> String {
    (0..n as u32)
        .map(|i| (b'a' + ((i ^ seed).wrapping_mul(2_654_435_761) >> 27) as u8 % 26) as char)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn text_past_the_inline_cap_is_listed_without_content_and_marked_truncated() {
    let env = Env::new().await;
    let ns = ns(SUB);
    assert_eq!(env.create(SUB, "large").await.status, StatusCode::CREATED);
    let a = letters(700 * 1024, 1);
    let b = letters(700 * 1024, 2);
    let zip = zip_of(&[
        ("a.txt", a.as_bytes()),
        ("b.txt", b.as_bytes()),
        ("c.py", b"c = 1\n"),
    ]);
    assert_eq!(
        env.upload(SUB, "large", &zip).await.status,
        StatusCode::ACCEPTED
    );
    let answer = env
        .send(get(&source_uri(&ns, "large"), Some(&token(SUB))))
        .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert_eq!(answer.body["truncated"], true);
    assert_eq!(answer.body["inline_limit"], 1024 * 1024);
    let files = answer.body["files"].as_array().unwrap();
    assert_eq!(files[0]["content"].as_str().map(str::len), Some(700 * 1024));
    assert_eq!(files[1]["truncated"], true);
    assert_eq!(files[1]["size"], 700 * 1024);
    assert!(files[1].get("content").is_none(), "not inlined");
    assert_eq!(
        files[2]["content"], "c = 1\n",
        "small files after it still fit"
    );
    assert_eq!(answer.body["inlined_bytes"], 700 * 1024 + 6);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_source_before_an_upload_nor_for_a_missing_function() {
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    assert_eq!(env.create(SUB, "empty").await.status, StatusCode::CREATED);
    for (what, name) in [
        ("no upload yet", "empty"),
        ("no such function", "ghost"),
        ("invalid name", "Ghost"),
    ] {
        assert_refused(
            &env,
            what,
            get(&source_uri(&ns, name), Some(&tok)),
            StatusCode::NOT_FOUND,
            "not-found",
            None,
        )
        .await;
    }
}
