//! Being a plugin of Terraform: the handshake of go-plugin (the plugin
//! system Terraform starts providers with), the mutual TLS it asks for, and
//! serving the provider's gRPC services until Terraform is done.
//!
//! Terraform starts the binary with a magic cookie in its environment and
//! the certificate of its own side (`PLUGIN_CLIENT_CERT`). The provider
//! listens on a Unix socket in a directory only its user can enter (mode
//! 0700): that directory is what keeps other users out. It makes a
//! certificate of its own for this run and prints one line on stdout:
//! `1|6|unix|<socket>|grpc|<its certificate, base64 DER>`; Terraform then
//! connects over TLS, trusting that certificate alone. The provider asks
//! for no client certificate: Terraform's is a P-521 key, which the TLS
//! library here cannot check, and the socket's directory already admits
//! only Terraform's user. It ends when Terraform calls
//! `GRPCController.Shutdown`, or kills it.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use base64::Engine;
use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::net::{UnixListener, UnixStream};
use tokio::sync::{Notify, mpsc};
use tokio_rustls::TlsAcceptor;
use tokio_rustls::rustls;
use tokio_rustls::rustls::pki_types::{CertificateDer, PrivateKeyDer, PrivatePkcs8KeyDer};
use tonic::transport::server::Connected;

use crate::proto::tfplugin6::provider_server::{Provider, ProviderServer};
use crate::proto::{health, plugin};

/// The cookie Terraform sets (`TF_PLUGIN_MAGIC_COOKIE`), so the binary
/// knows it runs as its plugin.
const MAGIC_COOKIE_VALUE: &str = "d602bf8f470bc67ca7faa0386276bbdd4330efaf76d1a219cb4d6991ca9872b2";
/// The provider protocol this plugin speaks.
const PROTOCOL_VERSION: &str = "6";

/// Runs the plugin, serving `provider` (the crate root hands it the
/// provider's service); the process's exit code.
pub async fn serve(env: crate::Environment, provider: impl Provider) -> i32 {
    if env.magic_cookie.as_deref() != Some(MAGIC_COOKIE_VALUE) {
        eprintln!(
            "terraform-provider-sless is a Terraform provider: Terraform runs it. \
             Install it (docs/terraform.md) and use it from a configuration with \
             `terraform init` and `terraform apply`."
        );
        return 1;
    }
    let versions = env.protocol_versions.clone().unwrap_or_default();
    if !versions.split(',').any(|v| v.trim() == PROTOCOL_VERSION) {
        eprintln!(
            "terraform-provider-sless speaks provider protocol {PROTOCOL_VERSION}, which \
             Terraform 1.0 and later speak; this Terraform offers {versions:?}"
        );
        return 1;
    }
    match run(env, provider).await {
        Ok(()) => 0,
        Err(e) => {
            eprintln!("terraform-provider-sless: {e}");
            1
        }
    }
}

async fn run(
    env: crate::Environment,
    provider: impl Provider,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // A directory of the user's own (mode 0700): only the user that runs
    // Terraform can reach the socket.
    let dir = tempfile::Builder::new()
        .prefix("terraform-provider-sless-")
        .tempdir()?;
    let socket = dir.path().join("plugin.sock");
    let listener = UnixListener::bind(&socket)?;

    // Terraform asks for TLS by naming its own certificate; the provider
    // then serves TLS with a certificate of this run, which Terraform
    // trusts alone.
    let tls = match env.client_cert.as_deref() {
        Some(pem) if !pem.trim().is_empty() => Some(Tls::new()?),
        _ => None,
    };
    let cert = tls
        .as_ref()
        .map(|t| base64::engine::general_purpose::STANDARD_NO_PAD.encode(&t.cert))
        .unwrap_or_default();
    // The handshake: Terraform reads this one line and connects.
    {
        use std::io::Write;
        let mut out = std::io::stdout().lock();
        writeln!(
            out,
            "1|{PROTOCOL_VERSION}|unix|{}|grpc|{cert}",
            socket.display()
        )?;
        out.flush()?;
    }

    let shutdown = Arc::new(Notify::new());
    let incoming = accept(listener, tls.map(|t| t.acceptor));
    let stopped = shutdown.clone();
    tonic::transport::Server::builder()
        .add_service(ProviderServer::new(provider))
        .add_service(plugin::grpc_controller_server::GrpcControllerServer::new(
            Controller(shutdown),
        ))
        .add_service(health::health_server::HealthServer::new(Health))
        .serve_with_incoming_shutdown(incoming, async move { stopped.notified().await })
        .await?;
    drop(dir);
    Ok(())
}

