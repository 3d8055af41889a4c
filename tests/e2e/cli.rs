//! The user commands (`sless deploy`, `invoke`, `ls`, ...) against a real
//! `sless dev`, through the `dev` profile it writes, as a user runs them.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::Output;

use crate::dev::{start_dev_configured, stop_dev};
use crate::sless;

/// One user's world: a `sless dev` and the configuration directory its
/// `dev` profile is written to.
struct User {
    config: PathBuf,
}

impl User {
    /// Runs `sless ARGS` as this user (stdout not a terminal).
    fn run(&self, args: &[&str]) -> Output {
        let mut cmd = sless();
        cmd.env("XDG_CONFIG_HOME", &self.config)
            .env_remove("SLESS_ENDPOINT")
            .env_remove("SLESS_TOKEN")
            .env_remove("SLESS_PROFILE")
            .args(args);
        let out = cmd.output().expect("running sless");
        eprintln!(
            "$ sless {}\n{}{}(exit {:?})",
            args.join(" "),
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr),
            out.status.code()
        );
        out
    }

    /// Runs it, expecting the exit code; answers stdout.
    fn ok(&self, args: &[&str]) -> String {
        self.expect(args, 0).0
    }

    fn expect(&self, args: &[&str], code: i32) -> (String, String) {
        let out = self.run(args);
        assert_eq!(out.status.code(), Some(code), "sless {}", args.join(" "));
        (
            String::from_utf8_lossy(&out.stdout).into_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    }

    fn json(&self, args: &[&str]) -> serde_json::Value {
        let mut all = args.to_vec();
        all.extend(["-o", "json"]);
        let text = self.ok(&all);
        serde_json::from_str(&text).unwrap_or_else(|e| {
            panic!("sless {} -o json is not JSON ({e}): {text}", args.join(" "))
        })
    }
}

fn write(dir: &Path, files: &[(&str, &str)]) {
    std::fs::create_dir_all(dir).unwrap();
    for (name, content) in files {
        std::fs::write(dir.join(name), content).unwrap();
    }
}

