//! `sless logs`: what a function printed, oldest first, as a page of its
//! last lines or everything since a time, and then (`--follow`) its live
//! tail, from the last line shown so that none is missed or repeated.
//! Also how a line is shown, and an invocation named by its short form,
//! which `sless invocations` shares.

use std::io::Write;

use clap::Args;
use sless_client::types::LogLineView;
use sless_client::{Client, LogQuery, PageQuery};

use super::since_time;
use crate::cli::output::{Failure, Out, code};

#[derive(Args, Debug)]
pub struct LogsArgs {
    pub name: String,
    /// After the last lines, print new ones as they are written.
    #[arg(short, long)]
    pub follow: bool,
    /// How many of the last lines (default 50; with --since: every line
    /// since then unless given).
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub tail: Option<String>,
    /// Only lines since this long ago (`30s`, `10m`, `2h`, `1d`) or this
    /// RFC 3339 time.
    #[arg(long, value_name = "WHEN", allow_hyphen_values = true)]
    pub since: Option<String>,
    /// Only what one call printed: its invocation id, or the 8 characters
    /// `sless logs` shows of it.
    #[arg(long, value_name = "ID")]
    pub invocation: Option<String>,
    /// Only lines holding this text, ignoring case.
    #[arg(long, value_name = "TEXT")]
    pub grep: Option<String>,
    /// Only `stdout` or `stderr`.
    #[arg(long, value_name = "STREAM")]
    pub stream: Option<String>,
}

/// The last lines shown when `--tail` is not given.
const DEFAULT_TAIL: u32 = 50;
/// The API's largest page.
const PAGE: u32 = 1000;
/// The most bytes of `--grep` (the API's bound on `q`).
const MAX_GREP: usize = 256;

/// What the flags ask for, checked before anything is sent.
struct Asked {
    query: LogQuery,
    /// How many of the last lines; `None`: every line since `--since`.
    tail: Option<u32>,
}

fn asked(args: &LogsArgs) -> Result<Asked, Failure> {
    let tail = args
        .tail
        .as_deref()
        .map(|t| {
            t.parse::<u32>().map_err(|_| {
                Failure::usage(format!("--tail {t:?} is a number of lines (0 or more)"))
            })
        })
        .transpose()?;
    let since = args.since.as_deref().map(since_time).transpose()?;
    if let Some(s) = args.stream.as_deref()
        && s != "stdout"
        && s != "stderr"
    {
        return Err(Failure::usage(format!(
            "--stream is stdout or stderr, not {s:?}"
        )));
    }
    if let Some(g) = args.grep.as_deref()
        && (g.is_empty() || g.len() > MAX_GREP)
    {
        return Err(Failure::usage(format!(
            "--grep is the text to look for, 1 to {MAX_GREP} bytes"
        )));
    }
    if let Some(i) = args.invocation.as_deref() {
        invocation_shape("--invocation", i)?;
    }
    Ok(Asked {
        tail: match (tail, since) {
            (Some(n), _) => Some(n),
            (None, Some(_)) => None,
            (None, None) => Some(DEFAULT_TAIL),
        },
        query: LogQuery {
            since: since.map(|t| t.to_rfc3339_opts(chrono::SecondsFormat::Micros, true)),
            stream: args.stream.clone(),
            q: args.grep.clone(),
            ..LogQuery::default()
        },
    })
}

