//! A real Kubernetes control plane for tests: etcd, kube-apiserver,
//! kube-controller-manager and kube-scheduler, built from the upstream
//! modules by `scripts/ensure-kubernetes`, started once per test process on
//! loopback with certificates made at start.
//!
//! The programs get `SIGKILL` when the thread that started them ends, which
//! is when the test process ends (normally, by a panic or by a signal); a
//! small shell that waits on a pipe from this process then removes their
//! directory. [`scratch_dir`](crate::scratch_dir) also removes directories
//! whose process is gone.

use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

use super::pki::Pki;

/// How long a start may take before the tests give up on it.
/// The range the API server allocates Services' cluster IPs from.
pub(crate) const SERVICE_RANGE: &str = "10.0.0.0/24";

const START_DEADLINE: Duration = Duration::from_secs(180);

/// The admission plugins a production API server runs, named so that a
/// default changing upstream cannot take one away from the tests; all but
/// TaintNodesByCondition, whose not-ready taint on a new node only the
/// node-lifecycle controller lifts, which a test node does not need.
const ADMISSION_PLUGINS: &str = "NamespaceLifecycle,LimitRanger,ServiceAccount,\
    NodeRestriction,PodSecurity,Priority,DefaultTolerationSeconds,\
    RuntimeClass,MutatingAdmissionWebhook,ValidatingAdmissionPolicy,ValidatingAdmissionWebhook,\
    ResourceQuota";

/// The controllers the tests need: what sless's objects depend on, and the
/// one that type-checks admission policies into their status. The
/// node-lifecycle controller is left out: a test node has no heartbeat to
/// keep (testkit's [`TestNode`](super::TestNode) plays a kubelet through the
/// API).
const CONTROLLERS: &str = "deployment-controller,replicaset-controller,job-controller,\
    cronjob-controller,namespace-controller,garbage-collector-controller,\
    serviceaccount-controller,serviceaccount-token-controller,\
    root-ca-certificate-publisher-controller,resourcequota-controller,\
    ttl-after-finished-controller,endpointslice-controller,disruption-controller,\
    pod-garbage-collector-controller,validatingadmissionpolicy-status-controller";

/// The control plane of this test process.
pub struct ControlPlane {
    /// `https://127.0.0.1:{port}`.
    url: String,
    dir: PathBuf,
    bin: PathBuf,
    kubeconfig: PathBuf,
    /// A kubeconfig of the node [`NODE_USER`](super::pki::NODE_USER).
    node_kubeconfig: PathBuf,
    ca_pem: String,
    admin_cert_pem: String,
    admin_key_pem: String,
    /// How long the start took.
    pub started_in: Duration,
}

static PLANE: OnceLock<Result<ControlPlane, String>> = OnceLock::new();

/// A control plane that stops when dropped ([`ControlPlane::start`]).
pub struct OwnedControlPlane {
    plane: ControlPlane,
    stop: Option<std::sync::mpsc::Sender<()>>,
    keeper: Option<std::thread::JoinHandle<()>>,
}

impl std::ops::Deref for OwnedControlPlane {
    type Target = ControlPlane;
    fn deref(&self) -> &ControlPlane {
        &self.plane
    }
}

impl Drop for OwnedControlPlane {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(keeper) = self.keeper.take() {
            let _ = keeper.join();
        }
    }
}

/// What a panic said.
pub(crate) fn panic_message(panic: Box<dyn std::any::Any + Send>) -> String {
    panic
        .downcast_ref::<String>()
        .cloned()
        .or_else(|| panic.downcast_ref::<&str>().map(|s| s.to_string()))
        .unwrap_or_default()
}

/// Starts the programs on a thread of their own, which holds them (they die
/// with it: PR_SET_PDEATHSIG) until `stop` says so or, without one, for the
/// rest of the process.
fn launch(
    stop: Option<std::sync::mpsc::Receiver<()>>,
) -> Result<(ControlPlane, std::thread::JoinHandle<()>), String> {
    let (tx, rx) = std::sync::mpsc::channel();
    let keeper = std::thread::Builder::new()
        .name("kube-control-plane".into())
        .spawn(move || match std::panic::catch_unwind(start) {
            Ok((plane, held)) => {
                tx.send(Ok(plane)).ok();
                match stop {
                    Some(stop) => {
                        let _ = stop.recv();
                        drop(held);
                    }
                    None => loop {
                        std::thread::park();
                    },
                }
            }
            Err(panic) => {
                tx.send(Err(panic_message(panic))).ok();
            }
        })
        .map_err(|e| format!("a thread for the control plane: {e}"))?;
    let plane = rx
        .recv()
        .unwrap_or_else(|_| Err("the control plane's thread ended".into()))?;
    Ok((plane, keeper))
}

