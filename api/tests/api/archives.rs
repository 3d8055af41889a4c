//! Uploads of archives that break a rule: each refused with a problem
//! document naming what is wrong (the entry, where there is one), writing
//! nothing: no event, no work item, no idempotency key, no S3 object, no
//! temp file. The rows are those of the archive rules' unit table
//! (domain/src/archive/tests.rs), through `POST .../upload`.

use std::collections::BTreeSet;
use std::io::Write;
use std::time::Duration;

use axum::http::StatusCode;
use sless_api::{AppState, Auth};
use sless_domain::archive::context_modes;
use zip::System;
use zip::write::SimpleFileOptions;

use super::support::*;

const SUB: &str = "mallory@example.com";
const MIB: usize = 1024 * 1024;
const INVALID: StatusCode = StatusCode::UNPROCESSABLE_ENTITY;

struct Row {
    what: &'static str,
    zip: Vec<u8>,
    status: StatusCode,
    kind: &'static str,
    /// Texts the problem's detail must show: the entry at fault, why, or
    /// what the limit was.
    shows: &'static [&'static str],
}

fn row(what: &'static str, zip: Vec<u8>, shows: &'static [&'static str]) -> Row {
    Row {
        what,
        zip,
        status: INVALID,
        kind: "invalid-archive",
        shows,
    }
}

fn opts() -> SimpleFileOptions {
    SimpleFileOptions::default()
}

fn stored() -> SimpleFileOptions {
    opts().compression_method(zip::CompressionMethod::Stored)
}

/// Options for an entry made on Unix with `mode` (type and permission bits).
fn mode(mode: u32) -> SimpleFileOptions {
    opts().system(System::Unix).external_attributes(mode << 16)
}

/// A handler and one more file, `name`.
fn with_handler(name: &str) -> Vec<u8> {
    zip_of(&[
        ("handler.py", b"def handle(req):\n    return 1\n"),
        (name, b"x"),
    ])
}

fn with_mode(name: &str, m: u32) -> Vec<u8> {
    zip_with(|w| {
        w.start_file("handler.py", opts()).unwrap();
        w.write_all(b"x = 1\n").unwrap();
        w.start_file(name, mode(m)).unwrap();
        w.write_all(b"x").unwrap();
    })
}

fn raw_name(name: &[u8]) -> Vec<u8> {
    zip_with(|w| {
        w.start_file_with_options(opts().name(name)).unwrap();
        w.write_all(b"x").unwrap();
    })
}

fn u16_at(b: &[u8], at: usize) -> usize {
    u16::from_le_bytes([b[at], b[at + 1]]) as usize
}

fn u32_at(b: &[u8], at: usize) -> usize {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap()) as usize
}

fn put_u16(b: &mut [u8], at: usize, v: u16) {
    b[at..at + 2].copy_from_slice(&v.to_le_bytes());
}

fn put_u32(b: &mut [u8], at: usize, v: u32) {
    b[at..at + 4].copy_from_slice(&v.to_le_bytes());
}

/// Offsets of entry `index`'s local and central directory headers (in a
/// zip without a comment).
fn headers(zip: &[u8], index: usize) -> (usize, usize) {
    let end = zip.len() - 22;
    assert_eq!(&zip[end..end + 4], b"PK\x05\x06");
    let mut cd = u32_at(zip, end + 16);
    for _ in 0..index {
        cd += 46 + u16_at(zip, cd + 28) + u16_at(zip, cd + 30) + u16_at(zip, cd + 32);
    }
    let local = u32_at(zip, cd + 42);
    assert_eq!(&zip[local..local + 4], b"PK\x03\x04");
    (local, cd)
}

fn data_at(zip: &[u8], index: usize) -> usize {
    let (local, _) = headers(zip, index);
    local + 30 + u16_at(zip, local + 26) + u16_at(zip, local + 28)
}

/// Sets general-purpose flag bits of entry `index` in both its headers.
fn set_flags(zip: &mut [u8], index: usize, bits: u16) {
    let (local, cd) = headers(zip, index);
    for at in [local + 6, cd + 8] {
        let v = u16_at(zip, at) as u16 | bits;
        put_u16(zip, at, v);
    }
}

