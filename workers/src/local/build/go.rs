//! Go builds (runtime go1.23): the user's files are one Go package (not
//! `package main`) in the root of a module. The build copies them into
//! `gobuild/`, writes `go.mod` when there is none, adds the wrapper
//! (runtimes/go1.23/main.go) and a generated file registering every exported
//! function of the package in the directory `sless_runtime_main/`, and
//! compiles that into `bin/function`. Which function serves is chosen when
//! the binary starts (`SLESS_ENTRYPOINT`), so one build serves any
//! entrypoint of the package.
//!
//! The toolchain is `SLESS_GO` (see `LocalDriverConfig::go`) or `go` on
//! `PATH`, at least Go 1.21; it runs with `GOTOOLCHAIN=local` (never
//! downloading another), `GOFLAGS=-mod=mod`, and `GOPATH`/`GOCACHE` below
//! the data directory.

use std::collections::BTreeSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use tokio::process::Command;

use super::{GO_BINARY, Steps, Toolchains, build_error, infra};
use crate::driver::DriverError;
use crate::local::process::inherited_env;
use crate::local::sandbox::{self, Launch};

/// The wrapper, compiled into every Go function.
const WRAPPER: &str = include_str!("../../../../runtimes/go1.23/main.go");
/// The directory of the generated main package, inside the user's module.
const MAIN_DIR: &str = "sless_runtime_main";
/// Where the user's module is copied to, below the build directory.
const WORK: &str = "gobuild";
/// The oldest Go that builds the wrapper.
const MIN_MINOR: u32 = 21;
/// The language version of a function without a `go.mod` (capped by the
/// toolchain's own).
const RUNTIME_MINOR: u32 = 23;
/// The message of every build that finds no usable toolchain.
pub(crate) const NO_TOOLCHAIN: &str = "no Go toolchain ≥ 1.21 found (set SLESS_GO or install Go)";
/// How long `go env` may take.
const QUERY_TIMEOUT: Duration = Duration::from_secs(120);

/// A Go toolchain that can build functions.
struct Toolchain {
    program: String,
    version: String,
    minor: u32,
    /// Its `GOROOT`, which a jailed build must see.
    root: PathBuf,
}

/// Builds the package in `code/` into `bin/function`. sless writes the
/// module copy and the wrapper before any step runs; the one file that
/// depends on what a step said (the registry of exported functions) is
/// written by a step, as the build's user.
pub(super) async fn build(steps: &Steps<'_>) -> Result<(), DriverError> {
    let tools = steps.builder.tools;
    let go = match toolchain(tools).await {
        Ok(go) => go,
        Err(e) => {
            if let DriverError::Build { log_tail, .. } = &e {
                steps.note(format!("sless: {log_tail}\n")).await?;
            }
            return Err(e);
        }
    };
    steps
        .note(format!(
            "sless: building with {} ({})\n",
            go.program, go.version
        ))
        .await?;

    {
        let code = steps.dir.join("code");
        let work = steps.dir.join(WORK);
        let minor = go.minor.min(RUNTIME_MINOR);
        let owner = steps.jail.as_ref().map(|(id, _)| *id);
        tokio::task::spawn_blocking(move || {
            prepare_module(&code, &work, minor)?;
            if let Some(id) = owner {
                sandbox::hand_over(&work, Some(id))
                    .map_err(|e| infra("handing the Go work tree to its user", e))?;
            }
            Ok::<_, DriverError>(())
        })
        .await
        .map_err(|e| infra("build task", e))??;
    }

    let listed = go_query(
        steps,
        &go,
        &["list", "-f", "{{.Name}} {{.ImportPath}}", "."],
    )
    .await
    .map_err(|e| {
        retitle(
            e,
            "the function's files are not a Go package (go list failed)",
        )
    })?;
    let (package, import_path) = listed
        .trim()
        .split_once(' ')
        .ok_or_else(|| build_error(format!("go list printed {listed:?}")))?;
    if package == "main" {
        return Err(build_error(
            "the function's package is `package main`; a go1.23 function is a library package \
             (for example `package handler`) that exports the entrypoint function",
        ));
    }
    if !import_path
        .bytes()
        .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_' | b'~' | b'/' | b'+'))
    {
        return Err(build_error(format!(
            "the module path {import_path:?} has characters sless cannot build"
        )));
    }

    let doc = go_query(steps, &go, &["doc", "-short", "."])
        .await
        .map_err(|e| retitle(e, "cannot list the package's functions (go doc failed)"))?;
    let functions = exported_functions(&doc);
    if functions.is_empty() {
        return Err(build_error(format!(
            "package {package} exports no functions; the entrypoint must be one, e.g. {package}.Handle"
        )));
    }
    steps
        .note(format!(
            "sless: package {package} ({import_path}) exports {}\n",
            functions.iter().cloned().collect::<Vec<_>>().join(", ")
        ))
        .await?;

    let registry = registry_source(package, import_path, &functions);
    steps
        .write(
            &format!("{WORK}/{MAIN_DIR}/sless_functions.go"),
            registry.into_bytes(),
        )
        .await?;

    let mut args: Vec<OsString> = ["build", "-trimpath", "-o"].map(OsString::from).into();
    args.push(steps.path(GO_BINARY).into_os_string());
    args.push(format!("./{MAIN_DIR}").into());
    let step = go_step(steps, &go, args);
    steps.run("go build", step).await?;

    let work = steps.dir.join(WORK);
    let _ = tokio::task::spawn_blocking(move || std::fs::remove_dir_all(work)).await;
    Ok(())
}