impl ControlPlane {
    /// The control plane of this process, started on first use. Panics
    /// (with the tail of the failing program's log) when it cannot start,
    /// in every test that asks: it is started once.
    pub fn shared() -> &'static ControlPlane {
        let plane = PLANE.get_or_init(|| launch(None).map(|(plane, _)| plane));
        match plane {
            Ok(plane) => plane,
            Err(message) => panic!("starting the Kubernetes control plane: {message}"),
        }
    }

    /// A control plane of its own, stopped and its directory removed when
    /// it is dropped (a benchmark of starts uses it; tests share
    /// [`ControlPlane::shared`]).
    pub fn start() -> Result<OwnedControlPlane, String> {
        let (stop, stopped) = std::sync::mpsc::channel();
        let (plane, keeper) = launch(Some(stopped))?;
        Ok(OwnedControlPlane {
            plane,
            stop: Some(stop),
            keeper: Some(keeper),
        })
    }

    /// `https://127.0.0.1:{port}`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// An administrator's kubeconfig (`system:masters`).
    pub fn kubeconfig(&self) -> &Path {
        &self.kubeconfig
    }

    /// A kubeconfig of the kubelet of testkit's [`Cluster`](super::Cluster)
    /// (user `system:node:sless-node`).
    pub fn node_kubeconfig(&self) -> &Path {
        &self.node_kubeconfig
    }

    /// The file of the CA that signed the API server's certificate and every
    /// client's.
    pub fn ca_file(&self) -> PathBuf {
        self.dir.join("ca.crt")
    }

    /// The directory of the Kubernetes programs (`kubectl` among them).
    pub fn bin(&self) -> &Path {
        &self.bin
    }

    /// This control plane's scratch directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The CA that signed the API server's certificate, PEM.
    pub fn ca_pem(&self) -> &str {
        &self.ca_pem
    }

    /// A client configuration of the administrator.
    pub fn admin_config(&self) -> kube::Config {
        let mut config = self.config_without_identity();
        config.auth_info.client_certificate_data = Some(b64(&self.admin_cert_pem));
        config.auth_info.client_key_data = Some(b64(&self.admin_key_pem).into());
        config
    }

    /// A client configuration that authenticates with `token`.
    pub fn token_config(&self, token: &str) -> kube::Config {
        let mut config = self.config_without_identity();
        config.auth_info.token = Some(token.to_owned().into());
        config
    }

    fn config_without_identity(&self) -> kube::Config {
        let mut config = kube::Config::new(self.url.parse().expect("the API server's URL"));
        config.root_cert = Some(vec![pem_der(&self.ca_pem)]);
        config.default_namespace = "default".into();
        config
    }

    /// An administrator's client.
    pub fn admin(&self) -> kube::Client {
        kube::Client::try_from(self.admin_config()).expect("an admin client")
    }

    /// `kubectl` with the administrator's kubeconfig.
    pub fn kubectl(&self) -> Command {
        let mut cmd = Command::new(self.bin.join("kubectl"));
        cmd.env("KUBECONFIG", &self.kubeconfig)
            .env_remove("KUBERNETES_SERVICE_HOST");
        cmd
    }

    /// Runs `kubectl args` (with `stdin`), panicking with its output when it
    /// fails; returns its stdout.
    pub fn kubectl_ok(&self, args: &[&str], stdin: Option<&str>) -> String {
        let out = self.kubectl_run(args, stdin);
        assert!(
            out.status.success(),
            "kubectl {}: {}\n{}",
            args.join(" "),
            String::from_utf8_lossy(&out.stderr),
            String::from_utf8_lossy(&out.stdout)
        );
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Runs `kubectl args` (with `stdin`) and returns what it did.
    pub fn kubectl_run(&self, args: &[&str], stdin: Option<&str>) -> std::process::Output {
        use std::io::Write;
        let mut child = self
            .kubectl()
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running kubectl");
        let mut input = child.stdin.take().expect("kubectl's stdin");
        if let Some(text) = stdin {
            input
                .write_all(text.as_bytes())
                .expect("writing to kubectl");
        }
        drop(input);
        child.wait_with_output().expect("kubectl's output")
    }

    /// A namespace of its own for one test: `{prefix}-{random}`, created
    /// (with Pod Security `restricted` enforced, as sless's tenants have).
    pub fn namespace(&self, prefix: &str) -> String {
        let name = format!(
            "{prefix}-{}",
            &uuid::Uuid::new_v4().simple().to_string()[..10]
        );
        self.kubectl_ok(
            &[
                "apply",
                "--server-side",
                "--field-manager=sless-test",
                "-f",
                "-",
            ],
            Some(&format!(
                "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: {name}\n  labels:\n    \
                 pod-security.kubernetes.io/enforce: restricted\n"
            )),
        );
        name
    }
}

