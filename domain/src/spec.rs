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
pub const MEMORY_MB_RANGE: (u32, u32) = (64, 4096);
pub const TIMEOUT_SEC_RANGE: (u32, u32) = (1, 900);
/// The longest idle window a function may ask for (a week), in seconds.
pub const MAX_SCALE_TO_ZERO_AFTER_SEC: u32 = 7 * 24 * 3600;
pub const MAX_ENV_VARS: usize = 100;
/// Longest environment variable name, in bytes.
pub const MAX_ENV_NAME_BYTES: usize = 256;
/// Largest value of one environment variable, in bytes.
pub const MAX_ENV_VALUE_BYTES: usize = 32 * 1024;
/// Largest total of all values of a function's (or a job's) environment.
pub const MAX_ENV_TOTAL_BYTES: usize = 128 * 1024;

/// The desired shape of a function, as the user gave it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct FunctionSpec {
    pub runtime: Runtime,
    pub entrypoint: String,
    pub memory_mb: u32,
    pub timeout_sec: u32,
    #[serde(default)]
    pub env_vars: BTreeMap<String, String>,
    /// Stopped after this many seconds without a call, started again by
    /// the next one; `0`: never. `None`: the platform's default
    /// (`SLESS_SCALE_TO_ZERO_AFTER_SEC`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub scale_to_zero_after_sec: Option<u32>,
    /// How many instances run, and how many calls each takes at once.
    #[serde(flatten)]
    pub scaling: Scaling,
}

/// The most instances a function may ask for (`max_instances`); a
/// namespace's instance quota may bound it lower.
pub const MAX_INSTANCES_LIMIT: u32 = 100;
/// `max_instances` when the spec leaves it out.
pub const DEFAULT_MAX_INSTANCES: u32 = 10;
/// The calls in flight one instance may be given (`concurrency`).
pub const CONCURRENCY_RANGE: (u32, u32) = (1, 1000);

/// How a function scales: each field left out (`None`) is its default.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Scaling {
    /// Instances kept running however quiet the function is (`0`: it
    /// scales to zero when idle). Default 0.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_instances: Option<u32>,
    /// The most instances it scales out to. Default
    /// [`DEFAULT_MAX_INSTANCES`].
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_instances: Option<u32>,
    /// Calls one instance takes at once: the autoscaler aims at this many
    /// in flight per instance, and the proxy sends an instance no more
    /// (`1`: one call at a time). Default: its runtime's
    /// ([`Runtime::default_concurrency`]).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub concurrency: Option<u32>,
}

impl Runtime {
    /// The calls in flight one instance takes when the spec does not say:
    /// the Python wrapper serves each call on a thread of its own but
    /// runs one at a time under the interpreter's lock, the Node.js and Go
    /// wrappers wait on I/O without holding anything.
    pub fn default_concurrency(self) -> u32 {
        match self {
            Runtime::Python311 => 10,
            Runtime::Nodejs20 => 50,
            Runtime::Go123 => 100,
        }
    }
}

impl FunctionSpec {
    /// Checks the fields that a type alone cannot.
    pub fn validate(&self) -> Result<(), DomainError> {
        check_entrypoint(self.runtime, &self.entrypoint)?;
        let (lo, hi) = MEMORY_MB_RANGE;
        if !(lo..=hi).contains(&self.memory_mb) {
            return Err(DomainError::Invalid {
                field: "memory_mb",
                detail: format!(
                    "memory_mb must be between {lo} and {hi} (got {})",
                    self.memory_mb
                ),
            });
        }
        let (lo, hi) = TIMEOUT_SEC_RANGE;
        if !(lo..=hi).contains(&self.timeout_sec) {
            return Err(DomainError::Invalid {
                field: "timeout_sec",
                detail: format!(
                    "timeout_sec must be between {lo} and {hi} (got {})",
                    self.timeout_sec
                ),
            });
        }
        if let Some(after) = self.scale_to_zero_after_sec
            && after > MAX_SCALE_TO_ZERO_AFTER_SEC
        {
            return Err(DomainError::Invalid {
                field: "scale_to_zero_after_sec",
                detail: format!(
                    "scale_to_zero_after_sec must be between 0 (never) and {MAX_SCALE_TO_ZERO_AFTER_SEC} (got {after})"
                ),
            });
        }
        self.scaling.validate()?;
        check_env("env_vars", &self.env_vars)
    }

    /// True when a process started with `other` runs as this spec asks:
    /// everything but the idle window and the scaling settings, which
    /// change how many run and when, not how each runs.
    pub fn runs_as(&self, other: &FunctionSpec) -> bool {
        let how = |s: &FunctionSpec| FunctionSpec {
            scale_to_zero_after_sec: None,
            scaling: Scaling::default(),
            ..s.clone()
        };
        how(self) == how(other)
    }

    /// Instances kept running when idle.
    pub fn min_instances(&self) -> u32 {
        self.scaling.min()
    }

