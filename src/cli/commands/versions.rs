//! A function's versions: `versions`, `source` (a version's files),
//! `diff` (between two versions) and `build-log` (a version's build).

use std::io::{Read, Write};

use sless_client::{BuildLogEvent, Client};

use crate::cli::deploy;
use crate::cli::output::{Failure, Out, Table, code, or_dash};

pub async fn versions(client: &Client, out: &Out, name: &str) -> Result<(), Failure> {
    let list = client.list_versions(name).await?;
    if out.json() {
        out.document(&list);
        return Ok(());
    }
    let mut t = Table::new(&["VERSION", "", "FILES", "SIZE", "UPLOADED", "BY", "SHA256"]);
    for v in &list.items {
        let mark = match (v.live, v.deployed) {
            (true, true) => out.paint("32", "live"),
            (true, false) => out.paint("33", "live (not running)"),
            (false, true) => "running".into(),
            (false, false) => String::new(),
        };
        t.row(vec![
            v.version.to_string(),
            mark,
            v.files.to_string(),
            deploy::size(v.size),
            v.uploaded_at.format("%Y-%m-%d %H:%M:%S").to_string(),
            or_dash(v.uploaded_by.clone()),
            v.sha256.chars().take(12).collect(),
        ]);
    }
    t.print();
    Ok(())
}

pub async fn source(
    client: &Client,
    out: &Out,
    name: &str,
    version: Option<u32>,
    file: Option<&str>,
) -> Result<(), Failure> {
    let view = match version {
        Some(v) => client.get_version_source(name, v).await?,
        None => client.get_source(name).await?,
    };
    let Some(file) = file else {
        if out.json() {
            out.document(&view);
            return Ok(());
        }
        let mut t = Table::new(&["PATH", "SIZE", ""]);
        for f in &view.files {
            t.row(vec![
                f.path.clone(),
                deploy::size(f.size),
                if f.binary {
                    "binary".into()
                } else {
                    String::new()
                },
            ]);
        }
        out.note(&format!("{name} version {}:", view.version));
        t.print();
        return Ok(());
    };
    let Some(entry) = view.files.iter().find(|f| f.path == file) else {
        return Err(Failure::new(
            code::NOT_FOUND,
            format!("version {} of {name} has no file {file:?}", view.version),
        ));
    };
    let bytes = match (&entry.content, entry.truncated) {
        (Some(text), false) => text.clone().into_bytes(),
        // Not inlined (binary, or past the limit): from the zip itself.
        _ => {
            let zip = client.get_version_archive(name, view.version).await?;
            let mut archive = zip::ZipArchive::new(std::io::Cursor::new(zip))
                .map_err(|e| Failure::new(code::SERVER, format!("the version's zip: {e}")))?;
            let mut f = archive
                .by_name(file)
                .map_err(|e| Failure::new(code::SERVER, format!("{file} in the zip: {e}")))?;
            let mut buf = Vec::new();
            f.read_to_end(&mut buf)
                .map_err(|e| Failure::new(code::SERVER, format!("{file} in the zip: {e}")))?;
            buf
        }
    };
    if out.json() {
        out.document(&serde_json::json!({
            "path": file, "version": view.version,
            "content": String::from_utf8_lossy(&bytes),
        }));
    } else {
        let mut stdout = std::io::stdout().lock();
        let _ = stdout.write_all(&bytes);
        let _ = stdout.flush();
    }
    Ok(())
}

pub async fn diff(
    client: &Client,
    out: &Out,
    name: &str,
    from: u32,
    to: u32,
) -> Result<(), Failure> {
    let d = client.diff_versions(name, from, to).await?;
    if out.json() {
        out.document(&d);
        return Ok(());
    }
    if d.files.is_empty() {
        out.note(&format!(
            "versions {from} and {to} of {name} have the same files"
        ));
        return Ok(());
    }
    for f in &d.files {
        if f.binary {
            println!("{} {} (binary)", f.change, f.path);
            continue;
        }
        let Some(text) = &f.diff else {
            println!("{} {} (diff left out: too large)", f.change, f.path);
            continue;
        };
        for line in text.lines() {
            let painted = if line.starts_with("+++") || line.starts_with("---") {
                out.paint("1", line)
            } else if line.starts_with('+') {
                out.paint("32", line)
            } else if line.starts_with('-') {
                out.paint("31", line)
            } else if line.starts_with("@@") {
                out.paint("36", line)
            } else {
                line.to_owned()
            };
            println!("{painted}");
        }
    }
    if d.truncated {
        out.note("(the diff was cut at the API's limit)");
    }
    Ok(())
}

pub async fn build_log(
    client: &Client,
    out: &Out,
    name: &str,
    version: Option<u32>,
    follow: bool,
) -> Result<(), Failure> {
    let version = match version {
        Some(v) => v,
        None => {
            let list = client.list_versions(name).await?;
            list.live_version.ok_or_else(|| {
                Failure::new(code::NOT_FOUND, format!("{name} has no version yet"))
            })?
        }
    };
    if !follow {
        let log = client.get_build_log(name, version).await?;
        if out.json() {
            out.document(&serde_json::json!({ "name": name, "version": version, "log": log }));
        } else {
            print!("{log}");
        }
        return Ok(());
    }
    let mut stream = client.follow_build_log(name, version).await?;
    while let Some(event) = stream.next().await {
        match event? {
            BuildLogEvent::Line(line) => {
                if out.json() {
                    out.json_line(&serde_json::json!({ "line": line }));
                } else {
                    println!("{line}");
                    let _ = std::io::stdout().flush();
                }
            }
            BuildLogEvent::End { outcome, error } => {
                if out.json() {
                    out.json_line(&serde_json::json!({ "end": outcome, "error": error }));
                }
                if outcome == "failed" {
                    return Err(Failure::failed(format!(
                        "the build of {name} version {version} failed: {}",
                        error.unwrap_or_default()
                    )));
                }
                if outcome != "succeeded" {
                    return Err(Failure::new(
                        code::SERVER,
                        format!("the build log of {name} version {version} ended: {outcome}"),
                    ));
                }
            }
        }
    }
    Ok(())
}
