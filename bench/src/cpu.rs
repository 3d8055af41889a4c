//! Where a benchmark's CPU went: the machine's busy time (`/proc/stat`),
//! the PostgreSQL server's (its postmaster and every backend, those that
//! exited included, from `/proc/<pid>/stat`), and this process's own.
//! Read before and after a timed window; the difference says whether the
//! window was bound by CPU and which side spent it.

use serde::Serialize;

/// CPU seconds spent so far.
#[derive(Debug, Clone, Copy)]
pub struct Mark {
    wall: std::time::Instant,
    machine_busy: f64,
    machine_all: f64,
    postgres: f64,
    own: f64,
}

/// CPU spent between two marks.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct Spent {
    pub wall_s: f64,
    /// Cores of the machine.
    pub cores: usize,
    /// Busy CPU seconds of the whole machine (user, nice, system, irq,
    /// softirq, steal).
    pub machine_busy_s: f64,
    /// Of the machine's CPU time, the share that was busy.
    pub machine_busy_share: f64,
    /// CPU seconds of the PostgreSQL server.
    pub postgres_s: f64,
    /// CPU seconds of this process.
    pub own_s: f64,
}

impl Spent {
    /// Each per unit of work, in microseconds.
    pub fn per_item_us(&self, items: f64) -> serde_json::Value {
        let us = |s: f64| s * 1e6 / items;
        // A server this process cannot see (in a sandbox's PID namespace)
        // leaves its share in "other".
        let postgres = if self.postgres_s.is_finite() {
            self.postgres_s
        } else {
            0.0
        };
        serde_json::json!({
            "machine_busy": us(self.machine_busy_s),
            "postgres": if self.postgres_s.is_finite() { Some(us(self.postgres_s)) } else { None },
            "own": us(self.own_s),
            "other": us(self.machine_busy_s - postgres - self.own_s),
        })
    }
}

fn ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// utime, stime, cutime, cstime of a process, in seconds.
fn process(pid: u32) -> Option<[f64; 4]> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    // The command name may hold spaces; the fields start after its ')'.
    let rest = &stat[stat.rfind(')')? + 2..];
    let f: Vec<&str> = rest.split_whitespace().collect();
    // Fields 14–17 of proc(5), counted from the state (field 3) at 0.
    let t = |i: usize| f.get(i).and_then(|v| v.parse::<f64>().ok());
    let hz = ticks();
    Some([t(11)? / hz, t(12)? / hz, t(13)? / hz, t(14)? / hz])
}

fn parent(pid: u32) -> Option<u32> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    stat[stat.rfind(')')? + 2..]
        .split_whitespace()
        .nth(1)?
        .parse()
        .ok()
}

/// The server's CPU: the postmaster's own and its reaped children's, plus
/// the children still running.
fn server(postmaster: u32) -> f64 {
    let Some(p) = process(postmaster) else {
        return f64::NAN;
    };
    let mut total: f64 = p.iter().sum();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if pid != postmaster
                && parent(pid) == Some(postmaster)
                && let Some(c) = process(pid)
            {
                total += c[0] + c[1];
            }
        }
    }
    total
}

fn machine() -> (f64, f64) {
    let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
    let Some(cpu) = stat.lines().find(|l| l.starts_with("cpu ")) else {
        return (f64::NAN, f64::NAN);
    };
    let v: Vec<f64> = cpu
        .split_whitespace()
        .skip(1)
        .filter_map(|x| x.parse().ok())
        .collect();
    let hz = ticks();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    (busy / hz, (busy + at(3) + at(4)) / hz)
}

/// The postmaster of the server a backend belongs to.
pub fn postmaster_of(backend: u32) -> Option<u32> {
    parent(backend)
}

impl Mark {
    pub fn now(postmaster: Option<u32>) -> Mark {
        let (machine_busy, machine_all) = machine();
        let own = process(std::process::id()).map_or(f64::NAN, |p| p[0] + p[1]);
        Mark {
            wall: std::time::Instant::now(),
            machine_busy,
            machine_all,
            postgres: postmaster.map_or(f64::NAN, server),
            own,
        }
    }

    pub fn since(&self, postmaster: Option<u32>) -> Spent {
        let now = Mark::now(postmaster);
        let all = now.machine_all - self.machine_all;
        let busy = now.machine_busy - self.machine_busy;
        Spent {
            wall_s: now.wall.duration_since(self.wall).as_secs_f64(),
            cores: std::thread::available_parallelism().map_or(1, |n| n.get()),
            machine_busy_s: busy,
            machine_busy_share: busy / all,
            postgres_s: now.postgres - self.postgres,
            own_s: now.own - self.own,
        }
    }
}
