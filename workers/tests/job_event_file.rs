//! The runtime wrappers in job mode read the event from the file
//! `SLESS_JOB_EVENT_FILE` names (how both drivers hand it over), and exit
//! 2 naming the variable when the file is missing or not JSON. Python
//! (`python3`, or `SLESS_PYTHON`) and Node.js (`node`) are required; the Go
//! wrapper is built with `runtimes/go1.23/sless-build` when a toolchain is
//! found (`SLESS_GO`, else `go` on `PATH`), as the local driver's tests do.

use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

use serde_json::{Value, json};

fn runtimes() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../runtimes")
}

/// The Go toolchain, when there is one.
fn go() -> Option<PathBuf> {
    let go = std::env::var_os("SLESS_GO")
        .map(PathBuf::from)
        .unwrap_or_else(|| "go".into());
    let ok = Command::new(&go)
        .arg("version")
        .output()
        .is_ok_and(|o| o.status.success());
    ok.then_some(go)
}

/// A wrapper ready to run one runtime's entrypoint, which returns its
/// event's `json`.
struct Wrapper {
    runtime: &'static str,
    command: Vec<String>,
    code_dir: PathBuf,
    entrypoint: &'static str,
}

fn wrappers(dir: &Path) -> Vec<Wrapper> {
    let code = |name: &str, file: &str, text: &str| {
        let d = dir.join(name);
        std::fs::create_dir_all(&d).unwrap();
        std::fs::write(d.join(file), text).unwrap();
        d
    };
    let python = std::env::var("SLESS_PYTHON").unwrap_or_else(|_| "python3".into());
    let mut all = vec![
        Wrapper {
            runtime: "python3.11",
            command: vec![
                python,
                runtimes()
                    .join("python3.11/sless_runtime.py")
                    .display()
                    .to_string(),
            ],
            code_dir: code(
                "py",
                "handler.py",
                "def handle(event):\n    return event['json']\n",
            ),
            entrypoint: "handler.handle",
        },
        Wrapper {
            runtime: "nodejs20",
            command: vec![
                "node".into(),
                runtimes()
                    .join("nodejs20/sless_runtime.cjs")
                    .display()
                    .to_string(),
            ],
            code_dir: code(
                "node",
                "handler.js",
                "exports.handle = (event) => event.json;\n",
            ),
            entrypoint: "handler.handle",
        },
    ];
    match go() {
        Some(go) => {
            let code_dir = code(
                "go",
                "handler.go",
                "package handler\n\nfunc Handle(e map[string]any) any {\n\treturn e[\"json\"]\n}\n",
            );
            let binary = dir.join("go-function");
            let go_dir = go.parent().filter(|p| !p.as_os_str().is_empty());
            let path = match go_dir {
                Some(d) => format!(
                    "{}:{}",
                    d.display(),
                    std::env::var("PATH").unwrap_or_default()
                ),
                None => std::env::var("PATH").unwrap_or_default(),
            };
            let cache = std::env::var_os("GOCACHE")
                .map(PathBuf::from)
                .unwrap_or_else(|| std::env::temp_dir().join("sless-go-test-cache"));
            let built = Command::new("sh")
                .arg(runtimes().join("go1.23/sless-build"))
                .arg(&binary)
                .env("SLESS_CODE_DIR", &code_dir)
                .env("SLESS_GO_WRAPPER", runtimes().join("go1.23/main.go"))
                .env("PATH", path)
                .env("GOTOOLCHAIN", "local")
                .env("GOFLAGS", "-mod=mod")
                .env("CGO_ENABLED", "0")
                .env("GOPATH", dir.join("gopath"))
                .env("GOCACHE", cache)
                .output()
                .unwrap();
            assert!(
                built.status.success(),
                "sless-build: {}",
                String::from_utf8_lossy(&built.stderr)
            );
            all.push(Wrapper {
                runtime: "go1.23",
                command: vec![binary.display().to_string()],
                code_dir,
                entrypoint: "handler.Handle",
            });
        }
        None => assert!(
            std::env::var_os("SLESS_GO").is_none(),
            "SLESS_GO is set but does not run"
        ),
    }
    all
}

/// Runs the wrapper as a cluster's Job does: `SLESS_JOB=1`, the event in
/// the file `event_file`, and (to show it is not read) `stdin` on stdin.
fn run(w: &Wrapper, event_file: &Path, stdin: &str) -> Output {
    use std::io::Write as _;
    let mut child = Command::new(&w.command[0])
        .args(&w.command[1..])
        .env_clear()
        .env("PATH", std::env::var("PATH").unwrap_or_default())
        .env("HOME", std::env::temp_dir())
        .env("SLESS_JOB", "1")
        .env("SLESS_CODE_DIR", &w.code_dir)
        .env("SLESS_ENTRYPOINT", w.entrypoint)
        .env("SLESS_JOB_EVENT_FILE", event_file)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut input = child.stdin.take().unwrap();
    // A wrapper that reads the file never reads stdin: a closed pipe is fine.
    let _ = input.write_all(stdin.as_bytes());
    drop(input);
    child.wait_with_output().unwrap()
}

fn last_line(out: &Output) -> Value {
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text
        .trim_end()
        .lines()
        .last()
        .unwrap_or_default()
        .to_owned();
    serde_json::from_str(&line).unwrap_or_else(|e| panic!("{line:?}: {e}"))
}

#[test]
fn every_wrapper_reads_its_event_from_the_file_and_names_a_bad_one() {
    let dir = tempfile::tempdir().unwrap();
    let all = wrappers(dir.path());
    // Larger than any one environment variable can be (128 KiB on Linux).
    let input = json!({"n": "$(HOME)", "big": "x".repeat(200_000)});
    let event = json!({"method": "JOB", "path": "/", "query": {}, "headers": {},
                       "body": input.to_string(), "json": input});
    let file = dir.path().join("event.json");
    std::fs::write(&file, event.to_string()).unwrap();
    let missing = dir.path().join("nowhere.json");
    let garbled = dir.path().join("garbled.json");
    std::fs::write(&garbled, "{not json").unwrap();
    let stdin = json!({"method": "JOB", "json": "from stdin"}).to_string();

    for w in &all {
        let out = run(w, &file, &stdin);
        assert_eq!(
            out.status.code(),
            Some(0),
            "{}: {}",
            w.runtime,
            String::from_utf8_lossy(&out.stderr)
        );
        assert_eq!(last_line(&out), input, "{}", w.runtime);

        for (bad, what) in [(&missing, "cannot be read"), (&garbled, "is not JSON")] {
            let out = run(w, bad, &stdin);
            let stderr = String::from_utf8_lossy(&out.stderr);
            assert_eq!(out.status.code(), Some(2), "{}: {stderr}", w.runtime);
            assert!(
                stderr.contains("SLESS_JOB_EVENT_FILE"),
                "{}: {stderr}",
                w.runtime
            );
            assert!(
                stderr.contains(&bad.display().to_string()),
                "{}: {stderr}",
                w.runtime
            );
            assert!(stderr.contains(what), "{}: {stderr}", w.runtime);
        }
    }
}
