//! A build's directory: the context unpacked into a temporary directory
//! beside where the build goes ([`prepare`]), moved into place once
//! finished ([`finish`]) or removed, and leftovers of a crash cleared
//! ([`remove_stale_tmp_dirs`]).

use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::time::{Duration, SystemTime};

use flate2::read::GzDecoder;
use sless_sandbox::Identity;
use tar::{Archive, EntryType};

use super::{BUILD_COMPLETE, BUILD_LOG, COMPLETE_MARKER, SCRATCH, append_log, build_error, infra};
use crate::driver::DriverError;
use crate::local::sandbox;

/// Temporary build directories older than this are leftovers of a crash.
const STALE_TMP_AGE: Duration = Duration::from_secs(30 * 60);
/// Marks temporary build directories (`{sha}.tmp-<random>`).
const TMP_INFIX: &str = ".tmp-";

/// Removes a temporary build directory unless the build finished.
pub(super) struct TmpDir {
    pub(super) path: PathBuf,
    pub(super) keep: bool,
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Returns `None` when the build exists already, else a fresh temporary
/// directory with the context unpacked into `code/` (and how many files it
/// has) and a new, empty log. In a jail the directory is handed to the
/// build's user (`jail`: its identity and the namespace's cache directory,
/// made if missing).
pub(super) fn prepare(
    parent: &Path,
    final_dir: &Path,
    log: &Path,
    sha: &str,
    context: &[u8],
    jail: Option<(Identity, &Path)>,
) -> Result<Option<(TmpDir, usize)>, DriverError> {
    if final_dir.join(COMPLETE_MARKER).is_file() {
        return Ok(None);
    }
    std::fs::create_dir_all(parent).map_err(|e| infra("creating the build directory", e))?;
    remove_stale_tmp_dirs(parent, STALE_TMP_AGE);

    let suffix: u64 = rand::random();
    let tmp = TmpDir {
        path: parent.join(format!("{sha}{TMP_INFIX}{suffix:016x}")),
        keep: false,
    };
    let code = tmp.path.join("code");
    std::fs::create_dir_all(&code).map_err(|e| infra("creating the build directory", e))?;
    let files = unpack(context, &code)?;
    for dir in ["deps", "bin", SCRATCH] {
        std::fs::create_dir_all(tmp.path.join(dir))
            .map_err(|e| infra("creating the build directory", e))?;
    }
    if let Some(dir) = log.parent() {
        std::fs::create_dir_all(dir).map_err(|e| infra("creating the build log", e))?;
    }
    std::fs::write(log, "").map_err(|e| infra("writing the build log", e))?;
    if let Some((identity, cache)) = jail {
        if !cache.is_dir() {
            std::fs::create_dir_all(cache.join("home"))
                .map_err(|e| infra("creating the namespace's build cache", e))?;
            sandbox::hand_over(cache, Some(identity))
                .map_err(|e| infra("handing the build cache to its user", e))?;
        }
        sandbox::hand_over(&tmp.path, Some(identity))
            .map_err(|e| infra("handing the build directory to its user", e))?;
    }
    Ok(Some((tmp, files)))
}

/// Removes `*.tmp-*` directories below `parent` older than `min_age`
/// (`Duration::ZERO`: all of them).
pub(crate) fn remove_stale_tmp_dirs(parent: &Path, min_age: Duration) {
    let Ok(entries) = std::fs::read_dir(parent) else {
        return;
    };
    for entry in entries.flatten() {
        if !entry.file_name().to_string_lossy().contains(TMP_INFIX) {
            continue;
        }
        let age = entry
            .metadata()
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| SystemTime::now().duration_since(t).ok())
            .unwrap_or(Duration::MAX);
        if age >= min_age {
            tracing::info!(dir = %entry.path().display(), "removing an unfinished build");
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Unpacks a tar.gz into `dest`, refusing anything but regular files and
/// directories with relative paths that stay inside `dest`.
fn unpack(context: &[u8], dest: &Path) -> Result<usize, DriverError> {
    let invalid =
        |e: io::Error| build_error(format!("the build context is not a valid tar.gz: {e}"));
    let mut archive = Archive::new(GzDecoder::new(context));
    archive.set_preserve_permissions(false);
    archive.set_mask(0o022);
    archive.set_overwrite(true);
    let mut files = 0;
    for entry in archive.entries().map_err(invalid)? {
        let mut entry = entry.map_err(invalid)?;
        let path = entry.path().map_err(invalid)?.into_owned();
        let kind = entry.header().entry_type();
        if kind == EntryType::XGlobalHeader {
            continue;
        }
        let safe = path
            .components()
            .all(|c| matches!(c, Component::Normal(_) | Component::CurDir));
        if !safe {
            return Err(build_error(format!(
                "the build context has an entry with an unsafe path: {}",
                path.display()
            )));
        }
        let relative: PathBuf = path
            .components()
            .filter(|c| matches!(c, Component::Normal(_)))
            .collect();
        let target = dest.join(&relative);
        match kind {
            EntryType::Directory => {
                std::fs::create_dir_all(&target).map_err(|e| infra("unpacking", e))?;
            }
            EntryType::Regular | EntryType::Continuous => {
                if relative.as_os_str().is_empty() {
                    return Err(build_error("the build context has a file without a name"));
                }
                if let Some(dir) = target.parent() {
                    std::fs::create_dir_all(dir).map_err(|e| infra("unpacking", e))?;
                }
                entry
                    .unpack(&target)
                    .map_err(|e| build_error(format!("cannot unpack {}: {e}", path.display())))?;
                files += 1;
            }
            other => {
                return Err(build_error(format!(
                    "the build context has an entry that is neither a file nor a directory ({other:?}): {}",
                    path.display()
                )));
            }
        }
    }
    Ok(files)
}

/// Takes the build back from its steps' user, copies the log in, marks
/// the build complete and moves it into place. Nothing a step left behind
/// is followed: the tree is handed back to root link by link, and sless's
/// own files replace whatever has their names.
pub(super) fn finish(
    tmp: &Path,
    final_dir: &Path,
    log: &Path,
    jailed: bool,
) -> Result<(), DriverError> {
    if jailed {
        sandbox::hand_over(tmp, None).map_err(|e| infra("taking the build back", e))?;
    }
    let _ = std::fs::remove_dir_all(tmp.join(SCRATCH));
    append_log(log, BUILD_COMPLETE).map_err(|e| infra("writing the build log", e))?;
    for (name, contents) in [
        (BUILD_LOG, std::fs::read(log).unwrap_or_default()),
        (COMPLETE_MARKER, Vec::new()),
    ] {
        let path = tmp.join(name);
        match std::fs::symlink_metadata(&path) {
            Ok(m) if m.is_dir() => std::fs::remove_dir_all(&path),
            Ok(_) => std::fs::remove_file(&path),
            Err(_) => Ok(()),
        }
        .map_err(|e| infra("clearing the build's own files", e))?;
        std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&path)
            .and_then(|mut f| f.write_all(&contents))
            .map_err(|e| infra("marking the build complete", e))?;
    }
    for _ in 0..2 {
        match std::fs::rename(tmp, final_dir) {
            Ok(()) => return Ok(()),
            Err(_) if final_dir.join(COMPLETE_MARKER).is_file() => {
                // Someone else finished the same build first; use theirs.
                let _ = std::fs::remove_dir_all(tmp);
                return Ok(());
            }
            Err(_) if final_dir.exists() => {
                // A directory without the marker is not ours to trust.
                let _ = std::fs::remove_dir_all(final_dir);
            }
            Err(e) => return Err(infra("moving the build into place", e)),
        }
    }
    Err(DriverError::Infra(format!(
        "cannot move the build into place at {}",
        final_dir.display()
    )))
}
