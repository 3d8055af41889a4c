//! What functions print: pages of a function's log, its live tail, and
//! one invocation record with the lines its call printed.

use reqwest::header::{ACCEPT, HeaderValue};
use sless_api_types::{InvocationWithLines, LogLineView, LogPage};

use crate::Client;
use crate::error::{Error, Result};
use crate::http::Call;
use crate::sse::{Resuming, SseEvent, SseReader, Tail};

/// Which lines of a function's log; the filters combine.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LogQuery {
    /// Lines read at or after this time (RFC 3339).
    pub since: Option<String>,
    /// Lines read before this time (RFC 3339); pages only.
    pub until: Option<String>,
    /// Only what this call printed: an invocation record's id.
    pub invocation: Option<String>,
    /// `stdout` or `stderr`.
    pub stream: Option<String>,
    /// Lines holding this text, ignoring case (the API's `q`).
    pub q: Option<String>,
    /// Lines per page (the API's default: 100; at most 1000); pages only.
    pub limit: Option<u32>,
    /// A page: the `next_cursor` of the one before. A tail: the id of the
    /// last line seen; it starts after it.
    pub cursor: Option<String>,
    /// Oldest first (the API's default is newest first); pages only.
    pub oldest_first: bool,
}

impl LogQuery {
    fn apply<'a>(&self, call: Call<'a>, paging: bool) -> Call<'a> {
        let call = call
            .query_opt("since", self.since.clone())
            .query_opt("invocation", self.invocation.clone())
            .query_opt("stream", self.stream.clone())
            .query_opt("q", self.q.clone())
            .query_opt("cursor", self.cursor.clone());
        if !paging {
            return call;
        }
        call.query_opt("until", self.until.clone())
            .query_opt("limit", self.limit)
            .query_opt("order", self.oldest_first.then_some("oldest"))
    }
}

/// A function's log as it is written.
pub struct LogStream(Resuming<LogTail>);

/// What a function's log tail is opened with.
struct LogTail {
    name: String,
    query: LogQuery,
}

impl Tail for LogTail {
    fn counts(&self, event: &SseEvent) -> bool {
        event.event == "line"
    }

    async fn reopen(&self, client: &Client, after: Option<&str>) -> Result<SseReader> {
        client.open_log_tail(&self.name, &self.query, after).await
    }
}

impl LogStream {
    /// The next line, as it is written. A tail that breaks, or that the
    /// server ends, is taken up again after the last line read (with
    /// `Last-Event-ID`), so none is skipped or repeated; `None` once
    /// five tries in a row found no line.
    pub async fn next(&mut self) -> Option<Result<LogLineView>> {
        let e = match self.0.next().await? {
            Ok(e) => e,
            Err(e) => return Some(Err(e)),
        };
        let line: LogLineView = match serde_json::from_str(&e.data) {
            Ok(line) => line,
            Err(err) => {
                return Some(Err(Error::Decode {
                    endpoint: self.0.client.endpoint().to_owned(),
                    message: format!("a log line does not read: {err}"),
                }));
            }
        };
        if e.id.is_none() {
            self.0.moved_to(line.id.to_string());
        }
        Some(Ok(line))
    }

    /// The id of the last line read (or the cursor it started after).
    pub fn last_id(&self) -> Option<&str> {
        self.0.last_id()
    }
}

impl Client {
    /// `GET /functions/{name}/logs`: one page of what the function printed
    /// (newest first unless `oldest_first`), with the count of lines that
    /// were not kept.
    pub async fn function_logs(&self, name: &str, query: &LogQuery) -> Result<LogPage> {
        let path = self.in_namespace(&format!("/functions/{name}/logs"));
        self.json(query.apply(Call::get(&path), true)).await
    }

