//! The calls in flight of each function through this API process, and its
//! reports of them: every `REPORT_EVERY`, for each function it had calls
//! of since the last report, the average number in flight over that time
//! (`sless_store::scaling::report_load`), which the autoscaler sums over
//! every API process, and that the function was called until now, which
//! starts its idle window again. A call counts from when the proxy takes
//! it (held for an instance included: that is load waiting for capacity)
//! until its answer has been sent or abandoned, so a function is idle from
//! its last call's end. A function quiet since its last report is reported
//! once more, at zero, and then forgotten.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, Instant};

use sless_store::PgPool;
use sless_store::scaling::{self, LoadReport};

/// How often a process reports the load it measured.
pub const REPORT_EVERY: Duration = Duration::from_millis(250);

/// The calls in flight through this process, by function.
pub struct Load {
    pool: PgPool,
    /// Names this process in `function_load`.
    replica: String,
    functions: Mutex<HashMap<(String, String), Meter>>,
    reporting: AtomicBool,
}

/// One function's calls since the last report.
#[derive(Debug)]
struct Meter {
    in_flight: u32,
    /// Call-seconds since the last report, up to `changed`.
    area: f64,
    changed: Instant,
    reported: Instant,
    /// A call was in flight at some moment since the last report.
    called: bool,
}

impl Meter {
    fn settle(&mut self, now: Instant) {
        self.area += self.in_flight as f64 * (now - self.changed).as_secs_f64();
        self.changed = now;
    }
}

/// A call in flight: counted until dropped.
pub struct Calling {
    load: Arc<Load>,
    key: (String, String),
}

impl Drop for Calling {
    fn drop(&mut self) {
        let mut functions = self.load.functions.lock().unwrap();
        if let Some(m) = functions.get_mut(&self.key) {
            m.settle(Instant::now());
            m.in_flight = m.in_flight.saturating_sub(1);
        }
    }
}

impl Load {
    pub fn new(pool: PgPool) -> Arc<Load> {
        Arc::new(Load {
            pool,
            replica: format!("api-{}", uuid::Uuid::new_v4().simple()),
            functions: Mutex::new(HashMap::new()),
            reporting: AtomicBool::new(false),
        })
    }

    /// Counts a call of `ns/name` until the result is dropped. The first
    /// call starts the reports (within the process's runtime).
    pub fn start(self: &Arc<Self>, ns: &str, name: &str) -> Calling {
        if !self.reporting.swap(true, Ordering::SeqCst) {
            tokio::spawn(report(Arc::downgrade(self)));
        }
        let key = (ns.to_owned(), name.to_owned());
        let now = Instant::now();
        let mut functions = self.functions.lock().unwrap();
        let m = functions.entry(key.clone()).or_insert_with(|| Meter {
            in_flight: 0,
            area: 0.0,
            changed: now,
            reported: now,
            called: false,
        });
        m.settle(now);
        m.in_flight += 1;
        m.called = true;
        drop(functions);
        Calling {
            load: self.clone(),
            key,
        }
    }

    /// The calls of `ns/name` in flight through this process now.
    pub fn in_flight(&self, ns: &str, name: &str) -> u32 {
        let functions = self.functions.lock().unwrap();
        functions
            .get(&(ns.to_owned(), name.to_owned()))
            .map_or(0, |m| m.in_flight)
    }

    /// What to report now: each function's average since its last report;
    /// those quiet since it are reported at zero once, and forgotten.
    fn take(&self) -> Vec<LoadReport> {
        let now = Instant::now();
        let mut functions = self.functions.lock().unwrap();
        let mut reports = Vec::with_capacity(functions.len());
        functions.retain(|(ns, name), m| {
            m.settle(now);
            let span = (now - m.reported).as_secs_f64();
            let average = if span > 0.0 { m.area / span } else { 0.0 };
            let quiet = !m.called && m.in_flight == 0;
            reports.push(LoadReport {
                namespace: ns.clone(),
                name: name.clone(),
                in_flight: if quiet { 0.0 } else { average },
                called: m.called || m.in_flight > 0,
            });
            m.area = 0.0;
            m.reported = now;
            m.called = false;
            !quiet
        });
        reports
    }
}

/// Reports every `REPORT_EVERY` until the process's `Load` is gone.
async fn report(load: Weak<Load>) {
    let mut tick = tokio::time::interval(REPORT_EVERY);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        tick.tick().await;
        let Some(load) = load.upgrade() else {
            return;
        };
        let reports = load.take();
        if let Err(e) = scaling::report_load(&load.pool, &load.replica, &reports).await {
            tracing::warn!(error = %e, functions = reports.len(), "reporting the calls in flight failed");
        }
    }
}
