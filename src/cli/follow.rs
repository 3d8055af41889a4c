//! Following a change of a function to its end: the phases a version goes
//! through (queued, building with its build log, deploying, Ready), read
//! from the audit log's stream and the build log's stream as they are
//! written — no polling. On a terminal the phases are one live block that
//! is drawn again as they change; otherwise each phase and each build-log
//! line is one plain line as it happens.

use std::io::Write;
use std::time::{Duration, Instant};

use serde::Serialize;
use sless_client::{BuildLogEvent, Client, EventStream, rollout};
use tokio::sync::mpsc;

use super::output::{Failure, Out};

/// Build-log lines shown under "building" in the live block.
const LOG_LINES_SHOWN: usize = 6;
/// Lines of the build log printed with a failure.
const LOG_TAIL_ON_FAILURE: usize = 30;

/// The steps of a change, in order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Step {
    Uploaded,
    Queued,
    Building,
    Deploying,
    Ready,
}

impl Step {
    fn name(self) -> &'static str {
        match self {
            Step::Uploaded => "uploaded",
            Step::Queued => "queued",
            Step::Building => "building",
            Step::Deploying => "deploying",
            Step::Ready => "Ready",
        }
    }
}

/// How a followed change ended, for `-o json`.
#[derive(Debug, Serialize)]
pub struct Followed {
    pub version: u32,
    /// Seconds from the start to the end of each step reached.
    pub steps: Vec<(Step, f64)>,
    pub seconds: f64,
}

/// What is being followed.
pub struct Watch<'a> {
    pub client: &'a Client,
    pub out: &'a Out,
    pub name: &'a str,
    pub version: u32,
    /// Whether a build is expected (an upload, a runtime change), so the
    /// build log is followed.
    pub builds: bool,
    pub started: Instant,
    pub timeout: Duration,
    /// The first line of the block: what was done (`uploaded version 3`).
    pub headline: String,
}

/// Where a change is.
struct State {
    step: Step,
    /// When each step was entered.
    entered: Vec<(Step, Instant)>,
    log: Vec<String>,
    /// Lines of the live block last drawn.
    drawn: usize,
}

