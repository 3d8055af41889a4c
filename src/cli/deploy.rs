//! `sless deploy DIR`: creates or updates the function from a directory
//! (and its optional `sless.toml`), uploads the directory packed the same
//! way every time, and follows the build to Ready. `sless rollback` follows
//! its deploy the same way.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use clap::Args;
use serde::Deserialize;
use sless_client::package::{PackLimits, zip_dir};
use sless_client::types::FunctionView;
use sless_client::{Client, CreateFunction, UpdateFunction};
use sless_domain::DomainError;
use sless_domain::spec::Scaling;

use super::follow::{Watch, secs};
use super::output::{Failure, Out};

/// The file in a function's directory that `deploy` reads.
pub const MANIFEST: &str = "sless.toml";

#[derive(Args, Debug)]
pub struct DeployArgs {
    /// The function's directory.
    pub dir: PathBuf,
    /// The function's name (default: sless.toml's, else the directory's).
    #[arg(long)]
    pub name: Option<String>,
    /// `python3.11`, `nodejs20` or `go1.23` (default: sless.toml's, else
    /// guessed from the files: requirements.txt or *.py, package.json or
    /// *.js, go.mod).
    #[arg(long)]
    pub runtime: Option<String>,
    /// `module.function` (Python, Node.js) or `package.Function` (Go);
    /// default: sless.toml's, else `handler.handle` (`handler.Handle`).
    #[arg(long)]
    pub entrypoint: Option<String>,
    /// An environment variable, `K=V` (repeat); replaces sless.toml's env.
    #[arg(long = "env", value_name = "K=V")]
    pub env: Vec<String>,
    /// Memory limit in MiB.
    #[arg(long)]
    pub memory: Option<u32>,
    /// Seconds a call may take.
    #[arg(long = "timeout-sec", alias = "fn-timeout")]
    pub timeout_sec: Option<u32>,
    /// Seconds without a call after which the function is stopped (the
    /// next call starts it again); 0: never.
    #[arg(long = "scale-to-zero-after-sec")]
    pub scale_to_zero_after_sec: Option<u32>,
    /// Instances kept running however quiet it is (0: it scales to zero
    /// when idle); at most --max-instances.
    #[arg(long = "min-instances", value_name = "N")]
    pub min_instances: Option<u32>,
    /// The most instances it scales out to, 1 to 100 (default 10).
    #[arg(long = "max-instances", value_name = "N")]
    pub max_instances: Option<u32>,
    /// Calls one instance takes at once, 1 to 1000 (default: the
    /// runtime's: python3.11 10, nodejs20 50, go1.23 100).
    #[arg(long, value_name = "N")]
    pub concurrency: Option<u32>,
    /// Do not wait for the build and deploy.
    #[arg(long)]
    pub no_wait: bool,
    /// How long to wait for Ready, in seconds.
    #[arg(long, default_value_t = 600)]
    pub timeout: u64,
    /// List the files packed.
    #[arg(short, long)]
    pub verbose: bool,
}

/// `sless.toml`: what `deploy` takes from the directory itself.
#[derive(Debug, Default, Deserialize)]
#[serde(deny_unknown_fields)]
struct Manifest {
    name: Option<String>,
    runtime: Option<String>,
    entrypoint: Option<String>,
    memory_mb: Option<u32>,
    timeout_sec: Option<u32>,
    scale_to_zero_after_sec: Option<u32>,
    min_instances: Option<u32>,
    max_instances: Option<u32>,
    concurrency: Option<u32>,
    env: Option<BTreeMap<String, String>>,
}

/// The function a directory describes.
struct Wanted {
    name: String,
    runtime: String,
    entrypoint: String,
    memory_mb: Option<u32>,
    timeout_sec: Option<u32>,
    scale_to_zero_after_sec: Option<u32>,
    /// The scaling settings given (by a flag or in sless.toml).
    scaling: Scaling,
    /// Those of them given by a flag (the others are sless.toml's).
    flagged: Vec<&'static str>,
    env: Option<BTreeMap<String, String>>,
}

