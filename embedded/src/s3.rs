//! The loopback S3 server.

use std::net::{Ipv4Addr, SocketAddr};
use std::path::Path;

use hyper_util::rt::{TokioExecutor, TokioIo};
use hyper_util::server::conn::auto::Builder as ConnectionBuilder;
use s3s::auth::SimpleAuth;
use s3s::service::{S3Service, S3ServiceBuilder};
use tokio::net::TcpListener;
use tokio::sync::oneshot;
use tokio::task::{JoinHandle, JoinSet};

use crate::error::{EmbeddedError, IoContext, Result};

/// An S3-compatible server on 127.0.0.1 serving a directory (one
/// subdirectory per bucket, one file per object) with `s3s` and `s3s-fs`.
///
/// Every request must be signed (SigV4) with the credentials given to
/// [`start`](Self::start); path-style addressing is used
/// (`http://127.0.0.1:PORT/<bucket>/<key>`).
#[derive(Debug)]
pub struct S3Server {
    addr: SocketAddr,
    shutdown: Option<oneshot::Sender<()>>,
    task: Option<JoinHandle<()>>,
}

impl S3Server {
    /// Serves the directory `root` as an S3 endpoint on 127.0.0.1 (port 0 =
    /// pick a free one) using s3s + s3s-fs, requiring SigV4 with the given
    /// credentials (s3s `SimpleAuth`); creates `root/<bucket>` so the bucket
    /// exists.
    pub async fn start(
        root: &Path,
        port: u16,
        bucket: &str,
        access_key: &str,
        secret_key: &str,
    ) -> Result<S3Server> {
        let setup_error = |message: String| EmbeddedError::S3Setup {
            root: root.to_path_buf(),
            message,
        };
        if bucket.is_empty() || bucket.contains(['/', '\\']) || bucket == "." || bucket == ".." {
            return Err(setup_error(format!("invalid bucket name {bucket:?}")));
        }
        let bucket_dir = root.join(bucket);
        tokio::fs::create_dir_all(&bucket_dir)
            .await
            .context(|| format!("creating {}", bucket_dir.display()))?;
        let fs = s3s_fs::FileSystem::new(root).map_err(|e| setup_error(format!("{e:?}")))?;
        let mut builder = S3ServiceBuilder::new(fs);
        builder.set_auth(SimpleAuth::from_single(access_key, secret_key));
        let service = builder.build();

        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, port))
            .await
            .context(|| format!("binding the S3 server to 127.0.0.1:{port}"))?;
        let addr = listener
            .local_addr()
            .context(|| "reading the S3 server address".into())?;
        let (shutdown, shutdown_rx) = oneshot::channel();
        let task = tokio::spawn(serve(listener, service, shutdown_rx));
        tracing::info!(%addr, root = %root.display(), bucket, "S3 server listening");
        Ok(S3Server {
            addr,
            shutdown: Some(shutdown),
            task: Some(task),
        })
    }

    /// The endpoint URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The TCP port the server listens on.
    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    /// Stops accepting connections, closes the open ones and waits for the
    /// server task to end.
    pub async fn stop(mut self) {
        if let Some(shutdown) = self.shutdown.take() {
            let _ = shutdown.send(());
        }
        if let Some(task) = self.task.take() {
            let _ = task.await;
        }
        tracing::info!(addr = %self.addr, "S3 server stopped");
    }
}

impl Drop for S3Server {
    /// Aborts the server task (and with it every open connection).
    fn drop(&mut self) {
        if let Some(task) = self.task.take() {
            task.abort();
        }
    }
}

/// Accepts connections until `shutdown` fires (or its sender is dropped).
///
/// Connections run in a `JoinSet` owned by this task, so they end with it —
/// whether it returns or is aborted.
async fn serve(listener: TcpListener, service: S3Service, mut shutdown: oneshot::Receiver<()>) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            accepted = listener.accept() => match accepted {
                Ok((stream, _peer)) => {
                    // An answer's head and body go out at once, not after
                    // the client's delayed ACK (40 ms on Linux).
                    let _ = stream.set_nodelay(true);
                    let service = service.clone();
                    connections.spawn(async move {
                        let builder = ConnectionBuilder::new(TokioExecutor::new());
                        if let Err(err) = builder.serve_connection(TokioIo::new(stream), service).await {
                            tracing::debug!(error = %err, "S3 connection ended with an error");
                        }
                    });
                }
                Err(err) => {
                    // E.g. EMFILE: back off briefly instead of spinning.
                    tracing::warn!(error = %err, "S3 server failed to accept a connection");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
        }
    }
    connections.shutdown().await;
}
