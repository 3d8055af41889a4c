//! The one path sless's own decisions take: the reconciler recording what
//! it did, a job's run, a cron tick, a crash, an abandoned reconcile, the
//! idle sweep and a call that activates a function at zero.
//!
//! Like an HTTP command (`sless_api::command::execute`), a system command
//! loads its aggregate's stream, decides on it, and appends what it
//! decides expecting the version it decided on, with the work the events
//! call for enqueued in the same transaction (which NOTIFYs the workers at
//! commit). Where a worker acts on a work item, the append is fenced by
//! the item's lease: a worker that lost its lease writes nothing. A lost
//! race is decided again on the stream as it is now, by the rule HTTP
//! commands follow ([`decides_again`]), unless the decision depended on
//! what the stream said (the reconciler's, made with what the driver did
//! in between): that one stands as lost, and its caller looks again.
//!
//! Who decided, and in answer to what, is the events' [`Metadata`]:
//! `system:<role>` as the actor, the work item (`work-<id>`) or the request
//! (its id) that caused it.

use sless_domain::{Aggregate, DomainError, Namespace};
use sqlx::PgConnection;

use crate::eventlog::{self, Appended, Loaded, Metadata, NewEvent};
use crate::queue::{self, WorkItem};
use crate::{Error, PgPool, Result};

/// How many times a command is decided again after losing races it does
/// not depend on. Each lost race means another append to the stream went
/// through, so this bounds only how long one command waits its turn.
pub const MAX_TRIES: u32 = 32;

/// The rule for a command that lost a race (the stream moved between its
/// load and its append): decided again on the stream as it is now unless it
/// depends on what changed, or it has lost `MAX_TRIES` times already.
pub fn decides_again(tries: u32, depends_on_change: bool) -> bool {
    tries < MAX_TRIES && !depends_on_change
}

/// The state a command is decided on, and the events it was folded from
/// (with when each was recorded).
pub struct Current<'a, A: Aggregate> {
    pub state: &'a A,
    pub events: &'a [Loaded<A::Event>],
}

/// One decision sless makes itself, on one stream.
pub struct SystemCommand<'a> {
    stream: String,
    namespace: Namespace,
    metadata: Metadata,
    fence: Option<&'a WorkItem>,
    work: Option<(&'static str, String, serde_json::Value)>,
    depends_on_change: bool,
}

impl<'a> SystemCommand<'a> {
    /// A command on `stream` (of namespace `namespace`), its events
    /// recorded with `metadata`. By default a lost race is decided again.
    pub fn new(stream: String, namespace: &Namespace, metadata: Metadata) -> SystemCommand<'a> {
        SystemCommand {
            stream,
            namespace: namespace.clone(),
            metadata,
            fence: None,
            work: None,
            depends_on_change: false,
        }
    }

    /// A worker's command on work item `item`: recorded as `system:<role>`
    /// working on it, and appended only while the worker holds its lease.
    pub fn fenced(
        stream: String,
        namespace: &Namespace,
        role: &str,
        item: &'a WorkItem,
    ) -> SystemCommand<'a> {
        let mut cmd = SystemCommand::new(stream, namespace, Metadata::system(role, item.id));
        cmd.fence = Some(item);
        cmd
    }

    /// Enqueues work of `kind` for `key` (with `payload`) with the events.
    pub fn work(mut self, kind: &'static str, key: String, payload: serde_json::Value) -> Self {
        self.work = Some((kind, key, payload));
        self
    }

    /// Asks for a reconcile of the function with queue key `key`.
    pub fn reconcile(self, key: String) -> Self {
        self.work(queue::RECONCILE_FUNCTION, key, serde_json::json!({}))
    }

    /// The decision depends on what the stream said when it was made: a
    /// lost race is not decided again ([`Executed::Lost`]).
    pub fn stands_on_its_state(mut self) -> Self {
        self.depends_on_change = true;
        self
    }

    pub fn stream(&self) -> &str {
        &self.stream
    }
}

/// What a system command came to.
#[derive(Debug)]
pub enum Executed<A: Aggregate> {
    /// These events were appended (and the work enqueued); `after` is the
    /// state they make.
    Appended {
        events: Vec<A::Event>,
        appended: Appended,
        after: A,
    },
    /// The decision was to append nothing, on the stream at `version`.
    Unchanged { version: u64 },
    /// The stream moved past `version`, the one it was decided on, and the
    /// decision does not stand on the new state: nothing was written.
    Lost { version: u64 },
    /// The aggregate refused the command: nothing was written.
    Refused(DomainError),
    /// The worker no longer holds the work item's lease: nothing was written.
    Fenced,
}

