//! The S3 blob store, through aws-sdk-s3: the same code path against the
//! embedded server in development and against a real S3 in production.
//! Keys are content-addressed, so a put of an existing key is skipped.

use aws_credential_types::Credentials;
use aws_sdk_s3::Client;
use aws_sdk_s3::config::{BehaviorVersion, Region};
use aws_sdk_s3::error::SdkError;
use aws_sdk_s3::primitives::ByteStream;
use aws_smithy_http_client::tls;

use crate::{Error, Result};

/// Where the blobs live. Every field comes from configuration.
#[derive(Debug, Clone)]
pub struct S3Config {
    /// e.g. `http://127.0.0.1:9000`; `None` for AWS's own endpoints.
    pub endpoint: Option<String>,
    pub region: String,
    pub bucket: String,
    pub access_key: String,
    pub secret_key: String,
    /// Path-style addressing (`endpoint/bucket/key`), needed by most S3 servers but AWS.
    pub force_path_style: bool,
    /// Where the holders of a presigned URL reach the same server, when
    /// that is another address than `endpoint` (build pods that reach it
    /// through a TLS front, say): `scheme://host[:port]`. `None`: `endpoint`.
    pub presign_endpoint: Option<String>,
}

#[derive(Clone)]
pub struct BlobStore {
    client: Client,
    /// The client presigned URLs are made with: one for
    /// `S3Config::presign_endpoint`, or `client` itself.
    presigner: Client,
    bucket: String,
}

fn blob_err<E: std::error::Error + Send + Sync + 'static>(
    what: &str,
    key: &str,
    e: SdkError<E>,
) -> Error {
    Error::Blob(format!(
        "{what} {key}: {}",
        aws_sdk_s3::error::DisplayErrorContext(e)
    ))
}

impl BlobStore {
    pub fn new(cfg: &S3Config) -> BlobStore {
        let client = client(cfg, cfg.endpoint.as_deref());
        // SigV4 signs the host a request goes to: a URL for another
        // address must be signed for that address.
        let presigner = match &cfg.presign_endpoint {
            Some(endpoint) => self::client(cfg, Some(endpoint)),
            None => client.clone(),
        };
        BlobStore {
            client,
            presigner,
            bucket: cfg.bucket.clone(),
        }
    }

    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Checks the bucket is reachable (for readiness and start-up errors).
    pub async fn check(&self) -> Result<()> {
        self.client
            .head_bucket()
            .bucket(&self.bucket)
            .send()
            .await
            .map_err(|e| blob_err("head bucket", &self.bucket, e))?;
        Ok(())
    }

    pub async fn exists(&self, key: &str) -> Result<bool> {
        let started = std::time::Instant::now();
        let found = match self
            .client
            .head_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
        {
            Ok(_) => Ok(true),
            Err(e) if e.as_service_error().is_some_and(|s| s.is_not_found()) => Ok(false),
            Err(e) => Err(blob_err("head", key, e)),
        };
        counted("head", started, found)
    }

    /// Stores `bytes` under a content-addressed `key`, unless it is already
    /// there; true when it stored them.
    pub async fn put_if_absent(
        &self,
        key: &str,
        bytes: impl Into<bytes::Bytes>,
        content_type: &str,
    ) -> Result<bool> {
        if self.exists(key).await? {
            return Ok(false);
        }
        self.put(key, bytes, content_type).await?;
        Ok(true)
    }

    /// Stores `bytes` under `key`, replacing what is there.
    pub async fn put(
        &self,
        key: &str,
        bytes: impl Into<bytes::Bytes>,
        content_type: &str,
    ) -> Result<()> {
        let started = std::time::Instant::now();
        let put = self
            .client
            .put_object()
            .bucket(&self.bucket)
            .key(key)
            .content_type(content_type)
            .body(ByteStream::from(bytes.into()))
            .send()
            .await
            .map(|_| ())
            .map_err(|e| blob_err("put", key, e));
        counted("put", started, put)
    }

