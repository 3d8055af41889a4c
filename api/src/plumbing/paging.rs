//! Paged lists: `?limit=` and `?cursor=`, and the answer's `next_cursor`
//! and `Link: <…>; rel="next"` header.
//!
//! Every list route reads the same two parameters (`page_query`): `limit`,
//! 1 to `MAX_PAGE` rows (`DEFAULT_PAGE` when absent), and `cursor`, the
//! `next_cursor` of the page before. A page is read by keyset (the rows
//! after the cursor's key, in the list's order), so a row created or
//! deleted between two pages never shifts another row into or out of the
//! next page: each row that exists throughout is listed exactly once.
//!
//! A cursor of a list keyed by name or number (functions, triggers,
//! versions) is `Cursor`: base64url of the list, the namespace (and, for a
//! function's versions, the function) and the last row's key. It is a
//! position, not a secret: it says nothing a client did not already see.
//! One that does not decode, names another list or another namespace, or a
//! key no row can have, is refused (422 `invalid-field`, field `cursor`).
//!
//! A list route takes a `PageRequest` (its query, read once the route has
//! checked its path, and the path the `Link` names), reads its rows one
//! past the page and `cut`s them (`PageQuery::read` does both for a list
//! keyed by `Cursor`), and answers with `ListPage::json` (or `answer`,
//! for a page written already), which adds the `Link`. Its
//! `#[utoipa::path]` documents the two parameters with the list's own
//! `…Pages` (`FunctionPages`).

use std::convert::Infallible;

use axum::body::Body;
use axum::extract::rejection::QueryRejection;
use axum::extract::{FromRequestParts, OriginalUri, Query};
use axum::http::request::Parts;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use base64::Engine;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use utoipa::IntoParams;
use utoipa::openapi::path::{Parameter, ParameterBuilder, ParameterIn};
use utoipa::openapi::{KnownFormat, ObjectBuilder, Required, SchemaFormat, Type};

use crate::plumbing::error::{ApiError, ApiResult};

/// The most rows one page holds, and the default.
pub const MAX_PAGE: u32 = 1000;
pub const DEFAULT_PAGE: u32 = 100;

/// The longest cursor read: longer than any `Cursor::encode` makes.
const MAX_CURSOR_LEN: usize = 512;

/// `?limit=` and `?cursor=` of a list, checked (the cursor's meaning is the
/// list's own).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PageQuery {
    pub limit: u32,
    pub cursor: Option<String>,
}

impl Default for PageQuery {
    fn default() -> PageQuery {
        PageQuery {
            limit: DEFAULT_PAGE,
            cursor: None,
        }
    }
}

impl PageQuery {
    /// The largest page, from the start: what a reader of a whole list asks
    /// first.
    pub fn largest() -> PageQuery {
        PageQuery {
            limit: MAX_PAGE,
            cursor: None,
        }
    }

    /// The page after one whose `next_cursor` is `cursor`.
    pub fn after(&self, cursor: String) -> PageQuery {
        PageQuery {
            limit: self.limit,
            cursor: Some(cursor),
        }
    }

    /// Rows to read: one more than the page holds, to know whether another
    /// page follows.
    pub fn fetch(&self) -> i64 {
        i64::from(self.limit) + 1
    }

    /// Reads the page of `list` this query asks for: its cursor decoded
    /// (to a key `valid` accepts), the rows after it read with
    /// `rows(after, fetch)`, cut to the page, and the cursor of the next
    /// page (the last row's `key`) when more follow.
    pub async fn read<T, Fut>(
        &self,
        list: &str,
        valid: impl Fn(&str) -> bool,
        rows: impl FnOnce(Option<String>, i64) -> Fut,
        key: impl Fn(&T) -> String,
    ) -> ApiResult<(Vec<T>, Option<String>)>
    where
        Fut: std::future::Future<Output = ApiResult<Vec<T>>>,
    {
        let after = self
            .cursor
            .as_deref()
            .map(|c| Cursor::decode(c, list, valid))
            .transpose()?;
        let mut rows = rows(after, self.fetch()).await?;
        let next = self.cut(&mut rows, |r| Cursor { list, key: &key(r) }.encode());
        Ok((rows, next))
    }

    /// Cuts `rows` (read with `fetch`) to the page and gives the key of its
    /// last row when more follow.
    pub fn cut<T, K>(&self, rows: &mut Vec<T>, key: impl Fn(&T) -> K) -> Option<K> {
        cut(rows, self.limit, key)
    }
}

/// Cuts `rows`, read one past a page of `limit` to know whether another
/// follows, to the page, and gives the key of its last row when one does:
/// what every list's next cursor is made from.
pub fn cut<T, K>(rows: &mut Vec<T>, limit: u32, key: impl Fn(&T) -> K) -> Option<K> {
    if rows.len() <= limit as usize {
        return None;
    }
    rows.truncate(limit as usize);
    rows.last().map(key)
}

