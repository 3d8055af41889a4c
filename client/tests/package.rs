//! `package::zip_dir`: deterministic bytes, ignore rules, refusals, limits,
//! and a zip the server's own validation accepts.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, File};
use std::io::{Cursor, Read};
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{PermissionsExt, symlink};
use std::os::unix::net::UnixListener;
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

use sha2::{Digest, Sha256};
use sless_client::package::{PackError, PackLimits, Packed, zip_dir};
use sless_domain::archive::{self, ArchiveLimits};
use tempfile::TempDir;
use zip::{CompressionMethod, DateTime, ZipArchive};

/// Writes `content` at `rel` under `root`, making its parents.
fn write(root: &Path, rel: &str, content: &[u8]) -> PathBuf {
    let path = root.join(rel);
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(&path, content).unwrap();
    path
}

fn chmod(path: &Path, mode: u32) {
    fs::set_permissions(path, fs::Permissions::from_mode(mode)).unwrap();
}

fn touch(path: &Path, seconds_after_epoch: u64) {
    let time = SystemTime::UNIX_EPOCH + Duration::from_secs(seconds_after_epoch);
    File::options()
        .write(true)
        .open(path)
        .unwrap()
        .set_modified(time)
        .unwrap();
}

/// A directory holding `files`.
fn tree(files: &[(&str, &str)]) -> TempDir {
    let dir = TempDir::new().unwrap();
    for (rel, content) in files {
        write(dir.path(), rel, content.as_bytes());
    }
    dir
}

fn pack(dir: &Path) -> Packed {
    zip_dir(dir, &PackLimits::default()).unwrap_or_else(|e| panic!("packing failed: {e}"))
}

fn refusal(dir: &Path, limits: &PackLimits) -> PackError {
    match zip_dir(dir, limits) {
        Ok(packed) => panic!("packed {:?}, expected a refusal", packed.paths),
        Err(e) => e,
    }
}

/// What the zip unpacks to: path to (content, unix mode).
fn unzip(bytes: &[u8]) -> BTreeMap<String, (String, u32)> {
    let mut zip = ZipArchive::new(Cursor::new(bytes)).unwrap();
    let mut files = BTreeMap::new();
    for index in 0..zip.len() {
        let mut entry = zip.by_index(index).unwrap();
        let mut content = String::new();
        entry.read_to_string(&mut content).unwrap();
        let mode = entry.unix_mode().unwrap();
        files.insert(entry.name().unwrap().into_owned(), (content, mode));
    }
    files
}

fn paths(packed: &Packed) -> Vec<&str> {
    packed.paths.iter().map(String::as_str).collect()
}

fn u16_at(b: &[u8], at: usize) -> u16 {
    u16::from_le_bytes([b[at], b[at + 1]])
}

fn u32_at(b: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(b[at..at + 4].try_into().unwrap())
}

/// One entry's headers, read from the bytes themselves.
#[derive(Debug, PartialEq, Eq)]
struct RawHeaders {
    name: String,
    local_extra_len: u16,
    central_extra_len: u16,
    comment_len: u16,
    dos_time: u16,
    dos_date: u16,
}

fn raw_headers(b: &[u8]) -> Vec<RawHeaders> {
    let end = (0..=b.len() - 22)
        .rev()
        .find(|&at| u32_at(b, at) == 0x0605_4b50)
        .expect("an end of central directory record");
    let count = u16_at(b, end + 10) as usize;
    let mut at = u32_at(b, end + 16) as usize;
    let mut headers = Vec::new();
    for _ in 0..count {
        assert_eq!(u32_at(b, at), 0x0201_4b50, "a central directory header");
        let name_len = u16_at(b, at + 28) as usize;
        let extra_len = u16_at(b, at + 30);
        let comment_len = u16_at(b, at + 32);
        let local = u32_at(b, at + 42) as usize;
        assert_eq!(u32_at(b, local), 0x0403_4b50, "a local header");
        assert_eq!(
            u16_at(b, local + 10),
            u16_at(b, at + 12),
            "local and central times"
        );
        headers.push(RawHeaders {
            name: String::from_utf8(b[at + 46..at + 46 + name_len].to_vec()).unwrap(),
            local_extra_len: u16_at(b, local + 28),
            central_extra_len: extra_len,
            comment_len,
            dos_time: u16_at(b, at + 12),
            dos_date: u16_at(b, at + 14),
        });
        at += 46 + name_len + extra_len as usize + comment_len as usize;
    }
    headers
}