fn set_method_crc_size(zip: &mut [u8], index: usize, method: u16, crc: u32, size: u32) {
    let (local, cd) = headers(zip, index);
    put_u16(zip, local + 8, method);
    put_u32(zip, local + 14, crc);
    put_u32(zip, local + 22, size);
    put_u16(zip, cd + 10, method);
    put_u32(zip, cd + 16, crc);
    put_u32(zip, cd + 24, size);
}

fn replace_all(zip: &mut [u8], from: &[u8], to: &[u8]) {
    let mut at = 0;
    while let Some(i) = zip[at..].windows(from.len()).position(|w| w == from) {
        zip[at + i..at + i + to.len()].copy_from_slice(to);
        at += i + to.len();
    }
}

/// Raw deflate of `1 + 258 * matches` zeros with the fixed Huffman code: a
/// literal zero, then matches of 258 bytes at distance 1 (13 bits each, a
/// ratio near 160). Written bit by bit, never inflated here.
fn deflated_zeros(matches: usize) -> (Vec<u8>, u64) {
    struct Bits {
        out: Vec<u8>,
        acc: u64,
        n: u32,
    }
    impl Bits {
        fn put(&mut self, value: u64, len: u32) {
            self.acc |= value << self.n;
            self.n += len;
            while self.n >= 8 {
                self.out.push(self.acc as u8);
                self.acc >>= 8;
                self.n -= 8;
            }
        }
        /// A Huffman code goes in most significant bit first.
        fn code(&mut self, code: u64, len: u32) {
            self.put(code.reverse_bits() >> (64 - len), len);
        }
    }
    let mut b = Bits {
        out: Vec::with_capacity(matches * 13 / 8 + 8),
        acc: 0,
        n: 0,
    };
    b.put(1, 1); // the final block
    b.put(1, 2); // fixed Huffman codes
    b.code(0b0011_0000, 8); // literal 0
    for _ in 0..matches {
        b.code(0b1100_0101, 8); // length 258
        b.code(0, 5); // distance 1
    }
    b.code(0, 7); // end of block
    b.put(0, 7); // flush
    (b.out, 1 + 258 * matches as u64)
}

/// A zip with entries of `(name, stored bytes)` and one of crafted zeros:
/// its header declares the size honestly, its CRC is left 0 (it is refused
/// before the reader gets to its end and checks it).
fn zip_with_zeros(stored_files: &[(&str, &[u8])], zeros: &str, matches: usize) -> Vec<u8> {
    let (deflate, size) = deflated_zeros(matches);
    let mut zip = zip_with(|w| {
        for (name, data) in stored_files {
            w.start_file(*name, stored()).unwrap();
            w.write_all(data).unwrap();
        }
        w.start_file(zeros, stored()).unwrap();
        w.write_all(&deflate).unwrap();
    });
    let size = u32::try_from(size).unwrap();
    set_method_crc_size(&mut zip, stored_files.len(), 8, 0, size);
    zip
}

