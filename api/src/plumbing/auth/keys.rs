//! The keys tokens are checked with, from configuration: a shared secret
//! (HS256), PEM public keys, and a JSON Web Key Set (RS256, ES256).
//!
//! Loading refuses what cannot serve the pinned algorithm (a private key, a
//! certificate, an RSA key for ES256, a P-384 key, a set with no key of the
//! pinned type), so a misconfiguration stops the process at start instead
//! of refusing every token later. Keys hold no names of environment
//! variables: the binary adds those to the errors.

use std::collections::HashMap;
use std::str::FromStr;

use jsonwebtoken::{Algorithm, DecodingKey};
use serde_json::Value;

use super::algorithm::TokenAlgorithm;
use super::token::{decode_base64url, is_plain_kid};

impl FromStr for TokenAlgorithm {
    type Err = KeyError;

    /// `HS256`, `RS256` or `ES256`, in any case.
    fn from_str(s: &str) -> Result<Self, KeyError> {
        match s.trim().to_ascii_uppercase().as_str() {
            "HS256" => Ok(TokenAlgorithm::Hs256),
            "RS256" => Ok(TokenAlgorithm::Rs256),
            "ES256" => Ok(TokenAlgorithm::Es256),
            _ => Err(KeyError::UnsupportedAlgorithm(s.to_owned())),
        }
    }
}

/// Why token configuration was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    #[error("{0:?} is not a supported algorithm: use HS256, RS256 or ES256")]
    UnsupportedAlgorithm(String),
    #[error("the shared secret is empty")]
    EmptySecret,
    #[error("{0} checks tokens with public keys, not a shared secret")]
    SecretForPublicKeys(TokenAlgorithm),
    #[error("HS256 checks tokens with a shared secret; public keys are for RS256 or ES256")]
    PublicKeysForHs256,
    #[error("{0} needs {kind}", kind = .0.a_key_kind())]
    NoKeys(TokenAlgorithm),
    #[error("not a PEM file: {0}")]
    NotPem(String),
    #[error(
        "PEM block {0} is a private key; give sless the public key only (openssl pkey -in KEY -pubout)"
    )]
    PrivateKey(usize),
    #[error(
        "PEM block {0} is a certificate; give sless its public key (openssl x509 -in CERT -pubkey -noout)"
    )]
    Certificate(usize),
    #[error("PEM block {block} holds {found}, but {alg} needs {want}", want = .alg.a_key_kind())]
    WrongKeyType {
        block: usize,
        found: &'static str,
        alg: TokenAlgorithm,
    },
    #[error("PEM block {block} is not {want}: {detail}", want = .alg.a_key_kind())]
    BadPem {
        block: usize,
        alg: TokenAlgorithm,
        detail: String,
    },
    #[error("not a JSON Web Key Set: {0}")]
    NotJwks(String),
    #[error("key {key} of the set is not {want}: {detail}", want = .alg.a_key_kind())]
    BadJwk {
        key: String,
        alg: TokenAlgorithm,
        detail: String,
    },
    #[error("kid {0:?} names more than one key of the set")]
    DuplicateKid(String),
    #[error("the set has no {want} for {alg}{skipped}", want = .alg.key_kind(),
        skipped = if .skipped.is_empty() { String::new() } else { format!(" (skipped: {})", .skipped.join("; ")) })]
    NoJwkForAlgorithm {
        alg: TokenAlgorithm,
        skipped: Vec<String>,
    },
    #[error("a leeway of {0} s is more than the 60 s allowed")]
    Leeway(u64),
    #[error("the admin claim {0:?} cannot be used: {1}")]
    AdminClaim(String, &'static str),
    #[error("an empty {0} cannot be required")]
    EmptyClaimValue(&'static str),
}

/// What loading a key set kept and what it passed over, for the log.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct JwksReport {
    /// The kids of the keys kept (`key N` for a key without one).
    pub kept: Vec<String>,
    /// Keys passed over, each with the reason.
    pub skipped: Vec<String>,
}

/// The keys of one pinned algorithm.
#[derive(Clone)]
pub struct KeySet {
    alg: TokenAlgorithm,
    /// The HS256 secret, kept to issue development tokens.
    secret: Option<Vec<u8>>,
    /// The secret or the PEM keys: tried in order, whatever the token's kid.
    fixed: Vec<DecodingKey>,
    /// Keys of a JWKS, by kid.
    by_kid: HashMap<String, DecodingKey>,
    /// Keys of a JWKS without a kid.
    unnamed: Vec<DecodingKey>,
}

