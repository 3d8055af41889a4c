//! The user commands that read or change one thing, one module per
//! family: [`functions`] (`ls`, `get`, `rm`), [`invoke`], [`logs`] (what
//! a function printed), [`invocations`] (its calls' records),
//! [`versions`] (`versions`, `source`, `diff`, `build-log`), [`triggers`]
//! (`trigger ...`), [`jobs`] (`job ...`) and [`events`]. The dispatch
//! (`super::dispatch`) names them through the re-exports below.

mod events;
mod functions;
mod invocations;
mod invoke;
mod jobs;
mod logs;
mod triggers;
mod versions;

pub use events::{EventsArgs, events};
pub use functions::{get, ls, rm};
pub use invocations::{InvocationsArgs, invocations};
pub use invoke::{InvokeArgs, invoke};
pub use jobs::{JobCommand, job};
pub use logs::{LogsArgs, logs};
pub use triggers::{TriggerCommand, trigger};
pub use versions::{build_log, diff, source, versions};

use super::output::Failure;

/// `10m`, `2h`, `1d`, `30s`, or an RFC 3339 time: the time that long ago.
fn since_time(since: &str) -> Result<chrono::DateTime<chrono::Utc>, Failure> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(since) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let (number, unit) = since.split_at(since.trim_end_matches(char::is_alphabetic).len());
    let n: u64 = number.parse().map_err(|_| {
        Failure::usage(format!(
            "--since {since:?} is not like 10m, 2h, 1d or a time"
        ))
    })?;
    let unit: u64 = match unit {
        "s" => 1,
        "m" | "" => 60,
        "h" => 3600,
        "d" => 86_400,
        _ => {
            return Err(Failure::usage(format!(
                "--since {since:?}: units are s, m, h, d"
            )));
        }
    };
    n.checked_mul(unit)
        .and_then(|s| i64::try_from(s).ok())
        .and_then(chrono::Duration::try_seconds)
        .and_then(|ago| chrono::Utc::now().checked_sub_signed(ago))
        .ok_or_else(|| Failure::usage(format!("--since {since:?} is too long ago")))
}
