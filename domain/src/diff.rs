//! The difference between two versions' files: which were added, removed
//! or changed, with a unified diff of each text file.

use std::collections::BTreeMap;

use serde::Serialize;
use similar::TextDiff;

/// Lines of unchanged context around each change in a unified diff.
const CONTEXT_LINES: usize = 3;

/// How a file differs between two versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Change {
    Added,
    Removed,
    Modified,
}

/// One file that differs.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct FileDiff {
    pub path: String,
    pub change: Change,
    /// Not UTF-8 text (or holds NUL bytes) on either side: no diff shown.
    pub binary: bool,
    /// The unified diff (`--- a/path`, `+++ b/path`, hunks), for text
    /// files, unless the answer's limit was reached first.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub diff: Option<String>,
    /// A text file whose diff was left out for the limit.
    pub truncated: bool,
    /// The file's size in each version (absent where it does not exist).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_before: Option<u64>,
    #[serde(skip_serializing_if = "Option::is_none")]
    pub size_after: Option<u64>,
}

/// What changed from one version's files to another's, by path.
#[derive(Debug, Clone, PartialEq, Eq, Default, Serialize)]
pub struct Diff {
    pub files: Vec<FileDiff>,
    /// Bytes of diff text included.
    pub diff_bytes: u64,
    /// Some diff was left out for the limit.
    pub truncated: bool,
}

fn text(bytes: &[u8]) -> Option<&str> {
    if bytes.contains(&0) {
        return None;
    }
    std::str::from_utf8(bytes).ok()
}

/// Compares `before` with `after` (path → content), including at most
/// `max_diff_bytes` of diff text; files past that are listed, marked
/// `truncated`, without their diff.
pub fn diff(
    before: &BTreeMap<String, Vec<u8>>,
    after: &BTreeMap<String, Vec<u8>>,
    max_diff_bytes: u64,
) -> Diff {
    let mut out = Diff::default();
    let mut paths: Vec<&String> = before.keys().chain(after.keys()).collect();
    paths.sort();
    paths.dedup();
    for path in paths {
        let (a, b) = (before.get(path), after.get(path));
        let change = match (a, b) {
            (Some(a), Some(b)) if a == b => continue,
            (Some(_), Some(_)) => Change::Modified,
            (None, Some(_)) => Change::Added,
            (Some(_), None) => Change::Removed,
            (None, None) => unreachable!("every path is on one side"),
        };
        let empty: &[u8] = &[];
        let (ta, tb) = (
            text(a.map_or(empty, |v| v.as_slice())),
            text(b.map_or(empty, |v| v.as_slice())),
        );
        let mut file = FileDiff {
            path: path.clone(),
            change,
            binary: ta.is_none() || tb.is_none(),
            diff: None,
            truncated: false,
            size_before: a.map(|v| v.len() as u64),
            size_after: b.map(|v| v.len() as u64),
        };
        if let (Some(ta), Some(tb)) = (ta, tb) {
            let unified = unified(path, change, ta, tb);
            let len = unified.len() as u64;
            if out.diff_bytes + len <= max_diff_bytes {
                out.diff_bytes += len;
                file.diff = Some(unified);
            } else {
                file.truncated = true;
                out.truncated = true;
            }
        }
        out.files.push(file);
    }
    out
}

fn unified(path: &str, change: Change, before: &str, after: &str) -> String {
    // As `diff -u` and git name a side that does not exist.
    let old = match change {
        Change::Added => "/dev/null".to_owned(),
        _ => format!("a/{path}"),
    };
    let new = match change {
        Change::Removed => "/dev/null".to_owned(),
        _ => format!("b/{path}"),
    };
    TextDiff::from_lines(before, after)
        .unified_diff()
        .context_radius(CONTEXT_LINES)
        .header(&old, &new)
        .to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn files(entries: &[(&str, &[u8])]) -> BTreeMap<String, Vec<u8>> {
        entries
            .iter()
            .map(|(p, c)| (p.to_string(), c.to_vec()))
            .collect()
    }

    #[test]
    fn lists_added_removed_and_modified_files_with_unified_diffs() {
        let before = files(&[
            ("handler.py", b"def handle(event):\n    return 'v1'\n"),
            ("gone.txt", b"bye\n"),
            ("same.txt", b"same\n"),
            ("logo.png", b"\x89PNG\0\x01"),
        ]);
        let after = files(&[
            ("handler.py", b"def handle(event):\n    return 'v2'\n"),
            ("new.txt", b"hello\n"),
            ("same.txt", b"same\n"),
            ("logo.png", b"\x89PNG\0\x02"),
        ]);
        let d = diff(&before, &after, 1 << 20);
        let summary: Vec<(&str, Change, bool)> = d
            .files
            .iter()
            .map(|f| (f.path.as_str(), f.change, f.binary))
            .collect();
        assert_eq!(
            summary,
            [
                ("gone.txt", Change::Removed, false),
                ("handler.py", Change::Modified, false),
                ("logo.png", Change::Modified, true),
                ("new.txt", Change::Added, false),
            ]
        );
        let handler = d.files[1].diff.as_deref().unwrap();
        assert_eq!(
            handler,
            "--- a/handler.py\n+++ b/handler.py\n@@ -1,2 +1,2 @@\n def handle(event):\n-    return 'v1'\n+    return 'v2'\n"
        );
        assert_eq!(
            d.files[0].diff.as_deref().unwrap(),
            "--- a/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n"
        );
        assert_eq!(
            d.files[3].diff.as_deref().unwrap(),
            "--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1 @@\n+hello\n"
        );
        assert_eq!(d.files[2].diff, None, "binary files get no diff");
        assert!(!d.truncated);
        assert_eq!(diff(&before, &before, 1 << 20), Diff::default());
    }

    #[test]
    fn diffs_past_the_limit_are_listed_without_text() {
        let before = files(&[("a.txt", b"1\n"), ("b.txt", b"1\n")]);
        let after = files(&[("a.txt", b"2\n"), ("b.txt", b"2\n")]);
        let first = diff(&before, &after, 1 << 20).files[0]
            .diff
            .clone()
            .unwrap();
        let d = diff(&before, &after, first.len() as u64);
        assert!(d.files[0].diff.is_some());
        assert!(d.files[1].diff.is_none() && d.files[1].truncated);
        assert!(d.truncated);
        assert_eq!(d.diff_bytes, first.len() as u64);
    }
}
