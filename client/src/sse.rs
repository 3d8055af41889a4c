//! Reading a Server-Sent Events answer (the WHATWG `text/event-stream`
//! format) into its events, as they arrive.

use std::collections::VecDeque;
use std::pin::Pin;

use bytes::{Buf, BytesMut};
use futures_util::{Stream, StreamExt};

use crate::Client;
use crate::error::{Error, Result};
use crate::http::root_cause;

/// One dispatched event.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct SseEvent {
    /// The `event:` field; `message` when there was none.
    pub event: String,
    /// The `data:` lines, joined by `\n`.
    pub data: String,
    /// The last `id:` seen so far in the stream.
    pub id: Option<String>,
}

type ByteStream = Pin<Box<dyn Stream<Item = reqwest::Result<bytes::Bytes>> + Send>>;

/// How a tail is opened (again): the events that count, and the request
/// that takes it up after an event's id.
pub(crate) trait Tail {
    /// Whether `event` is one the tail hands on (the rest are skipped).
    fn counts(&self, event: &SseEvent) -> bool;
    /// The tail opened again after `after` (from where it started, when
    /// `None`).
    async fn reopen(&self, client: &Client, after: Option<&str>) -> Result<SseReader>;
}

/// How many times a broken tail is taken up again in a row.
const RESUMES: u32 = 5;

/// A tail that a break does not end: taken up again after the last event
/// read (`Last-Event-ID`), so none is skipped or repeated, up to
/// [`RESUMES`] times in a row without an event.
pub(crate) struct Resuming<T> {
    pub(crate) client: Client,
    pub(crate) tail: T,
    reader: SseReader,
    /// The id of the last event read: where a broken tail takes up again.
    last_id: Option<String>,
    /// The times it was taken up again since the last event.
    resumes: u32,
}

impl<T: Tail> Resuming<T> {
    /// `reader`, the tail opened after `last_id`.
    pub(crate) fn new(client: Client, tail: T, reader: SseReader, last_id: Option<String>) -> Self {
        Resuming {
            client,
            tail,
            reader,
            last_id,
            resumes: 0,
        }
    }

    /// The next event that counts; `None` once the server ended the tail
    /// [`RESUMES`] times in a row.
    pub(crate) async fn next(&mut self) -> Option<Result<SseEvent>> {
        loop {
            match self.reader.next().await {
                Some(Ok(e)) if self.tail.counts(&e) => {
                    self.resumes = 0;
                    if let Some(id) = &e.id {
                        self.last_id = Some(id.clone());
                    }
                    return Some(Ok(e));
                }
                Some(Ok(_)) => {}
                Some(Err(_)) | None if self.resumes < RESUMES => {
                    self.resumes += 1;
                    let after = self.last_id.as_deref();
                    match self.tail.reopen(&self.client, after).await {
                        Ok(reader) => self.reader = reader,
                        Err(e) => return Some(Err(e)),
                    }
                }
                Some(Err(e)) => return Some(Err(e)),
                None => return None,
            }
        }
    }

    /// Where the tail is: the id it takes up again after.
    pub(crate) fn last_id(&self) -> Option<&str> {
        self.last_id.as_deref()
    }

    /// Moves where the tail takes up again to `id` (an event that carried
    /// its id only in its data).
    pub(crate) fn moved_to(&mut self, id: String) {
        self.last_id = Some(id);
    }
}

/// The events of one answer.
pub(crate) struct SseReader {
    body: ByteStream,
    buffer: BytesMut,
    ready: VecDeque<SseEvent>,
    event: Option<String>,
    data: Option<String>,
    id: Option<String>,
    endpoint: String,
    ended: bool,
}

impl SseReader {
    pub(crate) fn new(response: reqwest::Response) -> SseReader {
        let endpoint = crate::http::origin_of(response.url().as_str());
        SseReader {
            body: Box::pin(response.bytes_stream()),
            buffer: BytesMut::new(),
            ready: VecDeque::new(),
            event: None,
            data: None,
            id: None,
            endpoint,
            ended: false,
        }
    }

