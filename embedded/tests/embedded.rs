//! Integration tests for the private PostgreSQL cluster and the S3 server.
//!
//! On this machine they run as root, so the unprivileged-user path (initdb and
//! postgres run as `postgres`/`nobody`) is exercised.

use std::io::BufRead;
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use aws_sdk_s3::config::{BehaviorVersion, Region};
use aws_sdk_s3::primitives::ByteStream;
use sless_embedded::{PostgresHost, PostgresOptions, PrivatePostgres, S3Server, random_secret};
use sqlx::Connection;

/// Env var that turns [`child_helper_holds_cluster`] into a real cluster owner.
const CHILD_ENV: &str = "SLESS_EMBEDDED_TEST_CHILD_DIR";

/// A fresh temporary directory, private to its owner (as `mktemp -d` makes
/// it): under root the cluster still starts in it.
fn temp_dir() -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix("sless-embedded-")
        .tempdir()
        .unwrap();
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o700)).unwrap();
    dir
}

/// Starts a cluster with the server programs of `SLESS_PG_BIN` or of this
/// process's `PATH`, in its environment, as `sless dev` does.
async fn start(opts: PostgresOptions) -> sless_embedded::Result<PrivatePostgres> {
    let host = PostgresHost {
        bin_dir: std::env::var_os("SLESS_PG_BIN").map(PathBuf::from),
        env: std::env::vars().collect(),
    };
    PrivatePostgres::start_with(opts, host).await
}

fn alive(pid: u32) -> bool {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return false;
    };
    let state = stat
        .rsplit_once(')')
        .and_then(|(_, rest)| rest.split_whitespace().next());
    !matches!(state, Some("Z" | "X") | None)
}

/// Pids of the live children of `pid`.
fn children_of(pid: u32) -> Vec<u32> {
    std::fs::read_dir("/proc")
        .unwrap()
        .flatten()
        .filter_map(|e| e.file_name().to_str()?.parse::<u32>().ok())
        .filter(|child| {
            let Ok(stat) = std::fs::read_to_string(format!("/proc/{child}/stat")) else {
                return false;
            };
            let ppid = stat
                .rsplit_once(')')
                .and_then(|(_, rest)| rest.split_whitespace().nth(1));
            ppid == Some(pid.to_string().as_str())
        })
        .collect()
}

