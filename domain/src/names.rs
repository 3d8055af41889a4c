//! Names users give things, parsed once at the edge (parse, don't validate).

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::DomainError;

/// The longest name a user may give a function, trigger or job: a
/// DNS-1123 label leaves 63 characters, and the rest is room for the
/// suffixes Kubernetes objects made from it get (`-build-v12`, a job's
/// `-abcde`).
pub const MAX_NAME_LEN: usize = 40;

/// How a kind of name is checked.
#[derive(Debug, Clone, Copy)]
struct LabelRule {
    max_len: usize,
    /// The first character must be a letter (not a digit).
    letter_first: bool,
}

/// Names users give functions, triggers and jobs.
const USER_NAME: LabelRule = LabelRule {
    max_len: MAX_NAME_LEN,
    letter_first: true,
};

/// A Kubernetes namespace: any DNS-1123 label.
const NAMESPACE: LabelRule = LabelRule {
    max_len: 63,
    letter_first: false,
};

/// A Kubernetes DNS-1123 label: `a-z`, `0-9` and `-`, starting and ending
/// with a letter or digit, at most `rule.max_len` characters (and starting
/// with a letter when the rule says so). Only ASCII: a Unicode look-alike
/// (`е`, Cyrillic) is refused like any other character outside the set.
fn check_dns_label(field: &'static str, rule: LabelRule, s: &str) -> Result<(), DomainError> {
    let first = if rule.letter_first {
        "starting with a letter"
    } else {
        "starting with a letter or digit"
    };
    let invalid = |why: &str| DomainError::Invalid {
        field,
        detail: format!(
            "{s:?} is not a valid name: {why} (a DNS-1123 label: 1-{} characters of a-z, 0-9 and '-', {first} and ending with a letter or digit)",
            rule.max_len
        ),
    };
    if s.is_empty() {
        return Err(invalid("it is empty"));
    }
    if s.len() > rule.max_len {
        return Err(invalid(&format!(
            "it is longer than {} characters",
            rule.max_len
        )));
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
    if rule.letter_first && !s.starts_with(|c: char| c.is_ascii_lowercase()) {
        return Err(invalid("it does not start with a letter"));
    }
    Ok(())
}

macro_rules! label_newtype {
    ($(#[$doc:meta])* $name:ident, $field:literal, $rule:expr) => {
        $(#[$doc])*
        #[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize)]
        #[serde(transparent)]
        pub struct $name(String);

        impl $name {
            pub fn parse(s: &str) -> Result<Self, DomainError> {
                check_dns_label($field, $rule, s)?;
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
    "name",
    USER_NAME
);
label_newtype!(
    /// The name of a trigger, unique within its namespace.
    TriggerName,
    "name",
    USER_NAME
);
label_newtype!(
    /// The name of a one-shot job, unique within its namespace.
    JobName,
    "name",
    USER_NAME
);
label_newtype!(
    /// A user's namespace, e.g. `sless-ffd1f598c169b0ae`.
    Namespace,
    "namespace",
    NAMESPACE
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
    fn function_names_are_dns_labels_starting_with_a_letter_of_at_most_40_characters() {
        for ok in ["a", "my-func", "f1", "a-1-b", &"a".repeat(40)] {
            assert!(FunctionName::parse(ok).is_ok(), "{ok}");
            assert!(TriggerName::parse(ok).is_ok(), "{ok}");
            assert!(JobName::parse(ok).is_ok(), "{ok}");
        }
        let bad = [
            "",
            "-a",
            "a-",
            "1a",
            "My",
            "a_b",
            "a.b",
            "a/b",
            "..",
            "a b",
            "a\0b",
            &"a".repeat(41),
            "ü",
            "h\u{435}llo", // Cyrillic е, a look-alike of e
            "\u{ff41}",    // fullwidth a
        ];
        for bad in bad {
            for err in [
                FunctionName::parse(bad).err(),
                TriggerName::parse(bad).err(),
                JobName::parse(bad).err(),
            ] {
                match err {
                    Some(DomainError::Invalid { field: "name", .. }) => {}
                    other => panic!("{bad:?}: {other:?}"),
                }
            }
        }
    }

    #[test]
    fn namespaces_are_any_dns_label() {
        for ok in ["sless-ffd1f598c169b0ae", "0abc", &"a".repeat(63)] {
            assert!(Namespace::parse(ok).is_ok(), "{ok}");
        }
        for bad in ["", "Sless-x", "a_b", &"a".repeat(64)] {
            assert!(Namespace::parse(bad).is_err(), "{bad}");
        }
    }
}
