//! Paged lists: which page to read (`PageQuery`), and reading every page
//! of a list by following each page's `next_cursor` (what the API's
//! `Link: <…>; rel="next"` header points at).

use sless_api_types::{FunctionList, JobList, TriggerList, VersionList};

use crate::error::{Error, Result};
use crate::http::Call;

/// Which page of a list to read.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PageQuery {
    /// Rows per page (the API's default: 100; at most 1000).
    pub limit: Option<u32>,
    /// The `next_cursor` of the page before; `None` for the first page.
    pub cursor: Option<String>,
}

impl PageQuery {
    /// The largest pages the API gives: what reading a whole list asks for.
    pub const WHOLE: PageQuery = PageQuery {
        limit: Some(1000),
        cursor: None,
    };

    pub(crate) fn on<'a>(&self, call: Call<'a>) -> Call<'a> {
        call.query_opt("limit", self.limit)
            .query_opt("cursor", self.cursor.clone())
    }
}

/// A page of a list: its rows and where the next page starts.
pub(crate) trait Page: Sized {
    /// Takes the cursor of the next page out.
    fn take_next(&mut self) -> Option<String>;
    /// Adds the rows of the page after, and takes its `next_cursor`.
    fn extend(&mut self, next: Self);
}

macro_rules! page {
    ($t:ty) => {
        impl Page for $t {
            fn take_next(&mut self) -> Option<String> {
                self.next_cursor.take()
            }
            fn extend(&mut self, next: Self) {
                self.items.extend(next.items);
                self.next_cursor = next.next_cursor;
            }
        }
    };
}
page!(FunctionList);
page!(JobList);
page!(TriggerList);
page!(VersionList);

/// The whole list: the first page and every page after it, read with
/// `read` (its `next_cursor` is None). A server that gives back a cursor
/// it already gave is an error, not an endless loop.
pub(crate) async fn every_page<P: Page, F: Future<Output = Result<P>>>(
    mut read: impl FnMut(PageQuery) -> F,
) -> Result<P> {
    let mut whole = read(PageQuery::WHOLE).await?;
    let mut seen = std::collections::HashSet::new();
    while let Some(cursor) = whole.take_next() {
        if !seen.insert(cursor.clone()) {
            return Err(Error::Invalid(format!(
                "the API gave the cursor {cursor:?} twice: the list does not end"
            )));
        }
        let page = read(PageQuery {
            cursor: Some(cursor),
            ..PageQuery::WHOLE
        })
        .await?;
        whole.extend(page);
    }
    Ok(whole)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn page(names: &[&str], next: Option<&str>) -> TriggerList {
        let items = names
            .iter()
            .map(|n| {
                serde_json::from_value(serde_json::json!({
                    "name": n, "function": "f", "type": "http", "enabled": true,
                }))
                .unwrap()
            })
            .collect();
        TriggerList {
            items,
            next_cursor: next.map(str::to_owned),
        }
    }

    fn names(l: &TriggerList) -> Vec<&str> {
        l.items.iter().map(|t| t.name.as_str()).collect()
    }

    #[tokio::test]
    async fn every_page_is_read_once_in_order_from_the_largest_pages() {
        let mut asked = Vec::new();
        let whole = every_page(|q| {
            asked.push(q.clone());
            let answer = match q.cursor.as_deref() {
                None => page(&["a", "b"], Some("c1")),
                Some("c1") => page(&["c", "d"], Some("c2")),
                Some("c2") => page(&["e"], None),
                Some(other) => panic!("a cursor never given: {other}"),
            };
            async move { Ok(answer) }
        })
        .await
        .unwrap();
        assert_eq!(names(&whole), ["a", "b", "c", "d", "e"]);
        assert_eq!(whole.next_cursor, None);
        let cursors: Vec<_> = asked.iter().map(|q| q.cursor.as_deref()).collect();
        assert_eq!(cursors, [None, Some("c1"), Some("c2")]);
        assert!(asked.iter().all(|q| q.limit == Some(1000)));
    }

    #[tokio::test]
    async fn a_cursor_given_twice_is_an_error_not_an_endless_loop() {
        let e = every_page(|q| {
            let answer = match q.cursor {
                None => page(&["a"], Some("again")),
                Some(_) => page(&["b"], Some("again")),
            };
            async move { Ok(answer) }
        })
        .await
        .unwrap_err();
        assert!(e.to_string().contains("twice"), "{e}");
    }

    #[tokio::test]
    async fn an_error_on_a_later_page_is_the_answer() {
        let e = every_page(|q| {
            let answer = match q.cursor {
                None => Ok(page(&["a"], Some("c1"))),
                Some(_) => Err(Error::Invalid("the second page failed".into())),
            };
            async move { answer }
        })
        .await
        .unwrap_err();
        assert!(e.to_string().contains("second page"), "{e}");
    }
}
