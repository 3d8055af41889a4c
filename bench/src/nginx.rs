//! A private nginx (Debian's `/usr/sbin/nginx`) as a reverse proxy in front
//! of one upstream, with a keepalive pool to it: the anchor for the invoke
//! proxy. Its config, pid, logs and temp files live in a temp dir.

use std::os::unix::fs::PermissionsExt;
use std::process::Stdio;
use std::time::Duration;

use anyhow::Context;

use crate::wait_for;

pub struct Nginx {
    child: tokio::process::Child,
    _dir: tempfile::TempDir,
    pub url: String,
}

/// A free TCP port on 127.0.0.1 (free when asked; nginx binds it next).
fn free_port() -> anyhow::Result<u16> {
    Ok(std::net::TcpListener::bind("127.0.0.1:0")?
        .local_addr()?
        .port())
}

impl Nginx {
    /// Starts nginx proxying to `upstream` (`host:port`), with as many
    /// worker processes as cores.
    pub async fn start(upstream: &str) -> anyhow::Result<Nginx> {
        let dir = tempfile::Builder::new()
            .prefix("sless-bench-nginx-")
            .tempdir()?;
        // Workers of a master started by root run as nobody, and may need
        // their temp paths (for bodies too large to buffer in memory).
        std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))?;
        let d = dir.path().display();
        let port = free_port()?;
        // SAFETY: geteuid(2) has no preconditions.
        let user = if unsafe { libc::geteuid() } == 0 {
            "user nobody nogroup;"
        } else {
            ""
        };
        let conf = format!(
            "{user}
daemon off;
worker_processes auto;
pid {d}/nginx.pid;
error_log {d}/error.log warn;
events {{ worker_connections 4096; }}
http {{
    access_log off;
    client_body_temp_path {d}/body;
    proxy_temp_path {d}/proxy;
    fastcgi_temp_path {d}/fastcgi;
    uwsgi_temp_path {d}/uwsgi;
    scgi_temp_path {d}/scgi;
    upstream function {{
        server {upstream};
        keepalive 64;
    }}
    server {{
        listen 127.0.0.1:{port};
        location / {{
            proxy_pass http://function;
            proxy_http_version 1.1;
            proxy_set_header Connection \"\";
        }}
    }}
}}
"
        );
        let conf_path = dir.path().join("nginx.conf");
        std::fs::write(&conf_path, conf)?;
        let child = tokio::process::Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&conf_path)
            .arg("-e")
            .arg(dir.path().join("error.log"))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .context("starting nginx")?;
        let mut nginx = Nginx {
            child,
            _dir: dir,
            url: format!("http://127.0.0.1:{port}"),
        };
        let log = nginx._dir.path().join("error.log");
        let child = &mut nginx.child;
        wait_for(
            "nginx to listen",
            Duration::from_secs(10),
            Duration::from_millis(20),
            || {
                let exited = child.try_wait();
                let log = log.clone();
                async move {
                    if let Some(status) = exited? {
                        anyhow::bail!("nginx exited ({status}): {}", crate::sless_dev::tail(&log));
                    }
                    Ok(tokio::net::TcpStream::connect(("127.0.0.1", port))
                        .await
                        .ok()
                        .map(drop))
                }
            },
        )
        .await?;
        Ok(nginx)
    }

    /// Stops nginx (SIGQUIT: graceful) and waits for it.
    pub async fn stop(mut self) -> anyhow::Result<()> {
        if let Some(pid) = self.child.id() {
            // SAFETY: kill(2) on our own child's pid.
            unsafe { libc::kill(pid as i32, libc::SIGQUIT) };
        }
        if tokio::time::timeout(Duration::from_secs(10), self.child.wait())
            .await
            .is_err()
        {
            self.child.kill().await?;
        }
        Ok(())
    }
}