    /// `GET /functions/{name}/logs?follow=true`: the lines that match
    /// `query` as they are written, oldest first, after `query.cursor`,
    /// else from `query.since`, else from the last line written before
    /// this call (pinned here, so a tail taken up again after a broken
    /// connection starts where this one did). `until`, `limit` and
    /// `oldest_first` do not apply to a tail.
    pub async fn follow_function_logs(&self, name: &str, query: &LogQuery) -> Result<LogStream> {
        let mut query = query.clone();
        if query.cursor.is_none() && query.since.is_none() {
            query.cursor = Some(self.last_log_id(name).await?.to_string());
        }
        let reader = self.open_log_tail(name, &query, None).await?;
        let last_id = query.cursor.clone();
        let tail = LogTail {
            name: name.to_owned(),
            query,
        };
        Ok(LogStream(Resuming::new(
            self.clone(),
            tail,
            reader,
            last_id,
        )))
    }

    /// The id of the function's last line, whatever it is; 0 before any.
    pub async fn last_log_id(&self, name: &str) -> Result<i64> {
        let newest = LogQuery {
            limit: Some(1),
            ..LogQuery::default()
        };
        let page = self.function_logs(name, &newest).await?;
        Ok(page.items.first().map_or(0, |l| l.id))
    }

    async fn open_log_tail(
        &self,
        name: &str,
        query: &LogQuery,
        after: Option<&str>,
    ) -> Result<SseReader> {
        let path = self.in_namespace(&format!("/functions/{name}/logs"));
        let mut call = query.apply(Call::get(&path), false).query("follow", "true");
        call.streaming = true;
        call.headers
            .insert(ACCEPT, HeaderValue::from_static("text/event-stream"));
        if let Some(id) = after {
            let value = HeaderValue::from_str(id)
                .map_err(|_| Error::Invalid(format!("{id:?} is not a log line's id")))?;
            call.headers.insert("last-event-id", value);
        }
        Ok(SseReader::new(self.send(call).await?))
    }

    /// `GET /functions/{name}/invocations/{id}`: one invocation record and
    /// the lines its call printed (the first 1000; `more_lines` says
    /// whether there are more, in [`Client::function_logs`] with
    /// `invocation`).
    pub async fn get_invocation(&self, name: &str, id: &str) -> Result<InvocationWithLines> {
        if id.is_empty() || !id.chars().all(|c| c.is_ascii_hexdigit() || c == '-') {
            return Err(Error::Invalid(format!(
                "{id:?} is not an invocation record's id"
            )));
        }
        let path = self.in_namespace(&format!("/functions/{name}/invocations/{id}"));
        self.json(Call::get(&path)).await
    }
}

#[cfg(test)]
mod tests {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::{TcpListener, TcpStream};

    use super::*;

    /// The head of the next request on `socket`, lowercase.
    async fn head(socket: &mut TcpStream) -> String {
        let mut head = Vec::new();
        while !head.ends_with(b"\r\n\r\n") {
            let mut byte = [0u8; 1];
            if socket.read(&mut byte).await.unwrap() == 0 {
                break;
            }
            head.push(byte[0]);
        }
        String::from_utf8(head).unwrap().to_lowercase()
    }

    fn line(id: i64) -> LogLineView {
        LogLineView {
            id,
            at: "2026-12-07T10:00:00.000000Z".into(),
            version: Some(1),
            instance: "127.0.0.1:1".into(),
            invocation: None,
            stream: "stdout".into(),
            line: format!("line {id}"),
            truncated: false,
        }
    }

    fn event(id: i64) -> String {
        let data = serde_json::to_string(&line(id)).unwrap();
        format!(": following\n\nevent: line\nid: {id}\ndata: {data}\n\n")
    }

    /// A client of a server on loopback that the test plays.
    async fn server() -> (Client, TcpListener) {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let url = format!("http://{}", listener.local_addr().unwrap());
        (
            Client::with_config(crate::Config::new(url, None)).unwrap(),
            listener,
        )
    }

