//! The files of an uploaded version, read back from its build context (the
//! tar.gz `archive::build_context` made): without the generated Dockerfile,
//! they are exactly the files of the user's zip.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Read;

use crate::archive::{ArchiveError, ArchiveLimits, build_context_with_modes};
use crate::spec::Runtime;

/// The generated file at the root of every build context.
pub const DOCKERFILE: &str = "Dockerfile";

/// How much of a file is looked at to tell text from binary when its
/// content is not inlined.
const SNIFF_BYTES: u64 = 8 * 1024;

/// One file of a version, as `GET .../source` shows it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SourceFile {
    pub path: String,
    pub size: u64,
    /// The text, for a UTF-8 file that fit in what may be inlined.
    pub content: Option<String>,
    /// Not UTF-8 text (or it holds NUL bytes): never inlined.
    pub binary: bool,
    /// A text file left out because the listing had inlined its fill.
    pub truncated: bool,
}

/// The files of a version, sorted by path.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct SourceListing {
    pub files: Vec<SourceFile>,
    /// Some file's content was left out for the cap on inlined bytes.
    pub truncated: bool,
    /// Bytes of content inlined.
    pub inlined_bytes: u64,
}

fn corrupt(e: impl std::fmt::Display) -> ArchiveError {
    ArchiveError::Corrupt(format!("build context: {e}"))
}

/// What `walk` tells of a file besides its content.
struct Entry {
    path: String,
    size: u64,
    executable: bool,
}

/// Walks the regular files of a build context (not the Dockerfile),
/// handing each its path, size, mode and a reader of its content.
fn walk(
    context: &[u8],
    mut each: impl FnMut(Entry, &mut dyn Read) -> Result<(), ArchiveError>,
) -> Result<(), ArchiveError> {
    let gz = flate2::read::GzDecoder::new(context);
    let mut tar = tar::Archive::new(gz);
    for entry in tar.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        if entry.header().entry_type() != tar::EntryType::Regular {
            continue;
        }
        let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        if path == DOCKERFILE {
            continue;
        }
        let size = entry.header().size().map_err(corrupt)?;
        let executable = entry.header().mode().map_err(corrupt)? & 0o111 != 0;
        each(
            Entry {
                path,
                size,
                executable,
            },
            &mut entry,
        )?;
    }
    Ok(())
}

/// Reads at most `limit` bytes.
fn read_up_to(r: &mut dyn Read, limit: u64) -> Result<Vec<u8>, ArchiveError> {
    let mut data = Vec::with_capacity(limit.min(1 << 20) as usize);
    r.take(limit).read_to_end(&mut data).map_err(corrupt)?;
    Ok(data)
}

/// True when `data` (possibly cut short at `complete == false`) is not text.
fn is_binary(data: &[u8], complete: bool) -> bool {
    if data.contains(&0) {
        return true;
    }
    match std::str::from_utf8(data) {
        Ok(_) => false,
        // Cut in the middle of a character: text so far.
        Err(e) => complete || e.error_len().is_some(),
    }
}

/// Lists the files of a build context, inlining the content of text files
/// until `inline_limit` bytes are inlined; the files past it are listed
/// with `truncated` and no content. Memory stays within about
/// `inline_limit`, whatever the size of the files.
pub fn list_context(context: &[u8], inline_limit: u64) -> Result<SourceListing, ArchiveError> {
    let mut listing = SourceListing::default();
    walk(context, |Entry { path, size, .. }, r| {
        let room = inline_limit - listing.inlined_bytes;
        let file = if size <= room {
            let data = read_up_to(r, size)?;
            match String::from_utf8(data) {
                Ok(text) if !text.contains('\0') => {
                    listing.inlined_bytes += size;
                    SourceFile {
                        path,
                        size,
                        content: Some(text),
                        binary: false,
                        truncated: false,
                    }
                }
                _ => SourceFile {
                    path,
                    size,
                    content: None,
                    binary: true,
                    truncated: false,
                },
            }
        } else {
            let head = read_up_to(r, SNIFF_BYTES)?;
            let binary = is_binary(&head, size <= SNIFF_BYTES);
            listing.truncated |= !binary;
            SourceFile {
                path,
                size,
                content: None,
                binary,
                truncated: !binary,
            }
        };
        listing.files.push(file);
        Ok(())
    })?;
    listing.files.sort_by(|a, b| a.path.cmp(&b.path));
    Ok(listing)
}

/// The files of a build context, read back whole.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct ContextFiles {
    pub files: BTreeMap<String, Vec<u8>>,
    /// The files the context has executable (`0755`).
    pub executables: BTreeSet<String>,
}

impl ContextFiles {
    /// The same files, modes and all, packed for `runtime`.
    pub fn build_context(&self, runtime: Runtime) -> Vec<u8> {
        build_context_with_modes(runtime, &self.files, &self.executables)
    }
}

