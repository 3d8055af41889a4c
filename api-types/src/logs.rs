//! What functions print, as the API answers it
//! (`GET …/functions/{name}/logs`, `GET …/invocations/{id}`).

use serde::{Deserialize, Serialize};
use utoipa::ToSchema;

use crate::views::InvocationView;

/// One line a function printed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize, ToSchema)]
pub struct LogLineView {
    /// Its place in the function's log: later lines have larger ids. A
    /// page's `next_cursor` and a tail's `Last-Event-ID` are ids.
    pub id: i64,
    /// When sless read it (RFC 3339).
    pub at: String,
    /// The version that printed it; null when not known.
    pub version: Option<u32>,
    /// Which process printed it: an instance's address, a pod's name, or
    /// a job or cron run's stream.
    pub instance: String,
    /// The invocation record of the call that printed it; null for lines
    /// printed outside a call (at start, say).
    pub invocation: Option<String>,
    /// `stdout` or `stderr`.
    pub stream: String,
    pub line: String,
    /// The line was longer than 16 KiB and was cut there.
    #[serde(default)]
    pub truncated: bool,
}

/// One page of a function's log.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct LogPage {
    pub items: Vec<LogLineView>,
    /// The `cursor` of the next page; null on the last.
    pub next_cursor: Option<String>,
    /// Lines of the function that were not kept, in all: over its budget,
    /// or while sless could not keep up.
    pub dropped: u64,
}

/// One invocation record and the lines its call printed.
#[derive(Debug, Clone, Serialize, Deserialize, ToSchema)]
pub struct InvocationWithLines {
    #[serde(flatten)]
    pub invocation: InvocationView,
    /// What the call printed, oldest first (at most 1000 lines: the rest
    /// are in `GET …/logs?invocation=`).
    pub lines: Vec<LogLineView>,
    /// Whether it printed more than `lines` holds.
    pub more_lines: bool,
}