fn wanted(args: &DeployArgs) -> Result<Wanted, Failure> {
    let dir = &args.dir;
    if !dir.is_dir() {
        return Err(Failure::usage(format!(
            "{} is not a directory",
            dir.display()
        )));
    }
    let manifest_path = dir.join(MANIFEST);
    let manifest: Manifest = match std::fs::read_to_string(&manifest_path) {
        Ok(text) => toml::from_str(&text).map_err(|e| {
            Failure::usage(format!(
                "{} does not read: {}",
                manifest_path.display(),
                e.message()
            ))
        })?,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Manifest::default(),
        Err(e) => {
            return Err(Failure::usage(format!(
                "cannot read {}: {e}",
                manifest_path.display()
            )));
        }
    };
    let name = match args.name.clone().or(manifest.name) {
        Some(n) => n,
        None => name_of_dir(dir)?,
    };
    let runtime = match args.runtime.clone().or(manifest.runtime) {
        Some(r) => r,
        None => runtime_of_dir(dir)?,
    };
    let entrypoint = args
        .entrypoint
        .clone()
        .or(manifest.entrypoint)
        .unwrap_or_else(|| {
            if runtime.starts_with("go") {
                "handler.Handle".into()
            } else {
                "handler.handle".into()
            }
        });
    let env = if args.env.is_empty() {
        manifest.env
    } else {
        let mut env = BTreeMap::new();
        for pair in &args.env {
            let (k, v) = pair
                .split_once('=')
                .ok_or_else(|| Failure::usage(format!("--env {pair:?} is not K=V")))?;
            env.insert(k.to_owned(), v.to_owned());
        }
        Some(env)
    };
    Ok(Wanted {
        name,
        runtime,
        entrypoint,
        memory_mb: args.memory.or(manifest.memory_mb),
        timeout_sec: args.timeout_sec.or(manifest.timeout_sec),
        scale_to_zero_after_sec: args
            .scale_to_zero_after_sec
            .or(manifest.scale_to_zero_after_sec),
        scaling: Scaling {
            min_instances: args.min_instances.or(manifest.min_instances),
            max_instances: args.max_instances.or(manifest.max_instances),
            concurrency: args.concurrency.or(manifest.concurrency),
        },
        flagged: [
            ("min_instances", args.min_instances),
            ("max_instances", args.max_instances),
            ("concurrency", args.concurrency),
        ]
        .into_iter()
        .filter_map(|(setting, flag)| flag.map(|_| setting))
        .collect(),
        env,
    })
}

/// Checks the scaling the function will have once `w` is applied over
/// `now` (the function as it is; `None`: it is created), with the
/// domain's rule, before anything is sent. The error names the flag, or
/// the key of sless.toml, that asked for the value at fault.
fn check_scaling(w: &Wanted, now: Option<&FunctionView>) -> Result<(), Failure> {
    let asked = w.scaling;
    let after = match now {
        None => asked,
        Some(f) => Scaling {
            min_instances: asked.min_instances.or(f.min_instances),
            max_instances: asked.max_instances.or(f.max_instances),
            concurrency: asked.concurrency.or(f.concurrency),
        },
    };
    after.validate().map_err(|e| match e {
        DomainError::Invalid { field, detail } => {
            // `min_instances` above the function's `max_instances`: the
            // max asked for is at fault when the min was not asked for.
            let at_fault = w.origin(field).or_else(|| {
                (field == "min_instances")
                    .then(|| w.origin("max_instances"))
                    .flatten()
            });
            Failure::usage(match at_fault {
                Some(origin) => format!("{origin}: {detail}"),
                None => detail,
            })
        }
        other => Failure::usage(other.to_string()),
    })
}

impl Wanted {
    /// Where scaling setting `setting` was asked for: its flag, or its key
    /// in sless.toml; `None` when it was not.
    fn origin(&self, setting: &str) -> Option<String> {
        let asked = match setting {
            "min_instances" => self.scaling.min_instances,
            "max_instances" => self.scaling.max_instances,
            "concurrency" => self.scaling.concurrency,
            _ => None,
        };
        asked?;
        Some(if self.flagged.contains(&setting) {
            format!("--{}", setting.replace('_', "-"))
        } else {
            format!("{setting} in {MANIFEST}")
        })
    }
}

/// A function name from a directory's: `hello_World` → `hello-world`.
fn name_of_dir(dir: &Path) -> Result<String, Failure> {
    let base = std::fs::canonicalize(dir)
        .ok()
        .and_then(|d| d.file_name().map(|n| n.to_string_lossy().into_owned()))
        .unwrap_or_default();
    let name: String = base
        .to_ascii_lowercase()
        .chars()
        .map(|c| if c.is_ascii_alphanumeric() { c } else { '-' })
        .collect();
    let name = name.trim_matches('-').to_owned();
    if sless_domain::FunctionName::parse(&name).is_err() {
        return Err(Failure::usage(format!(
            "{base:?} is not a function name; pass --name or set `name` in {MANIFEST}"
        )));
    }
    Ok(name)
}

