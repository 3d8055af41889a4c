//! The rules an uploaded zip must follow, and the build context made from it.
//!
//! Pure: works on bytes in memory. A zip is refused when it is corrupt, too
//! large, has too many files, holds `..` or absolute paths, symlinks, or
//! decompresses far beyond its size (a bomb). The build context is a
//! deterministic tar.gz: the same files always give the same bytes, so it can
//! be stored under its own sha256.

use std::collections::BTreeMap;
use std::io::{Cursor, Read, Write};

use sha2::{Digest, Sha256};

use crate::spec::Runtime;

/// Bounds on what an upload may hold.
#[derive(Debug, Clone, Copy)]
pub struct ArchiveLimits {
    /// Largest zip accepted, in bytes.
    pub max_zip_bytes: u64,
    pub max_files: usize,
    /// Largest total of all files once unpacked.
    pub max_unpacked_bytes: u64,
    /// Unpacked size over zip size beyond which an archive counts as a bomb
    /// (checked once the unpacked size passes `ratio_floor_bytes`).
    pub max_ratio: u64,
    pub ratio_floor_bytes: u64,
}

impl Default for ArchiveLimits {
    fn default() -> Self {
        ArchiveLimits {
            max_zip_bytes: 50 * 1024 * 1024,
            max_files: 10_000,
            max_unpacked_bytes: 256 * 1024 * 1024,
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
    #[error("the archive holds {count} files; the limit is {limit}")]
    TooManyFiles { count: usize, limit: usize },
    #[error("the archive unpacks to more than {limit} bytes")]
    UnpacksTooLarge { limit: u64 },
    #[error(
        "the archive unpacks to {ratio}x its size; more than {limit}x looks like a decompression bomb"
    )]
    Bomb { ratio: u64, limit: u64 },
    #[error("entry {path:?} is not allowed: {why}")]
    BadEntry { path: String, why: &'static str },
    #[error("the archive holds no files")]
    Empty,
}

/// A zip that passed every rule, with its files unpacked.
#[derive(Debug, Clone)]
pub struct ValidArchive {
    /// sha256 (hex) of the zip bytes.
    pub sha256: String,
    pub size: u64,
    /// Files by relative path (`/`-separated), sorted.
    pub files: BTreeMap<String, Vec<u8>>,
}

const S_IFMT: u32 = 0o170000;
const S_IFLNK: u32 = 0o120000;
const S_IFREG: u32 = 0o100000;
const S_IFDIR: u32 = 0o040000;

/// Validates a zip and unpacks it in memory.
pub fn validate_zip(bytes: &[u8], limits: &ArchiveLimits) -> Result<ValidArchive, ArchiveError> {
    let size = bytes.len() as u64;
    if size > limits.max_zip_bytes {
        return Err(ArchiveError::TooLarge {
            size,
            limit: limits.max_zip_bytes,
        });
    }
    let mut zip = zip::ZipArchive::new(Cursor::new(bytes))
        .map_err(|e| ArchiveError::Corrupt(e.to_string()))?;
    if zip.len() > limits.max_files {
        return Err(ArchiveError::TooManyFiles {
            count: zip.len(),
            limit: limits.max_files,
        });
    }
    // Declared sizes first: cheap, and refuses most bombs before inflating anything.
    let mut declared: u64 = 0;
    for i in 0..zip.len() {
        let entry = zip
            .by_index_raw(i)
            .map_err(|e| ArchiveError::Corrupt(e.to_string()))?;
        declared = declared.saturating_add(entry.size());
    }
    check_unpacked(declared, size, limits)?;

    let mut files = BTreeMap::new();
    let mut unpacked: u64 = 0;
    for i in 0..zip.len() {
        let mut entry = zip
            .by_index(i)
            .map_err(|e| ArchiveError::Corrupt(e.to_string()))?;
        let raw_name = entry
            .name()
            .map_err(|e| ArchiveError::Corrupt(format!("entry {i}: {e}")))?
            .into_owned();
        let bad = |why| ArchiveError::BadEntry {
            path: raw_name.clone(),
            why,
        };
        let path = check_path(&raw_name).map_err(bad)?;
        let kind = entry.unix_mode().map(|m| m & S_IFMT);
        if kind == Some(S_IFLNK) {
            return Err(bad("symbolic links are not allowed"));
        }
        if entry.is_dir() || kind == Some(S_IFDIR) {
            continue;
        }
        if kind.is_some_and(|k| k != S_IFREG && k != 0) {
            return Err(bad("only regular files and directories are allowed"));
        }
        if path == "Dockerfile" {
            return Err(bad(
                "a Dockerfile at the archive root is reserved: sless generates it",
            ));
        }
        // Never trust the declared size: read at most what the limit still allows.
        let room = limits.max_unpacked_bytes - unpacked.min(limits.max_unpacked_bytes);
        let mut data = Vec::with_capacity(entry.size().min(room) as usize);
        (&mut entry)
            .take(room + 1)
            .read_to_end(&mut data)
            .map_err(|e| ArchiveError::Corrupt(format!("{raw_name}: {e}")))?;
        unpacked += data.len() as u64;
        check_unpacked(unpacked, size, limits)?;
        if files.insert(path.clone(), data).is_some() {
            return Err(ArchiveError::BadEntry {
                path,
                why: "the path appears twice",
            });
        }
    }
    if files.is_empty() {
        return Err(ArchiveError::Empty);
    }
    Ok(ValidArchive {
        sha256: sha256_hex(bytes),
        size,
        files,
    })
}

fn check_unpacked(
    unpacked: u64,
    zip_size: u64,
    limits: &ArchiveLimits,
) -> Result<(), ArchiveError> {
    if unpacked > limits.max_unpacked_bytes {
        return Err(ArchiveError::UnpacksTooLarge {
            limit: limits.max_unpacked_bytes,
        });
    }
    if unpacked > limits.ratio_floor_bytes {
        let ratio = unpacked / zip_size.max(1);
        if ratio > limits.max_ratio {
            return Err(ArchiveError::Bomb {
                ratio,
                limit: limits.max_ratio,
            });
        }
    }
    Ok(())
}

/// A relative, normal path: no absolute paths, drive letters, backslashes,
/// `.`/`..` components or control characters.
fn check_path(name: &str) -> Result<String, &'static str> {
    if name.is_empty() {
        return Err("the path is empty");
    }
    if name.starts_with('/') || name.contains('\\') || name.as_bytes().get(1) == Some(&b':') {
        return Err("absolute paths are not allowed");
    }
    if name.chars().any(|c| c.is_control()) {
        return Err("control characters are not allowed in paths");
    }
    let trimmed = name.trim_end_matches('/');
    let mut parts = Vec::new();
    for part in trimmed.split('/') {
        match part {
            ".." => return Err("'..' is not allowed in paths"),
            "" | "." => return Err("empty or '.' path components are not allowed"),
            p => parts.push(p),
        }
    }
    if trimmed.len() > 1024 {
        return Err("the path is longer than 1024 characters");
    }
    Ok(parts.join("/"))
}

