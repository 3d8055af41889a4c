//! The ignore rules: the defaults, then the directory's `.slessignore`.

use std::fs;
use std::io;
use std::path::Path;

use ignore::gitignore::{Gitignore, GitignoreBuilder};

use super::PackError;

/// The file at the top of a function's directory that holds its ignore
/// rules, in gitignore syntax. It is never packed.
pub const IGNORE_FILE: &str = ".slessignore";

/// The rules read before `.slessignore`, which can undo them with `!`.
pub const DEFAULT_IGNORES: [&str; 4] = [".git/", "__pycache__/", "node_modules/", ".venv/"];

/// The rules of one directory.
pub(super) struct Rules {
    matcher: Gitignore,
}

impl Rules {
    /// The defaults and the rules of `root`'s `.slessignore`, if it has one.
    /// `root` is canonical.
    pub fn load(root: &Path) -> Result<Rules, PackError> {
        let mut builder = GitignoreBuilder::new(root);
        for line in DEFAULT_IGNORES {
            builder
                .add_line(None, line)
                .map_err(|e| PackError::IgnoreFile { why: e.to_string() })?;
        }
        if let Some(text) = read_ignore_file(root)? {
            // gitignore allows a byte-order mark before the first line.
            let text = text.strip_prefix('\u{feff}').unwrap_or(&text);
            for (index, line) in text.lines().enumerate() {
                builder
                    .add_line(None, line)
                    .map_err(|e| PackError::IgnoreFile {
                        why: format!("line {}: {e}", index + 1),
                    })?;
            }
        }
        let matcher = builder
            .build()
            .map_err(|e| PackError::IgnoreFile { why: e.to_string() })?;
        Ok(Rules { matcher })
    }

    /// `path` (relative to the directory) is left out. Its parents are not
    /// looked at: the walk does not enter an ignored directory.
    pub fn ignores(&self, path: &Path, is_dir: bool) -> bool {
        self.matcher.matched(path, is_dir).is_ignore()
    }
}

/// The text of `.slessignore`: it must be a regular file (a link could make
/// the rules depend on a file outside the directory) of UTF-8 text.
fn read_ignore_file(root: &Path) -> Result<Option<String>, PackError> {
    let path = root.join(IGNORE_FILE);
    let io_error = |source| PackError::Io {
        path: IGNORE_FILE.to_owned(),
        source,
    };
    match fs::symlink_metadata(&path) {
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(e) => return Err(io_error(e)),
        Ok(meta) if !meta.is_file() => {
            return Err(PackError::IgnoreFile {
                why: "must be a regular file (not a directory or a symbolic link)".to_owned(),
            });
        }
        Ok(_) => {}
    }
    let bytes = fs::read(&path).map_err(io_error)?;
    String::from_utf8(bytes)
        .map(Some)
        .map_err(|_| PackError::IgnoreFile {
            why: "is not valid UTF-8 text".to_owned(),
        })
}