fn runtime_of_dir(dir: &Path) -> Result<String, Failure> {
    let has = |f: &str| dir.join(f).exists();
    let has_ext = |ext: &str| {
        std::fs::read_dir(dir).is_ok_and(|mut entries| {
            entries.any(|e| e.is_ok_and(|e| e.path().extension().is_some_and(|x| x == ext)))
        })
    };
    if has("go.mod") {
        Ok("go1.23".into())
    } else if has("package.json") || has_ext("js") {
        Ok("nodejs20".into())
    } else if has("requirements.txt") || has_ext("py") {
        Ok("python3.11".into())
    } else {
        Err(Failure::usage(format!(
            "cannot tell the runtime of {}: pass --runtime python3.11|nodejs20|go1.23 \
             or set `runtime` in {MANIFEST}",
            dir.display()
        )))
    }
}

/// The fields of `wanted` that differ from the function's now.
fn change_of(w: &Wanted, f: &FunctionView) -> UpdateFunction {
    let differs = |now: &Option<String>, want: &str| now.as_deref() != Some(want);
    UpdateFunction {
        name: None,
        runtime: differs(&f.runtime, &w.runtime).then(|| w.runtime.clone()),
        entrypoint: differs(&f.entrypoint, &w.entrypoint).then(|| w.entrypoint.clone()),
        memory_mb: w.memory_mb.filter(|m| f.memory_mb != Some(*m)),
        timeout_sec: w.timeout_sec.filter(|t| f.timeout_sec != Some(*t)),
        env_vars: w.env.clone().filter(|e| f.env_vars.as_ref() != Some(e)),
        scale_to_zero_after_sec: w
            .scale_to_zero_after_sec
            .filter(|s| f.scale_to_zero_after_sec != Some(*s)),
        min_instances: w
            .scaling
            .min_instances
            .filter(|m| f.min_instances != Some(*m)),
        max_instances: w
            .scaling
            .max_instances
            .filter(|m| f.max_instances != Some(*m)),
        concurrency: w.scaling.concurrency.filter(|c| f.concurrency != Some(*c)),
    }
}

fn is_empty(c: &UpdateFunction) -> bool {
    c.runtime.is_none()
        && c.entrypoint.is_none()
        && c.memory_mb.is_none()
        && c.timeout_sec.is_none()
        && c.env_vars.is_none()
        && c.scale_to_zero_after_sec.is_none()
        && c.min_instances.is_none()
        && c.max_instances.is_none()
        && c.concurrency.is_none()
}