pub fn sha256_hex(bytes: &[u8]) -> String {
    hex::encode(Sha256::digest(bytes))
}

/// The Dockerfile a build context gets for a runtime. The runtime base image
/// holds the HTTP wrapper; its registry is given at build time.
pub fn dockerfile(runtime: Runtime) -> String {
    let install = match runtime {
        Runtime::Python311 => {
            "RUN if [ -f requirements.txt ]; then pip install --no-cache-dir -r requirements.txt --target /opt/sless/deps; fi"
        }
        Runtime::Nodejs20 => "RUN if [ -f package.json ]; then npm install --omit=dev; fi",
        Runtime::Go123 => "RUN go build -o /opt/sless/function .",
    };
    format!(
        "# Generated by sless for {runtime}; the user's files are beside it.\n\
         ARG SLESS_RUNTIME_IMAGE=sless-runtime-{runtime}\n\
         FROM ${{SLESS_RUNTIME_IMAGE}}\n\
         WORKDIR /app\n\
         COPY . /app\n\
         {install}\n"
    )
}

/// The build context: a deterministic tar.gz of the files plus the Dockerfile.
pub fn build_context(runtime: Runtime, files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    let gz = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::default());
    let mut tar = tar::Builder::new(gz);
    tar.mode(tar::HeaderMode::Deterministic);
    let dockerfile = dockerfile(runtime);
    let entries = std::iter::once(("Dockerfile", dockerfile.as_bytes()))
        .chain(files.iter().map(|(p, d)| (p.as_str(), d.as_slice())));
    for (path, data) in entries {
        let mut header = tar::Header::new_gnu();
        header.set_size(data.len() as u64);
        header.set_mode(0o644);
        header.set_mtime(0);
        header.set_entry_type(tar::EntryType::Regular);
        tar.append_data(&mut header, path, data)
            .expect("writing to memory");
    }
    let gz = tar.into_inner().expect("writing to memory");
    let mut out = gz.finish().expect("writing to memory");
    out.flush().expect("writing to memory");
    out
}

#[cfg(test)]
mod tests;
