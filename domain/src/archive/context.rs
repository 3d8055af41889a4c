//! The build context: a deterministic tar.gz of the files, their parent
//! directories and a generated Dockerfile, every entry with a normalised
//! mode, owner 0 and time 0.

use std::collections::{BTreeMap, BTreeSet};
use std::io::{Read, Write};

use sha2::{Digest, Sha256};

use super::ArchiveError;
use super::dockerfile::{self, MAX_MANIFEST_BYTES};
use crate::spec::Runtime;

/// The mode of a file in a build context.
pub const FILE_MODE: u32 = 0o644;
/// The mode of a file the zip gave any execute bit.
pub const EXECUTABLE_MODE: u32 = 0o755;
/// The mode of every directory in a build context.
pub const DIRECTORY_MODE: u32 = 0o755;

/// The build context of files that are all `0644`.
pub fn build_context(runtime: Runtime, files: &BTreeMap<String, Vec<u8>>) -> Vec<u8> {
    build_context_with_modes(runtime, files, &BTreeSet::new())
}

/// How hard the build context is compressed: level 2. Packing is on every
/// upload's path; for a 10 MiB zip of sources and binaries (24 MiB of
/// files) level 2 takes 175 ms where the default (6) takes 540 ms, for a
/// context 13% larger (level 1: 110 ms, 37% larger). Fixed, so the same
/// files always give the same bytes.
pub const CONTEXT_COMPRESSION: u32 = 2;

/// The build context: the Dockerfile, then each file after the directories
/// above it that came before it; `executables` are `0755`, other files
/// `0644`, directories `0755`.
pub fn build_context_with_modes(
    runtime: Runtime,
    files: &BTreeMap<String, Vec<u8>>,
    executables: &BTreeSet<String>,
) -> Vec<u8> {
    let manifest = files
        .get(dockerfile::manifest(runtime))
        .filter(|m| m.len() as u64 <= MAX_MANIFEST_BYTES);
    let generated = dockerfile::dockerfile(
        runtime,
        files.keys().map(String::as_str),
        manifest.map(Vec::as_slice),
    );
    let mut context = ContextWriter::new(&generated);
    for (path, data) in files {
        let mode = if executables.contains(path) {
            EXECUTABLE_MODE
        } else {
            FILE_MODE
        };
        context
            .file(path, data.len() as u64, mode, &data[..])
            .expect("writing to memory");
    }
    context.finish().0
}

/// A build context written file by file, in path order, hashed as it is
/// written: what `build_context_with_modes` makes of files in memory, and
/// `pack_zip` of a zip's entries streamed out of it.
pub(super) struct ContextWriter {
    tar: tar::Builder<Chunked<flate2::write::GzEncoder<Hashed>>>,
    /// The last file's path: the paths under a directory come one after
    /// the other, so a directory not above it is one not written yet.
    last: String,
}

/// The tar stream handed to the compressor in chunks of `CHUNK` bytes,
/// whatever the writes it came in: deflate's output depends on how its
/// input is split, and the context's bytes must depend on the files alone
/// (not on whether they were read from memory or inflated from a zip).
struct Chunked<W: Write> {
    inner: W,
    pending: Vec<u8>,
}

impl<W: Write> Chunked<W> {
    const CHUNK: usize = 64 * 1024;

    fn into_inner(mut self) -> std::io::Result<W> {
        self.inner.write_all(&self.pending)?;
        Ok(self.inner)
    }
}

impl<W: Write> Write for Chunked<W> {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let n = buf.len().min(Self::CHUNK - self.pending.len());
        self.pending.extend_from_slice(&buf[..n]);
        if self.pending.len() == Self::CHUNK {
            self.inner.write_all(&self.pending)?;
            self.pending.clear();
        }
        Ok(n)
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(()) // the chunks stay whole: `into_inner` writes the rest
    }
}

/// The bytes written, and their sha256.
pub(super) struct Hashed {
    bytes: Vec<u8>,
    sha256: Sha256,
}

