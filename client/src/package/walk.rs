//! The walk of a function's directory: which files are packed, and what is
//! refused on the way.

use std::ffi::OsStr;
use std::fs::{self, FileType, Metadata};
use std::os::unix::fs::{FileTypeExt, PermissionsExt};
use std::path::{Component, Path, PathBuf};

use super::PackError;
use super::rules::{IGNORE_FILE, Rules};

/// One file to pack.
#[derive(Debug)]
pub(super) struct Source {
    /// Its path in the zip: relative to the directory, `/`-separated.
    pub path: String,
    /// The file to read: the file itself, or the target of a link.
    pub read_from: PathBuf,
    /// Its owner's execute bit is set.
    pub executable: bool,
    /// Its size when it was walked.
    pub size: u64,
}

/// The files under `root` (canonical) that `rules` do not leave out,
/// sorted by path.
pub(super) fn collect(root: &Path, rules: &Rules) -> Result<Vec<Source>, PackError> {
    let mut sources = Vec::new();
    // Directories still to read: where they are, and their path in the zip
    // ("" for the top).
    let mut pending = vec![(root.to_path_buf(), String::new())];
    while let Some((dir, prefix)) = pending.pop() {
        let entries = fs::read_dir(&dir).map_err(io_error(&prefix, root))?;
        for entry in entries {
            let entry = entry.map_err(io_error(&prefix, root))?;
            let name = entry.file_name();
            if prefix.is_empty() && name == IGNORE_FILE {
                continue;
            }
            let rel = Path::new(&prefix).join(&name);
            let abs = entry.path();
            let kind = entry.file_type().map_err(io_error(&rel, root))?;
            if kind.is_symlink() {
                // A link counts as a directory for the rules when it leads to
                // one: `node_modules/` leaves out a linked `node_modules`.
                let to_dir = fs::metadata(&abs).is_ok_and(|m| m.is_dir());
                if rules.ignores(&rel, to_dir) {
                    continue;
                }
                let path = zip_path(&prefix, &name)?;
                let (target, meta) = follow(root, &rel, &abs, &path)?;
                sources.push(source(path, target, &meta));
            } else if kind.is_dir() {
                if !rules.ignores(&rel, true) {
                    pending.push((abs, zip_path(&prefix, &name)?));
                }
            } else if !rules.ignores(&rel, false) {
                let path = zip_path(&prefix, &name)?;
                if !kind.is_file() {
                    return Err(PackError::SpecialFile {
                        path,
                        kind: special_kind(&kind),
                    });
                }
                let meta = entry.metadata().map_err(io_error(&rel, root))?;
                sources.push(source(path, abs, &meta));
            }
        }
    }
    // Byte order of the whole path, which is not the order of a walk that
    // sorts each directory ("a-b" sorts before "a/b").
    sources.sort_unstable_by(|a, b| a.path.cmp(&b.path));
    Ok(sources)
}

fn source(path: String, read_from: PathBuf, meta: &Metadata) -> Source {
    Source {
        path,
        read_from,
        executable: meta.permissions().mode() & 0o100 != 0,
        size: meta.len(),
    }
}

/// The path in the zip of `name` in the directory at `prefix`.
fn zip_path(prefix: &str, name: &OsStr) -> Result<String, PackError> {
    let join = |name: &str| {
        if prefix.is_empty() {
            name.to_owned()
        } else {
            format!("{prefix}/{name}")
        }
    };
    match name.to_str() {
        Some(name) => Ok(join(name)),
        None => Err(PackError::NotUtf8 {
            path: join(&name.to_string_lossy()),
        }),
    }
}

/// The file a link at `rel` (`path` in the zip) leads to, and its metadata,
/// when it is a file inside `root`.
fn follow(
    root: &Path,
    rel: &Path,
    abs: &Path,
    path: &str,
) -> Result<(PathBuf, Metadata), PackError> {
    let target = fs::read_link(abs).map_err(io_error(rel, root))?;
    let refuse = |why| PackError::Link {
        path: path.to_owned(),
        target: target.to_string_lossy().into_owned(),
        why,
    };
    if target.is_absolute() {
        return Err(refuse(
            "is absolute: a link must be relative and stay inside the directory",
        ));
    }
    if climbs_out(rel.parent().unwrap_or(Path::new("")), &target) {
        return Err(refuse("leads outside the directory"));
    }
    // Through every link on the way: one inside may lead out again.
    let resolved = match abs.canonicalize() {
        Ok(resolved) => resolved,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(refuse("does not exist"));
        }
        Err(e) => return Err(io_error(rel, root)(e)),
    };
    if !resolved.starts_with(root) {
        return Err(refuse("resolves to a file outside the directory"));
    }
    let meta = fs::metadata(&resolved).map_err(io_error(rel, root))?;
    if meta.is_dir() {
        return Err(refuse(
            "is a directory: only links to files are packed (move the directory, or link its files)",
        ));
    }
    if !meta.is_file() {
        return Err(refuse("is not a regular file"));
    }
    Ok((resolved, meta))
}

/// `target`, read from the directory at `from` (relative to the top),
/// names a place above the top.
fn climbs_out(from: &Path, target: &Path) -> bool {
    let mut depth = from.components().count();
    for part in target.components() {
        match part {
            Component::ParentDir if depth == 0 => return true,
            Component::ParentDir => depth -= 1,
            Component::Normal(_) => depth += 1,
            Component::CurDir | Component::RootDir | Component::Prefix(_) => {}
        }
    }
    false
}

fn special_kind(kind: &FileType) -> &'static str {
    if kind.is_socket() {
        "socket"
    } else if kind.is_fifo() {
        "named pipe (FIFO)"
    } else if kind.is_block_device() || kind.is_char_device() {
        "device file"
    } else {
        "special file"
    }
}

/// An IO error about `rel`, named relative to the directory (the directory
/// itself by its full path).
fn io_error(rel: impl AsRef<Path>, root: &Path) -> impl Fn(std::io::Error) -> PackError {
    let rel = rel.as_ref();
    let path = if rel.as_os_str().is_empty() {
        root.display().to_string()
    } else {
        rel.display().to_string()
    };
    move |source| PackError::Io {
        path: path.clone(),
        source,
    }
}