/// Polls `condition` every 50 ms until it holds or `timeout` passes.
async fn eventually(timeout: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

async fn query_one(url: &str) -> i32 {
    let mut conn = sqlx::PgConnection::connect(url).await.unwrap();
    let one: i32 = sqlx::query_scalar("select 1")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    one
}

#[tokio::test]
async fn postgres_keeps_data_across_restarts() {
    let dir = temp_dir();
    let data_dir = dir.path().join("data");
    let opts = PostgresOptions::new(&data_dir);

    let pg = start(opts.clone()).await.unwrap();
    let url = pg.url("postgres");
    assert!(url.starts_with("postgres://sless:"), "{url}");
    assert!(
        url.ends_with(&format!("@127.0.0.1:{}/postgres", pg.port())),
        "{url}"
    );
    assert_eq!(query_one(&url).await, 1);

    let mut conn = sqlx::PgConnection::connect(&url).await.unwrap();
    sqlx::query("create table notes (id int primary key, body text not null)")
        .execute(&mut conn)
        .await
        .unwrap();
    sqlx::query("insert into notes values (1, 'kept')")
        .execute(&mut conn)
        .await
        .unwrap();
    // Left open on purpose: fast shutdown must terminate sessions.

    let password_file = data_dir.join("pg-password");
    assert_eq!(
        std::fs::metadata(&password_file)
            .unwrap()
            .permissions()
            .mode()
            & 0o777,
        0o600
    );
    let password = std::fs::read_to_string(&password_file).unwrap();
    assert!(url.contains(password.trim()));

    let bad = url.replace(password.trim(), &random_secret());
    assert!(
        sqlx::PgConnection::connect(&bad).await.is_err(),
        "a wrong password must be rejected"
    );

    let pid = pg.pid().unwrap();
    assert!(alive(pid));
    pg.stop().await.unwrap();
    assert!(
        !alive(pid),
        "stop() returns only after the postmaster exited"
    );
    drop(conn);

    let pg = start(opts).await.unwrap();
    let expected = format!(
        "postgres://sless:{}@127.0.0.1:{}/postgres",
        password.trim(),
        pg.port()
    );
    assert_eq!(
        pg.url("postgres"),
        expected,
        "same password after a restart"
    );
    let mut conn = sqlx::PgConnection::connect(&pg.url("postgres"))
        .await
        .unwrap();
    let body: String = sqlx::query_scalar("select body from notes where id = 1")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    assert_eq!(body, "kept");
    conn.close().await.unwrap();

    // Drop shuts the server down synchronously.
    let pid = pg.pid().unwrap();
    drop(pg);
    assert!(!alive(pid), "drop returns only after the postmaster exited");
}

#[tokio::test]
async fn postgres_honours_port_and_settings() {
    let dir = temp_dir();
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let opts = PostgresOptions {
        data_dir: dir.path().join("data"),
        port: Some(port),
        settings: vec![("work_mem".into(), "7MB".into())],
        socket_only: false,
    };
    let pg = start(opts).await.unwrap();
    assert_eq!(pg.port(), port);
    let mut conn = sqlx::PgConnection::connect(&pg.url("postgres"))
        .await
        .unwrap();
    let work_mem: String = sqlx::query_scalar("show work_mem")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let max_conn: String = sqlx::query_scalar("show max_connections")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    let listen: String = sqlx::query_scalar("show listen_addresses")
        .fetch_one(&mut conn)
        .await
        .unwrap();
    conn.close().await.unwrap();
    assert_eq!(
        (work_mem.as_str(), max_conn.as_str(), listen.as_str()),
        ("7MB", "300", "127.0.0.1")
    );
    pg.stop().await.unwrap();
}

#[tokio::test]
async fn postgres_restarts_over_stale_postmaster_pid() {
    let dir = temp_dir();
    let data_dir = dir.path().join("data");
    let pg = start(PostgresOptions::new(&data_dir)).await.unwrap();
    let pid = pg.pid().unwrap();
    let children = children_of(pid);

    // SIGKILL leaves postmaster.pid (and the shared memory key) behind.
    // SAFETY: kill has no memory-safety preconditions.
    assert_eq!(unsafe { libc::kill(pid as libc::pid_t, libc::SIGKILL) }, 0);
    let gone = eventually(Duration::from_secs(15), || {
        !alive(pid) && children.iter().all(|c| !alive(*c))
    })
    .await;
    assert!(
        gone,
        "postmaster {pid} or its children {children:?} survived SIGKILL"
    );
    assert!(
        data_dir.join("pgdata/postmaster.pid").exists(),
        "the lock file is stale now"
    );
    drop(pg);

    let pg = start(PostgresOptions::new(&data_dir)).await.unwrap();
    assert_eq!(query_one(&pg.url("postgres")).await, 1);
    assert_ne!(pg.pid().unwrap(), pid);
    pg.stop().await.unwrap();
}

/// Helper for [`postmaster_dies_with_its_owner`]: only does something when
/// spawned by it (with `CHILD_ENV` set); then it starts a cluster, prints the
/// postmaster pid and blocks until killed.
#[tokio::test]
async fn child_helper_holds_cluster() {
    let Some(data_dir) = std::env::var_os(CHILD_ENV) else {
        return;
    };
    let data_dir = PathBuf::from(data_dir);
    let pg = start(PostgresOptions::new(&data_dir)).await.unwrap();
    println!("POSTMASTER_PID={}", pg.pid().unwrap());
    std::future::pending::<()>().await;
    drop(pg);
}

/// Kills the helper process if the test fails before it does.
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

#[tokio::test]
async fn postmaster_dies_with_its_owner() {
    let dir = temp_dir();
    let data_dir = dir.path().join("data");
    let mut child = KillOnDrop(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "child_helper_holds_cluster",
                "--exact",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD_ENV, &data_dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap(),
    );
    let stdout = child.0.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            // libtest may print "test <name> ... " on the same line first.
            if let Some((_, pid)) = line.split_once("POSTMASTER_PID=") {
                let _ = tx.send(pid.trim().parse::<u32>().unwrap());
            }
        }
    });
    let pid = tokio::task::spawn_blocking(move || rx.recv_timeout(Duration::from_secs(60)))
        .await
        .unwrap()
        .expect("the helper process did not report a postmaster pid");
    assert!(alive(pid));

    child.0.kill().unwrap(); // SIGKILL: no destructor runs in the owner.
    child.0.wait().unwrap();
    assert!(
        eventually(Duration::from_secs(15), || !alive(pid)).await,
        "postmaster {pid} outlived its owner"
    );

    let pg = start(PostgresOptions::new(&data_dir)).await.unwrap();
    assert_eq!(query_one(&pg.url("postgres")).await, 1);
    pg.stop().await.unwrap();
}

#[tokio::test]
async fn a_data_dir_private_to_root_holds_the_cluster() {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return; // only root switches to an unprivileged user
    }
    let dir = temp_dir();
    let locked = dir.path().join("locked");
    std::fs::create_dir(&locked).unwrap();
    std::fs::set_permissions(&locked, std::fs::Permissions::from_mode(0o700)).unwrap();
    let data_dir = locked.join("data");
    let pg = start(PostgresOptions::new(&data_dir)).await.unwrap();
    assert_eq!(query_one(&pg.url("postgres")).await, 1);
    let pid = pg.pid().unwrap();
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let uid = status
        .lines()
        .find_map(|l| l.strip_prefix("Uid:"))
        .and_then(|l| l.split_whitespace().next())
        .unwrap();
    assert_ne!(uid, "0", "the postmaster does not run as root");
    let mode = std::fs::metadata(&locked).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the directory was not opened up");
    pg.stop().await.unwrap();
}

