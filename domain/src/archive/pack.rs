//! Checking a zip and packing its build context in one pass: each entry is
//! inflated once, straight into the context, within the same budget
//! `validate_zip` counts against (the bytes actually inflated, never the
//! sizes the headers declare). Nothing but the context is held: a bomb is
//! refused when the bytes inflated pass the budget, having cost the context
//! written so far, which compresses as well as the bomb did.

use std::io::{self, Read};

use sha2::{Digest, Sha256};

use super::context::ContextWriter;
use super::dockerfile::{self, MAX_MANIFEST_BYTES};
use super::inflate::{self, Budget, Meter};
use super::{ArchiveError, ArchiveLimits, EXECUTABLE_MODE, FILE_MODE, corrupt, entries, open};
use crate::spec::Runtime;

/// A zip that passed every rule, packed into its build context.
#[derive(Debug, Clone)]
pub struct PackedArchive {
    /// sha256 (hex) of the zip bytes.
    pub sha256: String,
    pub size: u64,
    /// How many files it holds.
    pub files: usize,
    /// The build context: the same bytes `ValidArchive::build_context`
    /// gives for the same zip.
    pub context: Vec<u8>,
    /// sha256 (hex) of the context.
    pub context_sha256: String,
}

/// Checks a zip by every rule of `validate_zip` and packs its build context
/// for `runtime` as it inflates it; `progress` hears of every chunk
/// inflated, in bytes (and, with 0, of other work done: the zip hashed a
/// mebibyte at a time), so a caller can tell work that goes on from work
/// that stalled.
pub fn pack_zip(
    bytes: &[u8],
    limits: &ArchiveLimits,
    runtime: Runtime,
    progress: &mut dyn FnMut(u64),
) -> Result<PackedArchive, ArchiveError> {
    let size = bytes.len() as u64;
    let (mut zip, entries) = entries(bytes, limits)?;
    let mut budget = Budget::new(size, limits);
    // Directories first: they must hold nothing.
    let mut buffer = vec![0u8; 4096];
    for e in entries.iter().filter(|e| e.name.dir) {
        let path = e.name.shown();
        let mut reader = open(&mut zip, e.index, &path)?;
        let held = inflate::count(&mut reader, &mut budget, &mut buffer, &mut Meter::default())
            .map_err(|err| err.for_entry(&path))?;
        if held > 0 {
            return Err(ArchiveError::BadEntry {
                path,
                why: "a directory entry holds data",
            });
        }
    }
    // The files in path order, as the context lists them.
    let mut files: Vec<_> = entries.iter().filter(|e| !e.name.dir).collect();
    files.sort_unstable_by(|a, b| a.name.path.cmp(&b.name.path));
    let generated = dockerfile::dockerfile(
        runtime,
        files.iter().map(|e| e.name.path.as_str()),
        manifest(&mut zip, &files, runtime).as_deref(),
    );
    let mut context = ContextWriter::new(&generated);
    for e in &files {
        let path = e.name.shown();
        let declared = zip.by_index_data(e.index).map_err(corrupt)?.size();
        let reader = open(&mut zip, e.index, &path)?;
        let mut checked = Checked {
            inner: reader,
            path: &path,
            declared,
            inflated: 0,
            budget: &mut budget,
            progress: &mut *progress,
            refused: None,
        };
        let mode = if e.executable {
            EXECUTABLE_MODE
        } else {
            FILE_MODE
        };
        let written = context.file(&e.name.path, declared, mode, &mut checked);
        if let Some(refused) = checked.refused {
            return Err(refused);
        }
        written.map_err(|err| ArchiveError::Corrupt(format!("{path:?}: {err}")))?;
    }
    let (context, context_sha256) = context.finish();
    let mut sha256 = Sha256::new();
    for chunk in bytes.chunks(1 << 20) {
        sha256.update(chunk);
        progress(0);
    }
    Ok(PackedArchive {
        sha256: hex::encode(sha256.finalize()),
        size,
        files: files.len(),
        context,
        context_sha256,
    })
}

/// The bytes of the runtime's dependency manifest, which the Dockerfile
/// is written from before any file: read ahead of the others, when its
/// header declares at most [`MAX_MANIFEST_BYTES`]. It is read again, and
/// checked and charged to the budget, with the other files; a manifest
/// that does not inflate to its declared size here is `None` (the
/// Dockerfile's form that reads nothing of it), and refused there.
fn manifest(
    zip: &mut super::ZipReader<'_>,
    files: &[&super::Entry],
    runtime: Runtime,
) -> Option<Vec<u8>> {
    let name = dockerfile::manifest(runtime);
    let entry = files.iter().find(|e| e.name.path == name)?;
    let declared = zip.by_index_data(entry.index).ok()?.size();
    if declared > MAX_MANIFEST_BYTES {
        return None;
    }
    let reader = open(zip, entry.index, name).ok()?;
    let mut bytes = Vec::new();
    reader.take(declared + 1).read_to_end(&mut bytes).ok()?;
    (bytes.len() as u64 == declared).then_some(bytes)
}

/// An entry's inflated bytes, charged to the budget, that must come to
/// exactly the size its header declares (the size the context's header
/// was written with); reading it to its end checks its CRC. Why it
/// stopped is kept in `refused`.
struct Checked<'a, R> {
    inner: R,
    path: &'a str,
    declared: u64,
    inflated: u64,
    budget: &'a mut Budget,
    progress: &'a mut dyn FnMut(u64),
    refused: Option<ArchiveError>,
}

impl<R: Read> Checked<'_, R> {
    fn inflate(&mut self, buf: &mut [u8]) -> Result<usize, ArchiveError> {
        let n = loop {
            match self.inner.read(buf) {
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) => return Err(ArchiveError::Corrupt(format!("{:?}: {e}", self.path))),
                Ok(n) => break n,
            }
        };
        self.inflated += n as u64;
        self.budget.spend(n as u64)?;
        (self.progress)(n as u64);
        Ok(n)
    }

    fn mismatch(&self) -> ArchiveError {
        ArchiveError::Corrupt(format!(
            "{:?} inflates to {} bytes; its header says {}",
            self.path, self.inflated, self.declared
        ))
    }

    fn read_checked(&mut self, buf: &mut [u8]) -> Result<usize, ArchiveError> {
        let n = self.inflate(buf)?;
        if n == 0 && self.inflated != self.declared {
            return Err(self.mismatch());
        }
        if self.inflated > self.declared {
            // Counted to its end (within the budget) to say how far it goes.
            while self.inflate(buf)? > 0 {}
            return Err(self.mismatch());
        }
        Ok(n)
    }
}

impl<R: Read> Read for Checked<'_, R> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if self.refused.is_some() {
            return Err(io::Error::other("refused"));
        }
        self.read_checked(buf).map_err(|refused| {
            self.refused = Some(refused);
            io::Error::other("refused")
        })
    }
}
