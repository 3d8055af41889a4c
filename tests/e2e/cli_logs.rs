//! `sless logs` and `sless invocations` against a real `sless dev`: what a
//! deployed Python function prints, by the call that printed it, filtered,
//! followed live; and the flags' bad values, refused before anything is
//! sent.

use std::io::BufRead;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc::{Receiver, RecvTimeoutError};
use std::time::{Duration, Instant};

use sless_client::types::LogLineView;

use crate::dev::{start_dev_configured, stop_dev};

/// The lines a function may write a second in this test's `sless dev`
/// (twice that at once): low, so that one call can go over it.
const LINES_PER_SEC: &str = "20";

/// Prints a line on stdout and one on stderr with the word it is given
/// (`?say=`); raises for `boom`; prints 200 lines for `flood`.
const HANDLER: &str = r#"import sys

def handle(event):
    word = event["query"].get("say", "nothing")
    if word == "flood":
        for i in range(200):
            print("flood line %d" % i, flush=True)
        return {"said": word}
    print("said " + word, flush=True)
    print("warned " + word, file=sys.stderr, flush=True)
    if word == "boom":
        raise RuntimeError("boom went the call")
    return {"said": word}
"#;

/// `sless` with the `dev` profile of one configuration directory.
struct User {
    config: PathBuf,
}

impl User {
    fn command(&self, args: &[&str]) -> Command {
        let mut cmd = Command::new(env!("CARGO_BIN_EXE_sless"));
        cmd.env("XDG_CONFIG_HOME", &self.config)
            .env_remove("SLESS_ENDPOINT")
            .env_remove("SLESS_TOKEN")
            .env_remove("SLESS_PROFILE")
            .args(args);
        cmd
    }

    fn run(&self, args: &[&str]) -> Output {
        self.command(args).output().expect("running sless")
    }

    /// stdout of a run that must exit `code`.
    fn expect(&self, args: &[&str], code: i32) -> (String, String) {
        let out = self.run(args);
        let (stdout, stderr) = texts(&out);
        assert_eq!(
            out.status.code(),
            Some(code),
            "sless {}\n{stdout}{stderr}",
            args.join(" ")
        );
        (stdout, stderr)
    }

    fn ok(&self, args: &[&str]) -> String {
        self.expect(args, 0).0
    }

    /// `sless logs ... -o json`: each line of stdout, read as a log line.
    fn lines(&self, args: &[&str]) -> Vec<LogLineView> {
        let all = [&["logs"], args, &["-o", "json"]].concat();
        parse_lines(&self.ok(&all))
    }

    /// Calls the function with `?say=word`; its invocation id, from the
    /// answer's `Sless-Invocation-Id`.
    fn call(&self, word: &str, code: i32) -> String {
        let path = format!("/?say={word}");
        let (stdout, _) = self.expect(&["invoke", "app", "--path", &path, "-o", "json"], code);
        let answer: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        let id = answer["headers"]
            .as_array()
            .unwrap()
            .iter()
            .find(|h| h[0] == "sless-invocation-id")
            .and_then(|h| h[1].as_str())
            .unwrap_or_else(|| panic!("no Sless-Invocation-Id in {answer}"));
        assert_eq!(id.len(), 36, "{id}");
        id.to_owned()
    }

    /// `sless ARGS` running, and the lines of its stdout as they come.
    fn spawn(&self, args: &[&str]) -> (Child, Receiver<String>) {
        let mut child = self
            .command(args)
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in std::io::BufReader::new(stdout)
                .lines()
                .map_while(Result::ok)
            {
                if tx.send(line).is_err() {
                    return;
                }
            }
        });
        (child, rx)
    }
}