fn s3_client(endpoint: &str, access_key: &str, secret_key: &str) -> aws_sdk_s3::Client {
    let credentials =
        aws_credential_types::Credentials::new(access_key, secret_key, None, None, "test");
    let config = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new("us-east-1"))
        .endpoint_url(endpoint)
        .credentials_provider(credentials)
        .force_path_style(true)
        .http_client(aws_smithy_http_client::Builder::new().build_http())
        .build();
    aws_sdk_s3::Client::from_conf(config)
}

#[tokio::test]
async fn s3_server_round_trip_and_auth() {
    let dir = temp_dir();
    let root = dir.path().join("s3");
    let (access_key, secret_key) = (random_secret(), random_secret());
    let server = S3Server::start(&root, 0, "artifacts", &access_key, &secret_key)
        .await
        .unwrap();
    assert!(root.join("artifacts").is_dir());
    assert_ne!(server.port(), 0);
    assert_eq!(
        server.endpoint(),
        format!("http://127.0.0.1:{}", server.port())
    );

    let client = s3_client(&server.endpoint(), &access_key, &secret_key);
    client
        .put_object()
        .bucket("artifacts")
        .key("fn/v1/code.zip")
        .body(ByteStream::from_static(b"hello, s3"))
        .send()
        .await
        .unwrap();
    let got = client
        .get_object()
        .bucket("artifacts")
        .key("fn/v1/code.zip")
        .send()
        .await
        .unwrap();
    assert_eq!(
        got.body.collect().await.unwrap().into_bytes().as_ref(),
        b"hello, s3"
    );
    assert_eq!(
        std::fs::read(root.join("artifacts/fn/v1/code.zip")).unwrap(),
        b"hello, s3"
    );

    let missing = client
        .head_object()
        .bucket("artifacts")
        .key("nope")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        missing.raw_response().map(|r| r.status().as_u16()),
        Some(404)
    );
    assert!(missing.into_service_error().is_not_found());

    let wrong_secret = s3_client(&server.endpoint(), &access_key, &random_secret());
    let err = wrong_secret
        .get_object()
        .bucket("artifacts")
        .key("fn/v1/code.zip")
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.raw_response().map(|r| r.status().as_u16()),
        Some(403),
        "{err:?}"
    );
    let unknown_key = s3_client(&server.endpoint(), &random_secret(), &secret_key);
    let err = unknown_key
        .put_object()
        .bucket("artifacts")
        .key("intruder")
        .body(ByteStream::from_static(b"x"))
        .send()
        .await
        .unwrap_err();
    assert_eq!(
        err.raw_response().map(|r| r.status().as_u16()),
        Some(403),
        "{err:?}"
    );
    assert!(!root.join("artifacts/intruder").exists());

    let port = server.port();
    server.stop().await;
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_err(),
        "stopped server still accepts"
    );
}

#[tokio::test]
async fn s3_server_drop_closes_the_port() {
    let dir = temp_dir();
    let server = S3Server::start(&dir.path().join("s3"), 0, "b", "ak", "sk")
        .await
        .unwrap();
    let port = server.port();
    assert!(
        tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
    );
    drop(server);
    let closed = async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port))
            .await
            .is_ok()
        {
            tokio::task::yield_now().await;
        }
    };
    tokio::time::timeout(Duration::from_secs(5), closed)
        .await
        .expect("port still open after drop");
}

#[tokio::test]
async fn a_socket_only_cluster_listens_on_no_tcp_port() {
    let dir = temp_dir();
    let data_dir = dir.path().join("data");
    let mut opts = PostgresOptions::new(&data_dir);
    opts.socket_only = true;
    let pg = start(opts).await.unwrap();
    let url = pg.url("postgres");
    assert!(url.contains("?host="), "{url}");
    assert_eq!(query_one(&url).await, 1);
    assert!(
        std::net::TcpStream::connect(("127.0.0.1", pg.port())).is_err(),
        "nothing listens on its port"
    );
    let bad = url.replace(&pg_password(&data_dir), &random_secret());
    assert!(
        sqlx::PgConnection::connect(&bad).await.is_err(),
        "the socket needs the password too"
    );
    pg.stop().await.unwrap();
}

#[tokio::test]
async fn a_cluster_whose_socket_path_is_too_long_listens_on_tcp() {
    let dir = temp_dir();
    // `.../pgsock/.s.PGSQL.{port}` would not fit a socket address.
    let data_dir = dir
        .path()
        .join("d".repeat(100 - dir.path().as_os_str().len()));
    let mut opts = PostgresOptions::new(&data_dir);
    opts.socket_only = true;
    let pg = start(opts).await.unwrap();
    let url = pg.url("postgres");
    assert!(!url.contains("?host="), "{url}");
    assert_eq!(query_one(&url).await, 1);
    pg.stop().await.unwrap();
}

fn pg_password(data_dir: &std::path::Path) -> String {
    std::fs::read_to_string(data_dir.join("pg-password"))
        .unwrap()
        .trim()
        .to_owned()
}
