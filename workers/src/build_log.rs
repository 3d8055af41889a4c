//! A build's log, for every driver. The driver pushes what a build prints
//! (the local driver its steps' output and sless's own notes, the
//! Kubernetes driver the kaniko pod's log) into the request's [`BuildLog`]
//! as it comes; the reconciler's [`Recording`] writes it to the database
//! while the build runs and to S3 when it ends (`sless_store::build_logs`
//! has the protocol).
//!
//! What is kept is what `crate::capture` keeps of an output, with a limit
//! of [`BUILD_LOG_LIMIT`]: the first half of it goes out live, line by
//! line, as it is printed; past that, only the last half is kept, and it
//! goes out when the build ends, after a line saying how much was left
//! out. The stored log is exactly the lines that went out live followed by
//! what went out at the end, so a reader that followed the live lines
//! goes on in the stored log after the lines it has. NUL characters
//! (which PostgreSQL's text cannot hold) are kept as U+FFFD.

use std::fmt;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use sless_domain::FunctionKey;
use sless_store::PgPool;
use sless_store::blobs::{self, BlobStore};
use sless_store::build_logs::{self, End};
use tokio::sync::{Notify, oneshot};
use uuid::Uuid;

use crate::capture::Capture;

/// Most bytes of a build's log kept: the first half live, the last half
/// at the end.
pub const BUILD_LOG_LIMIT: usize = 2 * 1024 * 1024;

/// How long lines gather before they are written as one chunk.
pub const BATCH: Duration = Duration::from_millis(50);

/// How often a build that prints nothing says it is still running.
pub const HEARTBEAT: Duration = Duration::from_secs(5);

/// How long a running build's worker may be silent before its attempt
/// counts as abandoned (its worker died): far longer than [`HEARTBEAT`].
pub use sless_store::build_logs::SILENT_AFTER;

/// What a build printed so far; cheap to clone (clones share it). One
/// made with `default()` belongs to no recording: it keeps the log in
/// memory only, for whoever holds it.
#[derive(Clone)]
pub struct BuildLog {
    shared: Arc<Shared>,
}

struct Shared {
    state: Mutex<State>,
    /// Rung by every push, for the recording's writer.
    pushed: Notify,
}

struct State {
    kept: Capture,
    /// Bytes of the first half not taken as live lines yet.
    live: Vec<u8>,
    /// How many more bytes may go out live.
    live_room: usize,
    /// The length of the text taken as live lines so far.
    taken: usize,
}

impl Default for BuildLog {
    fn default() -> BuildLog {
        BuildLog::with_limit(BUILD_LOG_LIMIT)
    }
}

impl fmt::Debug for BuildLog {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.shared.state.lock().unwrap();
        f.debug_struct("BuildLog")
            .field("taken", &state.taken)
            .field("pending", &state.live.len())
            .finish_non_exhaustive()
    }
}

/// A log's end: the text the live lines left out, and the whole.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Ended {
    /// What follows the lines taken live.
    pub rest: String,
    /// The whole log as kept.
    pub text: String,
}

impl BuildLog {
    /// A log that keeps at most `limit` bytes.
    pub fn with_limit(limit: usize) -> BuildLog {
        BuildLog {
            shared: Arc::new(Shared {
                state: Mutex::new(State {
                    kept: Capture::with_limit(limit),
                    live: Vec::new(),
                    live_room: limit / 2,
                    taken: 0,
                }),
                pushed: Notify::new(),
            }),
        }
    }

    /// Adds output of the build.
    pub fn push(&self, bytes: &[u8]) {
        if bytes.is_empty() {
            return;
        }
        {
            let mut state = self.shared.state.lock().unwrap();
            state.kept.push(bytes);
            let live = bytes.len().min(state.live_room);
            state.live_room -= live;
            state.live.extend_from_slice(&bytes[..live]);
        }
        self.shared.pushed.notify_one();
    }

    /// Adds a line of sless's own (`text` without its line break).
    pub fn note(&self, text: &str) {
        self.push(format!("{}\n", text.trim_end_matches('\n')).as_bytes());
    }

    /// The log as it would be stored now.
    pub fn text(&self) -> String {
        let state = self.shared.state.lock().unwrap();
        readable(&state.kept.clone().finish().text)
    }

    /// The whole lines pushed since the last call that may go out live.
    fn take_lines(&self) -> Option<String> {
        let mut state = self.shared.state.lock().unwrap();
        let end = state.live.iter().rposition(|&b| b == b'\n')? + 1;
        let lines: Vec<u8> = state.live.drain(..end).collect();
        let text = readable(&String::from_utf8_lossy(&lines));
        state.taken += text.len();
        Some(text)
    }

