//! The rules an uploaded zip must follow, and the build context made from it.
//!
//! Pure: works on bytes in memory. A zip is refused when it is corrupt
//! (including a CRC mismatch), too large, has too many entries or none that
//! is a file, holds a name that is not a plain relative UTF-8 path (`..`,
//! absolute paths, drive letters, backslashes, control characters, overlong
//! names), two names that are the same file somewhere (exact, case or Unicode
//! normalisation duplicates, a file that is also a directory), an entry that
//! is not a regular file or directory (symlinks, devices, FIFOs, sockets), an
//! encrypted entry, or inflates far beyond its size (a bomb).
//!
//! Nothing is trusted from the headers: sizes are counted on the bytes
//! actually inflated. Every entry is first inflated into a fixed buffer and
//! counted, so a bomb is refused having cost a bounded amount of inflating
//! and no memory beyond that buffer; only an archive within every limit is
//! inflated a second time, into memory.
//!
//! Modes are normalised: a file is `0644`, or `0755` when the zip gave it any
//! execute bit; directories are `0755`; setuid, setgid and sticky bits never
//! survive. The build context is a deterministic tar.gz: the same files and
//! modes always give the same bytes, so it can be stored under its own sha256.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Cursor, Read, Seek};

use sha2::{Digest, Sha256};
use zip::CompressionMethod;
use zip::read::ZipReadOptions;

use crate::spec::Runtime;

mod context;
mod directory;
pub mod dockerfile;
mod inflate;
mod names;
mod pack;

pub use context::{
    CONTEXT_COMPRESSION, DIRECTORY_MODE, EXECUTABLE_MODE, FILE_MODE, build_context,
    build_context_with_modes, context_modes,
};
pub use dockerfile::dockerfile;
pub use names::{MAX_COMPONENT_BYTES, MAX_NAME_BYTES};
pub use pack::{PackedArchive, pack_zip};

use inflate::{Budget, Meter};
use names::EntryName;

/// Bounds on what an upload may hold.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveLimits {
    /// Largest zip accepted, in bytes.
    pub max_zip_bytes: u64,
    /// Most entries (files and directories) accepted.
    pub max_files: usize,
    /// Largest total of all files once unpacked.
    pub max_unpacked_bytes: u64,
    /// Bytes inflated over zip size beyond which an archive counts as a bomb
    /// (checked once the bytes inflated pass `ratio_floor_bytes`).
    pub max_ratio: u64,
    pub ratio_floor_bytes: u64,
}

impl Default for ArchiveLimits {
    fn default() -> Self {
        ArchiveLimits {
            max_zip_bytes: 50 * 1024 * 1024,
            max_files: 10_000,
            max_unpacked_bytes: 250 * 1024 * 1024,
            max_ratio: 100,
            ratio_floor_bytes: 8 * 1024 * 1024,
        }
    }
}

/// Why an archive was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ArchiveError {
    #[error("the archive is {size} bytes; the limit is {limit}")]
    TooLarge { size: u64, limit: u64 },
    #[error("the archive is not a valid zip: {0}")]
    Corrupt(String),
    #[error("the archive holds {count} entries; the limit is {limit}")]
    TooManyFiles { count: usize, limit: usize },
    #[error("the archive unpacks to more than {limit} bytes")]
    UnpacksTooLarge { limit: u64 },
    #[error(
        "the archive unpacks to more than {ratio}x its size; more than {limit}x looks like a decompression bomb"
    )]
    Bomb { ratio: u64, limit: u64 },
    #[error("entry {path:?} is not allowed: {why}")]
    BadEntry { path: String, why: &'static str },
    #[error("the archive holds no files")]
    Empty,
    /// Two entries that would be the same file (or a file and a directory)
    /// once unpacked somewhere.
    #[error("entries {path:?} and {other:?} clash: {why}")]
    Clash {
        path: String,
        other: String,
        why: &'static str,
    },
}

