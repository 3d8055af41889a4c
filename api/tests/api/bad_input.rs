//! Bad input gets a clear 4xx problem and writes nothing: no event, no work
//! item, no idempotency key, no blob (DESIGN §10).

use std::io::Write;

use axum::http::{Method, StatusCode, header};
use serde_json::json;
use zip::write::SimpleFileOptions;

use super::support::*;

const SUB: &str = "dave@example.com";

pub(super) struct Case {
    pub what: &'static str,
    /// Extra request headers.
    pub headers: Vec<(&'static str, String)>,
    pub body: Vec<u8>,
    pub status: StatusCode,
    pub kind: &'static str,
    pub field: Option<&'static str>,
}

pub(super) fn case(
    what: &'static str,
    body: impl Into<Vec<u8>>,
    status: StatusCode,
    kind: &'static str,
    field: Option<&'static str>,
) -> Case {
    Case {
        what,
        headers: vec![],
        body: body.into(),
        status,
        kind,
        field,
    }
}

/// Sends each case as a POST to `uri` and checks its problem document, its
/// offending field, and that nothing was written; returns the counts from before.
async fn assert_refused_writing_nothing(
    env: &Env,
    uri: &str,
    tok: &str,
    content_type: Option<&str>,
    cases: Vec<Case>,
) -> Counts {
    assert_refused_writing_nothing_with(env, Method::POST, uri, tok, content_type, cases).await
}

/// `assert_refused_writing_nothing` with any method.
pub(super) async fn assert_refused_writing_nothing_with(
    env: &Env,
    method: Method,
    uri: &str,
    tok: &str,
    content_type: Option<&str>,
    cases: Vec<Case>,
) -> Counts {
    let before = env.counts().await;
    for c in cases {
        let mut req = request(method.clone(), uri, Some(tok));
        if let Some(ct) = content_type {
            req = req.header(header::CONTENT_TYPE, ct);
        }
        for (name, value) in &c.headers {
            req = req.header(*name, value);
        }
        let answer = env
            .send(req.body(axum::body::Body::from(c.body)).unwrap())
            .await;
        answer.assert_problem(c.what, c.status, c.kind);
        if let Some(field) = c.field {
            assert_eq!(
                answer.field(),
                Some(field),
                "{}: the offending field; {}",
                c.what,
                answer.body
            );
        }
        assert_eq!(env.counts().await, before, "{}: nothing written", c.what);
    }
    before
}

/// A create body: the minimal valid spec with `change` merged over it.
pub(super) fn create_body(change: serde_json::Value) -> Vec<u8> {
    let mut body = spec("good-name");
    for (k, v) in change.as_object().unwrap() {
        body[k] = v.clone();
    }
    body.to_string().into_bytes()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_create_requests_are_refused_and_write_nothing() {
    const INVALID: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;
    let env = Env::new().await;
    let uri = functions_uri(&ns(SUB));
    let tok = token(SUB);
    let missing_name = {
        let mut b = spec("x");
        b.as_object_mut().unwrap().remove("name");
        b.to_string()
    };
    let cases = vec![
        case(
            "malformed JSON",
            r#"{"name": "x","#,
            StatusCode::BAD_REQUEST,
            "malformed-request",
            None,
        ),
        case(
            "not JSON at all",
            "name=x&runtime=python3.11",
            StatusCode::BAD_REQUEST,
            "malformed-request",
            None,
        ),
        case(
            "empty body",
            "",
            StatusCode::BAD_REQUEST,
            "malformed-request",
            None,
        ),
        case(
            "a JSON array",
            "[1, 2]",
            INVALID,
            "invalid-field",
            Some("body"),
        ),
        case(
            "unknown field",
            create_body(json!({ "colour": "blue" })),
            INVALID,
            "invalid-field",
            Some("colour"),
        ),
        case(
            "missing name",
            missing_name,
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name with upper case and _",
            create_body(json!({ "name": "My_Func" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name of 64 characters",
            create_body(json!({ "name": "a".repeat(64) })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name starting with -",
            create_body(json!({ "name": "-a" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name ending with -",
            create_body(json!({ "name": "a-" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "empty name",
            create_body(json!({ "name": "" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name with a dot",
            create_body(json!({ "name": "a.b" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "unknown runtime python2",
            create_body(json!({ "runtime": "python2" })),
            INVALID,
            "invalid-field",
            Some("runtime"),
        ),
        case(
            "runtime in the wrong case",
            create_body(json!({ "runtime": "Python3.11" })),
            INVALID,
            "invalid-field",
            Some("runtime"),
        ),
        case(
            "entrypoint without a function",
            create_body(json!({ "entrypoint": "handler" })),
            INVALID,
            "invalid-field",
            Some("entrypoint"),
        ),
        case(
            "entrypoint with a path",
            create_body(json!({ "entrypoint": "../x.handle" })),
            INVALID,
            "invalid-field",
            Some("entrypoint"),
        ),
        case(
            "memory 1 MB",
            create_body(json!({ "memory_mb": 1 })),
            INVALID,
            "invalid-field",
            Some("memory_mb"),
        ),
        case(
            "memory 1 TB",
            create_body(json!({ "memory_mb": 1_000_000 })),
            INVALID,
            "invalid-field",
            Some("memory_mb"),
        ),
        case(
            "a negative memory_mb",
            create_body(json!({ "memory_mb": -5 })),
            INVALID,
            "invalid-field",
            Some("memory_mb"),
        ),
        case(
            "an env var value that is not a string",
            create_body(json!({ "env_vars": { "A": 1 } })),
            INVALID,
            "invalid-field",
            Some("env_vars.A"),
        ),
        case(
            "timeout 0",
            create_body(json!({ "timeout_sec": 0 })),
            INVALID,
            "invalid-field",
            Some("timeout_sec"),
        ),
        case(
            "env var name 1X",
            create_body(json!({ "env_vars": { "1X": "v" } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        case(
            "env var name with -",
            create_body(json!({ "env_vars": { "A-B": "v" } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        case(
            "reserved env var SLESS_",
            create_body(json!({ "env_vars": { "SLESS_TOKEN": "v" } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        case(
            "name of 41 characters",
            create_body(json!({ "name": "a".repeat(41) })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name starting with a digit",
            create_body(json!({ "name": "1st" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name with a Cyrillic look-alike of e",
            create_body(json!({ "name": "h\u{435}llo" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name with a fullwidth letter",
            create_body(json!({ "name": "\u{ff41}bc" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name with a slash",
            create_body(json!({ "name": "a/b" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name ..",
            create_body(json!({ "name": ".." })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "name with a NUL byte",
            create_body(json!({ "name": "a\u{0}b" })),
            INVALID,
            "invalid-field",
            Some("name"),
        ),
        case(
            "unknown runtime go1.19",
            create_body(json!({ "runtime": "go1.19" })),
            INVALID,
            "invalid-field",
            Some("runtime"),
        ),
        case(
            "runtime that is not a string",
            create_body(json!({ "runtime": 3 })),
            INVALID,
            "invalid-field",
            Some("runtime"),
        ),
        case(
            "entrypoint with a NUL byte",
            create_body(json!({ "entrypoint": "handler.ha\u{0}ndle" })),
            INVALID,
            "invalid-field",
            Some("entrypoint"),
        ),
        case(
            "memory 63 MB",
            create_body(json!({ "memory_mb": 63 })),
            INVALID,
            "invalid-field",
            Some("memory_mb"),
        ),
        case(
            "memory 4097 MB",
            create_body(json!({ "memory_mb": 4097 })),
            INVALID,
            "invalid-field",
            Some("memory_mb"),
        ),
        case(
            "timeout 901 s",
            create_body(json!({ "timeout_sec": 901 })),
            INVALID,
            "invalid-field",
            Some("timeout_sec"),
        ),
        case(
            "timeout 1.5 s",
            create_body(json!({ "timeout_sec": 1.5 })),
            INVALID,
            "invalid-field",
            Some("timeout_sec"),
        ),
        case(
            "max_instances 0",
            create_body(json!({ "max_instances": 0 })),
            INVALID,
            "invalid-field",
            Some("max_instances"),
        ),
        case(
            "max_instances 101",
            create_body(json!({ "max_instances": 101 })),
            INVALID,
            "invalid-field",
            Some("max_instances"),
        ),
        case(
            "min_instances above max_instances",
            create_body(json!({ "min_instances": 3, "max_instances": 2 })),
            INVALID,
            "invalid-field",
            Some("min_instances"),
        ),
        case(
            "min_instances above the default max_instances",
            create_body(json!({ "min_instances": 11 })),
            INVALID,
            "invalid-field",
            Some("min_instances"),
        ),
        case(
            "a negative min_instances",
            create_body(json!({ "min_instances": -1 })),
            INVALID,
            "invalid-field",
            Some("min_instances"),
        ),
        case(
            "concurrency 0",
            create_body(json!({ "concurrency": 0 })),
            INVALID,
            "invalid-field",
            Some("concurrency"),
        ),
        case(
            "concurrency 1001",
            create_body(json!({ "concurrency": 1001 })),
            INVALID,
            "invalid-field",
            Some("concurrency"),
        ),
        case(
            "concurrency as a string",
            create_body(json!({ "concurrency": "1" })),
            INVALID,
            "invalid-field",
            Some("concurrency"),
        ),
        case(
            "reserved env var PORT",
            create_body(json!({ "env_vars": { "PORT": "8080" } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        case(
            "reserved env var KUBERNETES_SERVICE_HOST",
            create_body(json!({ "env_vars": { "KUBERNETES_SERVICE_HOST": "x" } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        case(
            "env var name with a NUL byte",
            create_body(json!({ "env_vars": { "A\u{0}": "v" } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        case(
            "env var name with a non-ASCII letter",
            create_body(json!({ "env_vars": { "\u{c4}PFEL": "v" } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        case(
            "env var value with a NUL byte",
            create_body(json!({ "env_vars": { "A": "x\u{0}y" } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        case(
            "env var value over 32 KiB",
            create_body(json!({ "env_vars": { "A": "x".repeat(32 * 1024 + 1) } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        case(
            "env var values over 128 KiB together",
            create_body(json!({ "env_vars": {
                "A": "x".repeat(32 * 1024), "B": "x".repeat(32 * 1024),
                "C": "x".repeat(32 * 1024), "D": "x".repeat(32 * 1024), "E": "x"
            } })),
            INVALID,
            "invalid-field",
            Some("env_vars"),
        ),
        Case {
            headers: vec![("idempotency-key", "k".repeat(256))],
            ..case(
                "Idempotency-Key of 256 characters",
                create_body(json!({})),
                INVALID,
                "invalid-field",
                Some("Idempotency-Key"),
            )
        },
    ];
    let before =
        assert_refused_writing_nothing(&env, &uri, &tok, Some("application/json"), cases).await;
    // The control: the base body the cases are made from is accepted.
    let good = env
        .send(post_json(&uri, Some(&tok), &spec("good-name").to_string()))
        .await;
    assert_eq!(good.status, StatusCode::CREATED, "{}", good.body);
    assert_ne!(env.counts().await, before);
}

fn zip_of_symlink() -> Vec<u8> {
    zip_with(|w| {
        w.start_file("handler.py", SimpleFileOptions::default())
            .unwrap();
        w.write_all(b"def handle(req):\n    return 'x'\n").unwrap();
        w.add_symlink("secrets", "/etc/shadow", SimpleFileOptions::default())
            .unwrap();
    })
}

/// One file of 20 MiB of zeros: deflates to about 20 KB, a ratio near 1000.
fn zip_bomb() -> Vec<u8> {
    let zeros = vec![0u8; 20 * 1024 * 1024];
    let bomb = zip_of(&[("handler.py", b"x = 1\n"), ("zeros.bin", &zeros)]);
    assert!(
        bomb.len() < 200 * 1024,
        "the bomb compresses well ({} bytes)",
        bomb.len()
    );
    bomb
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_uploads_are_refused_and_write_nothing() {
    const INVALID: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;
    let env = Env::new().await;
    let ns = ns(SUB);
    let tok = token(SUB);
    assert_eq!(env.create(SUB, "hello").await.status, StatusCode::CREATED);
    let good = handler_zip("hi");
    let ct = |v: &str| vec![("content-type", v.to_owned())];

    let cases = vec![
        Case {
            headers: ct("text/plain"),
            ..case(
                "wrong content type",
                good.clone(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                Some("Content-Type"),
            )
        },
        Case {
            headers: vec![],
            ..case(
                "no content type",
                good.clone(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                Some("Content-Type"),
            )
        },
        Case {
            headers: ct("multipart/form-data; boundary=x"),
            ..case(
                "multipart",
                good.clone(),
                StatusCode::UNSUPPORTED_MEDIA_TYPE,
                "unsupported-media-type",
                Some("Content-Type"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "not a zip",
                "this is not a zip file".as_bytes(),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "truncated zip",
                good[..good.len() / 2].to_vec(),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "empty body",
                Vec::new(),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "entry ../evil.py",
                zip_of(&[("../evil.py", b"x")]),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "entry lib/../../evil.py",
                zip_of(&[("lib/../../evil.py", b"x")]),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "entry /abs.py",
                zip_of(&[("/abs.py", b"x")]),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "entry C:/evil.py",
                zip_of(&[("C:/evil.py", b"x")]),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "entry with a backslash",
                zip_of(&[("..\\evil.py", b"x")]),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "symlink entry",
                zip_of_symlink(),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "Dockerfile at the root",
                zip_of(&[("handler.py", b"x"), ("Dockerfile", b"FROM scratch")]),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "empty zip",
                zip_of(&[]),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "zip of directories only",
                zip_with(|w| {
                    w.add_directory("lib/", SimpleFileOptions::default())
                        .unwrap()
                }),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        Case {
            headers: ct(ZIP),
            ..case(
                "decompression bomb",
                zip_bomb(),
                INVALID,
                "invalid-archive",
                Some("body"),
            )
        },
        // Over the limit: no need for a valid zip, the size alone refuses it.
        Case {
            headers: ct(ZIP),
            ..case(
                "50 MiB + 1 byte",
                vec![0u8; 50 * 1024 * 1024 + 1],
                StatusCode::PAYLOAD_TOO_LARGE,
                "archive-too-large",
                None,
            )
        },
    ];
    let uri = upload_uri(&ns, "hello");
    let before = assert_refused_writing_nothing(&env, &uri, &tok, None, cases).await;

    // A valid zip to a function that does not exist.
    let answer = env
        .send(post_zip(
            &upload_uri(&ns, "ghost"),
            Some(&tok),
            good.clone(),
            ZIP,
        ))
        .await;
    answer.assert_problem(
        "upload to a missing function",
        StatusCode::NOT_FOUND,
        "not-found",
    );
    assert_eq!(
        env.counts().await,
        before,
        "upload to a missing function: nothing written"
    );

    // The control: the good zip is accepted where the cases were refused.
    let ok = env.send(post_zip(&uri, Some(&tok), good, ZIP)).await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{}", ok.body);
    assert_ne!(env.counts().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oversized_create_body_is_a_413_problem() {
    let env = Env::new().await;
    let before = env.counts().await;
    let mut body = spec("big");
    body["entrypoint"] = json!("x".repeat(2 * 1024 * 1024));
    let answer = env
        .send(post_json(
            &functions_uri(&ns(SUB)),
            Some(&token(SUB)),
            &body.to_string(),
        ))
        .await;
    answer.assert_problem(
        "2 MiB create body",
        StatusCode::PAYLOAD_TOO_LARGE,
        "payload-too-large",
    );
    assert_eq!(env.counts().await, before);
}
