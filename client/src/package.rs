//! Packing a function's directory into the zip an upload sends.
//!
//! [`zip_dir`] walks a directory and packs what it holds into a zip the
//! server accepts, or refuses before anything is uploaded, naming the file
//! at fault.
//!
//! # The same files give the same bytes
//!
//! Uploading the same source twice answers `unchanged` because the server
//! names a version by the sha256 of its zip, so the zip depends only on the
//! files' relative paths, contents and execute bits: not on where the
//! directory is, the files' times or owners, the umask, or the order the
//! file system lists them in.
//!
//! - Entries are sorted by path: the byte order of the `/`-separated path
//!   relative to the directory.
//! - Only files are entries. Directories are implied by the paths of the
//!   files in them, so an empty directory is not packed (and the entry count
//!   the server limits is the file count).
//! - Every entry has the same time, 1980-01-01 00:00:00 (the earliest a zip
//!   can store), and no extra fields: no extended timestamps, owners or
//!   alignment padding.
//! - A file's mode is `0644`, or `0755` when its owner's execute bit is set.
//! - Every file is deflated at level 6. The compressed bytes are those of the
//!   deflate implementation this crate is built with: a client built with a
//!   different one may pack the same files to other bytes.
//!
//! # What is packed
//!
//! Everything under the directory but what the ignore rules leave out. The
//! rules are those of `.slessignore` at the top of the directory, in
//! gitignore syntax (`#` comments, `!` negation, a leading or middle `/`
//! anchors a pattern to the directory, a trailing `/` matches directories
//! only, `**` matches any number of directories; the last matching line
//! wins), read after these defaults:
//!
//! ```text
//! .git/
//! __pycache__/
//! node_modules/
//! .venv/
//! ```
//!
//! so a `.slessignore` line such as `!node_modules/` packs a default-ignored
//! directory again. As in gitignore, nothing inside an ignored directory can
//! be packed again by a later `!` line: the directory is not walked. Only the
//! top `.slessignore` is read, and it is not packed itself; one in a
//! subdirectory is an ordinary file. An ignored entry is never looked at, so
//! a special file or a bad link in an ignored directory does no harm.
//!
//! # What is refused
//!
//! - A symbolic link whose target is absolute, leads outside the directory,
//!   resolves (through any chain of links) outside it, or does not exist. A
//!   link to a file inside the directory is followed: the file's content and
//!   execute bit are packed under the link's path, as a regular file. A link
//!   to a directory is refused (packing it would copy that directory, or
//!   loop): move the directory, or link its files.
//! - Sockets, FIFOs and devices.
//! - A name that is not valid UTF-8.
//! - More files than [`PackLimits::max_files`], more bytes of files than
//!   [`PackLimits::max_unpacked_bytes`] (both before any file is read), and a
//!   zip larger than [`PackLimits::max_zip_bytes`].
//! - A directory with no file to pack, once the ignore rules are applied.
//! - A zip the server would refuse for any other reason: the packed zip is
//!   checked with the server's own rules (`sless_domain::archive`), which
//!   refuse for instance a `Dockerfile` at the top (sless generates it), or
//!   two names that differ only in case. This check unpacks the zip in
//!   memory, as the server does.

use std::io;
use std::path::Path;

use sless_domain::archive::{self, ArchiveError, ArchiveLimits};

mod rules;
mod walk;
mod write;

pub use rules::{DEFAULT_IGNORES, IGNORE_FILE};

/// The server's bounds on an upload, checked before it is sent.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PackLimits {
    /// Largest zip, in bytes.
    pub max_zip_bytes: u64,
    /// Most files.
    pub max_files: usize,
    /// Largest total size of the files, in bytes.
    pub max_unpacked_bytes: u64,
}

impl Default for PackLimits {
    /// The limits a server has unless it is configured otherwise.
    fn default() -> Self {
        PackLimits::from(&ArchiveLimits::default())
    }
}

impl From<&ArchiveLimits> for PackLimits {
    fn from(limits: &ArchiveLimits) -> Self {
        PackLimits {
            max_zip_bytes: limits.max_zip_bytes,
            max_files: limits.max_files,
            max_unpacked_bytes: limits.max_unpacked_bytes,
        }
    }
}

