//! Bearer tokens (JWT) and the namespace a token may act in.
//!
//! The algorithm is pinned by configuration (`TokenAlgorithm`), never taken
//! from a token: HS256 with a shared secret, or RS256/ES256 with PEM public
//! keys and/or a JSON Web Key Set (`keys`). Before any key is tried, a token
//! must pass checks that cost no cryptography (`token`): at most 8 KiB,
//! three base64url segments, a JSON header naming the pinned algorithm, a
//! key id that is a short plain identifier. Then its signature, `exp` (always
//! required), `nbf`, and `iss`/`aud` when configured are checked with at
//! most 60 s of leeway, and `sub` must be a non-empty string.
//!
//! A token's namespace is `"sless-" + hex(sha256(sub)[0..8])`. A token acts
//! only in its own namespace, unless its admin claim is `true`; any other
//! namespace answers 404, as if it did not exist.
//!
//! Every refusal is a 401 problem document with a `WWW-Authenticate: Bearer`
//! header, whose detail says why without repeating the token.

pub mod algorithm;
pub mod keys;
pub mod token;

use std::sync::Arc;
use std::time::Duration;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, EncodingKey, Header, Validation};
use serde_json::{Map, Value};
use sless_domain::Namespace;

use crate::AppState;
use crate::plumbing::error::ApiError;

pub use algorithm::TokenAlgorithm;
pub use keys::{JwksReport, KeyError, KeySet};

/// The claim that lets a token act in any namespace, unless configured otherwise.
pub const DEFAULT_ADMIN_CLAIM: &str = "sless_admin";

/// The most leeway `exp` and `nbf` get, and the default.
pub const MAX_LEEWAY: Duration = Duration::from_secs(60);

/// What tokens must say, besides being signed by a configured key.
#[derive(Debug, Clone)]
pub struct AuthSettings {
    /// Accepted issuers; when any is set, `iss` is required and must be one.
    pub issuers: Vec<String>,
    /// Accepted audiences; when any is set, `aud` is required and must
    /// name one of them.
    pub audiences: Vec<String>,
    /// The claim that, when `true`, lets a token act in any namespace.
    pub admin_claim: String,
    /// Clock skew allowed on `exp` and `nbf`; at most `MAX_LEEWAY`.
    pub leeway: Duration,
}

impl Default for AuthSettings {
    fn default() -> Self {
        AuthSettings {
            issuers: Vec::new(),
            audiences: Vec::new(),
            admin_claim: DEFAULT_ADMIN_CLAIM.into(),
            leeway: MAX_LEEWAY,
        }
    }
}

/// Token checking, from configuration only.
#[derive(Clone)]
pub struct Auth {
    inner: Arc<Inner>,
}

struct Inner {
    keys: KeySet,
    settings: AuthSettings,
    validation: Validation,
    /// The signature alone: what `signed_here` checks.
    signature_only: Validation,
}

/// Names the algorithm and settings, never a key.
impl std::fmt::Debug for Auth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Auth")
            .field("algorithm", &self.algorithm())
            .field("settings", &self.inner.settings)
            .finish_non_exhaustive()
    }
}

/// The problem kind of a token refused because the instance runs without
/// a sandbox and serves one user only.
pub const SANDBOX_DISABLED: &str = "sandbox-disabled";

/// Claims no admin claim may be named after.
const REGISTERED_CLAIMS: [&str; 7] = ["iss", "sub", "aud", "exp", "nbf", "iat", "jti"];

impl Auth {
    /// Checks tokens of `keys`' algorithm against `settings`.
    pub fn new(keys: KeySet, settings: AuthSettings) -> Result<Auth, KeyError> {
        if keys.is_empty() {
            return Err(KeyError::NoKeys(keys.algorithm()));
        }
        let leeway = settings.leeway.as_secs();
        if settings.leeway > MAX_LEEWAY {
            return Err(KeyError::Leeway(leeway));
        }
        let claim = settings.admin_claim.as_str();
        if claim.is_empty() {
            return Err(KeyError::AdminClaim(claim.into(), "it is empty"));
        }
        if REGISTERED_CLAIMS.contains(&claim) {
            return Err(KeyError::AdminClaim(
                claim.into(),
                "it is a registered JWT claim",
            ));
        }
        if settings.issuers.iter().any(String::is_empty) {
            return Err(KeyError::EmptyClaimValue("issuer"));
        }
        if settings.audiences.iter().any(String::is_empty) {
            return Err(KeyError::EmptyClaimValue("audience"));
        }

        let mut validation = Validation::new(keys.algorithm().jwt());
        validation.leeway = leeway;
        validation.validate_exp = true;
        validation.validate_nbf = true;
        // jsonwebtoken checks iss/aud only when the token has them: a
        // configured issuer or audience must also be a required claim.
        let mut required = vec!["exp", "sub"];
        if !settings.issuers.is_empty() {
            validation.set_issuer(&settings.issuers);
            required.push("iss");
        }
        if settings.audiences.is_empty() {
            validation.validate_aud = false;
        } else {
            validation.set_audience(&settings.audiences);
            required.push("aud");
        }
        validation.set_required_spec_claims(&required);
        let mut signature_only = Validation::new(keys.algorithm().jwt());
        signature_only.validate_exp = false;
        signature_only.validate_nbf = false;
        signature_only.validate_aud = false;
        signature_only.set_required_spec_claims::<&str>(&[]);
        Ok(Auth {
            inner: Arc::new(Inner {
                keys,
                settings,
                validation,
                signature_only,
            }),
        })
    }

