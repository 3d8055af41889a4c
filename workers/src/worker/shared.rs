//! What a worker's tasks share: the items it holds, each with a way to stop
//! its handler, and the items to hand back when it stops.

use std::collections::HashMap;
use std::sync::atomic::AtomicBool;
use std::sync::{Arc, Mutex};

use sless_store::queue::{Handback, WorkItem};
use tokio::sync::mpsc;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

/// Where a finished item's acknowledgement goes.
#[derive(Clone)]
pub(super) enum Ack {
    /// To the acker, which writes it with others in one statement.
    Batched(mpsc::UnboundedSender<(i64, i32)>),
    /// Written before the handler's task ends (stepped tests).
    Now,
}

struct Held {
    cancel: CancellationToken,
    claimed: Instant,
    started: bool,
}

#[derive(Default)]
pub(super) struct Shared {
    /// Items claimed and not yet settled, by (id, attempt).
    held: Mutex<HashMap<(i64, i32), Held>>,
    /// Set once the shutdown grace is over: a stopped handler's item is
    /// handed back rather than left to the sweep.
    pub stopping: AtomicBool,
    handbacks: Mutex<Vec<Handback>>,
}

impl Shared {
    pub fn new() -> Arc<Shared> {
        Arc::new(Shared::default())
    }

    /// Records a claimed item; call before it can be started.
    pub fn hold(&self, item: &WorkItem) {
        self.held.lock().unwrap().insert(
            (item.id, item.attempt),
            Held {
                cancel: CancellationToken::new(),
                claimed: Instant::now(),
                started: false,
            },
        );
    }

    /// Marks the item started; its token is cancelled when the item must
    /// stop. None when the item was taken from this worker already.
    pub fn start(&self, item: &WorkItem) -> Option<CancellationToken> {
        let mut held = self.held.lock().unwrap();
        let h = held.get_mut(&(item.id, item.attempt))?;
        h.started = true;
        Some(h.cancel.clone())
    }

    /// Forgets a settled item.
    pub fn release(&self, item: &WorkItem) {
        self.held.lock().unwrap().remove(&(item.id, item.attempt));
    }

    /// Stops every held item that the database no longer lists as this
    /// worker's (`held`, read by a query sent at `asked`). Items claimed
    /// after `asked` may be missing from that answer and are left alone.
    pub fn cancel_missing(&self, held_in_db: &[(i64, i32)], asked: Instant) -> usize {
        let still: std::collections::HashSet<(i64, i32)> = held_in_db.iter().copied().collect();
        let mut held = self.held.lock().unwrap();
        let lost: Vec<(i64, i32)> = held
            .iter()
            .filter(|(k, h)| h.claimed < asked && !still.contains(k))
            .map(|(k, _)| *k)
            .collect();
        for k in &lost {
            if let Some(h) = held.remove(k) {
                h.cancel.cancel();
            }
        }
        lost.len()
    }

    /// Stops every held item (at the end of the shutdown grace).
    pub fn cancel_all(&self) {
        for h in self.held.lock().unwrap().values() {
            h.cancel.cancel();
        }
    }

    /// Queues an item to be handed back when the worker stops.
    pub fn hand_back_later(&self, item: &WorkItem, started: bool) {
        self.held.lock().unwrap().remove(&(item.id, item.attempt));
        self.handbacks.lock().unwrap().push(Handback {
            id: item.id,
            attempt: item.attempt,
            started,
        });
    }

    pub fn take_handbacks(&self) -> Vec<Handback> {
        std::mem::take(&mut *self.handbacks.lock().unwrap())
    }
}
