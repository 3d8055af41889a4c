//! sless installed INTO the cluster from `deploy/`, as docs/kubernetes.md
//! "Installing" tells an operator to: a copy of `deploy/base` and
//! `deploy/overlays/example` made at test time, its settings and secret
//! files filled in for this node, applied with `kubectl apply -k`. Its image
//! is `deploy/Dockerfile`'s, made here from the test's own binary (a debug
//! build: a release build takes more than ten minutes on two cores) by
//! `sless_testkit::kube::sless_image`.
//!
//! What the pods reach, the test serves on loopback: PostgreSQL, S3 and the
//! API server each get a TCP front on the node's gateway; the `kubernetes`
//! Service (10.0.0.1:443, the address a pod's in-cluster configuration
//! names) gets the EndpointSlice its API server does not write here
//! (`--endpoint-reconciler-type=none`), pointing at the API server's front.
//! Presigned URLs for kaniko are HTTPS through the TLS front, trusting the
//! node's CA from a Secret the overlay adds. No cluster DNS runs on this
//! node, so the workers record each function's Service by its cluster IP.
//!
//! Then: the api, worker and projector pods Ready, `/healthz` through the
//! API's Service from outside, and the walkthrough through the API in the
//! cluster: a python3.11 function created, uploaded, built by kaniko, Ready,
//! called through the functions' port of the same Service, scaled to zero
//! and started again, called on while every Deployment of sless is
//! restarted in turn (`rolling.rs`), deleted.

use std::net::SocketAddr;
use std::path::Path;
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::{Pod, Service};
use kube::api::{Api, ListParams};
use reqwest::Url;
use serde_json::{Value, json};
use sless_testkit::kube::{Cluster, ControlPlane, IMAGE_TAG, sless_image, tcp_front};
use sless_testkit::{TestDb, TestS3, eventually};

use crate::rolling::{self, COLD};
use crate::support::{Client, zip_dir};
use crate::{BUILD_CA_SECRET, DEADLINE, cluster_tier};

/// The user of the walkthrough.
const SUB: &str = "cluster-in-cluster";
pub const SYSTEM: &str = "sless";
const ROLES: [&str; 3] = ["sless-api", "sless-worker", "sless-projector"];
/// The functions' origin: no ingress here, the functions' port of the
/// API's Service, by the name cluster DNS would give it.
const FN_URL: &str = "http://sless-api.sless.svc:81";
/// The function's idle window before it is scaled to zero.
const IDLE_SEC: u32 = 2;
/// How long the pods may take to be Ready: the image pull of a debug
/// build and `sless migrate` in each pod's init container.
pub const ROLLOUT_DEADLINE: Duration = Duration::from_secs(300);

fn root() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The loopback address a URL names.
fn address(url: &str) -> SocketAddr {
    let url = Url::parse(url).unwrap_or_else(|e| panic!("{url}: {e}"));
    let host = url.host_str().expect("a host");
    let port = url.port_or_known_default().expect("a port");
    format!("{host}:{port}").parse().expect("an IP address")
}

/// `url` with its host and port those of `to`.
fn through(url: &str, to: SocketAddr) -> String {
    let mut url = Url::parse(url).unwrap();
    url.set_ip_host(to.ip()).unwrap();
    url.set_port(Some(to.port())).unwrap();
    url.to_string()
}

/// Copies the files of `from` (not its subdirectories) into `to`.
fn copy_files(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let path = entry.unwrap().path();
        if path.is_file() {
            std::fs::copy(&path, to.join(path.file_name().unwrap())).unwrap();
        }
    }
}

/// `text` with `from` replaced by `to`; `from` must be there (the example
/// overlay says what an operator changes).
fn replaced(text: &str, from: &str, to: &str) -> String {
    assert!(
        text.contains(from),
        "the example overlay no longer has {from:?}"
    );
    text.replacen(from, to, 1)
}

/// The settings and secrets of the overlay for this node.
struct Settings {
    image: String,
    repository: String,
    kaniko: String,
    database_url: String,
    s3: SocketAddr,
    s3_presign: SocketAddr,
    s3_access: String,
    s3_secret: String,
    jwt_secret: String,
    ca_pem: String,
}

