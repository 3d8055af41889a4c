//! Finding the processes a test started, by what their command line (or,
//! for a sandbox, their bwrap's owner) mentions: a jailed function's own
//! command line names no host path.

/// The environment variable a sandbox's bwrap carries (`sless_sandbox::OWNER_ENV`).
const OWNER_ENV: &str = "SLESS_SANDBOX_OF";

/// Processes (pid, command line) whose command line mentions `needle`, or,
/// for a sandbox, whose owner does (the local driver's data directory). A
/// sandbox counts once, as its outer bwrap: its init and what it runs go
/// with it. Zombies and this process are left out.
pub fn mentioning(needle: &str) -> Vec<(u32, String)> {
    let owner = format!("{OWNER_ENV}=");
    let mut found: Vec<(u32, String, bool)> = Vec::new();
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    for entry in entries.flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        // A zombie has an empty command line and has already exited.
        if raw.is_empty() {
            continue;
        }
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        if cmdline.contains(needle) {
            found.push((pid, cmdline, false));
            continue;
        }
        let environ = std::fs::read(entry.path().join("environ")).unwrap_or_default();
        let jailed = environ
            .split(|b| *b == 0)
            .filter_map(|var| std::str::from_utf8(var).ok())
            .any(|var| var.strip_prefix(&owner).is_some_and(|o| o.contains(needle)));
        if jailed {
            found.push((pid, cmdline, true));
        }
    }
    let jails: Vec<u32> = found.iter().filter(|f| f.2).map(|f| f.0).collect();
    found
        .into_iter()
        .filter(|(pid, _, jail)| !*jail || !parent_of(*pid).is_some_and(|p| jails.contains(&p)))
        .map(|(pid, cmdline, _)| (pid, cmdline))
        .collect()
}

fn parent_of(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat.rsplit_once(')')?
        .1
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}
