//! Reading what one has just written: the read models are applied a few
//! milliseconds after the log, so an answer that must show a command's
//! effect waits, boundedly, until they do.

use std::future::Future;
use std::time::Duration;

/// How often the read models are looked at again.
const EVERY: Duration = Duration::from_millis(10);

/// Waits until `shown` says the read models show what is awaited, or
/// `within` has passed (then the answer shows what they show by then).
/// True when they caught up.
pub async fn until_shown<F, Fut>(within: Duration, mut shown: F) -> bool
where
    F: FnMut() -> Fut,
    Fut: Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + within;
    loop {
        if shown().await {
            return true;
        }
        if tokio::time::Instant::now() + EVERY > deadline {
            return false;
        }
        tokio::time::sleep(EVERY).await;
    }
}