impl Write for Hashed {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.sha256.update(buf);
        self.bytes.extend_from_slice(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl ContextWriter {
    /// A context holding `dockerfile` (see `dockerfile::dockerfile`).
    pub(super) fn new(dockerfile: &str) -> ContextWriter {
        let out = Hashed {
            bytes: Vec::new(),
            sha256: Sha256::new(),
        };
        let gz = flate2::write::GzEncoder::new(out, flate2::Compression::new(CONTEXT_COMPRESSION));
        let mut tar = tar::Builder::new(Chunked {
            inner: gz,
            pending: Vec::with_capacity(Chunked::<Hashed>::CHUNK),
        });
        tar.mode(tar::HeaderMode::Deterministic);
        let mut context = ContextWriter {
            tar,
            last: String::new(),
        };
        context
            .append(
                "Dockerfile",
                dockerfile.len() as u64,
                FILE_MODE,
                dockerfile.as_bytes(),
            )
            .expect("writing to memory");
        context
    }

    /// Appends the file `path` of `size` bytes read from `data`, after the
    /// directories above it not written yet. Files come in path order (of
    /// their bytes, as a `BTreeMap<String, _>` holds them);
    /// `data` must hold exactly `size` bytes (it is not checked here).
    pub(super) fn file(
        &mut self,
        path: &str,
        size: u64,
        mode: u32,
        data: impl Read,
    ) -> std::io::Result<()> {
        for (i, _) in path.match_indices('/') {
            let dir = &path[..=i];
            if !self.last.starts_with(dir) {
                let mut header = header(tar::EntryType::Directory, 0, DIRECTORY_MODE);
                self.tar.append_data(&mut header, dir, std::io::empty())?;
            }
        }
        self.last.clear();
        self.last.push_str(path);
        self.append(path, size, mode, data)
    }

    fn append(&mut self, path: &str, size: u64, mode: u32, data: impl Read) -> std::io::Result<()> {
        let mut header = header(tar::EntryType::Regular, size, mode);
        self.tar.append_data(&mut header, path, data)
    }

    /// The context's bytes and their sha256 (hex).
    pub(super) fn finish(self) -> (Vec<u8>, String) {
        let chunked = self.tar.into_inner().expect("writing to memory");
        let gz = chunked.into_inner().expect("writing to memory");
        let out = gz.finish().expect("writing to memory");
        (out.bytes, hex::encode(out.sha256.finalize()))
    }
}

fn header(kind: tar::EntryType, size: u64, mode: u32) -> tar::Header {
    let mut header = tar::Header::new_gnu();
    header.set_entry_type(kind);
    header.set_size(size);
    header.set_mode(mode);
    header.set_mtime(0);
    header.set_uid(0);
    header.set_gid(0);
    header
}

/// The mode of every entry of a build context, by path (directories end in
/// `/`), with its type bits (`0o100000` a file, `0o040000` a directory,
/// `0o120000` a symlink, `0o170000` anything else): what a build will see.
pub fn context_modes(context: &[u8]) -> Result<BTreeMap<String, u32>, ArchiveError> {
    let corrupt = |e: std::io::Error| ArchiveError::Corrupt(format!("build context: {e}"));
    let mut tar = tar::Archive::new(flate2::read::GzDecoder::new(context));
    let mut modes = BTreeMap::new();
    for entry in tar.entries().map_err(corrupt)? {
        let mut entry = entry.map_err(corrupt)?;
        let mode = entry.header().mode().map_err(corrupt)?;
        let kind = match entry.header().entry_type() {
            tar::EntryType::Regular => 0o100000,
            tar::EntryType::Directory => 0o040000,
            tar::EntryType::Symlink => 0o120000,
            _ => 0o170000,
        };
        let path = String::from_utf8_lossy(&entry.path_bytes()).into_owned();
        std::io::copy(&mut entry, &mut std::io::sink()).map_err(corrupt)?;
        modes.insert(path, kind | mode);
    }
    Ok(modes)
}