fn texts(out: &Output) -> (String, String) {
    (
        String::from_utf8_lossy(&out.stdout).into_owned(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn parse_lines(stdout: &str) -> Vec<LogLineView> {
    stdout
        .lines()
        .map(|l| serde_json::from_str(l).unwrap_or_else(|e| panic!("not a log line ({e}): {l:?}")))
        .collect()
}

/// The lines' texts, sorted: stdout and stderr are read apart, so a
/// call's lines on the two come in either order.
fn texts_of(lines: &[LogLineView]) -> Vec<&str> {
    let mut texts: Vec<&str> = lines.iter().map(|l| l.line.as_str()).collect();
    texts.sort_unstable();
    texts
}

/// The line reading `text`, once there is one.
fn the_line<'a>(lines: &'a [LogLineView], text: &str) -> Option<&'a LogLineView> {
    lines.iter().find(|l| l.line == text)
}

/// The short form `sless logs` shows of an invocation id.
fn short(id: &str) -> &str {
    &id[id.len() - 8..]
}

/// Followed lines until one has read each of `texts`, within `within`.
fn follow_until(rx: &Receiver<String>, texts: &[&str], within: Duration) -> Vec<LogLineView> {
    let deadline = Instant::now() + within;
    let mut got: Vec<LogLineView> = Vec::new();
    while !texts.iter().all(|t| the_line(&got, t).is_some()) {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) => got.extend(parse_lines(&l)),
            Err(RecvTimeoutError::Timeout) => {
                panic!("not all of {texts:?} followed within {within:?}; got {got:#?}")
            }
            Err(RecvTimeoutError::Disconnected) => {
                panic!("the follower ended before {texts:?}; got {got:#?}")
            }
        }
    }
    got
}

/// Whether every one of `texts` is a line of `lines`.
fn has_all(lines: &[LogLineView], texts: &[&str]) -> bool {
    texts.iter().all(|t| the_line(lines, t).is_some())
}

fn write(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, content) in files {
        std::fs::write(dir.join(name), content).unwrap();
    }
}

