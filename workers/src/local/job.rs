//! Jobs on the local driver: the runtime wrapper started in its `--job`
//! mode, the event written to its stdin, its output captured (the first
//! and last [`JOB_OUTPUT_LIMIT`] / 2 bytes of each stream) and appended
//! whole to `logs/jobs/{run}.log`.
//!
//! The run's processes are one process group. When the run ends (exit,
//! timeout, or the future is dropped) the group is killed, so nothing the
//! function left running outlives its run.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::sync::Mutex;
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::time::Instant;

use sless_sandbox::Mount;

use super::{LocalDriver, build, process, sandbox};
use crate::driver::{
    Captured, DeployRequest, DriverError, JOB_OUTPUT_LIMIT, JobOutput, JobRequest,
};

/// The environment variable that names the file with a job's input.
pub(crate) const EVENT_FILE_ENV: &str = "SLESS_JOB_EVENT_FILE";

/// The argument that starts a runtime wrapper in job mode.
pub(super) const JOB_FLAG: &str = "--job";
/// How long a job gets between SIGTERM and SIGKILL once its time is up.
const JOB_STOP_GRACE: Duration = Duration::from_secs(2);
/// How long output is still read after the run's process group is gone
/// (a process that left the group may hold the pipes open).
const DRAIN_TIMEOUT: Duration = Duration::from_secs(2);