    /// The most instances it scales out to.
    pub fn max_instances(&self) -> u32 {
        self.scaling.max()
    }

    /// Calls one instance takes at once.
    pub fn concurrency(&self) -> u32 {
        self.scaling.concurrency_for(self.runtime)
    }
}

impl Scaling {
    /// `min_instances`, or its default.
    pub fn min(&self) -> u32 {
        self.min_instances.unwrap_or(0)
    }

    /// `max_instances`, or its default.
    pub fn max(&self) -> u32 {
        self.max_instances.unwrap_or(DEFAULT_MAX_INSTANCES)
    }

    /// `concurrency`, or the default of `runtime`.
    pub fn concurrency_for(&self, runtime: Runtime) -> u32 {
        self.concurrency.unwrap_or(runtime.default_concurrency())
    }

    /// `max_instances` between 1 and [`MAX_INSTANCES_LIMIT`],
    /// `min_instances` at most `max_instances`, `concurrency` within
    /// [`CONCURRENCY_RANGE`].
    pub fn validate(&self) -> Result<(), DomainError> {
        let max = self.max();
        if let Some(m) = self.max_instances
            && !(1..=MAX_INSTANCES_LIMIT).contains(&m)
        {
            return Err(DomainError::Invalid {
                field: "max_instances",
                detail: format!(
                    "max_instances must be between 1 and {MAX_INSTANCES_LIMIT} (got {m})"
                ),
            });
        }
        if let Some(m) = self.min_instances
            && m > max
        {
            let bound = match self.max_instances {
                Some(_) => format!("its max_instances, {max}"),
                None => format!("max_instances, which is {max} when left out"),
            };
            return Err(DomainError::Invalid {
                field: "min_instances",
                detail: format!("min_instances ({m}) must not be above {bound}"),
            });
        }
        let (lo, hi) = CONCURRENCY_RANGE;
        if let Some(c) = self.concurrency
            && !(lo..=hi).contains(&c)
        {
            return Err(DomainError::Invalid {
                field: "concurrency",
                detail: format!(
                    "concurrency (calls in flight per instance) must be between {lo} and {hi} (got {c})"
                ),
            });
        }
        Ok(())
    }
}

/// Names the platform sets itself in a function's environment: a user may
/// not set them.
fn reserved_env_name(name: &str) -> bool {
    name == "PORT" || name.starts_with("SLESS_") || name.starts_with("KUBERNETES_")
}

