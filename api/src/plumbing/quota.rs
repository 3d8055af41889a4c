//! Per-namespace quotas: what one tenant of a shared instance may create
//! or hold, so that none can exhaust it.
//!
//! A command that adds to what its namespace uses carries a `Demand`;
//! `command::commit` checks it in the command's transaction, under the
//! namespace's advisory lock for that resource (`sless_store::usage`),
//! before it appends: two commands at a quota's edge take turns, and the
//! second counts what the first appended. A refused command writes
//! nothing: no event, no work item, no idempotency answer (a retry within
//! the quota later succeeds). An upload (and a runtime change, which packs
//! a new build context) stores its blobs before it commits, so it also
//! checks, without the lock, before it stores them (`check` with `lock:
//! false`); only one that loses a race at the edge after that hands what
//! it stored to the collector.
//!
//! Every token that acts in a namespace is held to its quotas, admin
//! tokens included. `None` is no limit.

use std::time::Duration;

use axum::http::StatusCode;
use sless_domain::Namespace;
use sless_store::usage;
use sqlx::PgConnection;

use crate::plumbing::error::{ApiError, ApiResult, QUOTA_EXCEEDED};

/// The quotas every namespace has.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Quotas {
    /// Functions that exist (not deleted).
    pub functions: Option<u64>,
    /// Kept versions of the functions that exist (not pruned by retention).
    pub versions: Option<u64>,
    /// The sum of the zip sizes of those versions, in bytes.
    pub stored_bytes: Option<u64>,
    /// Triggers that exist.
    pub triggers: Option<u64>,
    /// User jobs whose run waits or runs (cron runs are not counted).
    pub running_jobs: Option<u64>,
    /// Uploads that made a version within `upload_window`.
    pub uploads_per_minute: Option<u64>,
    /// The window `uploads_per_minute` counts in: a minute.
    pub upload_window: Duration,
    /// Instances one function of the namespace may scale out to: its
    /// `max_instances` (10 when left out) is at most this.
    pub instances: Option<u64>,
}

impl Quotas {
    /// What a shared instance gets unless configured otherwise
    /// (docs/configuration.md, "Quotas").
    pub const DEFAULT: Quotas = Quotas {
        functions: Some(100),
        versions: Some(1_000),
        stored_bytes: Some(1024 * 1024 * 1024),
        triggers: Some(100),
        running_jobs: Some(10),
        uploads_per_minute: Some(30),
        upload_window: Duration::from_secs(60),
        instances: Some(50),
    };

    /// No quota at all.
    pub const UNLIMITED: Quotas = Quotas {
        functions: None,
        versions: None,
        stored_bytes: None,
        triggers: None,
        running_jobs: None,
        uploads_per_minute: None,
        upload_window: Duration::from_secs(60),
        instances: None,
    };

    /// Sets the limit of `quota` (`None`: no limit).
    pub fn set(&mut self, quota: Quota, limit: Option<u64>) {
        let field = match quota {
            Quota::Functions => &mut self.functions,
            Quota::Versions => &mut self.versions,
            Quota::StoredBytes => &mut self.stored_bytes,
            Quota::Triggers => &mut self.triggers,
            Quota::RunningJobs => &mut self.running_jobs,
            Quota::UploadsPerMinute => &mut self.uploads_per_minute,
            Quota::Instances => &mut self.instances,
        };
        *field = limit;
    }

    /// The limit of `quota`.
    pub fn limit(&self, quota: Quota) -> Option<u64> {
        match quota {
            Quota::Functions => self.functions,
            Quota::Versions => self.versions,
            Quota::StoredBytes => self.stored_bytes,
            Quota::Triggers => self.triggers,
            Quota::RunningJobs => self.running_jobs,
            Quota::UploadsPerMinute => self.uploads_per_minute,
            Quota::Instances => self.instances,
        }
    }
}

impl Default for Quotas {
    fn default() -> Self {
        Quotas::DEFAULT
    }
}

/// One quota, named as its problem document's `quota` member names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Quota {
    Functions,
    Versions,
    StoredBytes,
    Triggers,
    RunningJobs,
    UploadsPerMinute,
    Instances,
}

impl Quota {
    pub const ALL: [Quota; 7] = [
        Quota::Functions,
        Quota::Versions,
        Quota::StoredBytes,
        Quota::Triggers,
        Quota::RunningJobs,
        Quota::UploadsPerMinute,
        Quota::Instances,
    ];

