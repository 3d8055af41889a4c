//! The web console in a real browser: Debian's chromium, driven through
//! chromedriver over the WebDriver protocol, against a real `sless dev`.
//! A user signs in with the link `sless dev` printed, watches a deploy turn
//! Ready, reads the source, compares two versions, rolls back, switches the
//! http trigger off, runs a job, sees a change made elsewhere appear in the
//! live audit log, and signs out. A screenshot of each page is kept in a
//! folder the test prints, `target/tmp/console-screenshots`.
//! A second test is a function's page that tries to sign the same browser
//! into the console as the function's owner.
//! The test installs the browser when it is missing (`scripts/ensure-chromium`).

use std::path::{Path, PathBuf};
use std::time::Duration;

use base64::Engine;
use serde_json::{Value, json};

use crate::dev::{start_dev, stop_dev};
use crate::{Proc, zip_dir, zip_files};

/// One WebDriver session of chromium.
struct Browser {
    http: reqwest::Client,
    session: String,
    shots: PathBuf,
    taken: usize,
    _driver: Proc,
}

const ELEMENT: &str = "element-6066-11e4-a52e-4f735466cecf";

impl Browser {
    /// A browser of its own profile; its screenshots go to
    /// `target/tmp/{shots}`.
    async fn start(scratch: &Path, shots: &str) -> Browser {
        let ensure = Path::new(env!("CARGO_MANIFEST_DIR")).join("scripts/ensure-chromium");
        let installed = std::process::Command::new(ensure).status().unwrap();
        assert!(
            installed.success(),
            "installing chromium and chromium-driver"
        );
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let mut cmd = std::process::Command::new("chromedriver");
        cmd.arg(format!("--port={port}"));
        let driver = Proc::spawn(cmd, &scratch.join("chromedriver.log"));
        let base = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        sless_testkit::eventually("chromedriver", Duration::from_secs(30), || async {
            let s: Value = http
                .get(format!("{base}/status"))
                .send()
                .await
                .ok()?
                .json()
                .await
                .ok()?;
            (s["value"]["ready"] == true).then_some(())
        })
        .await;
        let profile = scratch.join("chromium-profile");
        let caps = json!({"capabilities": {"alwaysMatch": {
            "browserName": "chrome",
            "goog:chromeOptions": {
                "binary": "/usr/bin/chromium",
                "args": [
                    "--headless=new", "--no-sandbox", "--disable-gpu", "--disable-dev-shm-usage",
                    "--disable-background-networking", "--disable-component-update", "--disable-sync",
                    "--no-first-run", "--window-size=1280,1000",
                    format!("--user-data-dir={}", profile.display()),
                ]
            }
        }}});
        let started: Value = http
            .post(format!("{base}/session"))
            .json(&caps)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        let session = started["value"]["sessionId"]
            .as_str()
            .unwrap_or_else(|| panic!("no session: {started}"))
            .to_owned();
        // Kept after the run (the scratch folder is not): target/tmp/.
        let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join(shots);
        let _ = std::fs::remove_dir_all(&shots);
        std::fs::create_dir_all(&shots).unwrap();
        eprintln!("console screenshots: {}", shots.display());
        Browser {
            http,
            session: format!("{base}/session/{session}"),
            shots,
            taken: 0,
            _driver: driver,
        }
    }

    async fn call(&self, method: reqwest::Method, path: &str, body: Option<Value>) -> Value {
        let mut req = self.http.request(method, format!("{}{path}", self.session));
        if let Some(b) = body {
            req = req.json(&b);
        }
        let v: Value = req.send().await.unwrap().json().await.unwrap();
        v["value"].clone()
    }

    async fn open(&self, url: &str) {
        self.call(reqwest::Method::POST, "/url", Some(json!({ "url": url })))
            .await;
    }