/// Which keys to try for a token.
pub enum Chosen<'a> {
    Keys(&'a [DecodingKey]),
    /// The token names a key that the set does not have.
    UnknownKid,
    /// The token names no key, and a key set with several keys was given.
    KidNeeded,
}

impl KeySet {
    pub fn new(alg: TokenAlgorithm) -> KeySet {
        KeySet {
            alg,
            secret: None,
            fixed: Vec::new(),
            by_kid: HashMap::new(),
            unnamed: Vec::new(),
        }
    }

    pub fn algorithm(&self) -> TokenAlgorithm {
        self.alg
    }

    pub fn is_empty(&self) -> bool {
        self.fixed.is_empty() && self.by_kid.is_empty() && self.unnamed.is_empty()
    }

    /// The HS256 secret, when that is the pinned algorithm.
    pub fn secret(&self) -> Option<&[u8]> {
        self.secret.as_deref()
    }

    /// Sets the HS256 shared secret.
    pub fn add_secret(&mut self, secret: &[u8]) -> Result<(), KeyError> {
        if self.alg != TokenAlgorithm::Hs256 {
            return Err(KeyError::SecretForPublicKeys(self.alg));
        }
        if secret.is_empty() {
            return Err(KeyError::EmptySecret);
        }
        self.secret = Some(secret.to_vec());
        self.fixed = vec![DecodingKey::from_secret(secret)];
        Ok(())
    }

    /// Adds every public key of a PEM file (one or more blocks); returns how many.
    pub fn add_pem(&mut self, pem: &[u8]) -> Result<usize, KeyError> {
        if self.alg == TokenAlgorithm::Hs256 {
            return Err(KeyError::PublicKeysForHs256);
        }
        let text =
            std::str::from_utf8(pem).map_err(|_| KeyError::NotPem("it is not text".into()))?;
        let blocks = pem_blocks(text)?;
        let mut keys = Vec::with_capacity(blocks.len());
        for (i, (label, block)) in blocks.into_iter().enumerate() {
            keys.push(self.pem_key(i + 1, label, block)?);
        }
        let n = keys.len();
        self.fixed.extend(keys);
        Ok(n)
    }

    fn pem_key(&self, block: usize, label: &str, pem: &str) -> Result<DecodingKey, KeyError> {
        let alg = self.alg;
        let bad = |detail: &str| KeyError::BadPem {
            block,
            alg,
            detail: detail.into(),
        };
        let wrong = |found| KeyError::WrongKeyType { block, found, alg };
        match label {
            "PUBLIC KEY" | "RSA PUBLIC KEY" => {}
            l if l.ends_with("PRIVATE KEY") => return Err(KeyError::PrivateKey(block)),
            "CERTIFICATE" | "TRUSTED CERTIFICATE" => return Err(KeyError::Certificate(block)),
            _ => {
                return Err(bad(&format!(
                    "a PEM block of type {label:?} is not a public key"
                )));
            }
        }
        let pem = pem.as_bytes();
        let as_rsa = DecodingKey::from_rsa_pem(pem);
        let as_ec = DecodingKey::from_ec_pem(pem);
        match (alg, as_rsa, as_ec) {
            (TokenAlgorithm::Rs256, Ok(key), _) => Ok(key),
            (TokenAlgorithm::Rs256, Err(_), Ok(_)) => Err(wrong("an EC public key")),
            (TokenAlgorithm::Es256, _, Ok(key)) => {
                if key.as_bytes().len() != 65 {
                    // An uncompressed point is 1 + 2 × 32 bytes on P-256,
                    // 1 + 2 × 48 on P-384, 1 + 2 × 66 on P-521.
                    return Err(wrong("a public key on another curve than P-256"));
                }
                probe_ec(&key).map_err(|d| bad(&d))?;
                Ok(key)
            }
            (TokenAlgorithm::Es256, Ok(_), Err(_)) => Err(wrong("an RSA public key")),
            _ => Err(bad("the key does not parse")),
        }
    }