impl ArchiveError {
    /// The entry at fault, when one is.
    pub fn entry(&self) -> Option<&str> {
        match self {
            ArchiveError::BadEntry { path, .. } | ArchiveError::Clash { path, .. } => Some(path),
            _ => None,
        }
    }
}

/// A zip that passed every rule, with its files unpacked.
#[derive(Debug, Clone)]
pub struct ValidArchive {
    /// sha256 (hex) of the zip bytes.
    pub sha256: String,
    pub size: u64,
    /// Files by relative path (`/`-separated), sorted.
    pub files: BTreeMap<String, Vec<u8>>,
    /// The files the zip gave an execute bit: `0755` in the build context.
    /// Every other file is `0644`.
    pub executables: BTreeSet<String>,
}

impl ValidArchive {
    /// The build context of these files, with their normalised modes.
    pub fn build_context(&self, runtime: Runtime) -> Vec<u8> {
        build_context_with_modes(runtime, &self.files, &self.executables)
    }
}

const S_IFMT: u32 = 0o170000;
const S_IFSOCK: u32 = 0o140000;
const S_IFLNK: u32 = 0o120000;
const S_IFREG: u32 = 0o100000;
const S_IFBLK: u32 = 0o060000;
const S_IFDIR: u32 = 0o040000;
const S_IFCHR: u32 = 0o020000;
const S_IFIFO: u32 = 0o010000;

/// Validates a zip and unpacks it in memory.
pub fn validate_zip(bytes: &[u8], limits: &ArchiveLimits) -> Result<ValidArchive, ArchiveError> {
    validate(bytes, limits, &mut Meter::default())
}

/// One entry that passed the rules on its name and type.
struct Entry {
    index: usize,
    name: EntryName,
    executable: bool,
    /// Bytes it inflated to, once counted.
    size: u64,
}

/// A zip read from memory.
type ZipReader<'b> = zip::ZipArchive<Cursor<&'b [u8]>>;

/// The zip's reader and its entries, once the archive passed every rule
/// that needs nothing inflated: its size, its entry count, every name and
/// type, no clash, at least one file.
fn entries<'b>(
    bytes: &'b [u8],
    limits: &ArchiveLimits,
) -> Result<(ZipReader<'b>, Vec<Entry>), ArchiveError> {
    let size = bytes.len() as u64;
    if size > limits.max_zip_bytes {
        return Err(ArchiveError::TooLarge {
            size,
            limit: limits.max_zip_bytes,
        });
    }
    // The count the end records declare bounds what parsing the central
    // directory costs: refuse before parsing it.
    if let Some(count) = directory::declared_entries(bytes)
        && count > limits.max_files as u64
    {
        return Err(ArchiveError::TooManyFiles {
            count: usize::try_from(count).unwrap_or(usize::MAX),
            limit: limits.max_files,
        });
    }
    let zip = zip::ZipArchive::new(Cursor::new(bytes)).map_err(corrupt)?;
    if zip.len() > limits.max_files {
        return Err(ArchiveError::TooManyFiles {
            count: zip.len(),
            limit: limits.max_files,
        });
    }
    if zip.has_duplicate_names() {
        let name = directory::first_duplicate(bytes, zip.central_directory_start())
            .map(|raw| String::from_utf8_lossy(&raw).into_owned())
            .unwrap_or_else(|| "(unknown)".to_owned());
        return Err(ArchiveError::Clash {
            path: name.clone(),
            other: name,
            why: "the same name appears twice",
        });
    }

    let mut entries = Vec::with_capacity(zip.len());
    for index in 0..zip.len() {
        let entry = zip.by_index_data(index).map_err(corrupt)?;
        let raw = entry.name_raw();
        let shown = String::from_utf8_lossy(raw).into_owned();
        let bad = |why| ArchiveError::BadEntry {
            path: shown.clone(),
            why,
        };
        let mut name = EntryName::parse(raw).map_err(bad)?;
        let mode = entry.unix_mode().unwrap_or(0);
        match mode & S_IFMT {
            0 => {}
            S_IFDIR => name.dir = true,
            S_IFREG if name.dir => {
                return Err(bad("a regular file's name cannot end in '/'"));
            }
            S_IFREG => {}
            S_IFLNK => return Err(bad("symbolic links are not allowed")),
            S_IFCHR | S_IFBLK => return Err(bad("device files are not allowed")),
            S_IFIFO => return Err(bad("named pipes (FIFOs) are not allowed")),
            S_IFSOCK => return Err(bad("sockets are not allowed")),
            _ => return Err(bad("only regular files and directories are allowed")),
        }
        if entry.encrypted() {
            return Err(bad(
                "encrypted entries are not supported: zip the files without a password",
            ));
        }
        if entry.compression() != CompressionMethod::Stored
            && entry.compression() != CompressionMethod::Deflated
        {
            return Err(bad(
                "only stored and deflated entries are supported: zip with the deflate method",
            ));
        }
        if name.is_reserved() {
            return Err(bad(
                "a Dockerfile at the archive root is reserved: sless generates it",
            ));
        }
        entries.push(Entry {
            index,
            executable: !name.dir && mode & 0o111 != 0,
            name,
            size: 0,
        });
    }
    names::find_clash(entries.iter().map(|e| &e.name))?;
    if entries.iter().all(|e| e.name.dir) {
        return Err(ArchiveError::Empty);
    }
    Ok((zip, entries))
}

