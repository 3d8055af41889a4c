//! Import cycles between the modules of a crate, read from its source.
//!
//! Modules are the files and folders under a crate's `src/`. A file that
//! names another module (`crate::a::b::Item`, `super::c`, in a `use` or a
//! path) makes an arrow between the two siblings that contain them: from
//! `proxy/forward.rs`, `crate::auth::Caller` is an arrow `proxy -> auth`
//! in the crate's root, and `super::call::Call` an arrow `forward -> call`
//! inside `proxy`. A module naming its own parent or its children draws
//! none. Test modules (`tests.rs`, files under a `tests/` folder, a
//! `#[cfg(test)] mod tests { ... }` at a file's end) are left out, and so
//! are comments. A cycle is a set of siblings that reach one another by
//! arrows.
//!
//! `cargo test -p sless-testkit --lib modules` checks every crate of the
//! workspace, and names the modules and the arrows of any cycle it finds.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::path::{Path, PathBuf};

/// One arrow: `from` names `to` in `file`, as `path`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct Arrow {
    pub from: String,
    pub to: String,
    pub file: String,
    pub path: String,
}

/// Siblings inside module `parent` (`""`: the crate root) that import one
/// another, with the arrows that tie them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cycle {
    pub parent: String,
    pub modules: Vec<String>,
    pub arrows: Vec<Arrow>,
}

impl fmt::Display for Cycle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let parent = if self.parent.is_empty() {
            "crate"
        } else {
            &self.parent
        };
        writeln!(f, "in {parent}: {}", self.modules.join(", "))?;
        for a in &self.arrows {
            writeln!(f, "  {} -> {} ({}: {})", a.from, a.to, a.file, a.path)?;
        }
        Ok(())
    }
}

/// The import cycles among the modules under `src` (a crate's `src/`).
pub fn cycles(src: &Path) -> Vec<Cycle> {
    let files = sources(src, src);
    let modules: BTreeSet<Vec<String>> = files.iter().map(|(m, _)| m.clone()).collect();
    let mut arrows: BTreeMap<Vec<String>, BTreeSet<Arrow>> = BTreeMap::new();
    for (module, file) in &files {
        let text = std::fs::read_to_string(file).unwrap_or_default();
        let rel = file.strip_prefix(src).unwrap_or(file).display().to_string();
        for path in named_paths(&strip_comments(&text), module) {
            let Some(target) = longest_module(&modules, &path) else {
                continue;
            };
            let common = module
                .iter()
                .zip(&target)
                .take_while(|(a, b)| a == b)
                .count();
            let (Some(from), Some(to)) = (module.get(common), target.get(common)) else {
                continue; // a parent or a child: no arrow between siblings
            };
            arrows
                .entry(module[..common].to_vec())
                .or_default()
                .insert(Arrow {
                    from: from.clone(),
                    to: to.clone(),
                    file: rel.clone(),
                    path: path.join("::"),
                });
        }
    }
    let mut found = Vec::new();
    for (parent, arrows) in arrows {
        for group in strongly_connected(&arrows) {
            let tie: Vec<Arrow> = arrows
                .iter()
                .filter(|a| group.contains(&a.from) && group.contains(&a.to))
                .cloned()
                .collect();
            found.push(Cycle {
                parent: parent.join("::"),
                modules: group.into_iter().collect(),
                arrows: tie,
            });
        }
    }
    found
}

/// Every non-test source file under `dir`, with its module path.
fn sources(src: &Path, dir: &Path) -> Vec<(Vec<String>, PathBuf)> {
    let mut found = Vec::new();
    let Ok(entries) = std::fs::read_dir(dir) else {
        return found;
    };
    let mut entries: Vec<_> = entries.flatten().map(|e| e.path()).collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                found.extend(sources(src, &path));
            }
            continue;
        }
        if !name.ends_with(".rs") || name == "tests.rs" {
            continue;
        }
        let rel = path.strip_prefix(src).unwrap_or(&path);
        let mut module: Vec<String> = rel
            .with_extension("")
            .components()
            .map(|c| c.as_os_str().to_string_lossy().into_owned())
            .collect();
        if matches!(
            module.last().map(String::as_str),
            Some("mod" | "lib" | "main")
        ) {
            module.pop();
        }
        found.push((module, path));
    }
    found
}