/// Checks an environment (a function's `env_vars`, a job's `env`): names
/// match `^[A-Za-z_][A-Za-z0-9_]*$` and are not reserved (`PORT`, `SLESS_*`,
/// `KUBERNETES_*`); a value is at most 32 KiB and holds no NUL byte; all
/// values together are at most 128 KiB; at most 100 variables.
pub fn check_env(field: &'static str, env: &BTreeMap<String, String>) -> Result<(), DomainError> {
    let invalid = |detail: String| DomainError::Invalid { field, detail };
    if env.len() > MAX_ENV_VARS {
        return Err(invalid(format!(
            "at most {MAX_ENV_VARS} environment variables (got {})",
            env.len()
        )));
    }
    let mut total = 0usize;
    for (name, value) in env {
        let well_formed = !name.is_empty()
            && name.len() <= MAX_ENV_NAME_BYTES
            && !name.starts_with(|c: char| c.is_ascii_digit())
            && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_');
        if !well_formed {
            return Err(invalid(format!(
                "{name:?} is not a valid environment variable name: it must match ^[A-Za-z_][A-Za-z0-9_]*$ (at most {MAX_ENV_NAME_BYTES} characters)"
            )));
        }
        if reserved_env_name(name) {
            return Err(invalid(format!(
                "{name:?} is reserved: PORT, SLESS_* and KUBERNETES_* are set by the platform"
            )));
        }
        if value.len() > MAX_ENV_VALUE_BYTES {
            return Err(invalid(format!(
                "the value of {name} is {} bytes; the limit is {MAX_ENV_VALUE_BYTES}",
                value.len()
            )));
        }
        if value.contains('\0') {
            return Err(invalid(format!(
                "the value of {name} holds a NUL byte, which an environment cannot carry"
            )));
        }
        total += value.len();
    }
    if total > MAX_ENV_TOTAL_BYTES {
        return Err(invalid(format!(
            "the values add up to {total} bytes; the limit is {MAX_ENV_TOTAL_BYTES}"
        )));
    }
    Ok(())
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
    if runtime == Runtime::Go123 {
        // A Go entrypoint names an exported function of a library package
        // (runtimes/README.md): `package.Function`.
        let exported = parts.len() == 2
            && parts[1].starts_with(|c: char| c.is_ascii_uppercase())
            && parts[0] != "main";
        if !exported {
            return Err(DomainError::Invalid {
                field: "entrypoint",
                detail: format!(
                    "{entrypoint:?} is not a valid entrypoint for go1.23: expected package.Function with an exported (capitalised) function of a package other than main, e.g. handler.Handle"
                ),
            });
        }
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
            scale_to_zero_after_sec: None,
            scaling: Scaling::default(),
        }
    }

    #[test]
    fn scaling_settings_are_checked_and_their_defaults_filled() {
        let s = spec();
        assert_eq!(
            (s.min_instances(), s.max_instances(), s.concurrency()),
            (0, DEFAULT_MAX_INSTANCES, 10)
        );
        let with = |min: Option<u32>, max: Option<u32>, concurrency: Option<u32>| {
            let mut s = spec();
            s.scaling = Scaling {
                min_instances: min,
                max_instances: max,
                concurrency,
            };
            s.validate().map_err(|e| match e {
                DomainError::Invalid { field, .. } => field,
                other => panic!("{other:?}"),
            })
        };
        let cases = [
            ((Some(0), Some(1), Some(1)), Ok(())),
            ((Some(100), Some(100), Some(1000)), Ok(())),
            ((Some(10), None, None), Ok(())),
            ((Some(11), None, None), Err("min_instances")),
            ((Some(3), Some(2), None), Err("min_instances")),
            ((None, Some(0), None), Err("max_instances")),
            ((None, Some(101), None), Err("max_instances")),
            ((None, None, Some(0)), Err("concurrency")),
            ((None, None, Some(1001)), Err("concurrency")),
        ];
        for ((min, max, c), want) in cases {
            assert_eq!(with(min, max, c), want, "{min:?} {max:?} {c:?}");
        }
    }

    #[test]
    fn scaling_settings_change_how_many_run_not_how_each_runs() {
        let mut other = spec();
        other.scaling.max_instances = Some(3);
        other.scaling.concurrency = Some(1);
        assert!(spec().runs_as(&other));
        // Left out, they are left out of the JSON: specs recorded before
        // they existed read back the same.
        let json = serde_json::to_value(spec()).unwrap();
        assert!(json.get("max_instances").is_none(), "{json}");
        let back: FunctionSpec =
            serde_json::from_value(serde_json::to_value(&other).unwrap()).unwrap();
        assert_eq!(back, other);
    }

    #[test]
    fn a_go_entrypoint_names_an_exported_function_of_a_library_package() {
        let go = |entrypoint: &str| {
            let mut s = spec();
            s.runtime = Runtime::Go123;
            s.entrypoint = entrypoint.into();
            s.validate()
        };
        assert!(go("handler.Handle").is_ok());
        for bad in ["handler.handle", "a.b.Handle", "main.Handle", "Handle"] {
            assert!(go(bad).is_err(), "{bad}");
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
            ("memory_mb", Box::new(|s| s.memory_mb = 63)),
            ("memory_mb", Box::new(|s| s.memory_mb = 4097)),
            ("timeout_sec", Box::new(|s| s.timeout_sec = 901)),
            (
                "entrypoint",
                Box::new(|s| s.entrypoint = "handler.ha\0ndle".into()),
            ),
        ];
        let env = |k: &str, v: String| -> Change {
            let (k, v) = (k.to_owned(), v);
            Box::new(move |s: &mut FunctionSpec| {
                s.env_vars.insert(k.clone(), v.clone());
            })
        };
        let mut cases = cases;
        for (k, v) in [
            ("PORT", "8080".to_owned()),
            ("KUBERNETES_SERVICE_HOST", "x".to_owned()),
            ("A-B", "v".to_owned()),
            ("A B", "v".to_owned()),
            ("", "v".to_owned()),
            ("\u{417}", "v".to_owned()),
            ("A\0", "v".to_owned()),
            ("BIG", "x".repeat(MAX_ENV_VALUE_BYTES + 1)),
            ("NUL", "a\0b".to_owned()),
        ] {
            cases.push(("env_vars", env(k, v)));
        }
        // Five values of 30 KiB: each fits, together they do not.
        cases.push((
            "env_vars",
            Box::new(|s| {
                for i in 0..5 {
                    s.env_vars.insert(format!("V{i}"), "x".repeat(30 * 1024));
                }
            }),
        ));
        for (field, change) in cases {
            let mut s = spec();
            change(&mut s);
            match s.validate() {
                Err(DomainError::Invalid { field: f, .. }) => assert_eq!(f, field),
                other => panic!("expected invalid {field}, got {other:?}"),
            }
        }
    }

    #[test]
    fn limits_are_inclusive_and_underscores_and_lower_case_names_are_fine() {
        let mut s = spec();
        s.memory_mb = 64;
        s.timeout_sec = 900;
        s.env_vars
            .insert("_private".into(), "x".repeat(MAX_ENV_VALUE_BYTES));
        s.env_vars.insert("lower_Case9".into(), "é ✓".into());
        s.env_vars.insert("PORTS".into(), "not PORT itself".into());
        assert_eq!(s.validate(), Ok(()));
        s.memory_mb = 4096;
        s.timeout_sec = 1;
        assert_eq!(s.validate(), Ok(()));
    }
}
