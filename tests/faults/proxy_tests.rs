//! The fault proxy itself: each mode does what it says, on connections
//! already open and on new ones.

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::proxy::{FaultProxy, Mode};

/// An upstream that echoes every byte back.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    addr
}

async fn round_trip(s: &mut TcpStream, msg: &[u8]) -> Vec<u8> {
    s.write_all(msg).await.unwrap();
    let mut got = vec![0u8; msg.len()];
    tokio::time::timeout(Duration::from_secs(5), s.read_exact(&mut got))
        .await
        .expect("an answer within 5 s")
        .unwrap();
    got
}

/// Reads with a deadline: `None` when nothing (not even EOF) arrived.
async fn read_within(s: &mut TcpStream, d: Duration) -> Option<std::io::Result<usize>> {
    let mut buf = [0u8; 64];
    tokio::time::timeout(d, s.read(&mut buf)).await.ok()
}

#[tokio::test]
async fn pass_forwards_both_ways_and_passes_the_close_on() {
    let proxy = FaultProxy::start(echo_server().await).await;
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut s, b"hello").await, b"hello");
    s.shutdown().await.unwrap();
    // The echo server sees our FIN through the proxy and closes in turn.
    let end = read_within(&mut s, Duration::from_secs(5)).await;
    assert!(matches!(end, Some(Ok(0))), "{end:?}");
}

#[tokio::test]
async fn blackhole_silences_open_and_new_connections_without_closing_them_until_healed() {
    let proxy = FaultProxy::start(echo_server().await).await;
    let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut open, b"before").await, b"before");

    proxy.set(Mode::Blackhole);
    open.write_all(b"during").await.unwrap();
    let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
    new.write_all(b"new").await.unwrap();
    // Nothing comes back, and nothing is closed: no EOF, no reset.
    assert!(
        read_within(&mut open, Duration::from_millis(500))
            .await
            .is_none()
    );
    assert!(
        read_within(&mut new, Duration::from_millis(100))
            .await
            .is_none()
    );

    proxy.set(Mode::Pass);
    let mut got = [0u8; 6];
    open.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"during", "held bytes flow once healed");
    let mut got = [0u8; 3];
    new.read_exact(&mut got).await.unwrap();
    assert_eq!(&got, b"new");
}

#[tokio::test]
async fn reset_sends_rst_to_open_and_new_connections() {
    let proxy = FaultProxy::start(echo_server().await).await;
    let mut open = TcpStream::connect(proxy.addr()).await.unwrap();
    assert_eq!(round_trip(&mut open, b"x").await, b"x");

    proxy.set(Mode::Reset);
    let end = read_within(&mut open, Duration::from_secs(5)).await;
    assert!(
        matches!(&end, Some(Err(e)) if e.kind() == ErrorKind::ConnectionReset),
        "{end:?}"
    );
    let mut new = TcpStream::connect(proxy.addr()).await.unwrap();
    let end = read_within(&mut new, Duration::from_secs(5)).await;
    assert!(
        matches!(&end, Some(Err(e)) if e.kind() == ErrorKind::ConnectionReset),
        "{end:?}"
    );
}

#[tokio::test]
async fn close_after_forwards_that_many_bytes_then_closes() {
    let proxy = FaultProxy::start(echo_server().await).await;
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    // 6 bytes out and their echo back would be 12; the budget is 9.
    proxy.set(Mode::CloseAfter(9));
    s.write_all(b"abcdef").await.unwrap();
    let mut got = Vec::new();
    let read = tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut got))
        .await
        .expect("closed within 5 s");
    assert!(read.is_ok(), "closed with FIN, not reset: {read:?}");
    assert_eq!(got, b"abc", "6 bytes up, 3 of the echo down, then closed");
}

#[tokio::test]
async fn delay_holds_each_chunk_in_each_direction() {
    let proxy = FaultProxy::start(echo_server().await).await;
    let mut s = TcpStream::connect(proxy.addr()).await.unwrap();
    proxy.set(Mode::Delay(Duration::from_millis(200)));
    let started = Instant::now();
    assert_eq!(round_trip(&mut s, b"slow").await, b"slow");
    assert!(
        started.elapsed() >= Duration::from_millis(400),
        "{:?}",
        started.elapsed()
    );
}
