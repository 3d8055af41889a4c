//! Entry names: what a name may be, and which names are the same file.
//!
//! A name is a relative path of UTF-8 components separated by `/`, with no
//! component that is empty or made only of dots, no backslash, drive letter,
//! leading `/`, NUL or other control character, and within the length
//! limits. Two names are the same file when they are equal once Unicode
//! normalisation (NFC against NFD) and case are ignored: macOS and Windows
//! filesystems treat them so, and a build or a download of the source on
//! them would silently keep only one.

use unicode_normalization::UnicodeNormalization;

use super::ArchiveError;

/// Longest name accepted, in bytes.
pub const MAX_NAME_BYTES: usize = 1024;
/// Longest path component accepted, in bytes (what common filesystems allow).
pub const MAX_COMPONENT_BYTES: usize = 255;

/// The file sless generates at the root of every build context.
const RESERVED: &str = "Dockerfile";

/// A name that passed the rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct EntryName {
    /// The path without a trailing `/`.
    pub path: String,
    /// A directory: the name ended in `/` (or the entry's mode says so).
    pub dir: bool,
}

impl EntryName {
    /// Checks a raw name as stored in the zip.
    pub fn parse(raw: &[u8]) -> Result<EntryName, &'static str> {
        if raw.is_empty() {
            return Err("the name is empty");
        }
        let Ok(name) = std::str::from_utf8(raw) else {
            return Err("the name is not valid UTF-8 (zip it with UTF-8 names)");
        };
        if name.contains('\0') {
            return Err("NUL characters are not allowed in names");
        }
        if name.chars().any(char::is_control) {
            return Err("control characters are not allowed in names");
        }
        if name.contains('\\') {
            return Err("backslashes are not allowed in names: zip paths are separated by '/'");
        }
        if name.starts_with('/') {
            return Err("absolute paths are not allowed");
        }
        let b = name.as_bytes();
        if b.len() >= 2 && b[0].is_ascii_alphabetic() && b[1] == b':' {
            return Err("drive letters are not allowed");
        }
        if name.len() > MAX_NAME_BYTES {
            return Err("the name is longer than 1024 bytes");
        }
        let (path, dir) = match name.strip_suffix('/') {
            Some(path) => (path, true),
            None => (name, false),
        };
        for part in path.split('/') {
            if part.is_empty() {
                return Err("empty path components ('//') are not allowed");
            }
            if part == ".." {
                return Err("'..' is not allowed in paths");
            }
            if part.bytes().all(|c| c == b'.') {
                return Err("path components made only of dots are not allowed");
            }
            if part.len() > MAX_COMPONENT_BYTES {
                return Err("a path component is longer than 255 bytes");
            }
        }
        Ok(EntryName {
            path: path.to_owned(),
            dir,
        })
    }

    /// The name as the zip spells it (directories end in `/`).
    pub fn shown(&self) -> String {
        if self.dir {
            format!("{}/", self.path)
        } else {
            self.path.clone()
        }
    }

    /// The first component is the generated Dockerfile's name, in any case
    /// or normalisation.
    pub fn is_reserved(&self) -> bool {
        let first = self.path.split('/').next().unwrap_or_default();
        fold(first) == fold(RESERVED)
    }
}

/// The key two names share when a case-insensitive, normalising
/// filesystem would make them one file.
fn fold(path: &str) -> String {
    if path.is_ascii() {
        return path.to_ascii_lowercase();
    }
    path.nfd().flat_map(char::to_lowercase).nfc().collect()
}

const SAME_NAME: &str = "the same name appears twice";
const SAME_FOLDED: &str = "names that differ only in case or Unicode normalisation (NFC/NFD) are one file on many filesystems";
const FILE_AND_DIR: &str = "a file's name is also used as a directory";

/// The first `n` components of a path.
fn leading(path: &str, n: usize) -> &str {
    if n == 0 {
        return "";
    }
    match path.match_indices('/').nth(n - 1) {
        Some((i, _)) => &path[..i],
        None => path,
    }
}

/// Refuses two names that would be one file somewhere: the same name, or
/// names equal but for case or normalisation, at any depth (`Lib/a` and
/// `lib/b` put two spellings of one directory side by side), or a file
/// whose name another entry uses as a directory.
///
/// Names are sorted by their folded keys, with components joined by NUL
/// (which no name holds, and which sorts first), so the entries under a
/// directory come right after it and any two names sharing a folded prefix
/// have every name between them share it too: comparing neighbours finds
/// every clash, in time and memory that grow with the total length of the
/// names, not with their depth.
pub(super) fn find_clash<'a>(
    names: impl Iterator<Item = &'a EntryName>,
) -> Result<(), ArchiveError> {
    let mut keyed: Vec<(String, &EntryName)> = names
        .map(|n| (fold(&n.path).replace('/', "\0"), n))
        .collect();
    keyed.sort_by(|a, b| a.0.cmp(&b.0));
    for pair in keyed.windows(2) {
        let ((ka, a), (kb, b)) = (&pair[0], &pair[1]);
        let parts_a = ka.split('\0').count();
        let parts_b = kb.split('\0').count();
        let common = ka
            .split('\0')
            .zip(kb.split('\0'))
            .take_while(|(x, y)| x == y)
            .count();
        let why = if common == parts_a && common == parts_b {
            if a.dir != b.dir {
                FILE_AND_DIR
            } else if a.path == b.path {
                SAME_NAME
            } else {
                SAME_FOLDED
            }
        } else if common == parts_a && !a.dir {
            FILE_AND_DIR
        } else if leading(&a.path, common) != leading(&b.path, common) {
            SAME_FOLDED
        } else {
            continue;
        };
        return Err(ArchiveError::Clash {
            path: b.shown(),
            other: a.shown(),
            why,
        });
    }
    Ok(())
}