/// A copy of `deploy/` in `dir` whose example overlay is filled in as an
/// operator fills it in; returns the overlay's directory.
fn overlay(dir: &Path, s: &Settings) -> std::path::PathBuf {
    let deploy = dir.join("deploy");
    copy_files(&root().join("deploy/base"), &deploy.join("base"));
    let overlay = deploy.join("overlays/example");
    copy_files(&root().join("deploy/overlays/example"), &overlay);
    let (name, tag) = s.image.rsplit_once(':').expect("an image with a tag");
    let k = std::fs::read_to_string(overlay.join("kustomization.yaml")).unwrap();
    let k = replaced(
        &k,
        "  newName: registry.example.com/sless/sless\n  newTag: 0.1.0\n",
        &format!("  newName: {name}\n  newTag: {tag}\n"),
    );
    let k = replaced(
        &k,
        "  - SLESS_KUBE_REGISTRY=registry.example.com/sless\n",
        &format!("  - SLESS_KUBE_REGISTRY={}\n", s.repository),
    );
    let k = replaced(
        &k,
        "  - S3_ENDPOINT=https://s3.example.com\n",
        &format!("  - S3_ENDPOINT=http://{}\n", s.s3),
    );
    let k = replaced(
        &k,
        "  - S3_REGION=eu-central-1\n",
        "  - S3_REGION=us-east-1\n",
    );
    let more = [
        // No ingress here: the functions' port of the API's Service.
        format!("SLESS_FN_URL={FN_URL}"),
        format!("S3_PRESIGN_ENDPOINT=https://{}", s.s3_presign),
        format!("SLESS_KUBE_KANIKO_IMAGE={}", s.kaniko),
        format!(
            "SLESS_KUBE_RUNTIME_IMAGE_PREFIX={}/sless-runtime-",
            s.repository
        ),
        format!("SLESS_KUBE_RUNTIME_IMAGE_TAG={IMAGE_TAG}"),
        format!("SLESS_KUBE_BUILD_CA_SECRET={BUILD_CA_SECRET}"),
        "SLESS_KUBE_FUNCTION_ADDRESS=cluster-ip".to_owned(),
        "NO_COLOR=1".to_owned(),
    ]
    .map(|l| format!("  - {l}\n"))
    .concat();
    let k = replaced(&k, "  - SLESS_FN_URL=https://fn.sless.example.com\n", &more);
    // The node's CA, which kaniko trusts besides the public ones.
    let k = replaced(
        &k,
        "secretGenerator:\n",
        &format!(
            "secretGenerator:\n- name: {BUILD_CA_SECRET}\n  namespace: sless-builds\n  files:\n  \
             - ca.crt=build-ca.crt\n  options:\n    disableNameSuffixHash: true\n"
        ),
    );
    std::fs::write(overlay.join("kustomization.yaml"), k).unwrap();
    std::fs::write(overlay.join("build-ca.crt"), &s.ca_pem).unwrap();
    std::fs::write(
        overlay.join("database.env"),
        format!("DATABASE_URL={}\n", s.database_url),
    )
    .unwrap();
    std::fs::write(
        overlay.join("s3.env"),
        format!(
            "S3_ACCESS_KEY_ID={}\nS3_SECRET_ACCESS_KEY={}\n",
            s.s3_access, s.s3_secret
        ),
    )
    .unwrap();
    std::fs::write(
        overlay.join("jwt.env"),
        format!("SLESS_JWT_SECRET={}\n", s.jwt_secret),
    )
    .unwrap();
    // The node's registry takes any credentials.
    use base64::Engine;
    let auth = base64::engine::general_purpose::STANDARD.encode("sless:sless");
    let registry = s.repository.split('/').next().unwrap();
    let docker_config = json!({"auths": {registry: {"auth": auth}}}).to_string();
    std::fs::write(overlay.join("registry-push.json"), &docker_config).unwrap();
    std::fs::write(overlay.join("registry-pull.json"), &docker_config).unwrap();
    overlay
}