impl LocalDriver {
    pub(super) async fn run_job_locally(&self, req: JobRequest) -> Result<JobOutput, DriverError> {
        let artifact_dir = PathBuf::from(&req.artifact.reference);
        let complete = artifact_dir.join(build::COMPLETE_MARKER);
        if !tokio::fs::try_exists(&complete).await.unwrap_or(false) {
            return Err(DriverError::Infra(format!(
                "artifact {} is not a finished local build",
                req.artifact.reference
            )));
        }
        let as_deploy = DeployRequest {
            key: req.key.clone(),
            version: req.version,
            runtime: req.runtime,
            entrypoint: req.entrypoint.clone(),
            memory_mb: req.memory_mb,
            timeout_sec: u32::try_from(req.timeout.as_secs()).unwrap_or(u32::MAX),
            env_vars: req.env_vars.clone(),
            artifact: req.artifact.clone(),
        };
        let event = serde_json::to_vec(&req.event)
            .map_err(|e| DriverError::Infra(format!("cannot serialise the event: {e}")))?;
        // The input is a file: in a jail, one of its own (bwrap copies it
        // in); else a file of the data directory, removed after the run.
        let (event_mount, event_file) = match &self.jails {
            Some(_) => (
                vec![Mount::File {
                    dest: PathBuf::from(sandbox::JOB_EVENT),
                    contents: event,
                }],
                None,
            ),
            None => {
                let path = self
                    .cfg
                    .data_dir
                    .join("runs")
                    .join(format!("{}.json", uuid::Uuid::new_v4().simple()));
                let (p, bytes) = (path.clone(), event);
                tokio::task::spawn_blocking(move || {
                    std::fs::create_dir_all(p.parent().expect("runs/ has a parent"))?;
                    std::fs::write(&p, bytes)
                })
                .await
                .map_err(|e| DriverError::Infra(format!("event task: {e}")))?
                .map_err(|e| DriverError::Infra(format!("cannot write the job's input: {e}")))?;
                (Vec::new(), Some(RemoveOnDrop(path)))
            }
        };
        let mut spec = self
            .launch_spec(&as_deploy, &artifact_dir, None, event_mount)
            .await
            .map_err(|e| match e {
                DriverError::Deploy { message, .. } | DriverError::Build { message, .. } => {
                    DriverError::Infra(message)
                }
                infra @ DriverError::Infra(_) => infra,
            })?;
        let event_path = match &event_file {
            Some(file) => file.0.clone(),
            None => PathBuf::from(sandbox::JOB_EVENT),
        };
        spec.env.push((
            EVENT_FILE_ENV.to_owned(),
            event_path.to_string_lossy().into_owned(),
        ));
        if let Some(jail) = spec.jail.as_mut() {
            // CPU time: the run's timeout, as a limit of each process.
            jail.limits.cpu_secs = Some(req.timeout.as_secs().max(1) + 1);
        }
        let log_path = self.cfg.data_dir.join(job_log_path(&req.run));
        let log = tokio::task::spawn_blocking(move || open_log(&log_path))
            .await
            .map_err(|e| DriverError::Infra(format!("log task: {e}")))?
            .map_err(|e| DriverError::Infra(format!("cannot open the job log: {e}")))?;

        let started = Instant::now();
        let mut running = process::spawn(&self.spawner, &spec, Stdio::null())
            .await
            .map_err(|e| {
                DriverError::Infra(format!(
                    "cannot start {}: {e}",
                    spec.program.to_string_lossy()
                ))
            })?;
        let pid = running.pid;
        // Dropping the run (cancellation) kills the whole group (a jail's
        // bwrap, and with it the jail), not only the wrapper (which
        // `kill_on_drop` covers).
        let mut group = GroupGuard { pid, armed: true };
        log.note(&format!(
            "[sless] run {} of version {} started (pid {pid})",
            req.run, req.version
        ));

        let stdout = running.child.stdout.take();
        let stderr = running.child.stderr.take();
        let mut out = Capture::default();
        let mut err = Capture::default();
        let (status, timed_out) = {
            let io = async {
                tokio::join!(
                    read_stream(stdout, &mut out, &log),
                    read_stream(stderr, &mut err, &log)
                )
            };
            tokio::pin!(io);
            let mut io_done = false;
            let ended = {
                let wait = wait_with_timeout(&mut running, req.timeout);
                tokio::pin!(wait);
                loop {
                    tokio::select! {
                        ended = &mut wait => break ended,
                        _ = &mut io, if !io_done => io_done = true,
                    }
                }
            };
            // Whatever the function left running goes with it.
            process::end_all(&running);
            if !io_done {
                let _ = tokio::time::timeout(DRAIN_TIMEOUT, &mut io).await;
            }
            ended
        };
        group.armed = false;
        drop(event_file);
        let duration = started.elapsed();
        let jailed = running.jail.is_some();
        let out_of_memory = running.out_of_memory().then_some(req.memory_mb);

        let (exit_code, signal) = match &status {
            Ok(status) => process::exit_parts(status, jailed),
            Err(_) => (None, None),
        };
        let how = match &status {
            Ok(status) => running.describe(status),
            Err(e) => format!("could not be waited for ({e})"),
        };
        let timeout_note = if timed_out {
            format!(", stopped after its timeout of {:?}", req.timeout)
        } else {
            String::new()
        };
        log.note(&format!(
            "[sless] run {} {how} after {} ms{timeout_note}",
            req.run,
            duration.as_millis()
        ));
        Ok(JobOutput {
            exit_code,
            signal,
            timed_out,
            out_of_memory,
            stdout: out.finish(),
            stderr: err.finish(),
            duration,
        })
    }
}

/// Waits for the run to exit; once `timeout` has passed, stops it
/// (SIGTERM, SIGKILL after [`JOB_STOP_GRACE`]). Also says whether it timed out.
async fn wait_with_timeout(
    running: &mut process::Running,
    timeout: Duration,
) -> (std::io::Result<ExitStatus>, bool) {
    if let Ok(status) = tokio::time::timeout(timeout, running.child.wait()).await {
        return (status, false);
    }
    process::terminate(running, JOB_STOP_GRACE).await;
    (running.child.wait().await, true)
}

/// Removes a file when dropped.
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_file(&self.0);
    }
}

/// Kills the run's process group when the run is dropped before it ended.
struct GroupGuard {
    pid: u32,
    armed: bool,
}

impl Drop for GroupGuard {
    fn drop(&mut self) {
        if self.armed {
            process::signal_group(self.pid, libc::SIGKILL);
        }
    }
}

