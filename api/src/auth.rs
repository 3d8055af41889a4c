//! Bearer tokens (JWT) and the namespace a token may act in.
//!
//! A token's namespace is `"sless-" + hex(sha256(sub)[0..8])`. A token acts
//! only in its own namespace, unless it carries the admin claim; any other
//! namespace answers 404, as if it did not exist.

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use sless_domain::Namespace;

use crate::AppState;
use crate::error::ApiError;

/// Token checking, from configuration only.
#[derive(Clone)]
pub struct Auth {
    decoding: DecodingKey,
    validation: Validation,
    /// Claim that, when `true`, lets a token act in any namespace.
    admin_claim: String,
}

impl Auth {
    /// HS256 with a shared secret (development, and single-tenant setups).
    pub fn hs256(secret: &[u8], issuer: Option<&str>, audience: Option<&str>) -> Auth {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 60;
        validation.validate_nbf = true;
        // jsonwebtoken checks iss/aud only when the token has them: a
        // configured issuer or audience must also be a required claim.
        let mut required = vec!["exp", "sub"];
        if let Some(iss) = issuer {
            validation.set_issuer(&[iss]);
            required.push("iss");
        }
        match audience {
            Some(aud) => {
                validation.set_audience(&[aud]);
                required.push("aud");
            }
            None => validation.validate_aud = false,
        }
        validation.set_required_spec_claims(&required);
        Auth {
            decoding: DecodingKey::from_secret(secret),
            validation,
            admin_claim: "sless_admin".into(),
        }
    }

    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        let data = jsonwebtoken::decode::<serde_json::Map<String, serde_json::Value>>(
            token,
            &self.decoding,
            &self.validation,
        )
        .map_err(|e| ApiError::unauthorized(format!("the token was refused: {e}")))?;
        let sub = data
            .claims
            .get("sub")
            .and_then(|s| s.as_str())
            .filter(|s| !s.is_empty())
            .ok_or_else(|| ApiError::unauthorized("the token has no subject (sub)"))?;
        let admin = data
            .claims
            .get(&self.admin_claim)
            .and_then(|a| a.as_bool())
            .unwrap_or(false);
        Ok(Caller {
            sub: sub.to_owned(),
            namespace: Namespace::for_subject(sub),
            admin,
        })
    }
}

/// Claims of a token sless issues for development.
#[derive(Debug, Serialize, Deserialize)]
struct DevClaims {
    sub: String,
    iat: i64,
    exp: i64,
}

/// Signs an HS256 token for `sub`, valid for `valid_for`.
pub fn issue_hs256(secret: &[u8], sub: &str, valid_for: std::time::Duration) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims = DevClaims {
        sub: sub.to_owned(),
        iat: now,
        exp: now + valid_for.as_secs() as i64,
    };
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims,
        &EncodingKey::from_secret(secret),
    )
    .expect("HS256 signing cannot fail")
}

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Caller {
    pub sub: String,
    pub namespace: Namespace,
    pub admin: bool,
}

impl Caller {
    /// The namespace of the path, if this caller may act in it; otherwise
    /// not found (another user's namespace is not acknowledged to exist).
    pub fn namespace(&self, path_ns: &str) -> Result<Namespace, ApiError> {
        let hidden = || ApiError::not_found(format!("namespace {path_ns:?} not found"));
        let ns = Namespace::parse(path_ns).map_err(|_| hidden())?;
        if ns == self.namespace || self.admin {
            Ok(ns)
        } else {
            Err(hidden())
        }
    }
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = ApiError;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let header = parts
            .headers
            .get(axum::http::header::AUTHORIZATION)
            .ok_or_else(|| {
                ApiError::unauthorized("an Authorization: Bearer <token> header is required")
            })?;
        let token = header
            .to_str()
            .ok()
            .and_then(|h| {
                h.strip_prefix("Bearer ")
                    .or_else(|| h.strip_prefix("bearer "))
            })
            .map(str::trim)
            .filter(|t| !t.is_empty())
            .ok_or_else(|| {
                ApiError::unauthorized("the Authorization header must be 'Bearer <token>'")
            })?;
        state.auth.verify(token)
    }
}
