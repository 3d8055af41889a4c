//! The one path every command takes.
//!
//! A handler opens the request (`opening::Opened`: the caller, the body
//! within the route's limit, the `RequestContext`, and the answer an
//! earlier request with the same `Idempotency-Key` got), parses it, builds
//! its `execute::Handler` and calls `execute::execute`, which loads the
//! aggregate's stream, checks the request's preconditions
//! (`precondition`), decides, and `commit`s: append the events, enqueue
//! the work they cause and keep the answer for its `Idempotency-Key`, all
//! in one statement (`sless_store::command`), run alone or, when the
//! command has quotas or blobs to check, in one transaction with them.

pub mod execute;
pub mod opening;
pub mod precondition;

pub use execute::{Current, Decided, Handler, Plan, Target, execute};
pub use opening::Opened;
pub use precondition::Precondition;

use axum::Json;
use axum::http::{HeaderMap, HeaderName, HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use sha2::{Digest, Sha256};
use sless_store::command::{self, Outcome};
use sless_store::eventlog::{Appended, Metadata, NewEvent};
use sless_store::idempotency::{self, StoredAnswer};
use sless_store::{orphans, retention};

use crate::AppState;
use crate::plumbing::auth::Caller;
use crate::plumbing::error::{ApiError, ApiResult};
use crate::plumbing::quota::{self, Demand};

/// What a request carries that its events record: who and in answer to what.
#[derive(Debug, Clone)]
pub struct RequestContext {
    pub caller: Caller,
    pub request_id: String,
    pub traceparent: Option<String>,
    /// The request's `Idempotency-Key`, and a fingerprint of the request.
    pub idempotency: Option<(String, String)>,
    /// Its `If-Match` and `If-None-Match`.
    pub precondition: Precondition,
}

/// A command's answer: status, JSON body and the headers that go with it
/// (`ETag`, a create's `Location`), all of which a retry with the same
/// `Idempotency-Key` gets again.
#[derive(Debug, Clone)]
pub struct Answered {
    pub status: StatusCode,
    pub body: serde_json::Value,
    pub headers: HeaderMap,
}

impl Answered {
    pub fn new(status: StatusCode, body: serde_json::Value) -> Answered {
        Answered {
            status,
            body,
            headers: HeaderMap::new(),
        }
    }

    /// 202 for a trigger or job deleted by the append `appended`.
    pub fn removed(
        namespace: &sless_domain::Namespace,
        name: &str,
        appended: Appended,
    ) -> Answered {
        let body = serde_json::json!({
            "namespace": namespace,
            "name": name,
            "deleted": true,
            "position": appended.position,
        });
        Answered::new(StatusCode::ACCEPTED, body)
    }

    /// With the `ETag` of a stream at `version`.
    pub fn etag(self, version: u64) -> Answered {
        self.header(header::ETAG, precondition::etag(version))
    }

    /// With the header `name` set to `value`.
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Answered {
        self.headers.insert(name, value);
        self
    }

    fn stored_headers(&self) -> serde_json::Map<String, serde_json::Value> {
        self.headers
            .iter()
            .filter_map(|(k, v)| Some((k.to_string(), v.to_str().ok()?.into())))
            .collect()
    }

    fn of_stored(stored: StoredAnswer) -> Answered {
        let mut headers = HeaderMap::new();
        for (name, value) in &stored.headers {
            if let (Ok(name), Some(Ok(value))) = (
                HeaderName::try_from(name.as_str()),
                value.as_str().map(HeaderValue::from_str),
            ) {
                headers.insert(name, value);
            }
        }
        Answered {
            status: StatusCode::from_u16(stored.status).unwrap_or(StatusCode::OK),
            body: stored.body,
            headers,
        }
    }
}

impl IntoResponse for Answered {
    fn into_response(self) -> Response {
        (self.status, self.headers, Json(self.body)).into_response()
    }
}

pub const IDEMPOTENCY_KEY: &str = "idempotency-key";

impl RequestContext {
    pub fn new(
        caller: Caller,
        headers: &HeaderMap,
        method: &str,
        path: &str,
        body: &[u8],
    ) -> ApiResult<RequestContext> {
        let header = |name: &str| {
            headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let idempotency = match header(IDEMPOTENCY_KEY) {
            None => None,
            Some(k) if k.is_empty() || k.len() > 255 => {
                return Err(ApiError::invalid(
                    "Idempotency-Key",
                    "the Idempotency-Key header must be 1-255 characters",
                ));
            }
            Some(k) => {
                let mut h = Sha256::new();
                h.update(method.as_bytes());
                h.update([0]);
                h.update(path.as_bytes());
                h.update([0]);
                h.update(body);
                Some((k, hex::encode(h.finalize())))
            }
        };
        Ok(RequestContext {
            caller,
            request_id: header("x-request-id")
                .unwrap_or_else(crate::plumbing::request_id::new_request_id),
            traceparent: sless_telemetry::trace::current().or_else(|| header("traceparent")),
            idempotency,
            precondition: Precondition::from_headers(headers)?,
        })
    }

    pub fn metadata(&self) -> Metadata {
        Metadata {
            actor: self.caller.sub.clone(),
            request_id: Some(self.request_id.clone()),
            correlation_id: Some(self.request_id.clone()),
            causation_id: None,
            traceparent: self.traceparent.clone(),
        }
    }

    /// The answer an earlier request with the same key got, if any. A key
    /// reused for a different request is refused.
    pub async fn replay(&self, state: &AppState) -> ApiResult<Option<Answered>> {
        let Some((key, hash)) = &self.idempotency else {
            return Ok(None);
        };
        let Some(stored) = idempotency::lookup(&state.pool, &self.caller.sub, key).await? else {
            return Ok(None);
        };
        if &stored.request_hash != hash {
            return Err(ApiError::new(
                StatusCode::UNPROCESSABLE_ENTITY,
                "idempotency-key-reused",
                "Idempotency key reused",
                format!("the Idempotency-Key {key:?} was already used for a different request"),
            )
            .with_field("Idempotency-Key"));
        }
        Ok(Some(Answered::of_stored(stored)))
    }
}

/// A refused request may have lost a race with a concurrent retry of itself
/// (same key, same request): once that one has committed, its answer is this
/// request's answer too. Otherwise the refusal stands. (A refusal that says
/// the state or a quota is in the way, 404, 409, 412 or 429, can be such a
/// loss: the retry deleted the thing, created it, moved its stream or took
/// the quota's last place.)
pub async fn settle(
    state: &AppState,
    ctx: &RequestContext,
    refusal: ApiError,
) -> ApiResult<Answered> {
    if matches!(
        refusal.status,
        StatusCode::NOT_FOUND
            | StatusCode::CONFLICT
            | StatusCode::PRECONDITION_FAILED
            | StatusCode::TOO_MANY_REQUESTS
    ) && let Some(answer) = ctx.replay(state).await?
    {
        return Ok(answer);
    }
    Err(refusal)
}

/// Checks `demand` against the namespace's quotas before a command stores
/// anything of its own (an upload's blobs), without taking the lock: a
/// command refused here has written nothing. `commit` checks again, under
/// the lock. (`execute` answers a refusal with the answer of a concurrent
/// retry of this request that committed first, if there is one.)
pub async fn check_quota(state: &AppState, demand: &Demand) -> ApiResult<()> {
    let mut conn = state.pool.acquire().await?;
    let exceeded = quota::check(&mut conn, &state.quotas, demand, false).await?;
    drop(conn);
    match exceeded {
        None => Ok(()),
        Some(exceeded) => Err(exceeded.into()),
    }
}

/// One command's writes, as `execute` commits them.
pub struct Command {
    pub stream: String,
    pub expected_version: u64,
    pub events: Vec<NewEvent>,
    /// The work the events call for, if any: its kind and key (a
    /// function's reconcile, a job's run). Enqueued only when there are events.
    pub work: Option<(&'static str, String)>,
    /// Blobs the events name, which must still be stored when they commit
    /// (see `sless_store::retention`).
    pub blobs: Vec<String>,
    /// Blobs of pruned versions, to delete once the events commit unless
    /// something else still uses them.
    pub collect: Vec<String>,
    /// What the events add to the namespace's usage, checked against its
    /// quotas before they are appended.
    pub quota: Option<Demand>,
}

/// The problem kind of a command whose blob was collected while it was
/// being made: store the blob again and retry.
pub const BLOB_COLLECTED: &str = "blob-collected";

/// Appends, enqueues and stores the answer in one statement
/// (`sless_store::command`), in autocommit, or in a transaction with the
/// quota and blob checks when the command has them; returns the answer (or,
/// if a concurrent retry with the same key won, that one's).
pub async fn commit(
    state: &AppState,
    ctx: &RequestContext,
    cmd: Command,
    answer: impl FnOnce(Appended) -> Answered,
) -> ApiResult<Answered> {
    // The answer is made before the write, so that the write can keep it in
    // the same statement; the database fills in the position.
    let mut answer = answer(Appended {
        version: cmd.expected_version + cmd.events.len() as u64,
        position: command::POSITION_PENDING,
    });
    let stored = ctx.idempotency.as_ref().map(|(key, hash)| {
        let stored = StoredAnswer {
            request_hash: hash.clone(),
            status: answer.status.as_u16(),
            body: answer.body.clone(),
            headers: answer.stored_headers(),
        };
        (key.as_str(), stored)
    });
    let write = command::Write {
        stream: &cmd.stream,
        expected: Some(cmd.expected_version),
        events: &cmd.events,
        work: cmd.work.as_ref().map(|(kind, key)| (*kind, key.as_str())),
        answer: stored.as_ref().map(|(key, answer)| command::Keep {
            actor: &ctx.caller.sub,
            key,
            answer,
        }),
    };
    let written = if cmd.quota.is_none() && cmd.blobs.is_empty() && cmd.collect.is_empty() {
        // Nothing else to check: one statement, in autocommit.
        let mut conn = state.pool.acquire().await?;
        command::run(&mut conn, write).await.map_err(ApiError::from)
    } else {
        in_transaction(state, &cmd, write).await
    };
    match written {
        Ok(Outcome::Appended(appended)) => {
            command::fill_position(&mut answer.body, appended.position);
            if cmd.work.is_some() && !cmd.events.is_empty() {
                state.work.ring();
            }
            crash_if_asked();
            Ok(answer)
        }
        Ok(Outcome::KeyTaken) => ctx
            .replay(state)
            .await?
            .ok_or_else(|| ApiError::internal("an idempotency key vanished")),
        Err(refused) => settle(state, ctx, refused).await,
    }
}

/// A command's write with what must be checked in its transaction: the
/// quotas (under the namespace's lock, which assigns no transaction id, so
/// the stream lock still comes before anything that does), and the blobs
/// its events name.
async fn in_transaction(
    state: &AppState,
    cmd: &Command,
    write: command::Write<'_>,
) -> ApiResult<Outcome> {
    let mut tx = state.pool.begin().await?;
    if let Some(demand) = &cmd.quota
        && let Some(exceeded) = quota::check(&mut tx, &state.quotas, demand, true).await?
    {
        return Err(exceeded.into());
    }
    let appended = match command::run(&mut tx, write).await? {
        Outcome::Appended(appended) => appended,
        Outcome::KeyTaken => return Ok(Outcome::KeyTaken),
    };
    // The event names these blobs: their in-flight records go with this
    // commit (`sless_store::orphans`).
    orphans::landed(&mut *tx, &cmd.blobs).await?;
    for key in &cmd.blobs {
        retention::lock_shared(&mut tx, key).await?;
        if !state.blobs.exists(key).await? {
            return Err(ApiError::unavailable(
                BLOB_COLLECTED,
                "Blob collected",
                format!("the stored blob {key} was deleted while this request was made; retry"),
            ));
        }
    }
    for key in &cmd.collect {
        retention::enqueue_collect(&mut tx, key).await?;
    }
    tx.commit().await?;
    Ok(Outcome::Appended(appended))
}

/// Hands blobs a refused command stored to the collector, which deletes
/// each one unless a kept version uses it: a command that stored its blobs,
/// then lost a race at a quota's edge, leaves nothing behind.
pub async fn collect_unused(state: &AppState, keys: &[String]) -> ApiResult<()> {
    if keys.is_empty() {
        return Ok(());
    }
    let mut tx = state.pool.begin().await?;
    for key in keys {
        retention::enqueue_collect(&mut tx, key).await?;
    }
    tx.commit().await?;
    Ok(())
}

pub use crate::plumbing::faults::CRASH_AFTER_COMMIT_ENV;
use crate::plumbing::faults::crash_if_asked;
