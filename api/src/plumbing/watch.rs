//! One LISTEN per API process on a channel the workers NOTIFY, started by
//! the first follower; every follower gets each payload ([`Watch`]).
//! A follower also looks again now and then, in case a notification was
//! lost while the listener reconnected.

use std::sync::{Arc, OnceLock};
use std::time::Duration;

use sqlx::postgres::PgListener;
use tokio::sync::broadcast;

/// How long a listener that failed waits before it connects again.
const RECONNECT_AFTER: Duration = Duration::from_secs(1);

/// The LISTEN on one channel, shared by the process's followers.
#[derive(Clone)]
pub struct Watch {
    channel: &'static str,
    sender: Arc<OnceLock<broadcast::Sender<String>>>,
}

impl std::fmt::Debug for Watch {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Watch")
            .field("channel", &self.channel)
            .field("listening", &self.sender.get().is_some())
            .finish()
    }
}

impl Watch {
    pub fn new(channel: &'static str) -> Watch {
        Watch {
            channel,
            sender: Arc::default(),
        }
    }

    /// Every payload from now on (the LISTEN starts with the first).
    pub fn subscribe(&self, pool: &sless_store::PgPool) -> broadcast::Receiver<String> {
        self.sender
            .get_or_init(|| {
                let (tx, _) = broadcast::channel(1024);
                tokio::spawn(listen(pool.clone(), self.channel, tx.clone()));
                tx
            })
            .subscribe()
    }
}

/// Passes on every payload on `channel`, (re)connecting as needed.
async fn listen(pool: sless_store::PgPool, channel: &'static str, tx: broadcast::Sender<String>) {
    loop {
        let listener = async {
            let mut l = PgListener::connect_with(&pool).await?;
            l.listen(channel).await?;
            Ok::<_, sqlx::Error>(l)
        };
        let mut listener = match listener.await {
            Ok(l) => l,
            Err(e) => {
                tracing::warn!(error = %e, channel, "listening failed; trying again");
                tokio::time::sleep(RECONNECT_AFTER).await;
                continue;
            }
        };
        loop {
            match listener.recv().await {
                Ok(n) => {
                    let _ = tx.send(n.payload().to_owned());
                }
                Err(e) => {
                    tracing::warn!(error = %e, channel, "the listener failed; reconnecting");
                    break;
                }
            }
        }
    }
}

/// Until a payload of `wake` that `concerns` the follower, or `every` at
/// the latest (a notification may have been lost while the listener
/// reconnected). Payloads missed because the follower lagged may have held
/// its own: it returns at once then.
pub async fn woken(
    wake: &mut broadcast::Receiver<String>,
    every: Duration,
    concerns: impl Fn(&str) -> bool,
) {
    let deadline = tokio::time::sleep(every);
    tokio::pin!(deadline);
    loop {
        tokio::select! {
            () = &mut deadline => return,
            got = wake.recv() => match got {
                Ok(p) if concerns(&p) => return,
                Ok(_) => {}
                Err(broadcast::error::RecvError::Lagged(_)) => return,
                Err(broadcast::error::RecvError::Closed) => {
                    deadline.as_mut().await;
                    return;
                }
            },
        }
    }
}