    /// Deletes the object `key` (nothing happens when it is not there).
    pub async fn delete(&self, key: &str) -> Result<()> {
        let started = std::time::Instant::now();
        let deleted = self
            .client
            .delete_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map(|_| ())
            .map_err(|e| blob_err("delete", key, e));
        counted("delete", started, deleted)
    }

    pub async fn get(&self, key: &str) -> Result<Vec<u8>> {
        let started = std::time::Instant::now();
        let got = self.get_uncounted(key).await;
        counted("get", started, got)
    }

    async fn get_uncounted(&self, key: &str) -> Result<Vec<u8>> {
        let out = self
            .client
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .send()
            .await
            .map_err(|e| blob_err("get", key, e))?;
        let body = out
            .body
            .collect()
            .await
            .map_err(|e| Error::Blob(format!("reading {key}: {e}")))?;
        Ok(body.into_bytes().to_vec())
    }

    /// A URL anyone holding it can GET `key` with until `ttl` has passed
    /// (a presigned request, so it carries no credentials of its own), at
    /// `S3Config::presign_endpoint` when there is one. Making it sends
    /// nothing.
    pub async fn presigned_get(&self, key: &str, ttl: std::time::Duration) -> Result<String> {
        let config = aws_sdk_s3::presigning::PresigningConfig::expires_in(ttl)
            .map_err(|e| Error::Blob(format!("presigning {key}: {e}")))?;
        let request = self
            .presigner
            .get_object()
            .bucket(&self.bucket)
            .key(key)
            .presigned(config)
            .await
            .map_err(|e| blob_err("presign", key, e))?;
        Ok(request.uri().to_owned())
    }

    /// Every key under a prefix (for tests and operators).
    pub async fn list(&self, prefix: &str) -> Result<Vec<String>> {
        let mut keys = Vec::new();
        let mut token = None;
        loop {
            let out = self
                .client
                .list_objects_v2()
                .bucket(&self.bucket)
                .prefix(prefix)
                .set_continuation_token(token)
                .send()
                .await
                .map_err(|e| blob_err("list", prefix, e))?;
            keys.extend(
                out.contents()
                    .iter()
                    .filter_map(|o| o.key().map(str::to_owned)),
            );
            match out.next_continuation_token() {
                Some(t) => token = Some(t.to_owned()),
                None => return Ok(keys),
            }
        }
    }
}

/// A client of the bucket `cfg` names, at `endpoint` (`None`: AWS's own).
fn client(cfg: &S3Config, endpoint: Option<&str>) -> Client {
    let http = aws_smithy_http_client::Builder::new()
        .tls_provider(tls::Provider::Rustls(
            tls::rustls_provider::CryptoMode::Ring,
        ))
        .build_https();
    let creds = Credentials::new(&cfg.access_key, &cfg.secret_key, None, None, "sless-config");
    let mut conf = aws_sdk_s3::Config::builder()
        .behavior_version(BehaviorVersion::latest())
        .region(Region::new(cfg.region.clone()))
        .credentials_provider(creds)
        .http_client(http)
        .force_path_style(cfg.force_path_style);
    if let Some(endpoint) = endpoint {
        conf = conf.endpoint_url(endpoint);
    }
    Client::from_conf(conf.build())
}

/// The content-addressed key of an uploaded zip.
pub fn zip_key(sha256: &str) -> String {
    format!("blobs/zips/{sha256}.zip")
}

/// The content-addressed key of a build context.
pub fn context_key(sha256: &str) -> String {
    format!("blobs/contexts/{sha256}.tar.gz")
}

/// The key of a version's build log. Not content-addressed: one object per
/// version of a function (a version number is never given twice, deletes
/// and pruning included), replaced by a later build of the same version,
/// and deleted with the version's row of `build_logs` when retention
/// prunes it.
pub fn build_log_key(namespace: &str, name: &str, version: u32) -> String {
    format!("blobs/build-logs/{namespace}/{name}/v{version}.log")
}

/// `result`, counted in the metrics as `operation` that began at `started`.
fn counted<T>(operation: &str, started: std::time::Instant, result: Result<T>) -> Result<T> {
    sless_telemetry::global().s3(operation, result.is_ok(), started.elapsed().as_secs_f64());
    result
}