    /// The problem document's `quota` member.
    pub fn name(self) -> &'static str {
        match self {
            Quota::Functions => "functions",
            Quota::Versions => "versions",
            Quota::StoredBytes => "stored_bytes",
            Quota::Triggers => "triggers",
            Quota::RunningJobs => "running_jobs",
            Quota::UploadsPerMinute => "uploads_per_minute",
            Quota::Instances => "instances",
        }
    }

    /// The environment variable that sets it.
    pub fn setting(self) -> &'static str {
        match self {
            Quota::Functions => "SLESS_QUOTA_FUNCTIONS",
            Quota::Versions => "SLESS_QUOTA_VERSIONS",
            Quota::StoredBytes => "SLESS_QUOTA_STORED_BYTES",
            Quota::Triggers => "SLESS_QUOTA_TRIGGERS",
            Quota::RunningJobs => "SLESS_QUOTA_RUNNING_JOBS",
            Quota::UploadsPerMinute => "SLESS_QUOTA_UPLOADS_PER_MINUTE",
            Quota::Instances => "SLESS_QUOTA_INSTANCES",
        }
    }
}

/// A function's `max_instances` within its namespace's instance quota:
/// past it, 422 naming `max_instances`, with the quota and its limit.
pub fn instances(
    quotas: &Quotas,
    ns: &Namespace,
    spec: &sless_domain::FunctionSpec,
) -> ApiResult<()> {
    let (Some(limit), max) = (quotas.instances, u64::from(spec.max_instances())) else {
        return Ok(());
    };
    if max <= limit {
        return Ok(());
    }
    let left_out = if spec.scaling.max_instances.is_none() {
        " (its default, when left out)"
    } else {
        ""
    };
    let mut error = ApiError::invalid(
        "max_instances",
        format!(
            "max_instances is {max}{left_out}, and a function of namespace {ns} may scale out to at most {limit} instances (the quota {}): ask for at most {limit}",
            Quota::Instances.setting()
        ),
    );
    let members = error.members.get_or_insert_with(Default::default);
    members.insert("quota".to_owned(), Quota::Instances.name().into());
    members.insert("limit".to_owned(), limit.into());
    Err(error)
}

/// A command that would take its namespace past a quota.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Exceeded {
    pub quota: Quota,
    pub limit: u64,
    /// What the namespace uses now (for a rate: uploads in the window).
    pub used: u64,
    pub detail: String,
    /// For a rate: when a retry may succeed.
    pub retry_after: Option<Duration>,
}

/// What a command adds to its namespace's usage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Demand {
    namespace: Namespace,
    adds: Adds,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Adds {
    Function,
    /// A new version of `bytes`, while retention prunes `freed` versions
    /// of `freed_bytes` in the same append; `upload` when an upload makes
    /// it (the rate counts those).
    Version {
        bytes: u64,
        freed: u64,
        freed_bytes: u64,
        upload: bool,
    },
    Trigger,
    Job,
}

impl Demand {
    pub fn function(namespace: Namespace) -> Demand {
        Demand {
            namespace,
            adds: Adds::Function,
        }
    }

    pub fn trigger(namespace: Namespace) -> Demand {
        Demand {
            namespace,
            adds: Adds::Trigger,
        }
    }

    pub fn job(namespace: Namespace) -> Demand {
        Demand {
            namespace,
            adds: Adds::Job,
        }
    }

    /// A version of `bytes` made by an upload (held to the upload rate
    /// too), or by a runtime change (`upload` false); `pruned` are the
    /// sizes of the versions retention drops in the same append.
    pub fn version(namespace: Namespace, bytes: u64, pruned: &[u64], upload: bool) -> Demand {
        Demand {
            namespace,
            adds: Adds::Version {
                bytes,
                freed: pruned.len() as u64,
                freed_bytes: pruned.iter().sum(),
                upload,
            },
        }
    }
}

