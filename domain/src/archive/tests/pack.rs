//! `pack_zip`: the rules of `validate_zip` and the context of
//! `build_context`, in one pass.

use std::io::Write;

use super::super::inflate::BUFFER_BYTES;
use super::bomb::peak_memory;
use super::*;

/// Packs `zip`, adding up what it reported inflating.
fn packed(zip: &[u8], limits: &ArchiveLimits) -> (Result<PackedArchive, ArchiveError>, u64) {
    let mut inflated = 0;
    let packed = pack_zip(zip, limits, Runtime::Python311, &mut |n| inflated += n);
    (packed, inflated)
}

#[test]
fn packing_gives_the_context_the_checked_files_give() {
    let executables = zip_with(|w| {
        w.start_file("run.sh", mode(0o100755)).unwrap();
        w.write_all(b"#!/bin/sh\n").unwrap();
        w.add_directory("tmp/", mode(0o041777)).unwrap();
        w.start_file("tmp/keep", mode(0o100640)).unwrap();
        w.start_file("bin/tool", mode(0o106777)).unwrap();
        w.write_all(&noise(70_000, 2)).unwrap();
    });
    let mut streamed = zip::ZipWriter::new_stream(Vec::new());
    streamed.start_file("handler.py", opts()).unwrap();
    streamed.write_all(b"def handle(e): return 'hi'\n").unwrap();
    streamed.start_file("big.txt", opts()).unwrap();
    streamed.write_all(&b"line\n".repeat(100_000)).unwrap();
    let streamed = streamed.finish().unwrap().into_inner();
    // Out of path order in the zip, a directory named before and after its
    // files, names that sort around '/': "lib.py" < "lib/" < "lib0".
    let unordered = zip_with(|w| {
        for (name, data) in [
            ("lib/z.py", &b"z"[..]),
            ("lib0", b"0"),
            ("handler.py", b"h"),
            ("lib/a/b.py", b"b"),
            ("lib.py", b"l"),
            ("a b/c", b"c"),
        ] {
            w.start_file(name, opts()).unwrap();
            w.write_all(data).unwrap();
        }
        w.add_directory("lib/a/", opts()).unwrap();
        w.add_directory("empty/", opts()).unwrap();
        w.start_file("stored.bin", stored()).unwrap();
        w.write_all(&noise(200_000, 9)).unwrap();
    });
    let zips = [
        (
            "plain",
            zip_of(&[("handler.py", b"x = 1"), ("lib/util.py", b"y")]),
        ),
        ("executables", executables),
        ("streamed", streamed),
        ("unordered", unordered),
        // Deflate's output here depends on how its input is split: the
        // context must not depend on reading from memory or from the zip.
        (
            "repeated",
            zip_of_repeated(&[("r.bin", &noise(1000, 4), 5000)]),
        ),
    ];
    let limits = ArchiveLimits::default();
    for (what, zip) in zips {
        let checked = validate_zip(&zip, &limits).unwrap();
        let (packed, inflated) = packed(&zip, &limits);
        let packed = packed.unwrap_or_else(|e| panic!("{what}: {e}"));
        for runtime in [Runtime::Python311, Runtime::Nodejs20] {
            let again = pack_zip(&zip, &limits, runtime, &mut |_| {}).unwrap();
            assert!(
                again.context == checked.build_context(runtime),
                "{what}: the same context for {runtime}"
            );
        }
        assert_eq!(packed.context_sha256, sha256_hex(&packed.context), "{what}");
        assert_eq!(packed.sha256, checked.sha256, "{what}");
        assert_eq!(packed.size, zip.len() as u64, "{what}");
        assert_eq!(packed.files, checked.files.len(), "{what}");
        let unpacked: usize = checked.files.values().map(Vec::len).sum();
        assert_eq!(inflated, unpacked as u64, "{what}: each byte inflated once");
    }
}

#[test]
fn packing_refuses_every_row_the_check_refuses_and_says_the_same() {
    let limits = ArchiveLimits::default();
    let rows: Vec<Row> = [
        path_rows(),
        type_rows(),
        duplicate_rows(),
        size_rows(),
        corrupt_rows(),
    ]
    .into_iter()
    .flatten()
    .collect();
    for r in &rows {
        let err = match packed(&r.zip, &limits).0 {
            Ok(p) => panic!("{}: packed, {} files", r.what, p.files),
            Err(e) => e,
        };
        assert!((r.kind)(&err), "{}: wrong kind of refusal: {err:?}", r.what);
        let text = err.to_string();
        assert!(
            text.contains(r.shows),
            "{}: {text:?} should show {:?}",
            r.what,
            r.shows
        );
    }
    assert!(rows.len() >= 55, "{} rows", rows.len());
}