const FILES: &[(&str, &str)] = &[
    ("handler.py", "def handle(event):\n    return event\n"),
    ("run.sh", "#!/bin/sh\nexec python handler.py\n"),
    ("lib/util.py", "X = 1\n"),
    ("lib/deep/more.py", "Y = 2\n"),
    ("a-b.txt", "dash\n"),
    ("a/b.txt", "slash\n"),
    ("requirements.txt", ""),
];

/// `FILES` in `root`, created in `order`, every file and directory with the
/// mtime `time`, `run.sh` with the owner-executable `exec_mode` and the
/// other files with `mode`.
fn make_files(root: &Path, order: &[usize], time: u64, mode: u32, exec_mode: u32) {
    for &i in order {
        let (rel, content) = FILES[i];
        let path = write(root, rel, content.as_bytes());
        chmod(&path, if rel == "run.sh" { exec_mode } else { mode });
        touch(&path, time + i as u64);
    }
    for dir in ["lib/deep", "lib", "a", ""] {
        let path = root.join(dir);
        File::open(&path)
            .unwrap()
            .set_modified(SystemTime::UNIX_EPOCH + Duration::from_secs(time))
            .unwrap();
    }
}

#[test]
fn same_files_zip_to_the_same_bytes_whatever_the_place_times_modes_and_order() {
    let first = TempDir::new().unwrap();
    make_files(
        first.path(),
        &[0, 1, 2, 3, 4, 5, 6],
        1_000_000,
        0o644,
        0o755,
    );
    let second = TempDir::new().unwrap();
    let elsewhere = second.path().join("some/deeper/place");
    fs::create_dir_all(&elsewhere).unwrap();
    make_files(
        &elsewhere,
        &[6, 5, 3, 4, 2, 1, 0],
        1_700_000_000,
        0o600,
        0o700,
    );

    let a = pack(first.path());
    let b = pack(&elsewhere);
    assert_eq!(a.sha256, b.sha256);
    assert!(a.bytes == b.bytes, "the two zips differ");
    assert_eq!(a.sha256, hex::encode(Sha256::digest(&a.bytes)));
    assert_eq!(
        paths(&a),
        [
            "a-b.txt",
            "a/b.txt",
            "handler.py",
            "lib/deep/more.py",
            "lib/util.py",
            "requirements.txt",
            "run.sh",
        ]
    );
    assert_eq!(a.files, 7);
    let size: usize = FILES.iter().map(|(_, c)| c.len()).sum();
    assert_eq!(a.unpacked_bytes, size as u64);

    // Packing again, after the times change once more, gives the same bytes.
    touch(&first.path().join("handler.py"), 42);
    assert!(
        pack(first.path()).bytes == a.bytes,
        "a touched file changed the zip"
    );
}

#[test]
fn a_changed_content_or_execute_bit_changes_the_bytes() {
    let dir = TempDir::new().unwrap();
    make_files(dir.path(), &[0, 1, 2, 3, 4, 5, 6], 1_000_000, 0o644, 0o755);
    let before = pack(dir.path());

    write(dir.path(), "lib/util.py", b"X = 2\n");
    let edited = pack(dir.path());
    assert_ne!(edited.sha256, before.sha256);

    chmod(&dir.path().join("handler.py"), 0o744);
    let executable = pack(dir.path());
    assert_ne!(executable.sha256, edited.sha256);
    // Group and other bits alone do not count.
    chmod(&dir.path().join("handler.py"), 0o677);
    assert_eq!(pack(dir.path()).sha256, edited.sha256);
}