pub(crate) fn b64(text: &str) -> String {
    use base64::Engine;
    base64::engine::general_purpose::STANDARD.encode(text)
}

/// The DER of the first certificate of a PEM text.
fn pem_der(pem: &str) -> Vec<u8> {
    use base64::Engine;
    let body: String = pem
        .lines()
        .skip_while(|l| !l.starts_with("-----BEGIN"))
        .skip(1)
        .take_while(|l| !l.starts_with("-----END"))
        .collect();
    base64::engine::general_purpose::STANDARD
        .decode(body)
        .expect("a PEM certificate")
}

/// A free port on loopback (released again: the program binds it).
fn free_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port on loopback")
        .port()
}

/// The programs, built when missing.
fn programs() -> PathBuf {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("../scripts/ensure-kubernetes");
    let out = Command::new(&script)
        .stderr(Stdio::inherit())
        .output()
        .unwrap_or_else(|e| panic!("running {}: {e}", script.display()));
    assert!(
        out.status.success(),
        "{} failed (its output is above)",
        script.display()
    );
    PathBuf::from(String::from_utf8_lossy(&out.stdout).trim())
}

/// One started program, its log in the control plane's directory.
pub(crate) struct Program {
    pub(crate) name: &'static str,
    pub(crate) child: Child,
    pub(crate) log: PathBuf,
}

impl Program {
    pub(crate) fn start(bin: &Path, dir: &Path, name: &'static str, args: &[String]) -> Program {
        let log = dir.join(format!("{name}.log"));
        let file = std::fs::File::create(&log).expect("a log file");
        let mut cmd = Command::new(bin.join(name));
        cmd.args(args)
            .current_dir(dir)
            .stdin(Stdio::null())
            .stdout(file.try_clone().expect("a log file"))
            .stderr(file)
            .env_remove("KUBERNETES_SERVICE_HOST")
            .env_remove("KUBECONFIG");
        let parent = std::process::id() as libc::pid_t;
        // SAFETY: prctl and getppid are async-signal-safe system calls
        // without pointer arguments; nothing here allocates.
        unsafe {
            cmd.pre_exec(move || {
                if libc::prctl(libc::PR_SET_PDEATHSIG, libc::SIGKILL as libc::c_ulong) != 0 {
                    return Err(std::io::Error::last_os_error());
                }
                if libc::getppid() != parent {
                    return Err(std::io::Error::from_raw_os_error(libc::ESRCH));
                }
                Ok(())
            });
        }
        let child = cmd
            .spawn()
            .unwrap_or_else(|e| panic!("starting {name}: {e}"));
        Program { name, child, log }
    }

    /// Panics with the tail of the log when the program has exited.
    pub(crate) fn check(&mut self) {
        if let Ok(Some(status)) = self.child.try_wait() {
            panic!("{} exited ({status}):\n{}", self.name, tail(&self.log));
        }
    }
}

/// What a log says of a failure: its last error lines (klog's `E` and `F`),
/// then its last lines.
pub(crate) fn tail(path: &Path) -> String {
    let lines: Vec<String> = std::fs::File::open(path)
        .map(|f| BufReader::new(f).lines().map_while(Result::ok).collect())
        .unwrap_or_default();
    let errors: Vec<&String> = lines
        .iter()
        .filter(|l| l.starts_with('E') || l.starts_with('F'))
        .collect();
    let errors: Vec<&str> = errors[errors.len().saturating_sub(10)..]
        .iter()
        .map(|l| l.as_str())
        .collect();
    format!(
        "{}\n...\n{}",
        errors.join("\n"),
        lines[lines.len().saturating_sub(8)..].join("\n")
    )
}

