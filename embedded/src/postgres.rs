//! The private PostgreSQL cluster.

use std::ffi::OsStr;
use std::fmt;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::unix::fs::{DirBuilderExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::Stdio;
use std::time::Duration;

use crate::error::{EmbeddedError, IoContext, Result};
use crate::process::{Keeper, Launch, PgBinaries, PostgresHost, RunAs};
use crate::random_secret;

/// The superuser created by `initdb` and used in [`PrivatePostgres::url`].
const SUPERUSER: &str = "sless";
/// How long `start` waits for the server to accept connections.
const READY_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `stop` waits after SIGINT before SIGKILL.
const STOP_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `Drop` waits after SIGINT before SIGKILL.
const DROP_TIMEOUT: Duration = Duration::from_secs(10);
/// Interval between readiness checks.
const READY_POLL: Duration = Duration::from_millis(50);
/// Number of log lines included in startup errors.
const LOG_TAIL_LINES: usize = 30;
/// Attempts with a freshly picked port when the picked port was taken meanwhile.
const PORT_ATTEMPTS: usize = 3;

/// Where and how to run a [`PrivatePostgres`].
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Directory owned by the cluster: the cluster itself lives in
    /// `data_dir/pgdata`, the Unix sockets in `data_dir/pgsock`, the server log
    /// in `data_dir/postgres.log` and the superuser password in
    /// `data_dir/pg-password`. Created if missing.
    pub data_dir: PathBuf,
    /// TCP port on 127.0.0.1; `None` picks a free one.
    pub port: Option<u16>,
    /// Extra server settings, passed as `-c name=value` after (and so
    /// overriding) the built-in ones.
    pub settings: Vec<(String, String)>,
    /// Listen on the Unix socket in `data_dir/pgsock` only, not on TCP: no
    /// port of it is reachable for anyone who cannot reach that directory
    /// (a sandboxed function). The port still names the socket file. Falls
    /// back to TCP when the socket's path is too long for one.
    pub socket_only: bool,
}

impl PostgresOptions {
    /// Options for a cluster in `data_dir` on a free port with no extra settings.
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        Self {
            data_dir: data_dir.into(),
            port: None,
            settings: Vec::new(),
            socket_only: false,
        }
    }
}

/// A running private PostgreSQL cluster, listening on 127.0.0.1 only.
///
/// The server binaries (`initdb`, `postgres`) are taken from
/// [`PostgresHost::bin_dir`] if set, else from the highest-versioned
/// `/usr/lib/postgresql/*/bin`, else from the `PATH` the host names.
///
/// The postmaster is tied to this process: it gets SIGINT (fast shutdown) when
/// [`stop`](Self::stop) is called, when this value is dropped, and — through
/// the parent-death signal — when the process dies, even by SIGKILL.
pub struct PrivatePostgres {
    port: u16,
    /// The socket directory, when the server listens there only.
    socket: Option<PathBuf>,
    password: String,
    keeper: Option<Keeper>,
    /// Where the cluster lives, and the extra settings it was started with,
    /// for [`start_again`](Self::start_again).
    data_dir: PathBuf,
    settings: Vec<(String, String)>,
    host: PostgresHost,
}

impl fmt::Debug for PrivatePostgres {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PrivatePostgres")
            .field("port", &self.port)
            .field("pid", &self.keeper.as_ref().map(Keeper::pid))
            .finish_non_exhaustive()
    }
}

/// Everything `start` needs once the cluster exists.
struct Prepared {
    bins: PgBinaries,
    run_as: RunAs,
    data_dir: PathBuf,
    pgdata: PathBuf,
    pgsock: PathBuf,
    log: PathBuf,
    password: String,
}