/// Bytes that do not compress.
fn noise(len: usize) -> Vec<u8> {
    let mut x = 0x9e37_79b9_7f4a_7c15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn path_rows() -> Vec<Row> {
    let utf8_flagged = {
        let mut z = raw_name(b"caf\xe9.py");
        set_flags(&mut z, 0, 1 << 11);
        z
    };
    let long_name = format!("{}x.py", "d/".repeat(520));
    let long_part = format!("{}.py", "a".repeat(253));
    vec![
        row("../", with_handler("../evil.py"), &["../evil.py", "'..'"]),
        row(
            "inner ../",
            with_handler("lib/../../evil.py"),
            &["lib/../../evil.py", "'..'"],
        ),
        row(
            "..\\",
            with_handler("..\\evil.py"),
            &["evil.py", "backslash"],
        ),
        row(
            "backslash separators",
            with_handler("lib\\util.py"),
            &["lib\\\\util.py", "backslash"],
        ),
        row(
            "drive letter",
            with_handler("C:/evil.py"),
            &["C:/evil.py", "drive letter"],
        ),
        row(
            "drive-relative",
            with_handler("c:evil.py"),
            &["c:evil.py", "drive letter"],
        ),
        row(
            "..././",
            with_handler("..././evil.py"),
            &["..././evil.py", "only of dots"],
        ),
        row(
            "./",
            with_handler("./handler2.py"),
            &["./handler2.py", "only of dots"],
        ),
        row(
            "leading /",
            with_handler("/etc/cron.d/evil"),
            &["/etc/cron.d/evil", "absolute"],
        ),
        row(
            "UNC path",
            with_handler("//server/share/x"),
            &["//server/share/x", "absolute"],
        ),
        row(
            "empty component",
            with_handler("lib//util.py"),
            &["lib//util.py", "empty path components"],
        ),
        row(
            "NUL",
            with_handler("evil.py\0.txt"),
            &["evil.py\\0.txt", "NUL"],
        ),
        row(
            "escape sequence",
            with_handler("a\x1b[31m.py"),
            &["a\\u{1b}[31m.py", "control characters"],
        ),
        row(
            "newline",
            with_handler("a\nb.py"),
            &["a\\nb.py", "control characters"],
        ),
        row(
            "not UTF-8",
            raw_name(b"caf\xe9.py"),
            &["caf\u{fffd}.py", "UTF-8"],
        ),
        row(
            "not UTF-8 despite the UTF-8 flag",
            utf8_flagged,
            &["caf\u{fffd}.py", "UTF-8"],
        ),
        row("empty name", raw_name(b""), &["the name is empty"]),
        row(
            "over 1024 bytes",
            with_handler(&long_name),
            &["longer than 1024"],
        ),
        row(
            "a component over 255 bytes",
            with_handler(&long_part),
            &["255"],
        ),
        row(
            "Dockerfile",
            with_handler("Dockerfile"),
            &["Dockerfile", "reserved"],
        ),
        row(
            "dockerfile",
            with_handler("dockerfile"),
            &["dockerfile", "reserved"],
        ),
    ]
}

fn type_rows() -> Vec<Row> {
    let symlink = zip_with(|w| {
        w.start_file("handler.py", opts()).unwrap();
        w.write_all(b"x = 1\n").unwrap();
        w.add_symlink("secrets", "/etc/shadow", opts()).unwrap();
    });
    let encrypted = {
        let mut z = with_handler("secret.py");
        set_flags(&mut z, 1, 1);
        z
    };
    let dir_with_data = zip_with(|w| {
        w.start_file("handler.py", opts()).unwrap();
        w.write_all(b"x = 1\n").unwrap();
        w.start_file("lib/", mode(0o040755)).unwrap();
        w.write_all(b"hidden bytes").unwrap();
    });
    vec![
        row("symlink", symlink, &["secrets", "symbolic links"]),
        row(
            "character device",
            with_mode("tty", 0o020644),
            &["tty", "device files"],
        ),
        row(
            "block device",
            with_mode("sda", 0o060644),
            &["sda", "device files"],
        ),
        row("FIFO", with_mode("pipe", 0o010644), &["pipe", "FIFO"]),
        row("socket", with_mode("sock", 0o140755), &["sock", "sockets"]),
        row(
            "no known type (zip has no hard links)",
            with_mode("link", 0o170644),
            &["link", "only regular files and directories"],
        ),
        row(
            "a directory holding data",
            dir_with_data,
            &["lib/", "holds data"],
        ),
        row("encrypted", encrypted, &["secret.py", "encrypted"]),
    ]
}

fn duplicate_rows() -> Vec<Row> {
    let exact = {
        let mut z = zip_of(&[("handler.py", b"x = 1\n"), ("a.py", b"1"), ("b.py", b"2")]);
        replace_all(&mut z, b"b.py", b"a.py");
        z
    };
    vec![
        row("the same name twice", exact, &["a.py", "appears twice"]),
        row(
            "case",
            zip_of(&[("a.py", b"1"), ("A.py", b"2")]),
            &["A.py", "a.py", "case"],
        ),
        row(
            "NFC and NFD",
            zip_of(&[("caf\u{e9}.py", b"1"), ("cafe\u{301}.py", b"2")]),
            &["cafe\\u{301}.py", "caf\u{e9}.py", "normalisation"],
        ),
        row(
            "a file that is a directory",
            zip_of(&[("a", b"1"), ("a/b.py", b"2")]),
            &["a/b.py", "also used as a directory"],
        ),
        row(
            "directories differing in case",
            zip_of(&[("Lib/x.py", b"1"), ("lib/y.py", b"2")]),
            &["lib/y.py", "Lib/x.py", "case"],
        ),
    ]
}

fn size_and_corruption_rows() -> Vec<Row> {
    let only_dirs = zip_with(|w| {
        w.add_directory("lib/", opts()).unwrap();
        w.add_directory("lib/sub/", opts()).unwrap();
    });
    let many = zip_with(|w| {
        for i in 0..=10_000 {
            w.start_file(format!("f{i}"), stored()).unwrap();
        }
    });
    // 2 MiB that does not compress, and 260 MiB of zeros in about 1.7 MiB:
    // a ratio near 70, so the unpacked size is what refuses it.
    let noise = noise(2 * MIB);
    let over_250_mib = zip_with_zeros(&[("noise.bin", &noise)], "zeros.bin", 260 * MIB / 258);
    // 20 MiB of zeros in about 130 KB.
    let bomb = zip_with_zeros(&[("handler.py", b"x = 1\n")], "zeros.bin", 20 * MIB / 258);
    let good = zip_of(&[
        (
            "handler.py",
            &b"def handle(req):\n    return 'hi'\n".repeat(40),
        ),
        ("lib/util.py", b"X = 1\n"),
    ]);
    let stored_good = zip_with(|w| {
        w.start_file("handler.py", stored()).unwrap();
        w.write_all(b"def handle(req):\n    return 'hi'\n").unwrap();
    });
    let flip = |z: &[u8], at: usize| {
        let mut z = z.to_vec();
        z[at] ^= 0x20;
        z
    };
    let (_, cd1) = headers(&good, 1);
    let mut rows = vec![
        row("empty zip", zip_of(&[]), &["no files"]),
        row("only directories", only_dirs, &["no files"]),
        row("10,001 entries", many, &["10001", "10000"]),
        row(
            "over 250 MiB unpacked",
            over_250_mib,
            &["more than 262144000 bytes"],
        ),
        row("ratio over 100", bomb, &["decompression bomb"]),
        Row {
            status: StatusCode::PAYLOAD_TOO_LARGE,
            kind: "archive-too-large",
            ..row("over 50 MiB", vec![0u8; 50 * MIB + 1], &["52428800"])
        },
        row("not a zip", b"this is not a zip file".to_vec(), &["zip"]),
    ];
    for cut in [
        good.len() / 4,
        good.len() / 2,
        good.len() - 23,
        good.len() - 1,
    ] {
        rows.push(row("truncated", good[..cut].to_vec(), &["zip"]));
    }
    rows.extend([
        row(
            "a flipped central directory signature",
            flip(&good, cd1),
            &["zip"],
        ),
        row(
            "a flipped name in the central directory",
            flip(&good, cd1 + 46),
            &["Lib/util.py", "mismatch"],
        ),
        row(
            "a flipped byte in stored data (CRC mismatch)",
            flip(&stored_good, data_at(&stored_good, 0) + 3),
            &["handler.py", "checksum"],
        ),
        row(
            "a flipped byte in deflated data",
            flip(&good, data_at(&good, 0) + 20),
            &["handler.py"],
        ),
    ]);
    rows
}

/// Entries of the temp dir that a spooled upload would leave (`sless*`
/// or `tempfile`'s `.tmp*`), less the scratch dirs of the test kit (made
/// by tests running beside this one) and of benchmarks.
pub(super) fn temp_entries() -> BTreeSet<String> {
    std::fs::read_dir(std::env::temp_dir())
        .unwrap()
        .flatten()
        .map(|e| e.file_name().to_string_lossy().into_owned())
        .filter(|n| {
            (n.starts_with("sless") || n.starts_with(".tmp"))
                && !n.starts_with("sless-test-")
                && !n.starts_with("sless-bench-")
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_archive_rule_refuses_its_upload_writing_nothing() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "hello").await.status, StatusCode::CREATED);
    // The default limits, with more time to answer: inflating 250 MiB takes
    // an unoptimised test build several seconds (a release build a few
    // hundred milliseconds), past the answer deadline of a 4 MiB upload.
    let mut state = AppState::new(
        env.db.pool.clone(),
        env.s3.blobs(),
        Auth::hs256(SECRET, None, None),
    );
    assert_eq!(state.limits.max_unpacked_bytes, 250 * MIB as u64);
    state.deadlines.request = Duration::from_secs(120);
    let app = sless_api::router(state);
    let uri = upload_uri(&ns(SUB), "hello");
    let tok = token(SUB);
    let rows: Vec<Row> = [
        path_rows(),
        type_rows(),
        duplicate_rows(),
        size_and_corruption_rows(),
    ]
    .into_iter()
    .flatten()
    .collect();
    let before = env.counts().await;
    let temp_before = temp_entries();
    let count = rows.len();
    for r in rows {
        let answer = send(&app, post_zip(&uri, Some(&tok), r.zip, ZIP)).await;
        answer.assert_problem(r.what, r.status, r.kind);
        let detail = answer.body["detail"].as_str().unwrap_or_default();
        for shows in r.shows {
            assert!(
                detail.contains(shows),
                "{}: the detail {detail:?} should show {shows:?}",
                r.what
            );
        }
        assert_eq!(env.counts().await, before, "{}: nothing written", r.what);
        let left: Vec<_> = temp_entries().difference(&temp_before).cloned().collect();
        assert!(left.is_empty(), "{}: temp files left: {left:?}", r.what);
    }
    assert!(count >= 45, "{count} rows");

    // The control: a good zip to the same function is taken.
    let ok = env.upload(SUB, "hello", &handler_zip("hi")).await;
    assert_eq!(ok.status, StatusCode::ACCEPTED, "{}", ok.body);
    assert_ne!(env.counts().await, before);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_build_context_keeps_only_normalised_modes() {
    let env = Env::new().await;
    assert_eq!(env.create(SUB, "modes").await.status, StatusCode::CREATED);
    let zip = zip_with(|w| {
        for (name, m) in [
            ("handler.py", 0o100644),
            ("run.sh", 0o104755),
            ("bin/tool", 0o106777),
            ("private", 0o100600),
            ("shared", 0o100666),
        ] {
            w.start_file(name, mode(m)).unwrap();
            w.write_all(b"x = 1\n").unwrap();
        }
        w.add_directory("tmp/", mode(0o041777)).unwrap();
        w.start_file("tmp/keep", mode(0o102640)).unwrap();
    });
    let answer = env.upload(SUB, "modes", &zip).await;
    assert_eq!(answer.status, StatusCode::ACCEPTED, "{}", answer.body);
    let uploaded = env.events_of_type(SUB, "modes", "FunctionUploaded").await;
    let key = uploaded[0]["context_key"].as_str().expect("a context key");
    let context = env.s3.blobs().get(key).await.expect("the stored context");
    let modes = context_modes(&context).unwrap();
    let paths: Vec<_> = modes.keys().map(String::as_str).collect();
    assert_eq!(
        paths,
        [
            "Dockerfile",
            "bin/",
            "bin/tool",
            "handler.py",
            "private",
            "run.sh",
            "shared",
            "tmp/",
            "tmp/keep"
        ]
    );
    for (path, m) in &modes {
        if path.ends_with('/') {
            assert_eq!(*m, 0o040755, "{path}: directories are 0755");
        } else {
            assert!(
                [0o100644, 0o100755].contains(m),
                "{path}: files are 0644 or 0755, not {m:o}"
            );
        }
    }
    assert_eq!(modes["private"], 0o100644);
    assert_eq!(modes["shared"], 0o100644);
    assert_eq!(modes["tmp/keep"], 0o100644, "setgid dropped");
}
