//! The Terraform provider (`terraform-provider-sless`) driven by real
//! Terraform against a real `sless dev`, on two Terraform versions: 1.0.3
//! (the oldest that speaks provider protocol 6) and a current one.
//!
//! The tests install Terraform themselves (`scripts/ensure-terraform`,
//! into `${XDG_CACHE_HOME:-~/.cache}/sless-ci/terraform`; the first run
//! needs PyPI) and use the provider built beside the `sless` binary, as
//! `sless dev` tells Terraform to (`dev_overrides`).

mod refusals;
mod walkthrough;

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

use serde_json::Value;
use tokio::process::Command;

use crate::Client;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Version {
    /// Terraform 1.0.3.
    Old,
    /// The current Terraform.
    Current,
}

/// The executable of a Terraform version, installed once per test binary.
fn terraform(version: Version) -> PathBuf {
    static PATHS: OnceLock<(PathBuf, PathBuf)> = OnceLock::new();
    let (old, current) = PATHS.get_or_init(|| {
        let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ensure-terraform");
        let out = std::process::Command::new(script)
            .output()
            .expect("running scripts/ensure-terraform");
        assert!(
            out.status.success(),
            "installing Terraform: {}",
            String::from_utf8_lossy(&out.stderr)
        );
        let text = String::from_utf8(out.stdout).unwrap();
        let mut lines = text.lines().map(PathBuf::from);
        (lines.next().unwrap(), lines.next().unwrap())
    });
    match version {
        Version::Old => old.clone(),
        Version::Current => current.clone(),
    }
}

/// The directory of the provider built beside `sless`.
fn provider_dir() -> PathBuf {
    let dir = Path::new(env!("CARGO_BIN_EXE_sless")).parent().unwrap();
    assert!(
        dir.join("terraform-provider-sless").is_file(),
        "no provider in {}: build it with `cargo build -p sless-terraform` (scripts/test does)",
        dir.display()
    );
    dir.to_owned()
}

/// What one Terraform command did.
pub struct Run {
    pub code: i32,
    pub stdout: String,
    pub stderr: String,
}

impl Run {
    /// Everything it printed.
    pub fn text(&self) -> String {
        format!("{}{}", self.stdout, self.stderr)
    }
}

/// A Terraform working directory against one `sless dev`.
pub struct Workspace {
    exe: PathBuf,
    pub version: Version,
    pub dir: PathBuf,
    env: Vec<(String, String)>,
}

impl Workspace {
    /// An empty working directory in `scratch`, whose provider settings
    /// come from the environment (`SLESS_ENDPOINT`, `SLESS_TOKEN`).
    pub fn new(version: Version, scratch: &Path, c: &Client) -> Workspace {
        let dir = scratch.join(format!("tf-{version:?}").to_lowercase());
        std::fs::create_dir_all(&dir).unwrap();
        let rc = scratch.join(format!("terraform-{version:?}.rc"));
        std::fs::write(
            &rc,
            format!(
                "provider_installation {{\n  dev_overrides {{\n    \"sless.dev/sless/sless\" = {:?}\n  }}\n  direct {{}}\n}}\n",
                provider_dir().display().to_string()
            ),
        )
        .unwrap();
        let env = [
            ("TF_CLI_CONFIG_FILE", rc.display().to_string()),
            ("CHECKPOINT_DISABLE", "1".into()),
            ("TF_IN_AUTOMATION", "1".into()),
            ("TF_INPUT", "0".into()),
            ("HOME", scratch.display().to_string()),
            ("SLESS_ENDPOINT", c.url.clone()),
            ("SLESS_TOKEN", c.token.clone()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v))
        .collect();
        Workspace {
            exe: terraform(version),
            version,
            dir,
            env,
        }
    }

    /// A working directory holding a copy of examples/terraform.
    pub fn with_example(version: Version, scratch: &Path, c: &Client) -> Workspace {
        let ws = Workspace::new(version, scratch, c);
        let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/terraform");
        copy_dir(&example, &ws.dir);
        ws
    }

    pub fn set_env(&mut self, key: &str, value: &str) {
        self.env.retain(|(k, _)| k != key);
        self.env.push((key.to_owned(), value.to_owned()));
    }