pub async fn logs(client: &Client, out: &Out, args: LogsArgs) -> Result<(), Failure> {
    let Asked { mut query, tail } = asked(&args)?;
    let name = args.name.as_str();
    if let Some(given) = args.invocation.as_deref() {
        query.invocation = Some(invocation_id(client, name, "--invocation", given).await?);
    }
    // Before the lines are read: the tail starts at the last line there
    // was then, or at the last line shown if that is later. A line written
    // in between is in the page, or after the last one shown.
    let anchor = match args.follow {
        true => Some(client.last_log_id(name).await?),
        false => None,
    };
    let mut printer = Printer::new(out);
    let dropped = match tail {
        Some(n) => last_lines(client, name, &query, n, &mut printer).await?,
        None => every_line(client, name, &query, &mut printer).await?,
    };
    if dropped > 0 && !out.quiet {
        eprintln!(
            "{dropped} line{} {name} printed {} not kept (over its budget, or while sless could not keep up)",
            if dropped == 1 { "" } else { "s" },
            if dropped == 1 { "was" } else { "were" },
        );
    }
    let Some(anchor) = anchor else {
        return Ok(());
    };
    if printer.closed {
        return Ok(());
    }
    query.since = None;
    query.cursor = Some(printer.last_id.unwrap_or(0).max(anchor).to_string());
    let mut stream = client.follow_function_logs(name, &query).await?;
    while let Some(line) = stream.next().await {
        printer.line(&line?);
        if printer.closed {
            return Ok(());
        }
    }
    Err(Failure::new(
        code::SERVER,
        format!("the API ended the tail of {name}'s log"),
    ))
}

/// The last `n` lines that match, oldest first; answers the count of lines
/// not kept.
async fn last_lines(
    client: &Client,
    name: &str,
    query: &LogQuery,
    n: u32,
    printer: &mut Printer<'_>,
) -> Result<u64, Failure> {
    let mut lines: Vec<LogLineView> = Vec::new();
    let mut query = LogQuery {
        limit: Some(n.clamp(1, PAGE)),
        ..query.clone()
    };
    let dropped = loop {
        let page = client.function_logs(name, &query).await?;
        lines.extend(page.items);
        match page.next_cursor {
            Some(c) if lines.len() < n as usize => {
                query.cursor = Some(c);
                query.limit = Some((n - lines.len() as u32).min(PAGE));
            }
            _ => break page.dropped,
        }
    };
    lines.truncate(n as usize);
    for l in lines.iter().rev() {
        printer.line(l);
    }
    Ok(dropped)
}

/// Every line that matches (since `--since`), oldest first, printed a
/// page at a time; answers the count of lines not kept.
async fn every_line(
    client: &Client,
    name: &str,
    query: &LogQuery,
    printer: &mut Printer<'_>,
) -> Result<u64, Failure> {
    let mut query = LogQuery {
        limit: Some(PAGE),
        oldest_first: true,
        ..query.clone()
    };
    loop {
        let page = client.function_logs(name, &query).await?;
        for l in &page.items {
            printer.line(l);
        }
        match page.next_cursor {
            Some(c) if !printer.closed => query.cursor = Some(c),
            _ => return Ok(page.dropped),
        }
    }
}

/// Prints lines on stdout, a line at a time, and stops at a closed pipe
/// (`sless logs NAME | head`).
pub(super) struct Printer<'a> {
    out: &'a Out,
    /// The id of the last line printed.
    last_id: Option<i64>,
    /// stdout was closed: nothing more is printed.
    closed: bool,
}