impl PrivatePostgres {
    /// Starts the cluster in `opts.data_dir`, creating it with `initdb` on
    /// first use, and waits (up to 30 s) until it accepts connections.
    ///
    /// The first start generates the superuser password with
    /// [`random_secret`](crate::random_secret) and keeps it in
    /// `data_dir/pg-password` (mode 0600); later starts reuse the cluster, its
    /// data and that password. When running as root, the server runs as the
    /// `postgres` user (or `nobody`), since PostgreSQL refuses root.
    ///
    /// Nothing of the host is passed on: the binaries are looked for in
    /// `/usr/lib/postgresql/*/bin` only. [`start_with`](Self::start_with)
    /// takes where to look and the environment to run them in.
    pub async fn start(opts: PostgresOptions) -> Result<PrivatePostgres> {
        PrivatePostgres::start_with(opts, PostgresHost::default()).await
    }

    /// [`start`](Self::start), with the server programs found and run as
    /// `host` says.
    pub async fn start_with(opts: PostgresOptions, host: PostgresHost) -> Result<PrivatePostgres> {
        let settings = opts.settings.clone();
        let fixed_port = opts.port;
        let wants_socket = opts.socket_only;
        let prepared = {
            let host = host.clone();
            blocking(move || prepare(&opts, &host)).await?
        };
        let socket =
            (wants_socket && socket_fits(&prepared.pgsock)).then(|| prepared.pgsock.clone());
        if wants_socket && socket.is_none() {
            tracing::warn!(dir = %prepared.pgsock.display(), "the socket's path is too long; PostgreSQL listens on TCP on 127.0.0.1");
        }
        let mut attempt = 0;
        loop {
            attempt += 1;
            let port = match fixed_port {
                Some(port) => port,
                None => free_port()?,
            };
            let log_offset = std::fs::metadata(&prepared.log).map_or(0, |m| m.len());
            let command = postgres_command(&prepared, port, &settings, socket.is_some())?;
            let keeper = blocking(move || Keeper::spawn(command, "sless-postgres")).await?;
            let pid = keeper.pid();
            tracing::debug!(pid, port, "postmaster spawned");
            // From here on, dropping `server` (also when this future is
            // cancelled) shuts the postmaster down.
            let server = PrivatePostgres {
                port,
                socket: socket.clone(),
                password: prepared.password.clone(),
                keeper: Some(keeper),
                data_dir: prepared.data_dir.clone(),
                settings: settings.clone(),
                host: host.clone(),
            };
            let Some(keeper) = server.keeper.as_ref() else {
                unreachable!("keeper was just set")
            };
            let Err(err) = wait_ready(&prepared, keeper, port, socket.is_some(), log_offset).await
            else {
                tracing::info!(port, pid, data_dir = %prepared.data_dir.display(), "private PostgreSQL is ready");
                return Ok(server);
            };
            blocking(move || {
                drop(server);
                Ok(())
            })
            .await?;
            let port_taken = matches!(&err, EmbeddedError::ExitedDuringStartup { tail, .. }
                if tail.contains("could not bind") || tail.contains("Address already in use"));
            if fixed_port.is_none() && port_taken && attempt < PORT_ATTEMPTS {
                tracing::warn!(port, "picked port was taken; retrying with another one");
                continue;
            }
            return Err(err);
        }
    }

    /// The TCP port the server listens on (on 127.0.0.1).
    pub fn port(&self) -> u16 {
        self.port
    }

    /// The postmaster's process id (as this process sees pids; under root
    /// the server runs in a sandbox, and its `postmaster.pid` holds the
    /// pid it has there).
    pub fn pid(&self) -> Option<u32> {
        self.keeper.as_ref().map(Keeper::pid)
    }

    /// Connection URL for `database` as the superuser:
    /// `postgres://sless:<password>@127.0.0.1:<port>/<database>`, or with
    /// the socket only, `...@localhost:<port>/<database>?host=<socket dir>`.
    pub fn url(&self, database: &str) -> String {
        url(&self.password, self.port, self.socket.as_deref(), database)
    }

