use std::io::Write;

use super::*;

mod bomb;
mod craft;
mod pack;

use craft::*;

#[test]
fn a_plain_zip_is_unpacked() {
    let z = zip_of(&[
        ("handler.py", b"def handle(e): return 'hi'"),
        ("lib/util.py", b"x = 1"),
    ]);
    let a = validate_zip(&z, &ArchiveLimits::default()).unwrap();
    assert_eq!(a.files.len(), 2);
    assert_eq!(a.files["lib/util.py"], b"x = 1");
    assert_eq!(a.sha256, sha256_hex(&z));
    assert!(a.executables.is_empty());
}

#[test]
fn names_that_are_fine_pass() {
    let z = zip_with(|w| {
        w.add_directory("lib/", opts()).unwrap();
        for name in [
            "handler.py",
            "lib/util.py",
            "lib/.hidden",
            "lib/a..b.py",
            "caf\u{e9}.py",
            "\u{65e5}\u{672c}/\u{8a9e}.txt",
            "Makefile",
            "docker/Dockerfile",
            "a b/c-d_e.f",
        ] {
            w.start_file(name, opts()).unwrap();
            w.write_all(b"x").unwrap();
        }
        w.add_directory("empty/", opts()).unwrap();
    });
    let a = validate_zip(&z, &ArchiveLimits::default()).unwrap();
    assert_eq!(a.files.len(), 9, "{:?}", a.files.keys());
    assert!(a.files.contains_key("docker/Dockerfile"));
}

#[test]
fn a_streamed_zip_with_data_descriptors_passes() {
    let mut w = zip::ZipWriter::new_stream(Vec::new());
    w.start_file("handler.py", opts()).unwrap();
    w.write_all(b"def handle(e): return 'hi'\n").unwrap();
    w.start_file("big.txt", opts()).unwrap();
    w.write_all(&b"line\n".repeat(100_000)).unwrap();
    let z = w.finish().unwrap().into_inner();
    let a = validate_zip(&z, &ArchiveLimits::default()).unwrap();
    assert_eq!(a.files["big.txt"].len(), 500_000);
}

/// What a refused archive must give: the error's kind, and a text its
/// message shows (the entry at fault, where there is one).
struct Row {
    what: &'static str,
    zip: Vec<u8>,
    kind: fn(&ArchiveError) -> bool,
    shows: &'static str,
}

fn row(
    what: &'static str,
    zip: Vec<u8>,
    kind: fn(&ArchiveError) -> bool,
    shows: &'static str,
) -> Row {
    Row {
        what,
        zip,
        kind,
        shows,
    }
}

fn bad_entry(e: &ArchiveError) -> bool {
    matches!(e, ArchiveError::BadEntry { .. })
}

fn clash(e: &ArchiveError) -> bool {
    matches!(e, ArchiveError::Clash { .. })
}

fn corrupt(e: &ArchiveError) -> bool {
    matches!(e, ArchiveError::Corrupt(_))
}

/// One file `name` beside a good handler.
fn with_handler(name: &str) -> Vec<u8> {
    zip_of(&[("handler.py", b"def handle(e): return 1\n"), (name, b"x")])
}

fn one_with_mode(name: &str, m: u32) -> Vec<u8> {
    zip_with(|w| {
        w.start_file("handler.py", opts()).unwrap();
        w.write_all(b"x = 1\n").unwrap();
        w.start_file(name, mode(m)).unwrap();
        w.write_all(b"x").unwrap();
    })
}