/// A packed directory, ready to upload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Packed {
    /// The zip.
    pub bytes: Vec<u8>,
    /// Hex sha256 of `bytes`: the name the server gives this source.
    pub sha256: String,
    /// How many files it holds.
    pub files: usize,
    /// The total size of those files, in bytes.
    pub unpacked_bytes: u64,
    /// The packed paths (`/`-separated, relative to the directory), in the
    /// zip's order.
    pub paths: Vec<String>,
}

/// Why a directory was not packed. Paths are relative to the directory.
#[derive(Debug, thiserror::Error)]
pub enum PackError {
    #[error("{path}: {source}")]
    Io {
        path: String,
        #[source]
        source: io::Error,
    },
    #[error("{path} is not a directory")]
    NotADirectory { path: String },
    #[error("{IGNORE_FILE}: {why}")]
    IgnoreFile { why: String },
    #[error("{path:?} is a symbolic link to {target:?}, which {why}")]
    Link {
        path: String,
        target: String,
        why: &'static str,
    },
    #[error(
        "{path:?} is a {kind}: only regular files, directories and symbolic links to files can be packed"
    )]
    SpecialFile { path: String, kind: &'static str },
    #[error("{path:?} is not valid UTF-8: rename it (names in a zip are UTF-8)")]
    NotUtf8 { path: String },
    #[error("{path:?} changed while it was packed: pack again")]
    Changed { path: String },
    #[error("{count} files to pack; the server accepts at most {limit}")]
    TooManyFiles { count: usize, limit: usize },
    #[error("the files to pack add up to {size} bytes; the server accepts at most {limit}")]
    UnpacksTooLarge { size: u64, limit: u64 },
    #[error("the zip is {size} bytes; the server accepts at most {limit}")]
    ZipTooLarge { size: u64, limit: u64 },
    #[error("nothing to pack: {dir} holds no file once the ignore rules are applied")]
    Empty { dir: String },
    #[error("the server would refuse the zip: {0}")]
    Refused(ArchiveError),
    #[error("writing the zip: {0}")]
    Zip(#[from] zip::result::ZipError),
}

impl PackError {
    /// The file at fault, when one is (relative to the directory).
    pub fn path(&self) -> Option<&str> {
        match self {
            PackError::Io { path, .. }
            | PackError::Link { path, .. }
            | PackError::SpecialFile { path, .. }
            | PackError::NotUtf8 { path }
            | PackError::Changed { path } => Some(path),
            PackError::IgnoreFile { .. } => Some(IGNORE_FILE),
            PackError::Refused(e) => e.entry(),
            _ => None,
        }
    }
}

/// Packs the directory `dir` into the zip an upload sends: see the module
/// documentation for what is packed, how, and what is refused.
pub fn zip_dir(dir: &Path, limits: &PackLimits) -> Result<Packed, PackError> {
    let shown = dir.display().to_string();
    let root = dir.canonicalize().map_err(|source| PackError::Io {
        path: shown.clone(),
        source,
    })?;
    if !root.is_dir() {
        return Err(PackError::NotADirectory { path: shown });
    }
    let rules = rules::Rules::load(&root)?;
    let sources = walk::collect(&root, &rules)?;

    if sources.is_empty() {
        return Err(PackError::Empty { dir: shown });
    }
    if sources.len() > limits.max_files {
        return Err(PackError::TooManyFiles {
            count: sources.len(),
            limit: limits.max_files,
        });
    }
    let unpacked_bytes = sources.iter().map(|s| s.size).sum::<u64>();
    if unpacked_bytes > limits.max_unpacked_bytes {
        return Err(PackError::UnpacksTooLarge {
            size: unpacked_bytes,
            limit: limits.max_unpacked_bytes,
        });
    }

    let bytes = write::zip(&sources)?;
    let size = bytes.len() as u64;
    if size > limits.max_zip_bytes {
        return Err(PackError::ZipTooLarge {
            size,
            limit: limits.max_zip_bytes,
        });
    }
    let server = ArchiveLimits {
        max_zip_bytes: limits.max_zip_bytes,
        max_files: limits.max_files,
        max_unpacked_bytes: limits.max_unpacked_bytes,
        ..ArchiveLimits::default()
    };
    let valid = archive::validate_zip(&bytes, &server).map_err(PackError::Refused)?;

    Ok(Packed {
        sha256: valid.sha256,
        bytes,
        files: sources.len(),
        unpacked_bytes,
        paths: sources.into_iter().map(|s| s.path).collect(),
    })
}
