//! The local driver (`SLESS_DRIVER=local`, the default): the interpreters
//! and the Go toolchain it runs, where its functions listen, and its
//! sandbox (`sandbox.rs`).

use std::net::{IpAddr, Ipv4Addr};
use std::path::PathBuf;

use super::Get;
use super::sandbox::{SandboxSettings, sandbox_from};
use super::source::var;

/// The local driver's settings.
#[derive(Debug, Clone)]
pub struct Local {
    /// The Python interpreter of functions and pip, `SLESS_PYTHON`
    /// (`python3`).
    pub python: String,
    /// The Go toolchain of go1.23 builds, `SLESS_GO` (else `go` on `PATH`).
    pub go: Option<String>,
    /// `GOCACHE` of Go builds (else below the data directory).
    pub go_cache: Option<PathBuf>,
    /// The address functions listen on and the invoke proxy reaches them
    /// at, `SLESS_LOCAL_ADVERTISE` (127.0.0.1): another machine's address
    /// when API processes run on other machines than this worker.
    pub advertise: IpAddr,
    pub sandbox: SandboxSettings,
}

impl Local {
    pub fn from_env() -> anyhow::Result<Local> {
        Local::from(&var)
    }

    pub(super) fn from(get: Get<'_>) -> anyhow::Result<Local> {
        // A toolchain of blanks is none.
        let named = |name: &str| get(name).filter(|v| !v.trim().is_empty());
        let advertise = match get("SLESS_LOCAL_ADVERTISE") {
            None => IpAddr::V4(Ipv4Addr::LOCALHOST),
            Some(v) => v.parse().map_err(|e| {
                anyhow::anyhow!("SLESS_LOCAL_ADVERTISE={v:?} is not an IP address: {e}")
            })?,
        };
        Ok(Local {
            python: get("SLESS_PYTHON").unwrap_or_else(|| "python3".into()),
            go: named("SLESS_GO"),
            go_cache: named("GOCACHE").map(PathBuf::from),
            advertise,
            sandbox: sandbox_from(get)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashMap;

    use super::*;

    fn with(vars: &[(&str, &str)]) -> anyhow::Result<Local> {
        let vars: HashMap<String, String> = vars
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        Local::from(&|name| vars.get(name).cloned())
    }

    #[test]
    fn the_local_driver_has_defaults_and_takes_go_from_its_variables() {
        let d = with(&[]).unwrap();
        assert_eq!(d.python, "python3");
        assert_eq!((d.go, d.go_cache), (None, None));
        assert_eq!(d.advertise, IpAddr::V4(Ipv4Addr::LOCALHOST));
        let s = with(&[
            ("SLESS_GO", "/opt/go/bin/go"),
            ("GOCACHE", "/var/cache/go"),
            ("SLESS_LOCAL_ADVERTISE", "10.0.0.7"),
        ])
        .unwrap();
        assert_eq!(s.go.as_deref(), Some("/opt/go/bin/go"));
        assert_eq!(s.go_cache, Some(PathBuf::from("/var/cache/go")));
        assert_eq!(s.advertise.to_string(), "10.0.0.7");
        assert_eq!(with(&[("SLESS_GO", "  ")]).unwrap().go, None);
        let e = with(&[("SLESS_LOCAL_ADVERTISE", "here")]).unwrap_err();
        assert!(e.to_string().starts_with("SLESS_LOCAL_ADVERTISE="), "{e}");
        let e = with(&[("SLESS_SANDBOX_TMP_MB", "0")]).unwrap_err();
        assert!(e.to_string().starts_with("SLESS_SANDBOX_TMP_MB="), "{e}");
    }
}
