//! Helpers shared by the end-to-end and fault test binaries: the real
//! `sless` binary as a child process, zips, and an HTTP client of the API.
//! Each binary uses a different part of it.
#![allow(dead_code)]

use std::io::Write;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

pub fn sless() -> Command {
    Command::new(env!("CARGO_BIN_EXE_sless"))
}

/// A child process that is killed (SIGKILL) if the test ends early.
pub struct Proc {
    pub child: Child,
}

impl Proc {
    pub fn spawn(mut cmd: Command, log: &Path) -> Proc {
        let out = std::fs::File::create(log).unwrap();
        cmd.stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        Proc {
            child: cmd.spawn().expect("starting sless"),
        }
    }

    pub fn pid(&self) -> i32 {
        self.child.id() as i32
    }

    pub fn signal(&self, sig: i32) {
        // SAFETY: kill(2) on our own child's pid.
        unsafe { libc::kill(self.pid(), sig) };
    }

    /// Waits for the process to exit, up to `deadline`.
    pub async fn wait_exit(&mut self, deadline: Duration) -> std::process::ExitStatus {
        sless_testkit::eventually("the process to exit", deadline, || {
            let status = self.child.try_wait().unwrap();
            async move { status }
        })
        .await
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Processes whose command line mentions `needle` (e.g. a data directory).
pub fn processes_mentioning(needle: &str) -> Vec<(u32, String)> {
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let Ok(pid) = entry.file_name().to_string_lossy().parse::<u32>() else {
            continue;
        };
        if pid == std::process::id() {
            continue;
        }
        let Ok(raw) = std::fs::read(entry.path().join("cmdline")) else {
            continue;
        };
        let cmdline = String::from_utf8_lossy(&raw).replace('\0', " ");
        // A zombie has an empty command line and has already exited.
        if cmdline.contains(needle) {
            found.push((pid, cmdline));
        }
    }
    found
}

/// Zips the files of a directory (not recursing), as a user would.
pub fn zip_dir(dir: &Path) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    let mut entries: Vec<_> = std::fs::read_dir(dir)
        .unwrap()
        .flatten()
        .filter(|e| e.path().is_file())
        .collect();
    entries.sort_by_key(|e| e.file_name());
    for e in entries {
        let name = e.file_name().to_string_lossy().into_owned();
        if name.ends_with(".md") {
            continue;
        }
        w.start_file(name, zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(&std::fs::read(e.path()).unwrap()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

pub fn zip_files(files: &[(&str, &str)]) -> Vec<u8> {
    let mut w = zip::ZipWriter::new(std::io::Cursor::new(Vec::new()));
    for (name, content) in files {
        w.start_file(*name, zip::write::SimpleFileOptions::default())
            .unwrap();
        w.write_all(content.as_bytes()).unwrap();
    }
    w.finish().unwrap().into_inner()
}

/// A client of one sless instance.
#[derive(Clone)]
pub struct Client {
    pub url: String,
    pub token: String,
    pub namespace: String,
    pub http: reqwest::Client,
}

impl Client {
    pub fn v1(&self, path: &str) -> String {
        format!("{}/v1/namespaces/{}{path}", self.url, self.namespace)
    }

    pub async fn create(&self, body: serde_json::Value) -> reqwest::Response {
        self.http
            .post(self.v1("/functions"))
            .bearer_auth(&self.token)
            .json(&body)
            .send()
            .await
            .unwrap()
    }

    pub async fn upload(&self, name: &str, zip: Vec<u8>) -> reqwest::Response {
        self.http
            .post(self.v1(&format!("/functions/{name}/upload")))
            .bearer_auth(&self.token)
            .header("content-type", "application/zip")
            .body(zip)
            .send()
            .await
            .unwrap()
    }

    /// The functions of this client's namespace, as `token` sees them.
    pub async fn list_as(&self, token: &str) -> reqwest::Response {
        self.http
            .get(self.v1("/functions"))
            .bearer_auth(token)
            .send()
            .await
            .unwrap()
    }

    pub async fn function(&self, name: &str) -> serde_json::Value {
        let res = self
            .http
            .get(self.v1(&format!("/functions/{name}")))
            .bearer_auth(&self.token)
            .send()
            .await
            .unwrap();
        res.json().await.unwrap()
    }

    /// Waits until the function is Ready (panics if it fails or the deadline passes).
    pub async fn wait_ready(&self, name: &str, deadline: Duration) -> serde_json::Value {
        sless_testkit::eventually(&format!("{name} to be Ready"), deadline, || async {
            let f = self.function(name).await;
            assert_ne!(f["phase"], "Failed", "{f}");
            (f["phase"] == "Ready").then_some(f)
        })
        .await
    }
}