const HANDLER_V1: &str = "def handle(event):\n    return {\"v\": 1}\n";
const HANDLER_V2: &str = "def handle(event):\n    return {\"v\": 2}\n";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_user_deploys_invokes_diffs_and_rolls_back_with_the_command_line_only() {
    let root = sless_testkit::scratch_dir("cli");
    let config = root.join("config");
    let data = root.join("data");
    let (proc, _) = start_dev_configured(
        &data,
        "log",
        &[],
        &[("XDG_CONFIG_HOME", config.to_str().unwrap())],
    )
    .await;
    let user = User {
        config: config.clone(),
    };
    // `sless dev` wrote the profile, readable by its owner only.
    let profile = config.join("sless/config.toml");
    let mode = std::fs::metadata(&profile).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600, "{}", profile.display());

    let app = root.join("app");
    write(
        &app,
        &[
            ("handler.py", HANDLER_V1),
            (
                "sless.toml",
                "name = \"app\"\nmax_instances = 3\nconcurrency = 5\n",
            ),
        ],
    );
    let (stdout, _) = user.expect(&["deploy", app.to_str().unwrap()], 0);
    assert!(
        stdout.contains("queued") && stdout.contains("Ready"),
        "{stdout}"
    );
    let answer = user.ok(&["invoke", "app"]);
    assert_eq!(answer.trim(), r#"{"v": 1}"#);
    // The scaling settings of sless.toml, shown by `get`.
    let shown = user.ok(&["get", "app"]);
    for line in [
        "instances:      1 (min 0, max 3)",
        "concurrency:    5 calls at once per instance",
    ] {
        assert!(shown.contains(line), "{line:?} in:\n{shown}");
    }
    let doc = user.json(&["get", "app"]);
    assert_eq!(
        (
            &doc["min_instances"],
            &doc["max_instances"],
            &doc["concurrency"]
        ),
        (
            &serde_json::json!(0),
            &serde_json::json!(3),
            &serde_json::json!(5)
        ),
        "{doc}"
    );

    // The same directory again: unchanged (its settings are the
    // function's: none is sent), no version added.
    let again = user.json(&["deploy", app.to_str().unwrap()]);
    assert_eq!(again["unchanged"], true, "{again}");
    assert_eq!(again["version"], 1);
    let versions = user.json(&["versions", "app"]);
    assert_eq!(versions["items"].as_array().unwrap().len(), 1, "{versions}");
    // A flag wins over sless.toml.
    user.ok(&["deploy", app.to_str().unwrap(), "--max-instances", "4"]);
    assert_eq!(user.json(&["get", "app"])["max_instances"], 4);

    // A change: version 2, then the diff between them, and a rollback.
    write(&app, &[("handler.py", HANDLER_V2)]);
    let deployed = user.json(&["deploy", app.to_str().unwrap()]);
    assert_eq!(
        (deployed["version"].as_u64(), deployed["phase"].as_str()),
        (Some(2), Some("Ready"))
    );
    assert_eq!(user.ok(&["invoke", "app"]).trim(), r#"{"v": 2}"#);
    // Version 2's build log: plain, as JSON, and followed after the build
    // ended (every line, then the end).
    let log = user.ok(&["build-log", "app", "--version", "2"]);
    assert!(
        log.starts_with("sless: unpacked ") && log.ends_with("sless: build complete\n"),
        "{log}"
    );
    let doc = user.json(&["build-log", "app", "--version", "2"]);
    assert_eq!(doc["log"].as_str(), Some(log.as_str()), "{doc}");
    let followed = user.ok(&[
        "build-log",
        "app",
        "--version",
        "2",
        "--follow",
        "-o",
        "json",
    ]);
    let records: Vec<serde_json::Value> = followed
        .lines()
        .map(|l| serde_json::from_str(l).unwrap())
        .collect();
    let (end, lines) = records.split_last().expect("records");
    assert_eq!(end["end"], "succeeded", "{followed}");
    let texts: Vec<&str> = lines.iter().map(|r| r["line"].as_str().unwrap()).collect();
    assert_eq!(texts, log.lines().collect::<Vec<_>>());
    let diff = user.ok(&["diff", "app", "1", "2"]);
    assert!(
        diff.contains("-    return {\"v\": 1}") && diff.contains("+    return {\"v\": 2}"),
        "{diff}"
    );
    assert!(!diff.contains('\x1b'), "no colours when piped: {diff}");
    user.ok(&["rollback", "app", "1"]);
    assert_eq!(user.ok(&["invoke", "app"]).trim(), r#"{"v": 1}"#);
    let source = user.ok(&["source", "app", "--version", "2", "handler.py"]);
    assert_eq!(source, HANDLER_V2);

    // Every reading command has a JSON form.
    for args in [
        &["ls"][..],
        &["get", "app"],
        &["versions", "app"],
        &["source", "app"],
        &["diff", "app", "1", "2"],
        &["events", "--function", "app"],
        &["invocations", "app"],
        &["trigger", "ls"],
        &["invoke", "app"],
    ] {
        user.json(args);
    }

    // `invocations --follow` shows a call made after it started.
    let mut follower = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .env("XDG_CONFIG_HOME", &config)
        .args([
            "invocations",
            "app",
            "--follow",
            "-o",
            "json",
            "--since",
            "0s",
        ])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = follower.stdout.take().unwrap();
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        use std::io::BufRead;
        for line in std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
        {
            if tx.send(line).is_err() {
                return;
            }
        }
    });
    // The follower counts calls from when it has started, which a loaded
    // machine may take longer to do than the first call: calls are made
    // until one shows, each after the one before was answered.
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    let line = loop {
        user.ok(&["invoke", "app", "--path", "/after"]);
        match rx.recv_timeout(std::time::Duration::from_secs(2)) {
            Ok(line) => break line,
            Err(_) if std::time::Instant::now() < deadline => continue,
            Err(e) => panic!("invocations --follow printed no call within 30 s: {e}"),
        }
    };
    follower.kill().ok();
    follower.wait().ok();
    let record: serde_json::Value = serde_json::from_str(&line).unwrap();
    assert_eq!(
        (record["function"].as_str(), record["status"].as_u64()),
        (Some("app"), Some(200)),
        "{line}"
    );

    // A job runs and exits with its status.
    let job = user.json(&["job", "run", "app", "--input", "{\"x\": 1}", "--wait"]);
    assert_eq!(job["status"], "Succeeded", "{job}");

    // Errors: not found, a refused token, no server.
    let (_, stderr) = user.expect(&["get", "missing"], 4);
    assert!(
        stderr.starts_with("error: ") && stderr.contains("missing"),
        "{stderr}"
    );
    let (_, stderr) = user.expect(&["ls", "--token", "not.a.token"], 2);
    assert!(stderr.contains("token"), "{stderr}");
    let wrong = sless_api::issue_hs256(
        b"some-other-secret-0123456789abcdef",
        "dev",
        std::time::Duration::from_secs(60),
    );
    let (_, stderr) = user.expect(&["ls", "--token", &wrong], 3);
    assert!(stderr.contains("refused the token"), "{stderr}");
    assert_eq!(stderr.lines().count(), 1, "one line: {stderr}");
    let (_, stderr) = user.expect(&["ls", "--endpoint", "http://127.0.0.1:9"], 6);
    assert!(
        stderr.contains("http://127.0.0.1:9") && stderr.contains("sless dev"),
        "{stderr}"
    );
    let (_, stderr) = user.expect(&["ls", "--profile", "nope"], 2);
    assert!(stderr.contains("nope"), "{stderr}");

    user.ok(&["rm", "app"]);
    user.expect(&["get", "app"], 4);
    stop_dev(proc, &data).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_build_that_fails_exits_1_with_pips_error_and_a_directory_that_cannot_be_packed_sends_nothing()
 {
    let root = sless_testkit::scratch_dir("cli-fail");
    let config = root.join("config");
    let data = root.join("data");
    let (proc, _) = start_dev_configured(
        &data,
        "log",
        &[],
        &[("XDG_CONFIG_HOME", config.to_str().unwrap())],
    )
    .await;
    let user = User { config };

    let broken = root.join("broken");
    write(
        &broken,
        &[
            ("handler.py", HANDLER_V1),
            ("requirements.txt", "this is not a requirement ===\n"),
        ],
    );
    let (_, stderr) = user.expect(&["deploy", broken.to_str().unwrap()], 1);
    assert!(
        stderr.contains("the build of broken version 1 failed"),
        "{stderr}"
    );
    assert!(
        stderr.to_lowercase().contains("requirement"),
        "pip's error: {stderr}"
    );

    // The whole log stays, for the command and for its follower.
    let log = user.ok(&["build-log", "broken"]);
    assert!(
        log.to_lowercase().contains("requirement")
            && log.contains("sless: pip install failed (exit "),
        "{log}"
    );
    let (followed, stderr) = user.expect(&["build-log", "broken", "--follow"], 1);
    assert_eq!(followed, log, "the followed log is the stored one");
    assert!(
        stderr.contains("the build of broken version 1 failed"),
        "{stderr}"
    );

    // Scaling settings the domain refuses: one line naming the flag (or
    // the key), exit 2, and nothing sent.
    let scaled = root.join("scaled");
    write(&scaled, &[("handler.py", HANDLER_V1)]);
    let dir = scaled.to_str().unwrap();
    type Case<'a> = (&'a [&'a str], Option<&'a str>, &'a str);
    let cases: &[Case] = &[
        (
            &["--min-instances", "5", "--max-instances", "2"],
            None,
            "--min-instances: min_instances (5) must not be above its max_instances, 2",
        ),
        (&["--concurrency", "0"], None, "--concurrency: concurrency"),
        (
            &["--max-instances", "101"],
            None,
            "--max-instances: max_instances must be between 1 and 100",
        ),
        (
            &[],
            Some("max_instances = 0\n"),
            "max_instances in sless.toml: ",
        ),
    ];
    for (flags, manifest, said) in cases {
        let _ = std::fs::remove_file(scaled.join("sless.toml"));
        if let Some(text) = manifest {
            write(&scaled, &[("sless.toml", text)]);
        }
        let mut args = vec!["deploy", dir];
        args.extend(*flags);
        let (_, stderr) = user.expect(&args, 2);
        assert!(
            stderr.starts_with(&format!("error: {said}")) && stderr.lines().count() == 1,
            "{flags:?} {manifest:?}: {stderr}"
        );
        user.expect(&["get", "scaled"], 4);
    }

    // A symlink out of the tree: refused before anything is sent.
    let outside = root.join("secret.txt");
    std::fs::write(&outside, "secret").unwrap();
    let leaky = root.join("leaky");
    write(&leaky, &[("handler.py", HANDLER_V1)]);
    std::os::unix::fs::symlink(&outside, leaky.join("secret.txt")).unwrap();
    let (_, stderr) = user.expect(&["deploy", leaky.to_str().unwrap()], 2);
    assert!(stderr.contains("secret.txt"), "{stderr}");
    user.expect(&["get", "leaky"], 4);
    stop_dev(proc, &data).await;
}

/// A package whose install prints one line, waits two seconds, and prints
/// another: a build that is still running when its first line is written.
const SLOW_PACKAGE: &str = r#"{
  "name": "slow",
  "version": "1.0.0",
  "private": true,
  "scripts": {
    "postinstall": "node -e \"console.log('slow: first'); setTimeout(() => console.log('slow: second'), 2000)\""
  }
}
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deploy_prints_each_build_log_line_while_the_build_runs() {
    let root = sless_testkit::scratch_dir("cli-live");
    let config = root.join("config");
    let data = root.join("data");
    let (proc, _) = start_dev_configured(
        &data,
        "log",
        &[],
        &[("XDG_CONFIG_HOME", config.to_str().unwrap())],
    )
    .await;
    let app = root.join("slow");
    write(
        &app,
        &[
            (
                "handler.js",
                "exports.handle = async () => ({ ok: true });\n",
            ),
            ("package.json", SLOW_PACKAGE),
        ],
    );
    let mut deploy = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .env("XDG_CONFIG_HOME", &config)
        .args(["deploy", app.to_str().unwrap()])
        .stdout(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    let stdout = deploy.stdout.take().unwrap();
    let reader = std::thread::spawn(move || {
        use std::io::BufRead;
        std::io::BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .map(|line| (std::time::Instant::now(), line))
            .collect::<Vec<_>>()
    });
    let status = deploy.wait().unwrap();
    let lines = reader.join().unwrap();
    let shown: Vec<&str> = lines.iter().map(|(_, l)| l.as_str()).collect();
    assert!(status.success(), "{shown:#?}");
    let at = |text: &str| {
        lines
            .iter()
            .find(|(_, l)| l.starts_with("  | ") && l.ends_with(text))
            .map(|(t, _)| *t)
            .unwrap_or_else(|| panic!("{text:?} is shown: {shown:#?}"))
    };
    let (first, second) = (at("slow: first"), at("slow: second"));
    assert!(
        second.duration_since(first) >= std::time::Duration::from_millis(1500),
        "the first line came {:?} before the second, not as the build wrote it: {shown:#?}",
        second.duration_since(first)
    );
    stop_dev(proc, &data).await;
}