#[test]
fn packing_a_gibibyte_bomb_stops_at_the_ratio_in_bounded_memory() {
    let limits = ArchiveLimits::default();
    let bomb = zip_of_repeated(&[
        ("handler.py", b"def handle(e):\n    return 1\n", 1),
        ("zeros.bin", &[0u8; MIB], 1024),
    ]);
    let zip_size = bomb.len() as u64;
    let ((result, inflated), held) = peak_memory(|| packed(&bomb, &limits));
    let err = result.expect_err("a bomb");
    assert!(
        matches!(err, ArchiveError::Bomb { limit: 100, .. }),
        "{err:?}"
    );
    let bound = limits.max_ratio * zip_size + BUFFER_BYTES as u64;
    assert!(
        inflated <= bound,
        "inflated {inflated}; the bound is {bound}"
    );
    // What it held: the zip reader's state and the context so far, which
    // compresses zeros as well as the zip did.
    assert!(
        held < 8 * MIB as u64,
        "held {held} bytes inflating {inflated}"
    );
}

#[test]
fn a_packed_bomb_that_lies_about_its_size_is_refused() {
    let mut bomb = zip_of_repeated(&[("zeros.bin", &[0u8; MIB], 1024)]);
    set_method_crc_size(&mut bomb, 0, 8, 0, 1024);
    let (result, inflated) = packed(&bomb, &ArchiveLimits::default());
    let err = result.expect_err("a lying bomb");
    assert!(matches!(err, ArchiveError::Corrupt(_)), "{err:?}");
    assert!(inflated <= BUFFER_BYTES as u64, "inflated {inflated}");
}

/// The Dockerfile a context holds.
fn dockerfile_of(context: &[u8]) -> String {
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(context));
    let mut first = tar.entries().unwrap().next().unwrap().unwrap();
    assert_eq!(first.path().unwrap().to_str(), Some("Dockerfile"));
    let mut text = String::new();
    std::io::Read::read_to_string(&mut first, &mut text).unwrap();
    text
}

#[test]
fn packing_writes_the_dockerfile_its_manifest_calls_for() {
    let big = format!("flask\n{}", "# padding\n".repeat(110_000));
    for (runtime, manifest, text, first_copy) in [
        (
            Runtime::Python311,
            "requirements.txt",
            "flask==3.0.3\n",
            "COPY requirements.txt /app/",
        ),
        (
            Runtime::Python311,
            "requirements.txt",
            "-r base.txt\n",
            "COPY . /app",
        ),
        // Over MAX_MANIFEST_BYTES: not read ahead.
        (Runtime::Python311, "requirements.txt", &big, "COPY . /app"),
        (
            Runtime::Nodejs20,
            "package.json",
            r#"{"dependencies": {"left-pad": "1.3.0"}}"#,
            "COPY --chown=sless:sless package.json /app/",
        ),
        (
            Runtime::Nodejs20,
            "package.json",
            r#"{"scripts": {"postinstall": "node setup.js"}}"#,
            "COPY --chown=sless:sless . /app",
        ),
        (
            Runtime::Go123,
            "go.mod",
            "module f\n",
            "COPY --chown=sless:sless go.mod /app/",
        ),
    ] {
        let zip = zip_of(&[
            ("a/handler", b"h"),
            (manifest, text.as_bytes()),
            ("z", b"z"),
        ]);
        let packed = pack_zip(&zip, &ArchiveLimits::default(), runtime, &mut |_| {}).unwrap();
        let checked = validate_zip(&zip, &ArchiveLimits::default()).unwrap();
        assert_eq!(packed.context, checked.build_context(runtime), "{text:.40}");
        let dockerfile = dockerfile_of(&packed.context);
        let copy = dockerfile.lines().find(|l| l.starts_with("COPY"));
        assert_eq!(
            copy,
            Some(first_copy),
            "{runtime} {text:.40}:\n{dockerfile}"
        );
    }
}