    /// HS256 with a shared secret (development, and single-tenant setups).
    /// Panics on an empty secret or an empty issuer or audience; settings
    /// from outside go through `Auth::new`, which says what is wrong.
    pub fn hs256(secret: &[u8], issuer: Option<&str>, audience: Option<&str>) -> Auth {
        let mut keys = KeySet::new(TokenAlgorithm::Hs256);
        keys.add_secret(secret).expect("an HS256 secret");
        let settings = AuthSettings {
            issuers: issuer.map(str::to_owned).into_iter().collect(),
            audiences: audience.map(str::to_owned).into_iter().collect(),
            ..AuthSettings::default()
        };
        Auth::new(keys, settings).expect("valid HS256 settings")
    }

    /// The pinned algorithm.
    pub fn algorithm(&self) -> TokenAlgorithm {
        self.inner.keys.algorithm()
    }

    pub fn settings(&self) -> &AuthSettings {
        &self.inner.settings
    }

    /// Who `token` speaks for, or why it is refused (401).
    pub fn verify(&self, token: &str) -> Result<Caller, ApiError> {
        self.check(token).map_err(|reason| {
            tracing::debug!(%reason, "token refused");
            ApiError::unauthorized(reason)
        })
    }

    /// Whether `token` is signed by one of the configured keys, whatever
    /// its claims say (expired, not yet valid, for another audience): a
    /// credential of this instance, which the invoke proxy never hands to a
    /// function. Costs no cryptography for a token of another issuer's
    /// shape (another algorithm, a key id not configured).
    pub fn signed_here(&self, token: &str) -> bool {
        let Ok(inspected) = token::inspect(token, self.algorithm()) else {
            return false;
        };
        let keys::Chosen::Keys(candidates) = self.inner.keys.choose(inspected.kid.as_deref())
        else {
            return false;
        };
        candidates.iter().any(|key| {
            jsonwebtoken::decode::<Map<String, Value>>(token, key, &self.inner.signature_only)
                .is_ok()
        })
    }

    fn check(&self, token: &str) -> Result<Caller, String> {
        let inspected = token::inspect(token, self.algorithm()).map_err(|m| m.to_string())?;
        let candidates = match self.inner.keys.choose(inspected.kid.as_deref()) {
            keys::Chosen::Keys(keys) => keys,
            keys::Chosen::UnknownKid => {
                return Err("the token's key id (kid) names no configured key".into());
            }
            keys::Chosen::KidNeeded => {
                return Err("the token names no key (kid), and several keys are configured".into());
            }
        };
        for key in candidates {
            match jsonwebtoken::decode::<Map<String, Value>>(token, key, &self.inner.validation) {
                Ok(data) => return self.caller(&data.claims),
                // Another configured key may have signed it.
                Err(e) if *e.kind() == ErrorKind::InvalidSignature => continue,
                Err(e) => return Err(describe(e.kind())),
            }
        }
        Err(describe(&ErrorKind::InvalidSignature))
    }

    fn caller(&self, claims: &Map<String, Value>) -> Result<Caller, String> {
        let sub = match claims.get("sub") {
            Some(Value::String(s)) if !s.is_empty() => s,
            Some(Value::String(_)) => return Err("the token's subject (sub) is empty".into()),
            _ => return Err("the token's subject (sub) is not a string".into()),
        };
        let admin = claims.get(&self.inner.settings.admin_claim) == Some(&Value::Bool(true));
        Ok(Caller {
            sub: sub.clone(),
            namespace: Namespace::for_subject(sub),
            admin,
        })
    }

    /// Signs a token this `Auth` accepts, for `sub`, valid for `valid_for`,
    /// carrying the first configured issuer and audience and, with `admin`,
    /// the admin claim. Only with HS256: a server holds no private key.
    pub fn issue(&self, sub: &str, valid_for: Duration, admin: bool) -> Option<String> {
        let secret = self.inner.keys.secret()?;
        let settings = &self.inner.settings;
        let now = chrono::Utc::now().timestamp();
        let mut claims = Map::new();
        claims.insert("sub".into(), sub.into());
        claims.insert("iat".into(), now.into());
        claims.insert("exp".into(), (now + valid_for.as_secs() as i64).into());
        if let Some(iss) = settings.issuers.first() {
            claims.insert("iss".into(), iss.as_str().into());
        }
        if let Some(aud) = settings.audiences.first() {
            claims.insert("aud".into(), aud.as_str().into());
        }
        if admin {
            claims.insert(settings.admin_claim.clone(), true.into());
        }
        Some(sign_hs256(secret, &Value::Object(claims)))
    }
}

