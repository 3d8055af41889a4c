//! Where state is kept: PostgreSQL (`DATABASE_URL`) and S3 (`S3_*`).

use anyhow::{Context, bail};
use sless_store::blobs::S3Config;

use super::Get;
use super::source::var;

/// The database of the event log, the work queue and the read models.
#[derive(Debug, Clone, Default)]
pub struct Database {
    /// `DATABASE_URL`; `None`: `sless dev` and `serve` run their own.
    pub url: Option<String>,
}

impl Database {
    pub fn from_env() -> Database {
        Database::from(&var)
    }

    fn from(get: Get<'_>) -> Database {
        Database {
            url: get("DATABASE_URL"),
        }
    }

    /// The URL, for the roles that run on a database of their own.
    pub fn require(&self) -> anyhow::Result<&str> {
        self.url
            .as_deref()
            .context("DATABASE_URL is not set (e.g. postgres://user:password@host:5432/sless)")
    }
}

/// The S3 bucket of zips, build contexts and version manifests, from
/// `S3_ENDPOINT`, `S3_BUCKET`, `S3_REGION`,
/// `S3_ACCESS_KEY_ID`/`AWS_ACCESS_KEY_ID`,
/// `S3_SECRET_ACCESS_KEY`/`AWS_SECRET_ACCESS_KEY` and `S3_FORCE_PATH_STYLE`.
#[derive(Debug, Clone)]
pub struct Blobs {
    /// `None` when `S3_ENDPOINT` and `S3_BUCKET` are both unset: `sless dev`
    /// and `serve` run their own S3 server.
    pub s3: Option<S3Config>,
}

impl Blobs {
    pub fn from_env() -> anyhow::Result<Blobs> {
        Blobs::from(&var)
    }

    fn from(get: Get<'_>) -> anyhow::Result<Blobs> {
        let endpoint = get("S3_ENDPOINT");
        let bucket = get("S3_BUCKET");
        if endpoint.is_none() && bucket.is_none() {
            return Ok(Blobs { s3: None });
        }
        let access_key = get("S3_ACCESS_KEY_ID").or_else(|| get("AWS_ACCESS_KEY_ID"));
        let secret_key = get("S3_SECRET_ACCESS_KEY").or_else(|| get("AWS_SECRET_ACCESS_KEY"));
        let (Some(access_key), Some(secret_key)) = (access_key, secret_key) else {
            bail!(
                "S3 is configured but S3_ACCESS_KEY_ID and S3_SECRET_ACCESS_KEY are not both set"
            );
        };
        Ok(Blobs {
            s3: Some(S3Config {
                force_path_style: get("S3_FORCE_PATH_STYLE")
                    .map(|v| v != "false")
                    .unwrap_or(endpoint.is_some()),
                endpoint,
                region: get("S3_REGION").unwrap_or_else(|| "us-east-1".into()),
                bucket: bucket.unwrap_or_else(|| "sless".into()),
                access_key,
                secret_key,
            }),
        })
    }

    /// The bucket, for the roles that run on one of their own.
    pub fn require(self) -> anyhow::Result<S3Config> {
        self.s3.context("S3_ENDPOINT / S3_BUCKET are not set")
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn table(vars: &[(&str, &str)]) -> HashMap<String, String> {
        vars.iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn s3_is_unset_without_endpoint_and_bucket_and_needs_both_keys() {
        let vars = table(&[]);
        assert!(Blobs::from(&|n| vars.get(n).cloned()).unwrap().s3.is_none());
        let vars = table(&[("S3_BUCKET", "b"), ("AWS_ACCESS_KEY_ID", "ak")]);
        let e = Blobs::from(&|n| vars.get(n).cloned()).unwrap_err();
        assert!(e.to_string().contains("S3_SECRET_ACCESS_KEY"), "{e}");
        let vars = table(&[
            ("S3_ENDPOINT", "http://127.0.0.1:9000"),
            ("S3_ACCESS_KEY_ID", "ak"),
            ("AWS_SECRET_ACCESS_KEY", "sk"),
        ]);
        let s3 = Blobs::from(&|n| vars.get(n).cloned()).unwrap().s3.unwrap();
        assert_eq!(
            (s3.bucket.as_str(), s3.region.as_str()),
            ("sless", "us-east-1")
        );
        assert!(s3.force_path_style, "an endpoint of its own is path-style");
        let vars = table(&[]);
        let e = Database::from(&|n| vars.get(n).cloned())
            .require()
            .unwrap_err();
        assert!(e.to_string().starts_with("DATABASE_URL is not set"), "{e}");
    }
}