impl<'a> Printer<'a> {
    pub(super) fn new(out: &'a Out) -> Printer<'a> {
        Printer {
            out,
            last_id: None,
            closed: false,
        }
    }

    /// One line: `-o json` its document on one line, else `TIME  INVOCATION
    /// STREAM  LINE`.
    pub(super) fn line(&mut self, l: &LogLineView) {
        if self.closed {
            return;
        }
        let text = match self.out.json() {
            true => serde_json::to_string(l).expect("a line serializes"),
            false => shown(self.out, l),
        };
        let mut stdout = std::io::stdout().lock();
        if writeln!(stdout, "{text}")
            .and_then(|()| stdout.flush())
            .is_err()
        {
            self.closed = true;
        }
        self.last_id = Some(l.id);
    }
}

/// A line for people: its time (UTC, to the millisecond), the short form
/// of the call that printed it (or `-`), its stream (stderr in red on a
/// terminal), the line.
fn shown(out: &Out, l: &LogLineView) -> String {
    let at = chrono::DateTime::parse_from_rfc3339(&l.at)
        .map(|t| {
            t.with_timezone(&chrono::Utc)
                .format("%Y-%m-%dT%H:%M:%S%.3fZ")
                .to_string()
        })
        .unwrap_or_else(|_| l.at.clone());
    let call = l.invocation.as_deref().map_or("-", short);
    let stream = match l.stream.as_str() {
        "stderr" => out.paint("31", "stderr"),
        s => s.to_owned(),
    };
    let cut = match l.truncated {
        true => out.paint("2", " [cut at 16 KiB]"),
        false => String::new(),
    };
    format!("{at}  {call:<8}  {stream}  {}{cut}", l.line)
}

/// The short form of an invocation id: its last 8 characters. (Its first
/// ones are the time it started, the same for every call of a minute.)
pub(super) fn short(id: &str) -> &str {
    &id[id.len().saturating_sub(SHORT)..]
}

/// How many characters of an id the short form shows.
const SHORT: usize = 8;
/// The fewest characters of an id that name one.
const FEWEST: usize = 4;
/// How many of a function's newest invocation records a short id is
/// looked for in.
const LOOKED_AT: usize = 5_000;

/// Whether `given` can name an invocation: a whole id, or the end of one.
fn invocation_shape(flag: &str, given: &str) -> Result<(), Failure> {
    let id = given.trim();
    let hex = id.chars().all(|c| c.is_ascii_hexdigit() || c == '-');
    if hex && (FEWEST..=36).contains(&id.len()) {
        return Ok(());
    }
    Err(Failure::usage(format!(
        "{flag} {given:?} is not an invocation id: the whole id, or its last {FEWEST} to {SHORT} \
         characters as `sless logs` shows them"
    )))
}

/// The whole id of the invocation `given` names: itself when whole, else
/// the one among the function's newest records whose id ends with it.
pub(super) async fn invocation_id(
    client: &Client,
    name: &str,
    flag: &str,
    given: &str,
) -> Result<String, Failure> {
    invocation_shape(flag, given)?;
    let end = given.trim().to_ascii_lowercase();
    if is_whole(&end) {
        return Ok(end);
    }
    let mut query = PageQuery {
        limit: Some(PAGE),
        cursor: None,
    };
    let mut found: Vec<String> = Vec::new();
    let mut seen = 0;
    while seen < LOOKED_AT {
        let page = client.list_invocations(name, &query).await?;
        seen += page.items.len();
        found.extend(
            page.items
                .into_iter()
                .filter(|i| i.id.ends_with(&end))
                .map(|i| i.id),
        );
        match page.next_cursor {
            Some(c) => query.cursor = Some(c),
            None => break,
        }
    }
    match found.len() {
        1 => Ok(found.remove(0)),
        0 => Err(Failure::new(
            code::NOT_FOUND,
            format!("no invocation of {name} among its newest {LOOKED_AT} ends with {end:?}"),
        )),
        n => Err(Failure::usage(format!(
            "{n} invocations of {name} end with {end:?}: give more of the id"
        ))),
    }
}

/// A whole invocation id: 8-4-4-4-12 hex digits.
fn is_whole(id: &str) -> bool {
    let parts: Vec<&str> = id.split('-').collect();
    parts.iter().map(|p| p.len()).eq([8, 4, 4, 4, 12])
        && parts
            .iter()
            .all(|p| p.chars().all(|c| c.is_ascii_hexdigit()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_short_form_is_the_end_of_the_id_which_tells_calls_of_one_minute_apart() {
        // Two calls a second apart: UUIDv7 ids that start alike.
        let a = "0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b";
        let b = "0193a1b2-c7aa-7e5f-9111-22223333abcd";
        assert_eq!((short(a), short(b)), ("2e3f4a5b", "3333abcd"));
        assert_eq!(short("abc"), "abc");
    }

    #[test]
    fn a_whole_id_is_told_from_its_end() {
        assert!(is_whole("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"));
        assert!(!is_whole("0193a1b2c3d47e5f8a9b0c1d2e3f4a5b"));
        assert!(!is_whole("2e3f4a5b"));
        assert!(!is_whole("0193a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5z"));
        assert!(invocation_shape("--invocation", "2e3f4a5b").is_ok());
        for bad in ["", "abc", "not-an-id", "2e3f4a5b!", &"a".repeat(37)] {
            let e = invocation_shape("--invocation", bad).unwrap_err();
            assert_eq!(e.code, code::USAGE, "{bad:?}");
        }
    }
}
