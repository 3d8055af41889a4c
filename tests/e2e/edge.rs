//! The edge between tenants, on a real `sless dev`, as a hostile tenant
//! meets it: tenant B deploys one small Python function per trick, and
//! tenant A (or anyone) calls them on the functions' origin over raw TCP,
//! so that every byte on the wire is seen. A's platform token and the
//! console's cookies never reach B's code, in any spelling; B's code is told
//! where a call came from by the proxy, not by the caller; B's cookies stay under its own
//! path; an answer that never ends is cut at its bound and recorded so;
//! what is not HTTP gets a problem document of one shape, in both
//! directions. The API's origin serves no function.

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use tokio::io::{AsyncReadExt, AsyncWriteExt};

use crate::Client;
use crate::dev::{start_dev_configured, stop_dev};
use crate::sandbox::tenant;

/// Finds the wrapper's request handler up the stack: a function that
/// writes its own bytes to the connection, as hostile code can.
const RAW: &str = r#"
import sys, time

def connection():
    f = sys._getframe(1)
    while f is not None:
        h = f.f_locals.get('self')
        if h is not None and hasattr(h, 'wfile'):
            return h
        f = f.f_back
    raise RuntimeError('no connection')

def send(data, then_sleep=0):
    h = connection()
    h.wfile.write(data)
    h.wfile.flush()
    time.sleep(then_sleep)
    h.close_connection = True
    raise SystemExit
"#;

/// One hostile function: its name, `timeout_sec` and the body of `handle`.
struct Function {
    name: &'static str,
    timeout_sec: u32,
    handle: &'static str,
}

const FUNCTIONS: &[Function] = &[
    Function {
        name: "grabber",
        timeout_sec: 10,
        handle: "return {'authorization': e['headers'].get('authorization'), 'cookie': e['headers'].get('cookie')}",
    },
    Function {
        name: "teller",
        timeout_sec: 10,
        handle: "return {k: e['headers'].get(k) for k in ('x-forwarded-for', 'x-forwarded-host', 'x-forwarded-proto', 'forwarded', 'x-real-ip')}",
    },
    Function {
        name: "cookies",
        timeout_sec: 10,
        handle: "return {'statusCode': 200, 'body': 'ok', 'headers': {'Set-Cookie': ['wide=1; Domain=127.0.0.1; Path=/v1', 'sless_session=forged; Path=/', 'mine=1; Path=/; HttpOnly'], 'Clear-Site-Data': '\"cookies\"'}}",
    },
    Function {
        name: "partial",
        timeout_sec: 30,
        handle: "send(b'HTTP/1.1 200 OK\\r\\nContent-Length: 1000\\r\\n\\r\\nabc', then_sleep=60)",
    },
    Function {
        name: "drip",
        timeout_sec: 3,
        handle: "h = connection()\n    h.wfile.write(b'HTTP/1.1 200 OK\\r\\nTransfer-Encoding: chunked\\r\\n\\r\\n')\n    for _ in range(120):\n        h.wfile.write(b'1\\r\\nx\\r\\n'); h.wfile.flush(); time.sleep(0.5)",
    },
    Function {
        name: "status999",
        timeout_sec: 10,
        handle: "send(b'HTTP/1.1 999 Odd\\r\\nContent-Length: 2\\r\\n\\r\\nok')",
    },
    Function {
        name: "upgrade",
        timeout_sec: 10,
        handle: "send(b'HTTP/1.1 101 Switching Protocols\\r\\nConnection: upgrade\\r\\nUpgrade: websocket\\r\\n\\r\\n', then_sleep=5)",
    },
];

/// What a case sends, with `{path}` for the function's path and `{token}`
/// for tenant A's token.
struct Case {
    what: &'static str,
    function: &'static str,
    request: &'static str,
    want: Want,
}

enum Want {
    /// 200, and the function saw these (None: the header did not reach it).
    Saw {
        authorization: Option<&'static str>,
        cookie: Option<&'static str>,
    },
    /// 200, and the function was told these of the call: `X-Forwarded-For`
    /// and `Forwarded`, whatever the caller said (`X-Forwarded-Host` is the
    /// request's `Host`, `X-Forwarded-Proto` `http`, no `X-Real-IP`).
    Told {
        forwarded_for: &'static str,
        forwarded: &'static str,
    },
    /// 200 with exactly these `Set-Cookie` values, and no `Clear-Site-Data`.
    Cookies(&'static [&'static str]),
    /// A problem document of this status and kind, without the parser's words.
    Problem(u16, &'static str),
    /// 200, its body cut short within `within`, recorded with `kind`.
    CutShort {
        within: Duration,
        kind: &'static str,
    },
}