const WAIT: Duration = Duration::from_secs(30);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn logs_show_what_each_call_printed_filter_it_and_follow_it_without_a_gap() {
    let root = sless_testkit::scratch_dir("cli-logs");
    let config = root.join("config");
    let data = root.join("data");
    let (proc, _) = start_dev_configured(
        &data,
        "log",
        &[],
        &[
            ("XDG_CONFIG_HOME", config.to_str().unwrap()),
            ("SLESS_LOG_LINES_PER_SEC", LINES_PER_SEC),
        ],
    )
    .await;
    let user = User { config };
    let app = root.join("app");
    write(
        &app,
        &[("handler.py", HANDLER), ("sless.toml", "name = \"app\"\n")],
    );
    user.ok(&["deploy", app.to_str().unwrap()]);

    let alpha = user.call("alpha", 0);
    let bravo = user.call("bravo", 0);
    // UUIDv7: calls of one minute share their first characters, never
    // their last ones, which the short form shows.
    assert_ne!(short(&alpha), short(&bravo));

    // Every line as JSON, each with the call that printed it.
    let all = sless_testkit::eventually("both calls' lines", WAIT, || async {
        let all = user.lines(&["app", "--tail", "1000"]);
        // stdout and stderr are read apart: each of the four, whatever
        // came first.
        let four = ["said alpha", "warned alpha", "said bravo", "warned bravo"];
        has_all(&all, &four).then_some(all)
    })
    .await;
    for (text, stream, id) in [
        ("said alpha", "stdout", &alpha),
        ("warned alpha", "stderr", &alpha),
        ("said bravo", "stdout", &bravo),
        ("warned bravo", "stderr", &bravo),
    ] {
        let line = the_line(&all, text).unwrap_or_else(|| panic!("{text:?} in {all:#?}"));
        assert_eq!(
            (line.stream.as_str(), line.invocation.as_deref()),
            (stream, Some(id.as_str())),
            "{line:?}"
        );
    }
    assert!(
        all.windows(2).all(|w| w[0].id < w[1].id),
        "oldest first: {all:#?}"
    );

    // For people: time, the call's short form, the stream, the line.
    let shown = user.ok(&["logs", "app", "--tail", "1000"]);
    for (id, stream, text) in [
        (&alpha, "stdout", "said alpha"),
        (&bravo, "stderr", "warned bravo"),
    ] {
        let end = format!("  {}  {stream}  {text}", short(id));
        assert!(
            shown.lines().any(|l| l.ends_with(&end)),
            "a line ending {end:?} in:\n{shown}"
        );
    }
    assert!(!shown.contains('\x1b'), "no colours when piped: {shown}");

    // One call's lines, by its whole id or its short form.
    for given in [alpha.as_str(), short(&alpha)] {
        let one = user.lines(&["app", "--invocation", given, "--tail", "1000"]);
        assert_eq!(
            texts_of(&one),
            ["said alpha", "warned alpha"],
            "--invocation {given}"
        );
    }
    // Text, ignoring case; a stream; the last lines.
    let grepped = user.lines(&["app", "--grep", "BRAVO", "--tail", "1000"]);
    assert_eq!(texts_of(&grepped), ["said bravo", "warned bravo"]);
    let errors = user.lines(&["app", "--stream", "stderr", "--tail", "1000"]);
    assert!(
        the_line(&errors, "warned alpha").is_some() && errors.iter().all(|l| l.stream == "stderr"),
        "{errors:#?}"
    );
    // The last 3, oldest first: none older than the newest seen above
    // (lines may have come since: a call's access log line).
    let last = user.lines(&["app", "--tail", "3"]);
    let newest = all.last().unwrap().id;
    assert!(
        last.len() == 3 && last.windows(2).all(|w| w[0].id < w[1].id) && last[2].id >= newest,
        "the last 3, after line {newest}: {last:#?}"
    );

    // Following: the last 2 lines, then lines as they are written, none
    // missed or repeated.
    let (mut follower, rx) = user.spawn(&["logs", "app", "--follow", "--tail", "2", "-o", "json"]);
    let mut followed: Vec<LogLineView> = Vec::new();
    for _ in 0..2 {
        let l = rx.recv_timeout(WAIT).expect("the last 2 lines, first");
        followed.extend(parse_lines(&l));
    }
    let charlie = user.call("charlie", 0);
    followed.extend(follow_until(&rx, &["said charlie", "warned charlie"], WAIT));
    user.call("delta", 0);
    followed.extend(follow_until(&rx, &["said delta", "warned delta"], WAIT));
    follower.kill().ok();
    follower.wait().ok();
    let said = the_line(&followed, "said charlie").expect("said charlie followed");
    assert_eq!(said.invocation.as_deref(), Some(charlie.as_str()));
    let ids: Vec<i64> = followed.iter().map(|l| l.id).collect();
    assert!(ids.windows(2).all(|w| w[0] < w[1]), "repeated: {ids:?}");
    // Every line written from the first followed to the last is there.
    let (first, last) = (ids[0], *ids.last().unwrap());
    let kept: Vec<i64> = user
        .lines(&["app", "--tail", "1000"])
        .iter()
        .map(|l| l.id)
        .filter(|id| (first..=last).contains(id))
        .collect();
    assert_eq!(ids, kept, "followed lines against the kept ones");

    // A failed call: its record and what it printed, its traceback too.
    let boom = user.call("boom", 1);
    let shown = sless_testkit::eventually("the failed call's record and lines", WAIT, || async {
        let out = user.run(&["invocations", "app", short(&boom)]);
        let (stdout, _) = texts(&out);
        let all = ["said boom", "warned boom", "boom went the call"];
        (out.status.success() && all.iter().all(|t| stdout.contains(t))).then_some(stdout)
    })
    .await;
    assert!(
        shown.contains(&format!("id:         {boom}")) && shown.contains("status:     500"),
        "{shown}"
    );
    let end = format!("  {}  stdout  said boom", short(&boom));
    assert!(
        shown.lines().any(|l| l.ends_with(&end)),
        "{end:?} in:\n{shown}"
    );
    let doc: serde_json::Value =
        serde_json::from_str(&user.ok(&["invocations", "app", &boom, "-o", "json"])).unwrap();
    assert_eq!(
        (doc["id"].as_str(), doc["status"].as_u64()),
        (Some(boom.as_str()), Some(500))
    );
    let lines: Vec<LogLineView> = serde_json::from_value(doc["lines"].clone()).unwrap();
    assert!(
        lines
            .iter()
            .all(|l| l.invocation.as_deref() == Some(boom.as_str()))
            && lines
                .iter()
                .any(|l| l.stream == "stderr" && l.line.contains("Traceback")),
        "{lines:#?}"
    );

    console_shows_the_lines(&user, &data, [&alpha, &bravo, &boom]).await;

    // Not found: one line, exit 4.
    for args in [
        &["logs", "missing"][..],
        &["invocations", "app", "00000000-0000-7000-8000-000000000000"],
        &["logs", "app", "--invocation", "ffffffff"],
    ] {
        let (_, stderr) = user.expect(args, 4);
        assert!(
            stderr.starts_with("error: ") && stderr.lines().count() == 1,
            "{stderr}"
        );
    }

    // Over the function's budget: the lines not kept are counted on
    // stderr, never on stdout.
    user.call("flood", 0);
    let (stdout, stderr) =
        sless_testkit::eventually("the count of lines not kept", WAIT, || async {
            let out = user.run(&["logs", "app", "--grep", "flood", "-o", "json"]);
            let (stdout, stderr) = texts(&out);
            // The count said anywhere, and the lines kept written: the
            // checks below tell where each went.
            let said = stdout.contains("not kept") || stderr.contains("not kept");
            (said && stdout.contains("flood line")).then_some((stdout, stderr))
        })
        .await;
    let flood = parse_lines(&stdout);
    assert!(
        !flood.is_empty() && flood.len() < 200,
        "some of the flood kept: {}",
        flood.len()
    );
    assert!(
        stderr.lines().count() == 1 && stderr.contains("lines app printed were not kept"),
        "{stderr}"
    );
    stop_dev(proc, &data).await;
}

