//! A TLS front: a listener on the node's gateway address that terminates
//! TLS with a certificate of the node's CA and passes the bytes on to a
//! plain server on loopback. What pods reach over HTTPS that the tests serve
//! over HTTP (the S3 server a build fetches its context from: kaniko takes
//! a remote context only over `https://`).

use std::net::{SocketAddr, TcpListener as StdListener};
use std::sync::Arc;

use tokio::net::{TcpListener, TcpStream};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;

/// Serves TLS on a free port of `ip` for the rest of the process, passing
/// each connection on to `upstream`. Returns the address it listens on.
pub(crate) fn start(
    ip: std::net::Ipv4Addr,
    upstream: SocketAddr,
    cert_der: Vec<u8>,
    key_der: Vec<u8>,
) -> SocketAddr {
    let listener = StdListener::bind((ip, 0)).expect("a port for a TLS front");
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let addr = listener.local_addr().expect("the TLS front's address");
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("TLS versions")
        .with_no_client_auth()
        .with_single_cert(
            vec![cert_der.into()],
            rustls::pki_types::PrivateKeyDer::Pkcs8(key_der.into()),
        )
        .expect("the TLS front's certificate");
    let acceptor = TlsAcceptor::from(Arc::new(config));
    std::thread::Builder::new()
        .name(format!("tls-front-{}", addr.port()))
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for a TLS front");
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a tokio listener");
                loop {
                    let Ok((socket, _)) = listener.accept().await else {
                        continue;
                    };
                    let acceptor = acceptor.clone();
                    tokio::spawn(async move {
                        let Ok(mut tls) = acceptor.accept(socket).await else {
                            return;
                        };
                        let Ok(mut plain) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut tls, &mut plain).await;
                    });
                }
            });
        })
        .expect("a thread for a TLS front");
    addr
}

/// Serves plain TCP on a free port of `ip` for the rest of the process,
/// passing each connection on to `upstream`: what pods reach of a server
/// the tests run on loopback (PostgreSQL, S3, the API server). Returns the
/// address it listens on.
pub(crate) fn start_tcp(ip: std::net::Ipv4Addr, upstream: SocketAddr) -> SocketAddr {
    let listener = StdListener::bind((ip, 0)).expect("a port for a TCP front");
    listener
        .set_nonblocking(true)
        .expect("a non-blocking listener");
    let addr = listener.local_addr().expect("the TCP front's address");
    std::thread::Builder::new()
        .name(format!("tcp-front-{}", addr.port()))
        .spawn(move || {
            let rt = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .expect("a runtime for a TCP front");
            rt.block_on(async move {
                let listener = TcpListener::from_std(listener).expect("a tokio listener");
                loop {
                    let Ok((mut socket, _)) = listener.accept().await else {
                        continue;
                    };
                    tokio::spawn(async move {
                        let Ok(mut plain) = TcpStream::connect(upstream).await else {
                            return;
                        };
                        let _ = tokio::io::copy_bidirectional(&mut socket, &mut plain).await;
                    });
                }
            });
        })
        .expect("a thread for a TCP front");
    addr
}