    /// Shuts the server down: SIGINT to the postmaster (fast shutdown: open
    /// sessions are terminated, data is checkpointed), waiting up to 30 s for
    /// it to exit, then SIGKILL.
    ///
    /// Returns [`EmbeddedError::ShutdownTimedOut`] if SIGKILL was needed.
    pub async fn stop(mut self) -> Result<()> {
        let Some(keeper) = self.keeper.take() else {
            return Ok(());
        };
        if let Some(status) = keeper.exit_status() {
            tracing::warn!(%status, "private PostgreSQL had already exited");
            return Ok(());
        }
        let clean = blocking(move || Ok(keeper.shutdown_blocking(STOP_TIMEOUT))).await?;
        if clean {
            tracing::info!(port = self.port, "private PostgreSQL stopped");
            Ok(())
        } else {
            Err(EmbeddedError::ShutdownTimedOut {
                seconds: STOP_TIMEOUT.as_secs(),
            })
        }
    }
}

impl PrivatePostgres {
    /// Crashes the server the way `pg_ctl stop -m immediate` does: SIGQUIT to
    /// the postmaster, which ends every session at once, with no shutdown
    /// checkpoint, so the next start runs crash recovery from the WAL. Waits
    /// up to 30 s for it to exit (then SIGKILL). For fault tests; see
    /// [`start_again`](Self::start_again).
    pub async fn crash(&mut self) -> Result<()> {
        let Some(keeper) = self.keeper.take() else {
            return Ok(());
        };
        let exited = blocking(move || {
            keeper.signal(libc::SIGQUIT);
            if keeper.wait_timeout(STOP_TIMEOUT).is_some() {
                return Ok(true);
            }
            keeper.signal(libc::SIGKILL);
            keeper.wait_timeout(Duration::from_secs(5));
            Ok(false)
        })
        .await?;
        tracing::warn!(port = self.port, "private PostgreSQL crashed on purpose");
        if exited {
            Ok(())
        } else {
            Err(EmbeddedError::ShutdownTimedOut {
                seconds: STOP_TIMEOUT.as_secs(),
            })
        }
    }

    /// Starts the server again after [`crash`](Self::crash) (or after it
    /// died), on the same port, data directory and settings, and waits until
    /// it accepts connections. Does nothing while it is running.
    pub async fn start_again(&mut self) -> Result<()> {
        if self
            .keeper
            .as_ref()
            .is_some_and(|k| k.exit_status().is_none())
        {
            return Ok(());
        }
        let mut again = PrivatePostgres::start_with(
            PostgresOptions {
                data_dir: self.data_dir.clone(),
                port: Some(self.port),
                settings: self.settings.clone(),
                socket_only: self.socket.is_some(),
            },
            self.host.clone(),
        )
        .await?;
        self.keeper = again.keeper.take();
        Ok(())
    }
}

impl Drop for PrivatePostgres {
    /// Stops a still-running server synchronously: SIGINT, up to 10 s of
    /// waiting, then SIGKILL.
    fn drop(&mut self) {
        if let Some(keeper) = self.keeper.take()
            && !keeper.shutdown_blocking(DROP_TIMEOUT)
        {
            tracing::warn!(
                port = self.port,
                "private PostgreSQL ignored SIGINT and was killed"
            );
        }
    }
}

/// Runs blocking work off the async worker threads.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T> + Send + 'static) -> Result<T> {
    match tokio::task::spawn_blocking(f).await {
        Ok(result) => result,
        Err(err) => match err.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            Err(err) => Err(EmbeddedError::io(
                "running a blocking task",
                std::io::Error::other(err),
            )),
        },
    }
}

/// Finds the binaries, lays out the data directory and runs `initdb` if the
/// cluster does not exist yet.
fn prepare(opts: &PostgresOptions, host: &PostgresHost) -> Result<Prepared> {
    let bins = PgBinaries::locate(host)?;
    std::fs::create_dir_all(&opts.data_dir)
        .context(|| format!("creating {}", opts.data_dir.display()))?;
    let data_dir = opts
        .data_dir
        .canonicalize()
        .context(|| format!("resolving {}", opts.data_dir.display()))?;
    let pgdata = data_dir.join("pgdata");
    let pgsock = data_dir.join("pgsock");
    let log = data_dir.join("postgres.log");
    let password_file = data_dir.join("pg-password");

    let run_as = RunAs::for_cluster(&pgdata, host)?;

    let password = if pgdata.join("PG_VERSION").is_file() {
        let password = std::fs::read_to_string(&password_file)
            .map(|p| p.trim().to_owned())
            .unwrap_or_default();
        if password.is_empty() {
            return Err(EmbeddedError::MissingPassword {
                pgdata,
                password_file,
            });
        }
        password
    } else {
        let password = random_secret();
        write_private(&password_file, &password)?;
        init_cluster(&bins, &run_as, &data_dir, &pgdata, &password)?;
        password
    };

    make_private_dir(&pgsock, &run_as)?;
    if !run_as.switch {
        // In a sandbox the lock file's pid is not the host's, and its init
        // reaps the postmaster.
        clear_zombie_lock(&pgdata);
    }
    Ok(Prepared {
        bins,
        run_as,
        data_dir,
        pgdata,
        pgsock,
        log,
        password,
    })
}

