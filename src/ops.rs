//! Operations on a database: `sless replay` and `sless reconcile`.
//!
//! Both act on the database of `DATABASE_URL`, or with `--data-dir DIR` on
//! the private PostgreSQL of a `sless dev` instance: while the instance
//! runs, on its server (the port is in the cluster's `postmaster.pid`, the
//! password in `postgres/pg-password`); while it is stopped, on the cluster
//! started for the command and stopped after it.

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::{Duration, Instant};

use anyhow::Context;
use sless_api::rest::admin::{BoxFuture, Maintenance, MaintenanceError, ReplayView};
use sless_embedded::PrivatePostgres;
use sless_projector::replay::{self, Mode, Outcome, Progress};
use sless_store::PgPool;

use crate::{config, embedded};

/// The database an operation acts on.
pub struct Database {
    pub pool: PgPool,
    /// The cluster this command started, stopped by `close`.
    cluster: Option<PrivatePostgres>,
}

impl Database {
    /// Connects to the database of `data_dir`'s dev instance (started with
    /// `host`'s environment when it is stopped), or of `DATABASE_URL`
    /// without one.
    pub async fn open(data_dir: Option<&Path>, host: &config::Host) -> anyhow::Result<Database> {
        let Some(dir) = data_dir else {
            let database = config::Database::from_env();
            let pool = sless_store::connect(database.require()?, 4).await?;
            if !sless_store::migrations_current(&pool).await? {
                anyhow::bail!("the database's schema is behind this binary: run `sless migrate`");
            }
            return Ok(Database {
                pool,
                cluster: None,
            });
        };
        let dir = dir
            .canonicalize()
            .with_context(|| format!("no data directory {}", dir.display()))?;
        let (url, cluster) = match running_dev_postgres(&dir)? {
            Some(url) => {
                eprintln!("using the running instance's database ({})", dir.display());
                (url, None)
            }
            None => {
                if !dir.join("postgres").join("pgdata").is_dir() {
                    anyhow::bail!(
                        "{} holds no database of a `sless dev` instance",
                        dir.display()
                    );
                }
                eprintln!(
                    "starting the stopped instance's database ({}) for this command",
                    dir.display()
                );
                let pg_host = config::Dev::from_env().postgres_host(host);
                let pg = embedded::postgres(&dir, pg_host).await?;
                (pg.url("postgres"), Some(pg))
            }
        };
        let pool = sless_store::connect(&url, 4)
            .await
            .context("connecting to the instance's database")?;
        // What `sless dev` does when it starts.
        sless_store::migrate(&pool).await?;
        Ok(Database { pool, cluster })
    }

    /// Closes the pool, and stops the cluster if this command started it.
    pub async fn close(self) -> anyhow::Result<()> {
        self.pool.close().await;
        if let Some(pg) = self.cluster {
            pg.stop().await?;
        }
        Ok(())
    }
}

/// The URL of a dev instance's private PostgreSQL while it runs: its
/// `postmaster.pid` names a live process that is ready, and its port.
fn running_dev_postgres(dir: &Path) -> anyhow::Result<Option<String>> {
    let pg_dir: PathBuf = dir.join("postgres");
    let Ok(pid_file) = std::fs::read_to_string(pg_dir.join("pgdata").join("postmaster.pid")) else {
        return Ok(None);
    };
    let lines: Vec<&str> = pid_file.lines().map(str::trim).collect();
    let (Some(port), Some(socket_dir), Some(listen), Some(status)) = (
        lines.get(3).and_then(|p| p.parse::<u16>().ok()),
        lines.get(4),
        lines.get(5),
        lines.get(7),
    ) else {
        return Ok(None);
    };
    if *status != "ready" {
        return Ok(None);
    }
    // Whether it runs: whether it answers (the lock file's pid is the one
    // the server has in its sandbox, not ours; a crash leaves the file).
    let socket = listen.is_empty().then(|| PathBuf::from(socket_dir));
    let answers = match &socket {
        Some(dir) => {
            std::os::unix::net::UnixStream::connect(dir.join(format!(".s.PGSQL.{port}"))).is_ok()
        }
        None => std::net::TcpStream::connect(("127.0.0.1", port)).is_ok(),
    };
    if !answers {
        return Ok(None);
    }
    let password_file = pg_dir.join("pg-password");
    let password = std::fs::read_to_string(&password_file)
        .with_context(|| format!("reading {}", password_file.display()))?;
    Ok(Some(sless_embedded::postgres_url(
        password.trim(),
        port,
        socket.as_deref(),
        "postgres",
    )))
}

/// Who asked, as `replays` records it: the user `host` names.
fn operator(host: &config::Host) -> String {
    format!("cli:{}", host.user())
}

/// Prints progress to stderr, at most once a second.
fn progress_printer() -> impl FnMut(Progress) {
    let mut last: Option<(Instant, u64)> = None;
    move |p: Progress| {
        let recent = last.is_some_and(|(t, _)| t.elapsed() < Duration::from_secs(1));
        let again = last.is_some_and(|(_, applied)| applied == p.applied);
        if again || (recent && p.applied < p.total) {
            return;
        }
        last = Some((Instant::now(), p.applied));
        let percent = if p.total == 0 {
            100.0
        } else {
            100.0 * p.applied as f64 / p.total as f64
        };
        let eta = p
            .eta()
            .map(|d| format!("{:.0}s", d.as_secs_f64()))
            .unwrap_or_else(|| "-".into());
        eprintln!(
            "replay: {}/{} events ({percent:.0}%), {:.0} events/s, ETA {eta}",
            p.applied,
            p.total,
            p.events_per_sec()
        );
    }
}

