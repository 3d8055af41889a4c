//! The embedded default: with no external services configured, `sless dev`
//! runs a private PostgreSQL and an S3 server on loopback in its data
//! directory, with secrets generated once and kept there (mode 0600).

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};

use anyhow::Context;
use serde::{Deserialize, Serialize};
use sless_embedded::{PostgresHost, PostgresOptions, PrivatePostgres, S3Server};
use sless_store::blobs::S3Config;

/// Secrets of one dev data directory.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct DevSecrets {
    pub jwt_secret: String,
    pub s3_access_key: String,
    pub s3_secret_key: String,
}

fn secrets_path(dir: &Path) -> PathBuf {
    dir.join("secrets.json")
}

impl DevSecrets {
    pub fn load(dir: &Path) -> anyhow::Result<DevSecrets> {
        let path = secrets_path(dir);
        let text = std::fs::read_to_string(&path).with_context(|| {
            format!(
                "reading {} (has `sless dev --data-dir {}` run?)",
                path.display(),
                dir.display()
            )
        })?;
        serde_json::from_str(&text).with_context(|| format!("parsing {}", path.display()))
    }

    pub fn load_or_create(dir: &Path) -> anyhow::Result<DevSecrets> {
        if secrets_path(dir).exists() {
            return DevSecrets::load(dir);
        }
        let s = DevSecrets {
            jwt_secret: sless_embedded::random_secret(),
            s3_access_key: sless_embedded::random_secret()[..20].to_uppercase(),
            s3_secret_key: sless_embedded::random_secret(),
        };
        let path = secrets_path(dir);
        std::fs::write(&path, serde_json::to_vec_pretty(&s)?)?;
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))?;
        Ok(s)
    }
}

/// The private PostgreSQL of data directory `dir`, its programs found and
/// run as `host` says (the `dev` section of the configuration).
pub async fn postgres(dir: &Path, host: PostgresHost) -> anyhow::Result<PrivatePostgres> {
    let opts = PostgresOptions {
        data_dir: dir.join("postgres"),
        port: None,
        settings: vec![],
        // Functions share the machine's network: none of them can reach a
        // socket in the data directory.
        socket_only: true,
    };
    PrivatePostgres::start_with(opts, host)
        .await
        .context("starting the private PostgreSQL")
}

pub async fn s3(dir: &Path, secrets: &DevSecrets) -> anyhow::Result<(S3Server, S3Config)> {
    let root = dir.join("s3");
    std::fs::create_dir_all(&root)?;
    let server = S3Server::start(
        &root,
        0,
        "sless",
        &secrets.s3_access_key,
        &secrets.s3_secret_key,
    )
    .await
    .context("starting the embedded S3 server")?;
    let cfg = S3Config {
        endpoint: Some(server.endpoint()),
        region: "us-east-1".into(),
        bucket: "sless".into(),
        access_key: secrets.s3_access_key.clone(),
        secret_key: secrets.s3_secret_key.clone(),
        force_path_style: true,
        presign_endpoint: None,
    };
    Ok((server, cfg))
}