/// `text` without `//` comments, and without the test module written
/// inline at its end (`#[cfg(test)] mod tests { ... }`).
fn strip_comments(text: &str) -> String {
    let code = match text.find("#[cfg(test)]\nmod tests {") {
        Some(i) => &text[..i],
        None => text,
    };
    code.lines()
        .map(|l| match l.find("//") {
            Some(i) => &l[..i],
            None => l,
        })
        .collect::<Vec<_>>()
        .join("\n")
}

/// The whole paths `text` names from the crate's root or a parent
/// (`crate::a::{b, c::D}` is `a::b` and `a::c::D`), from the root.
fn named_paths(text: &str, module: &[String]) -> Vec<Vec<String>> {
    let mut found = Vec::new();
    let bytes = text.as_bytes();
    let mut i = 0;
    while i < text.len() {
        let rest = &text[i..];
        let before_ok = i == 0 || !is_ident(bytes[i - 1]) && bytes[i - 1] != b':';
        let base = if !before_ok {
            None
        } else if rest.starts_with("crate::") {
            Some((Vec::new(), "crate".len()))
        } else if rest.starts_with("super::") {
            // `super` is the module that declares this one.
            let mut base = module.to_vec();
            let mut len = 0;
            while text[i + len..].starts_with("super::") {
                len += "super::".len();
                base.pop();
            }
            Some((base, len - "::".len()))
        } else {
            None
        };
        match base {
            Some((base, len)) => {
                let (paths, used) = use_tree(&text[i + len..]);
                for p in paths {
                    let mut whole = base.clone();
                    whole.extend(p);
                    found.push(whole);
                }
                i += len + used.max(1);
            }
            None => i += rest.chars().next().map_or(1, char::len_utf8),
        }
    }
    found
}

fn is_ident(b: u8) -> bool {
    b.is_ascii_alphanumeric() || b == b'_'
}

/// The paths of a use tree at the start of `text` (`a::b`, `a::{b, c::d}`),
/// and how many bytes it took.
fn use_tree(text: &str) -> (Vec<Vec<String>>, usize) {
    let bytes = text.as_bytes();
    let mut prefix = Vec::new();
    let mut i = 0;
    loop {
        let start = i;
        while i < bytes.len() && is_ident(bytes[i]) {
            i += 1;
        }
        if i > start {
            prefix.push(text[start..i].to_owned());
        }
        if text[i..].starts_with("::{") {
            i += 3;
            let mut paths = Vec::new();
            loop {
                while i < bytes.len() && (bytes[i].is_ascii_whitespace() || bytes[i] == b',') {
                    i += 1;
                }
                if i >= bytes.len() || bytes[i] == b'}' {
                    i += 1;
                    break;
                }
                let (inner, used) = use_tree(&text[i..]);
                for p in inner {
                    let mut whole = prefix.clone();
                    whole.extend(p.into_iter().filter(|s| s != "self"));
                    paths.push(whole);
                }
                i += used.max(1);
                while i < bytes.len() && bytes[i] != b',' && bytes[i] != b'}' {
                    i += 1; // ` as Name`
                }
            }
            if paths.is_empty() {
                paths.push(prefix);
            }
            return (paths, i);
        }
        if text[i..].starts_with("::") && i + 2 < bytes.len() && is_ident(bytes[i + 2]) {
            i += 2;
            continue;
        }
        return (vec![prefix], i);
    }
}

/// The longest prefix of `path` that is a module.
fn longest_module(modules: &BTreeSet<Vec<String>>, path: &[String]) -> Option<Vec<String>> {
    (1..=path.len())
        .rev()
        .map(|n| path[..n].to_vec())
        .find(|p| modules.contains(p))
}