#[test]
fn the_zip_unpacks_to_exactly_the_files_with_fixed_headers() {
    let dir = TempDir::new().unwrap();
    make_files(dir.path(), &[0, 1, 2, 3, 4, 5, 6], 1_000_000, 0o640, 0o750);
    fs::create_dir_all(dir.path().join("empty/nested")).unwrap();
    let packed = pack(dir.path());

    let expected: BTreeMap<String, (String, u32)> = FILES
        .iter()
        .map(|(rel, content)| {
            let mode = if *rel == "run.sh" { 0o100755 } else { 0o100644 };
            (rel.to_string(), (content.to_string(), mode))
        })
        .collect();
    assert_eq!(unzip(&packed.bytes), expected);

    let mut zip = ZipArchive::new(Cursor::new(&packed.bytes)).unwrap();
    for index in 0..zip.len() {
        let entry = zip.by_index(index).unwrap();
        assert!(
            entry.is_file(),
            "{} is not a file entry",
            entry.name().unwrap()
        );
        assert_eq!(entry.compression(), CompressionMethod::Deflated);
        assert_eq!(entry.last_modified(), Some(DateTime::DEFAULT));
    }

    let headers = raw_headers(&packed.bytes);
    let names: Vec<&str> = headers.iter().map(|h| h.name.as_str()).collect();
    assert_eq!(names, paths(&packed), "the zip's order is the paths' order");
    for h in &headers {
        let fixed = RawHeaders {
            name: h.name.clone(),
            local_extra_len: 0,
            central_extra_len: 0,
            comment_len: 0,
            dos_time: 0,
            // 1980-01-01: year 0 since 1980, month 1, day 1.
            dos_date: (1 << 5) | 1,
        };
        assert_eq!(h, &fixed);
    }
}

#[test]
fn the_server_validation_accepts_the_zip() {
    let dir = TempDir::new().unwrap();
    make_files(dir.path(), &[0, 1, 2, 3, 4, 5, 6], 1_000_000, 0o644, 0o755);
    let packed = pack(dir.path());

    let valid = archive::validate_zip(&packed.bytes, &ArchiveLimits::default()).unwrap();
    assert_eq!(valid.sha256, packed.sha256);
    let files: BTreeMap<String, Vec<u8>> = FILES
        .iter()
        .map(|(rel, content)| (rel.to_string(), content.as_bytes().to_vec()))
        .collect();
    assert_eq!(valid.files, files);
    assert_eq!(valid.executables, BTreeSet::from(["run.sh".to_owned()]));
    assert_eq!(
        PackLimits::default(),
        PackLimits::from(&ArchiveLimits::default())
    );
}

#[test]
fn vcs_caches_dependencies_and_virtualenvs_are_ignored_by_default() {
    let dir = tree(&[
        ("app.py", "print(1)\n"),
        (".git/config", "[core]\n"),
        ("__pycache__/app.cpython-311.pyc", "bytecode"),
        ("lib/__pycache__/util.cpython-311.pyc", "bytecode"),
        ("node_modules/left-pad/index.js", "module.exports = 1\n"),
        ("web/node_modules/x/index.js", "x\n"),
        (".venv/bin/python", "elf"),
        // The defaults name directories: a file of the same name is packed.
        ("docs/node_modules", "a file\n"),
        ("lib/util.py", "X = 1\n"),
    ]);
    assert_eq!(
        paths(&pack(dir.path())),
        ["app.py", "docs/node_modules", "lib/util.py"]
    );
}

#[test]
fn slessignore_can_pack_a_default_ignored_directory_again() {
    let dir = tree(&[
        ("index.js", "require('left-pad')\n"),
        ("node_modules/left-pad/index.js", "module.exports = 1\n"),
        (".venv/bin/python", "elf"),
        (".slessignore", "!node_modules/\n"),
    ]);
    assert_eq!(
        paths(&pack(dir.path())),
        ["index.js", "node_modules/left-pad/index.js"]
    );
}