    /// Adds the keys of a JSON Web Key Set that fit the pinned algorithm:
    /// `kty` RSA (RS256) or EC on P-256 (ES256), `alg` absent or the pinned
    /// one, `use` absent or `sig`. Other keys are passed over and reported.
    pub fn add_jwks(&mut self, json: &[u8]) -> Result<JwksReport, KeyError> {
        if self.alg == TokenAlgorithm::Hs256 {
            return Err(KeyError::PublicKeysForHs256);
        }
        let doc: Value =
            serde_json::from_slice(json).map_err(|e| KeyError::NotJwks(e.to_string()))?;
        let keys = doc
            .get("keys")
            .and_then(Value::as_array)
            .ok_or_else(|| KeyError::NotJwks("it has no \"keys\" array".into()))?;
        let mut report = JwksReport::default();
        let mut by_kid = HashMap::new();
        let mut unnamed = Vec::new();
        for (i, jwk) in keys.iter().enumerate() {
            let name = jwk
                .get("kid")
                .and_then(Value::as_str)
                .map(|k| format!("kid {k:?}"))
                .unwrap_or_else(|| format!("key {}", i + 1));
            let key = match self.jwk(jwk, &name)? {
                Ok(key) => key,
                Err(reason) => {
                    report.skipped.push(format!("{name}: {reason}"));
                    continue;
                }
            };
            match jwk.get("kid").and_then(Value::as_str) {
                Some(kid) => {
                    if by_kid.insert(kid.to_owned(), key).is_some() || self.by_kid.contains_key(kid)
                    {
                        return Err(KeyError::DuplicateKid(kid.to_owned()));
                    }
                }
                None => unnamed.push(key),
            }
            report.kept.push(name);
        }
        if by_kid.is_empty() && unnamed.is_empty() {
            return Err(KeyError::NoJwkForAlgorithm {
                alg: self.alg,
                skipped: report.skipped,
            });
        }
        self.by_kid.extend(by_kid);
        self.unnamed.extend(unnamed);
        Ok(report)
    }

    /// One key of a set: Ok(Ok(key)) to keep, Ok(Err(reason)) to pass
    /// over, Err when a key of the pinned type is broken.
    fn jwk(&self, jwk: &Value, name: &str) -> Result<Result<DecodingKey, String>, KeyError> {
        let alg = self.alg;
        let Some(obj) = jwk.as_object() else {
            return Ok(Err("not a JSON object".into()));
        };
        let text = |member: &str| obj.get(member).and_then(Value::as_str);
        if let Some(usage) = text("use")
            && usage != "sig"
        {
            return Ok(Err(format!("\"use\": {usage:?}, not \"sig\"")));
        }
        if let Some(ops) = obj.get("key_ops").and_then(Value::as_array)
            && !ops.iter().any(|op| op == "verify")
        {
            return Ok(Err("its key_ops do not include \"verify\"".into()));
        }
        let (kty, crv) = match alg {
            TokenAlgorithm::Rs256 => ("RSA", None),
            TokenAlgorithm::Es256 => ("EC", Some("P-256")),
            TokenAlgorithm::Hs256 => unreachable!("refused before"),
        };
        match text("kty") {
            Some(k) if k == kty => {}
            other => return Ok(Err(format!("kty {}, not {kty:?}", shown(other)))),
        }
        if let Some(a) = text("alg")
            && a != alg.name()
        {
            return Ok(Err(format!("alg {a:?}, not {:?}", alg.name())));
        }
        if let Some(crv) = crv
            && text("crv") != Some(crv)
        {
            return Ok(Err(format!("crv {}, not {crv:?}", shown(text("crv")))));
        }
        if let Some(kid) = text("kid")
            && !is_plain_kid(kid)
        {
            return Ok(Err(
                "its kid is not a plain identifier, so no token could name it".into(),
            ));
        }
        let bad = |detail: String| KeyError::BadJwk {
            key: name.to_owned(),
            alg,
            detail,
        };
        let component = |member: &str| {
            let value = text(member).ok_or_else(|| bad(format!("it has no {member:?}")))?;
            decode_base64url(value).ok_or_else(|| bad(format!("{member:?} is not base64url")))
        };
        match alg {
            TokenAlgorithm::Rs256 => {
                let n = component("n")?;
                let e = component("e")?;
                let bits = significant_bits(&n);
                if bits < 2048 {
                    return Ok(Err(format!(
                        "an RSA key of {bits} bits; at least 2048 are needed"
                    )));
                }
                if e.is_empty() || significant_bits(&e) > 64 {
                    return Err(bad("its exponent \"e\" is not a usable number".into()));
                }
                Ok(Ok(DecodingKey::from_rsa_raw_components(&n, &e)))
            }
            TokenAlgorithm::Es256 => {
                let (x, y) = (component("x")?, component("y")?);
                if x.len() != 32 || y.len() != 32 {
                    return Err(bad("\"x\" and \"y\" are not 32 bytes each".into()));
                }
                let mut point = Vec::with_capacity(65);
                point.push(0x04);
                point.extend_from_slice(&x);
                point.extend_from_slice(&y);
                let key = DecodingKey::from_ec_der(&point);
                probe_ec(&key).map_err(bad)?;
                Ok(Ok(key))
            }
            TokenAlgorithm::Hs256 => unreachable!("refused before"),
        }
    }

