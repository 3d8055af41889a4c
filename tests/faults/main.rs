//! The fault suite, part 1: faults between the API, PostgreSQL and S3
//! (F2-F6 of docs/reliability.md), with the fault proxy and the checker
//! they share. Each scenario prints one `FAULT ...` line to stderr and
//! asserts that nothing acked was lost and nothing was duplicated.
//!
//! Run with `cargo test --test faults`; add `-- --nocapture` to see the
//! progress the scenarios print.

mod checker;
mod f2_api_crash;
mod f3_postgres_crash;
mod f4_database_blackhole;
mod f5_worker_partition;
mod f6_s3_unavailable;
mod harness;
mod proxy;
mod proxy_tests;
#[path = "../support/mod.rs"]
mod support;

pub use support::*;