#[test]
fn slessignore_patterns_negations_anchors_and_directory_patterns_apply() {
    let dir = tree(&[
        (
            ".slessignore",
            "\u{feff}# build output\n*.log\n!keep.log\n/build\n!/build/keep.txt\ntmp/\ndocs/**/*.draft\n",
        ),
        ("# build output", "a file named like the comment\n"),
        ("app.py", "print(1)\n"),
        ("debug.log", "ignored at the top\n"),
        ("sub/trace.log", "ignored at any depth\n"),
        ("keep.log", "negated\n"),
        ("sub/keep.log", "negated at any depth\n"),
        ("build/out.bin", "anchored: ignored\n"),
        (
            "build/keep.txt",
            "inside an ignored directory: stays ignored\n",
        ),
        ("src/build/mod.py", "anchored pattern: kept below the top\n"),
        ("tmp/scratch", "directory pattern: ignored\n"),
        (
            "src/tmp/scratch",
            "directory pattern at any depth: ignored\n",
        ),
        ("lib/tmp", "a file named like a directory pattern: kept\n"),
        ("docs/a/b/c.draft", "** matches directories\n"),
        ("docs/c.draft", "** matches no directory too\n"),
        ("other/c.draft", "outside docs: kept\n"),
        ("sub/.slessignore", "only the top one is read\n*\n"),
    ]);
    assert_eq!(
        paths(&pack(dir.path())),
        [
            "# build output",
            "app.py",
            "keep.log",
            "lib/tmp",
            "other/c.draft",
            "src/build/mod.py",
            "sub/.slessignore",
            "sub/keep.log",
        ]
    );
}

#[test]
fn a_bad_slessignore_pattern_is_refused_naming_its_line() {
    let dir = tree(&[("app.py", "1\n"), (".slessignore", "*.log\nsrc/[z-a].py\n")]);
    let e = refusal(dir.path(), &PackLimits::default());
    let message = e.to_string();
    assert!(matches!(e, PackError::IgnoreFile { .. }), "{message}");
    assert!(
        message.contains(".slessignore") && message.contains("line 2"),
        "{message}"
    );
}

#[test]
fn a_link_out_of_the_directory_is_refused_naming_it() {
    let outer = TempDir::new().unwrap();
    write(outer.path(), "secret.txt", b"not yours\n");
    let dir = outer.path().join("function");
    write(&dir, "app.py", b"1\n");
    fs::create_dir_all(dir.join("lib")).unwrap();
    symlink("../../secret.txt", dir.join("lib/escape.txt")).unwrap();

    let e = refusal(&dir, &PackLimits::default());
    let message = e.to_string();
    assert!(matches!(e, PackError::Link { .. }), "{message}");
    assert_eq!(e.path(), Some("lib/escape.txt"));
    assert!(message.contains("\"lib/escape.txt\""), "{message}");
    assert!(message.contains("outside the directory"), "{message}");
}

#[test]
fn an_absolute_link_is_refused_even_to_a_file_inside() {
    let dir = tree(&[("app.py", "1\n")]);
    symlink(dir.path().join("app.py"), dir.path().join("main.py")).unwrap();
    let e = refusal(dir.path(), &PackLimits::default());
    assert_eq!(e.path(), Some("main.py"), "{e}");
    assert!(e.to_string().contains("is absolute"), "{e}");
}

#[test]
fn a_link_that_climbs_out_and_back_in_is_refused() {
    // It works only while the directory is named `function`.
    let outer = TempDir::new().unwrap();
    let dir = outer.path().join("function");
    write(&dir, "app.py", b"1\n");
    symlink("../function/app.py", dir.join("main.py")).unwrap();

    let e = refusal(&dir, &PackLimits::default());
    assert_eq!(e.path(), Some("main.py"), "{e}");
    assert!(e.to_string().contains("leads outside the directory"), "{e}");
}

#[test]
fn a_link_that_leaves_through_another_link_is_refused() {
    let outer = TempDir::new().unwrap();
    write(outer.path(), "secret.txt", b"not yours\n");
    let dir = outer.path().join("function");
    write(&dir, "app.py", b"1\n");
    // `hop` is ignored, so only `entry` is looked at: its own text stays
    // inside, but it resolves outside.
    write(&dir, ".slessignore", b"hop\n");
    symlink("../secret.txt", dir.join("hop")).unwrap();
    symlink("hop", dir.join("entry")).unwrap();

    let e = refusal(&dir, &PackLimits::default());
    assert_eq!(e.path(), Some("entry"), "{e}");
    assert!(e.to_string().contains("resolves to a file outside"), "{e}");
}

