//! Configuration of the `sless` binary: environment variables only, never a
//! secret in code. One section per role or driver, each a struct read by
//! its own `from_env()` (a bad value stops sless with a message naming the
//! variable); docs/configuration.md has a table per section:
//!
//! - [`Database`] and [`Blobs`] (`store`): PostgreSQL and S3;
//! - [`TokenSettings`] (`tokens`): how tokens are checked;
//! - [`Api`] (`api`): the invoke proxy, invocation records, uploads,
//!   versions kept, quotas, the fault hook, and how it stops
//!   ([`Shutdown`], `shutdown`);
//! - [`Worker`] (`worker`): the worker loop, the driver, the cron scheduler;
//! - [`Local`] (`local`, with its sandbox in `sandbox`): the local driver;
//! - [`Kube`] (`kube`): the Kubernetes driver;
//! - [`Dev`] (`dev`): the embedded PostgreSQL;
//! - [`Cli`] (`cli`): the user commands' endpoint, token and profile;
//! - [`Host`] (`host`): the machine's own variables (`PATH`, `USER`,
//!   `RUST_LOG`) and the environment child processes inherit from.
//!
//! The projector reads only the store's. Library crates read no
//! environment: the binary passes them what these sections read. The only
//! reads of the environment are in `source`, besides the arguments clap takes
//! from `SLESS_FN_LISTEN`, `SLESS_FN_URL` and `SLESS_DATA_DIR` (`main.rs`).

mod api;
mod cli;
mod dev;
mod host;
mod kube;
mod local;
mod metrics;
mod sandbox;
mod shutdown;
mod source;
mod store;
mod tokens;
mod worker;

pub use api::{Api, fn_url};
pub use cli::Cli;
pub use dev::Dev;
pub use host::Host;
pub use kube::Kube;
pub use local::Local;
pub use metrics::{Metrics, traces};
pub use shutdown::Shutdown;
pub use store::{Blobs, Database};
pub use tokens::TokenSettings;
pub use worker::{DriverKind, Worker};

/// How a section reads a variable: from the environment
/// ([`source::var`]), or from a table in tests.
type Get<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The variable `name` parsed, or `default` when it is unset.
fn number_from<T: std::str::FromStr>(get: Get<'_>, name: &str, default: T) -> anyhow::Result<T>
where
    T::Err: std::fmt::Display,
{
    match get(name) {
        None => Ok(default),
        Some(v) => v
            .parse()
            .map_err(|e| anyhow::anyhow!("{name}={v:?} is not a number: {e}")),
    }
}

#[cfg(test)]
mod tests;
