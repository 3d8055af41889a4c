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
//!
//! What the steps print (stdout and stderr through one pipe, so in the
//! order it was written) and sless's own notes go, as they come, to the
//! build log on this machine (`logs/builds/{ns}/{name}/{sha}.log`, copied
//! into the finished build as `build.log`) and to the request's
//! `BuildLog`, which the reconciler records. A build found cached prints
//! nothing.
//!
//! The parts: [`steps`] runs a build's steps, [`directory`] prepares the
//! build directory and moves it into place, [`deps`] installs Python's and
//! Node.js's dependencies, [`go`] builds Go functions.

mod deps;
mod directory;
mod go;
mod steps;

use std::io::{self, Write};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use sless_domain::Runtime;

use super::jails::Jails;
use super::process::Spawner;
use crate::driver::{Artifact, BuildRequest, DriverError};
pub(crate) use directory::remove_stale_tmp_dirs;
use directory::{finish, prepare};
pub(crate) use steps::Steps;

/// Marks a finished build directory.
pub(crate) const COMPLETE_MARKER: &str = ".complete";
/// The compiled function of a go1.23 build, relative to the build directory.
pub(crate) const GO_BINARY: &str = "bin/function";
/// The build log's copy in a finished build directory.
pub(crate) const BUILD_LOG: &str = "build.log";
/// The scratch directory of a build's steps (`TMPDIR`), removed after.
const SCRATCH: &str = ".tmp";
/// The build log's last line, once the build is in place.
const BUILD_COMPLETE: &str = "sless: build complete\n";

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
    /// The worker's environment, which steps take what they may see from
    /// ([`inherited_env`]).
    pub env: Vec<(String, String)>,
}

/// Where builds, their logs and (in jails) each namespace's caches live.
#[derive(Debug, Clone)]
pub(crate) struct BuildPaths {
    /// `builds/`: `{ns}/{name}/{sha}/`.
    pub builds: PathBuf,
    /// `logs/builds/`: `{ns}/{name}/{sha}.log`, the log of the last attempt.
    pub logs: PathBuf,
    /// `tenants/`: `{ns}/cache/` of jailed builds.
    pub tenants: PathBuf,
}

/// What runs a build's steps.
pub(crate) struct Builder<'a> {
    pub paths: &'a BuildPaths,
    pub tools: &'a Toolchains,
    pub spawner: &'a Arc<Spawner>,
    /// `None`: steps run as sless's own user (unsafe).
    pub jails: Option<&'a Jails>,
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

fn append_log(log: &Path, text: &str) -> io::Result<()> {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log)?;
    log.write_all(text.as_bytes())
}

/// Builds `req`, or returns the earlier build of the same context.
pub(crate) async fn build(
    builder: &Builder<'_>,
    req: BuildRequest,
) -> Result<Artifact, DriverError> {
    let sha = &req.context_sha256;
    if sha.is_empty() || sha.len() > 128 || !sha.bytes().all(|b| b.is_ascii_hexdigit()) {
        return Err(build_error(format!(
            "context_sha256 {sha:?} is not a hex digest"
        )));
    }
    let (ns, name) = (req.key.namespace.as_str(), req.key.name.as_str());
    let parent = builder.paths.builds.join(ns).join(name);
    let final_dir = parent.join(sha);
    let log = builder
        .paths
        .logs
        .join(ns)
        .join(name)
        .join(format!("{sha}.log"));
    let artifact = Artifact {
        reference: final_dir.to_string_lossy().into_owned(),
    };
    let identity = match builder.jails {
        Some(jails) => Some(jails.tenants.identity(&req.key.namespace).await?),
        None => None,
    };
    let cache = builder.paths.tenants.join(ns).join("cache");

    let prepared = {
        let (parent, final_dir, log, cache) = (
            parent.clone(),
            final_dir.clone(),
            log.clone(),
            cache.clone(),
        );
        let sha = sha.clone();
        let context = req.context;
        tokio::task::spawn_blocking(move || {
            prepare(
                &parent,
                &final_dir,
                &log,
                &sha,
                &context,
                identity.map(|id| (id, cache.as_path())),
            )
        })
        .await
        .map_err(|e| infra("build task", e))??
    };
    let Some((mut tmp, files)) = prepared else {
        return Ok(artifact); // cached: nothing was built, nothing to log
    };
    let steps = Steps {
        builder,
        dir: tmp.path.clone(),
        log: log.clone(),
        out: req.log.clone(),
        jail: identity.map(|id| (id, cache)),
    };
    steps
        .note(format!(
            "sless: unpacked {files} files of build context {sha}\n"
        ))
        .await?;

    let step = match req.runtime {
        Runtime::Python311 => deps::python_deps(&steps).await,
        Runtime::Nodejs20 => deps::node_deps(&steps).await,
        Runtime::Go123 => go::build(&steps).await,
    };
    if let Err(e) = step {
        // Removing the half build is blocking work too.
        let _ = tokio::task::spawn_blocking(move || drop(tmp)).await;
        return Err(e);
    }

    let final_dir2 = final_dir.clone();
    let tmp_path = tmp.path.clone();
    let jailed = identity.is_some();
    tokio::task::spawn_blocking(move || finish(&tmp_path, &final_dir2, &log, jailed))
        .await
        .map_err(|e| infra("build task", e))??;
    tmp.keep = true;
    req.log.push(BUILD_COMPLETE.as_bytes());
    Ok(artifact)
}