/// Creates the cluster with `initdb` (run as `run_as`).
fn init_cluster(
    bins: &PgBinaries,
    run_as: &RunAs,
    data_dir: &Path,
    pgdata: &Path,
    password: &str,
) -> Result<()> {
    if pgdata.exists() {
        // A directory without PG_VERSION is the leftover of an interrupted initdb.
        tracing::warn!(path = %pgdata.display(), "removing incomplete PostgreSQL cluster");
        std::fs::remove_dir_all(pgdata).context(|| format!("removing {}", pgdata.display()))?;
    }
    make_private_dir(pgdata, run_as)?;
    tracing::info!(path = %pgdata.display(), user = %run_as.name, "creating PostgreSQL cluster");

    // initdb reads the password from a file it must be able to open as `run_as`.
    let pwfile = data_dir.join(".initdb-pwfile");
    write_private(&pwfile, password)?;
    let output = run_as.chown(&pwfile).and_then(|()| {
        let pwfile_arg = format!("--pwfile={}", pwfile.display());
        let args: Vec<&OsStr> = [
            OsStr::new("-D"),
            pgdata.as_os_str(),
            OsStr::new("-U"),
            OsStr::new(SUPERUSER),
            OsStr::new("--auth=scram-sha-256"),
            OsStr::new("-E"),
            OsStr::new("UTF8"),
            OsStr::new("--locale=C"),
            OsStr::new(&pwfile_arg),
        ]
        .into();
        let mut launch = run_as.command(&bins.initdb, &args, data_dir, data_dir)?;
        launch.command.stdin(Stdio::null());
        launch
            .output()
            .context(|| format!("running {}", bins.initdb.display()))
    });
    let _ = std::fs::remove_file(&pwfile);
    let output = output?;
    if !output.status.success() {
        let mut text = String::from_utf8_lossy(&output.stdout).into_owned();
        text.push_str(&String::from_utf8_lossy(&output.stderr));
        return Err(EmbeddedError::InitDb {
            pgdata: pgdata.to_path_buf(),
            status: output.status.to_string(),
            output: text,
        });
    }
    Ok(())
}

/// Creates `dir` (mode 0700) if needed and hands it to `run_as`.
fn make_private_dir(dir: &Path, run_as: &RunAs) -> Result<()> {
    if !dir.is_dir() {
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(dir)
            .context(|| format!("creating {}", dir.display()))?;
    }
    run_as.chown(dir)
}

/// Writes `contents` to `path`, readable by its owner only.
fn write_private(path: &Path, contents: &str) -> Result<()> {
    let ctx = || format!("writing {}", path.display());
    let mut file = OpenOptions::new()
        .write(true)
        .create(true)
        .truncate(true)
        .mode(0o600)
        .open(path)
        .context(ctx)?;
    file.set_permissions(std::fs::Permissions::from_mode(0o600))
        .context(ctx)?;
    file.write_all(contents.as_bytes()).context(ctx)?;
    file.sync_all().context(ctx)
}