    /// The next event; `None` when the server ended the stream.
    pub(crate) async fn next(&mut self) -> Option<Result<SseEvent>> {
        loop {
            if let Some(e) = self.ready.pop_front() {
                return Some(Ok(e));
            }
            if self.ended {
                return None;
            }
            match self.body.next().await {
                Some(Ok(chunk)) => {
                    self.buffer.extend_from_slice(&chunk);
                    self.parse_lines();
                }
                Some(Err(e)) => {
                    self.ended = true;
                    return Some(Err(Error::Connect {
                        endpoint: self.endpoint.clone(),
                        message: format!("the stream broke: {}", root_cause(&e)),
                    }));
                }
                None => {
                    // An event not ended by a blank line is not dispatched.
                    self.ended = true;
                }
            }
        }
    }

    /// Takes every whole line out of the buffer.
    fn parse_lines(&mut self) {
        while let Some(end) = self.buffer.iter().position(|&b| b == b'\n' || b == b'\r') {
            // A CR LF pair is one line end.
            let crlf = self.buffer[end] == b'\r' && self.buffer.get(end + 1) == Some(&b'\n');
            if self.buffer[end] == b'\r' && end + 1 == self.buffer.len() {
                // A CR at the end of what arrived may be followed by LF.
                return;
            }
            let line = String::from_utf8_lossy(&self.buffer[..end]).into_owned();
            self.buffer.advance(end + if crlf { 2 } else { 1 });
            self.line(&line);
        }
    }

    fn line(&mut self, line: &str) {
        if line.is_empty() {
            if let Some(data) = self.data.take() {
                self.ready.push_back(SseEvent {
                    event: self.event.take().unwrap_or_else(|| "message".into()),
                    data,
                    id: self.id.clone(),
                });
            }
            self.event = None;
            return;
        }
        if line.starts_with(':') {
            return;
        }
        let (field, value) = match line.split_once(':') {
            Some((f, v)) => (f, v.strip_prefix(' ').unwrap_or(v)),
            None => (line, ""),
        };
        match field {
            "event" => self.event = Some(value.to_owned()),
            "data" => match &mut self.data {
                Some(d) => {
                    d.push('\n');
                    d.push_str(value);
                }
                None => self.data = Some(value.to_owned()),
            },
            "id" if !value.contains('\0') => self.id = Some(value.to_owned()),
            _ => {}
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn reader() -> SseReader {
        SseReader {
            body: Box::pin(futures_util::stream::empty()),
            buffer: BytesMut::new(),
            ready: VecDeque::new(),
            event: None,
            data: None,
            id: None,
            endpoint: String::new(),
            ended: false,
        }
    }

    fn feed(r: &mut SseReader, text: &str) -> Vec<SseEvent> {
        r.buffer.extend_from_slice(text.as_bytes());
        r.parse_lines();
        r.ready.drain(..).collect()
    }

    #[test]
    fn events_are_dispatched_at_a_blank_line_whatever_the_chunks() {
        let mut r = reader();
        assert!(feed(&mut r, "id: 7\nevent: line\nda").is_empty());
        assert!(feed(&mut r, "ta: first\r").is_empty());
        assert!(feed(&mut r, "\ndata: second\n").is_empty());
        let got = feed(&mut r, "\n: a comment\n\ndata:x\n\n");
        assert_eq!(
            got,
            vec![
                SseEvent {
                    event: "line".into(),
                    data: "first\nsecond".into(),
                    id: Some("7".into())
                },
                SseEvent {
                    event: "message".into(),
                    data: "x".into(),
                    id: Some("7".into())
                },
            ]
        );
    }

    #[test]
    fn an_id_without_data_moves_the_id_on_and_dispatches_nothing() {
        let mut r = reader();
        assert!(feed(&mut r, "id: 9\n: progress\n\n").is_empty());
        let got = feed(&mut r, "data: {}\n\n");
        assert_eq!(got[0].id.as_deref(), Some("9"));
    }
}