    /// The keys to try for a token that names `kid` (or none).
    ///
    /// A token that names a key when a key set was given must name one of
    /// its keys. Otherwise the secret or the PEM keys are tried, whatever
    /// the kid says (PEM keys carry no kid); and failing those, the one key
    /// of a key set that has only one.
    pub fn choose(&self, kid: Option<&str>) -> Chosen<'_> {
        let has_set = !self.by_kid.is_empty() || !self.unnamed.is_empty();
        match kid {
            Some(kid) if has_set => match self.by_kid.get(kid) {
                Some(key) => Chosen::Keys(std::slice::from_ref(key)),
                None => Chosen::UnknownKid,
            },
            _ if !self.fixed.is_empty() => Chosen::Keys(&self.fixed),
            _ if self.unnamed.len() == 1 && self.by_kid.is_empty() => Chosen::Keys(&self.unnamed),
            _ if self.by_kid.len() == 1 && self.unnamed.is_empty() => Chosen::Keys(
                std::slice::from_ref(self.by_kid.values().next().expect("one key")),
            ),
            _ => Chosen::KidNeeded,
        }
    }
}

/// The PEM blocks of `text`, as (label, whole block).
fn pem_blocks(text: &str) -> Result<Vec<(&str, &str)>, KeyError> {
    const BEGIN: &str = "-----BEGIN ";
    let mut blocks = Vec::new();
    let mut rest = text;
    while let Some(start) = rest.find(BEGIN) {
        let after = &rest[start + BEGIN.len()..];
        let label_end = after
            .find("-----")
            .ok_or_else(|| KeyError::NotPem("a BEGIN line is not closed by -----".into()))?;
        let label = &after[..label_end];
        let end_line = format!("-----END {label}-----");
        let end = rest[start..]
            .find(&end_line)
            .ok_or_else(|| KeyError::NotPem(format!("no END line for BEGIN {label}")))?;
        let block_end = start + end + end_line.len();
        blocks.push((label, &rest[start..block_end]));
        rest = &rest[block_end..];
    }
    if blocks.is_empty() {
        return Err(KeyError::NotPem(
            "no -----BEGIN PUBLIC KEY----- block in it".into(),
        ));
    }
    Ok(blocks)
}

/// A member's value as a reason names it.
fn shown(value: Option<&str>) -> String {
    match value {
        Some(v) => format!("{v:?}"),
        None => "missing".into(),
    }
}

/// Bits of a big-endian unsigned number, leading zeros not counted.
fn significant_bits(be: &[u8]) -> usize {
    match be.iter().position(|b| *b != 0) {
        None => 0,
        Some(i) => (be.len() - i) * 8 - be[i].leading_zeros() as usize,
    }
}

