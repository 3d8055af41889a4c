//! Builds: unpacking a build context into a directory and preparing what the
//! runtime needs to run it, cached by the sha256 of the context:
//!
//! - python3.11: `pip install -r requirements.txt --target deps/` when there
//!   is a `requirements.txt`;
//! - nodejs20: `npm ci --omit=dev` when there is a `package.json` and a
//!   lockfile, `npm install --omit=dev` when there is only a `package.json`,
//!   into `code/node_modules/`;
//! - go1.23: the wrapper compiled together with the user's package into
//!   `bin/function` (see [`go`]).

mod go;

use std::io::{self, Write};
use std::path::{Component, Path, PathBuf};
use std::process::Stdio;
use std::time::{Duration, SystemTime};

use flate2::read::GzDecoder;
use sless_domain::Runtime;
use tar::{Archive, EntryType};
use tokio::process::Command;

use super::process::{describe_exit, inherited_env, signal_group};
use crate::driver::{Artifact, BuildRequest, DriverError};

/// Marks a finished build directory.
pub(crate) const COMPLETE_MARKER: &str = ".complete";
/// The compiled function of a go1.23 build, relative to the build directory.
pub(crate) const GO_BINARY: &str = "bin/function";
/// How long one build step (`pip install`, `npm ci`, `go build`) may take.
const STEP_TIMEOUT: Duration = Duration::from_secs(600);
/// How many lines of the build log a failed build reports.
const LOG_TAIL_LINES: usize = 40;
/// Temporary build directories older than this are leftovers of a crash.
const STALE_TMP_AGE: Duration = Duration::from_secs(30 * 60);
/// Marks temporary build directories (`{sha}.tmp-<random>`).
const TMP_INFIX: &str = ".tmp-";

/// The programs builds run, and where their caches live.
#[derive(Debug, Clone)]
pub(crate) struct Toolchains {
    pub python: String,
    pub npm: String,
    /// The Go toolchain; `None` looks for `go` on `PATH`.
    pub go: Option<String>,
    /// `GOPATH` of Go builds (the module cache is below it).
    pub go_path: PathBuf,
    /// `GOCACHE` of Go builds.
    pub go_cache: PathBuf,
    /// npm's cache directory.
    pub npm_cache: PathBuf,
}

fn build_error(message: impl Into<String>) -> DriverError {
    DriverError::Build {
        message: message.into(),
        log_tail: String::new(),
    }
}

fn infra(what: &str, e: impl std::fmt::Display) -> DriverError {
    DriverError::Infra(format!("{what}: {e}"))
}

/// Removes a temporary build directory unless the build finished.
struct TmpDir {
    path: PathBuf,
    keep: bool,
}

impl Drop for TmpDir {
    fn drop(&mut self) {
        if !self.keep {
            let _ = std::fs::remove_dir_all(&self.path);
        }
    }
}

/// Builds `req` below `builds_dir`, or returns the earlier build of the same
/// context.
pub(crate) async fn build(
    builds_dir: &Path,
    tools: &Toolchains,
    req: BuildRequest,
) -> Result<Artifact, DriverError> {
    let sha = &req.context_sha256;
    if sha.is_empty() || sha.len() > 128 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(build_error(format!(
            "context_sha256 {sha:?} is not a hex digest"
        )));
    }
    let parent = builds_dir
        .join(req.key.namespace.as_str())
        .join(req.key.name.as_str());
    let final_dir = parent.join(sha);
    let artifact = Artifact {
        reference: final_dir.to_string_lossy().into_owned(),
    };

    let prepared = {
        let parent = parent.clone();
        let final_dir = final_dir.clone();
        let sha = sha.clone();
        let context = req.context;
        tokio::task::spawn_blocking(move || prepare(&parent, &final_dir, &sha, &context))
            .await
            .map_err(|e| infra("build task", e))??
    };
    let Some(mut tmp) = prepared else {
        return Ok(artifact); // cached
    };

    let step = match req.runtime {
        Runtime::Python311 => python_deps(&tmp.path, tools).await,
        Runtime::Nodejs20 => node_deps(&tmp.path, tools).await,
        Runtime::Go123 => go::build(&tmp.path, tools).await,
    };
    if let Err(e) = step {
        // Removing the half build is blocking work too.
        let _ = tokio::task::spawn_blocking(move || drop(tmp)).await;
        return Err(e);
    }

    let final_dir2 = final_dir.clone();
    let tmp_path = tmp.path.clone();
    tokio::task::spawn_blocking(move || finish(&tmp_path, &final_dir2))
        .await
        .map_err(|e| infra("build task", e))??;
    tmp.keep = true;
    Ok(artifact)
}

/// Returns `None` when the build exists already, else a fresh temporary
/// directory with the context unpacked into `code/`.
fn prepare(
    parent: &Path,
    final_dir: &Path,
    sha: &str,
    context: &[u8],
) -> Result<Option<TmpDir>, DriverError> {
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
    append_log(
        &tmp.path,
        &format!("sless: unpacked {files} files of build context {sha}\n"),
    )
    .map_err(|e| infra("writing the build log", e))?;
    Ok(Some(tmp))
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

fn append_log(dir: &Path, text: &str) -> io::Result<()> {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join("build.log"))?;
    log.write_all(text.as_bytes())
}