/// What the pods of sless say: their phases, events and the last lines of
/// their logs, for a failing step to show.
fn pods_report(plane: &ControlPlane, namespaces: &[&str]) -> String {
    let mut out = String::new();
    for ns in namespaces {
        for args in [
            vec!["-n", ns, "get", "pods", "-o", "wide"],
            vec!["-n", ns, "get", "events", "--sort-by=.lastTimestamp"],
            vec![
                "-n",
                ns,
                "logs",
                "--all-containers",
                "--prefix",
                "--tail=30",
                "-l",
                "app.kubernetes.io/name=sless",
            ],
        ] {
            let o = plane.kubectl_run(&args, None);
            out.push_str(&format!(
                "--- kubectl {}:\n{}{}\n",
                args.join(" "),
                String::from_utf8_lossy(&o.stdout),
                String::from_utf8_lossy(&o.stderr)
            ));
        }
    }
    out
}

/// Waits for `check` to be `Ok` until `deadline`; when it never is, panics
/// with what it said last and the pods' report.
pub async fn wait<T, Fut>(
    what: &str,
    deadline: Duration,
    report: &impl Fn() -> String,
    mut check: impl FnMut() -> Fut,
) -> T
where
    Fut: std::future::Future<Output = Result<T, String>>,
{
    let started = Instant::now();
    let last = std::sync::Mutex::new(String::new());
    let waiting = eventually(what, deadline + Duration::from_secs(5), || {
        let seen = check();
        let last = &last;
        async move { seen.await.map_err(|e| *last.lock().unwrap() = e).ok() }
    });
    match tokio::time::timeout(deadline, waiting).await {
        Ok(v) => {
            eprintln!("{what}: {:?}", started.elapsed());
            v
        }
        Err(_) => panic!(
            "timed out after {deadline:?} waiting for {what}; last seen: {}\n{}",
            last.lock().unwrap(),
            report()
        ),
    }
}

/// A token of `SUB`, made as docs/kubernetes.md tells an operator to
/// (`SLESS_JWT_SECRET=... sless token --sub NAME`).
fn operator_token(secret: &str) -> String {
    let out = std::process::Command::new(env!("CARGO_BIN_EXE_sless"))
        .args(["token", "--sub", SUB])
        .env("SLESS_JWT_SECRET", secret)
        .current_dir(std::env::temp_dir())
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "sless token: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8_lossy(&out.stdout).trim().to_owned()
}

/// The lines of sless's pods' logs (every container, restarts' too) at
/// level ERROR or WARN.
fn error_lines(plane: &ControlPlane) -> Vec<String> {
    let out = plane.kubectl_ok(
        &[
            "-n",
            SYSTEM,
            "logs",
            "--all-containers",
            "--prefix",
            "--tail=-1",
            "-l",
            "app.kubernetes.io/name=sless",
        ],
        None,
    );
    out.lines()
        .filter(|l| l.contains(" ERROR ") || l.contains(" WARN "))
        .filter(|l| !LOAD_WARNINGS.iter().any(|w| l.contains(w)))
        .map(str::to_owned)
        .collect()
}

/// Warnings that say how busy the machine was, not that sless did wrong:
/// sqlx's slow acquire of a connection and slow statement (two cores
/// running the cluster, its pods and other tests at once).
const LOAD_WARNINGS: [&str; 2] = [
    "sqlx::pool::acquire: acquired connection, but time to acquire exceeded slow threshold",
    "sqlx::query: slow statement",
];