/// A list route's page as the request asks for it: its `?limit=` and
/// `?cursor=`, read when the route calls `read` (once it has checked what
/// its path names, which a bad query does not hide), and the request's
/// path, which the `Link` to the next page names.
pub struct PageRequest {
    path: String,
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
}

impl<S: Send + Sync> FromRequestParts<S> for PageRequest {
    type Rejection = Infallible;

    async fn from_request_parts(parts: &mut Parts, state: &S) -> Result<Self, Infallible> {
        let Ok(OriginalUri(uri)) = OriginalUri::from_request_parts(parts, state).await;
        let query = Query::from_request_parts(parts, state).await;
        Ok(PageRequest {
            path: uri.path().to_owned(),
            query,
        })
    }
}

impl PageRequest {
    /// The page asked for, its query checked (`page_query`).
    pub fn read(self) -> ApiResult<ListPage> {
        Ok(ListPage {
            query: page_query(self.query)?,
            path: self.path,
        })
    }
}

/// A page of a list, asked for with `query` at `path`.
pub struct ListPage {
    pub query: PageQuery,
    path: String,
}

impl ListPage {
    /// The answer of this page: `body`, its document, whose `next_cursor`
    /// is `next`.
    pub fn answer(&self, body: impl Into<bytes::Bytes>, next: Option<&str>) -> Paged {
        Paged::new(body, &self.path, &self.query, next)
    }

    /// The answer of this page: `page` serialised, whose `next_cursor` is
    /// `next`.
    pub fn json(&self, page: &impl serde::Serialize, next: Option<&str>) -> ApiResult<Paged> {
        Paged::json(page, &self.path, &self.query, next)
    }
}

/// `?limit=` as `value` gives it: `DEFAULT_PAGE` when absent, else a whole
/// number from 1 to `MAX_PAGE`.
pub fn limit(value: Option<&str>) -> ApiResult<u32> {
    let Some(l) = value else {
        return Ok(DEFAULT_PAGE);
    };
    l.parse::<u32>()
        .ok()
        .filter(|l| (1..=MAX_PAGE).contains(l))
        .ok_or_else(|| {
            ApiError::invalid(
                "limit",
                format!("limit must be a whole number from 1 to {MAX_PAGE} (got {l:?})"),
            )
        })
}

/// Reads `?limit=` and `?cursor=`: any other parameter, a repeated one, a
/// limit outside 1..=`MAX_PAGE` (or not a number), an empty or overlong
/// cursor is refused, naming the parameter.
pub fn page_query(
    query: Result<Query<Vec<(String, String)>>, QueryRejection>,
) -> ApiResult<PageQuery> {
    let Query(pairs) = query
        .map_err(|e| ApiError::invalid("query", format!("the query string cannot be read: {e}")))?;
    let mut limit = None;
    let mut cursor = None;
    for (key, value) in pairs {
        let slot = match key.as_str() {
            "limit" => &mut limit,
            "cursor" => &mut cursor,
            _ => {
                return Err(ApiError::invalid(
                    &key,
                    format!("unknown query parameter {key:?} (known: limit, cursor)"),
                ));
            }
        };
        if slot.replace(value).is_some() {
            return Err(ApiError::invalid(
                &key,
                format!("{key:?} is given more than once"),
            ));
        }
    }
    let limit = self::limit(limit.as_deref())?;
    if let Some(c) = &cursor
        && (c.is_empty() || c.len() > MAX_CURSOR_LEN)
    {
        return Err(bad_cursor());
    }
    Ok(PageQuery { limit, cursor })
}

