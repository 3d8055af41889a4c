//! The one place the binary reads its environment. Every section reads its
//! variables through [`var`]; [`Host`](super::Host) takes the whole
//! environment once, for what child processes inherit. The tests below fail
//! when anything else in the binary or a library crate reads the
//! environment (test code aside; the Terraform provider, a program of its
//! own, reads its in its `main.rs`), or when a variable the configuration
//! reads is not in docs/configuration.md.

/// The variable `name`; empty (or not UTF-8) counts as unset.
pub(super) fn var(name: &str) -> Option<String> {
    std::env::var(name).ok().filter(|v| !v.is_empty())
}

/// The whole environment, the variables of it that are UTF-8.
pub(super) fn environment() -> Vec<(String, String)> {
    std::env::vars_os()
        .filter_map(|(k, v)| Some((k.into_string().ok()?, v.into_string().ok()?)))
        .collect()
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::path::{Path, PathBuf};

    const ROOT: &str = env!("CARGO_MANIFEST_DIR");
    /// This file: the one that may read the environment.
    const READER: &str = "src/config/source.rs";
    /// The Terraform provider's own reader (another program).
    const PROVIDER_READER: &str = "terraform/src/main.rs";
    /// Members of the workspace that are test code, which may read it.
    const TEST_CRATES: &[&str] = &["testkit", "bench"];
    /// What reads the environment: std's functions (`var`, `var_os`,
    /// `vars`, `vars_os`, `temp_dir`, `home_dir`, imported or not) and
    /// tracing's filter from `RUST_LOG`.
    const READS: &[&str] = &[
        "env::var",
        "var_os(",
        "vars_os(",
        "temp_dir(",
        "home_dir(",
        "std::env::{",
        "use std::env;",
        "from_default_env",
    ];

    /// The Rust files below `dir`.
    fn rust_files(dir: &Path, out: &mut Vec<PathBuf>) {
        for entry in std::fs::read_dir(dir).unwrap().flatten() {
            let path = entry.path();
            if path.is_dir() {
                rust_files(&path, out);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }

    /// The `src` folders of the binary and of every library crate of the
    /// workspace (read from its `members`, so a new crate is scanned too).
    fn source_dirs() -> Vec<PathBuf> {
        let manifest = std::fs::read_to_string(Path::new(ROOT).join("Cargo.toml")).unwrap();
        let members = manifest
            .lines()
            .find_map(|l| l.trim().strip_prefix("members = ["))
            .expect("the workspace's members");
        let mut dirs = vec![Path::new(ROOT).join("src")];
        for member in members.trim_end_matches(']').split(',') {
            let member = member.trim().trim_matches('"');
            if !member.is_empty() && !TEST_CRATES.contains(&member) {
                dirs.push(Path::new(ROOT).join(member).join("src"));
            }
        }
        assert!(dirs.len() >= 8, "{dirs:?}");
        dirs
    }

    /// The files of `files` and their text without test code: the
    /// `#[cfg(test)]` modules, inline (up to their closing brace, which
    /// rustfmt puts at the `mod` line's indentation) or in files of their own.
    fn without_tests(files: &[PathBuf]) -> Vec<(PathBuf, String)> {
        // A test module in a file of its own: the file, and its folder.
        let mut test_modules: Vec<(PathBuf, PathBuf)> = Vec::new();
        let mut kept = Vec::new();
        for file in files {
            let text = std::fs::read_to_string(file).unwrap();
            let mut out = String::new();
            let mut lines = text.lines();
            while let Some(line) = lines.next() {
                if line.trim() != "#[cfg(test)]" {
                    out.push_str(line);
                    out.push('\n');
                    continue;
                }
                let Some(item) = lines.find(|l| !l.trim_start().starts_with("#[")) else {
                    break;
                };
                let indent = &item[..item.len() - item.trim_start().len()];
                let item = item.trim();
                let module = item.strip_prefix("pub(crate) ").unwrap_or(item);
                let Some(module) = module.strip_prefix("mod ") else {
                    panic!(
                        "{}: #[cfg(test)] on something else than a module: {item}",
                        file.display()
                    );
                };
                if let Some(name) = module.strip_suffix(';') {
                    let dir = match file.file_stem().and_then(|s| s.to_str()) {
                        Some("mod" | "lib" | "main") => file.parent().unwrap().to_path_buf(),
                        _ => file.with_extension(""),
                    };
                    test_modules.push((dir.join(format!("{name}.rs")), dir.join(name)));
                    continue;
                }
                let end = format!("{indent}}}");
                lines.by_ref().find(|l| *l == end);
            }
            kept.push((file.clone(), out));
        }
        kept.retain(|(f, _)| {
            !test_modules
                .iter()
                .any(|(file, dir)| f == file || f.starts_with(dir))
        });
        kept
    }

    fn sources() -> Vec<(PathBuf, String)> {
        let mut files = Vec::new();
        for dir in source_dirs() {
            rust_files(&dir, &mut files);
        }
        files.sort();
        without_tests(&files)
    }

    #[test]
    fn only_this_file_reads_the_environment() {
        let readers = [READER, PROVIDER_READER].map(|r| Path::new(ROOT).join(r));
        let mut reads = Vec::new();
        let mut scanned = 0;
        for (file, text) in sources() {
            scanned += 1;
            if readers.contains(&file) {
                continue;
            }
            for (n, line) in text.lines().enumerate() {
                if line.trim_start().starts_with("//") {
                    continue;
                }
                if let Some(what) = READS.iter().find(|r| line.contains(*r)) {
                    let at = file.strip_prefix(ROOT).unwrap().display();
                    reads.push(format!("{at}:{}: {what}: {}", n + 1, line.trim()));
                }
            }
        }
        assert!(scanned > 100, "only {scanned} files scanned");
        assert!(
            reads.is_empty(),
            "the environment is read outside {READER} (pass the value in from the \
             configuration instead):\n{}",
            reads.join("\n")
        );
    }

    /// Every variable a section of the configuration reads: the names
    /// written in `src/config` (outside its tests), those clap takes
    /// (`env = "..."` in main.rs), and those whose names another crate
    /// owns.
    fn variables_read() -> BTreeSet<String> {
        let config = Path::new(ROOT).join("src/config");
        let mut files = Vec::new();
        rust_files(&config, &mut files);
        let mut names = BTreeSet::new();
        let is_name = |s: &str| {
            s.len() >= 3
                && s.starts_with(|c: char| c.is_ascii_uppercase())
                && s.chars()
                    .all(|c| c.is_ascii_uppercase() || c.is_ascii_digit() || c == '_')
        };
        for (_, text) in without_tests(&files) {
            let literals = text.split('"').skip(1).step_by(2);
            names.extend(literals.filter(|s| is_name(s)).map(str::to_owned));
        }
        let main = std::fs::read_to_string(Path::new(ROOT).join("src/main.rs")).unwrap();
        for arg in main.split("env = \"").skip(1) {
            names.insert(arg.split('"').next().unwrap().to_owned());
        }
        for quota in sless_api::plumbing::quota::Quota::ALL {
            names.insert(quota.setting().to_owned());
        }
        names.insert(sless_api::plumbing::faults::CRASH_AFTER_COMMIT_ENV.to_owned());
        names
    }

    #[test]
    fn every_variable_read_is_in_the_documentation() {
        let names = variables_read();
        for known in [
            "DATABASE_URL",
            "SLESS_FN_URL",
            "SLESS_QUOTA_FUNCTIONS",
            "PATH",
        ] {
            assert!(names.contains(known), "{known} not found among {names:?}");
        }
        let doc = std::fs::read_to_string(Path::new(ROOT).join("docs/configuration.md")).unwrap();
        let missing: Vec<&String> = names
            .iter()
            .filter(|n| !doc.contains(&format!("`{n}`")))
            .collect();
        assert!(
            missing.is_empty(),
            "read by the configuration, not in docs/configuration.md: {missing:?}"
        );
    }
}