/// A browser's session of the console, signed in with `sless dev`'s link.
struct Console {
    http: reqwest::Client,
    url: String,
    namespace: String,
    cookies: String,
}

impl Console {
    async fn sign_in(data: &Path) -> Console {
        let info: serde_json::Value =
            serde_json::from_str(&std::fs::read_to_string(data.join("dev.json")).unwrap()).unwrap();
        let http = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .unwrap();
        let link = info["console"].as_str().expect("the console link");
        let signed = http.get(link).send().await.unwrap();
        assert_eq!(signed.status().as_u16(), 303, "signed in with the link");
        let cookies = signed
            .headers()
            .get_all(reqwest::header::SET_COOKIE)
            .iter()
            .filter_map(|v| v.to_str().ok()?.split(';').next().map(str::to_owned))
            .collect::<Vec<_>>()
            .join("; ");
        Console {
            http,
            url: info["url"].as_str().unwrap().to_owned(),
            namespace: info["namespace"].as_str().unwrap().to_owned(),
            cookies,
        }
    }

    /// `GET` a path of the function `app`'s pages: its answer.
    async fn open(&self, path: &str) -> reqwest::Response {
        let url = format!(
            "{}/console/ns/{}/functions/app{path}",
            self.url, self.namespace
        );
        self.http
            .get(url)
            .header("cookie", &self.cookies)
            .send()
            .await
            .unwrap()
    }

    /// The page at `path`, which must answer 200.
    async fn page(&self, path: &str) -> String {
        let res = self.open(path).await;
        let status = res.status().as_u16();
        let text = res.text().await.unwrap();
        assert_eq!(status, 200, "{path}: {text}");
        text
    }
}

/// The console's logs page, filtered, its live stream, and a failed call's
/// page with what it printed.
async fn console_shows_the_lines(user: &User, data: &Path, [alpha, bravo, boom]: [&String; 3]) {
    let console = Console::sign_in(data).await;
    let function = console.page("").await;
    assert!(
        function.contains("/functions/app/logs\">Logs</a>"),
        "{function}"
    );
    let all = console.page("/logs").await;
    for text in [
        "said alpha",
        "warned bravo",
        "said boom",
        "boom went the call",
    ] {
        assert!(all.contains(text), "{text:?} on the logs page: {all}");
    }
    let call = format!(
        "/functions/app/invocations/{alpha}\" title=\"{alpha}\"><code>{}</code></a>",
        short(alpha)
    );
    assert!(all.contains(&call), "{call:?} on the logs page: {all}");
    assert!(all.contains("<tr class=\"stderr\">"), "{all}");
    let one = console.page(&format!("/logs?invocation={alpha}")).await;
    assert!(
        one.contains("said alpha") && one.contains("warned alpha") && !one.contains("bravo"),
        "{one}"
    );
    let grepped = console.page("/logs?q=BRAVO&stream=stdout").await;
    assert!(
        grepped.contains("said bravo")
            && !grepped.contains("warned bravo")
            && !grepped.contains("alpha"),
        "{grepped}"
    );
    // A failed call's page: its record, and what it printed.
    let failed = console.page(&format!("/invocations/{boom}")).await;
    for text in [
        "500",
        "said boom",
        "Traceback",
        "RuntimeError: boom went the call",
    ] {
        assert!(
            failed.contains(text),
            "{text:?} on the call's page: {failed}"
        );
    }
    let calls = console.page("/invocations").await;
    assert!(
        calls.contains(&format!("/functions/app/invocations/{bravo}\"")),
        "the calls link to their pages: {calls}"
    );

    // Live: the tail from the last line shown gives a line printed after.
    let at = all.find("data-stream=\"").expect("the live mode's stream") + 13;
    let stream = all[at..at + all[at..].find('"').unwrap()].replace("&amp;", "&");
    let path = stream
        .split_once("/functions/app")
        .map(|(_, p)| p.to_owned())
        .unwrap();
    let mut tail = console.open(&path).await;
    assert_eq!(tail.status().as_u16(), 200, "{path}");
    let echo = user.call("echo", 0);
    let mut got = String::new();
    let deadline = tokio::time::Instant::now() + WAIT;
    while !got.contains("\"said echo\"") {
        match tokio::time::timeout_at(deadline, tail.chunk()).await {
            Ok(Ok(Some(chunk))) => got.push_str(&String::from_utf8_lossy(&chunk)),
            other => panic!("the live stream gave no \"said echo\" ({other:?}): {got}"),
        }
    }
    assert!(
        got.contains(&format!("\"invocation\":\"{echo}\"")) && !got.contains("said alpha"),
        "only what came after the page: {got}"
    );
}

