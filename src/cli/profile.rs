//! Profiles: which API and token the user commands use, kept in
//! `~/.config/sless/config.toml` (mode 0600, in a 0700 directory):
//!
//! ```toml
//! default = "dev"
//!
//! [profiles.dev]
//! endpoint = "http://127.0.0.1:8080"
//! token = "eyJ..."
//! ```
//!
//! `sless login` writes one; `sless dev` writes `dev` each time it starts.
//! A flag (`--endpoint`, `--token`) wins over the environment
//! (`SLESS_ENDPOINT`, `SLESS_TOKEN`), which wins over the profile
//! (`--profile`, else `SLESS_PROFILE`, else the file's `default`, else
//! `dev`).

use std::collections::BTreeMap;
use std::io::Write;
use std::os::unix::fs::{OpenOptionsExt, PermissionsExt};
use std::path::Path;

use serde::{Deserialize, Serialize};
use sless_client::{Client, Config, PageQuery};

use super::Global;
use super::output::{Failure, Out, code};

/// The profile file.
#[derive(Debug, Default, Serialize, Deserialize)]
pub struct ProfileFile {
    /// The profile used when none is named.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub default: Option<String>,
    #[serde(default)]
    pub profiles: BTreeMap<String, Profile>,
}

/// One API and token.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Profile {
    pub endpoint: String,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub token: Option<String>,
    /// The namespace, when not the token's own (an admin token's).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// The profile a user command runs with when none is named or set.
pub const DEV_PROFILE: &str = "dev";

impl ProfileFile {
    fn read(path: &Path) -> Result<ProfileFile, Failure> {
        match std::fs::read_to_string(path) {
            Ok(text) => toml::from_str(&text).map_err(|e| {
                Failure::usage(format!("{} does not read: {}", path.display(), e.message()))
            }),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(ProfileFile::default()),
            Err(e) => Err(Failure::usage(format!(
                "cannot read {}: {e}",
                path.display()
            ))),
        }
    }

    /// Writes the file whole, readable by its owner only.
    fn write(&self, path: &Path) -> std::io::Result<()> {
        let dir = path.parent().expect("the file is in a directory");
        std::fs::create_dir_all(dir)?;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o700))?;
        let text = toml::to_string(self).map_err(std::io::Error::other)?;
        let tmp = dir.join(format!(".config.toml.{}", std::process::id()));
        let _ = std::fs::remove_file(&tmp);
        let mut file = std::fs::OpenOptions::new()
            .write(true)
            .create_new(true)
            .mode(0o600)
            .open(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
        std::fs::rename(&tmp, path)
    }
}

fn no_file() -> Failure {
    Failure::usage("no configuration directory: set HOME or XDG_CONFIG_HOME")
}

/// The client a user command talks through.
pub fn client(global: &Global, env: &crate::config::Cli) -> Result<Client, Failure> {
    let file = match env.profile_file() {
        Some(path) => ProfileFile::read(&path)?,
        None => ProfileFile::default(),
    };
    let named = global.profile.clone().or(env.profile.clone());
    let name = named
        .clone()
        .or(file.default.clone())
        .unwrap_or_else(|| DEV_PROFILE.into());
    let profile = file.profiles.get(&name).cloned();
    if let (Some(n), None) = (&named, &profile) {
        let known: Vec<_> = file.profiles.keys().map(String::as_str).collect();
        return Err(Failure::usage(format!(
            "no profile {n:?} (known: {}); write one with `sless login --as {n}`",
            if known.is_empty() {
                "none".into()
            } else {
                known.join(", ")
            }
        )));
    }
    let profile = profile.unwrap_or_default();
    let endpoint = global
        .endpoint
        .clone()
        .or(env.endpoint.clone())
        .or((!profile.endpoint.is_empty()).then_some(profile.endpoint));
    let Some(endpoint) = endpoint else {
        return Err(Failure::usage(
            "no API to talk to: start one with `sless dev` (it writes the `dev` profile), \
             or run `sless login --endpoint URL --token TOKEN`",
        ));
    };
    let token = global.token.clone().or(env.token.clone()).or(profile.token);
    let Some(token) = token else {
        return Err(Failure::new(
            code::AUTH,
            format!("no token for {endpoint}: set SLESS_TOKEN, pass --token, or run `sless login`"),
        ));
    };
    let mut config = Config::new(endpoint, Some(token));
    config.namespace = profile.namespace;
    Client::with_config(config).map_err(Failure::from)
}

/// `sless login`: checks the endpoint and token against the API, then
/// saves them as a profile and makes it the default.
pub async fn login(
    global: &Global,
    env: &crate::config::Cli,
    out: &Out,
    endpoint: Option<String>,
    token: Option<String>,
    name: Option<String>,
) -> Result<(), Failure> {
    let endpoint = endpoint
        .or(global.endpoint.clone())
        .or(env.endpoint.clone())
        .ok_or_else(|| Failure::usage("sless login needs --endpoint URL"))?;
    let token = token
        .or(global.token.clone())
        .or(env.token.clone())
        .ok_or_else(|| Failure::usage("sless login needs --token TOKEN"))?;
    let client = Client::new(endpoint.clone(), token.clone())?;
    // One call that needs the token: a wrong endpoint or token is said now.
    let one = PageQuery {
        limit: Some(1),
        cursor: None,
    };
    client.list_functions_page(&one).await?;
    let path = env.profile_file().ok_or_else(no_file)?;
    let mut file = ProfileFile::read(&path)?;
    let name = name.unwrap_or_else(|| "default".into());
    file.profiles.insert(
        name.clone(),
        Profile {
            endpoint: endpoint.clone(),
            token: Some(token),
            namespace: None,
        },
    );
    file.default = Some(name.clone());
    file.write(&path)
        .map_err(|e| Failure::usage(format!("cannot write {}: {e}", path.display())))?;
    if out.json() {
        out.document(&serde_json::json!({
            "profile": name, "endpoint": endpoint, "namespace": client.namespace(),
            "file": path,
        }));
    } else {
        out.note(&format!(
            "logged in to {endpoint} as namespace {} (profile {name:?} in {})",
            client.namespace(),
            path.display()
        ));
    }
    Ok(())
}

/// What `sless dev` writes at each start: the `dev` profile for this
/// instance, the default unless another default was chosen. Answers the
/// file written.
pub fn save_dev(
    env: &crate::config::Cli,
    endpoint: &str,
    token: &str,
) -> anyhow::Result<std::path::PathBuf> {
    let path = env
        .profile_file()
        .ok_or_else(|| anyhow::anyhow!("no configuration directory (HOME, XDG_CONFIG_HOME)"))?;
    let mut file = ProfileFile::read(&path).map_err(|f| anyhow::anyhow!(f.message))?;
    file.profiles.insert(
        DEV_PROFILE.into(),
        Profile {
            endpoint: endpoint.into(),
            token: Some(token.into()),
            namespace: None,
        },
    );
    file.default.get_or_insert_with(|| DEV_PROFILE.into());
    file.write(&path)?;
    Ok(path)
}
