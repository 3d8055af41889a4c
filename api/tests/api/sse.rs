//! Reading a Server-Sent Events answer as a client does, for the tests of
//! the routes that stream: all the time, on a task of its own (a body
//! nobody reads is never polled, and the route's loop would not run),
//! handing each message over as it comes. Dropping the [`Stream`] is the
//! client going away.

use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, StatusCode};
use http_body_util::BodyExt;
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tower::ServiceExt;

use super::support::{request, token};

/// One message, its fields as sent; a comment is no message.
#[derive(Debug, Default, Clone)]
pub struct Message {
    pub id: Option<String>,
    pub event: Option<String>,
    pub data: Option<String>,
}

pub struct Stream {
    messages: mpsc::UnboundedReceiver<Message>,
    reader: JoinHandle<()>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.reader.abort();
    }
}

impl Stream {
    /// GETs `uri` as `sub`; the answer must be a 200 event stream.
    pub async fn open(
        app: &axum::Router,
        uri: &str,
        sub: &str,
        last_event_id: Option<&str>,
    ) -> Stream {
        let mut req = request(Method::GET, uri, Some(&token(sub)));
        if let Some(id) = last_event_id {
            req = req.header("last-event-id", id);
        }
        let res = app
            .clone()
            .oneshot(req.body(Body::empty()).unwrap())
            .await
            .unwrap();
        Stream::read(res)
    }

    /// Reads an answer; it must be a 200 event stream.
    pub fn read(res: axum::response::Response) -> Stream {
        assert_eq!(res.status(), StatusCode::OK);
        assert_eq!(res.headers()["content-type"], "text/event-stream");
        let (tx, messages) = mpsc::unbounded_channel();
        let reader = tokio::spawn(read(res.into_body(), tx));
        Stream { messages, reader }
    }

    /// The next message; None when the stream has ended.
    pub async fn next(&mut self) -> Option<Message> {
        tokio::time::timeout(Duration::from_secs(30), self.messages.recv())
            .await
            .expect("the stream sends within 30 s")
    }

    /// A message that has come already, if one has.
    pub fn try_next(&mut self) -> Option<Message> {
        self.messages.try_recv().ok()
    }
}

/// Parses the body into messages until it ends.
async fn read(mut body: Body, tx: mpsc::UnboundedSender<Message>) {
    let mut buf = String::new();
    while let Some(frame) = body.frame().await {
        let Ok(data) = frame.expect("reading the stream").into_data() else {
            continue;
        };
        buf.push_str(std::str::from_utf8(&data).unwrap());
        while let Some(end) = buf.find("\n\n") {
            let block: String = buf.drain(..end + 2).collect();
            let mut m = Message::default();
            let mut seen = false;
            for line in block.lines() {
                let Some((name, value)) = line.split_once(':') else {
                    continue;
                };
                let value = Some(value.strip_prefix(' ').unwrap_or(value).to_owned());
                match name {
                    "id" => m.id = value,
                    "event" => m.event = value,
                    "data" => m.data = value,
                    _ => continue,
                }
                seen = true;
            }
            if seen && tx.send(m).is_err() {
                return;
            }
        }
    }
}