/// `sless replay [--verify]`: exit 0 when every rebuilt read model equals
/// the live one, 1 when one differs (named; after a replay, the rebuilt
/// ones are live), 2 when the replay failed (nothing changed).
pub async fn replay(
    db: &Database,
    verify: bool,
    batch: i64,
    host: &config::Host,
) -> anyhow::Result<ExitCode> {
    let mode = if verify { Mode::Verify } else { Mode::Replay };
    let outcome = replay::Replay::begin(&db.pool, mode, &operator(host))
        .await?
        .batch(batch)
        .run(progress_printer())
        .await?;
    print_outcome(&outcome);
    Ok(if outcome.differing().is_empty() {
        ExitCode::SUCCESS
    } else {
        ExitCode::from(1)
    })
}

fn print_outcome(o: &Outcome) {
    let mut out = std::io::stdout().lock();
    let secs = o.elapsed.as_secs_f64();
    let _ = writeln!(
        out,
        "replayed {} events up to position {} in {secs:.1}s ({:.0} events/s)",
        o.applied,
        o.position,
        o.applied as f64 / secs.max(1e-9)
    );
    for m in &o.models {
        let verdict = if m.equal() {
            "equal".to_owned()
        } else {
            format!("DIFFERS: live {} ({} rows)", m.live, m.live_rows)
        };
        let _ = writeln!(
            out,
            "{:<18} {} {:>8} rows  {verdict}",
            m.table, m.rebuilt, m.rebuilt_rows
        );
    }
    let differing = o.differing();
    let _ = match (o.swapped, differing.is_empty()) {
        (true, true) => writeln!(
            out,
            "the rebuilt read models are live now; they equal the old ones"
        ),
        (true, false) => writeln!(
            out,
            "the rebuilt read models are live now; these differed from the old ones: {}",
            differing.join(", ")
        ),
        (false, true) => writeln!(out, "verified: every read model equals its rebuild"),
        (false, false) => writeln!(
            out,
            "these read models differ from their rebuild: {} (run `sless replay` to replace them)",
            differing.join(", ")
        ),
    };
}

/// `sless reconcile`: enqueues a reconcile of every function the log knows.
pub async fn reconcile(db: &Database) -> anyhow::Result<()> {
    let n = sless_store::queue::enqueue_reconcile_all(&db.pool).await?;
    println!("enqueued a reconcile for {n} functions");
    Ok(())
}

/// The admin API's replays, run by the projector's replay in this process.
pub struct ReplayMaintenance {
    pub pool: PgPool,
}

fn maintenance_error(e: sless_projector::Error) -> MaintenanceError {
    match e {
        sless_projector::Error::ReplayRunning { .. } => MaintenanceError::Running(e.to_string()),
        sless_projector::Error::Db(ref db) if sless_store::is_unavailable(db) => {
            MaintenanceError::Unavailable(e.to_string())
        }
        sless_projector::Error::Store(ref s) if s.is_unavailable() => {
            MaintenanceError::Unavailable(e.to_string())
        }
        e => MaintenanceError::Failed(e.to_string()),
    }
}

fn replay_view(r: replay::Run) -> ReplayView {
    let time =
        |t: chrono::DateTime<chrono::Utc>| t.to_rfc3339_opts(chrono::SecondsFormat::Millis, true);
    ReplayView {
        id: r.id,
        mode: r.mode,
        state: r.state,
        requested_by: r.requested_by,
        started_at: time(r.started_at),
        finished_at: r.finished_at.map(time),
        applied: r.applied,
        total: r.total,
        position: r.position,
        checksums: r.checksums,
        error: r.error,
    }
}

impl Maintenance for ReplayMaintenance {
    fn start_replay(
        &self,
        verify: bool,
        requested_by: String,
    ) -> BoxFuture<'_, Result<ReplayView, MaintenanceError>> {
        Box::pin(async move {
            let mode = if verify { Mode::Verify } else { Mode::Replay };
            let by = format!("api:{requested_by}");
            let (id, run) = replay::start(&self.pool, mode, &by)
                .await
                .map_err(maintenance_error)?;
            tokio::spawn(async move {
                match run.await {
                    Ok(o) => tracing::info!(
                        id,
                        applied = o.applied,
                        differing = ?o.differing(),
                        swapped = o.swapped,
                        "replay ended"
                    ),
                    Err(e) => tracing::warn!(id, error = %e, "replay failed"),
                }
            });
            replay::last(&self.pool)
                .await
                .map_err(maintenance_error)?
                .map(replay_view)
                .ok_or_else(|| MaintenanceError::Failed("the replay's record is missing".into()))
        })
    }

    fn last_replay(&self) -> BoxFuture<'_, Result<Option<ReplayView>, MaintenanceError>> {
        Box::pin(async move {
            Ok(replay::last(&self.pool)
                .await
                .map_err(maintenance_error)?
                .map(replay_view))
        })
    }
}