impl<A: Aggregate> Executed<A> {
    /// The events appended, if any.
    pub fn events(&self) -> &[A::Event] {
        match self {
            Executed::Appended { events, .. } => events,
            _ => &[],
        }
    }

    /// True when events were appended.
    pub fn appended(&self) -> bool {
        matches!(self, Executed::Appended { .. })
    }
}

/// Executes `cmd`: loads its stream, decides with `decide`, appends and
/// enqueues in one transaction, fenced by the lease when it has one; a lost
/// race is decided again (see the module's doc).
pub async fn execute<A: Aggregate>(
    pool: &PgPool,
    cmd: &SystemCommand<'_>,
    mut decide: impl FnMut(Current<'_, A>) -> Result<Vec<A::Event>, DomainError>,
) -> Result<Executed<A>> {
    let mut tries = 0;
    loop {
        let loaded = eventlog::events_of::<A>(pool, &cmd.stream).await?;
        let state = A::fold(loaded.iter().map(|e| &e.event));
        let events = match decide(Current {
            state: &state,
            events: &loaded,
        }) {
            Ok(events) => events,
            Err(refused) => return Ok(Executed::Refused(refused)),
        };
        let mut tx = pool.begin().await?;
        let executed = write(&mut tx, cmd, &state, events).await?;
        if let Executed::Lost { .. } = executed
            && decides_again(tries, cmd.depends_on_change)
        {
            tries += 1;
            continue;
        }
        if executed.appended() {
            tx.commit().await?;
        }
        return Ok(executed);
    }
}

/// Records `events`, decided on `state` (as loaded earlier, with what was
/// done since in mind): appended only if the stream is still where `state`
/// left it. A lost race is [`Executed::Lost`] unless the command is decided
/// again; to decide again, call [`execute`].
pub async fn record<A: Aggregate>(
    pool: &PgPool,
    cmd: &SystemCommand<'_>,
    state: &A,
    events: Vec<A::Event>,
) -> Result<Executed<A>> {
    let mut tx = pool.begin().await?;
    let executed = write(&mut tx, cmd, state, events).await?;
    if executed.appended() {
        tx.commit().await?;
    }
    Ok(executed)
}

/// [`execute`] once inside the caller's transaction, which must have no
/// write yet (the append takes the stream's lock first): for a decision that
/// commits with the caller's other writes. The caller commits; a lost race
/// is [`Executed::Lost`].
pub async fn execute_in<A: Aggregate>(
    conn: &mut PgConnection,
    cmd: &SystemCommand<'_>,
    decide: impl FnOnce(Current<'_, A>) -> Result<Vec<A::Event>, DomainError>,
) -> Result<Executed<A>> {
    let loaded = eventlog::events_of::<A>(&mut *conn, &cmd.stream).await?;
    let state = A::fold(loaded.iter().map(|e| &e.event));
    match decide(Current {
        state: &state,
        events: &loaded,
    }) {
        Ok(events) => write(conn, cmd, &state, events).await,
        Err(refused) => Ok(Executed::Refused(refused)),
    }
}

/// The writes of one decision, in the caller's transaction: the append at
/// the version `state` was at, the work, the fence.
async fn write<A: Aggregate>(
    conn: &mut PgConnection,
    cmd: &SystemCommand<'_>,
    state: &A,
    events: Vec<A::Event>,
) -> Result<Executed<A>> {
    let version = state.stream_version();
    if events.is_empty() {
        return Ok(Executed::Unchanged { version });
    }
    let new: Vec<NewEvent> = events
        .iter()
        .map(|e| {
            NewEvent::of(
                &cmd.namespace,
                A::event_type(e),
                A::encode(e),
                cmd.metadata.clone(),
            )
        })
        .collect();
    let appended = match eventlog::append(conn, &cmd.stream, version, &new).await {
        Ok(appended) => appended,
        Err(Error::Conflict { .. }) => return Ok(Executed::Lost { version }),
        Err(e) => return Err(e),
    };
    if let Some((kind, key, payload)) = &cmd.work {
        queue::enqueue(&mut *conn, kind, key, payload).await?;
    }
    if let Some(item) = cmd.fence
        && !queue::holds_lease(conn, item).await?
    {
        return Ok(Executed::Fenced);
    }
    let after = state.after(&events);
    Ok(Executed::Appended {
        events,
        appended,
        after,
    })
}
