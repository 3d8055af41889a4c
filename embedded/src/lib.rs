//! The embedded default of sless (DESIGN.md section 8).
//!
//! This crate owns the two services that `sless dev` (and the test suites)
//! run inside the sless process itself, so that the whole system works on one
//! machine with no setup beyond installing PostgreSQL:
//!
//! * [`PrivatePostgres`]: a private PostgreSQL cluster created with the
//!   system's PostgreSQL server binaries inside a data directory, listening on
//!   loopback only and tied to the lifetime of the owning process;
//! * [`S3Server`]: an S3-compatible server on loopback (backed by `s3s` and
//!   `s3s-fs`), so that the very same `aws-sdk-s3` code path is used as in
//!   production.
//!
//! This crate sits at the bottom of the dependency graph: it must never depend
//! on other sless crates. Callers pass it plain paths, ports and credentials
//! (and, in [`PostgresHost`], where the server programs are and the
//! environment they run in: this crate reads no environment) and get back
//! URLs and endpoints.

#![warn(missing_docs)]

mod error;
mod postgres;
mod process;
mod s3;

pub use error::{EmbeddedError, Result};
pub use postgres::{PostgresOptions, PrivatePostgres, url as postgres_url};
pub use process::PostgresHost;
pub use s3::S3Server;

/// Generates a random secret (hex, 32 bytes of randomness) — used for
/// passwords and keys.
///
/// The result is 64 lowercase hexadecimal characters, so it can be embedded in
/// URLs and configuration files without escaping.
pub fn random_secret() -> String {
    let bytes: [u8; 32] = rand::random();
    hex::encode(bytes)
}

#[cfg(test)]
mod tests {
    use super::random_secret;

    #[test]
    fn random_secret_is_64_hex_chars_and_differs() {
        let a = random_secret();
        let b = random_secret();
        assert_eq!(a.len(), 64);
        assert!(a.chars().all(|c| c.is_ascii_hexdigit()));
        assert_ne!(a, b);
    }
}
