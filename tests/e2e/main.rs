//! End-to-end tests: the real `sless` binary, started as a process.

mod cli;
mod cli_logs;
mod console;
mod dev;
mod drain;
mod edge;
mod fleet;
mod function_logs;
mod history;
mod job_slots;
mod jobs;
mod log_export;
mod metrics;
mod orphans;
mod platform;
mod python_client;
mod replay;
mod restart;
mod runtimes;
mod sandbox;
mod scale_out;
mod scaling;
#[path = "../support/mod.rs"]
mod support;
mod terraform;
mod traces;
mod triggers;
mod worker_kill;

pub use support::*;