/// Removes `dir` once this process has ended and `pids` have exited: a shell
/// reads a pipe whose writing end only this process holds.
fn remove_when_done(dir: &Path, pids: &[u32]) -> Child {
    let pids: Vec<String> = pids.iter().map(|p| p.to_string()).collect();
    Command::new("sh")
        .arg("-c")
        .arg(
            "cat >/dev/null; dir=$1; shift; \
             while kill -0 \"$@\" 2>/dev/null; do sleep 0.1; done; rm -rf \"$dir\"",
        )
        .arg("sless-test-kube-reaper")
        .arg(dir)
        .args(&pids)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("starting the control plane's reaper")
}

/// What the keeper thread holds until the control plane stops.
struct Held {
    _programs: Vec<Program>,
    /// Never waited for: it outlives this process. Its stdin closes when
    /// this process ends.
    _reaper: Child,
}

impl Drop for Held {
    /// Stops the programs; the reaper then removes their directory.
    fn drop(&mut self) {
        for p in self._programs.iter_mut().rev() {
            let _ = p.child.kill();
            let _ = p.child.wait();
        }
    }
}

fn start() -> (ControlPlane, Held) {
    let bin = programs();
    let started = Instant::now();
    let dir = crate::scratch_dir("kube");
    let pki = Pki::write(&dir);
    let (etcd_port, peer_port, api_port) = (free_port(), free_port(), free_port());
    let url = format!("https://127.0.0.1:{api_port}");

    let write_kubeconfig = |file: &str, cert: &str, key: &str| {
        let path = dir.join(file);
        std::fs::write(
            &path,
            format!(
                "apiVersion: v1\nkind: Config\nclusters:\n- name: test\n  cluster:\n    server: {url}\n    \
                 certificate-authority-data: {ca}\nusers:\n- name: user\n  user:\n    \
                 client-certificate-data: {cert}\n    client-key-data: {key}\ncontexts:\n- name: test\n  \
                 context:\n    cluster: test\n    user: user\ncurrent-context: test\n",
                ca = b64(&pki.ca_pem),
                cert = b64(cert),
                key = b64(key),
            ),
        )
        .expect("writing a kubeconfig");
        path
    };
    let kubeconfig = write_kubeconfig("admin.kubeconfig", &pki.admin_cert_pem, &pki.admin_key_pem);
    let node_kubeconfig =
        write_kubeconfig("node.kubeconfig", &pki.node_cert_pem, &pki.node_key_pem);
    let path = |p: &Path| p.display().to_string();

    let etcd = Program::start(
        &bin,
        &dir,
        "etcd",
        &[
            "--name=test".into(),
            format!("--data-dir={}", dir.join("etcd").display()),
            format!("--listen-client-urls=http://127.0.0.1:{etcd_port}"),
            format!("--advertise-client-urls=http://127.0.0.1:{etcd_port}"),
            format!("--listen-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-advertise-peer-urls=http://127.0.0.1:{peer_port}"),
            format!("--initial-cluster=test=http://127.0.0.1:{peer_port}"),
            "--unsafe-no-fsync".into(),
            "--log-level=warn".into(),
        ],
    );
    let apiserver = Program::start(
        &bin,
        &dir,
        "kube-apiserver",
        &[
            format!("--etcd-servers=http://127.0.0.1:{etcd_port}"),
            "--bind-address=127.0.0.1".into(),
            "--advertise-address=127.0.0.1".into(),
            // The `kubernetes` Service's endpoints may not be on loopback.
            "--endpoint-reconciler-type=none".into(),
            format!("--secure-port={api_port}"),
            format!("--tls-cert-file={}", path(&pki.server_cert)),
            format!("--tls-private-key-file={}", path(&pki.server_key)),
            format!("--client-ca-file={}", path(&pki.ca)),
            "--service-account-issuer=https://kubernetes.default.svc".into(),
            format!(
                "--service-account-key-file={}",
                path(&pki.service_accounts_public)
            ),
            format!(
                "--service-account-signing-key-file={}",
                path(&pki.service_accounts_key)
            ),
            format!("--service-cluster-ip-range={SERVICE_RANGE}"),
            "--authorization-mode=Node,RBAC".into(),
            format!("--enable-admission-plugins={ADMISSION_PLUGINS}"),
            "--disable-admission-plugins=TaintNodesByCondition".into(),
            format!("--kubelet-client-certificate={}", path(&pki.admin_cert)),
            format!("--kubelet-client-key={}", path(&pki.admin_key)),
            "--kubelet-preferred-address-types=InternalIP".into(),
            "--allow-privileged=false".into(),
            "--profiling=false".into(),
            "--v=1".into(),
        ],
    );
    let mut programs = vec![etcd, apiserver];
    let admin_client = {
        let plane = ControlPlane {
            url: url.clone(),
            dir: dir.clone(),
            bin: bin.clone(),
            kubeconfig: kubeconfig.clone(),
            node_kubeconfig: node_kubeconfig.clone(),
            ca_pem: pki.ca_pem.clone(),
            admin_cert_pem: pki.admin_cert_pem.clone(),
            admin_key_pem: pki.admin_key_pem.clone(),
            started_in: Duration::ZERO,
        };
        plane.admin_config()
    };
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a runtime");
    let _in_runtime = rt.enter();
    let ready = |what: &str, path: &str, programs: &mut Vec<Program>| {
        let deadline = Instant::now() + START_DEADLINE;
        let client = kube::Client::try_from(admin_client.clone()).expect("an admin client");
        loop {
            for p in programs.iter_mut() {
                p.check();
            }
            let req = http::Request::get(path)
                .body(Vec::new())
                .expect("a request");
            let ok = rt.block_on(async {
                tokio::time::timeout(Duration::from_secs(5), client.request_text(req)).await
            });
            if let Ok(Ok(_)) = ok {
                return;
            }
            if Instant::now() > deadline {
                let logs: Vec<String> = programs
                    .iter()
                    .map(|p| format!("--- {}:\n{}", p.name, tail(&p.log)))
                    .collect();
                panic!(
                    "{what} not ready after {START_DEADLINE:?} ({ok:?}):\n{}",
                    logs.join("\n")
                );
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    };
    ready("kube-apiserver", "/readyz", &mut programs);

    programs.push(Program::start(
        &bin,
        &dir,
        "kube-controller-manager",
        &[
            format!("--kubeconfig={}", path(&kubeconfig)),
            format!("--authentication-kubeconfig={}", path(&kubeconfig)),
            format!("--authorization-kubeconfig={}", path(&kubeconfig)),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=0".into(),
            "--leader-elect=false".into(),
            format!("--controllers={CONTROLLERS}"),
            format!(
                "--service-account-private-key-file={}",
                path(&pki.service_accounts_key)
            ),
            format!("--root-ca-file={}", path(&pki.ca)),
            "--use-service-account-credentials=false".into(),
            "--v=1".into(),
        ],
    ));
    let scheduler_config = dir.join("scheduler.yaml");
    std::fs::write(
        &scheduler_config,
        format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
             clientConnection:\n  kubeconfig: {}\nleaderElection:\n  leaderElect: false\n",
            path(&kubeconfig)
        ),
    )
    .expect("writing the scheduler's configuration");
    programs.push(Program::start(
        &bin,
        &dir,
        "kube-scheduler",
        &[
            format!("--config={}", path(&scheduler_config)),
            format!("--authentication-kubeconfig={}", path(&kubeconfig)),
            format!("--authorization-kubeconfig={}", path(&kubeconfig)),
            "--bind-address=127.0.0.1".into(),
            "--secure-port=0".into(),
            "--v=1".into(),
        ],
    ));
    // The controllers run once the service-account controller has made the
    // default namespace's ServiceAccount.
    ready(
        "kube-controller-manager",
        "/api/v1/namespaces/default/serviceaccounts/default",
        &mut programs,
    );

    let pids: Vec<u32> = programs.iter().map(|p| p.child.id()).collect();
    let reaper = remove_when_done(&dir, &pids);
    let plane = ControlPlane {
        url,
        dir,
        bin,
        kubeconfig,
        node_kubeconfig,
        ca_pem: pki.ca_pem,
        admin_cert_pem: pki.admin_cert_pem,
        admin_key_pem: pki.admin_key_pem,
        started_in: started.elapsed(),
    };
    (
        plane,
        Held {
            _programs: programs,
            _reaper: reaper,
        },
    )
}
