//! The machine's own variables that sless reads (`PATH`, `USER`,
//! `RUST_LOG`, `MALLOC_ARENA_MAX`), and the environment child processes
//! inherit from: the local driver's functions (without the sandbox) and
//! build steps get the part of it `sless_workers` lets them see, the
//! embedded PostgreSQL (in its sandbox) its `PATH`, `LANG`, `TZ` and `LC_*`.

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

    /// glibc gives a thread that finds the heap busy an arena of its own,
    /// up to eight per core, and each arena keeps what was freed in it. One
    /// arena per core serves the runtime's worker threads (one per core);
    /// `sless dev` then keeps about 3 MiB less after a burst of proxied
    /// calls on two cores, at the same throughput (BENCHMARKS.md).
    /// `MALLOC_ARENA_MAX`, which glibc reads itself, decides when set. Call
    /// it before any thread starts.
    pub fn fewer_malloc_arenas(&self) {
        #[cfg(all(target_os = "linux", target_env = "gnu"))]
        if self.get("MALLOC_ARENA_MAX").is_none() {
            let cores = std::thread::available_parallelism().map_or(2, |n| n.get());
            let arenas = i32::try_from(cores.max(2)).unwrap_or(i32::MAX);
            // SAFETY: mallopt only sets an allocator parameter; no other
            // thread runs yet.
            unsafe {
                libc::mallopt(libc::M_ARENA_MAX, arenas);
            }
        }
    }

    /// The log filter, `RUST_LOG` (`tracing` directives, e.g.
    /// `info,sless_workers=debug`); `None`: each command's default.
    pub fn log_filter(&self) -> Option<&str> {
        self.get("RUST_LOG")
    }

    /// Whether text log lines are coloured: only when they go to a
    /// `terminal`, and not with `NO_COLOR` set (no-color.org). A pod's log,
    /// a file or a pipe gets plain text.
    pub fn log_colours(&self, terminal: bool) -> bool {
        terminal && self.get("NO_COLOR").is_none()
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn log_lines_are_coloured_only_on_a_terminal_without_no_color() {
        let host = |env: &[(&str, &str)]| Host {
            env: env
                .iter()
                .map(|(k, v)| (k.to_string(), v.to_string()))
                .collect(),
        };
        for (env, terminal, coloured) in [
            (&[][..], true, true),
            (&[][..], false, false),
            (&[("NO_COLOR", "1")][..], true, false),
            (&[("NO_COLOR", "")][..], true, true),
            (&[("NO_COLOR", "1")][..], false, false),
        ] {
            assert_eq!(
                host(env).log_colours(terminal),
                coloured,
                "{env:?} terminal={terminal}"
            );
        }
    }
}
