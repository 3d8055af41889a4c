//! The signing algorithms a deployment can pin for its tokens.

use jsonwebtoken::Algorithm;

/// The algorithms a deployment can pin.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum TokenAlgorithm {
    /// HMAC with SHA-256 and a shared secret: `sless dev`, single-tenant setups.
    Hs256,
    /// RSASSA-PKCS1-v1_5 with SHA-256: RSA public keys.
    Rs256,
    /// ECDSA on P-256 with SHA-256: P-256 public keys.
    Es256,
}

impl TokenAlgorithm {
    /// The `alg` a token's header carries.
    pub fn name(self) -> &'static str {
        match self {
            TokenAlgorithm::Hs256 => "HS256",
            TokenAlgorithm::Rs256 => "RS256",
            TokenAlgorithm::Es256 => "ES256",
        }
    }

    pub fn jwt(self) -> Algorithm {
        match self {
            TokenAlgorithm::Hs256 => Algorithm::HS256,
            TokenAlgorithm::Rs256 => Algorithm::RS256,
            TokenAlgorithm::Es256 => Algorithm::ES256,
        }
    }

    /// The kind of key the algorithm needs.
    pub(super) fn key_kind(self) -> &'static str {
        match self {
            TokenAlgorithm::Hs256 => "shared secret",
            TokenAlgorithm::Rs256 => "RSA public key",
            TokenAlgorithm::Es256 => "P-256 public key",
        }
    }

    /// The same, with its article.
    pub(super) fn a_key_kind(self) -> &'static str {
        match self {
            TokenAlgorithm::Hs256 => "a shared secret",
            TokenAlgorithm::Rs256 => "an RSA public key",
            TokenAlgorithm::Es256 => "a P-256 public key",
        }
    }
}

impl std::fmt::Display for TokenAlgorithm {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}