/// `?limit=` and `?cursor=` as a list's route documents them
/// (`params(…, FunctionPages)`), each list naming its rows.
macro_rules! page_params {
    ($($(#[$doc:meta])* $ty:ident $rows:literal;)*) => {$(
        $(#[$doc])*
        pub struct $ty;

        impl IntoParams for $ty {
            fn into_params(_: impl Fn() -> Option<ParameterIn>) -> Vec<Parameter> {
                page_params($rows)
            }
        }
    )*};
}

page_params! {
    /// The pages of a namespace's functions.
    FunctionPages "Functions";
    /// The pages of a namespace's triggers.
    TriggerPages "Triggers";
    /// The pages of a namespace's jobs.
    JobPages "Jobs";
    /// The pages of a function's versions.
    VersionPages "Versions";
    /// The pages of a function's invocation records.
    InvocationPages "Records";
}

/// `limit` (of `rows`) and `cursor`, as `page_query` reads them.
fn page_params(rows: &str) -> Vec<Parameter> {
    let limit = ObjectBuilder::new()
        .schema_type(Type::Integer)
        .format(Some(SchemaFormat::KnownFormat(KnownFormat::Int32)))
        .minimum(Some(1))
        .maximum(Some(MAX_PAGE));
    let query = |name: &str, description: String, schema: ObjectBuilder| {
        ParameterBuilder::new()
            .name(name)
            .parameter_in(ParameterIn::Query)
            .description(Some(description))
            .required(Required::False)
            .schema(Some(schema))
            .build()
    };
    vec![
        query(
            "limit",
            format!("{rows} per page (default {DEFAULT_PAGE})"),
            limit,
        ),
        query(
            "cursor",
            "The `next_cursor` of the page before".to_owned(),
            ObjectBuilder::new().schema_type(Type::String),
        ),
    ]
}

/// The answer to a cursor this API did not give out for this list.
pub fn bad_cursor() -> ApiError {
    ApiError::invalid(
        "cursor",
        "cursor is not one this list gave out: pass the next_cursor of the page before",
    )
}

/// Where a page of a list keyed by name or number ends: the list (and
/// what owns it) and the key of its last row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Cursor<'a> {
    /// The list and its owner: `functions/{ns}`, `triggers/{ns}`,
    /// `versions/{ns}/{name}`.
    pub list: &'a str,
    /// The last row's key.
    pub key: &'a str,
}

impl Cursor<'_> {
    /// An opaque token for clients.
    pub fn encode(&self) -> String {
        URL_SAFE_NO_PAD.encode(format!("{}\n{}", self.list, self.key))
    }

    /// The key of `token`, a cursor of `list`; refused when `encode` did
    /// not make it for `list`, or when `valid` says no row has the key.
    pub fn decode(token: &str, list: &str, valid: impl Fn(&str) -> bool) -> ApiResult<String> {
        let bytes = URL_SAFE_NO_PAD.decode(token).map_err(|_| bad_cursor())?;
        let text = String::from_utf8(bytes).map_err(|_| bad_cursor())?;
        let (of, key) = text.split_once('\n').ok_or_else(bad_cursor)?;
        if of != list || !valid(key) {
            return Err(bad_cursor());
        }
        Ok(key.to_owned())
    }
}

/// One page of a list as an answer: its JSON document (with its
/// `next_cursor`) and, when another page follows, a `Link` header to it.
#[derive(Debug)]
pub struct Paged {
    pub body: bytes::Bytes,
    pub next: Option<String>,
}

impl Paged {
    /// The answer of the page at `path` (the request's path) read with
    /// `query`, whose `next_cursor` is `next`.
    pub fn new(
        body: impl Into<bytes::Bytes>,
        path: &str,
        query: &PageQuery,
        next: Option<&str>,
    ) -> Paged {
        Paged {
            body: body.into(),
            next: next.map(|c| format!("<{path}?limit={}&cursor={c}>; rel=\"next\"", query.limit)),
        }
    }

    /// `value` serialised as the page's document.
    pub fn json(
        value: &impl serde::Serialize,
        path: &str,
        query: &PageQuery,
        next: Option<&str>,
    ) -> ApiResult<Paged> {
        let body = serde_json::to_vec(value)
            .map_err(|e| ApiError::internal(format!("a page cannot be written: {e}")))?;
        Ok(Paged::new(body, path, query, next))
    }
}

impl IntoResponse for Paged {
    fn into_response(self) -> Response {
        let mut res = (StatusCode::OK, Body::from(self.body)).into_response();
        let headers = res.headers_mut();
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        if let Some(link) = self.next
            && let Ok(v) = HeaderValue::from_str(&link)
        {
            headers.insert(header::LINK, v);
        }
        res
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_page_read_one_past_its_limit_is_cut_and_names_its_last_row() {
        // (rows read, limit, rows kept, next)
        let cases: [(u32, u32, usize, Option<u32>); 4] = [
            (0, 3, 0, None),
            (3, 3, 3, None),
            (4, 3, 3, Some(3)),
            (2, 1, 1, Some(1)),
        ];
        for (read, limit, kept, next) in cases {
            let mut rows: Vec<u32> = (1..=read).collect();
            assert_eq!(
                cut(&mut rows, limit, |r| *r),
                next,
                "{read} rows, limit {limit}"
            );
            assert_eq!(rows.len(), kept, "{read} rows, limit {limit}");
        }
    }

    #[test]
    fn a_limit_is_a_whole_number_from_one_to_the_most() {
        assert_eq!(limit(None).unwrap(), DEFAULT_PAGE);
        assert_eq!(limit(Some("1")).unwrap(), 1);
        assert_eq!(limit(Some("1000")).unwrap(), MAX_PAGE);
        for bad in ["0", "1001", "-1", "ten", ""] {
            let e = limit(Some(bad)).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("limit"), "{bad:?}");
        }
    }

    #[test]
    fn a_cursor_decodes_only_for_its_own_list() {
        let token = Cursor {
            list: "functions/sless-0000000000000001",
            key: "f-00042",
        }
        .encode();
        let any = |_: &str| true;
        assert_eq!(
            Cursor::decode(&token, "functions/sless-0000000000000001", any).unwrap(),
            "f-00042"
        );
        for other in [
            "functions/sless-0000000000000002",
            "triggers/sless-0000000000000001",
        ] {
            let e = Cursor::decode(&token, other, any).unwrap_err();
            assert_eq!(e.field.as_deref(), Some("cursor"));
        }
        assert!(Cursor::decode(&token, "functions/sless-0000000000000001", |_| false).is_err());
    }
}
