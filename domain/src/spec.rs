//! What a user asks a function to be: runtime, entrypoint and limits.

use std::collections::BTreeMap;
use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::DomainError;

/// A language runtime a function can be written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub enum Runtime {
    #[serde(rename = "python3.11")]
    Python311,
    #[serde(rename = "nodejs20")]
    Nodejs20,
    #[serde(rename = "go1.23")]
    Go123,
}

impl Runtime {
    pub const ALL: [Runtime; 3] = [Runtime::Python311, Runtime::Nodejs20, Runtime::Go123];

    pub fn as_str(self) -> &'static str {
        match self {
            Runtime::Python311 => "python3.11",
            Runtime::Nodejs20 => "nodejs20",
            Runtime::Go123 => "go1.23",
        }
    }
}

impl fmt::Display for Runtime {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

impl FromStr for Runtime {
    type Err = DomainError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Runtime::ALL
            .into_iter()
            .find(|r| r.as_str() == s)
            .ok_or_else(|| DomainError::Invalid {
                field: "runtime",
                detail: format!(
                    "unknown runtime {s:?}; known runtimes: python3.11, nodejs20, go1.23"
                ),
            })
    }
}

/// Limits on a function spec.
pub const MEMORY_MB_RANGE: (u32, u32) = (64, 8192);
pub const TIMEOUT_SEC_RANGE: (u32, u32) = (1, 900);
pub const MAX_ENV_VARS: usize = 100;

/// The desired shape of a function, as the user gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionSpec {
    pub runtime: Runtime,
    pub entrypoint: String,
    pub memory_mb: u32,
    pub timeout_sec: u32,
    #[serde(default)]
    pub env_vars: BTreeMap<String, String>,
}

impl FunctionSpec {
    /// Checks the fields that a type alone cannot.
    pub fn validate(&self) -> Result<(), DomainError> {
        check_entrypoint(self.runtime, &self.entrypoint)?;
        let (lo, hi) = MEMORY_MB_RANGE;
        if !(lo..=hi).contains(&self.memory_mb) {
            return Err(DomainError::Invalid {
                field: "memory_mb",
                detail: format!("memory_mb must be between {lo} and {hi}"),
            });
        }
        let (lo, hi) = TIMEOUT_SEC_RANGE;
        if !(lo..=hi).contains(&self.timeout_sec) {
            return Err(DomainError::Invalid {
                field: "timeout_sec",
                detail: format!("timeout_sec must be between {lo} and {hi}"),
            });
        }
        if self.env_vars.len() > MAX_ENV_VARS {
            return Err(DomainError::Invalid {
                field: "env_vars",
                detail: format!("at most {MAX_ENV_VARS} environment variables"),
            });
        }
        for key in self.env_vars.keys() {
            let ok = !key.is_empty()
                && !key.starts_with(|c: char| c.is_ascii_digit())
                && key.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
            if !ok || key.starts_with("SLESS_") {
                return Err(DomainError::Invalid {
                    field: "env_vars",
                    detail: format!(
                        "{key:?} is not a valid environment variable name (letters, digits and '_', not starting with a digit, not starting with SLESS_)"
                    ),
                });
            }
        }
        Ok(())
    }
}

/// `module.function` for Python; a dotted path of identifiers.
fn check_entrypoint(runtime: Runtime, entrypoint: &str) -> Result<(), DomainError> {
    let parts: Vec<&str> = entrypoint.split('.').collect();
    let ident = |p: &str| {
        !p.is_empty()
            && !p.starts_with(|c: char| c.is_ascii_digit())
            && p.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
    };
    if parts.len() < 2 || !parts.iter().all(|p| ident(p)) || entrypoint.len() > 255 {
        return Err(DomainError::Invalid {
            field: "entrypoint",
            detail: format!(
                "{entrypoint:?} is not a valid entrypoint for {runtime}: expected module.function, e.g. handler.handle"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec() -> FunctionSpec {
        FunctionSpec {
            runtime: Runtime::Python311,
            entrypoint: "handler.handle".into(),
            memory_mb: 128,
            timeout_sec: 30,
            env_vars: BTreeMap::new(),
        }
    }

    #[test]
    fn runtime_names_round_trip() {
        for r in Runtime::ALL {
            assert_eq!(r.as_str().parse::<Runtime>().unwrap(), r);
            assert_eq!(serde_json::to_value(r).unwrap(), r.as_str());
        }
        assert!("python2".parse::<Runtime>().is_err());
    }

    #[test]
    fn spec_validation_names_the_field() {
        assert!(spec().validate().is_ok());
        type Change = Box<dyn Fn(&mut FunctionSpec)>;
        let cases: Vec<(&str, Change)> = vec![
            ("entrypoint", Box::new(|s| s.entrypoint = "handler".into())),
            ("entrypoint", Box::new(|s| s.entrypoint = "a..b".into())),
            ("entrypoint", Box::new(|s| s.entrypoint = "a.b-c".into())),
            ("memory_mb", Box::new(|s| s.memory_mb = 1)),
            ("timeout_sec", Box::new(|s| s.timeout_sec = 0)),
            (
                "env_vars",
                Box::new(|s| {
                    s.env_vars.insert("1X".into(), "v".into());
                }),
            ),
            (
                "env_vars",
                Box::new(|s| {
                    s.env_vars.insert("SLESS_PORT".into(), "v".into());
                }),
            ),
        ];
        for (field, change) in cases {
            let mut s = spec();
            change(&mut s);
            match s.validate() {
                Err(DomainError::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("expected invalid {field}, got {other:?}"),
            }
        }
    }
}