#[test]
fn a_dangling_link_is_refused_naming_it() {
    let dir = tree(&[("app.py", "1\n")]);
    symlink("gone.py", dir.path().join("config.py")).unwrap();
    let e = refusal(dir.path(), &PackLimits::default());
    let message = e.to_string();
    assert_eq!(e.path(), Some("config.py"), "{message}");
    assert!(message.contains("does not exist"), "{message}");
}

#[test]
fn a_link_to_a_file_inside_packs_that_file_under_the_link_name() {
    let dir = tree(&[("app.py", "1\n"), ("versions/v2.sh", "echo v2\n")]);
    chmod(&dir.path().join("versions/v2.sh"), 0o755);
    symlink("versions/v2.sh", dir.path().join("current.sh")).unwrap();
    let packed = pack(dir.path());

    let files = unzip(&packed.bytes);
    assert_eq!(files["current.sh"], ("echo v2\n".to_owned(), 0o100755));
    assert_eq!(files["versions/v2.sh"], ("echo v2\n".to_owned(), 0o100755));
    assert_eq!(files.len(), 3);
    archive::validate_zip(&packed.bytes, &ArchiveLimits::default()).unwrap();
}

#[test]
fn a_link_to_a_directory_is_refused_unless_ignored() {
    let dir = tree(&[("app.py", "1\n"), ("vendor/lib.py", "L = 1\n")]);
    symlink("vendor", dir.path().join("lib")).unwrap();
    let e = refusal(dir.path(), &PackLimits::default());
    assert_eq!(e.path(), Some("lib"), "{e}");
    assert!(e.to_string().contains("is a directory"), "{e}");

    // A directory pattern leaves out a link to a directory.
    fs::remove_file(dir.path().join("lib")).unwrap();
    symlink("vendor", dir.path().join("node_modules")).unwrap();
    assert_eq!(paths(&pack(dir.path())), ["app.py", "vendor/lib.py"]);
}

#[test]
fn a_socket_is_refused_naming_it_unless_ignored() {
    let dir = tree(&[("app.py", "1\n")]);
    let _listener = UnixListener::bind(dir.path().join("agent.sock")).unwrap();
    let e = refusal(dir.path(), &PackLimits::default());
    assert!(matches!(e, PackError::SpecialFile { .. }), "{e}");
    assert_eq!(e.path(), Some("agent.sock"));
    assert!(e.to_string().contains("socket"), "{e}");

    write(dir.path(), ".slessignore", b"*.sock\n");
    assert_eq!(paths(&pack(dir.path())), ["app.py"]);
}

#[test]
fn a_name_that_is_not_utf8_is_refused() {
    let dir = tree(&[("app.py", "1\n")]);
    let name = std::ffi::OsStr::from_bytes(b"caf\xe9");
    fs::create_dir(dir.path().join(name)).unwrap();
    write(&dir.path().join(name), "x.py", b"1\n");
    let e = refusal(dir.path(), &PackLimits::default());
    assert!(matches!(e, PackError::NotUtf8 { .. }), "{e}");
    assert!(e.to_string().contains("caf\u{fffd}"), "{e}");
}

#[test]
fn more_files_than_the_limit_are_refused_with_the_count_and_limit() {
    let dir = tree(&[("a.py", "1\n"), ("b.py", "2\n"), ("c/d.py", "3\n")]);
    let limits = PackLimits {
        max_files: 2,
        ..PackLimits::default()
    };
    let e = refusal(dir.path(), &limits);
    assert!(
        matches!(e, PackError::TooManyFiles { count: 3, limit: 2 }),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "3 files to pack; the server accepts at most 2"
    );

    let at_the_limit = PackLimits {
        max_files: 3,
        ..PackLimits::default()
    };
    assert_eq!(zip_dir(dir.path(), &at_the_limit).unwrap().files, 3);
}

