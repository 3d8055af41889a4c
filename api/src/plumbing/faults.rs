//! The fault-injection hook of the fault suite (tests/faults, F2): when
//! switched on (the binary does so for `SLESS_FAULT_CRASH_AFTER_COMMIT=1`),
//! the process kills itself with SIGKILL right after a command's transaction
//! commits and before its answer is sent: the client cannot tell whether the
//! command happened, and must find out by retrying with its
//! `Idempotency-Key`. For tests only; never set it in a deployment.

use std::sync::atomic::{AtomicBool, Ordering};

/// The variable the binary reads to switch the hook on.
pub const CRASH_AFTER_COMMIT_ENV: &str = "SLESS_FAULT_CRASH_AFTER_COMMIT";

static CRASH_AFTER_COMMIT: AtomicBool = AtomicBool::new(false);

/// Switches the hook on or off for this process.
pub fn crash_after_commit(on: bool) {
    CRASH_AFTER_COMMIT.store(on, Ordering::Relaxed);
}

/// Kills this process when the hook is on.
pub(crate) fn crash_if_asked() {
    if !CRASH_AFTER_COMMIT.load(Ordering::Relaxed) {
        return;
    }
    tracing::warn!("{CRASH_AFTER_COMMIT_ENV} is set: killing this process after a commit");
    #[cfg(unix)]
    {
        unsafe extern "C" {
            fn kill(pid: i32, sig: i32) -> i32;
        }
        const SIGKILL: i32 = 9;
        // SAFETY: kill(2) takes plain integers and has no memory-safety
        // preconditions; it signals this very process.
        unsafe { kill(std::process::id() as i32, SIGKILL) };
    }
    std::process::abort();
}