pub async fn deploy(client: &Client, out: &Out, args: DeployArgs) -> Result<(), Failure> {
    let started = Instant::now();
    let w = wanted(&args)?;
    // Packed before anything is sent: a directory that cannot be
    // uploaded changes nothing.
    let dir = args.dir.clone();
    let packed = tokio::task::spawn_blocking(move || zip_dir(&dir, &PackLimits::default()))
        .await
        .map_err(|e| Failure::failed(format!("packing failed: {e}")))?
        .map_err(|e| Failure::usage(e.to_string()))?;
    if args.verbose && !out.quiet {
        for path in &packed.paths {
            eprintln!("  + {path}");
        }
    }
    // Followed from before the first change: nothing it causes is missed.
    let tail = client.tail_function(&w.name).await?;
    let now = match client.get_function(&w.name).await {
        Ok(f) => Some(f),
        Err(e) if e.is_not_found() => None,
        Err(e) => return Err(e.into()),
    };
    check_scaling(&w, now.as_ref().map(|f| &f.doc))?;
    let (created, spec_changed, runtime_changed) = match now {
        Some(f) => {
            let change = change_of(&w, &f);
            if is_empty(&change) {
                (false, false, false)
            } else {
                let runtime = change.runtime.is_some();
                client.update_function(&w.name, &change).await?;
                (false, true, runtime)
            }
        }
        None => {
            let defaults: CreateFunction = serde_json::from_value(serde_json::json!({
                "name": w.name, "runtime": w.runtime, "entrypoint": w.entrypoint,
            }))
            .expect("the defaults of a create");
            client
                .create_function(&CreateFunction {
                    memory_mb: w.memory_mb.unwrap_or(defaults.memory_mb),
                    timeout_sec: w.timeout_sec.unwrap_or(defaults.timeout_sec),
                    env_vars: w.env.clone().unwrap_or_default(),
                    scale_to_zero_after_sec: w.scale_to_zero_after_sec,
                    min_instances: w.scaling.min_instances,
                    max_instances: w.scaling.max_instances,
                    concurrency: w.scaling.concurrency,
                    ..defaults
                })
                .await?;
            (true, false, false)
        }
    };
    let uploaded = client.upload(&w.name, packed.bytes.clone()).await?;
    let unchanged = uploaded.unchanged == Some(true);
    let version = uploaded.version;
    let headline = if unchanged {
        format!("{} version {version}: source unchanged", w.name)
    } else {
        format!(
            "{} version {version}: uploaded {} file{}, {}",
            w.name,
            packed.files,
            if packed.files == 1 { "" } else { "s" },
            size(packed.bytes.len() as u64)
        )
    };
    if unchanged && !spec_changed {
        // Nothing changed: say where the version is.
        let f = client.get_function(&w.name).await?;
        return report_unchanged(out, &w.name, version, &f, started);
    }
    if args.no_wait {
        if out.json() {
            out.document(&serde_json::json!({
                "name": w.name, "version": version, "created": created,
                "unchanged": unchanged, "status_url": uploaded.status_url,
            }));
        } else {
            out.note(&format!(
                "{headline}; follow it with `sless get {}`",
                w.name
            ));
        }
        return Ok(());
    }
    let watch = Watch {
        client,
        out,
        name: &w.name,
        version,
        builds: !unchanged || runtime_changed,
        started,
        timeout: Duration::from_secs(args.timeout),
        headline,
    };
    let followed = watch.run(tail).await?;
    finish(client, out, &w.name, created, unchanged, followed).await
}

fn report_unchanged(
    out: &Out,
    name: &str,
    version: u32,
    f: &FunctionView,
    started: Instant,
) -> Result<(), Failure> {
    if out.json() {
        out.document(&serde_json::json!({
            "name": name, "version": version, "unchanged": true, "phase": f.phase,
            "url": f.url, "seconds": secs(started.elapsed()),
        }));
    } else {
        out.note(&format!(
            "{name}: unchanged (version {version}, {})",
            out.phase(&f.phase)
        ));
    }
    if f.phase == "Failed" {
        return Err(Failure::failed(format!(
            "{name} version {version} failed: {}",
            f.last_error.as_deref().unwrap_or("no error recorded")
        )));
    }
    Ok(())
}

async fn finish(
    client: &Client,
    out: &Out,
    name: &str,
    created: bool,
    unchanged: bool,
    followed: super::follow::Followed,
) -> Result<(), Failure> {
    let f = client.get_function(name).await?;
    if out.json() {
        out.document(&serde_json::json!({
            "name": name, "version": followed.version, "created": created,
            "unchanged": unchanged, "phase": "Ready", "url": f.url,
            "seconds": followed.seconds, "steps": followed.steps,
        }));
    } else {
        out.note(&format!("url: {}", f.url));
    }
    Ok(())
}

/// `sless rollback NAME V`: makes V live again and follows its deploy.
pub async fn rollback(
    client: &Client,
    out: &Out,
    name: &str,
    version: u32,
    no_wait: bool,
) -> Result<(), Failure> {
    let started = Instant::now();
    let tail = client.tail_function(name).await?;
    let f = client.rollback(name, version).await?;
    if f.unchanged == Some(true) || no_wait {
        if out.json() {
            out.document(&f.doc);
        } else if f.unchanged == Some(true) {
            out.note(&format!("{name}: version {version} is live already"));
        } else {
            out.note(&format!("{name}: rolling back to version {version}"));
        }
        return Ok(());
    }
    let watch = Watch {
        client,
        out,
        name,
        version,
        builds: false,
        started,
        timeout: Duration::from_secs(600),
        headline: format!("{name}: rolling back to version {version}"),
    };
    let followed = watch.run(tail).await?;
    finish(client, out, name, false, false, followed).await
}

/// `1.2 KiB`.
pub fn size(bytes: u64) -> String {
    if bytes < 1024 {
        format!("{bytes} B")
    } else if bytes < 1024 * 1024 {
        format!("{:.1} KiB", bytes as f64 / 1024.0)
    } else {
        format!("{:.1} MiB", bytes as f64 / (1024.0 * 1024.0))
    }
}

#[cfg(test)]
mod tests;