/// Appends to the build log from async code.
async fn log_line(dir: &Path, text: String) -> Result<(), DriverError> {
    let dir = dir.to_path_buf();
    tokio::task::spawn_blocking(move || append_log(&dir, &text))
        .await
        .map_err(|e| infra("build task", e))?
        .map_err(|e| infra("writing the build log", e))
}

/// The last `n` lines of a file.
fn tail_of(path: &Path, n: usize) -> String {
    let text = std::fs::read(path).unwrap_or_default();
    let text = String::from_utf8_lossy(&text);
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(n)..].join("\n")
}

/// A failed build step, with the tail of the build log.
async fn step_failed(dir: &Path, message: String) -> DriverError {
    let log_path = dir.join("build.log");
    let log_tail = tokio::task::spawn_blocking(move || tail_of(&log_path, LOG_TAIL_LINES))
        .await
        .unwrap_or_default();
    DriverError::Build { message, log_tail }
}

async fn is_file(path: PathBuf) -> bool {
    tokio::fs::metadata(path).await.is_ok_and(|m| m.is_file())
}

/// Runs one build step (`what`, e.g. "pip install") in its own process
/// group with its output appended to `build.log`, killing it after
/// [`STEP_TIMEOUT`].
async fn run_step(dir: &Path, what: &str, mut cmd: Command) -> Result<(), DriverError> {
    let log_path = dir.join("build.log");
    let (stdout, stderr) = tokio::task::spawn_blocking(move || -> io::Result<_> {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&log_path)?;
        let log2 = log.try_clone()?;
        Ok((log, log2))
    })
    .await
    .map_err(|e| infra("build task", e))?
    .map_err(|e| infra(&format!("preparing {what}"), e))?;
    cmd.stdin(Stdio::null())
        .stdout(stdout)
        .stderr(stderr)
        .kill_on_drop(true)
        .process_group(0);
    let program = cmd.as_std().get_program().to_string_lossy().into_owned();
    let mut child = cmd
        .spawn()
        .map_err(|e| infra(&format!("cannot run {program} for {what}"), e))?;
    let pid = child.id().unwrap_or(0);

    let message = match tokio::time::timeout(STEP_TIMEOUT, child.wait()).await {
        Ok(Ok(status)) if status.success() => return Ok(()),
        Ok(Ok(status)) => match status.code() {
            Some(code) => format!("{what} failed (exit {code})"),
            None => format!("{what} failed: it {}", describe_exit(&status)),
        },
        Ok(Err(e)) => return Err(infra(&format!("waiting for {what}"), e)),
        Err(_) => {
            signal_group(pid, libc::SIGKILL);
            let _ = child.wait().await;
            format!("{what} timed out after {} s", STEP_TIMEOUT.as_secs())
        }
    };
    Err(step_failed(dir, message).await)
}

/// pip for `code/requirements.txt` into `deps/`, when there is one.
async fn python_deps(dir: &Path, tools: &Toolchains) -> Result<(), DriverError> {
    let code = dir.join("code");
    let requirements = code.join("requirements.txt");
    if !is_file(requirements.clone()).await {
        return Ok(());
    }
    let deps = dir.join("deps");
    tokio::fs::create_dir_all(&deps)
        .await
        .map_err(|e| infra("preparing pip", e))?;
    let mut cmd = Command::new(&tools.python);
    cmd.args([
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "-r",
    ])
    .arg(&requirements)
    .arg("--target")
    .arg(&deps)
    .current_dir(&code)
    .env_clear()
    .envs(inherited_env(&["PIP_"]))
    .env("PYTHONDONTWRITEBYTECODE", "1");
    run_step(dir, "pip install", cmd).await
}

/// npm for `code/package.json` into `code/node_modules`, when there is one:
/// `npm ci` with a lockfile, else `npm install`; never the devDependencies.
async fn node_deps(dir: &Path, tools: &Toolchains) -> Result<(), DriverError> {
    let code = dir.join("code");
    if !is_file(code.join("package.json")).await {
        return Ok(());
    }
    let locked = is_file(code.join("package-lock.json")).await
        || is_file(code.join("npm-shrinkwrap.json")).await;
    let (what, verb) = if locked {
        ("npm ci", "ci")
    } else {
        ("npm install", "install")
    };
    let mut cmd = Command::new(&tools.npm);
    cmd.args([verb, "--omit=dev", "--no-audit", "--no-fund"])
        .current_dir(&code)
        .env_clear()
        .envs(inherited_env(&["NPM_CONFIG_", "npm_config_"]))
        .env("NPM_CONFIG_CACHE", &tools.npm_cache)
        .env("NPM_CONFIG_UPDATE_NOTIFIER", "false")
        .env("NODE_ENV", "production");
    run_step(dir, what, cmd).await
}

/// Marks the build complete and moves it into place.
fn finish(tmp: &Path, final_dir: &Path) -> Result<(), DriverError> {
    append_log(tmp, "sless: build complete\n").map_err(|e| infra("writing the build log", e))?;
    std::fs::write(tmp.join(COMPLETE_MARKER), b"")
        .map_err(|e| infra("marking the build complete", e))?;
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
