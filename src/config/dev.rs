//! The embedded default of `sless dev` and `serve` (and of `sless replay
//! --data-dir` and `reconcile --data-dir` on a stopped instance): the
//! private PostgreSQL cluster in the data directory. Its S3 server has no
//! settings; the data directory is `--data-dir`.

use std::path::PathBuf;

use sless_embedded::PostgresHost;

use super::source::var;
use super::{Get, Host};

/// The embedded PostgreSQL's settings.
#[derive(Debug, Clone, Default)]
pub struct Dev {
    /// The directory with `initdb` and `postgres`, `SLESS_PG_BIN` (else the
    /// highest `/usr/lib/postgresql/*/bin`, else `PATH`).
    pub pg_bin: Option<PathBuf>,
}

impl Dev {
    pub fn from_env() -> Dev {
        Dev::from(&var)
    }

    fn from(get: Get<'_>) -> Dev {
        Dev {
            pg_bin: get("SLESS_PG_BIN").map(PathBuf::from),
        }
    }

    /// Where the cluster's programs are found, and the environment they
    /// run in: this process's.
    pub fn postgres_host(&self, host: &Host) -> PostgresHost {
        PostgresHost {
            bin_dir: self.pg_bin.clone(),
            env: host.env.clone(),
        }
    }
}
