//! The dependencies of Python and Node.js functions: `pip install` of a
//! `requirements.txt` and `npm ci`/`npm install` of a `package.json`.

use std::ffi::OsString;
use std::path::PathBuf;

use super::Steps;
use crate::driver::DriverError;

async fn is_file(path: PathBuf) -> bool {
    tokio::fs::metadata(path).await.is_ok_and(|m| m.is_file())
}

/// pip for `code/requirements.txt` into `deps/`, when there is one.
pub(super) async fn python_deps(steps: &Steps<'_>) -> Result<(), DriverError> {
    if !is_file(steps.dir.join("code/requirements.txt")).await {
        return Ok(());
    }
    let python = match steps.builder.jails {
        Some(jails) if steps.jail.is_some() => jails.toolchain.python.clone(),
        _ => PathBuf::from(&steps.builder.tools.python),
    };
    let mut args: Vec<OsString> = [
        "-m",
        "pip",
        "install",
        "--disable-pip-version-check",
        "--no-input",
        "-r",
    ]
    .map(OsString::from)
    .into();
    args.push(steps.path("code/requirements.txt").into_os_string());
    args.push("--target".into());
    args.push(steps.path("deps").into_os_string());
    let step = steps.step(
        python,
        args,
        "code",
        &["PIP_"],
        vec![
            ("PYTHONDONTWRITEBYTECODE".to_owned(), "1".to_owned()),
            // pip's lines reach the build log as it prints them.
            ("PYTHONUNBUFFERED".to_owned(), "1".to_owned()),
        ],
        &[],
    );
    steps.run("pip install", step).await
}

/// npm for `code/package.json` into `code/node_modules`, when there is one:
/// `npm ci` with a lockfile, else `npm install`; never the devDependencies.
pub(super) async fn node_deps(steps: &Steps<'_>) -> Result<(), DriverError> {
    let code = steps.dir.join("code");
    if !is_file(code.join("package.json")).await {
        return Ok(());
    }
    let locked = is_file(code.join("package-lock.json")).await
        || is_file(code.join("npm-shrinkwrap.json")).await;
    let (what, verb) = if locked {
        ("npm ci", "ci")
    } else {
        ("npm install", "install")
    };
    let npm = match steps.builder.jails {
        Some(jails) if steps.jail.is_some() => jails.toolchain.npm.clone(),
        _ => PathBuf::from(&steps.builder.tools.npm),
    };
    let cache = steps.cache("npm", &steps.builder.tools.npm_cache);
    let step = steps.step(
        npm,
        [verb, "--omit=dev", "--no-audit", "--no-fund"]
            .map(OsString::from)
            .into(),
        "code",
        &["NPM_CONFIG_", "npm_config_"],
        vec![
            (
                "NPM_CONFIG_CACHE".to_owned(),
                cache.to_string_lossy().into_owned(),
            ),
            ("NPM_CONFIG_UPDATE_NOTIFIER".to_owned(), "false".to_owned()),
            ("NODE_ENV".to_owned(), "production".to_owned()),
        ],
        &[],
    );
    steps.run(what, step).await
}