/// Checks `demand` against `quotas`: the quota it would pass, if any.
/// With `lock`, first takes the namespace's lock of the resource, held
/// until the caller's transaction ends (see the module's comment); a
/// quota with no limit costs nothing.
pub async fn check(
    conn: &mut PgConnection,
    quotas: &Quotas,
    demand: &Demand,
    lock: bool,
) -> ApiResult<Option<Exceeded>> {
    let ns = demand.namespace.as_str();
    let resource = match demand.adds {
        Adds::Function => "functions",
        Adds::Version { .. } => "versions",
        Adds::Trigger => "triggers",
        Adds::Job => "jobs",
    };
    let limited = match demand.adds {
        Adds::Function => quotas.functions.is_some(),
        Adds::Version { upload, .. } => {
            quotas.versions.is_some()
                || quotas.stored_bytes.is_some()
                || (upload && quotas.uploads_per_minute.is_some())
        }
        Adds::Trigger => quotas.triggers.is_some(),
        Adds::Job => quotas.running_jobs.is_some(),
    };
    if !limited {
        return Ok(None);
    }
    if lock {
        usage::lock(conn, ns, resource).await?;
    }
    let one_more = |quota: Quota, used: u64, what: &str| {
        let limit = quotas.limit(quota)?;
        (used >= limit).then(|| Exceeded {
            quota,
            limit,
            used,
            detail: format!(
                "namespace {ns} has {used} {what}, the quota {} is {limit}",
                quota.setting()
            ),
            retry_after: None,
        })
    };
    Ok(match demand.adds {
        Adds::Function => one_more(
            Quota::Functions,
            usage::functions(&mut *conn, ns).await?,
            "functions",
        )
        .map(|e| e.hint("delete one to create another")),
        Adds::Trigger => one_more(
            Quota::Triggers,
            usage::triggers(&mut *conn, ns).await?,
            "triggers",
        )
        .map(|e| e.hint("delete one to create another")),
        Adds::Job => one_more(
            Quota::RunningJobs,
            usage::running_jobs(&mut *conn, ns).await?,
            "jobs pending or running",
        )
        .map(|e| e.hint("create this one once another has ended")),
        Adds::Version {
            bytes,
            freed,
            freed_bytes,
            upload,
        } => {
            let counted = match (quotas.versions, quotas.stored_bytes) {
                (None, None) => None,
                _ => Some(usage::kept_versions(&mut *conn, ns).await?),
            };
            // A command that prunes as much as it adds takes nothing more.
            let versions = counted
                .filter(|_| freed == 0)
                .and_then(|kept| one_more(Quota::Versions, kept.versions, "kept versions"))
                .map(|e| e.hint("delete a function to free its versions"));
            let stored = counted
                .filter(|_| bytes > freed_bytes)
                .and_then(|kept| {
                    let limit = quotas.stored_bytes?;
                    let after = kept.bytes + (bytes - freed_bytes);
                    (after > limit).then(|| Exceeded {
                        quota: Quota::StoredBytes,
                        limit,
                        used: kept.bytes,
                        detail: format!(
                            "namespace {ns} keeps {} bytes of uploads in its kept versions, and \
                             this {bytes}-byte version would make it {after}: the quota {} is {limit}",
                            kept.bytes,
                            Quota::StoredBytes.setting()
                        ),
                        retry_after: None,
                    })
                })
                .map(|e| e.hint("delete a function to free its versions"));
            match versions.or(stored) {
                Some(count) => Some(count),
                None if upload => uploads_within_rate(conn, quotas, ns).await?,
                None => None,
            }
        }
    })
}

/// The upload rate: refused when the window already holds the limit's
/// number of uploads, until the oldest of them leaves it.
async fn uploads_within_rate(
    conn: &mut PgConnection,
    quotas: &Quotas,
    ns: &str,
) -> ApiResult<Option<Exceeded>> {
    let Some(limit) = quotas.uploads_per_minute else {
        return Ok(None);
    };
    let window = quotas.upload_window;
    let recent = usage::recent_uploads(&mut *conn, ns, window, limit).await?;
    if recent.count < limit {
        return Ok(None);
    }
    let wait = Duration::from_secs(recent.oldest_leaves_in.as_secs_f64().ceil().max(1.0) as u64);
    Ok(Some(Exceeded {
        quota: Quota::UploadsPerMinute,
        limit,
        used: recent.count,
        detail: format!(
            "namespace {ns} made {} uploads in the last {} s, the quota {} is {limit}: \
             retry in {} s",
            recent.count,
            window.as_secs_f64(),
            Quota::UploadsPerMinute.setting(),
            wait.as_secs()
        ),
        retry_after: Some(wait),
    }))
}

impl Exceeded {
    fn hint(mut self, hint: &str) -> Exceeded {
        self.detail = format!("{}: {hint}", self.detail);
        self
    }
}

/// 409 for a count (the namespace must give something up first), 429 with
/// `Retry-After` for a rate (it may go on later).
impl From<Exceeded> for ApiError {
    fn from(e: Exceeded) -> ApiError {
        let status = match e.retry_after {
            Some(_) => StatusCode::TOO_MANY_REQUESTS,
            None => StatusCode::CONFLICT,
        };
        let mut error = ApiError::new(status, QUOTA_EXCEEDED, "Quota exceeded", e.detail);
        error.retry_after = e
            .retry_after
            .map(|d| u32::try_from(d.as_secs().max(1)).unwrap_or(u32::MAX));
        error.members = Some(Box::new(serde_json::Map::from_iter([
            ("quota".to_owned(), e.quota.name().into()),
            ("limit".to_owned(), e.limit.into()),
            ("used".to_owned(), e.used.into()),
        ])));
        error
    }
}
