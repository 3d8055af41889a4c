//! The error type of the crate.

use std::path::PathBuf;

/// Result alias used throughout `sless-embedded`.
pub type Result<T> = std::result::Result<T, EmbeddedError>;

/// Everything that can go wrong while running the embedded services.
///
/// Messages are meant to be shown to a developer as-is: they say what was
/// attempted, where, and (when known) how to fix it.
#[derive(Debug, thiserror::Error)]
pub enum EmbeddedError {
    /// `initdb`/`postgres` could not be found.
    #[error(
        "PostgreSQL server binaries not found: looked in {searched}; \
         install postgresql (Debian: apt-get install postgresql)"
    )]
    BinariesNotFound {
        /// Human-readable description of the places that were searched.
        searched: String,
    },

    /// Running as root, but no unprivileged account exists to run PostgreSQL.
    #[error(
        "PostgreSQL refuses to run as root and neither the `postgres` nor the \
         `nobody` user exists; create a `postgres` user or run sless as an unprivileged user"
    )]
    NoUnprivilegedUser,

    /// Running as root, PostgreSQL runs as an unprivileged user in a
    /// sandbox that shows it only its own directory; the sandbox is missing
    /// or broken.
    #[error(
        "PostgreSQL runs as user `{user}`, which sless (as root) does through the \
         sandbox, so that the data directory can stay private to root: {reason}"
    )]
    Sandbox {
        /// The account PostgreSQL would run as.
        user: String,
        /// What is wrong with the sandbox (it names the package to install).
        reason: String,
    },

    /// The cluster exists but the password file next to it does not.
    #[error(
        "the PostgreSQL cluster in {pgdata} exists but its password file {password_file} \
         is missing or empty; restore it or delete the data directory to start afresh"
    )]
    MissingPassword {
        /// The cluster directory.
        pgdata: PathBuf,
        /// Where the password was expected.
        password_file: PathBuf,
    },

    /// `initdb` exited unsuccessfully.
    #[error("initdb failed for {pgdata} ({status}); its output:\n{output}")]
    InitDb {
        /// The cluster directory being created.
        pgdata: PathBuf,
        /// The exit status, rendered.
        status: String,
        /// Combined stdout and stderr of initdb.
        output: String,
    },

    /// The postmaster exited before it became ready.
    #[error("postgres exited during startup ({status}); last lines of {log}:\n{tail}")]
    ExitedDuringStartup {
        /// The exit status, rendered.
        status: String,
        /// Path of the server log.
        log: PathBuf,
        /// The last lines the server wrote in this run.
        tail: String,
    },

    /// The postmaster did not report readiness before the deadline.
    #[error("postgres did not become ready within {seconds} s; last lines of {log}:\n{tail}")]
    NotReady {
        /// The deadline, in seconds.
        seconds: u64,
        /// Path of the server log.
        log: PathBuf,
        /// The last lines the server wrote in this run.
        tail: String,
    },

    /// The postmaster ignored the fast-shutdown request and had to be killed.
    #[error(
        "postgres did not shut down within {seconds} s after SIGINT and was killed with SIGKILL"
    )]
    ShutdownTimedOut {
        /// The deadline, in seconds.
        seconds: u64,
    },

    /// The S3 server could not be set up.
    #[error("failed to set up the S3 server on {root}: {message}")]
    S3Setup {
        /// The directory to be served.
        root: PathBuf,
        /// What went wrong.
        message: String,
    },

    /// An I/O operation failed.
    #[error("{context}: {source}")]
    Io {
        /// What was being done, e.g. "creating /x/pgsock".
        context: String,
        /// The underlying error.
        #[source]
        source: std::io::Error,
    },
}

impl EmbeddedError {
    /// Wraps an I/O error with a description of what was being done.
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Self::Io {
            context: context.into(),
            source,
        }
    }
}

/// Adds context to `std::io::Result`s.
pub(crate) trait IoContext<T> {
    /// Converts the error into [`EmbeddedError::Io`] with the given context.
    fn context(self, f: impl FnOnce() -> String) -> Result<T>;
}

impl<T> IoContext<T> for std::io::Result<T> {
    fn context(self, f: impl FnOnce() -> String) -> Result<T> {
        self.map_err(|e| EmbeddedError::io(f(), e))
    }
}