/// The detail of a refusal found by the verifier.
fn describe(kind: &ErrorKind) -> String {
    match kind {
        ErrorKind::InvalidSignature => {
            "the token's signature does not verify with any configured key".into()
        }
        ErrorKind::ExpiredSignature => "the token has expired (exp)".into(),
        ErrorKind::ImmatureSignature => "the token is not valid yet (nbf)".into(),
        ErrorKind::InvalidAudience => "the token is not meant for this server (aud)".into(),
        ErrorKind::InvalidIssuer => "the token's issuer (iss) is not accepted".into(),
        ErrorKind::MissingRequiredClaim(claim) => {
            format!("the token has no valid {claim} claim")
        }
        ErrorKind::InvalidClaimFormat(claim) => format!("the token's {claim} claim is malformed"),
        ErrorKind::Json(_) | ErrorKind::Utf8(_) | ErrorKind::Base64(_) => {
            "the token's claims are not a JSON object".into()
        }
        _ => "the token was refused".into(),
    }
}

fn sign_hs256(secret: &[u8], claims: &Value) -> String {
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        claims,
        &EncodingKey::from_secret(secret),
    )
    .expect("HS256 signing cannot fail")
}

/// Signs an HS256 token for `sub`, valid for `valid_for`.
pub fn issue_hs256(secret: &[u8], sub: &str, valid_for: Duration) -> String {
    let now = chrono::Utc::now().timestamp();
    let claims = serde_json::json!({
        "sub": sub,
        "iat": now,
        "exp": now + valid_for.as_secs() as i64,
    });
    sign_hs256(secret, &claims)
}

/// Who is calling.
#[derive(Debug, Clone)]
pub struct Caller {
    pub sub: String,
    pub namespace: Namespace,
    pub admin: bool,
}

impl Caller {
    /// Refuses (403) a caller that is not an administrator: the route
    /// `uri` names no namespace.
    pub fn admin_only(&self, uri: &axum::http::Uri) -> Result<(), ApiError> {
        if self.admin {
            return Ok(());
        }
        Err(ApiError::forbidden(format!(
            "{} is for admin tokens only",
            uri.path()
        )))
    }

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

/// A request without acceptable credentials: the 401 problem document, with
/// the `WWW-Authenticate` challenge of RFC 6750.
#[derive(Debug)]
pub struct Unauthorized {
    pub error: ApiError,
    /// Whether a token was presented (`error="invalid_token"`) or none.
    pub token_presented: bool,
}

impl IntoResponse for Unauthorized {
    fn into_response(self) -> Response {
        let challenge = if self.token_presented {
            r#"Bearer realm="sless", error="invalid_token""#
        } else {
            r#"Bearer realm="sless""#
        };
        let mut res = self.error.into_response();
        res.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static(challenge),
        );
        res
    }
}

impl From<Unauthorized> for ApiError {
    fn from(u: Unauthorized) -> ApiError {
        u.error
    }
}

/// The token of an `Authorization: Bearer <token>` header (scheme in any case).
fn bearer(parts: &Parts) -> Result<&str, Unauthorized> {
    let refused = |detail: &str, token_presented| Unauthorized {
        error: ApiError::unauthorized(detail),
        token_presented,
    };
    let Some(value) = parts.headers.get(header::AUTHORIZATION) else {
        return Err(refused(
            "an Authorization: Bearer <token> header is required",
            false,
        ));
    };
    value
        .to_str()
        .ok()
        .and_then(|h| h.split_once(' '))
        .filter(|(scheme, _)| scheme.eq_ignore_ascii_case("bearer"))
        .map(|(_, token)| token.trim())
        .filter(|t| !t.is_empty())
        .ok_or_else(|| refused("the Authorization header must be 'Bearer <token>'", true))
}

impl FromRequestParts<AppState> for Caller {
    type Rejection = Unauthorized;

    async fn from_request_parts(
        parts: &mut Parts,
        state: &AppState,
    ) -> Result<Self, Self::Rejection> {
        let token = bearer(parts)?;
        let caller = state.auth.verify(token).map_err(|error| Unauthorized {
            error,
            token_presented: true,
        })?;
        if let Some(only) = &state.only_namespace
            && caller.namespace != *only
        {
            return Err(Unauthorized {
                error: ApiError::new(
                    StatusCode::FORBIDDEN,
                    SANDBOX_DISABLED,
                    "One user only",
                    format!(
                        "this instance runs functions without a sandbox (--unsafe-no-sandbox), \
                         as the user that runs it, so it serves one user only ({only}); the \
                         token of {:?} is refused. Start it without --unsafe-no-sandbox to \
                         serve several users",
                        caller.sub
                    ),
                ),
                token_presented: true,
            });
        }
        Ok(caller)
    }
}
