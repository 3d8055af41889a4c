//! The user commands' settings (`sless deploy`, `ls`, ...): which API and
//! token, from the environment or the profile file (`crate::cli::profile`).

use std::path::PathBuf;

use super::Get;
use super::source::var;

/// What the user commands read from the environment.
#[derive(Debug, Clone, Default)]
pub struct Cli {
    /// `SLESS_ENDPOINT`: the API's URL, over the profile's.
    pub endpoint: Option<String>,
    /// `SLESS_TOKEN`: the bearer token, over the profile's.
    pub token: Option<String>,
    /// `SLESS_PROFILE`: the profile to use (else the file's `default`).
    pub profile: Option<String>,
    /// Where `sless/config.toml` lives: `XDG_CONFIG_HOME`, else
    /// `$HOME/.config`.
    pub config_home: Option<PathBuf>,
    /// `NO_COLOR` (any value): no colours on a terminal either.
    pub no_color: bool,
}

impl Cli {
    pub fn from_env() -> Cli {
        Cli::from(&var)
    }

    fn from(get: Get<'_>) -> Cli {
        let config_home = get("XDG_CONFIG_HOME")
            .map(PathBuf::from)
            .or_else(|| get("HOME").map(|h| PathBuf::from(h).join(".config")));
        Cli {
            endpoint: get("SLESS_ENDPOINT"),
            token: get("SLESS_TOKEN"),
            profile: get("SLESS_PROFILE"),
            config_home,
            no_color: get("NO_COLOR").is_some(),
        }
    }

    /// `sless/config.toml` under the configuration directory.
    pub fn profile_file(&self) -> Option<PathBuf> {
        self.config_home
            .as_ref()
            .map(|d| d.join("sless").join("config.toml"))
    }
}