/// Reads every file of a build context back (to pack them again, for
/// another runtime), within the unpacked-size limit of uploads.
pub fn read_context(context: &[u8], limits: &ArchiveLimits) -> Result<ContextFiles, ArchiveError> {
    let mut read = ContextFiles::default();
    let mut total = 0u64;
    walk(context, |entry, r| {
        total = total.saturating_add(entry.size);
        if total > limits.max_unpacked_bytes {
            return Err(ArchiveError::UnpacksTooLarge {
                limit: limits.max_unpacked_bytes,
            });
        }
        if entry.executable {
            read.executables.insert(entry.path.clone());
        }
        read.files.insert(entry.path, read_up_to(r, entry.size)?);
        Ok(())
    })?;
    Ok(read)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::archive::{build_context, context_modes};

    fn files(entries: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(p, d)| (p.to_string(), d.to_vec()))
            .collect()
    }

    #[test]
    fn a_context_reads_back_to_the_files_without_the_dockerfile() {
        let f = files(&[
            ("handler.py", b"def handle(e):\n    return 'hi'\n"),
            ("lib/data.bin", &[0, 1, 2, 255]),
            ("sub/Dockerfile", b"FROM user-owned"),
        ]);
        let executables = BTreeSet::from(["run.sh".to_owned()]);
        let mut with_script = f.clone();
        with_script.insert("run.sh".into(), b"#!/bin/sh\necho hi\n".to_vec());
        let ctx = build_context_with_modes(Runtime::Python311, &with_script, &executables);
        let read = read_context(&ctx, &ArchiveLimits::default()).unwrap();
        assert_eq!(read.files, with_script);
        assert_eq!(read.executables, executables);
        // Packed again for another runtime: same files and modes, another
        // Dockerfile; and back, byte for byte the same context.
        let node = read.build_context(Runtime::Nodejs20);
        assert_ne!(node, ctx);
        let modes = |c: &[u8]| {
            let mut m = context_modes(c).unwrap();
            m.remove(DOCKERFILE);
            m
        };
        assert_eq!(modes(&node), modes(&ctx));
        let back = read_context(&node, &Default::default()).unwrap();
        assert_eq!(back, read);
        assert_eq!(back.build_context(Runtime::Python311), ctx);
        let plain = build_context(Runtime::Python311, &f);
        assert_eq!(read_context(&plain, &Default::default()).unwrap().files, f);
    }

    #[test]
    fn a_listing_inlines_text_marks_binary_and_stops_inlining_at_the_cap() {
        let big_text = "x".repeat(100);
        let f = files(&[
            ("a.py", b"print('a')\n"),
            ("b.bin", &[0x89, b'P', b'N', b'G', 0]),
            ("c.txt", big_text.as_bytes()),
            ("d.py", b"d = 1\n"),
            ("e.latin1", &[b'c', b'a', b'f', 0xe9]),
        ]);
        let ctx = build_context(Runtime::Python311, &f);
        let all = list_context(&ctx, 1 << 20).unwrap();
        assert!(!all.truncated);
        let paths: Vec<_> = all.files.iter().map(|f| f.path.as_str()).collect();
        assert_eq!(paths, ["a.py", "b.bin", "c.txt", "d.py", "e.latin1"]);
        assert_eq!(all.files[0].content.as_deref(), Some("print('a')\n"));
        assert!(all.files[1].binary && all.files[1].content.is_none());
        assert_eq!(all.files[1].size, 5);
        assert!(all.files[4].binary, "not UTF-8");
        assert_eq!(all.inlined_bytes, 11 + 100 + 6);

        // Room for a.py (11 bytes) and d.py (6), not for c.txt (100).
        let capped = list_context(&ctx, 20).unwrap();
        assert!(capped.truncated);
        let c = &capped.files[2];
        assert_eq!(
            (c.content.as_deref(), c.truncated, c.binary),
            (None, true, false)
        );
        assert_eq!(c.size, 100);
        assert_eq!(capped.files[3].content.as_deref(), Some("d = 1\n"));
        assert_eq!(capped.inlined_bytes, 17);
        assert!(
            !capped.files[1].truncated,
            "a binary file is never inlined anyway"
        );
    }

    #[test]
    fn reading_back_is_bounded_and_garbage_is_corrupt() {
        let f = files(&[("a", &[b'a'; 1000]), ("b", &[b'b'; 1000])]);
        let ctx = build_context(Runtime::Python311, &f);
        let small = ArchiveLimits {
            max_unpacked_bytes: 1500,
            ..Default::default()
        };
        assert!(matches!(
            read_context(&ctx, &small),
            Err(ArchiveError::UnpacksTooLarge { .. })
        ));
        assert!(matches!(
            list_context(b"not a tar.gz", 10),
            Err(ArchiveError::Corrupt(_))
        ));
    }
}
