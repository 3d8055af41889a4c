//! The autoscaler: one per installation, however many workers run. Each
//! worker tries to take a PostgreSQL advisory lock on a connection of its
//! own; the one that holds it decides, the others try again now and then
//! and take over when its session ends (the worker died or lost the
//! database). Every `tick` the one that decides reads the calls in flight
//! of every function, summed over the reports of every API process
//! (`sless_store::scaling::load`), feeds them to each function's
//! [`Load`](sless_domain::autoscale::Load), and records what it decides
//! as `FunctionScaled` through the system command path (a reconcile in
//! the same transaction makes the driver converge). A function scaled to
//! zero whose `min_instances` is above 0 is started again
//! (`FunctionScaledUp`): `min_instances` keeps it warm.
//!
//! The windows live in the deciding worker's memory: a worker that takes
//! over starts with empty ones, so it decides nothing until it has
//! measured (`Load::decide` needs a sample), and scales in only as its
//! new stable window says.

use std::collections::HashMap;
use std::time::{Duration, Instant};

use sless_domain::autoscale::{Bounds, Load, Policy};
use sless_domain::function::FunctionCommand;
use sless_domain::{FunctionKey, FunctionName, Namespace};
use sless_store::PgPool;
use sless_store::eventlog::Metadata;
use sless_store::scaling::{self, Scalable};
use tokio::sync::watch;

/// The advisory lock the deciding worker holds (any constant of ours).
const LEADER_LOCK: i64 = 0x736c_6573_735f_6173; // "sless_as"

/// How old a load report is when the deciding worker deletes it (and how
/// often it looks): its API process is long gone.
const STALE_LOAD: Duration = Duration::from_secs(600);

/// How the autoscaler runs.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct AutoscaleConfig {
    pub policy: Policy,
    /// How often it measures and decides.
    pub tick: Duration,
    /// How often a worker that does not decide tries to.
    pub standby: Duration,
}

impl Default for AutoscaleConfig {
    fn default() -> Self {
        AutoscaleConfig {
            policy: Policy::default(),
            tick: Duration::from_millis(500),
            standby: Duration::from_secs(2),
        }
    }
}

/// What one deciding worker keeps between ticks.
pub struct Autoscaler {
    pool: PgPool,
    config: AutoscaleConfig,
    /// Where its clock starts.
    epoch: Instant,
    loads: HashMap<(String, String), Load>,
}

/// What one tick decided.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Decided {
    /// `(function, from, to)` of each `FunctionScaled` appended.
    pub scaled: Vec<(FunctionKey, u32, u32)>,
    /// Functions started again to keep `min_instances`.
    pub started: Vec<FunctionKey>,
}

impl Autoscaler {
    pub fn new(pool: PgPool, config: AutoscaleConfig) -> Autoscaler {
        Autoscaler {
            pool,
            config,
            epoch: Instant::now(),
            loads: HashMap::new(),
        }
    }

    /// Measures once and decides for every function it looks at.
    pub async fn tick(&mut self) -> sless_store::Result<Decided> {
        let now = self.epoch.elapsed().as_secs_f64();
        let functions = scaling::scalable(&self.pool).await?;
        let measured: HashMap<(String, String), f64> = scaling::load(&self.pool)
            .await?
            .into_iter()
            .map(|(ns, name, in_flight)| ((ns, name), in_flight))
            .collect();
        let policy = self.config.policy;
        let mut decided = Decided::default();
        let mut seen = HashMap::with_capacity(functions.len());
        for f in functions {
            let id = (f.namespace.clone(), f.name.clone());
            let Some(key) = key_of(&f) else { continue };
            if f.idle {
                // Kept warm by min_instances: started again.
                let reason = format!("min_instances {} keeps it running", f.min_instances);
                let command = FunctionCommand::Activate { reason };
                if self.record(&key, command).await? {
                    decided.started.push(key);
                }
                continue;
            }
            let load = self.loads.entry(id.clone()).or_default();
            load.record(&policy, now, measured.get(&id).copied().unwrap_or(0.0));
            let bounds = Bounds {
                min: f.min_instances.max(1),
                max: f.max_instances,
                concurrency: f.concurrency,
            };
            if let Some(scale) = load.decide(&policy, bounds, f.instances, now) {
                let command = FunctionCommand::Scale {
                    to: scale.to,
                    observed: scale.observed,
                    window: scale.window,
                    reason: scale.reason,
                };
                if self.record(&key, command).await? {
                    tracing::info!(function = %key.queue_key(), from = f.instances, to = scale.to, window = scale.window.as_str(), "scaled");
                    decided.scaled.push((key, f.instances, scale.to));
                }
            }
            seen.insert(id, ());
        }
        // A function no longer served (deleted, stopped, at zero) starts
        // with fresh windows when it serves again.
        self.loads.retain(|id, _| seen.contains_key(id));
        Ok(decided)
    }