/// The groups of two or more modules that reach one another (by each
/// module's reach: the graphs are small).
fn strongly_connected(arrows: &BTreeSet<Arrow>) -> Vec<BTreeSet<String>> {
    let mut next: BTreeMap<&str, BTreeSet<&str>> = BTreeMap::new();
    for a in arrows {
        next.entry(&a.from).or_default().insert(&a.to);
        next.entry(&a.to).or_default();
    }
    let reach = |from: &str| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from];
        while let Some(m) = todo.pop() {
            for &n in next.get(m).into_iter().flatten() {
                if seen.insert(n) {
                    todo.push(n);
                }
            }
        }
        seen
    };
    let reaches: BTreeMap<&str, BTreeSet<&str>> = next.keys().map(|&m| (m, reach(m))).collect();
    let mut groups: Vec<BTreeSet<String>> = Vec::new();
    for (&m, r) in &reaches {
        if groups.iter().any(|g| g.contains(m)) {
            continue;
        }
        let group: BTreeSet<String> = r
            .iter()
            .filter(|&&n| reaches[n].contains(m))
            .map(|&n| n.to_owned())
            .collect();
        if group.len() > 1 {
            groups.push(group);
        }
    }
    groups
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The workspace's crates: their sources' folders.
    const CRATES: [&str; 13] = [
        "api/src",
        "api-types/src",
        "bench/src",
        "client/src",
        "domain/src",
        "embedded/src",
        "projector/src",
        "sandbox/src",
        "src",
        "store/src",
        "telemetry/src",
        "terraform/src",
        "workers/src",
    ];

    #[test]
    fn no_module_of_the_workspace_imports_one_that_imports_it_back() {
        let root = Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
        let mut found = String::new();
        for krate in CRATES {
            let src = root.join(krate);
            assert!(src.is_dir(), "{krate} is a crate's sources");
            for cycle in cycles(&src) {
                found.push_str(&format!("{krate} {cycle}"));
            }
        }
        assert!(found.is_empty(), "import cycles:\n{found}");
    }

    #[test]
    fn use_trees_are_read_whole() {
        let (paths, _) = use_tree("a::{b, c::{D, self}, e as F}; rest");
        let paths: Vec<String> = paths.iter().map(|p| p.join("::")).collect();
        assert_eq!(paths, ["a::b", "a::c::D", "a::c", "a::e"]);
        let (paths, used) = use_tree("error::ApiError) more");
        assert_eq!(paths, [vec!["error".to_owned(), "ApiError".to_owned()]]);
        assert_eq!(used, "error::ApiError".len());
    }

    #[test]
    fn a_cycle_between_siblings_is_found_and_a_parent_is_not_one() {
        let dir = std::env::temp_dir().join(format!("sless-modules-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(dir.join("p")).unwrap();
        let write = |f: &str, s: &str| std::fs::write(dir.join(f), s).unwrap();
        write("lib.rs", "mod a; mod b; mod p; use crate::a::X;");
        write("a.rs", "use crate::b::Y; // crate::p::never");
        write(
            "b.rs",
            "fn f() { crate::p::q::Z; }\n#[cfg(test)]\nmod tests {\n    use crate::d;\n}\n",
        );
        // Named by `b`'s tests only: no cycle with `b`.
        write("d.rs", "use crate::b::X;");
        write("p/mod.rs", "mod q; mod r; use crate::a;");
        write("p/q.rs", "use super::r::W; use super::super::c;");
        write("p/r.rs", "use super::{q::V, Parent};");
        let found = cycles(&dir);
        std::fs::remove_dir_all(&dir).unwrap();
        let groups: Vec<(String, Vec<String>)> = found
            .iter()
            .map(|c| (c.parent.clone(), c.modules.clone()))
            .collect();
        assert_eq!(
            groups,
            [
                ("".to_owned(), vec!["a".into(), "b".into(), "p".into()]),
                ("p".to_owned(), vec!["q".into(), "r".into()]),
            ]
        );
    }
}