/// Where the log of `run` goes below the data directory: `logs/jobs/` and
/// the run's name, each `/`-separated part kept to `[A-Za-z0-9._-]` and
/// never `.` or `..`.
pub(super) fn job_log_path(run: &str) -> PathBuf {
    let mut path = PathBuf::from("logs/jobs");
    let mut parts = run
        .split('/')
        .filter(|part| !part.is_empty())
        .map(|part| {
            let clean: String = part
                .chars()
                .map(|c| {
                    if c.is_ascii_alphanumeric() || matches!(c, '.' | '_' | '-') {
                        c
                    } else {
                        '_'
                    }
                })
                .collect();
            if clean.chars().all(|c| c == '.') {
                clean.replace('.', "_")
            } else {
                clean
            }
        })
        .peekable();
    if parts.peek().is_none() {
        return path.join("_.log");
    }
    while let Some(part) = parts.next() {
        if parts.peek().is_none() {
            path.push(format!("{part}.log"));
        } else {
            path.push(part);
        }
    }
    path
}

/// The run's log file: everything the run printed, as it came.
struct JobLog {
    file: Mutex<std::fs::File>,
}

fn open_log(path: &Path) -> std::io::Result<JobLog> {
    if let Some(dir) = path.parent() {
        std::fs::create_dir_all(dir)?;
    }
    let file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    Ok(JobLog {
        file: Mutex::new(file),
    })
}

impl JobLog {
    fn write(&self, bytes: &[u8]) {
        // Losing log output is better than failing the run.
        let _ = self.file.lock().unwrap().write_all(bytes);
    }

    fn note(&self, line: &str) {
        self.write(format!("{line}\n").as_bytes());
    }
}

async fn read_stream<R: AsyncRead + Unpin>(reader: Option<R>, capture: &mut Capture, log: &JobLog) {
    let Some(mut reader) = reader else { return };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                log.write(&buf[..n]);
                capture.push(&buf[..n]);
            }
        }
    }
}

/// One stream's output: its first `limit / 2` bytes, its last `limit / 2`
/// bytes, and how many there were.
#[derive(Debug)]
pub(crate) struct Capture {
    limit: usize,
    head: Vec<u8>,
    /// A ring of the last bytes after the head; `tail_start` is its oldest.
    tail: Vec<u8>,
    tail_start: usize,
    total: u64,
}

impl Default for Capture {
    fn default() -> Capture {
        Capture::with_limit(JOB_OUTPUT_LIMIT)
    }
}

impl Capture {
    pub(crate) fn with_limit(limit: usize) -> Capture {
        Capture {
            limit,
            head: Vec::new(),
            tail: Vec::new(),
            tail_start: 0,
            total: 0,
        }
    }

    pub(crate) fn push(&mut self, mut bytes: &[u8]) {
        self.total += bytes.len() as u64;
        let head_room = (self.limit / 2).saturating_sub(self.head.len());
        let into_head = head_room.min(bytes.len());
        self.head.extend_from_slice(&bytes[..into_head]);
        bytes = &bytes[into_head..];
        let cap = self.limit - self.limit / 2;
        if cap == 0 {
            return;
        }
        if bytes.len() >= cap {
            self.tail.clear();
            self.tail.extend_from_slice(&bytes[bytes.len() - cap..]);
            self.tail_start = 0;
            return;
        }
        for &b in bytes {
            if self.tail.len() < cap {
                self.tail.push(b);
            } else {
                self.tail[self.tail_start] = b;
                self.tail_start = (self.tail_start + 1) % cap;
            }
        }
    }

    pub(crate) fn finish(self) -> Captured {
        let mut tail = self.tail[self.tail_start..].to_vec();
        tail.extend_from_slice(&self.tail[..self.tail_start]);
        let kept = (self.head.len() + tail.len()) as u64;
        if kept == self.total {
            let mut all = self.head;
            all.extend_from_slice(&tail);
            return Captured {
                text: String::from_utf8_lossy(&all).into_owned(),
                bytes: self.total,
                truncated: false,
            };
        }
        let head = without_partial_end(&self.head);
        let tail = without_partial_start(&tail);
        let omitted = self.total - (head.len() + tail.len()) as u64;
        let mut text = String::from_utf8_lossy(head).into_owned();
        text.push_str(&format!("\n… {} bytes omitted …\n", thousands(omitted)));
        text.push_str(&String::from_utf8_lossy(tail));
        Captured {
            text,
            bytes: self.total,
            truncated: true,
        }
    }
}

