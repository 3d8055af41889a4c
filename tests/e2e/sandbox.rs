//! The sandbox on a real `sless dev`, as a hostile tenant meets it: a
//! second user's function tries to read the data directory, the secrets,
//! the first user's token and code, the machine's secrets; to write outside
//! `/tmp`, fill `/tmp`, reach the embedded PostgreSQL and S3, signal and
//! trace the first user's function, fork without bound. Every attempt
//! fails, and the first user's function keeps serving. A function past its
//! `memory_mb` is killed and says so. Without bubblewrap `sless dev`
//! refuses to start; with `--unsafe-no-sandbox` it serves one user only.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};

use crate::dev::{start_dev, stop_dev};
use crate::{Client, sless, zip_files};

/// Tries everything a tenant should not be able to do; says how each went
/// (`ok:...` or `refused:<exception>:...`).
const HOSTILE: &str = r#"
import ctypes, os, socket, subprocess, urllib.request

def attempt(f):
    try:
        return 'ok:' + str(f())[:300]
    except BaseException as e:
        return 'refused:' + type(e).__name__ + ':' + str(e)[:300]

def fill_tmp():
    with open('/tmp/fill', 'wb') as f:
        for _ in range(400):
            f.write(b'x' * (1 << 20))
    return 'wrote 400 MiB'

def tcp(port):
    socket.create_connection(('127.0.0.1', port), timeout=2).close()
    return 'connected'

def unix(path):
    s = socket.socket(socket.AF_UNIX)
    s.connect(path)
    return 'connected'

def fork_bomb():
    kids = []
    try:
        for _ in range(5000):
            pid = os.fork()
            if pid == 0:
                os.execv('/bin/sleep', ['sleep', '30'])
            kids.append(pid)
    except OSError:
        pass
    for k in kids:
        os.kill(k, 9)
    for k in kids:
        os.waitpid(k, 0)
    return len(kids)

def ptrace(pid):
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.ptrace(16, pid, 0, 0) != 0:  # PTRACE_ATTACH
        raise OSError(ctypes.get_errno(), os.strerror(ctypes.get_errno()))
    return 'attached'

def handle(event):
    if event['method'] == 'GET':
        return {'uid': os.getuid()}
    t = event['json']
    d = t['data_dir']
    out = {'uid': os.getuid()}
    out['list_data_dir'] = attempt(lambda: os.listdir(d))
    out['secrets'] = attempt(lambda: open(d + '/secrets.json').read())
    out['dev_json'] = attempt(lambda: open(d + '/dev.json').read())
    out['pg_password'] = attempt(lambda: open(d + '/postgres/pg-password').read())
    out['victim_build'] = attempt(lambda: os.listdir(t['victim_build']))
    out['victim_code_by_path'] = attempt(lambda: open(t['victim_build'] + '/code/handler.py').read())
    out['shadow'] = attempt(lambda: open('/etc/shadow').read())
    out['root'] = attempt(lambda: sorted(os.listdir('/root')))
    out['root_cargo'] = attempt(lambda: os.listdir('/root/.cargo'))
    out['home'] = attempt(lambda: os.listdir('/home'))
    out['write_code'] = attempt(lambda: open('/sless/function/code/x', 'w').write('x'))
    out['write_root'] = attempt(lambda: open('/x', 'w').write('x'))
    out['write_usr'] = attempt(lambda: open('/usr/x', 'w').write('x'))
    out['write_etc'] = attempt(lambda: open('/etc/passwd', 'a').write('x'))
    out['fill_tmp'] = attempt(fill_tmp)
    try:
        os.remove('/tmp/fill')
    except OSError:
        pass
    out['pg_tcp'] = attempt(lambda: tcp(t['pg_port']))
    out['pg_socket'] = attempt(lambda: unix(t['pg_socket']))
    out['s3'] = attempt(lambda: urllib.request.urlopen(t['s3'] + '/sless?list-type=2', timeout=5).read())
    out['s3_tcp'] = attempt(lambda: tcp(t['s3_port']))
    out['api_tcp'] = attempt(lambda: tcp(t['api_port']))
    out['fn_origin_tcp'] = attempt(lambda: tcp(t['fn_port']))
    out['victim_tcp'] = attempt(lambda: tcp(t['victim_port']))
    out['env'] = sorted(os.environ)
    out['kill_victim'] = attempt(lambda: os.kill(t['victim_pid'], 9))
    out['ptrace_victim'] = attempt(lambda: ptrace(t['victim_pid']))
    out['proc_1_environ'] = attempt(lambda: open('/proc/1/environ', 'rb').read())
    out['userns'] = attempt(lambda: subprocess.run(['unshare', '--user', 'true'], check=True, capture_output=True))
    out['forked'] = fork_bomb()
    return out
