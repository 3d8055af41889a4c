//! The S3 blob store against a real S3 server on loopback: presigned URLs
//! for an address of the server's other than the one sless uses.

use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use sless_store::blobs::{BlobStore, S3Config};
use sless_testkit::TestS3;
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// Another address of the same server, as a TLS front or a node port
/// would be: every connection to it is passed on to `to`, byte for byte
/// (the `Host` a client sends reaches the server as it sent it).
struct Front {
    addr: SocketAddr,
    connections: Arc<AtomicUsize>,
    task: JoinHandle<()>,
}

impl Front {
    /// Listens on 127.0.0.2, a loopback address of its own, so a URL
    /// names it by its host, not only by its port.
    async fn start(to: SocketAddr) -> Front {
        let listener = TcpListener::bind("127.0.0.2:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let connections = Arc::new(AtomicUsize::new(0));
        let counted = connections.clone();
        let task = tokio::spawn(async move {
            while let Ok((mut inbound, _)) = listener.accept().await {
                counted.fetch_add(1, Ordering::SeqCst);
                tokio::spawn(async move {
                    if let Ok(mut outbound) = TcpStream::connect(to).await {
                        let _ = tokio::io::copy_bidirectional(&mut inbound, &mut outbound).await;
                    }
                });
            }
        });
        Front {
            addr,
            connections,
            task,
        }
    }

    fn connections(&self) -> usize {
        self.connections.load(Ordering::SeqCst)
    }
}

impl Drop for Front {
    fn drop(&mut self) {
        self.task.abort();
    }
}

#[tokio::test]
async fn a_presigned_url_names_the_presign_endpoint_and_fetches_through_it() {
    let s3 = TestS3::new().await;
    let server: SocketAddr = format!("127.0.0.1:{}", s3.server.port()).parse().unwrap();
    let front = Front::start(server).await;
    let blobs = BlobStore::new(&S3Config {
        presign_endpoint: Some(format!("http://{}", front.addr)),
        ..s3.config.clone()
    });
    let key = "blobs/contexts/presigned.tar.gz";
    blobs
        .put(key, b"a build context".to_vec(), "application/gzip")
        .await
        .unwrap();
    assert_eq!(blobs.get(key).await.unwrap(), b"a build context");

    let url = blobs
        .presigned_get(key, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        url.starts_with(&format!("http://{}/sless/{key}?", front.addr)),
        "{url}"
    );
    // Every other call went to the endpoint itself: nothing through the
    // front yet.
    assert_eq!(front.connections(), 0);
    let fetched = reqwest::get(&url).await.unwrap();
    assert_eq!(fetched.status(), 200);
    assert_eq!(fetched.bytes().await.unwrap().as_ref(), b"a build context");
    assert!(front.connections() >= 1);

    // The signature covers the host: the same URL sent to the endpoint
    // itself is refused, which is why it must be made for the front.
    let direct = url.replace(&front.addr.to_string(), &server.to_string());
    assert_eq!(reqwest::get(&direct).await.unwrap().status(), 403);

    // Without a presign endpoint, a URL names the endpoint.
    let url = s3
        .blobs()
        .presigned_get(key, Duration::from_secs(60))
        .await
        .unwrap();
    assert!(
        url.starts_with(&format!("http://{server}/sless/{key}?")),
        "{url}"
    );
    assert_eq!(reqwest::get(&url).await.unwrap().status(), 200);
}