    /// Decides `command` on the function's stream; true when it appended.
    async fn record(
        &self,
        key: &FunctionKey,
        command: FunctionCommand,
    ) -> sless_store::Result<bool> {
        let metadata = Metadata {
            actor: "system:autoscaler".into(),
            ..Default::default()
        };
        let decided = scaling::decide_and_enqueue(&self.pool, key, command, metadata).await?;
        Ok(decided.appended.is_some())
    }
}

fn key_of(f: &Scalable) -> Option<FunctionKey> {
    Some(FunctionKey::new(
        Namespace::parse(&f.namespace).ok()?,
        FunctionName::parse(&f.name).ok()?,
    ))
}

/// Takes the autoscaler's lock on a connection of its own, when no other
/// worker holds it: the connection holds it until it is closed.
pub async fn lead(pool: &PgPool) -> sless_store::Result<Option<sqlx::PgConnection>> {
    let mut conn = pool.acquire().await?;
    let taken: bool = sqlx::query_scalar("select pg_try_advisory_lock($1)")
        .bind(LEADER_LOCK)
        .fetch_one(&mut *conn)
        .await?;
    // A connection with the lock must not go back to the pool holding it:
    // detached, it is closed when dropped, and the lock with it.
    Ok(taken.then(|| conn.detach()))
}

/// Runs the autoscaler on this worker whenever it holds the lock, until
/// `shutdown` turns true.
pub async fn run(pool: PgPool, config: AutoscaleConfig, mut shutdown: watch::Receiver<bool>) {
    loop {
        match lead(&pool).await {
            Ok(Some(mut conn)) => {
                tracing::info!("this worker decides the functions' instances");
                let mut autoscaler = Autoscaler::new(pool.clone(), config);
                let mut next_cleanup = Duration::ZERO;
                let mut every = tokio::time::interval(config.tick);
                every.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                loop {
                    tokio::select! {
                        _ = shutdown.wait_for(|stop| *stop) => return,
                        _ = every.tick() => {}
                    }
                    // Still holding the lock: its session is alive.
                    if let Err(e) = sqlx::query("select 1").execute(&mut conn).await {
                        tracing::warn!(error = %e, "the autoscaler's session ended; another worker may decide");
                        break;
                    }
                    if let Err(e) = autoscaler.tick().await {
                        tracing::warn!(error = %e, "autoscaling failed");
                    }
                    if autoscaler.epoch.elapsed() >= next_cleanup {
                        next_cleanup += STALE_LOAD;
                        if let Err(e) =
                            scaling::forget_stale_load(&pool, STALE_LOAD.as_secs_f64()).await
                        {
                            tracing::warn!(error = %e, "deleting stale load reports failed");
                        }
                    }
                }
            }
            Ok(None) => {}
            Err(e) => {
                tracing::warn!(error = %e, "trying to decide the functions' instances failed")
            }
        }
        tokio::select! {
            _ = shutdown.wait_for(|stop| *stop) => return,
            _ = tokio::time::sleep(config.standby) => {}
        }
    }
}