"#;

const VICTIM: &str =
    "import os\n\ndef handle(event):\n    return {'uid': os.getuid(), 'pid': os.getpid()}\n";

/// Deploys `source` as `name` (python3.11) and waits until it is Ready.
async fn deploy(c: &Client, name: &str, source: &str, memory_mb: u32) {
    let res = c
        .create(json!({
            "name": name, "runtime": "python3.11", "entrypoint": "handler.handle",
            "memory_mb": memory_mb,
        }))
        .await;
    assert_eq!(res.status(), 201, "{}", res.text().await.unwrap());
    let res = c.upload(name, zip_files(&[("handler.py", source)])).await;
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    c.wait_ready(name, Duration::from_secs(120)).await;
}

async fn invoke(c: &Client, name: &str, body: Option<&Value>) -> (u16, Value) {
    let url = format!("{}/fn/{}/{name}", c.fn_url, c.namespace);
    let req = match body {
        Some(b) => c.http.post(&url).json(b),
        None => c.http.get(&url),
    };
    let res = req.send().await.unwrap();
    let status = res.status().as_u16();
    (status, res.json().await.unwrap_or(Value::Null))
}

/// Another user of the instance, with a token of their own.
pub(crate) fn tenant(c: &Client, dir: &Path, sub: &str) -> Client {
    let out = sless()
        .args(["token", "--data-dir", dir.to_str().unwrap(), "--sub", sub])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    Client {
        token: String::from_utf8(out.stdout).unwrap().trim().to_owned(),
        namespace: sless_domain::Namespace::for_subject(sub).to_string(),
        ..c.clone()
    }
}

/// The host pid of the process serving `function` (`{ns}/{name}`), as root
/// sees it: the one with that function's build mounted at
/// `/sless/function` (started for it, or from the warm pool).
fn pid_serving(function: &str) -> Option<u32> {
    let build = format!("/builds/{function}/");
    std::fs::read_dir("/proc").ok()?.flatten().find_map(|e| {
        let pid: u32 = e.file_name().to_string_lossy().parse().ok()?;
        let cmdline = std::fs::read(e.path().join("cmdline")).ok()?;
        let program = cmdline.split(|b| *b == 0).next()?;
        let wrapper = cmdline.windows(13).any(|w| w == b"sless_runtime");
        if !wrapper || program.ends_with(b"bwrap") || program.ends_with(b"setpriv") {
            return None;
        }
        let mounts = std::fs::read_to_string(e.path().join("mountinfo")).ok()?;
        mounts
            .lines()
            .map(|l| l.split(' ').collect::<Vec<_>>())
            .any(|f| {
                f.get(4) == Some(&"/sless/function") && f.get(3).is_some_and(|r| r.contains(&build))
            })
            .then_some(pid)
    })
}

