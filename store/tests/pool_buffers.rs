//! A pooled connection gives back, as it returns to the pool, the buffer
//! space a large statement or result made it take (`sless_store::connect`).
//! Without that, each connection of a pool keeps the largest buffers it ever
//! needed: `sless dev` grew by megabytes under the proxy's load, one batch of
//! invocation records per connection.
//!
//! A binary of its own: it counts the bytes the process has allocated and not
//! freed, with a global allocator that wraps the system's.

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicIsize, Ordering};
use std::time::Duration;

use sless_testkit::{TestDb, eventually};

struct Counting;

static LIVE: AtomicIsize = AtomicIsize::new(0);

// SAFETY: every call is passed to the system allocator unchanged; the counter
// only adds and subtracts the sizes it was asked for.
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        let p = unsafe { System.alloc(layout) };
        if !p.is_null() {
            LIVE.fetch_add(layout.size() as isize, Ordering::Relaxed);
        }
        p
    }

    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        unsafe { System.dealloc(ptr, layout) };
        LIVE.fetch_sub(layout.size() as isize, Ordering::Relaxed);
    }

    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        let p = unsafe { System.realloc(ptr, layout, new_size) };
        if !p.is_null() {
            LIVE.fetch_add(
                new_size as isize - layout.size() as isize,
                Ordering::Relaxed,
            );
        }
        p
    }
}

#[global_allocator]
static ALLOCATOR: Counting = Counting;

const BIG: usize = 16 << 20;
const SLACK: isize = 1 << 20;

#[tokio::test]
async fn a_connection_back_in_the_pool_keeps_no_buffer_a_large_statement_or_result_took() {
    let db = TestDb::new().await;
    // One connection, so every statement below goes through the same one.
    let pool = sless_store::connect(&db.url, 1).await.unwrap();
    let idle = || async { (pool.num_idle() == 1).then_some(()) };
    sqlx::query_scalar::<_, i32>("select length($1)")
        .bind("warm")
        .fetch_one(&pool)
        .await
        .unwrap();
    sqlx::query_scalar::<_, String>("select repeat('x', $1)")
        .bind(4)
        .fetch_one(&pool)
        .await
        .unwrap();
    eventually(
        "the connection back in the pool",
        Duration::from_secs(10),
        idle,
    )
    .await;
    let before = LIVE.load(Ordering::Relaxed);

    // A large statement (a 16 MiB parameter) and a large result (a 16 MiB
    // value), each through the pool.
    let n: i32 = sqlx::query_scalar("select length($1)")
        .bind("y".repeat(BIG))
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(n as usize, BIG);
    let big: String = sqlx::query_scalar("select repeat('x', $1)")
        .bind(BIG as i32)
        .fetch_one(&pool)
        .await
        .unwrap();
    assert_eq!(big.len(), BIG);
    drop(big);

    // Fails (times out) while the connection holds on to either buffer.
    eventually(
        "the connection back in the pool, less than 1 MiB more allocated than before",
        Duration::from_secs(10),
        || async {
            let kept = LIVE.load(Ordering::Relaxed) - before;
            (pool.num_idle() == 1 && kept < SLACK).then_some(())
        },
    )
    .await;
}
