//! `execute`: load → check the preconditions → decide → commit, and decide
//! again when the command lost a race only to events it does not depend on.
//!
//! What differs per command is its `Handler`: how it decides on the state
//! it is given (which may store blobs first), what it answers, and which
//! changes by others it depends on. A spec change depends on the spec and
//! the source it was decided on, so another spec change in between is a
//! 409; an upload depends on neither another upload nor a worker's event
//! (it is decided again and gets the next version number), only on the
//! runtime its build context was packed for. A request with `If-Match`
//! names the version it depends on itself: when the stream moved past it,
//! the answer is 412 and nothing is written.

use std::future::Future;

use sless_domain::{Aggregate, Namespace};
use sless_store::eventlog::{self, Appended, NewEvent};
use sless_store::system::decides_again;

use super::{Answered, BLOB_COLLECTED, Command, RequestContext, collect_unused, commit, settle};
use crate::AppState;
use crate::plumbing::error::{ApiResult, QUOTA_EXCEEDED, VERSION_CONFLICT};
use crate::plumbing::quota::Demand;

pub use sless_store::system::{Current, MAX_TRIES};

/// The stream a command changes.
#[derive(Debug, Clone)]
pub struct Target {
    pub namespace: Namespace,
    pub stream: String,
    /// What it is, for messages: `function "hello"`.
    pub what: String,
}

impl Target {
    /// Instance `id` of aggregate `A`, named `name` in messages.
    pub fn of<A: Aggregate>(namespace: &Namespace, id: &A::Id, name: &str) -> Target {
        Target {
            namespace: namespace.clone(),
            stream: A::stream(id),
            what: format!("{} {name:?}", A::KIND),
        }
    }
}

/// What a command makes of the state it is decided on.
pub enum Decided<A: Aggregate> {
    /// Append these events, with the writes they call for.
    Append(Plan<A>),
    /// Nothing to append: this is the answer (`unchanged`, say).
    Unchanged(Answered),
}

/// The events a command appends and what goes with them in its transaction.
pub struct Plan<A: Aggregate> {
    pub events: Vec<A::Event>,
    /// The work the events call for (a function's reconcile, a job's run).
    pub work: Option<(&'static str, String)>,
    /// Blobs the events name, which must still be stored when they commit.
    pub blobs: Vec<String>,
    /// Blobs of pruned versions, to collect once the events commit.
    pub collect: Vec<String>,
    /// What the events add to the namespace's usage.
    pub quota: Option<Demand>,
}

impl<A: Aggregate> Plan<A> {
    pub fn new(events: Vec<A::Event>) -> Plan<A> {
        Plan {
            events,
            work: None,
            blobs: Vec::new(),
            collect: Vec::new(),
            quota: None,
        }
    }

    /// Also enqueues work of `kind` for `key`.
    pub fn work(mut self, kind: &'static str, key: String) -> Plan<A> {
        self.work = Some((kind, key));
        self
    }

    /// Also asks for a reconcile of the function with queue key `key`.
    pub fn reconcile(self, key: String) -> Plan<A> {
        self.work(sless_store::queue::RECONCILE_FUNCTION, key)
    }

    /// Refused unless what it adds fits the namespace's quotas.
    pub fn quota(mut self, demand: Demand) -> Plan<A> {
        self.quota = Some(demand);
        self
    }
}

/// One command of aggregate `A`: the parts of `execute` that are its own.
pub trait Handler<A: Aggregate>: Send {
    /// Decides on `current`. May do IO first (check a quota ahead, store the
    /// blobs the events will name); a refusal is returned as an error.
    fn decide(
        &mut self,
        state: &AppState,
        ctx: &RequestContext,
        current: Current<'_, A>,
    ) -> impl Future<Output = ApiResult<Decided<A>>> + Send;

    /// The answer once the events are appended: `after` is the state they
    /// make. (`execute` adds the `ETag`.)
    fn answer(&self, after: &A, appended: Appended) -> Answered;