const GET: &str = "GET {path} HTTP/1.1\r\nHost: fn.test\r\nConnection: close\r\n\r\n";

const CASES: &[Case] = &[
    Case {
        what: "A's platform token does not reach B's function",
        function: "grabber",
        request: "GET {path} HTTP/1.1\r\nHost: fn.test\r\nAuthorization: Bearer {token}\r\nConnection: close\r\n\r\n",
        want: Want::Saw {
            authorization: None,
            cookie: None,
        },
    },
    Case {
        what: "nor in another spelling: a tab, no scheme, another scheme, beside Basic",
        function: "grabber",
        request: "GET {path} HTTP/1.1\r\nHost: fn.test\r\nAuthorization: Bearer\t{token}\r\nAuthorization: {token}\r\nAuthorization: Token {token}\r\nAuthorization: bearer  {token}, Basic dXNlcjpwYXNz\r\nConnection: close\r\n\r\n",
        want: Want::Saw {
            authorization: None,
            cookie: None,
        },
    },
    Case {
        what: "the field with A's token goes, another arrives",
        function: "grabber",
        request: "GET {path} HTTP/1.1\r\nHost: fn.test\r\nAuthorization: JWT {token}\r\nAuthorization: Basic dXNlcjpwYXNz\r\nConnection: close\r\n\r\n",
        want: Want::Saw {
            authorization: Some("Basic dXNlcjpwYXNz"),
            cookie: None,
        },
    },
    Case {
        what: "a token sless did not issue reaches it as sent",
        function: "grabber",
        request: "GET {path} HTTP/1.1\r\nHost: fn.test\r\nAuthorization: Bearer their.own.token\r\nConnection: close\r\n\r\n",
        want: Want::Saw {
            authorization: Some("Bearer their.own.token"),
            cookie: None,
        },
    },
    Case {
        what: "the console's cookies do not reach it, others do",
        function: "grabber",
        request: "GET {path} HTTP/1.1\r\nHost: fn.test\r\nCookie: sless_session=s3cret; theme=dark; __Host-sless_csrf=c\r\nConnection: close\r\n\r\n",
        want: Want::Saw {
            authorization: None,
            cookie: Some("theme=dark"),
        },
    },
    Case {
        what: "nor do they when joined by commas or sent in several fields",
        function: "grabber",
        request: "GET {path} HTTP/1.1\r\nHost: fn.test\r\nCookie: theme=dark, sless_session=s3cret\r\nCookie: __Host-SLESS_session=s3cret,lang=en\r\nConnection: close\r\n\r\n",
        want: Want::Saw {
            authorization: None,
            cookie: Some("theme=dark; lang=en"),
        },
    },
    Case {
        what: "the function is told where the call came from by the proxy, not by the caller",
        function: "teller",
        request: "GET {path} HTTP/1.1\r\nHost: fn.test\r\nX-Forwarded-For: 6.6.6.6\r\nForwarded: for=6.6.6.6;proto=https\r\nX-Forwarded-Host: bank.example\r\nX-Forwarded-Proto: https\r\nX-Real-IP: 6.6.6.6\r\nConnection: close\r\n\r\n",
        want: Want::Told {
            forwarded_for: "127.0.0.1",
            forwarded: "for=127.0.0.1;host=fn.test;proto=http",
        },
    },
    Case {
        what: "a cookie with a wide Domain or a name of sless's own is dropped; the rest is held to the function's path",
        function: "cookies",
        request: GET,
        want: Want::Cookies(&["mine=1; HttpOnly; Path={path}"]),
    },
    Case {
        what: "a body shorter than its Content-Length is cut at the idle bound",
        function: "partial",
        request: GET,
        want: Want::CutShort {
            within: Duration::from_secs(8),
            kind: "stalled",
        },
    },
    Case {
        what: "a stream of a byte every half second is cut at timeout_sec",
        function: "drip",
        request: GET,
        want: Want::CutShort {
            within: Duration::from_secs(8),
            kind: "timeout",
        },
    },
    Case {
        what: "status 999 is not HTTP",
        function: "status999",
        request: GET,
        want: Want::Problem(502, "bad-upstream-response"),
    },
    Case {
        what: "an unasked 101 is not an answer",
        function: "upgrade",
        request: GET,
        want: Want::Problem(502, "bad-upstream-response"),
    },
    Case {
        what: "two Host fields are refused",
        function: "grabber",
        request: "GET {path} HTTP/1.1\r\nHost: fn.test\r\nHost: api.test\r\nConnection: close\r\n\r\n",
        want: Want::Problem(400, "malformed-request"),
    },
    Case {
        what: "a bad chunk size is refused",
        function: "grabber",
        request: "POST {path} HTTP/1.1\r\nHost: fn.test\r\nTransfer-Encoding: chunked\r\nConnection: close\r\n\r\nzz\r\nabc\r\n0\r\n\r\n",
        want: Want::Problem(400, "malformed-request"),
    },
];