fn refused(results: &Value, what: &str) {
    let got = results[what].as_str().unwrap_or_default();
    assert!(got.starts_with("refused:"), "{what} was not refused: {got}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hostile_tenant_reaches_nothing_of_the_platform_or_of_another_tenant() {
    // A data directory sless makes itself: private to root, as `mktemp -d`.
    let dir = sless_testkit::scratch_dir("hostile").join("data");
    let (proc, a) = start_dev(&dir, "log").await;
    let mode = std::fs::metadata(&dir).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the data directory is private");

    deploy(&a, "victim", VICTIM, 128).await;
    let b = tenant(&a, &dir, "mallory");
    deploy(&b, "grabber", HOSTILE, 256).await;

    let (status, victim) = invoke(&a, "victim", None).await;
    assert_eq!(status, 200, "{victim}");
    let victim_pid = pid_serving(&format!("{}/victim", a.namespace)).expect("the victim runs");
    let builds = dir.join("local/builds").join(&a.namespace).join("victim");
    let victim_build = std::fs::read_dir(&builds)
        .unwrap()
        .flatten()
        .next()
        .unwrap()
        .path();
    let pid_file = std::fs::read_to_string(dir.join("postgres/pgdata/postmaster.pid")).unwrap();
    let lines: Vec<&str> = pid_file.lines().collect();
    let pg_port: u16 = lines[3].trim().parse().unwrap();
    let s3_port = s3_port(&dir.with_extension("log"));
    let victim_port = listening_port(victim_pid).expect("the victim's socket");

    let (status, got) = invoke(
        &b,
        "grabber",
        Some(&json!({
            "data_dir": dir,
            "victim_build": victim_build,
            "victim_pid": victim_pid,
            "pg_port": pg_port,
            "pg_socket": format!("{}/.s.PGSQL.{pg_port}", lines[4].trim()),
            "s3": format!("http://127.0.0.1:{s3_port}"),
            "s3_port": s3_port,
            "api_port": port_of(&a.url),
            "fn_port": port_of(&a.fn_url),
            "victim_port": victim_port,
        })),
    )
    .await;
    assert_eq!(status, 200, "{got}");
    println!("{}", serde_json::to_string_pretty(&got).unwrap());

    // Its own unprivileged user, not the other tenant's.
    let (uid_a, uid_b) = (
        victim["uid"].as_u64().unwrap(),
        got["uid"].as_u64().unwrap(),
    );
    assert!(uid_a >= 1000 && uid_b >= 1000, "{uid_a} {uid_b}");
    assert_ne!(uid_a, uid_b, "each namespace runs as a user of its own");

    for what in [
        "list_data_dir",
        "secrets",
        "dev_json",
        "pg_password",
        "victim_build",
        "victim_code_by_path",
        "shadow",
        "root_cargo",
        "home",
        "write_code",
        "write_root",
        "write_usr",
        "write_etc",
        "fill_tmp",
        "pg_tcp",
        "pg_socket",
        "s3",
        "s3_tcp",
        "api_tcp",
        "fn_origin_tcp",
        "victim_tcp",
        "kill_victim",
        "ptrace_victim",
        "proc_1_environ",
        "userns",
    ] {
        refused(&got, what);
    }
    let fill = got["fill_tmp"].as_str().unwrap();
    assert!(fill.contains("No space left"), "/tmp is bounded: {fill}");
    // In a network namespace of its own, nothing of the host's loopback is
    // there to connect to: not sless's ports, not another function.
    for what in ["s3", "s3_tcp", "api_tcp", "fn_origin_tcp", "victim_tcp"] {
        let got = got[what].as_str().unwrap();
        assert!(
            got.contains("Connection refused") || got.contains("ConnectionRefused"),
            "{what}: {got}"
        );
    }
    // /root shows at most where the interpreter is installed.
    let root = got["root"].as_str().unwrap();
    assert!(
        root.starts_with("refused:") || root == "ok:[]" || root == "ok:['.pyenv']",
        "{root}"
    );
    let forked = got["forked"].as_u64().unwrap();
    assert!(forked < 256, "the process limit held: {forked} forks");
    // Its environment holds its own variables and sless's documented ones.
    for name in got["env"].as_array().unwrap() {
        let name = name.as_str().unwrap();
        let documented = name.starts_with("SLESS_")
            || name.starts_with("PYTHON")
            || ["PATH", "HOME", "TMPDIR", "LANG", "LC_CTYPE", "PWD"].contains(&name);
        assert!(documented, "the function's environment has {name}");
    }

    // The first tenant's function kept serving, untouched.
    let (status, again) = invoke(&a, "victim", None).await;
    assert_eq!(status, 200, "{again}");
    assert_eq!(
        pid_serving(&format!("{}/victim", a.namespace)),
        Some(victim_pid),
        "the victim was not restarted"
    );
    // And so did the hostile one (its fork bomb and full /tmp cost it nothing
    // lasting).
    let (status, _) = invoke(&b, "grabber", None).await;
    assert_eq!(status, 200);
    stop_dev(proc, &dir).await;
}

/// The port of `url` (`http://127.0.0.1:PORT`).
fn port_of(url: &str) -> u16 {
    url.rsplit(':')
        .next()
        .unwrap()
        .trim_end_matches('/')
        .parse()
        .unwrap()
}

/// The TCP port the process `pid` listens on: its socket's inode, found in
/// the host's `/proc/net/tcp` (the socket is sless's, made in the host's
/// network namespace and handed to the process).
fn listening_port(pid: u32) -> Option<u16> {
    let inodes: Vec<String> = std::fs::read_dir(format!("/proc/{pid}/fd"))
        .ok()?
        .flatten()
        .filter_map(|e| {
            let link = std::fs::read_link(e.path()).ok()?;
            let link = link.to_string_lossy();
            Some(
                link.strip_prefix("socket:[")?
                    .trim_end_matches(']')
                    .to_owned(),
            )
        })
        .collect();
    let table = std::fs::read_to_string("/proc/net/tcp").ok()?;
    table.lines().skip(1).find_map(|line| {
        let f: Vec<&str> = line.split_whitespace().collect();
        let listening = f.get(3) == Some(&"0A");
        let ours = f.get(9).is_some_and(|i| inodes.iter().any(|n| n == i));
        let port = f.get(1)?.rsplit(':').next()?;
        (listening && ours).then(|| u16::from_str_radix(port, 16).ok())?
    })
}

/// Crashes on `/crash`; otherwise names the start of its process.
const FRAGILE: &str = "\
import os

START = os.urandom(8).hex()

def handle(event):
    if event['path'] == '/crash':
        os._exit(4)
    return {'victim': START}
";

/// Given a port, keeps trying to take it on 127.0.0.1 for 20 s (a
/// thread, so the call returns at once) and answers whatever connects
/// with `hijacked`.
const SQUATTER: &str = r#"
import socket, threading, time

def squat(port):
    deadline = time.time() + 20
    while time.time() < deadline:
        s = socket.socket()
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind(('127.0.0.1', port))
            s.listen(64)
        except OSError:
            s.close()
            time.sleep(0.001)
            continue
        s.settimeout(1)
        while time.time() < deadline:
            try:
                conn, _ = s.accept()
            except OSError:
                continue
            conn.recv(65536)
            body = b'{"hijacked": true}'
            head = 'HTTP/1.1 200 OK|content-type: application/json|content-length: %d|connection: close||' % len(body)
            conn.sendall(head.replace('|', chr(13) + chr(10)).encode() + body)
            conn.close()
        return

def handle(event):
    if event['method'] == 'POST':
        threading.Thread(target=squat, args=(event['json']['port'],), daemon=True).start()
        return {'squatting': event['json']['port']}
    return 'idle'
"#;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_squatter_never_receives_the_calls_of_a_function_that_crashed() {
    let dir = sless_testkit::scratch_dir("squat").join("data");
    let (proc, a) = start_dev(&dir, "log").await;
    deploy(&a, "victim", FRAGILE, 128).await;
    let b = tenant(&a, &dir, "mallory");
    deploy(&b, "squatter", SQUATTER, 128).await;

    let (status, first) = invoke(&a, "victim", None).await;
    assert_eq!(status, 200, "{first}");
    let pid = pid_serving(&format!("{}/victim", a.namespace)).expect("the victim runs");
    let port = listening_port(pid).expect("the victim's socket");

    // The squatter waits for the port, then the victim crashes.
    let (status, got) = invoke(&b, "squatter", Some(&json!({ "port": port }))).await;
    assert_eq!(status, 200, "{got}");
    let crash = format!("{}/fn/{}/victim/crash", a.fn_url, a.namespace);
    let res = a.http.get(&crash).send().await.unwrap();
    assert_eq!(res.status(), 502, "{}", res.text().await.unwrap());

    // Every later call reaches the victim, started again, never the squatter.
    let mut restarted = 0;
    for _ in 0..20 {
        let (status, got) = invoke(&a, "victim", None).await;
        assert_eq!(status, 200, "{got}");
        assert!(got.get("hijacked").is_none(), "a squatter answered: {got}");
        assert!(got["victim"].is_string(), "{got}");
        if got["victim"] != first["victim"] {
            restarted += 1;
        }
    }
    assert_eq!(
        restarted, 20,
        "the victim's new process answered every call"
    );
    stop_dev(proc, &dir).await;
}