/// `validate_zip`, reporting to `meter` how much it inflated.
fn validate(
    bytes: &[u8],
    limits: &ArchiveLimits,
    meter: &mut Meter,
) -> Result<ValidArchive, ArchiveError> {
    let size = bytes.len() as u64;
    let (mut zip, mut entries) = entries(bytes, limits)?;

    // First pass: inflate every entry into a fixed buffer, counting. A bomb
    // or a corrupt entry stops here, having held nothing in memory.
    let mut budget = Budget::new(size, limits);
    let mut buffer = vec![0u8; inflate::BUFFER_BYTES];
    for e in &mut entries {
        let path = e.name.shown();
        let declared = zip.by_index_data(e.index).map_err(corrupt)?.size();
        let mut reader = open(&mut zip, e.index, &path)?;
        e.size = inflate::count(&mut reader, &mut budget, &mut buffer, meter)
            .map_err(|err| err.for_entry(&path))?;
        if e.name.dir && e.size > 0 {
            return Err(ArchiveError::BadEntry {
                path,
                why: "a directory entry holds data",
            });
        }
        if e.size != declared {
            return Err(ArchiveError::Corrupt(format!(
                "{path:?} inflates to {} bytes; its header says {declared}",
                e.size
            )));
        }
    }
    drop(buffer);

    // Second pass: every size is now known and within the limits.
    let mut files = BTreeMap::new();
    let mut executables = BTreeSet::new();
    for e in entries.into_iter().filter(|e| !e.name.dir) {
        let path = e.name.path;
        let reader = open(&mut zip, e.index, &path)?;
        let data =
            inflate::read_exactly(reader, e.size, meter).map_err(|err| err.for_entry(&path))?;
        if e.executable {
            executables.insert(path.clone());
        }
        files.insert(path, data);
    }
    Ok(ValidArchive {
        sha256: sha256_hex(bytes),
        size,
        files,
        executables,
    })
}

/// A reader of one entry's inflated bytes, with its local header checked
/// against the central directory (a zip whose two disagree shows different
/// files to different tools).
fn open<'z, R: Read + Seek>(
    zip: &'z mut zip::ZipArchive<R>,
    index: usize,
    path: &str,
) -> Result<zip::read::ZipFile<'z, R>, ArchiveError> {
    zip.by_index_with_options(
        index,
        ZipReadOptions::new().enforce_header_consistency(true),
    )
    .map_err(|e| ArchiveError::Corrupt(format!("{path:?}: {e}")))
}

fn corrupt(e: zip::result::ZipError) -> ArchiveError {
    ArchiveError::Corrupt(e.to_string())
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

#[cfg(test)]
mod tests;
