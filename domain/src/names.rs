//! Names users give things, parsed once at the edge (parse, don't validate).

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::DomainError;

/// A Kubernetes DNS-1123 label: 1–63 characters of `a-z`, `0-9` and `-`,
/// starting and ending with a letter or digit.
fn check_dns_label(field: &'static str, s: &str) -> Result<(), DomainError> {
    let invalid = |why: &str| DomainError::Invalid {
        field,
        detail: format!(
            "{s:?} is not a valid name: {why} (a DNS-1123 label: 1-63 characters of a-z, 0-9 and '-', starting and ending with a letter or digit)"
        ),
    };
    if s.is_empty() {
        return Err(invalid("it is empty"));
    }
    if s.len() > 63 {
        return Err(invalid("it is longer than 63 characters"));
    }
    if !s
        .bytes()
        .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
    {
        return Err(invalid("it has a character outside a-z, 0-9 and '-'"));
    }
    if s.starts_with('-') || s.ends_with('-') {
        return Err(invalid("it starts or ends with '-'"));
    }
    Ok(())
}

macro_rules! label_newtype {
    ($(#[$doc:meta])* $name:ident, $field:literal) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(s: &str) -> Result<Self, DomainError> {
                check_dns_label($field, s)?;
                Ok(Self(s.to_owned()))
            }
            pub fn as_str(&self) -> &str {
                &self.0
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $name {
            fn deserialize<D: serde::Deserializer<'de>>(d: D) -> Result<Self, D::Error> {
                let s = String::deserialize(d)?;
                Self::parse(&s).map_err(serde::de::Error::custom)
            }
        }
    };
}

label_newtype!(
    /// The name of a function, unique within its namespace.
    FunctionName,
    "name"
);
label_newtype!(
    /// A user's namespace, e.g. `sless-ffd1f598c169b0ae`.
    Namespace,
    "namespace"
);

impl Namespace {
    /// The namespace of a token subject: `"sless-" + hex(sha256(sub)[0..8])`.
    pub fn for_subject(sub: &str) -> Namespace {
        let digest = Sha256::digest(sub.as_bytes());
        Namespace(format!("sless-{}", hex::encode(&digest[..8])))
    }
}

/// The key of one function across the system: `{ns}/{name}`. Used as the
/// work-queue key and in stream names.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct FunctionKey {
    pub namespace: Namespace,
    pub name: FunctionName,
}

impl FunctionKey {
    pub fn new(namespace: Namespace, name: FunctionName) -> Self {
        Self { namespace, name }
    }
    /// The event stream of this function.
    pub fn stream(&self) -> String {
        format!("function/{}/{}", self.namespace, self.name)
    }
    /// The work-queue key of this function.
    pub fn queue_key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
    /// Parses a queue key back (`{ns}/{name}`).
    pub fn from_queue_key(key: &str) -> Result<Self, DomainError> {
        let (ns, name) = key.split_once('/').ok_or(DomainError::Invalid {
            field: "key",
            detail: format!("{key:?} is not a function key"),
        })?;
        Ok(Self::new(Namespace::parse(ns)?, FunctionName::parse(name)?))
    }
}

impl fmt::Display for FunctionKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn namespace_of_subject_matches_the_seed_example() {
        let ns = Namespace::for_subject("019cc268-6c6a-781e-8613-4bed4ec7cd20");
        assert_eq!(ns.as_str(), "sless-ffd1f598c169b0ae");
    }

    #[test]
    fn dns_labels_are_checked() {
        for ok in ["a", "my-func", "f1", &"a".repeat(63)] {
            assert!(FunctionName::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "-a", "a-", "My", "a_b", "a.b", &"a".repeat(64), "ü"] {
            assert!(FunctionName::parse(bad).is_err(), "{bad}");
        }
    }
}
