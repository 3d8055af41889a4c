//! Tokens: how `/v1` requests are authenticated, from `SLESS_JWT_ALGORITHM`,
//! `SLESS_JWT_SECRET`, `SLESS_JWT_PUBLIC_KEY_FILE`, `SLESS_JWKS_FILE`,
//! `SLESS_JWT_ISSUER`, `SLESS_JWT_AUDIENCE`, `SLESS_JWT_ADMIN_CLAIM` and
//! `SLESS_JWT_LEEWAY_SECS` (docs/configuration.md, "Tokens"). Key files are
//! read by [`TokenSettings::auth`].

use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use sless_api::Auth;
use sless_api::plumbing::auth::{
    AuthSettings, DEFAULT_ADMIN_CLAIM, KeyError, KeySet, MAX_LEEWAY, TokenAlgorithm,
};

use super::Get;
use super::source::var;

/// How tokens are checked, before the key files are read.
#[derive(Debug, Clone)]
pub struct TokenSettings {
    pub algorithm: TokenAlgorithm,
    secret: Option<String>,
    public_key_files: Vec<PathBuf>,
    jwks_file: Option<PathBuf>,
    settings: AuthSettings,
}

impl TokenSettings {
    pub fn from_env() -> anyhow::Result<TokenSettings> {
        TokenSettings::from(&var)
    }

    pub(super) fn from(get: Get<'_>) -> anyhow::Result<TokenSettings> {
        read(get)
    }
}

fn read(get: Get<'_>) -> anyhow::Result<TokenSettings> {
    let list = |name: &str| -> Vec<String> {
        get(name)
            .map(|v| {
                v.split(',')
                    .map(str::trim)
                    .filter(|s| !s.is_empty())
                    .map(str::to_owned)
                    .collect()
            })
            .unwrap_or_default()
    };
    let algorithm = match get("SLESS_JWT_ALGORITHM") {
        None => TokenAlgorithm::Hs256,
        Some(v) => v
            .parse()
            .map_err(|e| anyhow::anyhow!("SLESS_JWT_ALGORITHM: {e}"))?,
    };
    let leeway = match get("SLESS_JWT_LEEWAY_SECS") {
        None => MAX_LEEWAY.as_secs(),
        Some(v) => v.parse::<u64>().map_err(|e| {
            anyhow::anyhow!("SLESS_JWT_LEEWAY_SECS={v:?} is not a number of seconds: {e}")
        })?,
    };
    if leeway > MAX_LEEWAY.as_secs() {
        bail!("SLESS_JWT_LEEWAY_SECS={leeway} is more than the 60 s allowed");
    }
    let secret = get("SLESS_JWT_SECRET");
    let public_key_files: Vec<PathBuf> = list("SLESS_JWT_PUBLIC_KEY_FILE")
        .into_iter()
        .map(PathBuf::from)
        .collect();
    let jwks_file = get("SLESS_JWKS_FILE").map(PathBuf::from);
    if algorithm == TokenAlgorithm::Hs256 {
        for (name, set) in [
            ("SLESS_JWT_PUBLIC_KEY_FILE", !public_key_files.is_empty()),
            ("SLESS_JWKS_FILE", jwks_file.is_some()),
        ] {
            if set {
                bail!(
                    "{name} is set, but SLESS_JWT_ALGORITHM is HS256 (its default), which checks \
                     tokens with SLESS_JWT_SECRET: set SLESS_JWT_ALGORITHM=RS256 or ES256 to check \
                     them with public keys"
                );
            }
        }
    } else {
        if secret.is_some() {
            bail!(
                "SLESS_JWT_SECRET is set, but SLESS_JWT_ALGORITHM={algorithm} checks tokens with \
                 public keys only: unset SLESS_JWT_SECRET"
            );
        }
        if public_key_files.is_empty() && jwks_file.is_none() {
            bail!(
                "SLESS_JWT_ALGORITHM={algorithm} needs SLESS_JWT_PUBLIC_KEY_FILE (PEM public keys, \
                 comma-separated files) or SLESS_JWKS_FILE (a JSON Web Key Set), or both"
            );
        }
    }
    let admin_claim = get("SLESS_JWT_ADMIN_CLAIM").unwrap_or_else(|| DEFAULT_ADMIN_CLAIM.into());
    Ok(TokenSettings {
        algorithm,
        secret,
        public_key_files,
        jwks_file,
        settings: AuthSettings {
            issuers: list("SLESS_JWT_ISSUER"),
            audiences: list("SLESS_JWT_AUDIENCE"),
            admin_claim,
            leeway: Duration::from_secs(leeway),
        },
    })
}

/// The shortest HS256 secret accepted: 256 bits.
pub const MIN_SECRET_BYTES: usize = 32;

impl TokenSettings {
    /// Whether `SLESS_JWT_SECRET` is set.
    pub fn has_secret(&self) -> bool {
        self.secret.is_some()
    }

    /// The token checker, with its key files read and checked. `dev_secret`
    /// is the HS256 secret of `sless dev`'s data directory, used when
    /// `SLESS_JWT_SECRET` is not set; without one HS256 needs that variable.
    pub fn auth(&self, dev_secret: Option<&str>) -> anyhow::Result<Auth> {
        let mut keys = KeySet::new(self.algorithm);
        if self.algorithm == TokenAlgorithm::Hs256 {
            let secret = self.secret.as_deref().or(dev_secret).context(
                "SLESS_JWT_SECRET is not set: HS256 (the default SLESS_JWT_ALGORITHM) checks \
                 tokens with that shared secret; or set SLESS_JWT_ALGORITHM=RS256 or ES256 with \
                 SLESS_JWT_PUBLIC_KEY_FILE or SLESS_JWKS_FILE",
            )?;
            if secret.len() < MIN_SECRET_BYTES {
                bail!(
                    "SLESS_JWT_SECRET has {} bytes: an HS256 secret needs at least \
                     {MIN_SECRET_BYTES} (256 bits; e.g. openssl rand -hex 32)",
                    secret.len()
                );
            }
            keys.add_secret(secret.as_bytes())
                .map_err(|e| anyhow::anyhow!("SLESS_JWT_SECRET: {e}"))?;
        }
        for path in &self.public_key_files {
            let pem = std::fs::read(path).with_context(|| {
                format!("SLESS_JWT_PUBLIC_KEY_FILE: cannot read {}", path.display())
            })?;
            let n = keys.add_pem(&pem).map_err(|e| {
                anyhow::anyhow!("SLESS_JWT_PUBLIC_KEY_FILE: {}: {e}", path.display())
            })?;
            tracing::info!(file = %path.display(), keys = n, "token public keys loaded");
        }
        if let Some(path) = &self.jwks_file {
            let json = std::fs::read(path)
                .with_context(|| format!("SLESS_JWKS_FILE: cannot read {}", path.display()))?;
            let report = keys
                .add_jwks(&json)
                .map_err(|e| anyhow::anyhow!("SLESS_JWKS_FILE: {}: {e}", path.display()))?;
            tracing::info!(file = %path.display(), keys = ?report.kept, "token key set loaded");
            for skipped in &report.skipped {
                tracing::warn!(file = %path.display(), key = %skipped, "a key of the set is not used");
            }
        }
        Auth::new(keys, self.settings.clone()).map_err(|e| match e {
            KeyError::AdminClaim(..) => anyhow::anyhow!("SLESS_JWT_ADMIN_CLAIM: {e}"),
            other => anyhow::anyhow!("token settings (SLESS_JWT_*): {other}"),
        })
    }
}
