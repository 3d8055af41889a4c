//! The endpoint cache: where each function runs, read from the read model
//! and remembered for `Endpoints::ttl`, so a busy function costs no query
//! per request. A call that cannot connect forgets its function's entry
//! (`Endpoints::forget`); the next lookup reads it again.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use sless_store::readmodel::{self, FunctionRow};

use crate::plumbing::error::ApiResult;

/// Where each function runs, as the read model said a moment ago.
pub struct Endpoints {
    ttl: Duration,
    known: RwLock<HashMap<String, Remembered>>,
}

/// What was read of a function, and when (None: to be read again).
struct Remembered {
    read_at: Option<Instant>,
    /// None: no such function.
    target: Option<Arc<Target>>,
}

/// What the proxy needs of a function's row.
pub(super) struct Target {
    /// `Ok(url)` once a version is deployed; else the phase it is in.
    pub(super) endpoint: Result<String, &'static str>,
    pub(super) version: Option<u32>,
    pub(super) timeout: Duration,
    /// Set by the first call sent to this endpoint of this version.
    warm: Arc<AtomicBool>,
    /// Its http triggers, when it has some and none is enabled: it is
    /// not served.
    pub(super) disabled: Option<Vec<String>>,
    /// Scaled to zero, or being started again after it was (Ready with no
    /// endpoint): a call is held until an instance serves.
    pub(super) activating: bool,
    /// Started from zero and its start failed: the error, and when.
    pub(super) start_failed: Option<(String, chrono::DateTime<chrono::Utc>)>,
    /// Where its instances take calls, and how many each takes at once:
    /// each instance's endpoint with `concurrency`, or the one endpoint of
    /// all of them (a Service) with `concurrency` times their number.
    pub(super) instances: Vec<(String, u32)>,
    /// Calls one instance takes at once.
    pub(super) concurrency: u32,
    /// How many instances serve, and the most it may have.
    pub(super) serving: u32,
    pub(super) max_instances: u32,
}

impl Target {
    /// None for a function that does not exist (deleted).
    fn of(row: &FunctionRow) -> Option<Target> {
        if !row.state().exists() {
            return None;
        }
        let endpoint = match (&row.endpoint, row.deployed_version) {
            (Some(e), Some(_)) => Ok(e.trim_end_matches('/').to_owned()),
            _ => Err(row.phase.as_str()),
        };
        let concurrency = row.spec.concurrency();
        let serving = row.instances.max(1);
        let instances = match &endpoint {
            Ok(_) if !row.instance_endpoints.is_empty() => row
                .instance_endpoints
                .iter()
                .map(|e| (e.trim_end_matches('/').to_owned(), concurrency))
                .collect(),
            Ok(e) => vec![(e.clone(), concurrency.saturating_mul(serving))],
            Err(_) => Vec::new(),
        };
        Some(Target {
            endpoint,
            instances,
            concurrency,
            serving,
            max_instances: row.spec.max_instances(),
            version: row.deployed_version,
            timeout: Duration::from_secs(row.spec.timeout_sec as u64),
            warm: Arc::default(),
            disabled: None,
            activating: row.endpoint.is_none()
                && (row.idle || row.phase == sless_domain::Phase::Ready),
            start_failed: row.state().start_failed().then(|| {
                let error = row.last_error.clone().unwrap_or_default();
                (error, row.updated_at)
            }),
        })
    }

    /// True for the first call sent to this endpoint (a cold one).
    pub(super) fn first_call(&self) -> bool {
        !self.warm.load(Ordering::Relaxed) && !self.warm.swap(true, Ordering::Relaxed)
    }
}

impl Endpoints {
    pub fn new(ttl: Duration) -> Endpoints {
        Endpoints {
            ttl,
            known: RwLock::new(HashMap::new()),
        }
    }

    /// The function's target (None: no such function), from memory when
    /// fresh, else from the read model.
    pub(super) async fn get(
        &self,
        pool: &sless_store::PgPool,
        ns: &str,
        name: &str,
    ) -> ApiResult<Option<Arc<Target>>> {
        let key = format!("{ns}/{name}");
        if let Some(r) = self.known.read().unwrap().get(&key)
            && r.read_at.is_some_and(|at| at.elapsed() < self.ttl)
        {
            return Ok(r.target.clone());
        }
        let row = readmodel::function_row(pool, ns, name).await?;
        let mut target = row.as_ref().and_then(Target::of);
        if let Some(t) = target.as_mut() {
            t.disabled = sless_store::triggers::http_gate(pool, ns, name).await?;
        }
        let mut known = self.known.write().unwrap();
        if known.len() > 100_000 {
            known.clear(); // a crude bound; entries are cheap to fetch again
        }
        // The same endpoint of the same version stays warm.
        if let (
            Some(new),
            Some(Remembered {
                target: Some(old), ..
            }),
        ) = (target.as_mut(), known.get(&key))
            && new.endpoint == old.endpoint
            && new.version == old.version
        {
            new.warm = old.warm.clone();
        }
        let target = target.map(Arc::new);
        known.insert(
            key,
            Remembered {
                read_at: Some(Instant::now()),
                target: target.clone(),
            },
        );
        Ok(target)
    }

    /// Makes the next request read the function again.
    pub(super) fn forget(&self, ns: &str, name: &str) {
        if let Some(r) = self.known.write().unwrap().get_mut(&format!("{ns}/{name}")) {
            r.read_at = None;
        }
    }
}