/// Removes a `postmaster.pid` whose process is a zombie.
///
/// PostgreSQL itself ignores a lock file whose process is gone, but it treats
/// a zombie (a killed postmaster nobody reaped, e.g. under an init that does
/// not reap orphans) as alive and refuses to start. A zombie holds no
/// resources, so its lock file is stale.
fn clear_zombie_lock(pgdata: &Path) {
    let lock = pgdata.join("postmaster.pid");
    let Ok(contents) = std::fs::read_to_string(&lock) else {
        return;
    };
    let Some(pid) = contents
        .lines()
        .next()
        .and_then(|l| l.trim().parse::<u32>().ok())
    else {
        return;
    };
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    if state == Some("Z") {
        tracing::warn!(pid, "removing postmaster.pid of a dead (zombie) postmaster");
        let _ = std::fs::remove_file(&lock);
    }
}

/// Picks a currently free TCP port on 127.0.0.1.
fn free_port() -> Result<u16> {
    let listener = std::net::TcpListener::bind(("127.0.0.1", 0))
        .context(|| "picking a free port on 127.0.0.1".into())?;
    Ok(listener
        .local_addr()
        .context(|| "picking a free port on 127.0.0.1".into())?
        .port())
}

/// The connection URL of a cluster (see [`PrivatePostgres::url`]).
pub fn url(password: &str, port: u16, socket: Option<&Path>, database: &str) -> String {
    match socket {
        None => format!("postgres://{SUPERUSER}:{password}@127.0.0.1:{port}/{database}"),
        Some(dir) => {
            let mut host = String::new();
            for b in dir.as_os_str().as_encoded_bytes() {
                if b.is_ascii_alphanumeric() || b"/-_.~".contains(b) {
                    host.push(char::from(*b));
                } else {
                    host.push_str(&format!("%{b:02X}"));
                }
            }
            format!("postgres://{SUPERUSER}:{password}@localhost:{port}/{database}?host={host}")
        }
    }
}

/// True when a socket in `dir` (`.s.PGSQL.{port}`) fits a sockaddr_un:
/// 108 bytes with the NUL.
fn socket_fits(dir: &Path) -> bool {
    dir.as_os_str().len() + 17 < 108
}

/// Builds the postmaster command line; output is appended to the log.
/// Without a socket directory short enough, the server makes no socket
/// (PostgreSQL gives up when it can make none of those it is told to).
fn postgres_command(
    p: &Prepared,
    port: u16,
    settings: &[(String, String)],
    socket_only: bool,
) -> Result<Launch> {
    let log = OpenOptions::new()
        .create(true)
        .append(true)
        .mode(0o600)
        .open(&p.log)
        .context(|| format!("opening {}", p.log.display()))?;
    let log_err = log
        .try_clone()
        .context(|| format!("opening {}", p.log.display()))?;
    let mut args: Vec<String> = vec![
        "-D".to_owned(),
        p.pgdata.to_string_lossy().into_owned(),
        "-p".to_owned(),
        port.to_string(),
    ];
    let builtin = [
        format!(
            "listen_addresses={}",
            if socket_only { "" } else { "127.0.0.1" }
        ),
        if socket_fits(&p.pgsock) {
            format!("unix_socket_directories=\"{}\"", p.pgsock.display())
        } else {
            "unix_socket_directories=".to_owned()
        },
        "max_connections=300".to_owned(),
        "idle_in_transaction_session_timeout=60s".to_owned(),
    ];
    let extra = settings
        .iter()
        .map(|(name, value)| format!("{name}={value}"));
    for setting in builtin.into_iter().chain(extra) {
        args.push("-c".to_owned());
        args.push(setting);
    }
    let args: Vec<&OsStr> = args.iter().map(OsStr::new).collect();
    let mut launch = p
        .run_as
        .command(&p.bins.postgres, &args, &p.data_dir, &p.data_dir)?;
    launch
        .command
        .stdin(Stdio::null())
        .stdout(log)
        .stderr(log_err);
    Ok(launch)
}

