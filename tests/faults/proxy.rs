//! A TCP fault proxy for the fault suites: it listens on 127.0.0.1, forwards
//! every connection to one upstream, and can be switched at runtime between
//! modes that model network faults, for connections already open and new
//! ones alike.
//!
//! It depends on tokio alone, so any test binary can include it with
//! `#[path = "../faults/proxy.rs"] mod proxy;`.
#![allow(dead_code)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::tcp::{ReadHalf, WriteHalf};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::watch;
use tokio::task::{JoinHandle, JoinSet};

/// What the proxy does with the bytes it is given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Forward both ways as the bytes come.
    Pass,
    /// Forward, holding each chunk this long first, in each direction.
    Delay(Duration),
    /// Forward nothing and close nothing, like a network that drops every
    /// packet: open connections go silent (no FIN, no RST), new ones are
    /// accepted and reach nothing. Bytes already read wait in the proxy and
    /// flow again once the mode changes back, as TCP retransmission would
    /// deliver them after a partition heals.
    Blackhole,
    /// Reset every connection, open and new: SO_LINGER 0, then close, so the
    /// peers see RST.
    Reset,
    /// Forward, but close (FIN) a connection once it has forwarded this many
    /// bytes, both directions together, while in this mode.
    CloseAfter(u64),
}

/// A running proxy. Dropping it closes the listener and every connection.
pub struct FaultProxy {
    addr: SocketAddr,
    upstream: SocketAddr,
    mode: watch::Sender<Mode>,
    accepted: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl FaultProxy {
    /// Listens on 127.0.0.1 (a free port) and forwards to `upstream`, in
    /// `Mode::Pass`.
    pub async fn start(upstream: SocketAddr) -> FaultProxy {
        let listener = TcpListener::bind(("127.0.0.1", 0))
            .await
            .expect("binding the fault proxy");
        let addr = listener.local_addr().expect("the proxy's address");
        let (mode, mode_rx) = watch::channel(Mode::Pass);
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(accept_loop(listener, upstream, mode_rx, accepted.clone()));
        FaultProxy {
            addr,
            upstream,
            mode,
            accepted,
            task,
        }
    }

    /// Where clients connect: `127.0.0.1:<port>`.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn upstream(&self) -> SocketAddr {
        self.upstream
    }

    /// Switches every connection, open and new, to `mode`.
    pub fn set(&self, mode: Mode) {
        self.mode.send_replace(mode);
    }

    pub fn mode(&self) -> Mode {
        *self.mode.borrow()
    }

    /// Connections accepted so far.
    pub fn accepted(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for FaultProxy {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts connections; each runs in a set owned by this task, so they all
/// end with it.
async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    mode: watch::Receiver<Mode>,
    accepted: Arc<AtomicUsize>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
            conn = listener.accept() => match conn {
                Ok((client, _)) => {
                    accepted.fetch_add(1, Ordering::SeqCst);
                    let _ = client.set_nodelay(true);
                    connections.spawn(connection(client, upstream, mode.clone()));
                }
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
        }
    }
}

/// How one direction of a connection ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum End {
    /// Its source closed (or failed); the close was passed on.
    Eof,
    /// The mode became `Reset`.
    Reset,
    /// The connection's `CloseAfter` budget ran out.
    Cut,
}

/// Waits until the mode lets bytes through; `None` when it says reset (or
/// the proxy is gone).
async fn open(mode: &mut watch::Receiver<Mode>) -> Option<Mode> {
    loop {
        let now = *mode.borrow_and_update();
        match now {
            Mode::Reset => return None,
            Mode::Blackhole => mode.changed().await.ok()?,
            other => return Some(other),
        }
    }
}

/// Resolves once the connection's budget has run out.
async fn cut_signalled(cut: &mut watch::Receiver<bool>) {
    let _ = cut.wait_for(|c| *c).await;
}

/// Closes a socket with RST instead of FIN.
fn reset(stream: TcpStream) {
    let _ = stream.set_zero_linger();
    drop(stream);
}

async fn connection(client: TcpStream, upstream: SocketAddr, mut mode: watch::Receiver<Mode>) {
    // The upstream is dialled only once bytes may flow: a connection opened
    // during a blackhole reaches nothing.
    if open(&mut mode).await.is_none() {
        return reset(client);
    }
    let Ok(server) = TcpStream::connect(upstream).await else {
        return reset(client); // refused upstream: refused here too
    };
    let _ = server.set_nodelay(true);
    let (mut client, mut server) = (client, server);
    let used = AtomicU64::new(0);
    let (cut, _) = watch::channel(false);
    let (up, down) = {
        let (client_rx, client_tx) = client.split();
        let (server_rx, server_tx) = server.split();
        tokio::join!(
            pump(client_rx, server_tx, mode.clone(), &used, &cut),
            pump(server_rx, client_tx, mode.clone(), &used, &cut),
        )
    };
    if up == End::Reset || down == End::Reset {
        reset(client);
        reset(server);
    }
    // Otherwise both close with FIN as they drop.
}

/// Moves bytes from `from` to `to` while the mode allows, until the source
/// closes, the mode says reset, or the connection's budget runs out.
async fn pump(
    mut from: ReadHalf<'_>,
    mut to: WriteHalf<'_>,
    mut mode: watch::Receiver<Mode>,
    used: &AtomicU64,
    cut: &watch::Sender<bool>,
) -> End {
    let mut cut_seen = cut.subscribe();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        if open(&mut mode).await.is_none() {
            return End::Reset;
        }
        // Read only while bytes may flow: in a blackhole they stay in the
        // kernel's buffers (and the sender's), unacknowledged by us.
        let n = tokio::select! {
            biased;
            _ = cut_signalled(&mut cut_seen) => return End::Cut,
            changed = mode.changed() => {
                if changed.is_err() {
                    return End::Reset;
                }
                continue;
            }
            read = from.read(&mut buf) => match read {
                Ok(0) | Err(_) => {
                    let _ = to.shutdown().await;
                    return End::Eof;
                }
                Ok(n) => n,
            },
        };
        let mut chunk = &buf[..n];
        while !chunk.is_empty() {
            let Some(now) = open(&mut mode).await else {
                return End::Reset;
            };
            if let Mode::Delay(d) = now {
                tokio::select! {
                    _ = tokio::time::sleep(d) => {}
                    changed = mode.changed() => {
                        if changed.is_err() {
                            return End::Reset;
                        }
                        continue; // look at the new mode first
                    }
                }
            }
            let mut allowed = chunk.len();
            if let Mode::CloseAfter(budget) = now {
                let left = budget.saturating_sub(used.load(Ordering::SeqCst));
                if left == 0 {
                    cut.send_replace(true);
                    return End::Cut;
                }
                allowed = allowed.min(left as usize);
            }
            let written = tokio::select! {
                biased;
                _ = cut_signalled(&mut cut_seen) => return End::Cut,
                changed = mode.changed() => {
                    if changed.is_err() {
                        return End::Reset;
                    }
                    continue;
                }
                written = to.write(&chunk[..allowed]) => match written {
                    Ok(0) | Err(_) => return End::Eof,
                    Ok(w) => w,
                },
            };
            if matches!(now, Mode::CloseAfter(_)) {
                used.fetch_add(written as u64, Ordering::SeqCst);
            }
            chunk = &chunk[written..];
        }
    }
}