/// An answer read off the wire to its end (the server closes the
/// connection: every request says `Connection: close`).
struct Wire {
    status: u16,
    headers: Vec<(String, String)>,
    body: Vec<u8>,
    /// The body arrived whole: as long as its `Content-Length`, or with the
    /// last chunk of a chunked one.
    whole: bool,
    took: Duration,
}

impl Wire {
    fn header(&self, name: &str) -> Vec<&str> {
        self.headers
            .iter()
            .filter(|(n, _)| n.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
            .collect()
    }

    fn json(&self) -> Value {
        serde_json::from_slice(&self.body)
            .unwrap_or_else(|_| panic!("not JSON: {}", String::from_utf8_lossy(&self.body)))
    }
}

async fn exchange(fn_url: &str, request: &str) -> Wire {
    let addr = fn_url.trim_start_matches("http://");
    let started = Instant::now();
    let mut tcp = tokio::net::TcpStream::connect(addr).await.unwrap();
    tcp.write_all(request.as_bytes()).await.unwrap();
    let mut raw = Vec::new();
    tokio::time::timeout(Duration::from_secs(30), tcp.read_to_end(&mut raw))
        .await
        .expect("the proxy closes the connection within 30 s")
        .unwrap_or_default(); // a reset after the answer is an end too
    let took = started.elapsed();
    let text = String::from_utf8_lossy(&raw).into_owned();
    let (head, _) = text
        .split_once("\r\n\r\n")
        .unwrap_or_else(|| panic!("no answer head in {text:?}"));
    let mut lines = head.split("\r\n");
    let status = lines
        .next()
        .unwrap()
        .split(' ')
        .nth(1)
        .unwrap()
        .parse()
        .unwrap();
    let headers: Vec<(String, String)> = lines
        .filter_map(|l| l.split_once(':'))
        .map(|(n, v)| (n.trim().to_owned(), v.trim().to_owned()))
        .collect();
    let mut wire = Wire {
        status,
        headers,
        body: Vec::new(),
        whole: false,
        took,
    };
    let body = &raw[head.len() + 4..];
    if wire.header("transfer-encoding") == ["chunked"] {
        wire.whole = body.ends_with(b"0\r\n\r\n");
        wire.body = dechunk(body);
    } else {
        let declared: usize = wire
            .header("content-length")
            .first()
            .map_or(0, |n| n.parse().unwrap());
        wire.whole = body.len() == declared;
        wire.body = body.to_vec();
    }
    wire
}

/// The data of a chunked body, as far as it goes.
fn dechunk(mut body: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    while let Some(end) = body.windows(2).position(|w| w == b"\r\n") {
        let Ok(size) = usize::from_str_radix(std::str::from_utf8(&body[..end]).unwrap_or("x"), 16)
        else {
            break;
        };
        let data = &body[end + 2..];
        if size == 0 || data.len() < size {
            out.extend_from_slice(&data[..size.min(data.len())]);
            break;
        }
        out.extend_from_slice(&data[..size]);
        body = data.get(size + 2..).unwrap_or_default();
    }
    out
}

/// B's function's invocation records, newest first, once `n` are there.
async fn records(b: &Client, function: &str, n: usize) -> Vec<Value> {
    sless_testkit::eventually(
        &format!("{n} invocation records of {function}"),
        Duration::from_secs(20),
        || async {
            let items = b.invocations(function).await?;
            (items.len() >= n).then_some(items)
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn no_platform_credential_crosses_the_proxy_and_every_answer_is_bounded_and_http() {
    let dir = sless_testkit::scratch_dir("edge").join("data");
    let (proc, a) = start_dev_configured(&dir, "log", &[], &[("SLESS_PROXY_IDLE_SECS", "1")]).await;
    let b = tenant(&a, &dir, "mallory");
    assert_ne!(a.fn_url, a.url, "functions are on an origin of their own");

    for f in FUNCTIONS {
        let res = b
            .create(json!({"name": f.name, "runtime": "python3.11", "entrypoint": "handler.handle", "timeout_sec": f.timeout_sec}))
            .await;
        assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
        let code = format!("{RAW}\ndef handle(e):\n    {}\n", f.handle);
        let res = b
            .upload(f.name, crate::zip_files(&[("handler.py", &code)]))
            .await;
        assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    }
    for f in FUNCTIONS {
        b.wait_ready(f.name, Duration::from_secs(120)).await;
    }

    for case in CASES {
        let path = format!("/fn/{}/{}", b.namespace, case.function);
        let request = case
            .request
            .replace("{path}", &path)
            .replace("{token}", &a.token);
        let wire = exchange(&a.fn_url, &request).await;
        let body = String::from_utf8_lossy(&wire.body).into_owned();
        let what = case.what;
        match &case.want {
            Want::Saw {
                authorization,
                cookie,
            } => {
                assert_eq!(wire.status, 200, "{what}: {body}");
                let saw = wire.json();
                assert_eq!(
                    saw["authorization"].as_str(),
                    *authorization,
                    "{what}: {saw}"
                );
                assert_eq!(saw["cookie"].as_str(), *cookie, "{what}: {saw}");
            }
            Want::Told {
                forwarded_for,
                forwarded,
            } => {
                assert_eq!(wire.status, 200, "{what}: {body}");
                let told = wire.json();
                assert_eq!(told["x-forwarded-for"], *forwarded_for, "{what}: {told}");
                assert_eq!(told["forwarded"], *forwarded, "{what}: {told}");
                assert_eq!(told["x-forwarded-host"], "fn.test", "{what}: {told}");
                assert_eq!(told["x-forwarded-proto"], "http", "{what}: {told}");
                assert!(told["x-real-ip"].is_null(), "{what}: {told}");
            }
            Want::Cookies(want) => {
                assert_eq!(wire.status, 200, "{what}: {body}");
                let want: Vec<String> = want.iter().map(|c| c.replace("{path}", &path)).collect();
                assert_eq!(wire.header("set-cookie"), want, "{what}");
                assert!(wire.header("clear-site-data").is_empty(), "{what}");
            }
            Want::Problem(status, kind) => {
                assert_eq!(wire.status, *status, "{what}: {body}");
                assert_eq!(
                    wire.header("content-type"),
                    ["application/problem+json"],
                    "{what}"
                );
                let problem = wire.json();
                assert_eq!(
                    problem["type"],
                    format!("https://sless.dev/problems/{kind}"),
                    "{what}"
                );
                let detail = problem["detail"].as_str().unwrap().to_lowercase();
                for internal in ["hyper", "error", "user's body", "parse"] {
                    assert!(!detail.contains(internal), "{what}: {detail}");
                }
            }
            Want::CutShort { within, .. } => {
                assert_eq!(wire.status, 200, "{what}");
                assert!(
                    !wire.whole,
                    "{what}: the body must be cut short, got {body:?}"
                );
                assert!(
                    !wire.body.is_empty(),
                    "{what}: the bytes sent before the cut arrive"
                );
                assert!(wire.took < *within, "{what}: took {:?}", wire.took);
            }
        }
    }

    // The records say how each call ended (each of these functions was
    // called once).
    for case in CASES {
        let want_kind = match &case.want {
            Want::CutShort { kind, .. } => Some(*kind),
            Want::Problem(502, kind) => Some(*kind),
            _ => continue,
        };
        let recorded = records(&b, case.function, 1).await;
        assert_eq!(recorded.len(), 1, "{}", case.what);
        assert_eq!(
            recorded[0]["error_kind"].as_str(),
            want_kind,
            "{}: {}",
            case.what,
            recorded[0]
        );
    }

    // The API's origin serves no function: it points at their own.
    let path = format!("/fn/{}/grabber?x=1", b.namespace);
    let redirect = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap()
        .get(format!("{}{path}", a.url))
        .bearer_auth(&a.token)
        .send()
        .await
        .unwrap();
    assert_eq!(redirect.status(), 308);
    assert_eq!(
        redirect.headers()["location"],
        format!("{}{path}", a.fn_url).as_str()
    );
    let f = b.function("grabber").await;
    assert_eq!(f["url"], format!("{}/fn/{}/grabber", a.fn_url, b.namespace));

    stop_dev(proc, &dir).await;
}
