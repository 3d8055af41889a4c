//! Pages of read-model lists kept in memory while the read models stand
//! still.
//!
//! The read models change only in the projector's transactions, each of
//! which moves its checkpoint (or, for a replay, the tables' generation):
//! `eventlog::read_models_at`. A page is built between two readings of it
//! and kept only when both agree, so it holds exactly the rows the tables
//! held at that point; it is served again only while a fresh reading still
//! agrees. The first change the projector commits therefore empties the
//! cache: a page is never staler than the read models themselves, and a
//! repeated read of an unchanged list (the console, `terraform plan` over
//! many functions) costs one small query instead of reading and writing
//! every row again.
//!
//! Pages are keyed by their list (which names its namespace, so one
//! tenant's page is never another's), limit and cursor. The cache holds at
//! most `MAX_BYTES` of pages; a page that would pass it empties it first.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use sless_store::PgPool;
use sless_store::eventlog;

use crate::plumbing::error::ApiResult;
use crate::plumbing::paging::PageQuery;

/// The most bytes of pages kept.
pub const MAX_BYTES: usize = 4 << 20;

/// A page as it is answered: its document and its `next_cursor`.
#[derive(Debug, PartialEq, Eq)]
pub struct Page {
    pub body: Bytes,
    pub next: Option<String>,
}

type Key = (String, u32, Option<String>);

/// Where the read models stood when the kept pages were built.
type At = (i64, i64);

#[derive(Default)]
pub struct PageCache {
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    at: Option<At>,
    pages: HashMap<Key, Arc<Page>>,
    bytes: usize,
}

impl PageCache {
    /// The page of `list` that `query` asks for: kept, when the read models
    /// have not moved since it was built; else built by `build` (its
    /// document and `next_cursor`) and kept when they did not move while
    /// it was built.
    pub async fn page<Fut>(
        &self,
        pool: &PgPool,
        list: &str,
        query: &PageQuery,
        build: impl FnOnce() -> Fut,
    ) -> ApiResult<Arc<Page>>
    where
        Fut: Future<Output = ApiResult<(Vec<u8>, Option<String>)>>,
    {
        let key = (list.to_owned(), query.limit, query.cursor.clone());
        let before = eventlog::read_models_at(pool).await?;
        if let Some(page) = before.and_then(|at| self.get(at, &key)) {
            return Ok(page);
        }
        let (body, next) = build().await?;
        let page = Arc::new(Page {
            body: body.into(),
            next,
        });
        if let Some(at) = before
            && eventlog::read_models_at(pool).await? == before
        {
            self.put(at, key, page.clone());
        }
        Ok(page)
    }

    fn get(&self, at: At, key: &Key) -> Option<Arc<Page>> {
        let state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        (state.at == Some(at)).then(|| state.pages.get(key).cloned())?
    }

    fn put(&self, at: At, key: Key, page: Arc<Page>) {
        let size = page.body.len();
        if size > MAX_BYTES {
            return;
        }
        let mut state = self.state.lock().unwrap_or_else(|e| e.into_inner());
        match state.at {
            // Built before pages kept since: they are newer.
            Some(kept) if kept > at => return,
            Some(kept) if kept == at => {}
            _ => *state = State::default(),
        }
        if let Some(old) = state.pages.remove(&key) {
            state.bytes -= old.body.len();
        }
        if state.bytes + size > MAX_BYTES {
            state.pages.clear();
            state.bytes = 0;
        }
        state.at = Some(at);
        state.bytes += size;
        state.pages.insert(key, page);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn key(list: &str, cursor: Option<&str>) -> Key {
        (list.to_owned(), 100, cursor.map(str::to_owned))
    }

    impl PageCache {
        /// Pages kept and their bytes.
        fn held(&self) -> (usize, usize) {
            let state = self.state.lock().unwrap();
            (state.pages.len(), state.bytes)
        }
    }

    fn page(len: usize) -> Arc<Page> {
        Arc::new(Page {
            body: Bytes::from(vec![b' '; len]),
            next: None,
        })
    }

    #[test]
    fn a_page_is_served_only_where_the_read_models_stand_as_it_was_built() {
        let cache = PageCache::default();
        let (a, b) = (key("functions/ns-a", None), key("functions/ns-b", None));
        cache.put((10, 0), a.clone(), page(3));
        assert_eq!(cache.get((10, 0), &a), Some(page(3)));
        assert_eq!(cache.get((10, 0), &b), None, "another list's page");
        assert_eq!(cache.get((11, 0), &a), None, "the projector moved on");
        assert_eq!(cache.get((10, 1), &a), None, "a replay swapped the tables");

        // A page built later empties the cache of the older ones.
        cache.put((11, 0), b.clone(), page(4));
        assert_eq!(cache.held(), (1, 4));
        assert_eq!(cache.get((11, 0), &a), None);
        // One built before the kept ones is not kept.
        cache.put((10, 0), a.clone(), page(3));
        assert_eq!(cache.held(), (1, 4));
    }

    #[test]
    fn the_cache_holds_at_most_its_bytes() {
        let cache = PageCache::default();
        let half = MAX_BYTES / 2;
        cache.put((1, 0), key("l", None), page(half));
        cache.put((1, 0), key("l", Some("c1")), page(half));
        assert_eq!(cache.held(), (2, MAX_BYTES));
        // Replacing a page counts its bytes once.
        cache.put((1, 0), key("l", Some("c1")), page(half));
        assert_eq!(cache.held(), (2, MAX_BYTES));
        cache.put((1, 0), key("l", Some("c2")), page(1));
        assert_eq!(cache.held(), (1, 1), "emptied to make room");
        cache.put((1, 0), key("l", Some("c3")), page(MAX_BYTES + 1));
        assert_eq!(
            cache.held(),
            (1, 1),
            "a page larger than the cache is not kept"
        );
    }
}