#[test]
fn more_bytes_than_the_limit_are_refused_with_the_size_and_limit() {
    let dir = tree(&[("a.py", "12345"), ("b/c.py", "678901")]);
    let limits = PackLimits {
        max_unpacked_bytes: 10,
        ..PackLimits::default()
    };
    let e = refusal(dir.path(), &limits);
    assert!(
        matches!(
            e,
            PackError::UnpacksTooLarge {
                size: 11,
                limit: 10
            }
        ),
        "{e}"
    );
    assert_eq!(
        e.to_string(),
        "the files to pack add up to 11 bytes; the server accepts at most 10"
    );

    let at_the_limit = PackLimits {
        max_unpacked_bytes: 11,
        ..PackLimits::default()
    };
    assert_eq!(
        zip_dir(dir.path(), &at_the_limit).unwrap().unpacked_bytes,
        11
    );
}

#[test]
fn a_zip_larger_than_the_limit_is_refused_with_its_size_and_limit() {
    let dir = tree(&[("a.py", "print('hello')\n")]);
    let size = pack(dir.path()).bytes.len() as u64;

    let limits = PackLimits {
        max_zip_bytes: size - 1,
        ..PackLimits::default()
    };
    let e = refusal(dir.path(), &limits);
    assert!(matches!(e, PackError::ZipTooLarge { .. }), "{e}");
    assert_eq!(
        e.to_string(),
        format!(
            "the zip is {size} bytes; the server accepts at most {}",
            size - 1
        )
    );

    let at_the_limit = PackLimits {
        max_zip_bytes: size,
        ..PackLimits::default()
    };
    zip_dir(dir.path(), &at_the_limit).unwrap();
}

#[test]
fn a_directory_without_files_is_refused() {
    let dir = TempDir::new().unwrap();
    let e = refusal(dir.path(), &PackLimits::default());
    assert!(matches!(e, PackError::Empty { .. }), "{e}");

    // Empty directories, ignored files and the rules themselves are no files.
    fs::create_dir_all(dir.path().join("a/b")).unwrap();
    write(dir.path(), ".git/HEAD", b"ref\n");
    write(dir.path(), "notes.log", b"x\n");
    write(dir.path(), ".slessignore", b"*.log\n");
    let e = refusal(dir.path(), &PackLimits::default());
    assert!(matches!(e, PackError::Empty { .. }), "{e}");
    assert!(e.to_string().contains("nothing to pack"), "{e}");
}

#[test]
fn what_the_server_refuses_is_refused_before_upload() {
    let dir = tree(&[("app.py", "1\n"), ("Dockerfile", "FROM scratch\n")]);
    let e = refusal(dir.path(), &PackLimits::default());
    assert!(matches!(e, PackError::Refused(_)), "{e}");
    assert_eq!(e.path(), Some("Dockerfile"));
    assert!(e.to_string().contains("reserved"), "{e}");
}

#[test]
fn a_path_that_is_not_a_directory_is_refused() {
    let dir = tree(&[("app.py", "1\n")]);
    let e = refusal(&dir.path().join("app.py"), &PackLimits::default());
    assert!(matches!(e, PackError::NotADirectory { .. }), "{e}");
    let e = refusal(&dir.path().join("missing"), &PackLimits::default());
    assert!(matches!(e, PackError::Io { .. }), "{e}");
}

#[test]
fn a_slessignore_that_is_a_link_or_not_utf8_is_refused() {
    let dir = tree(&[("app.py", "1\n"), ("rules.txt", "*.log\n")]);
    symlink("rules.txt", dir.path().join(".slessignore")).unwrap();
    let e = refusal(dir.path(), &PackLimits::default());
    assert!(matches!(e, PackError::IgnoreFile { .. }), "{e}");
    assert!(e.to_string().contains("regular file"), "{e}");

    fs::remove_file(dir.path().join(".slessignore")).unwrap();
    write(dir.path(), ".slessignore", b"caf\xe9\n");
    let e = refusal(dir.path(), &PackLimits::default());
    assert!(e.to_string().contains("not valid UTF-8"), "{e}");
}
