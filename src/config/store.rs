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
/// `S3_SECRET_ACCESS_KEY`/`AWS_SECRET_ACCESS_KEY`, `S3_FORCE_PATH_STYLE`
/// and `S3_PRESIGN_ENDPOINT`.
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
        let presign_endpoint = get("S3_PRESIGN_ENDPOINT")
            .map(|url| origin(&url))
            .transpose()?;
        if endpoint.is_none() && bucket.is_none() {
            if presign_endpoint.is_some() {
                bail!(
                    "S3_PRESIGN_ENDPOINT is set, but S3_ENDPOINT and S3_BUCKET are not: \
                     the S3 server sless runs itself has no other address to sign for"
                );
            }
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
                presign_endpoint,
            }),
        })
    }

    /// The bucket, for the roles that run on one of their own.
    pub fn require(self) -> anyhow::Result<S3Config> {
        self.s3.context("S3_ENDPOINT / S3_BUCKET are not set")
    }
}

/// `S3_PRESIGN_ENDPOINT` as the S3 client takes it: `http://` or
/// `https://`, a host and a port, nothing else. A path would be signed
/// as part of the URL, and the object store would see another one.
fn origin(url: &str) -> anyhow::Result<String> {
    let bad = |why: &str| anyhow::anyhow!("S3_PRESIGN_ENDPOINT={url:?} {why}");
    let uri: axum::http::Uri = url.parse().map_err(|_| bad("is not a URL"))?;
    let scheme = match uri.scheme_str() {
        Some(scheme @ ("http" | "https")) => scheme,
        _ => return Err(bad("must start with http:// or https://")),
    };
    let authority = uri.authority().ok_or_else(|| bad("names no host"))?;
    if authority.host().is_empty() || authority.as_str().contains('@') {
        return Err(bad("must name a host, without credentials"));
    }
    if !matches!(uri.path(), "" | "/") || uri.query().is_some() {
        return Err(bad(
            "must have no path or query: the object store must see the path the URL was signed for",
        ));
    }
    Ok(format!("{scheme}://{authority}"))
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
        assert_eq!(
            s3.presign_endpoint, None,
            "presigned URLs name the endpoint"
        );
        let vars = table(&[]);
        let e = Database::from(&|n| vars.get(n).cloned())
            .require()
            .unwrap_err();
        assert!(e.to_string().starts_with("DATABASE_URL is not set"), "{e}");
    }

    #[test]
    fn a_presign_endpoint_is_an_origin_and_needs_s3_configured() {
        let with = |presign: &str| {
            let vars = table(&[
                ("S3_ENDPOINT", "http://127.0.0.1:9000"),
                ("S3_ACCESS_KEY_ID", "ak"),
                ("S3_SECRET_ACCESS_KEY", "sk"),
                ("S3_PRESIGN_ENDPOINT", presign),
            ]);
            Blobs::from(&|n| vars.get(n).cloned()).map(|b| b.s3.unwrap())
        };
        for (given, read) in [
            ("https://10.244.0.1:9443", "https://10.244.0.1:9443"),
            ("https://s3.builds.example/", "https://s3.builds.example"),
            ("http://[fd00::1]:9000", "http://[fd00::1]:9000"),
        ] {
            let s3 = with(given).unwrap();
            assert_eq!(s3.presign_endpoint.as_deref(), Some(read), "{given}");
            assert_eq!(s3.endpoint.as_deref(), Some("http://127.0.0.1:9000"));
        }
        for bad in [
            "10.244.0.1:9443",
            "ftp://10.244.0.1",
            "https://user:pw@10.244.0.1:9443",
            "https://10.244.0.1:9443/s3",
            "https://10.244.0.1:9443/?x=1",
            "https://",
            "not a url",
        ] {
            let e = with(bad).unwrap_err().to_string();
            assert!(e.starts_with("S3_PRESIGN_ENDPOINT="), "{bad}: {e}");
        }
        let vars = table(&[("S3_PRESIGN_ENDPOINT", "https://10.244.0.1:9443")]);
        let e = Blobs::from(&|n| vars.get(n).cloned()).unwrap_err();
        assert!(
            e.to_string().starts_with("S3_PRESIGN_ENDPOINT is set"),
            "{e}"
        );
    }
}