    /// True when the events appended by others between `before` (what this
    /// command was decided on) and `now` change what it means: its conflict
    /// then stands (409). Otherwise it is decided again on `now`. By
    /// default a command depends on every change.
    fn depends_on(&self, before: &A, now: &A) -> bool {
        let _ = (before, now);
        true
    }

    /// A blob this command stored was collected before its events
    /// committed: store it again when deciding next.
    fn blobs_collected(&mut self) {}

    /// The blobs this command stored that were not there before it: when it
    /// ends refused, they are handed to the collector.
    fn stored(&self) -> &[String] {
        &[]
    }
}

/// Executes one command on `target`'s stream: see the module's doc.
pub async fn execute<A: Aggregate, H: Handler<A>>(
    state: &AppState,
    ctx: &RequestContext,
    target: &Target,
    handler: &mut H,
) -> ApiResult<Answered> {
    let mut loaded = eventlog::events_of::<A>(&state.pool, &target.stream).await?;
    let mut tries = 0;
    loop {
        let current = A::fold(loaded.iter().map(|e| &e.event));
        let version = current.stream_version();
        if let Err(refused) = ctx
            .precondition
            .check(&target.what, current.exists(), version)
        {
            return settle(state, ctx, refused).await;
        }
        let decided = handler
            .decide(
                state,
                ctx,
                Current {
                    state: &current,
                    events: &loaded,
                },
            )
            .await;
        let plan = match decided {
            Ok(Decided::Append(plan)) => plan,
            // Unless a concurrent retry of this very request made it so.
            Ok(Decided::Unchanged(answer)) => {
                return match ctx.replay(state).await? {
                    Some(replayed) => Ok(replayed),
                    None => Ok(answer.etag(version)),
                };
            }
            Err(refused) => return abandon(state, ctx, handler, refused).await,
        };
        let after = current.after(&plan.events);
        let cmd = Command {
            stream: target.stream.clone(),
            expected_version: version,
            events: plan
                .events
                .iter()
                .map(|e| {
                    NewEvent::of(
                        &target.namespace,
                        A::event_type(e),
                        A::encode(e),
                        ctx.metadata(),
                    )
                })
                .collect(),
            work: plan.work,
            blobs: plan.blobs,
            collect: plan.collect,
            quota: plan.quota,
        };
        let committed = commit(state, ctx, cmd, |appended| {
            handler.answer(&after, appended).etag(appended.version)
        })
        .await;
        match committed {
            Err(e) if e.kind == VERSION_CONFLICT => {
                let newer = eventlog::events_of::<A>(&state.pool, &target.stream).await?;
                let now = A::fold(newer.iter().map(|e| &e.event));
                // The client's own precondition, on the stream as it is now.
                if let Err(refused) =
                    ctx.precondition
                        .check(&target.what, now.exists(), now.stream_version())
                {
                    return abandon(state, ctx, handler, refused).await;
                }
                // The rule system commands follow too.
                if !decides_again(tries, handler.depends_on(&current, &now)) {
                    return abandon(state, ctx, handler, e).await;
                }
                tries += 1;
                loaded = newer;
            }
            // A pruned version's blob, the same bytes as one this command
            // stored, was deleted between the store and the commit.
            Err(e) if e.kind == BLOB_COLLECTED && tries < MAX_TRIES => {
                tries += 1;
                handler.blobs_collected();
                loaded = eventlog::events_of::<A>(&state.pool, &target.stream).await?;
            }
            Err(e) if e.kind == QUOTA_EXCEEDED => return abandon(state, ctx, handler, e).await,
            answer => return answer,
        }
    }
}

/// Ends a refused command: what it stored goes to the collector, and the
/// refusal stands unless a concurrent retry of this request won.
async fn abandon<A: Aggregate, H: Handler<A>>(
    state: &AppState,
    ctx: &RequestContext,
    handler: &H,
    refused: crate::plumbing::error::ApiError,
) -> ApiResult<Answered> {
    collect_unused(state, handler.stored()).await?;
    settle(state, ctx, refused).await
}
