//! The user commands that read or change one thing, one module per
//! family: [`functions`] (`ls`, `get`, `rm`), [`invoke`], [`logs`],
//! [`versions`] (`versions`, `source`, `diff`, `build-log`), [`triggers`]
//! (`trigger ...`), [`jobs`] (`job ...`) and [`events`]. The dispatch
//! (`super::dispatch`) names them through the re-exports below.

mod events;
mod functions;
mod invoke;
mod jobs;
mod logs;
mod triggers;
mod versions;

pub use events::{EventsArgs, events};
pub use functions::{get, ls, rm};
pub use invoke::{InvokeArgs, invoke};
pub use jobs::{JobCommand, job};
pub use logs::logs;
pub use triggers::{TriggerCommand, trigger};
pub use versions::{build_log, diff, source, versions};

use super::output::Failure;

/// `10m`, `2h`, `1d`, `30s`, or an RFC 3339 time: the time that long ago.
fn since_time(since: &str) -> Result<chrono::DateTime<chrono::Utc>, Failure> {
    if let Ok(t) = chrono::DateTime::parse_from_rfc3339(since) {
        return Ok(t.with_timezone(&chrono::Utc));
    }
    let (number, unit) = since.split_at(since.trim_end_matches(char::is_alphabetic).len());
    let n: i64 = number.parse().map_err(|_| {
        Failure::usage(format!(
            "--since {since:?} is not like 10m, 2h, 1d or a time"
        ))
    })?;
    let seconds = match unit {
        "s" => n,
        "m" | "" => n * 60,
        "h" => n * 3600,
        "d" => n * 86_400,
        _ => {
            return Err(Failure::usage(format!(
                "--since {since:?}: units are s, m, h, d"
            )));
        }
    };
    Ok(chrono::Utc::now() - chrono::Duration::seconds(seconds))
}
