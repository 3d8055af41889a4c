//! How the user commands print: tables or JSON on stdout, errors as one
//! line on stderr with a documented exit code, colours and a live display
//! only on a terminal.

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use serde::Serialize;
use sless_client::Error;

use super::{Format, Global};

/// Exit codes (docs/cli.md).
pub mod code {
    /// The function, job or build failed.
    pub const FAILED: u8 = 1;
    /// Bad usage or input.
    pub const USAGE: u8 = 2;
    /// The token was refused.
    pub const AUTH: u8 = 3;
    pub const NOT_FOUND: u8 = 4;
    /// A conflict or a failed precondition.
    pub const CONFLICT: u8 = 5;
    /// The server failed or could not be reached.
    pub const SERVER: u8 = 6;
}

/// Why a command did not succeed: its exit code and what to say.
#[derive(Debug)]
pub struct Failure {
    pub code: u8,
    /// One line.
    pub message: String,
    /// More lines printed after it (a build log's tail).
    pub more: Vec<String>,
}

impl Failure {
    pub fn new(code: u8, message: impl Into<String>) -> Failure {
        Failure {
            code,
            message: message.into(),
            more: Vec::new(),
        }
    }

    pub fn usage(message: impl Into<String>) -> Failure {
        Failure::new(code::USAGE, message)
    }

    pub fn failed(message: impl Into<String>) -> Failure {
        Failure::new(code::FAILED, message)
    }
}

impl From<Error> for Failure {
    fn from(e: Error) -> Failure {
        let code = match &e {
            Error::Api(p) => match p.status {
                401 | 403 => code::AUTH,
                404 => code::NOT_FOUND,
                409 | 412 | 428 => code::CONFLICT,
                400..=499 if p.status != 429 => code::USAGE,
                _ => code::SERVER,
            },
            Error::Invalid(_) => code::USAGE,
            Error::Connect { .. } | Error::Timeout { .. } | Error::Decode { .. } => code::SERVER,
        };
        let message = match &e {
            Error::Api(p) if p.status == 401 => format!(
                "the API refused the token: {} (log in again: sless login --endpoint URL --token T)",
                p.detail
            ),
            Error::Connect { endpoint, .. } => {
                let hint = if endpoint.contains("127.0.0.1") || endpoint.contains("localhost") {
                    " — is it running? Start one with `sless dev`"
                } else {
                    ""
                };
                format!("{e}{hint}")
            }
            _ => e.to_string(),
        };
        Failure::new(code, message)
    }
}

/// Where and how a command prints.
pub struct Out {
    pub format: Format,
    pub quiet: bool,
    /// stdout is a terminal: live displays and colours.
    pub terminal: bool,
    pub colour: bool,
}

impl Out {
    pub fn new(global: &Global, env: &crate::config::Cli) -> Out {
        let terminal = std::io::stdout().is_terminal();
        Out {
            format: global.output,
            quiet: global.quiet,
            terminal: terminal && global.output == Format::Table,
            colour: terminal && !env.no_color && global.output == Format::Table,
        }
    }

    pub fn json(&self) -> bool {
        self.format == Format::Json
    }

    /// Prints one JSON document (pretty) or one JSON line (`line`).
    pub fn document(&self, value: &impl Serialize) {
        let text = serde_json::to_string_pretty(value).expect("a document serializes");
        println!("{text}");
    }

    pub fn json_line(&self, value: &impl Serialize) {
        let text = serde_json::to_string(value).expect("a document serializes");
        let mut stdout = std::io::stdout().lock();
        let _ = writeln!(stdout, "{text}");
        let _ = stdout.flush();
    }

    /// A line for people (not in JSON mode, not when quiet), on stderr
    /// when JSON goes to stdout.
    pub fn note(&self, text: &str) {
        if self.quiet {
            return;
        }
        if self.json() {
            eprintln!("{text}");
        } else {
            println!("{text}");
        }
    }

    /// `text` in an ANSI colour (`31` red, `32` green, `33` yellow, `36`
    /// cyan, `2` dim), when colours are on.
    pub fn paint(&self, colour: &str, text: &str) -> String {
        if self.colour {
            format!("\x1b[{colour}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    /// A phase name in its colour.
    pub fn phase(&self, phase: &str) -> String {
        let colour = match phase {
            "Ready" | "Succeeded" => "32",
            "Failed" => "31",
            "Building" | "Pending" | "Running" => "33",
            _ => "2",
        };
        self.paint(colour, phase)
    }

    /// Prints the failure on stderr and gives its exit code.
    pub fn fail(&self, failure: &Failure) -> ExitCode {
        let prefix = if self.colour {
            "\x1b[31merror:\x1b[0m"
        } else {
            "error:"
        };
        eprintln!("{prefix} {}", failure.message);
        for line in &failure.more {
            eprintln!("{line}");
        }
        ExitCode::from(failure.code)
    }
}

/// A table: columns as wide as their widest cell, two spaces apart.
pub struct Table {
    header: Vec<String>,
    rows: Vec<Vec<String>>,
}

impl Table {
    pub fn new(header: &[&str]) -> Table {
        Table {
            header: header.iter().map(|h| h.to_string()).collect(),
            rows: Vec::new(),
        }
    }

    pub fn row(&mut self, cells: Vec<String>) {
        self.rows.push(cells);
    }

    /// Prints it; `width` of a cell counts what shows (ANSI codes aside).
    pub fn print(&self) {
        let shown = |s: &str| strip_ansi(s).chars().count();
        let mut widths: Vec<usize> = self.header.iter().map(|h| h.len()).collect();
        for row in &self.rows {
            for (i, cell) in row.iter().enumerate() {
                if i < widths.len() {
                    widths[i] = widths[i].max(shown(cell));
                }
            }
        }
        let mut stdout = std::io::stdout().lock();
        let line = |cells: &[String]| {
            let mut text = String::new();
            for (i, cell) in cells.iter().enumerate() {
                text.push_str(cell);
                if i + 1 < cells.len() {
                    let pad = widths[i].saturating_sub(shown(cell)) + 2;
                    text.extend(std::iter::repeat_n(' ', pad));
                }
            }
            text
        };
        let _ = writeln!(stdout, "{}", line(&self.header));
        for row in &self.rows {
            let _ = writeln!(stdout, "{}", line(row));
        }
    }
}

fn strip_ansi(s: &str) -> String {
    let mut out = String::new();
    let mut chars = s.chars();
    while let Some(c) = chars.next() {
        if c == '\x1b' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// An optional value for a table cell.
pub fn or_dash<T: ToString>(v: Option<T>) -> String {
    v.map(|v| v.to_string()).unwrap_or_else(|| "-".into())
}