    #[tokio::test]
    async fn a_tail_that_breaks_is_taken_up_again_after_its_last_line() {
        let (client, listener) = server().await;
        let served = tokio::spawn(async move {
            let mut heads = Vec::new();
            // The first answer breaks after line 5: a chunk, and no end.
            let (mut socket, _) = listener.accept().await.unwrap();
            heads.push(head(&mut socket).await);
            let body = event(5);
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                 transfer-encoding: chunked\r\n\r\n{:x}\r\n{body}\r\n",
                body.len()
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            drop(socket);
            // The second gives line 6 and ends.
            let (mut socket, _) = listener.accept().await.unwrap();
            heads.push(head(&mut socket).await);
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                 connection: close\r\n\r\n{}",
                event(6)
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            heads
        });
        let query = LogQuery {
            cursor: Some("3".into()),
            stream: Some("stdout".into()),
            ..LogQuery::default()
        };
        let mut tail = client.follow_function_logs("hello", &query).await.unwrap();
        let ids = [
            tail.next().await.unwrap().unwrap().id,
            tail.next().await.unwrap().unwrap().id,
        ];
        assert_eq!(ids, [5, 6]);
        assert_eq!(tail.last_id(), Some("6"));
        let heads = served.await.unwrap();
        assert!(
            heads[0].starts_with(
                "get /v1/namespaces//functions/hello/logs?stream=stdout&cursor=3&follow=true "
            ) && !heads[0].contains("last-event-id"),
            "{}",
            heads[0]
        );
        assert!(
            heads[1].contains("stream=stdout") && heads[1].contains("\r\nlast-event-id: 5\r\n"),
            "the second asks for what came after line 5: {}",
            heads[1]
        );
    }

    #[tokio::test]
    async fn a_tail_from_now_starts_after_the_last_line_there_was() {
        let (client, listener) = server().await;
        let served = tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let first = head(&mut socket).await;
            let page = serde_json::to_string(&LogPage {
                items: vec![line(9)],
                next_cursor: None,
                dropped: 0,
            })
            .unwrap();
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: application/json\r\n\
                 content-length: {}\r\nconnection: close\r\n\r\n{page}",
                page.len()
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            drop(socket);
            let (mut socket, _) = listener.accept().await.unwrap();
            let second = head(&mut socket).await;
            let answer = format!(
                "HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\
                 connection: close\r\n\r\n{}",
                event(10)
            );
            socket.write_all(answer.as_bytes()).await.unwrap();
            (first, second)
        });
        let mut tail = client
            .follow_function_logs("hello", &LogQuery::default())
            .await
            .unwrap();
        assert_eq!(tail.next().await.unwrap().unwrap().id, 10);
        let (first, second) = served.await.unwrap();
        assert!(
            first.starts_with("get /v1/namespaces//functions/hello/logs?limit=1 "),
            "{first}"
        );
        assert!(
            second.starts_with("get /v1/namespaces//functions/hello/logs?cursor=9&follow=true "),
            "{second}"
        );
    }

    fn query_of(q: &LogQuery, paging: bool) -> Vec<(&'static str, String)> {
        q.apply(Call::get("/x"), paging).query
    }

    #[test]
    fn a_tail_sends_only_the_filters_and_where_to_start() {
        let q = LogQuery {
            since: Some("2026-12-07T10:00:00Z".into()),
            until: Some("2026-12-08T10:00:00Z".into()),
            invocation: Some("0190".into()),
            stream: Some("stderr".into()),
            q: Some("boom".into()),
            limit: Some(10),
            cursor: Some("42".into()),
            oldest_first: true,
        };
        let keys = |paging| -> Vec<&str> { query_of(&q, paging).iter().map(|(k, _)| *k).collect() };
        assert_eq!(
            keys(false),
            ["since", "invocation", "stream", "q", "cursor"]
        );
        assert_eq!(
            keys(true),
            [
                "since",
                "invocation",
                "stream",
                "q",
                "cursor",
                "until",
                "limit",
                "order"
            ]
        );
        assert!(query_of(&q, true).contains(&("order", "oldest".into())));
        assert!(query_of(&LogQuery::default(), true).is_empty());
    }
}
