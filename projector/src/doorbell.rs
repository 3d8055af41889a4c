//! The projector's doorbell: appends wake a sleeping projector with a NOTIFY
//! on `sless_events`, and only a sleeping one.
//!
//! A NOTIFY makes its transaction hold a cluster-wide lock from just before
//! its commit until the commit is flushed, so notifying commits cannot share
//! a WAL flush. So appends do not NOTIFY unless a projector sleeps: one that
//! has nothing left to apply takes advisory lock `DOORBELL`
//! (store/src/eventlog.rs) exclusively on its listening session; an append
//! (the database function `append_events`) that cannot take it shared
//! NOTIFYs, and one that can keeps it until it commits. The projector
//! therefore gets the lock only once every append that did not ring has
//! ended, and it looks for events once more after taking it (`run` in
//! lib.rs). While it is awake and busy it gives the lock back, and appends
//! stop ringing.

use std::time::Duration;

use sless_store::PgPool;
use sless_store::eventlog::{DOORBELL as KEY, EVENTS_CHANNEL as CHANNEL};
use sqlx::postgres::PgListener;

use crate::Result;

/// What came of trying to fall asleep.
pub(crate) enum Sleep {
    /// The doorbell is ours: appends from now on ring.
    Asleep,
    /// Another copy of the projector sleeps at the doorbell; its NOTIFYs
    /// reach every listener, this one included.
    Taken,
    /// Appends are in flight (they hold the doorbell shared): look again soon.
    Busy,
}

pub(crate) struct Doorbell {
    listener: PgListener,
    asleep: bool,
}

impl Doorbell {
    pub(crate) async fn connect(pool: &PgPool) -> Result<Doorbell> {
        let mut listener = PgListener::connect_with(pool).await?;
        listener.listen(CHANNEL).await?;
        Ok(Doorbell {
            listener,
            asleep: false,
        })
    }

    pub(crate) fn is_asleep(&self) -> bool {
        self.asleep
    }

    /// Tries to take the doorbell. The shared try tells appends in flight
    /// (shared holders) from another projector (an exclusive holder).
    pub(crate) async fn sleep(&mut self) -> Sleep {
        let answer: sqlx::Result<String> = sqlx::query_scalar(
            "select case
                 when pg_try_advisory_lock($1, $2) then 'asleep'
                 when pg_try_advisory_lock_shared($1, $2) then
                     case when pg_advisory_unlock_shared($1, $2) then 'busy' end
                 else 'taken'
             end",
        )
        .bind(KEY.0)
        .bind(KEY.1)
        .fetch_one(&mut self.listener)
        .await;
        match answer.as_deref() {
            Ok("asleep") => {
                self.asleep = true;
                Sleep::Asleep
            }
            Ok("taken") => Sleep::Taken,
            Ok(_) => Sleep::Busy,
            Err(e) => {
                tracing::warn!(error = %e, "projector doorbell failed");
                self.asleep = false;
                Sleep::Busy
            }
        }
    }

    /// Gives the doorbell back, if held: appends stop ringing.
    pub(crate) async fn wake(&mut self) {
        if !self.asleep {
            return;
        }
        self.asleep = false;
        let released = sqlx::query("select pg_advisory_unlock($1, $2)")
            .bind(KEY.0)
            .bind(KEY.1)
            .execute(&mut self.listener)
            .await;
        if let Err(e) = released {
            // A broken session has let go of its locks already.
            tracing::warn!(error = %e, "projector doorbell failed");
        }
    }

    /// Waits up to `timeout` for a ring.
    pub(crate) async fn wait(&mut self, timeout: Duration) {
        match tokio::time::timeout(timeout, self.listener.try_recv()).await {
            Err(_) | Ok(Ok(Some(_))) => {}
            Ok(Ok(None)) => {
                // The listening session was lost, and its lock with it; the
                // listener has connected again.
                self.asleep = false;
            }
            Ok(Err(e)) => {
                tracing::warn!(error = %e, "projector listener failed");
                self.asleep = false;
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    }
}