/// Waits until the postmaster we spawned reports "ready" in its
/// `postmaster.pid` and accepts a TCP connection.
async fn wait_ready(
    p: &Prepared,
    keeper: &Keeper,
    port: u16,
    socket_only: bool,
    log_offset: u64,
) -> Result<()> {
    let deadline = tokio::time::Instant::now() + READY_TIMEOUT;
    loop {
        if let Some(status) = keeper.exit_status() {
            return Err(EmbeddedError::ExitedDuringStartup {
                status,
                log: p.log.clone(),
                tail: log_tail(&p.log, log_offset),
            });
        }
        let accepts = if socket_only {
            tokio::net::UnixStream::connect(p.pgsock.join(format!(".s.PGSQL.{port}")))
                .await
                .is_ok()
        } else {
            tokio::net::TcpStream::connect(("127.0.0.1", port))
                .await
                .is_ok()
        };
        if reports_ready(&p.pgdata, keeper.pid()) && accepts {
            return Ok(());
        }
        if tokio::time::Instant::now() >= deadline {
            return Err(EmbeddedError::NotReady {
                seconds: READY_TIMEOUT.as_secs(),
                log: p.log.clone(),
                tail: log_tail(&p.log, log_offset),
            });
        }
        tokio::time::sleep(READY_POLL).await;
    }
}

/// Whether `pgdata/postmaster.pid` belongs to the postmaster `pid` and its
/// status line (the 8th) says "ready". A stale file from an earlier run has
/// another pid. The file holds the pid the postmaster sees, which in a
/// sandbox (a PID namespace of its own) is not the host's.
fn reports_ready(pgdata: &Path, pid: u32) -> bool {
    let Ok(contents) = std::fs::read_to_string(pgdata.join("postmaster.pid")) else {
        return false;
    };
    let lines: Vec<&str> = contents.lines().collect();
    lines
        .first()
        .is_some_and(|l| l.trim() == own_pid(pid).to_string())
        && lines.get(7).is_some_and(|l| l.trim() == "ready")
}

/// The pid process `pid` has in its own PID namespace (the last of its
/// `NSpid`).
fn own_pid(pid: u32) -> u32 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find_map(|l| l.strip_prefix("NSpid:"))
                .and_then(|l| l.split_whitespace().last())
                .and_then(|p| p.parse().ok())
        })
        .unwrap_or(pid)
}

/// The last lines the server wrote to `log` since `offset`.
fn log_tail(log: &Path, offset: u64) -> String {
    let mut bytes = Vec::new();
    let read = File::open(log).and_then(|mut f| {
        f.seek(SeekFrom::Start(offset))?;
        f.read_to_end(&mut bytes)
    });
    if let Err(e) = read {
        return format!("(could not read the log: {e})");
    }
    let text = String::from_utf8_lossy(&bytes);
    let lines: Vec<&str> = text.lines().collect();
    let tail = lines[lines.len().saturating_sub(LOG_TAIL_LINES)..].join("\n");
    if tail.is_empty() {
        "(the log is empty)".to_owned()
    } else {
        tail
    }
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;

    use sqlx::Connection;

    use super::*;

    #[tokio::test]
    async fn a_crashed_cluster_starts_again_on_its_port_with_its_committed_data() {
        let dir = tempfile::Builder::new()
            .prefix("sless-embedded-crash-")
            .tempdir()
            .unwrap();
        // Private to root, as `mktemp -d` makes it: the server (an
        // unprivileged user under root) reaches only its own directory.
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
        let mut pg = PrivatePostgres::start(PostgresOptions::new(dir.path().join("data")))
            .await
            .unwrap();
        let url = pg.url("postgres");
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        sqlx::query("create table kept (v int)")
            .execute(&mut conn)
            .await
            .unwrap();
        sqlx::query("insert into kept values (42)")
            .execute(&mut conn)
            .await
            .unwrap();

        pg.crash().await.unwrap();
        assert!(
            sqlx::query("select 1").execute(&mut conn).await.is_err(),
            "the open session died with the server"
        );
        assert!(sqlx::PgConnection::connect(&url).await.is_err());

        pg.start_again().await.unwrap();
        assert_eq!(pg.url("postgres"), url, "same port, same password");
        let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
        let v: i32 = sqlx::query_scalar("select v from kept")
            .fetch_one(&mut conn)
            .await
            .unwrap();
        assert_eq!(v, 42, "committed before the crash, recovered from the WAL");
        pg.stop().await.unwrap();
    }
}