fn is_continuation(b: u8) -> bool {
    b & 0b1100_0000 == 0b1000_0000
}

/// How long the UTF-8 sequence that `lead` starts is (1 for anything else).
fn sequence_len(lead: u8) -> usize {
    match lead {
        0xc0..=0xdf => 2,
        0xe0..=0xef => 3,
        0xf0..=0xf7 => 4,
        _ => 1,
    }
}

/// `bytes` without a character cut off at its end.
fn without_partial_end(bytes: &[u8]) -> &[u8] {
    let len = bytes.len();
    let mut start = len;
    while start > 0 && len - start < 4 {
        start -= 1;
        if !is_continuation(bytes[start]) {
            if sequence_len(bytes[start]) > len - start {
                return &bytes[..start];
            }
            break;
        }
    }
    bytes
}

/// `bytes` without the continuation of a character cut off at its start.
fn without_partial_start(bytes: &[u8]) -> &[u8] {
    let skip = bytes
        .iter()
        .take(3)
        .take_while(|&&b| is_continuation(b))
        .count();
    &bytes[skip..]
}

/// `983040` as `983,040`.
fn thousands(n: u64) -> String {
    let digits = n.to_string();
    let mut out = String::with_capacity(digits.len() + digits.len() / 3);
    for (i, c) in digits.chars().enumerate() {
        if i > 0 && (digits.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn captured(limit: usize, chunks: &[&[u8]]) -> Captured {
        let mut c = Capture::with_limit(limit);
        for chunk in chunks {
            c.push(chunk);
        }
        c.finish()
    }

    #[test]
    fn output_within_the_limit_is_kept_whole() {
        let got = captured(8, &[b"abc", b"defgh"]);
        assert_eq!(got.text, "abcdefgh");
        assert_eq!(got.bytes, 8);
        assert!(!got.truncated);
    }

    #[test]
    fn output_past_the_limit_keeps_its_first_and_last_half() {
        let got = captured(8, &[b"0123", b"456789", b"ab"]);
        assert_eq!(got.text, "0123\n… 4 bytes omitted …\n89ab");
        assert_eq!(got.bytes, 12);
        assert!(got.truncated);
        let got = captured(8, &[b"0123456789abcdef"]);
        assert_eq!(got.text, "0123\n… 8 bytes omitted …\ncdef");
    }

    #[test]
    fn cutting_never_splits_a_character() {
        // "é" is two bytes, "€" three: the head ends inside "é", the tail
        // starts inside "€".
        let text = "abcé----------€xyz";
        let got = captured(8, &[text.as_bytes()]);
        assert!(got.truncated);
        assert!(!got.text.contains('\u{fffd}'), "{:?}", got.text);
        assert!(got.text.starts_with("abc\n"), "{:?}", got.text);
        assert!(got.text.ends_with("\nxyz"), "{:?}", got.text);
        let omitted = text.len() - 6;
        assert!(got.text.contains(&format!("… {omitted} bytes omitted …")));
    }

    #[test]
    fn big_numbers_are_grouped_by_thousands() {
        assert_eq!(thousands(0), "0");
        assert_eq!(thousands(999), "999");
        assert_eq!(thousands(983_040), "983,040");
        assert_eq!(thousands(1_048_576), "1,048,576");
    }

    #[test]
    fn run_names_become_paths_below_logs_jobs() {
        assert_eq!(
            job_log_path("job/sless-0123456789abcdef/nightly"),
            PathBuf::from("logs/jobs/job/sless-0123456789abcdef/nightly.log")
        );
        assert_eq!(
            job_log_path("../../etc/pass wd"),
            PathBuf::from("logs/jobs/__/__/etc/pass_wd.log")
        );
        assert_eq!(job_log_path("//"), PathBuf::from("logs/jobs/_.log"));
    }
}