/// The same failure with another message (the log tail kept).
fn retitle(e: DriverError, message: &str) -> DriverError {
    match e {
        DriverError::Build { log_tail, .. } => DriverError::Build {
            message: message.to_owned(),
            log_tail,
        },
        other => other,
    }
}

/// Finds the toolchain and checks its version; a missing or old one is the
/// build error [`NO_TOOLCHAIN`], with what was found as the log tail.
async fn toolchain(tools: &Toolchains) -> Result<Toolchain, DriverError> {
    let (program, how) = match &tools.go {
        Some(go) => (go.clone(), format!("SLESS_GO={go}")),
        None => ("go".to_owned(), "`go` on PATH".to_owned()),
    };
    let none = |why: String| DriverError::Build {
        message: NO_TOOLCHAIN.to_owned(),
        log_tail: why,
    };
    let mut cmd = Command::new(&program);
    cmd.args(["env", "GOVERSION", "GOROOT"])
        .env_clear()
        .envs(inherited_env(&tools.env, &[]))
        .env("GOTOOLCHAIN", "local")
        .env("GOENV", "off")
        .env("GOTELEMETRY", "off")
        .stdin(Stdio::null())
        .kill_on_drop(true);
    let output = match tokio::time::timeout(QUERY_TIMEOUT, cmd.output()).await {
        Ok(Ok(output)) => output,
        Ok(Err(e)) => return Err(none(format!("{how}: cannot be run: {e}"))),
        Err(_) => return Err(none(format!("{how}: `go env GOVERSION` did not answer"))),
    };
    let printed = String::from_utf8_lossy(&output.stdout);
    let mut lines = printed.lines().map(str::trim);
    let version = lines.next().unwrap_or_default().to_owned();
    let root = PathBuf::from(lines.next().unwrap_or_default());
    if !output.status.success() {
        let stderr = String::from_utf8_lossy(&output.stderr);
        return Err(none(format!(
            "{how}: `go env GOVERSION` failed: {}",
            stderr.trim()
        )));
    }
    // The program as the jail runs it: the toolchain's own binary.
    let real = std::fs::canonicalize(&program)
        .map(|p| p.to_string_lossy().into_owned())
        .unwrap_or(program);
    match go_minor(&version) {
        Some(minor) if minor >= MIN_MINOR => Ok(Toolchain {
            program: real,
            version,
            minor,
            root,
        }),
        Some(_) => Err(none(format!("{how} is {version}, older than go1.21"))),
        None => Err(none(format!(
            "{how}: cannot tell the version from {version:?}"
        ))),
    }
}