#[test]
fn bad_flags_are_one_line_and_exit_2_before_anything_is_sent() {
    // Nothing listens there: a flag that got past the checks would exit 6.
    let token = sless_api::issue_hs256(
        b"any-secret-0123456789abcdef012345",
        "dev",
        Duration::from_secs(60),
    );
    let user = User {
        config: sless_testkit::scratch_dir("cli-logs-flags"),
    };
    let long = "x".repeat(257);
    let cases: &[(&[&str], &str)] = &[
        (
            &["logs", "app", "--since", "yesterday"],
            "--since \"yesterday\" is not like 10m",
        ),
        (&["logs", "app", "--since", "10x"], "units are s, m, h, d"),
        (
            &["logs", "app", "--since", "-5m"],
            "--since \"-5m\" is not like",
        ),
        (
            &["logs", "app", "--since", "400000000000000000d"],
            "too long ago",
        ),
        (&["logs", "app", "--since", "999999999d"], "too long ago"),
        (
            &["logs", "app", "--stream", "stdin"],
            "--stream is stdout or stderr, not \"stdin\"",
        ),
        (
            &["logs", "app", "--tail=-1"],
            "--tail \"-1\" is a number of lines",
        ),
        (
            &["logs", "app", "--tail", "many"],
            "--tail \"many\" is a number of lines",
        ),
        (
            &["logs", "app", "--grep", ""],
            "--grep is the text to look for, 1 to 256 bytes",
        ),
        (
            &["logs", "app", "--grep", &long],
            "--grep is the text to look for",
        ),
        (
            &["logs", "app", "--invocation", "not-an-id"],
            "--invocation \"not-an-id\" is not an invocation id",
        ),
        (
            &["logs", "app", "--invocation", "abc"],
            "--invocation \"abc\" is not an invocation id",
        ),
        (
            &["logs", "app", "-f", "--since", "2026-13-01T00:00:00Z"],
            "--since \"2026-13-01T00:00:00Z\"",
        ),
        (
            &["invocations", "app", "zz!"],
            "ID \"zz!\" is not an invocation id",
        ),
        (
            &["invocations", "app", "abcd1234", "--follow"],
            "with an ID there is one record",
        ),
        (
            &["invocations", "app", "--since", "soon"],
            "--since \"soon\"",
        ),
    ];
    for (args, message) in cases {
        let all = [
            *args,
            &["--endpoint", "http://127.0.0.1:9", "--token", &token],
        ]
        .concat();
        let out = user.run(&all);
        let (stdout, stderr) = texts(&out);
        assert_eq!(
            out.status.code(),
            Some(2),
            "sless {}: {stderr}",
            args.join(" ")
        );
        assert!(
            stdout.is_empty()
                && stderr.lines().count() == 1
                && stderr.starts_with("error: ")
                && stderr.contains(message),
            "sless {}: {message:?} in one line, got {stderr:?}",
            args.join(" ")
        );
    }
}
