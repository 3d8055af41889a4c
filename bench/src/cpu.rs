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

/// CPU microseconds per unit of work.
#[derive(Debug, Clone, Copy, Serialize)]
pub struct PerItem {
    pub machine_busy: f64,
    /// `None` when the server was out of sight (in a sandbox's PID
    /// namespace); its share is then in `other`.
    pub postgres: Option<f64>,
    pub own: f64,
    pub other: f64,
}

impl Spent {
    /// Each per unit of work.
    pub fn per_item(&self, items: f64) -> PerItem {
        let us = |s: f64| s * 1e6 / items;
        let postgres = self.postgres_s.is_finite().then(|| us(self.postgres_s));
        PerItem {
            machine_busy: us(self.machine_busy_s),
            postgres,
            own: us(self.own_s),
            other: us(self.machine_busy_s - self.own_s) - postgres.unwrap_or(0.0),
        }
    }
}

/// Clock ticks a second, the unit of `/proc`'s times.
pub fn clock_ticks() -> f64 {
    // SAFETY: sysconf has no preconditions.
    let t = unsafe { libc::sysconf(libc::_SC_CLK_TCK) };
    if t > 0 { t as f64 } else { 100.0 }
}

/// The fields of `/proc/<pid>/stat` from the third (the state) on; the
/// command name before them may hold spaces. Field n of proc(5) is at n - 3.
pub fn stat_fields(pid: u32) -> Option<Vec<String>> {
    let stat = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let rest = stat.rsplit_once(')')?.1;
    Some(rest.split_whitespace().map(str::to_owned).collect())
}

/// A process's parent and its utime, stime, cutime, cstime in seconds
/// (fields 4 and 14–17).
fn process(pid: u32) -> Option<(u32, [f64; 4])> {
    let f = stat_fields(pid)?;
    let t = |n: usize| f.get(n - 3).and_then(|v| v.parse::<f64>().ok());
    let hz = clock_ticks();
    let parent = f.get(1)?.parse().ok()?;
    Some((parent, [t(14)? / hz, t(15)? / hz, t(16)? / hz, t(17)? / hz]))
}

/// The postmaster of the server a backend belongs to. `None` when the
/// backend's pid is not a PostgreSQL process here: a server in a sandbox
/// reports pids of its own PID namespace, which name other processes or
/// none in this one.
pub fn postmaster_of(backend: u32) -> Option<u32> {
    let postgres = |pid: u32| {
        std::fs::read_to_string(format!("/proc/{pid}/comm")).is_ok_and(|c| c.trim() == "postgres")
    };
    let (parent, _) = process(backend)?;
    (postgres(backend) && postgres(parent)).then_some(parent)
}

/// The server's CPU: the postmaster's own and its reaped children's, plus
/// the children still running.
fn server(postmaster: u32) -> f64 {
    let Some((_, p)) = process(postmaster) else {
        return f64::NAN;
    };
    let mut total: f64 = p.iter().sum();
    if let Ok(dir) = std::fs::read_dir("/proc") {
        for e in dir.flatten() {
            let Some(pid) = e.file_name().to_str().and_then(|n| n.parse::<u32>().ok()) else {
                continue;
            };
            if pid != postmaster
                && let Some((parent, c)) = process(pid)
                && parent == postmaster
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
    let hz = clock_ticks();
    // user nice system idle iowait irq softirq steal (guest is in user).
    let at = |i: usize| v.get(i).copied().unwrap_or(0.0);
    let busy = at(0) + at(1) + at(2) + at(5) + at(6) + at(7);
    (busy / hz, (busy + at(3) + at(4)) / hz)
}

impl Mark {
    pub fn now(postmaster: Option<u32>) -> Mark {
        let (machine_busy, machine_all) = machine();
        let own = process(std::process::id()).map_or(f64::NAN, |(_, p)| p[0] + p[1]);
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