    async fn url(&self) -> String {
        self.call(reqwest::Method::GET, "/url", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    async fn source(&self) -> String {
        self.call(reqwest::Method::GET, "/source", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// The first element `css` selects, if one does.
    async fn find(&self, css: &str) -> Option<String> {
        let v = self
            .call(
                reqwest::Method::POST,
                "/element",
                Some(json!({"using": "css selector", "value": css})),
            )
            .await;
        if v[ELEMENT].is_null() {
            eprintln!("find {css}: {v}");
        }
        v[ELEMENT].as_str().map(str::to_owned)
    }

    async fn click(&self, css: &str) {
        let e = self.find(css).await.unwrap_or_else(|| panic!("no {css}"));
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/click"),
            Some(json!({})),
        )
        .await;
    }

    async fn type_into(&self, css: &str, text: &str) {
        let e = self.find(css).await.unwrap_or_else(|| panic!("no {css}"));
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/clear"),
            Some(json!({})),
        )
        .await;
        self.call(
            reqwest::Method::POST,
            &format!("/element/{e}/value"),
            Some(json!({ "text": text })),
        )
        .await;
    }

    /// Waits until the page (loaded again each time when `reload`) holds
    /// `text`; on a timeout, says what the page held.
    async fn until(&self, what: &str, text: &str, reload: bool) {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(90);
        loop {
            if reload {
                self.call(reqwest::Method::POST, "/refresh", Some(json!({})))
                    .await;
            }
            let page = self.source().await;
            if page.contains(text) {
                return;
            }
            if tokio::time::Instant::now() > deadline {
                panic!("timed out waiting for {what}: {text:?} is not in\n{page}");
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    }

    /// The page's title.
    async fn title(&self) -> String {
        self.call(reqwest::Method::GET, "/title", None)
            .await
            .as_str()
            .unwrap_or_default()
            .to_owned()
    }

    /// Waits until the page's title starts with `prefix`, and returns it.
    async fn until_title(&self, what: &str, prefix: &str) -> String {
        sless_testkit::eventually(what, Duration::from_secs(30), || async {
            let title = self.title().await;
            title.starts_with(prefix).then_some(title)
        })
        .await
    }

    /// How long the page took from navigation to interactive, in ms (the
    /// browser's Navigation Timing).
    async fn interactive_ms(&self) -> f64 {
        let script = "const t = performance.getEntriesByType('navigation')[0]; \
                      return t ? t.domInteractive : -1;";
        self.call(
            reqwest::Method::POST,
            "/execute/sync",
            Some(json!({ "script": script, "args": [] })),
        )
        .await
        .as_f64()
        .unwrap_or(-1.0)
    }

    async fn screenshot(&mut self, name: &str) {
        let png = self.call(reqwest::Method::GET, "/screenshot", None).await;
        let bytes = base64::engine::general_purpose::STANDARD
            .decode(png.as_str().unwrap_or_default())
            .unwrap();
        self.taken += 1;
        std::fs::write(
            self.shots.join(format!("{:02}-{name}.png", self.taken)),
            bytes,
        )
        .unwrap();
    }

    async fn quit(&self) {
        self.http.delete(&self.session).send().await.ok();
    }
}

/// A python3.11 function `name` with entrypoint `handler.handle`.
fn python(name: &str) -> sless_client::CreateFunction {
    sless_client::CreateFunction {
        name: name.into(),
        runtime: "python3.11".into(),
        entrypoint: "handler.handle".into(),
        memory_mb: 128,
        timeout_sec: 30,
        env_vars: Default::default(),
        scale_to_zero_after_sec: None,
        min_instances: None,
        max_instances: None,
        concurrency: None,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_works_through_the_console_in_a_real_browser() {
    let scratch = sless_testkit::scratch_dir("console");
    let dir = scratch.join("data");
    let (proc, c) = start_dev(&dir, "log").await;
    let info: Value =
        serde_json::from_str(&std::fs::read_to_string(dir.join("dev.json")).unwrap()).unwrap();
    let link = info["console"]
        .as_str()
        .expect("sless dev's console link")
        .to_owned();
    assert!(!link.contains(&c.token), "the link holds no token");
    let api = sless_client::Client::new(c.url.clone(), c.token.clone()).unwrap();
    let ns = c.namespace.clone();
    let mut b = Browser::start(&scratch, "console-screenshots").await;

    // Signed in by the link: the namespace page.
    b.open(&link).await;
    b.until("the namespace page", "<h1>Functions</h1>", false)
        .await;
    eprintln!(
        "load to interactive: the namespace page {:.1} ms",
        b.interactive_ms().await
    );
    assert!(b.url().await.ends_with(&format!("/console/ns/{ns}")));
    b.screenshot("namespace").await;

    // A deploy through the API turns Ready on the page.
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("examples/hello-python");
    api.create_function(&python("hello")).await.unwrap();
    api.upload("hello", zip_dir(&example)).await.unwrap();
    b.until(
        "hello to turn Ready",
        r#"<span class="phase ready">Ready</span>"#,
        true,
    )
    .await;
    b.screenshot("ready").await;

    // Its source.
    b.click("a[href$='/functions/hello']").await;
    b.until("the source", "handler.py", false).await;
    eprintln!(
        "load to interactive: the function's page {:.1} ms",
        b.interactive_ms().await
    );
    assert!(
        b.source()
            .await
            .contains(r#"<span class="keyword">def</span>"#)
    );
    b.screenshot("function").await;

    // A second version and the diff.
    let v2 = zip_files(&[("handler.py", "def handle(event):\n    return {\"v\": 2}\n")]);
    api.upload("hello", v2).await.unwrap();
    b.open(&format!(
        "{}/console/ns/{ns}/functions/hello/versions?from=1&to=2&view=split",
        c.url
    ))
    .await;
    b.until(
        "the diff",
        r#"<td class="add"><code>    return {"v": 2}</code></td>"#,
        true,
    )
    .await;
    b.screenshot("diff").await;

    // Roll back to version 1, after the confirmation.
    b.until(
        "version 2 to be live",
        r#"v2 <span class="phase ready">live</span>"#,
        true,
    )
    .await;
    b.click("a[href$='/rollback?version=1']").await;
    b.until("the confirmation", "Roll hello back to v1?", false)
        .await;
    b.screenshot("confirm-rollback").await;
    b.click("form[action$='/rollback'] button").await;
    b.until("version 1 to run", "v1 runs", true).await;
    let f = api.get_function("hello").await.unwrap();
    assert_eq!(f.deployed_version, Some(1));

    // The http trigger switched off: /fn answers 503.
    api.create_trigger(&sless_client::CreateTrigger {
        name: "web".into(),
        function: "hello".into(),
        kind: "http".into(),
        schedule: None,
        timezone: None,
        enabled: None,
    })
    .await
    .unwrap();
    b.open(&format!("{}/console/ns/{ns}", c.url)).await;
    b.until("the trigger", "Disable", true).await;
    b.click("form.toggle button").await;
    b.until(
        "the trigger off",
        r#"<span class="switch off">off</span>"#,
        true,
    )
    .await;
    b.screenshot("trigger-off").await;
    crate::terraform::answers(&c, &format!("{}/fn/{ns}/hello", c.fn_url), 503).await;

    // A job from the function's page, and its output.
    b.open(&format!("{}/console/ns/{ns}/functions/hello", c.url))
        .await;
    b.type_into("#job-input", r#"{"name": "browser"}"#).await;
    b.click("form.job button").await;
    b.until("the job's output", "hello, browser", false).await;
    b.screenshot("job").await;

    // The live audit log shows a change made elsewhere, without a reload.
    b.open(&format!("{}/console/ns/{ns}/events", c.url)).await;
    b.until("the audit log", "<h1>Audit log</h1>", false).await;
    b.click("#live").await;
    b.until("the live mode", r#"data-live="on""#, false).await;
    api.create_function(&python("from-elsewhere"))
        .await
        .unwrap();
    b.until(
        "the change to appear",
        &format!("function/{ns}/from-elsewhere"),
        false,
    )
    .await;
    b.screenshot("live-audit-log").await;

    // Signed out: the pages ask to sign in.
    b.click("form.sign-out button").await;
    b.until("the sign-in page", "Sign in to sless", false).await;
    b.open(&format!("{}/console/ns/{ns}", c.url)).await;
    b.until("a refusal", "Sign in to sless", false).await;
    b.screenshot("signed-out").await;
    b.quit().await;
    stop_dev(proc, &dir).await;
}

/// The cookies an answer sets, as `(name, value, path)`.
fn set_cookies(res: &reqwest::Response) -> Vec<(String, String, String)> {
    res.headers()
        .get_all(reqwest::header::SET_COOKIE)
        .iter()
        .filter_map(|v| {
            let v = v.to_str().ok()?;
            let (pair, attrs) = v.split_once(';').unwrap_or((v, ""));
            let (name, value) = pair.split_once('=')?;
            let path = attrs
                .split(';')
                .filter_map(|a| a.trim().split_once('='))
                .find(|(k, _)| k.eq_ignore_ascii_case("path"))
                .map_or("/", |(_, p)| p);
            Some((name.trim().into(), value.trim().into(), path.into()))
        })
        .collect()
}

/// The hidden `csrf` field of a sign-in page.
fn form_token(page: &str) -> String {
    let at = page.find("name=\"csrf\" value=\"").expect("a form token") + 19;
    page[at..at + page[at..].find('"').unwrap()].to_owned()
}

/// A python function whose answer is the page `html`.
fn page_function(html: &str) -> Vec<u8> {
    let handler = format!(
        "HTML = {}\n\ndef handle(event):\n    return {{\"statusCode\": 200, \"headers\": {{\"Content-Type\": \"text/html; charset=utf-8\"}}, \"body\": HTML}}\n",
        serde_json::to_string(html).unwrap()
    );
    zip_files(&[("handler.py", &handler)])
}

/// A script that writes each cookie as a page's script can (`Secure`, at
/// the path it was set for), then shows what it could write in the title.
fn planting(cookies: &[(String, String, String)]) -> String {
    let mut script = String::new();
    for (name, value, path) in cookies {
        script.push_str(&format!(
            "document.cookie = {};\n",
            serde_json::to_string(&format!("{name}={value}; Secure; Path={path}")).unwrap()
        ));
    }
    script.push_str("document.title = \"planted:\" + document.cookie;\n");
    script
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_functions_page_cannot_sign_a_browser_into_the_console() {
    let scratch = sless_testkit::scratch_dir("console-fixation");
    let dir = scratch.join("data");
    let (proc, c) = start_dev(&dir, "log").await;
    let api = sless_client::Client::new(c.url.clone(), c.token.clone()).unwrap();
    let http = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let cookie_header = |cookies: &[(String, String, String)]| {
        cookies
            .iter()
            .map(|(n, v, _)| format!("{n}={v}"))
            .collect::<Vec<_>>()
            .join("; ")
    };

    // The function's owner signs in with their own token, from their own
    // browser (here, plain HTTP): what the console gave it is theirs to plant.
    let sign_in = format!("{}/console/sign-in", c.url);
    let form = http.get(&sign_in).send().await.unwrap();
    let mut owners = set_cookies(&form);
    let csrf = form_token(&form.text().await.unwrap());
    let signed = http
        .post(&sign_in)
        .header("cookie", cookie_header(&owners))
        .header("origin", &c.url)
        .form(&[("token", c.token.as_str()), ("csrf", csrf.as_str())])
        .send()
        .await
        .unwrap();
    assert_eq!(signed.status().as_u16(), 303, "the owner signs in");
    owners.extend(set_cookies(&signed));
    let home = format!("/console/ns/{}", c.namespace);
    let own = http
        .get(format!("{}{home}", c.url))
        .header("cookie", cookie_header(&owners))
        .send()
        .await
        .unwrap();
    assert_eq!(own.status().as_u16(), 200, "the owner's cookies sign in");
    // And a fresh sign-in form of theirs: its cookies and token.
    let fresh = http.get(&sign_in).send().await.unwrap();
    let form_cookies = set_cookies(&fresh);
    let minted = form_token(&fresh.text().await.unwrap());

    // Two pages on the functions' origin: one plants the owner's cookies,
    // the other plants the form's and posts the sign-in form with the
    // owner's token.
    let plant = format!(
        "<!doctype html><title>plant</title><script>{}</script>",
        planting(&owners)
    );
    let post = format!(
        "<!doctype html><title>post</title>\
         <form id=f method=post action=\"{sign_in}\">\
         <input type=hidden name=token value=\"{}\"><input type=hidden name=csrf value=\"{minted}\"></form>\
         <script>{}document.getElementById(\"f\").submit();</script>",
        c.token,
        planting(&form_cookies)
    );
    for (name, html) in [("plant", &plant), ("post", &post)] {
        api.create_function(&python(name)).await.unwrap();
        api.upload(name, page_function(html)).await.unwrap();
        c.wait_ready(name, Duration::from_secs(120)).await;
    }

    let mut b = Browser::start(&scratch, "console-fixation-screenshots").await;
    // The planting page runs: what it could write is in its title.
    b.open(&format!("{}/fn/{}/plant", c.fn_url, c.namespace))
        .await;
    let planted = b
        .until_title("the planting script to run", "planted:")
        .await;
    eprintln!("the functions' page could write: {planted}");
    b.screenshot("planted").await;
    b.open(&format!("{}/console", c.url)).await;
    b.until("a page of the console", "</h1>", false).await;
    assert!(
        !b.url().await.contains(&home),
        "the planted session signed the browser in: {}",
        b.url().await
    );
    assert!(b.source().await.contains("Sign in to sless"));
    b.screenshot("not-signed-in").await;

    // The posting page: the form is sent from the functions' origin.
    b.open(&format!("{}/fn/{}/post", c.fn_url, c.namespace))
        .await;
    sless_testkit::eventually("the form to be sent", Duration::from_secs(30), || async {
        b.url().await.starts_with(&c.url).then_some(())
    })
    .await;
    let answer = b.source().await;
    b.screenshot("posted").await;
    assert!(
        answer.contains("Not sent from the console") || answer.contains("This form is out of date"),
        "the sign-in was not refused: {answer}"
    );
    b.open(&format!("{}/console", c.url)).await;
    b.until("a page of the console", "</h1>", false).await;
    assert!(
        !b.url().await.contains(&home),
        "the posted form signed the browser in: {}",
        b.url().await
    );
    assert!(b.source().await.contains("Sign in to sless"));
    b.quit().await;
    stop_dev(proc, &dir).await;
}