/// Waits until every role's Deployment has rolled out and has as many
/// Ready pods as it wants, none of them being deleted or named in `gone`.
async fn all_ready(
    deployments: &Api<Deployment>,
    pods: &Api<Pod>,
    gone: &[String],
    report: &impl Fn() -> String,
) {
    wait("sless's pods Ready", ROLLOUT_DEADLINE, report, || async {
        let e = |e: kube::Error| e.to_string();
        let selector = ListParams::default().labels("app.kubernetes.io/name=sless");
        let list = pods.list(&selector).await.map_err(e)?.items;
        let mut waiting = Vec::new();
        for role in ROLES {
            let d = deployments.get(role).await.map_err(e)?;
            let want = d.spec.as_ref().and_then(|s| s.replicas).unwrap_or(1);
            let updated = d.status.and_then(|s| s.updated_replicas).unwrap_or(0);
            let component = role.strip_prefix("sless-").unwrap();
            let ready = list
                .iter()
                .filter(|p| {
                    let m = &p.metadata;
                    let labels = m.labels.clone().unwrap_or_default();
                    labels
                        .get("app.kubernetes.io/component")
                        .map(String::as_str)
                        == Some(component)
                        && m.deletion_timestamp.is_none()
                        && !gone.contains(m.name.as_ref().unwrap())
                        && p.status
                            .as_ref()
                            .and_then(|s| s.conditions.as_ref())
                            .is_some_and(|c| {
                                c.iter().any(|c| c.type_ == "Ready" && c.status == "True")
                            })
                })
                .count() as i32;
            if ready < want || updated < want {
                waiting.push(format!(
                    "{role}: {ready} of {want} ready, {updated} updated"
                ));
            }
        }
        if waiting.is_empty() {
            Ok(())
        } else {
            Err(waiting.join("; "))
        }
    })
    .await;
}

/// Each container of sless's pods that restarted: how its last run ended
/// and the end of what it printed.
async fn restarts(plane: &ControlPlane, pods: &Api<Pod>) -> Vec<String> {
    let selector = ListParams::default().labels("app.kubernetes.io/name=sless");
    let mut restarted = Vec::new();
    for pod in pods.list(&selector).await.unwrap() {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let status = pod.status.unwrap_or_default();
        let containers = status
            .init_container_statuses
            .unwrap_or_default()
            .into_iter()
            .chain(status.container_statuses.unwrap_or_default());
        for c in containers.filter(|c| c.restart_count > 0) {
            let ended = c.last_state.and_then(|s| s.terminated);
            let how = ended.map(|t| {
                format!(
                    "{} (exit code {}): {}",
                    t.reason.unwrap_or_default(),
                    t.exit_code,
                    t.message.unwrap_or_default()
                )
            });
            let out = plane.kubectl_run(
                &[
                    "-n",
                    SYSTEM,
                    "logs",
                    &name,
                    "-c",
                    &c.name,
                    "--previous",
                    "--tail=20",
                ],
                None,
            );
            restarted.push(format!(
                "{name}/{}: {} restarts, last ended {}\n{}{}",
                c.name,
                c.restart_count,
                how.unwrap_or_default(),
                String::from_utf8_lossy(&out.stdout),
                String::from_utf8_lossy(&out.stderr)
            ));
        }
    }
    restarted
}

