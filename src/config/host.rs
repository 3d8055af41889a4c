//! The machine's own variables that sless reads (`PATH`, `USER`,
//! `RUST_LOG`), and the environment child processes inherit from: the local
//! driver's functions (without the sandbox) and build steps get the part of
//! it `sless_workers` lets them see, the embedded PostgreSQL (in its
//! sandbox) its `PATH`, `LANG`, `TZ` and `LC_*`.

use std::path::PathBuf;

use super::source::environment;

/// The process's environment, read once.
#[derive(Debug, Clone, Default)]
pub struct Host {
    /// Every variable of it (those that are UTF-8), for what child
    /// processes inherit.
    pub env: Vec<(String, String)>,
}

impl Host {
    pub fn from_env() -> Host {
        Host { env: environment() }
    }

    /// The variable `name`; empty counts as unset.
    fn get(&self, name: &str) -> Option<&str> {
        self.env
            .iter()
            .rev()
            .find(|(k, v)| k == name && !v.is_empty())
            .map(|(_, v)| v.as_str())
    }

    /// The directories of `PATH`, where the sandbox's bwrap and setpriv
    /// are looked for.
    pub fn search_path(&self) -> Vec<PathBuf> {
        self.get("PATH")
            .map(|p| std::env::split_paths(p).collect())
            .unwrap_or_default()
    }

    /// Who runs this command, `USER`: `sless replay` records it.
    pub fn user(&self) -> &str {
        self.get("USER").unwrap_or("unknown")
    }

    /// The log filter, `RUST_LOG` (`tracing` directives, e.g.
    /// `info,sless_workers=debug`); `None`: each command's default.
    pub fn log_filter(&self) -> Option<&str> {
        self.get("RUST_LOG")
    }

    /// How log lines are written, `SLESS_LOG_FORMAT`: `text` (the default)
    /// or `json` (one object a line, with the request's span).
    pub fn log_json(&self) -> anyhow::Result<bool> {
        match self.get("SLESS_LOG_FORMAT") {
            None | Some("text") => Ok(false),
            Some("json") => Ok(true),
            Some(other) => anyhow::bail!("SLESS_LOG_FORMAT={other:?}: text or json"),
        }
    }
}