impl Watch<'_> {
    /// Follows the change until its version is Ready (`Ok`) or failed
    /// (`Err` with exit code 1, the error and the build log's tail).
    /// `tail` must have been opened before the change was made.
    pub async fn run(&self, mut tail: EventStream) -> Result<Followed, Failure> {
        let mut state = State {
            step: Step::Uploaded,
            entered: vec![(Step::Uploaded, self.started)],
            log: Vec::new(),
            drawn: 0,
        };
        let (lines_tx, mut lines) = mpsc::unbounded_channel();
        if self.builds {
            let client = self.client.clone();
            let (name, version) = (self.name.to_owned(), self.version);
            tokio::spawn(async move {
                // The server holds the stream until the build starts.
                let Ok(mut stream) = client.follow_build_log(&name, version).await else {
                    return;
                };
                while let Some(Ok(BuildLogEvent::Line(line))) = stream.next().await {
                    if lines_tx.send(line).is_err() {
                        return;
                    }
                }
            });
        } else {
            drop(lines_tx);
        }
        self.enter(&mut state, Step::Queued);
        let deadline = tokio::time::Instant::from_std(self.started + self.timeout);
        let mut ticker = tokio::time::interval(Duration::from_millis(100));
        let mut log_open = self.builds;
        loop {
            tokio::select! {
                event = tail.next() => {
                    let event = match event {
                        Some(Ok(e)) => e,
                        Some(Err(e)) => return Err(e.into()),
                        None => return Err(Failure::new(
                            super::output::code::SERVER,
                            "the API ended the audit log's stream",
                        )),
                    };
                    match rollout::Step::of(&event, self.version) {
                        Some(rollout::Step::Building) => self.enter(&mut state, Step::Building),
                        Some(rollout::Step::Deploying) => self.enter(&mut state, Step::Deploying),
                        Some(rollout::Step::Ready) => {
                            self.enter(&mut state, Step::Ready);
                            return Ok(self.followed(&state));
                        }
                        Some(rollout::Step::Failed { stage, error, log_tail }) => {
                            self.clear(&mut state);
                            let stage = stage.unwrap_or(rollout::Stage::Build);
                            return Err(self.failure(&state, stage, error, log_tail).await);
                        }
                        Some(rollout::Step::Deleted) => {
                            self.clear(&mut state);
                            return Err(Failure::failed(format!("{} was deleted", self.name)));
                        }
                        None => {}
                    }
                }
                line = lines.recv(), if log_open => match line {
                    Some(line) => self.log_line(&mut state, line),
                    None => log_open = false,
                },
                _ = ticker.tick(), if self.out.terminal && !self.out.quiet => self.draw(&mut state),
                _ = tokio::time::sleep_until(deadline) => {
                    self.clear(&mut state);
                    return Err(Failure::failed(format!(
                        "timed out after {} s while {} version {} of {} (it goes on; \
                         see `sless get {}` and `sless build-log {} --follow`)",
                        self.timeout.as_secs(),
                        state.step.name(),
                        self.version,
                        self.name,
                        self.name,
                        self.name,
                    )));
                }
            }
        }
    }

    fn followed(&self, state: &State) -> Followed {
        let mut steps = Vec::new();
        for (i, (step, _)) in state.entered.iter().enumerate() {
            let end = state
                .entered
                .get(i + 1)
                .map(|(_, at)| *at)
                .unwrap_or_else(Instant::now);
            steps.push((*step, secs(end - self.started)));
        }
        Followed {
            version: self.version,
            steps,
            seconds: secs(self.started.elapsed()),
        }
    }

    fn enter(&self, state: &mut State, step: Step) {
        if step <= state.step && step != Step::Queued {
            return;
        }
        state.step = step;
        state.entered.push((step, Instant::now()));
        if self.out.quiet || self.out.json() {
            return;
        }
        if self.out.terminal {
            self.draw(state);
        } else if step == Step::Ready {
            println!(
                "{} version {} is Ready ({:.1} s)",
                self.name,
                self.version,
                secs(self.started.elapsed())
            );
        } else {
            let headline = if step == Step::Queued {
                format!("{}; ", self.headline)
            } else {
                String::new()
            };
            println!("{headline}{}", step.name());
        }
    }

    fn log_line(&self, state: &mut State, line: String) {
        if !self.out.quiet && !self.out.json() && !self.out.terminal {
            println!("  | {line}");
            let _ = std::io::stdout().flush();
        }
        state.log.push(line);
        if self.out.terminal && !self.out.quiet {
            self.draw(state);
        }
    }

    /// Draws the live block again, over the last one.
    fn draw(&self, state: &mut State) {
        let mut block = vec![self.headline.clone()];
        let now = Instant::now();
        for (i, (step, at)) in state.entered.iter().enumerate() {
            let end = state.entered.get(i + 1).map(|(_, t)| *t).unwrap_or(now);
            let current = i + 1 == state.entered.len() && *step != Step::Ready;
            let mark = if current {
                self.out.paint("33", "…")
            } else {
                self.out.paint("32", "✓")
            };
            block.push(format!(
                "  {mark} {:<10} {:>6.1} s",
                step.name(),
                secs(end - *at)
            ));
            if *step == Step::Building && current {
                let from = state.log.len().saturating_sub(LOG_LINES_SHOWN);
                for line in &state.log[from..] {
                    let line: String = line.chars().take(100).collect();
                    block.push(self.out.paint("2", &format!("      {line}")));
                }
            }
        }
        let mut stdout = std::io::stdout().lock();
        if state.drawn > 0 {
            let _ = write!(stdout, "\x1b[{}F\x1b[J", state.drawn);
        }
        for line in &block {
            let _ = writeln!(stdout, "{line}");
        }
        let _ = stdout.flush();
        state.drawn = block.len();
    }

    /// Leaves the last drawing on screen, stopping the redraws.
    fn clear(&self, state: &mut State) {
        if self.out.terminal && !self.out.quiet {
            self.draw(state);
        }
        state.drawn = 0;
    }

    /// The failure of a build or deploy: its error, then the tail of its
    /// log (the event's, else the stored build log's).
    async fn failure(
        &self,
        state: &State,
        stage: rollout::Stage,
        error: String,
        tail: String,
    ) -> Failure {
        let what = stage.as_str();
        let mut failure = Failure::failed(format!(
            "the {what} of {} version {} failed: {error}",
            self.name, self.version
        ));
        let mut lines: Vec<String> = tail.lines().map(str::to_owned).collect();
        if lines.is_empty() && what == "build" {
            lines = match self.client.get_build_log(self.name, self.version).await {
                Ok(log) => log.lines().map(str::to_owned).collect(),
                Err(_) => state.log.clone(),
            };
        }
        let from = lines.len().saturating_sub(LOG_TAIL_ON_FAILURE);
        if from < lines.len() {
            failure.more.push(format!("the {what} log's last lines:"));
            failure
                .more
                .extend(lines[from..].iter().map(|l| format!("  {l}")));
        }
        failure
    }
}

pub fn secs(d: Duration) -> f64 {
    (d.as_secs_f64() * 1000.0).round() / 1000.0
}