/// The embedded S3 server's port, from what `sless dev` logged (the worst
/// case: a tenant who knows it).
fn s3_port(log: &Path) -> u16 {
    let text = std::fs::read_to_string(log).unwrap();
    let at = text
        .find("S3 server listening")
        .expect("the S3 server's line");
    let rest = &text[at..];
    let addr = rest.find("127.0.0.1:").expect("its address") + "127.0.0.1:".len();
    let digits: String = rest[addr..]
        .chars()
        .take_while(char::is_ascii_digit)
        .collect();
    digits.parse().unwrap()
}

const HOG: &str = "\
def handle(event):
    if event['query'].get('hog'):
        hoard = bytearray(400 << 20)
        hoard[::4096] = b'x' * len(hoard[::4096])
        return 'survived'
    return 'alive'
";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_past_its_memory_is_killed_says_so_and_serves_again() {
    let dir = sless_testkit::scratch_dir("oom").join("data");
    let (proc, c) = start_dev(&dir, "log").await;
    deploy(&c, "hog", HOG, 128).await;

    let url = format!("{}/fn/{}/hog", c.fn_url, c.namespace);
    let res = c.http.get(format!("{url}?hog=1")).send().await.unwrap();
    assert_eq!(res.status(), 502);
    let problem: Value = res.json().await.unwrap();
    assert_eq!(
        problem["type"], "https://sless.dev/problems/function-out-of-memory",
        "{problem}"
    );
    assert_eq!(problem["memory_mb"], 128, "{problem}");
    assert_eq!(problem["cause"], "oom", "{problem}");
    assert!(
        problem["detail"]
            .as_str()
            .unwrap()
            .contains("memory_mb of 128"),
        "{problem}"
    );

    // The invocation record and the function's last error say so.
    let record =
        sless_testkit::eventually("the call's record", Duration::from_secs(30), || async {
            c.invocations("hog")
                .await?
                .into_iter()
                .find(|r| r["status"] == 502)
        })
        .await;
    assert_eq!(record["error_kind"], "oom", "{record}");
    let f = sless_testkit::eventually(
        "the crash in last_error",
        Duration::from_secs(30),
        || async {
            let f = c.function("hog").await;
            f["last_error"]
                .as_str()
                .is_some_and(|e| e.contains("memory_mb of 128"))
                .then_some(f)
        },
    )
    .await;
    assert_eq!(f["phase"], "Ready", "{f}");

    // It was started again and answers.
    let answer =
        sless_testkit::eventually("hog to answer again", Duration::from_secs(60), || async {
            let res = c.http.get(&url).send().await.ok()?;
            res.status().is_success().then_some(())?;
            res.text().await.ok()
        })
        .await;
    assert_eq!(answer, "alive");
    stop_dev(proc, &dir).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sless_dev_refuses_to_start_without_the_sandbox_and_names_the_package() {
    let dir = sless_testkit::scratch_dir("no-bwrap").join("data");
    let out = sless()
        .args([
            "dev",
            "--data-dir",
            dir.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
        ])
        .env_remove("DATABASE_URL")
        .env_remove("S3_ENDPOINT")
        .env("SLESS_BWRAP", "/nonexistent/bwrap")
        .output()
        .unwrap();
    assert!(!out.status.success());
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(err.contains("install the package bubblewrap"), "{err}");
    assert!(err.contains("--unsafe-no-sandbox"), "{err}");
    assert!(!dir.join("dev.json").exists(), "it never served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_the_sandbox_sless_dev_warns_and_serves_one_user_only() {
    let dir = sless_testkit::scratch_dir("unsafe").join("data");
    let (proc, c) = crate::dev::start_dev_with(&dir, "log", &["--unsafe-no-sandbox"]).await;
    let log = std::fs::read_to_string(dir.with_extension("log")).unwrap();
    assert!(log.contains("WARNING: --unsafe-no-sandbox"), "{log}");
    assert_eq!(c.list_as(&c.token).await.status(), 200);
    let other = tenant(&c, &dir, "someone-else");
    let res = other.list_as(&other.token).await;
    assert_eq!(res.status(), 403);
    let problem: Value = res.json().await.unwrap();
    assert_eq!(
        problem["type"], "https://sless.dev/problems/sandbox-disabled",
        "{problem}"
    );
    stop_dev(proc, &dir).await;
}
