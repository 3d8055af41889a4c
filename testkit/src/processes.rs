//! Finding the processes a test started, by what their command line (or,
//! for a sandbox, their bwrap's owner) mentions: a jailed function's own
//! command line names no host path.

/// The environment variable a sandbox's bwrap carries (`sless_sandbox::OWNER_ENV`).
const OWNER_ENV: &str = "SLESS_SANDBOX_OF";

/// Processes (pid, command line) whose command line mentions `needle`, or,
/// for a sandbox, whose owner does (the local driver's data directory). A
/// sandbox counts once, as its outer bwrap: its init and what it runs go
/// with it, and so does its slirp4netns while any bwrap of the owner runs; a sandbox of the warm pool whose process waits for a function
/// does not count. Zombies and this process are left out.
pub fn mentioning(needle: &str) -> Vec<(u32, String)> {
    let owner = format!("{OWNER_ENV}=");
    let found: Vec<(u32, String, bool)> = live_processes()
        .filter_map(|(pid, dir, cmdline)| {
            if cmdline.contains(needle) {
                Some((pid, cmdline, false))
            } else {
                owned_by(&dir, &owner, needle).then_some((pid, cmdline, true))
            }
        })
        .collect();
    let jails: Vec<u32> = found.iter().filter(|f| f.2).map(|f| f.0).collect();
    let is_slirp = |cmdline: &str| {
        cmdline
            .split(' ')
            .next()
            .is_some_and(|program| program.ends_with("slirp4netns"))
    };
    // A jail's network helper (slirp4netns, which carries the owner too)
    // is part of its jail while one runs; alone, it is a leftover.
    let bwraps = found
        .iter()
        .any(|(_, cmdline, jail)| *jail && !is_slirp(cmdline));
    found
        .into_iter()
        .filter(|(_, cmdline, jail)| !(*jail && bwraps && is_slirp(cmdline)))
        .filter(|(pid, _, jail)| !*jail || !parent_of(*pid).is_some_and(|p| jails.contains(&p)))
        .filter(|(pid, cmdline, jail)| !*jail || !pool_jail_waits(*pid, cmdline))
        .map(|(pid, cmdline, _)| (pid, cmdline))
        .collect()
}

/// Whether the sandbox whose outer bwrap is `pid` holds a process of the
/// warm pool that waits for a function (its init, a child of bwrap, is in
/// the sandbox's mount namespace).
fn pool_jail_waits(pid: u32, cmdline: &str) -> bool {
    cmdline.split(' ').any(|a| a == "--pool")
        && live_processes()
            .find(|(child, _, _)| parent_of(*child) == Some(pid))
            .is_some_and(|(child, _, _)| waiting_in_the_pool(child, cmdline))
}

/// Every process but zombies (whose command line is empty: they have
/// exited) and this one: its pid, `/proc` directory and command line.
fn live_processes() -> impl Iterator<Item = (u32, std::path::PathBuf, String)> {
    let entries = std::fs::read_dir("/proc").into_iter().flatten().flatten();
    entries.filter_map(|entry| {
        let pid = entry.file_name().to_string_lossy().parse::<u32>().ok()?;
        let raw = std::fs::read(entry.path().join("cmdline")).ok()?;
        (pid != std::process::id() && !raw.is_empty()).then(|| {
            (
                pid,
                entry.path(),
                String::from_utf8_lossy(&raw).replace('\0', " "),
            )
        })
    })
}

/// Whether the process at `/proc/{pid}` is in a sandbox whose owner
/// mentions `needle`.
fn owned_by(proc_dir: &std::path::Path, owner: &str, needle: &str) -> bool {
    let environ = std::fs::read(proc_dir.join("environ")).unwrap_or_default();
    environ
        .split(|b| *b == 0)
        .filter_map(|var| std::str::from_utf8(var).ok())
        .any(|var| var.strip_prefix(owner).is_some_and(|o| o.contains(needle)))
}

/// The programs running in sandboxes whose owner mentions `needle`: a
/// jail's processes below its bwrap other than bwrap and setpriv, that is
/// the function, job or build step itself, once its jail is set up. A
/// process of the warm pool counts once it was given a function.
pub fn jailed_programs(needle: &str) -> Vec<(u32, String)> {
    programs_in_jails(needle)
        .into_iter()
        .filter(|(pid, cmdline)| !waiting_in_the_pool(*pid, cmdline))
        .collect()
}

/// The processes of the warm pool in sandboxes whose owner mentions
/// `needle` that wait for a function.
pub fn waiting_in_pool(needle: &str) -> Vec<(u32, String)> {
    programs_in_jails(needle)
        .into_iter()
        .filter(|(pid, cmdline)| waiting_in_the_pool(*pid, cmdline))
        .collect()
}

fn programs_in_jails(needle: &str) -> Vec<(u32, String)> {
    let owner = format!("{OWNER_ENV}=");
    let all: Vec<(u32, String, bool)> = live_processes()
        .map(|(pid, dir, cmdline)| (pid, cmdline, owned_by(&dir, &owner, needle)))
        .collect();
    let jails: Vec<u32> = all.iter().filter(|p| p.2).map(|p| p.0).collect();
    all.into_iter()
        .filter(|(pid, cmdline, jail)| {
            let program = cmdline.split(' ').next().unwrap_or("").rsplit('/').next();
            !jail
                && !matches!(program, None | Some("" | "bwrap" | "setpriv"))
                && ancestors(*pid).any(|p| jails.contains(&p))
        })
        .map(|(pid, cmdline, _)| (pid, cmdline))
        .collect()
}

/// Whether `pid` is a process of the warm pool not yet given a function:
/// only the pool's empty directory is mounted at `/sless/function`, no
/// build over it.
fn waiting_in_the_pool(pid: u32, cmdline: &str) -> bool {
    if !cmdline.split(' ').any(|a| a == "--pool") {
        return false;
    }
    let mounts = std::fs::read_to_string(format!("/proc/{pid}/mountinfo")).unwrap_or_default();
    let at = mounts
        .lines()
        .filter(|l| l.split(' ').nth(4) == Some("/sless/function"))
        .count();
    at < 2
}

fn ancestors(pid: u32) -> impl Iterator<Item = u32> {
    std::iter::successors(parent_of(pid), |p| parent_of(*p)).take_while(|p| *p > 1)
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