/// Checks that an EC key is a point on P-256: the verifier refuses to be
/// built for one that is not, whatever the signature.
fn probe_ec(key: &DecodingKey) -> Result<(), String> {
    match jsonwebtoken::crypto::verify("AAAA", b"probe", key, Algorithm::ES256) {
        Ok(_) => Ok(()),
        Err(_) => Err("the point is not on the P-256 curve".into()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const RSA_A: &[u8] = include_bytes!("../../../tests/api/keys/rsa-a.pub.pem");
    const RSA_B: &[u8] = include_bytes!("../../../tests/api/keys/rsa-b.pub.pem");
    const RSA_A_PKCS1: &[u8] = include_bytes!("../../../tests/api/keys/rsa-a.pkcs1.pub.pem");
    const RSA_A_PRIVATE: &[u8] = include_bytes!("../../../tests/api/keys/rsa-a.key.pem");
    const EC_A: &[u8] = include_bytes!("../../../tests/api/keys/ec-a.pub.pem");
    const EC_A_PRIVATE: &[u8] = include_bytes!("../../../tests/api/keys/ec-a.key.pem");
    const EC_P384: &[u8] = include_bytes!("../../../tests/api/keys/ec-p384.pub.pem");
    const JWKS: &[u8] = include_bytes!("../../../tests/api/keys/jwks.json");

    fn pem(alg: TokenAlgorithm, pem: &[u8]) -> Result<usize, KeyError> {
        KeySet::new(alg).add_pem(pem)
    }

    #[test]
    fn algorithms_parse_in_any_case_and_nothing_else() {
        assert_eq!("rs256".parse(), Ok(TokenAlgorithm::Rs256));
        assert_eq!(" ES256 ".parse(), Ok(TokenAlgorithm::Es256));
        assert_eq!("HS256".parse(), Ok(TokenAlgorithm::Hs256));
        for bad in ["none", "HS512", "RS384", "PS256", "EdDSA", ""] {
            assert!(bad.parse::<TokenAlgorithm>().is_err(), "{bad}");
        }
    }

    #[test]
    fn public_keys_of_the_pinned_type_load_in_spki_and_pkcs1_form() {
        use TokenAlgorithm::*;
        assert_eq!(pem(Rs256, RSA_A), Ok(1));
        assert_eq!(pem(Rs256, RSA_A_PKCS1), Ok(1));
        assert_eq!(pem(Es256, EC_A), Ok(1));
        let both = [RSA_A, b"\n", RSA_B].concat();
        assert_eq!(pem(Rs256, &both), Ok(2));
    }

    #[test]
    fn pem_files_that_cannot_serve_the_pinned_algorithm_are_refused() {
        use TokenAlgorithm::*;
        let cert = b"-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n";
        let garbage = b"-----BEGIN PUBLIC KEY-----\nbm90IGEga2V5\n-----END PUBLIC KEY-----\n";
        let cases: Vec<(&str, TokenAlgorithm, &[u8], &str)> = vec![
            ("RSA private key", Rs256, RSA_A_PRIVATE, "private key"),
            ("EC private key", Es256, EC_A_PRIVATE, "private key"),
            ("certificate", Rs256, cert, "certificate"),
            ("EC key for RS256", Rs256, EC_A, "holds an EC public key"),
            ("RSA key for ES256", Es256, RSA_A, "holds an RSA public key"),
            (
                "PKCS#1 RSA key for ES256",
                Es256,
                RSA_A_PKCS1,
                "holds an RSA public key",
            ),
            ("P-384 key for ES256", Es256, EC_P384, "another curve"),
            (
                "not PEM",
                Rs256,
                b"ssh-rsa AAAAB3NzaC1yc2E",
                "not a PEM file",
            ),
            ("empty", Rs256, b"", "not a PEM file"),
            ("not text", Rs256, &[0xff, 0xfe, 0], "not a PEM file"),
            (
                "no END line",
                Rs256,
                b"-----BEGIN PUBLIC KEY-----\nAAAA\n",
                "no END line",
            ),
            ("garbage inside", Rs256, garbage, "is not an RSA public key"),
            ("public keys for HS256", Hs256, RSA_A, "shared secret"),
        ];
        for (what, alg, bytes, want) in cases {
            let e = pem(alg, bytes).expect_err(what).to_string();
            assert!(e.contains(want), "{what}: {e}");
        }
        // One bad block spoils the file: nothing of it is kept.
        let mut keys = KeySet::new(Rs256);
        let mixed = [RSA_A, EC_A].concat();
        assert!(keys.add_pem(&mixed).is_err());
        assert!(keys.is_empty());
    }

    #[test]
    fn a_key_set_keeps_the_signing_keys_of_the_pinned_type_only() {
        let mut rs = KeySet::new(TokenAlgorithm::Rs256);
        let report = rs.add_jwks(JWKS).unwrap();
        assert_eq!(report.kept, ["kid \"rsa-a\"", "kid \"rsa-b\""]);
        assert_eq!(report.skipped.len(), 2, "{:?}", report.skipped);
        assert!(report.skipped[0].starts_with("kid \"ec-a\": kty"));
        assert!(report.skipped[1].contains("\"use\": \"enc\""));
        assert!(matches!(rs.choose(Some("rsa-a")), Chosen::Keys(k) if k.len() == 1));
        assert!(matches!(rs.choose(Some("ec-a")), Chosen::UnknownKid));
        assert!(matches!(rs.choose(Some("rsa-b-enc")), Chosen::UnknownKid));
        assert!(matches!(rs.choose(None), Chosen::KidNeeded));

        let mut es = KeySet::new(TokenAlgorithm::Es256);
        assert_eq!(es.add_jwks(JWKS).unwrap().kept, ["kid \"ec-a\""]);
        // The only key of a set serves a token that names none.
        assert!(matches!(es.choose(None), Chosen::Keys(k) if k.len() == 1));
    }

    #[test]
    fn a_pem_key_serves_whatever_kid_a_token_names_unless_a_set_was_given() {
        let mut keys = KeySet::new(TokenAlgorithm::Rs256);
        keys.add_pem(RSA_A).unwrap();
        assert!(matches!(keys.choose(Some("anything")), Chosen::Keys(k) if k.len() == 1));
        assert!(matches!(keys.choose(None), Chosen::Keys(_)));
        keys.add_jwks(JWKS).unwrap();
        assert!(matches!(keys.choose(Some("anything")), Chosen::UnknownKid));
        assert!(matches!(keys.choose(None), Chosen::Keys(_)), "the PEM key");
    }

    #[test]
    fn key_sets_that_cannot_serve_the_pinned_algorithm_are_refused() {
        use TokenAlgorithm::*;
        let rsa_a: Value = serde_json::from_slice::<Value>(JWKS).unwrap()["keys"][0].clone();
        let with = |change: Value| {
            let mut k = rsa_a.clone();
            for (m, v) in change.as_object().unwrap() {
                k[m] = v.clone();
            }
            serde_json::json!({ "keys": [k] }).to_string()
        };
        let short_n = "qqqq".repeat(40); // 120 bytes of 0xaa: 960 bits
        let cases: Vec<(&str, TokenAlgorithm, String, &str)> = vec![
            ("not JSON", Rs256, "{keys".into(), "not a JSON Web Key Set"),
            ("no keys array", Rs256, "{}".into(), "no \"keys\" array"),
            ("an empty set", Rs256, r#"{"keys":[]}"#.into(), "no RSA public key"),
            (
                "only EC keys for RS256",
                Rs256,
                serde_json::json!({ "keys": [serde_json::from_slice::<Value>(JWKS).unwrap()["keys"][2]] }).to_string(),
                "kty \"EC\", not \"RSA\"",
            ),
            ("only RSA keys for ES256", Es256, with(serde_json::json!({})), "no P-256"),
            ("RS384 key", Rs256, with(serde_json::json!({"alg": "RS384"})), "alg \"RS384\""),
            ("n not base64url", Rs256, with(serde_json::json!({"n": "a+b/"})), "not base64url"),
            ("no e", Rs256, with(serde_json::json!({"e": null})), "no \"e\""),
            ("1024-bit key", Rs256, with(serde_json::json!({"n": short_n})), "960 bits"),
            (
                "kid a path",
                Rs256,
                with(serde_json::json!({"kid": "../k"})),
                "not a plain identifier",
            ),
            ("for HS256", Hs256, with(serde_json::json!({})), "shared secret"),
        ];
        for (what, alg, json, want) in cases {
            let e = KeySet::new(alg)
                .add_jwks(json.as_bytes())
                .expect_err(what)
                .to_string();
            assert!(e.contains(want), "{what}: {e}");
        }
        let twice = serde_json::json!({ "keys": [rsa_a, rsa_a] }).to_string();
        assert_eq!(
            KeySet::new(Rs256).add_jwks(twice.as_bytes()),
            Err(KeyError::DuplicateKid("rsa-a".into()))
        );
        let ec = &serde_json::from_slice::<Value>(JWKS).unwrap()["keys"][2];
        let mut off_curve = ec.clone();
        off_curve["y"] = ec["x"].clone();
        let set = serde_json::json!({ "keys": [off_curve] }).to_string();
        let e = KeySet::new(Es256).add_jwks(set.as_bytes()).unwrap_err();
        assert!(e.to_string().contains("not on the P-256 curve"), "{e}");
    }

    #[test]
    fn a_secret_is_for_hs256_only() {
        assert_eq!(
            KeySet::new(TokenAlgorithm::Rs256).add_secret(b"s"),
            Err(KeyError::SecretForPublicKeys(TokenAlgorithm::Rs256))
        );
        assert_eq!(
            KeySet::new(TokenAlgorithm::Hs256).add_secret(b""),
            Err(KeyError::EmptySecret)
        );
    }
}