/// Removes sless's own workloads when the test ends, however it ends, so
/// they do not run on beside the rest of the tier.
struct Workloads(&'static ControlPlane);

impl Drop for Workloads {
    fn drop(&mut self) {
        let mut args = vec!["-n", SYSTEM, "delete", "deployment", "--wait=false"];
        args.extend(ROLES);
        self.0.kubectl_run(&args, None);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sless_installed_from_deploy_answers_and_runs_the_walkthrough() {
    let Some(_one_at_a_time) = cluster_tier().await else {
        return;
    };
    let started = Instant::now();
    let cluster = Cluster::shared();
    let plane = cluster.plane();
    // The operator's part of deploy/base that other tests of the tier share
    // (namespaces, RBAC): installed before this test applies it again.
    sless_testkit::kube::installed().await;

    let image_started = Instant::now();
    let image = tokio::task::spawn_blocking(|| {
        sless_image(
            Cluster::shared(),
            Path::new(env!("CARGO_BIN_EXE_sless")),
            "test",
        )
    })
    .await
    .unwrap();
    eprintln!(
        "sless's image {image} made and pushed: {:?}",
        image_started.elapsed()
    );

    let db = TestDb::new().await;
    let s3 = TestS3::new().await;
    let s3_url = s3.config.endpoint.clone().expect("the S3 server's URL");
    let s3_addr = address(&s3_url);
    let database = tcp_front(address(&db.url));
    cluster.route_kubernetes_service();
    let jwt_secret = sless_embedded::random_secret() + &sless_embedded::random_secret();
    assert!(jwt_secret.len() >= 32);
    let settings = Settings {
        image,
        repository: cluster.repository(),
        kaniko: cluster.image("kaniko-executor"),
        database_url: through(&db.url, database),
        s3: tcp_front(s3_addr),
        s3_presign: cluster.tls_front(s3_addr),
        s3_access: s3.config.access_key.clone(),
        s3_secret: s3.config.secret_key.clone(),
        jwt_secret: jwt_secret.clone(),
        ca_pem: cluster.ca_pem().to_owned(),
    };
    let dir = tempfile::tempdir().unwrap();
    let overlay = overlay(dir.path(), &settings);
    let _workloads = Workloads(plane);
    let out = plane.kubectl_run(
        &[
            "apply",
            "--server-side",
            "--force-conflicts",
            "-k",
            overlay.to_str().unwrap(),
        ],
        None,
    );
    let said = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "kubectl apply -k deploy/overlays/example:\n{said}{}",
        String::from_utf8_lossy(&out.stdout)
    );
    assert!(!said.contains("Warning"), "the apply warned:\n{said}");

    let ns = sless_domain::Namespace::for_subject(SUB).to_string();
    let report = || pods_report(plane, &[SYSTEM, "sless-builds", &ns]);
    let admin = plane.admin();
    let deployments: Api<Deployment> = Api::namespaced(admin.clone(), SYSTEM);
    let pods: Api<Pod> = Api::namespaced(admin.clone(), SYSTEM);
    let rollout = Instant::now();
    all_ready(&deployments, &pods, &[], &report).await;
    eprintln!("applied to Ready: {:?}", rollout.elapsed());

    let services: Api<Service> = Api::namespaced(admin.clone(), SYSTEM);
    let ip = services
        .get("sless-api")
        .await
        .unwrap()
        .spec
        .and_then(|s| s.cluster_ip)
        .expect("the API's cluster IP");
    let http = reqwest::Client::builder()
        .timeout(Duration::from_secs(30))
        .build()
        .unwrap();
    let healthz = Instant::now();
    let url = format!("http://{ip}");
    // Ready pods are routed once kube-proxy has written their Service's
    // rules, a moment after they are Ready: until then a connection is
    // refused.
    wait(
        "the API's Service to route",
        Duration::from_secs(30),
        &report,
        || {
            let (http, url) = (http.clone(), url.clone());
            async move {
                http.get(format!("{url}/healthz"))
                    .send()
                    .await
                    .map(|_| ())
                    .map_err(|e| e.to_string())
            }
        },
    )
    .await;
    for path in ["/healthz", "/readyz"] {
        let res = http.get(format!("{url}{path}")).send().await;
        let res = res.unwrap_or_else(|e| panic!("GET {url}{path}: {e}\n{}", report()));
        assert_eq!(res.status(), 200, "{path}\n{}", report());
    }
    eprintln!(
        "/healthz and /readyz through the Service: {:?}",
        healthz.elapsed()
    );
    // Every role serves its metrics on the port its pod's annotations name.
    let selector = ListParams::default().labels("app.kubernetes.io/name=sless");
    for pod in pods.list(&selector).await.unwrap() {
        let name = pod.metadata.name.clone().unwrap_or_default();
        let annotations = pod.metadata.annotations.clone().unwrap_or_default();
        let ip = pod.status.and_then(|s| s.pod_ip).expect("a pod IP");
        let metrics = format!(
            "http://{ip}:{}{}",
            annotations["prometheus.io/port"], annotations["prometheus.io/path"]
        );
        // The worker and the projector have no probe: Ready once started,
        // a moment before they listen.
        wait(&format!("{name}'s metrics"), DEADLINE, &report, || async {
            match http.get(&metrics).send().await {
                Ok(res) if res.status() == 200 => Ok(()),
                Ok(res) => Err(format!("GET {metrics}: {}", res.status())),
                Err(e) => Err(format!("GET {metrics}: {e}")),
            }
        })
        .await;
    }
    let restarted = restarts(plane, &pods).await;
    assert!(
        restarted.is_empty(),
        "sless's containers restarted before they were Ready:\n{}",
        restarted.join("\n")
    );

    let walkthrough = Instant::now();
    let client = Client {
        url: url.clone(),
        fn_url: format!("http://{ip}:81"),
        token: operator_token(&jwt_secret),
        namespace: ns.clone(),
        http,
    };
    let res = client
        .create(json!({
            "name": "hello", "runtime": "python3.11", "entrypoint": "handler.handle",
            "scale_to_zero_after_sec": IDLE_SEC,
        }))
        .await;
    let status = res.status();
    assert_eq!(status, 201, "{}\n{}", res.text().await.unwrap(), report());
    let res = client
        .upload("hello", zip_dir(&root().join("examples/hello-python")))
        .await;
    assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    // The function the rolling restart calls from zero: built meanwhile.
    rolling::create_cold(&client, IDLE_SEC).await;
    wait("hello to be Ready", DEADLINE, &report, || async {
        let f = client.function("hello").await;
        if f["phase"] == "Failed" {
            let log: Value = client
                .http
                .get(client.v1("/functions/hello/build-log"))
                .bearer_auth(&client.token)
                .send()
                .await
                .unwrap()
                .json()
                .await
                .unwrap_or(Value::Null);
            panic!("hello failed: {f}\nbuild log: {log}\n{}", report());
        }
        if f["phase"] == "Ready" {
            Ok(f)
        } else {
            Err(f.to_string())
        }
    })
    .await;
    // The API's origin points /fn at the functions' (SLESS_FN_URL).
    let no_redirects = reqwest::Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
        .unwrap();
    let res = no_redirects
        .get(format!("{url}/fn/{ns}/hello"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 308);
    assert_eq!(
        res.headers()["location"],
        format!("{FN_URL}/fn/{ns}/hello").as_str()
    );
    let call = format!("{}/fn/{ns}/hello?name=kube", client.fn_url);
    let res = client.http.get(&call).send().await.unwrap();
    let status = res.status();
    let body = res.text().await.unwrap();
    assert_eq!(status, 200, "GET {call}: {body}\n{}", report());
    assert!(body.contains("hello, kube"), "{body}");
    eprintln!("hello answered at {}", chrono::Utc::now().to_rfc3339());

    // Idle past its window it goes to zero; then calls that reach both
    // API replicas at once (the Service spreads them) cause one start, and
    // are all answered.
    let tenant_deployments: Api<Deployment> = Api::namespaced(admin.clone(), &ns);
    wait("hello at zero", DEADLINE, &report, || async {
        let f = client.function("hello").await;
        let hello = ListParams::default().labels("sless.dev/function=hello");
        let replicas: Vec<i32> = tenant_deployments
            .list(&hello)
            .await
            .map_err(|e| e.to_string())?
            .items
            .into_iter()
            .map(|d| d.spec.and_then(|s| s.replicas).unwrap_or(1))
            .collect();
        if f["instances"] == 0 && replicas == [0] {
            Ok(())
        } else {
            Err(format!("{f}; replicas {replicas:?}"))
        }
    })
    .await;
    let scaled_up = || async {
        let page: Value = client
            .http
            .get(client.v1("/events?function=hello&type=FunctionScaledUp"))
            .bearer_auth(&client.token)
            .send()
            .await
            .unwrap()
            .json()
            .await
            .unwrap();
        page["items"].as_array().map_or(0, Vec::len)
    };
    // When each step of hello's life was recorded, for the timings.
    let history: Value = client
        .http
        .get(client.v1("/events?function=hello"))
        .bearer_auth(&client.token)
        .send()
        .await
        .unwrap()
        .json()
        .await
        .unwrap();
    for e in history["items"].as_array().into_iter().flatten() {
        eprintln!(
            "  {} {} by {}: {}",
            e["time"], e["type"], e["actor"], e["data"]
        );
    }
    let before = scaled_up().await;
    let woken = Instant::now();
    let calls = (0..4).map(|i| {
        let http = client.http.clone();
        let call = format!("{}/fn/{ns}/hello?name=cold{i}", client.fn_url);
        async move {
            let res = http.get(&call).send().await.unwrap();
            (i, res.status(), res.text().await.unwrap())
        }
    });
    for (i, status, body) in futures_util::future::join_all(calls).await {
        assert_eq!(status, 200, "call {i} from zero: {body}\n{}", report());
        assert!(body.contains(&format!("hello, cold{i}")), "{body}");
    }
    eprintln!("4 calls from zero answered: {:?}", woken.elapsed());
    assert_eq!(scaled_up().await - before, 1, "one start for 4 calls");

    client.wait_ready(COLD, DEADLINE).await;
    rolling::restart_every_role_under_load(admin.clone(), &client, "hello", &report).await;

    for name in ["hello", COLD] {
        let res = client
            .http
            .delete(client.v1(&format!("/functions/{name}")))
            .bearer_auth(&client.token)
            .send()
            .await
            .unwrap();
        assert_eq!(res.status(), 202, "{}", res.text().await.unwrap());
    }
    let tenant_services: Api<Service> = Api::namespaced(admin.clone(), &ns);
    let tenant_pods: Api<Pod> = Api::namespaced(admin, &ns);
    wait(
        "nothing of the functions on the cluster",
        DEADLINE,
        &report,
        || async {
            let all = ListParams::default();
            let e = |e: kube::Error| e.to_string();
            let mut left: Vec<String> = Vec::new();
            for d in tenant_deployments.list(&all).await.map_err(e)?.items {
                left.push(format!(
                    "deployment {}",
                    d.metadata.name.unwrap_or_default()
                ));
            }
            for s in tenant_services.list(&all).await.map_err(e)?.items {
                left.push(format!("service {}", s.metadata.name.unwrap_or_default()));
            }
            for p in tenant_pods.list(&all).await.map_err(e)?.items {
                left.push(format!("pod {}", p.metadata.name.unwrap_or_default()));
            }
            if left.is_empty() {
                Ok(())
            } else {
                Err(format!("{left:?}"))
            }
        },
    )
    .await;
    let gone = client.function("hello").await;
    assert_eq!(gone["status"], 404, "{gone}");
    let res = client.http.get(&call).send().await.unwrap();
    assert_eq!(res.status(), 404, "{}", res.text().await.unwrap());
    eprintln!("the walkthrough: {:?}", walkthrough.elapsed());

    // Every role ends on SIGTERM as its container's first process, well
    // within the pods' grace (a process 1 that ignored it would be killed
    // at 30 s), and comes back.
    let selector = ListParams::default().labels("app.kubernetes.io/name=sless");
    let before: Vec<String> = pods
        .list(&selector)
        .await
        .unwrap()
        .items
        .into_iter()
        .filter_map(|p| p.metadata.name)
        .collect();
    let stopping = Instant::now();
    plane.kubectl_ok(
        &[
            "-n",
            SYSTEM,
            "delete",
            "pods",
            "-l",
            "app.kubernetes.io/name=sless",
            "--wait=true",
            "--timeout=60s",
        ],
        None,
    );
    let stopped = stopping.elapsed();
    eprintln!("sless's pods deleted: {stopped:?}");
    assert!(
        stopped < Duration::from_secs(20),
        "sless's pods took {stopped:?} to stop\n{}",
        report()
    );
    all_ready(&deployments, &pods, &before, &report).await;
    let res = client
        .http
        .get(format!("{url}/readyz"))
        .send()
        .await
        .unwrap();
    assert_eq!(res.status(), 200);

    let errors = error_lines(plane);
    assert!(
        errors.is_empty(),
        "sless's pods logged errors:\n{}",
        errors.join("\n")
    );
    eprintln!("in all: {:?}", started.elapsed());
}