/// The connections, each through its TLS handshake when there is TLS. A
/// handshake runs on a task of its own, so a slow one holds up no other.
fn accept(
    listener: UnixListener,
    tls: Option<TlsAcceptor>,
) -> impl futures_util::Stream<Item = io::Result<Conn>> {
    let (tx, mut rx) = mpsc::channel::<io::Result<Conn>>(16);
    tokio::spawn(async move {
        loop {
            let stream = match listener.accept().await {
                Ok((stream, _)) => stream,
                Err(e) => {
                    let _ = tx.send(Err(e)).await;
                    return;
                }
            };
            let tx = tx.clone();
            let tls = tls.clone();
            tokio::spawn(async move {
                let conn = match tls {
                    Some(acceptor) => match acceptor.accept(stream).await {
                        Ok(s) => Conn::Tls(Box::new(s)),
                        // A peer without Terraform's certificate: dropped.
                        Err(e) => {
                            eprintln!("terraform-provider-sless: a TLS handshake failed: {e}");
                            return;
                        }
                    },
                    None => Conn::Plain(stream),
                };
                let _ = tx.send(Ok(conn)).await;
            });
        }
    });
    futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx))
}

/// One connection from Terraform.
enum Conn {
    Plain(UnixStream),
    Tls(Box<tokio_rustls::server::TlsStream<UnixStream>>),
}

impl Connected for Conn {
    type ConnectInfo = ();
    fn connect_info(&self) {}
}

impl AsyncRead for Conn {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_read(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_read(cx, buf),
        }
    }
}

impl AsyncWrite for Conn {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_write(cx, buf),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_flush(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_flush(cx),
        }
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        match self.get_mut() {
            Conn::Plain(s) => Pin::new(s).poll_shutdown(cx),
            Conn::Tls(s) => Pin::new(s.as_mut()).poll_shutdown(cx),
        }
    }
}

/// This run's certificate, and the TLS that accepts Terraform's alone.
struct Tls {
    /// DER of the provider's certificate.
    cert: Vec<u8>,
    acceptor: TlsAcceptor,
}

impl Tls {
    fn new() -> Result<Tls, Box<dyn std::error::Error + Send + Sync>> {
        // As go-plugin makes its own: P-256, for "localhost", able to
        // sign (Terraform adds it to its roots, leaf and root at once).
        let key = rcgen::KeyPair::generate_for(&rcgen::PKCS_ECDSA_P256_SHA256)?;
        let mut params = rcgen::CertificateParams::new(vec!["localhost".to_owned()])?;
        params.is_ca = rcgen::IsCa::Ca(rcgen::BasicConstraints::Unconstrained);
        params.key_usages = vec![
            rcgen::KeyUsagePurpose::DigitalSignature,
            rcgen::KeyUsagePurpose::KeyEncipherment,
            rcgen::KeyUsagePurpose::KeyCertSign,
        ];
        params.extended_key_usages = vec![
            rcgen::ExtendedKeyUsagePurpose::ServerAuth,
            rcgen::ExtendedKeyUsagePurpose::ClientAuth,
        ];
        params
            .distinguished_name
            .push(rcgen::DnType::OrganizationName, "terraform-provider-sless");
        let cert = params.self_signed(&key)?;
        let cert_der = cert.der().to_vec();

        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let mut config = rustls::ServerConfig::builder_with_provider(provider)
            .with_safe_default_protocol_versions()?
            .with_no_client_auth()
            .with_single_cert(
                vec![CertificateDer::from(cert_der.clone())],
                PrivateKeyDer::Pkcs8(PrivatePkcs8KeyDer::from(key.serialize_der())),
            )?;
        config.alpn_protocols = vec![b"h2".to_vec()];
        Ok(Tls {
            cert: cert_der,
            acceptor: TlsAcceptor::from(Arc::new(config)),
        })
    }
}

/// go-plugin's controller: `Shutdown` ends the plugin.
struct Controller(Arc<Notify>);

#[tonic::async_trait]
impl plugin::grpc_controller_server::GrpcController for Controller {
    async fn shutdown(
        &self,
        _: tonic::Request<plugin::Empty>,
    ) -> Result<tonic::Response<plugin::Empty>, tonic::Status> {
        self.0.notify_one();
        Ok(tonic::Response::new(plugin::Empty {}))
    }
}

/// The health check go-plugin pings: always serving.
struct Health;

#[tonic::async_trait]
impl health::health_server::Health for Health {
    async fn check(
        &self,
        _: tonic::Request<health::HealthCheckRequest>,
    ) -> Result<tonic::Response<health::HealthCheckResponse>, tonic::Status> {
        Ok(tonic::Response::new(health::HealthCheckResponse {
            status: health::health_check_response::ServingStatus::Serving as i32,
        }))
    }
}