    pub fn write(&self, name: &str, text: &str) {
        let path = self.dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    /// Replaces `from` by `to` in a file, which must hold it.
    pub fn edit(&self, name: &str, from: &str, to: &str) {
        let path = self.dir.join(name);
        let text = std::fs::read_to_string(&path).unwrap();
        assert!(text.contains(from), "{name} holds no {from:?}");
        std::fs::write(path, text.replacen(from, to, 1)).unwrap();
    }

    /// Runs `terraform ARGS` in the directory (at most 5 minutes).
    pub async fn run(&self, args: &[&str]) -> Run {
        let mut cmd = Command::new(&self.exe);
        cmd.args(args)
            .current_dir(&self.dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("TF_LOG")
            .kill_on_drop(true);
        let out = tokio::time::timeout(Duration::from_secs(300), cmd.output())
            .await
            .unwrap_or_else(|_| panic!("terraform {} took over 5 minutes", args.join(" ")))
            .expect("running terraform");
        let run = Run {
            code: out.status.code().unwrap_or(-1),
            stdout: String::from_utf8_lossy(&out.stdout).into_owned(),
            stderr: String::from_utf8_lossy(&out.stderr).into_owned(),
        };
        eprintln!(
            "$ terraform ({:?}) {}\n{}(exit {})",
            self.version,
            args.join(" "),
            run.text(),
            run.code
        );
        run
    }

    /// `terraform ARGS` started, its output piped.
    pub fn spawn(&self, args: &[&str]) -> tokio::process::Child {
        Command::new(&self.exe)
            .args(args)
            .current_dir(&self.dir)
            .envs(self.env.iter().map(|(k, v)| (k, v)))
            .env_remove("TF_LOG")
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .kill_on_drop(true)
            .spawn()
            .expect("starting terraform")
    }

    /// `terraform apply`, which must succeed.
    pub async fn apply(&self) -> Run {
        let run = self
            .run(&["apply", "-auto-approve", "-input=false", "-no-color"])
            .await;
        assert_eq!(run.code, 0, "terraform apply failed:\n{}", run.text());
        run
    }

    /// `terraform plan -detailed-exitcode`: 0 no changes, 2 changes, 1 error.
    pub async fn plan(&self) -> Run {
        self.run(&["plan", "-detailed-exitcode", "-input=false", "-no-color"])
            .await
    }

    /// The changes a plan would make, as `terraform show -json` says them.
    pub async fn changes(&self) -> Vec<Change> {
        let plan = self
            .run(&["plan", "-input=false", "-no-color", "-out=tfplan"])
            .await;
        assert_eq!(plan.code, 0, "terraform plan failed:\n{}", plan.text());
        let show = self.run(&["show", "-json", "tfplan"]).await;
        assert_eq!(show.code, 0);
        let doc: Value = serde_json::from_str(&show.stdout).unwrap();
        doc["resource_changes"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .iter()
            .map(Change::of)
            .collect()
    }

    /// `terraform output -json`.
    pub async fn outputs(&self) -> Value {
        let run = self.run(&["output", "-json"]).await;
        assert_eq!(run.code, 0);
        serde_json::from_str(&run.stdout).unwrap()
    }
}

/// One resource's planned change.
#[derive(Debug)]
pub struct Change {
    pub address: String,
    /// `["no-op"]`, `["update"]`, `["create"]`, `["delete", "create"]`...
    pub actions: Vec<String>,
    /// Attributes whose value changes to a known one.
    pub known: Vec<String>,
    /// Attributes that become known only at apply.
    pub unknown: Vec<String>,
}

impl Change {
    fn of(rc: &Value) -> Change {
        let change = &rc["change"];
        let before = change["before"].as_object().cloned().unwrap_or_default();
        let after = change["after"].as_object().cloned().unwrap_or_default();
        let after_unknown = change["after_unknown"]
            .as_object()
            .cloned()
            .unwrap_or_default();
        let unknown: Vec<String> = after_unknown
            .iter()
            .filter(|(_, v)| **v == Value::Bool(true))
            .map(|(k, _)| k.clone())
            .collect();
        let mut known: Vec<String> = after
            .iter()
            .filter(|(k, v)| !unknown.contains(k) && before.get(*k) != Some(*v))
            .map(|(k, _)| k.clone())
            .collect();
        known.sort();
        Change {
            address: rc["address"].as_str().unwrap_or_default().to_owned(),
            actions: change["actions"]
                .as_array()
                .unwrap()
                .iter()
                .map(|a| a.as_str().unwrap().to_owned())
                .collect(),
            known,
            unknown,
        }
    }

    pub fn is_noop(&self) -> bool {
        self.actions == ["no-op"] || self.actions == ["read"]
    }
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        let name = entry.file_name();
        let name = name.to_str().unwrap();
        if name.starts_with(".terraform") || name.starts_with("terraform.tfstate") {
            continue;
        }
        if entry.file_type().unwrap().is_dir() {
            copy_dir(&entry.path(), &to.join(name));
        } else {
            std::fs::copy(entry.path(), to.join(name)).unwrap();
        }
    }
}

/// A client of the instance, as a user outside Terraform acts on it.
pub fn api(c: &Client) -> sless_client::Client {
    sless_client::Client::new(c.url.clone(), c.token.clone()).unwrap()
}

/// The position of the namespace's newest event (0 with none): what a
/// refused command must leave as it was.
pub async fn last_position(api: &sless_client::Client) -> i64 {
    let page = api
        .list_events(&sless_client::EventFilter {
            limit: Some(1),
            ..Default::default()
        })
        .await
        .unwrap();
    page.items.first().map(|e| e.position).unwrap_or(0)
}

/// Calls `url` until it answers `status` (within 15 s: the proxy
/// remembers a function's endpoint for a second); answers the body.
pub async fn answers(c: &Client, url: &str, status: u16) -> String {
    sless_testkit::eventually(
        &format!("{url} to answer {status}"),
        Duration::from_secs(15),
        || async {
            let res = c.http.get(url).send().await.ok()?;
            (res.status().as_u16() == status).then_some(())?;
            res.text().await.ok()
        },
    )
    .await
}