    /// The log's end, once nothing more is pushed: the text after the live
    /// lines, and the whole. `None` when nothing was pushed at all.
    pub(crate) fn end(&self) -> Option<Ended> {
        let state = self.shared.state.lock().unwrap();
        let captured = state.kept.clone().finish();
        if captured.bytes == 0 {
            return None;
        }
        let text = readable(&captured.text);
        // The live lines are whole lines of the first half, read as the
        // kept text reads them: its beginning (see the module's docs).
        let rest = text.get(state.taken..).unwrap_or_default().to_owned();
        Some(Ended { rest, text })
    }
}

/// `text` with NUL characters as U+FFFD.
fn readable(text: &str) -> String {
    text.replace('\0', "\u{fffd}")
}

/// One attempt of a version's build, written down as it runs: started with
/// [`Recording::start`], its lines written in chunks by a task of its own,
/// ended with [`Recording::finish`].
pub(crate) struct Recording {
    namespace: String,
    name: String,
    version: u32,
    attempt: Uuid,
    log: BuildLog,
    /// An earlier attempt's log is in S3.
    stored_before: bool,
    stop: Option<oneshot::Sender<()>>,
    writer: Option<tokio::task::JoinHandle<Written>>,
}

/// What the writer task wrote.
struct Written {
    /// The last chunk written.
    seq: i32,
    /// Lines taken but not written (the database failed), to go first in
    /// the last chunk.
    unwritten: String,
}

impl Recording {
    /// Starts an attempt of `version`'s build and its writer.
    pub(crate) async fn start(
        pool: &PgPool,
        key: &FunctionKey,
        version: u32,
    ) -> sless_store::Result<Recording> {
        let (namespace, name) = (key.namespace.to_string(), key.name.to_string());
        let attempt = Uuid::now_v7();
        let stored_before = build_logs::start(pool, &namespace, &name, version, attempt).await?;
        let log = BuildLog::default();
        let (stop, stopped) = oneshot::channel();
        let writer = tokio::spawn(write_chunks(
            pool.clone(),
            Target {
                namespace: namespace.clone(),
                name: name.clone(),
                version,
                attempt,
            },
            log.clone(),
            stopped,
        ));
        Ok(Recording {
            namespace,
            name,
            version,
            attempt,
            log,
            stored_before,
            stop: Some(stop),
            writer: Some(writer),
        })
    }

    /// Where the driver pushes what the build prints.
    pub(crate) fn log(&self) -> BuildLog {
        self.log.clone()
    }

    /// Ends the attempt as `built` says: the last lines (and a line saying
    /// why a build failed) are written, the whole log is put in S3, then
    /// the end is recorded and the chunks go. An attempt that printed
    /// nothing leaves an earlier attempt's log in place. An attempt another
    /// one took over stores nothing.
    pub(crate) async fn finish(
        mut self,
        pool: &PgPool,
        blobs: &BlobStore,
        end: End,
    ) -> sless_store::Result<()> {
        let written = self.stop_writer(pool).await?;
        if let Some(error) = &end.error {
            self.log.note(&format!("sless: {error}"));
        }
        let ended = match self.log.end() {
            Some(ended) => Some(ended),
            None if self.stored_before => None,
            None => {
                self.log
                    .note("sless: nothing was built: an earlier build of this version was reused");
                self.log.end()
            }
        };
        // Stored unless another attempt took the version over (one the
        // sweep took for abandoned, while the database was away, still is
        // the latest).
        let ours = build_logs::is_latest(
            pool,
            &self.namespace,
            &self.name,
            self.version,
            self.attempt,
        )
        .await?;
        let mut stored = false;
        if let (true, Some(ended)) = (ours, ended) {
            let last = format!("{}{}", written.unwritten, ended.rest);
            if !last.is_empty() {
                build_logs::append(
                    pool,
                    &self.namespace,
                    &self.name,
                    self.version,
                    self.attempt,
                    written.seq + 1,
                    &last,
                )
                .await?;
            }
            let key = blobs::build_log_key(&self.namespace, &self.name, self.version);
            blobs
                .put(&key, ended.text.into_bytes(), "text/plain; charset=utf-8")
                .await?;
            stored = true;
        }
        build_logs::finish(
            pool,
            &self.namespace,
            &self.name,
            self.version,
            self.attempt,
            &end,
            stored,
        )
        .await?;
        Ok(())
    }

    /// Stops the writer: what it wrote. A writer that panicked left its
    /// last chunk number in the database only.
    async fn stop_writer(&mut self, pool: &PgPool) -> sless_store::Result<Written> {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
        if let Some(writer) = self.writer.take() {
            match writer.await {
                Ok(written) => return Ok(written),
                Err(e) => tracing::error!(error = %e, "a build log's writer failed"),
            }
        }
        let chunks = build_logs::chunks_after(pool, self.attempt, 0).await?;
        Ok(Written {
            seq: chunks.last().map_or(0, |c| c.seq),
            unwritten: String::new(),
        })
    }
}

impl Drop for Recording {
    /// A recording dropped unfinished (its reconcile was stopped): the
    /// writer stops; the attempt stays running until another attempt takes
    /// the version over or the sweep ends it.
    fn drop(&mut self) {
        if let Some(stop) = self.stop.take() {
            let _ = stop.send(());
        }
    }
}

