use std::io::Write;

use zip::write::SimpleFileOptions;

use super::*;

fn zip_of(entries: &[(&str, &[u8])]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(Cursor::new(Vec::new()));
    for (name, data) in entries {
        w.start_file(*name, SimpleFileOptions::default()).unwrap();
        w.write_all(data).unwrap();
    }
    w.finish().unwrap().into_inner()
}

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
}

#[test]
fn hostile_archives_are_refused() {
    let big = vec![b'a'; 9 * 1024 * 1024];
    let mut symlink = zip::ZipWriter::new(Cursor::new(Vec::new()));
    symlink
        .add_symlink("link", "/etc/passwd", SimpleFileOptions::default())
        .unwrap();
    let symlink = symlink.finish().unwrap().into_inner();
    type Case = (&'static str, Vec<u8>, fn(&ArchiveError) -> bool);
    let cases: Vec<Case> = vec![
        ("corrupt", b"PK\x03\x04 not a zip".to_vec(), |e| {
            matches!(e, ArchiveError::Corrupt(_))
        }),
        ("dotdot", zip_of(&[("../evil.py", b"x")]), |e| {
            matches!(e, ArchiveError::BadEntry { .. })
        }),
        ("inner dotdot", zip_of(&[("a/../../evil.py", b"x")]), |e| {
            matches!(e, ArchiveError::BadEntry { .. })
        }),
        ("absolute", zip_of(&[("/etc/evil", b"x")]), |e| {
            matches!(e, ArchiveError::BadEntry { .. })
        }),
        ("drive", zip_of(&[("C:/evil", b"x")]), |e| {
            matches!(e, ArchiveError::BadEntry { .. })
        }),
        ("backslash", zip_of(&[("a\\..\\evil", b"x")]), |e| {
            matches!(e, ArchiveError::BadEntry { .. })
        }),
        ("symlink", symlink, |e| {
            matches!(e, ArchiveError::BadEntry { .. })
        }),
        ("dockerfile", zip_of(&[("Dockerfile", b"FROM x")]), |e| {
            matches!(e, ArchiveError::BadEntry { .. })
        }),
        ("bomb", zip_of(&[("zeros", &big)]), |e| {
            matches!(e, ArchiveError::Bomb { .. })
        }),
        ("empty", zip_of(&[]), |e| matches!(e, ArchiveError::Empty)),
    ];
    for (name, bytes, expected) in cases {
        let err = validate_zip(&bytes, &ArchiveLimits::default()).expect_err(name);
        assert!(expected(&err), "{name}: {err:?}");
    }
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
}

#[test]
fn the_build_context_is_deterministic_and_holds_the_dockerfile() {
    let z = zip_of(&[("handler.py", b"def handle(e): return 'hi'")]);
    let a = validate_zip(&z, &ArchiveLimits::default()).unwrap();
    let one = build_context(Runtime::Python311, &a.files);
    let two = build_context(Runtime::Python311, &a.files);
    assert_eq!(one, two);
    let mut names = Vec::new();
    let mut t = tar::Archive::new(flate2::read::GzDecoder::new(Cursor::new(one)));
    for e in t.entries().unwrap() {
        names.push(e.unwrap().path().unwrap().to_string_lossy().into_owned());
    }
    assert_eq!(names, vec!["Dockerfile", "handler.py"]);
}