/// The minor version of a Go 1 release string (`go1.23.4`, `devel go1.24-abc`).
fn go_minor(version: &str) -> Option<u32> {
    let at = version.find("go1.")?;
    let digits: String = version[at + 4..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().ok()
}

/// A go command of a build, in the module copy, with its environment.
fn go_step(steps: &Steps<'_>, go: &Toolchain, args: Vec<OsString>) -> Launch {
    let tools = steps.builder.tools;
    let path = |p: PathBuf| p.to_string_lossy().into_owned();
    let roots: Vec<PathBuf> = if go.root.as_os_str().is_empty() {
        Vec::new()
    } else {
        vec![go.root.clone()]
    };
    steps.step(
        PathBuf::from(&go.program),
        args,
        WORK,
        &[
            "GOPROXY",
            "GONOPROXY",
            "GOSUMDB",
            "GONOSUMDB",
            "GOPRIVATE",
            "GOINSECURE",
            "GOVCS",
        ],
        vec![
            ("GOTOOLCHAIN".to_owned(), "local".to_owned()),
            ("GOFLAGS".to_owned(), "-mod=mod -modcacherw".to_owned()),
            ("GOPATH".to_owned(), path(steps.cache("go", &tools.go_path))),
            (
                "GOCACHE".to_owned(),
                path(steps.cache("go-build", &tools.go_cache)),
            ),
            ("GOENV".to_owned(), "off".to_owned()),
            ("GOTELEMETRY".to_owned(), "off".to_owned()),
            ("CGO_ENABLED".to_owned(), "0".to_owned()),
        ],
        &roots,
    )
}

/// Runs a go command that answers on stdout; its stderr goes to the build log.
async fn go_query(steps: &Steps<'_>, go: &Toolchain, args: &[&str]) -> Result<String, DriverError> {
    let step = go_step(steps, go, args.iter().map(OsString::from).collect());
    steps
        .query(&format!("go {}", args.join(" ")), step, None)
        .await
}

/// Copies the user's files into `work` and writes a `go.mod` when they have
/// none.
fn prepare_module(code: &Path, work: &Path, minor: u32) -> Result<(), DriverError> {
    if code.join(MAIN_DIR).exists() {
        return Err(build_error(format!(
            "the function's files may not contain {MAIN_DIR}/: sless builds its wrapper there"
        )));
    }
    copy_tree(code, work).map_err(|e| infra("copying the function for go build", e))?;
    let go_mod = work.join("go.mod");
    if !go_mod.exists() {
        std::fs::write(&go_mod, format!("module function\n\ngo 1.{minor}\n"))
            .map_err(|e| infra("writing go.mod", e))?;
    }
    let main_dir = work.join(MAIN_DIR);
    std::fs::create_dir_all(&main_dir).map_err(|e| infra("writing the wrapper", e))?;
    std::fs::write(main_dir.join("main.go"), WRAPPER)
        .map_err(|e| infra("writing the wrapper", e))?;
    Ok(())
}

fn copy_tree(from: &Path, to: &Path) -> std::io::Result<()> {
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        let kind = entry.file_type()?;
        let target: PathBuf = to.join(entry.file_name());
        if kind.is_dir() {
            copy_tree(&entry.path(), &target)?;
        } else if kind.is_file() {
            std::fs::copy(entry.path(), &target)?;
        }
    }
    Ok(())
}

/// The package-level functions in the output of `go doc -short`: lines
/// `func Name(...` (constructors are indented below their type). Generic
/// functions cannot be registered without type arguments and are left out.
fn exported_functions(doc: &str) -> BTreeSet<String> {
    doc.lines()
        .filter_map(|line| line.trim_start().strip_prefix("func "))
        .filter_map(|rest| {
            let end = rest.find(|c: char| !(c.is_alphanumeric() || c == '_'))?;
            let (name, after) = rest.split_at(end);
            let exported = name.chars().next().is_some_and(char::is_uppercase);
            (exported && after.starts_with('(')).then(|| name.to_owned())
        })
        .collect()
}

/// The generated file that registers the package's functions with the
/// wrapper.
fn registry_source(package: &str, import_path: &str, functions: &BTreeSet<String>) -> String {
    let mut src = format!(
        "// Code generated by sless. DO NOT EDIT.\n\n\
         package main\n\n\
         import function \"{import_path}\"\n\n\
         func init() {{\n\
         \tpackageName = \"{package}\"\n\
         \tfunctions = map[string]any{{\n"
    );
    for name in functions {
        src.push_str(&format!("\t\t\"{name}\": function.{name},\n"));
    }
    src.push_str("\t}\n}\n");
    src
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn go_versions_are_read() {
        assert_eq!(go_minor("go1.23.4"), Some(23));
        assert_eq!(go_minor("go1.21.0"), Some(21));
        assert_eq!(go_minor("go1.19"), Some(19));
        assert_eq!(go_minor("devel go1.24-abcdef Tue"), Some(24));
        assert_eq!(go_minor("go2"), None);
        assert_eq!(go_minor(""), None);
    }

    #[test]
    fn exported_functions_come_from_go_doc_short() {
        let doc = "func Handle(ctx context.Context, e Event) (any, error)\n\
                   func Map[T any](x T) T\n\
                   func Other(event map[string]any) string\n\
                   const Version = \"1\"\n\
                   var Default = func() {}\n\
                   type Event struct{ ... }\n    \
                       func NewEvent() Event\n";
        let names: Vec<String> = exported_functions(doc).into_iter().collect();
        assert_eq!(names, ["Handle", "NewEvent", "Other"]);
    }

    #[test]
    fn the_registry_names_every_function() {
        let functions: BTreeSet<String> = ["Handle".to_owned(), "Other".to_owned()].into();
        let src = registry_source("handler", "example.com/fn", &functions);
        assert!(src.contains("import function \"example.com/fn\""), "{src}");
        assert!(src.contains("packageName = \"handler\""), "{src}");
        assert!(src.contains("\"Handle\": function.Handle,"), "{src}");
        assert!(src.contains("\"Other\": function.Other,"), "{src}");
    }
}