/// The version and attempt a writer writes for.
struct Target {
    namespace: String,
    name: String,
    version: u32,
    attempt: Uuid,
}

/// Writes the log's new lines as chunks, [`BATCH`] after the first of them
/// arrived, and a heartbeat while there are none, until `stop` (or the
/// attempt is not the running one any more). Chunks are
/// numbered without a gap: a chunk the database refused is tried again,
/// with what came since, under the same number.
async fn write_chunks(
    pool: PgPool,
    t: Target,
    log: BuildLog,
    mut stop: oneshot::Receiver<()>,
) -> Written {
    let mut written = Written {
        seq: 0,
        unwritten: String::new(),
    };
    loop {
        tokio::select! {
            _ = &mut stop => return written,
            _ = log.shared.pushed.notified() => {
                tokio::select! {
                    // What was not taken goes out at the end (`finish`).
                    _ = &mut stop => return written,
                    _ = tokio::time::sleep(BATCH) => {}
                }
            }
            _ = tokio::time::sleep(HEARTBEAT) => {
                match build_logs::heartbeat(&pool, &t.namespace, &t.name, t.version, t.attempt).await {
                    Ok(true) => {}
                    // Not the version's running attempt any more (another
                    // took the row over, or the sweep ended it): nothing
                    // more goes out live.
                    Ok(false) => return written,
                    Err(e) => tracing::warn!(error = %e, "a build log heartbeat failed"),
                }
                continue;
            }
        }
        if let Some(lines) = log.take_lines() {
            written.unwritten.push_str(&lines);
        }
        if written.unwritten.is_empty() {
            continue;
        }
        let seq = written.seq + 1;
        let appended = build_logs::append(
            &pool,
            &t.namespace,
            &t.name,
            t.version,
            t.attempt,
            seq,
            &written.unwritten,
        )
        .await;
        match appended {
            Ok(true) => {
                written.seq = seq;
                written.unwritten.clear();
            }
            Ok(false) => {
                // As for a heartbeat: nothing more goes out live.
                written.unwritten.clear();
                return written;
            }
            Err(e) => tracing::warn!(error = %e, "writing a build log chunk failed; trying again"),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(log: &BuildLog) -> String {
        let mut out = String::new();
        while let Some(lines) = log.take_lines() {
            out.push_str(&lines);
        }
        out
    }

    #[test]
    fn only_whole_lines_go_out_live_and_the_rest_at_the_end() {
        let log = BuildLog::default();
        log.push(b"Collecting six\nDownl");
        assert_eq!(live(&log), "Collecting six\n");
        log.push(b"oading six.whl\nInstalling");
        assert_eq!(live(&log), "Downloading six.whl\n");
        assert_eq!(live(&log), "");
        let ended = log.end().unwrap();
        assert_eq!(ended.rest, "Installing");
        assert_eq!(
            ended.text,
            "Collecting six\nDownloading six.whl\nInstalling"
        );
    }

    #[test]
    fn past_the_first_half_lines_wait_for_the_end_and_the_stored_log_goes_on_after_them() {
        let log = BuildLog::with_limit(40);
        let mut sent = String::new();
        for i in 0..20 {
            log.push(format!("line {i:02}\n").as_bytes());
            sent.push_str(&live(&log));
        }
        // 20 bytes go out live: two whole lines and nothing of the third.
        assert_eq!(sent, "line 00\nline 01\n");
        let ended = log.end().unwrap();
        assert!(ended.text.starts_with(&sent), "{:?}", ended.text);
        assert_eq!(format!("{sent}{}", ended.rest), ended.text);
        assert!(ended.text.contains("bytes omitted"), "{:?}", ended.text);
        assert!(
            ended.text.ends_with("line 18\nline 19\n"),
            "{:?}",
            ended.text
        );
        assert_eq!(log.text(), ended.text);
    }

    #[test]
    fn a_character_cut_at_a_chunk_boundary_is_whole_in_the_line() {
        let log = BuildLog::default();
        let text = "naïve\n";
        let (a, b) = text.as_bytes().split_at(3);
        log.push(a);
        assert_eq!(live(&log), "");
        log.push(b);
        assert_eq!(live(&log), text);
    }

    #[test]
    fn nul_characters_are_kept_as_replacement_characters() {
        let log = BuildLog::default();
        log.push(b"a\0b\n\0");
        assert_eq!(live(&log), "a\u{fffd}b\n");
        let ended = log.end().unwrap();
        assert_eq!(ended.rest, "\u{fffd}");
        assert!(!ended.text.contains('\0'));
    }

    #[test]
    fn a_log_nothing_was_pushed_to_has_no_end() {
        let log = BuildLog::default();
        assert!(log.end().is_none());
        log.note("sless: a note");
        assert_eq!(log.end().unwrap().text, "sless: a note\n");
    }
}
