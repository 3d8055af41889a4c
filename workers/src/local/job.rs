//! Jobs on the local driver: the runtime wrapper started in its `--job`
//! mode, the event handed to it as a file, its output captured
//! ([`crate::capture`]: the first and last part of each stream) and
//! appended whole to `logs/jobs/{run}.log`.
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

use super::launch::EVENT_FILE_ENV;
use super::{LocalDriver, build, pool, process, sandbox};
use crate::capture::Capture;
use crate::driver::{DeployRequest, DriverError, JobOutput, JobRequest};
use crate::logs::{Shipper, Source};
use sless_store::function_logs::{self, Stream};

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
            instances: 1,
        };
        let event = serde_json::to_vec(&req.event)
            .map_err(|e| DriverError::Infra(format!("cannot serialise the event: {e}")))?;
        // The input is a file: in a jail, one of its own (bwrap copies it
        // in); else a file of the data directory, removed after the run.
        let (event_mount, event_file) = match &self.jails {
            Some(_) => (
                vec![Mount::File {
                    dest: PathBuf::from(sandbox::JOB_EVENT),
                    contents: event.clone(),
                }],
                None,
            ),
            None => {
                let path = self
                    .cfg
                    .data_dir
                    .join("runs")
                    .join(format!("{}.json", uuid::Uuid::new_v4().simple()));
                let (p, bytes) = (path.clone(), event.clone());
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
        // CPU time: the run's timeout, as a limit of each process.
        let cpu_secs = req.timeout.as_secs().max(1) + 1;
        if let Some(jail) = spec.jail.as_mut() {
            jail.limits.cpu_secs = Some(cpu_secs);
        }
        let log_path = self.cfg.data_dir.join(job_log_path(&req.run));
        let log = tokio::task::spawn_blocking(move || open_log(&log_path))
            .await
            .map_err(|e| DriverError::Infra(format!("log task: {e}")))?
            .map_err(|e| DriverError::Infra(format!("cannot open the job log: {e}")))?;

        let started = Instant::now();
        let warm = match &self.jails {
            Some(_) => self.warm_for(&as_deploy).await,
            None => None,
        };
        // From the pool, the event goes on stdin, after the line.
        let to = pool::Specialisation {
            artifact_dir: &artifact_dir,
            spec: &spec,
            memory_mb: req.memory_mb,
            job: Some((&event, cpu_secs)),
        };
        let what = format!("run {}", req.run);
        let cold = async || process::spawn(&self.spawner, &spec, Stdio::null()).await;
        let spawned = pool::warm_or_cold(warm, to, &what, cold)
            .await
            .map(|(running, _)| running);
        let mut running = spawned.map_err(|e| {
            DriverError::Infra(format!(
                "cannot start {}: {e}",
                spec.program.to_string_lossy()
            ))
        })?;
        let pid = running.pid;
        // Dropping the run (cancellation) kills the whole group of a plain
        // process, not only the wrapper (which `kill_on_drop` covers).
        // A jail ends when its handle (in `running`) is dropped.
        let mut group = GroupGuard {
            pid,
            armed: running.jail.is_none(),
        };
        log.note(&format!(
            "[sless] run {} of version {} started (pid {pid})",
            req.run, req.version
        ));

        let stdout = running.child.stdout.take();
        let stderr = running.child.stderr.take();
        let mut out = Capture::default();
        let mut err = Capture::default();
        let source = Source {
            namespace: req.key.namespace.to_string(),
            function: req.key.name.to_string(),
            version: Some(req.version),
            instance: req.run.clone(),
            invocation: req.invocation,
        };
        let ship = |stream| Lines::new(self.cfg.logs.clone(), source.clone(), stream);
        let (mut out_lines, mut err_lines) = (ship(Stream::Stdout), ship(Stream::Stderr));
        let (status, timed_out) = {
            let io = async {
                tokio::join!(
                    read_stream(stdout, &mut out, &mut out_lines, &log),
                    read_stream(stderr, &mut err, &mut err_lines, &log)
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

async fn read_stream<R: AsyncRead + Unpin>(
    reader: Option<R>,
    capture: &mut Capture,
    lines: &mut Lines,
    log: &JobLog,
) {
    let Some(mut reader) = reader else { return };
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match reader.read(&mut buf).await {
            Ok(0) | Err(_) => break,
            Ok(n) => {
                log.write(&buf[..n]);
                capture.push(&buf[..n]);
                lines.push(&buf[..n]);
            }
        }
    }
    lines.finish();
}

/// A run's stream cut into lines for the function's log: each line as it
/// ends, one past [`function_logs::LINE_LIMIT`] cut there, and what is left
/// without an end when the stream ends.
struct Lines {
    ship: Option<(Shipper, Source)>,
    stream: Stream,
    partial: Vec<u8>,
    /// The line being read went past the limit: the rest of it is skipped.
    cut: bool,
}

impl Lines {
    fn new(shipper: Option<Shipper>, source: Source, stream: Stream) -> Lines {
        Lines {
            ship: shipper.map(|s| (s, source)),
            stream,
            partial: Vec::new(),
            cut: false,
        }
    }

    fn push(&mut self, mut bytes: &[u8]) {
        if self.ship.is_none() {
            return;
        }
        while !bytes.is_empty() {
            let end = bytes.iter().position(|b| *b == b'\n');
            let (piece, rest) = match end {
                Some(i) => (&bytes[..i], &bytes[i + 1..]),
                None => (bytes, &[][..]),
            };
            if !self.cut {
                let room = (function_logs::LINE_LIMIT + 64).saturating_sub(self.partial.len());
                self.partial
                    .extend_from_slice(&piece[..piece.len().min(room)]);
                if piece.len() > room {
                    self.cut = true;
                    self.send();
                }
            }
            if end.is_some() {
                if !self.cut {
                    self.send();
                }
                self.cut = false;
            }
            bytes = rest;
        }
    }

    fn finish(&mut self) {
        if !self.partial.is_empty() {
            self.send();
        }
    }

    fn send(&mut self) {
        if let Some((shipper, source)) = &self.ship {
            let text = String::from_utf8_lossy(&self.partial);
            shipper.push(source.line(self.stream, &text, self.cut));
        }
        self.partial.clear();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