fn path_rows() -> Vec<Row> {
    let long_name = format!("{}x.py", "d/".repeat(520));
    let long_part = format!("{}.py", "a".repeat(253));
    let utf8_flagged = {
        let mut z = zip_of_raw_name(b"caf\xe9.py", b"x");
        set_flags(&mut z, 0, 1 << 11);
        z
    };
    vec![
        row("../", with_handler("../evil.py"), bad_entry, "../evil.py"),
        row(
            "inner ../",
            with_handler("lib/../../evil.py"),
            bad_entry,
            "lib/../../evil.py",
        ),
        row("trailing ..", with_handler("lib/.."), bad_entry, "lib/.."),
        row("..\\", with_handler("..\\evil.py"), bad_entry, "evil.py"),
        row(
            "backslash separators",
            with_handler("lib\\util.py"),
            bad_entry,
            "util.py",
        ),
        row(
            "drive letter",
            with_handler("C:/evil.py"),
            bad_entry,
            "C:/evil.py",
        ),
        row(
            "drive-relative",
            with_handler("c:evil.py"),
            bad_entry,
            "c:evil.py",
        ),
        row(
            "..././",
            with_handler("..././evil.py"),
            bad_entry,
            "..././evil.py",
        ),
        row(
            "a component of three dots",
            with_handler(".../evil.py"),
            bad_entry,
            ".../evil.py",
        ),
        row(
            "./",
            with_handler("./handler2.py"),
            bad_entry,
            "./handler2.py",
        ),
        row(
            "leading /",
            with_handler("/etc/cron.d/evil"),
            bad_entry,
            "/etc/cron.d/evil",
        ),
        row(
            "UNC path",
            with_handler("//server/share/x"),
            bad_entry,
            "//server/share/x",
        ),
        row(
            "empty component",
            with_handler("lib//util.py"),
            bad_entry,
            "lib//util.py",
        ),
        row("NUL", with_handler("evil.py\0.txt"), bad_entry, "evil.py"),
        row(
            "escape sequence",
            with_handler("a\x1b[31m.py"),
            bad_entry,
            "a\\u{1b}[31m.py",
        ),
        row("newline", with_handler("a\nb.py"), bad_entry, "a\\nb.py"),
        row("DEL", with_handler("a\x7f.py"), bad_entry, "a\\u{7f}.py"),
        row(
            "C1 control",
            with_handler("a\u{85}.py"),
            bad_entry,
            "a\\u{85}.py",
        ),
        row(
            "not UTF-8",
            zip_of_raw_name(b"caf\xe9.py", b"x"),
            bad_entry,
            "caf\u{fffd}.py",
        ),
        row(
            "not UTF-8 despite the UTF-8 flag",
            utf8_flagged,
            bad_entry,
            "caf\u{fffd}.py",
        ),
        row(
            "empty name",
            zip_of_raw_name(b"", b"x"),
            bad_entry,
            "the name is empty",
        ),
        row(
            "over 1024 bytes",
            with_handler(&long_name),
            bad_entry,
            "longer than 1024",
        ),
        row(
            "a component over 255 bytes",
            with_handler(&long_part),
            bad_entry,
            "255",
        ),
        row(
            "Dockerfile",
            with_handler("Dockerfile"),
            bad_entry,
            "Dockerfile",
        ),
        row(
            "dockerfile",
            with_handler("dockerfile"),
            bad_entry,
            "dockerfile",
        ),
        row(
            "Dockerfile/ directory",
            with_handler("Dockerfile/x"),
            bad_entry,
            "Dockerfile/x",
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
    let bzip2 = {
        let mut z = zip_with(|w| {
            w.start_file("handler.py", stored()).unwrap();
            w.write_all(b"x = 1\n").unwrap();
        });
        let (local, cd) = headers(&z, 0);
        put_u16(&mut z, local + 8, 12);
        put_u16(&mut z, cd + 10, 12);
        z
    };
    let dir_with_data = zip_with(|w| {
        w.start_file("handler.py", opts()).unwrap();
        w.write_all(b"x = 1\n").unwrap();
        w.start_file("lib/", mode(0o040755)).unwrap();
        w.write_all(b"hidden bytes").unwrap();
    });
    vec![
        row("symlink", symlink, bad_entry, "secrets"),
        row(
            "character device",
            one_with_mode("tty", 0o020644),
            bad_entry,
            "device",
        ),
        row(
            "block device",
            one_with_mode("sda", 0o060644),
            bad_entry,
            "device",
        ),
        row("FIFO", one_with_mode("pipe", 0o010644), bad_entry, "pipe"),
        row("socket", one_with_mode("sock", 0o140755), bad_entry, "sock"),
        // Zip has no hard links: any type but file and directory is refused.
        row(
            "no known type",
            one_with_mode("link", 0o170644),
            bad_entry,
            "link",
        ),
        row(
            "a file named as a directory",
            one_with_mode("lib/", 0o100644),
            bad_entry,
            "lib/",
        ),
        row("a directory holding data", dir_with_data, bad_entry, "lib/"),
        row("encrypted", encrypted, bad_entry, "encrypted"),
        row("bzip2", bzip2, bad_entry, "handler.py"),
    ]
}

fn duplicate_rows() -> Vec<Row> {
    let exact = {
        let mut z = zip_of(&[("handler.py", b"x = 1\n"), ("a.py", b"1"), ("b.py", b"2")]);
        replace_all(&mut z, b"b.py", b"a.py");
        z
    };
    let mut prefixed = b"#!/bin/sh\nexit 0\n".to_vec();
    prefixed.extend_from_slice(&exact);
    vec![
        row("the same name twice", exact, clash, "a.py"),
        row(
            "the same name twice, after a prefix",
            prefixed,
            clash,
            "a.py",
        ),
        row(
            "case",
            zip_of(&[("a.py", b"1"), ("A.py", b"2")]),
            clash,
            "A.py",
        ),
        row(
            "NFC and NFD",
            zip_of(&[("caf\u{e9}.py", b"1"), ("cafe\u{301}.py", b"2")]),
            clash,
            // Shown escaped: the difference is invisible otherwise.
            "cafe\\u{301}.py",
        ),
        row(
            "file, then a directory of that name",
            zip_of(&[("a", b"1"), ("a/b.py", b"2")]),
            clash,
            "a/b.py",
        ),
        row(
            "directory, then a file of that name",
            zip_of(&[("a/b.py", b"1"), ("a", b"2")]),
            clash,
            "a/b.py",
        ),
        row(
            "a file and a directory entry",
            zip_with(|w| {
                w.start_file("a", opts()).unwrap();
                w.add_directory("a/", opts()).unwrap();
            }),
            clash,
            "a/",
        ),
        row(
            "directories differing in case",
            zip_of(&[("Lib/x.py", b"1"), ("lib/y.py", b"2")]),
            clash,
            "lib/y.py",
        ),
        row(
            "a file and a directory differing in case",
            zip_of(&[("a", b"1"), ("A/b.py", b"2")]),
            clash,
            "A/b.py",
        ),
    ]
}

fn size_rows() -> Vec<Row> {
    let limits = ArchiveLimits::default();
    let only_dirs = zip_with(|w| {
        w.add_directory("lib/", opts()).unwrap();
        w.add_directory("lib/sub/", opts()).unwrap();
    });
    let many = zip_with(|w| {
        for i in 0..=limits.max_files {
            w.start_file(format!("f{i}"), stored()).unwrap();
        }
    });
    let over_50_mib = zip_with(|w| {
        w.start_file("big.bin", stored()).unwrap();
        w.write_all(&vec![0u8; 50 * MIB]).unwrap();
    });
    // 3 MiB that does not compress beside 260 MiB of zeros: about 3.3 MiB
    // of zip, a ratio near 80, so the size limit is what refuses it.
    let noise = noise(3 * MIB, 7);
    let over_250_mib =
        zip_of_repeated(&[("noise.bin", &noise, 1), ("zeros.bin", &[0u8; MIB], 260)]);
    // 20 MiB of zeros deflate to about 20 KB.
    let bomb = zip_of_repeated(&[
        ("handler.py", b"x = 1\n", 1),
        ("zeros.bin", &[0u8; MIB], 20),
    ]);
    // The header says 1 KiB; the data inflates to 1 MiB.
    let lying = {
        let mut z = zip_of_repeated(&[("zeros.bin", &[0u8; MIB], 1)]);
        let crc = crc_repeated(&[0u8; 1024], 1);
        set_method_crc_size(&mut z, 0, 8, crc, 1024);
        z
    };
    // The header says 2 KiB; the data inflates to 1 KiB (with its CRC).
    let short = {
        let mut z = zip_of_repeated(&[("zeros.bin", &[0u8; 1024], 1)]);
        let crc = crc_repeated(&[0u8; 1024], 1);
        set_method_crc_size(&mut z, 0, 8, crc, 2048);
        z
    };
    vec![
        row(
            "empty zip",
            zip_of(&[]),
            |e| matches!(e, ArchiveError::Empty),
            "no files",
        ),
        row(
            "only directories",
            only_dirs,
            |e| matches!(e, ArchiveError::Empty),
            "no files",
        ),
        row(
            "10,001 entries",
            many,
            |e| {
                matches!(
                    e,
                    ArchiveError::TooManyFiles {
                        count: 10_001,
                        limit: 10_000
                    }
                )
            },
            "10001",
        ),
        row(
            "over 50 MiB",
            over_50_mib,
            |e| matches!(e, ArchiveError::TooLarge { .. }),
            "52428800",
        ),
        row(
            "over 250 MiB unpacked",
            over_250_mib,
            |e| matches!(e, ArchiveError::UnpacksTooLarge { limit } if *limit == 250 * MIB as u64),
            "262144000",
        ),
        row(
            "ratio over 100",
            bomb,
            |e| matches!(e, ArchiveError::Bomb { limit: 100, .. }),
            "bomb",
        ),
        row(
            "more bytes than the header says",
            lying,
            corrupt,
            "zeros.bin",
        ),
        row(
            "fewer bytes than the header says",
            short,
            corrupt,
            "zeros.bin",
        ),
    ]
}

fn corrupt_rows() -> Vec<Row> {
    let good = zip_of(&[
        (
            "handler.py",
            &b"def handle(e):\n    return 'hi'\n".repeat(40),
        ),
        ("lib/util.py", b"X = 1\n"),
    ]);
    let stored_good = zip_with(|w| {
        w.start_file("handler.py", stored()).unwrap();
        w.write_all(b"def handle(e):\n    return 'hi'\n").unwrap();
    });
    let wrong_crc = {
        let mut z = stored_good.clone();
        let (local, cd) = headers(&z, 0);
        for at in [local + 14, cd + 16] {
            z[at] ^= 0x01;
        }
        z
    };
    let flip = |z: &[u8], at: usize| {
        let mut z = z.to_vec();
        z[at] ^= 0x20;
        z
    };
    let (_, cd0) = headers(&good, 0);
    let (_, cd1) = headers(&good, 1);
    let mut rows = vec![row(
        "not a zip",
        b"this is not a zip file".to_vec(),
        corrupt,
        "zip",
    )];
    for cut in [
        good.len() / 4,
        good.len() / 2,
        good.len() * 3 / 4,
        good.len() - 23,
        good.len() - 1,
    ] {
        rows.push(row("truncated", good[..cut].to_vec(), corrupt, "zip"));
    }
    rows.extend([
        row(
            "a flipped CRC in the central directory",
            flip(&good, cd0 + 16),
            corrupt,
            "handler.py",
        ),
        row(
            "a flipped central directory signature",
            flip(&good, cd1),
            corrupt,
            "zip",
        ),
        row(
            "a flipped name in the central directory",
            flip(&good, cd1 + 46),
            corrupt,
            "zip",
        ),
        row(
            "a wrong CRC in both headers",
            wrong_crc,
            corrupt,
            "checksum",
        ),
        row(
            "a flipped byte in stored data",
            flip(&stored_good, data_at(&stored_good, 0) + 3),
            corrupt,
            "checksum",
        ),
        row(
            "a flipped byte in deflated data",
            flip(&good, data_at(&good, 0) + 20),
            corrupt,
            "handler.py",
        ),
    ]);
    rows
}

#[test]
fn every_archive_rule_refuses_its_row() {
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
        let err = match validate_zip(&r.zip, &limits) {
            Ok(a) => panic!("{}: accepted, files {:?}", r.what, a.files.keys()),
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
fn limits_on_size_and_count_hold() {
    let z = zip_of(&[("a", b"1"), ("b", b"2"), ("c", b"3")]);
    let few = ArchiveLimits {
        max_files: 2,
        ..Default::default()
    };
    assert!(matches!(
        validate_zip(&z, &few),
        Err(ArchiveError::TooManyFiles { count: 3, limit: 2 })
    ));
    let small = ArchiveLimits {
        max_zip_bytes: 10,
        ..Default::default()
    };
    assert!(matches!(
        validate_zip(&z, &small),
        Err(ArchiveError::TooLarge { .. })
    ));
    let tiny = ArchiveLimits {
        max_unpacked_bytes: 2,
        ..Default::default()
    };
    assert!(matches!(
        validate_zip(&z, &tiny),
        Err(ArchiveError::UnpacksTooLarge { .. })
    ));
    assert_eq!(
        ArchiveLimits::default().max_unpacked_bytes,
        250 * 1024 * 1024
    );
}

#[test]
fn modes_are_normalised_and_special_bits_dropped() {
    let z = zip_with(|w| {
        for (name, m) in [
            ("handler.py", 0o100644),
            ("run.sh", 0o100755),
            ("setuid", 0o104755),
            ("setgid", 0o102711),
            ("group-exec", 0o100610),
            ("private", 0o100600),
            ("world-writable", 0o100666),
            ("sticky-file", 0o101644),
            ("bin/tool", 0o106777),
        ] {
            w.start_file(name, mode(m)).unwrap();
            w.write_all(b"x").unwrap();
        }
        w.add_directory("tmp/", mode(0o041777)).unwrap();
        w.start_file("tmp/keep", mode(0o100640)).unwrap();
        w.start_file("dos.txt", opts().system(zip::System::Dos))
            .unwrap();
    });
    let a = validate_zip(&z, &ArchiveLimits::default()).unwrap();
    let exec: Vec<_> = a.executables.iter().map(String::as_str).collect();
    assert_eq!(
        exec,
        ["bin/tool", "group-exec", "run.sh", "setgid", "setuid"]
    );

    let modes = context_modes(&a.build_context(Runtime::Python311)).unwrap();
    let expected: BTreeMap<String, u32> = [
        ("Dockerfile", 0o100644),
        ("bin/", 0o040755),
        ("bin/tool", 0o100755),
        ("dos.txt", 0o100644),
        ("group-exec", 0o100755),
        ("handler.py", 0o100644),
        ("private", 0o100644),
        ("run.sh", 0o100755),
        ("setgid", 0o100755),
        ("setuid", 0o100755),
        ("sticky-file", 0o100644),
        ("tmp/", 0o040755),
        ("tmp/keep", 0o100644),
        ("world-writable", 0o100644),
    ]
    .into_iter()
    .map(|(p, m)| (p.to_owned(), m))
    .collect();
    assert_eq!(modes, expected);

    // Without modes every file is 0644, and no special bit gets through either.
    let plain = context_modes(&build_context(Runtime::Python311, &a.files)).unwrap();
    assert!(plain.iter().all(|(p, m)| if p.ends_with('/') {
        *m == 0o040755
    } else {
        *m == 0o100644
    }));
}

#[test]
fn the_build_context_is_deterministic_and_holds_the_dockerfile() {
    let z = zip_of(&[
        ("handler.py", b"def handle(e): return 'hi'"),
        ("lib/a/b.py", b"1"),
        ("lib/c.py", b"2"),
        ("lib.py", b"3"),
    ]);
    let a = validate_zip(&z, &ArchiveLimits::default()).unwrap();
    let one = a.build_context(Runtime::Python311);
    let two = build_context_with_modes(Runtime::Python311, &a.files, &a.executables);
    assert_eq!(one, two);
    let mut names = Vec::new();
    let mut t = tar::Archive::new(flate2::read::GzDecoder::new(Cursor::new(one)));
    for e in t.entries().unwrap() {
        let e = e.unwrap();
        assert_eq!(e.header().mtime().unwrap(), 0);
        assert_eq!(e.header().uid().unwrap(), 0);
        names.push(e.path().unwrap().to_string_lossy().into_owned());
    }
    assert_eq!(
        names,
        [
            "Dockerfile",
            "handler.py",
            "lib.py",
            "lib/",
            "lib/a/",
            "lib/a/b.py",
            "lib/c.py"
        ]
    );
}

#[test]
fn crafted_deflate_and_crc_of_repeated_chunks_are_those_of_their_bytes() {
    let chunk = noise(1000, 5);
    for times in [1, 2, 5, 8, 13] {
        let all = chunk.repeat(times);
        let mut inflated = Vec::new();
        std::io::Read::read_to_end(
            &mut flate2::read::DeflateDecoder::new(&deflate_repeated(&chunk, times)[..]),
            &mut inflated,
        )
        .unwrap();
        assert_eq!(inflated, all, "{times} copies inflate back");
        let mut crc = flate2::Crc::new();
        crc.update(&all);
        assert_eq!(crc_repeated(&chunk, times), crc.sum(), "{times} copies");
    }
}
