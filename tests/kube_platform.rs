//! sless on a real Kubernetes control plane (testkit's: kube-apiserver with
//! RBAC and the production admission plugins, the controllers and the
//! scheduler, and a test node that plays the kubelet through the API).
//!
//! `sless api`, `sless projector` and `sless worker` run as processes of
//! the built binary outside the cluster. The worker (`SLESS_DRIVER=kubernetes`)
//! reaches the cluster with `KUBECONFIG` as the ServiceAccount `sless`, with
//! what `deploy/base` grants it and nothing more, under its admission
//! policy. The test node plays kaniko (it fetches the build context from the
//! presigned URL its Secret hands it and reports a digest of what it
//! "pushed"), the function's pods and a job's pod. A user, through the API,
//! creates a function and uploads it, adds a cron trigger, runs a job, and
//! deletes the function; what the cluster then holds is checked at each step.

mod support;

use std::collections::BTreeSet;
use std::future::Future;
use std::io::Read;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::batch::v1::{CronJob, Job};
use k8s_openapi::api::core::v1::{Secret, Service};
use reqwest::Method;
use serde_json::{Value, json};
use sless_testkit::kube::{Outcome, PodView, TestNode};
use support::kube::{BUILDS, Platform, TENANT_PULL_SECRET};
use support::zip_files;

const REGISTRY: &str = "registry.test/sless";
/// How long any one step may take: a build, a rollout, a removal.
const DEADLINE: Duration = Duration::from_secs(120);
const PULL_SECRET: &str = "sless-registry-pull";
/// The variable kaniko's `--context` is expanded from.
const CONTEXT_URL_ENV: &str = "SLESS_CONTEXT_URL";

/// What the test's kaniko did with a build pod.
#[derive(Debug, Clone)]
struct Pushed {
    /// `--destination`: the tag it pushed.
    destination: String,
    /// Its termination message: `sha256:` and the sha256 of the context
    /// it fetched.
    digest: String,
    /// The files of the context.
    files: BTreeSet<String>,
}

/// Runs `f` to its end on a runtime of its own, on a thread of its own:
/// a play runs on the test node's runtime, which it must not block on.
fn off_thread<T: Send + 'static>(
    f: impl Future<Output = Result<T, String>> + Send + 'static,
) -> Result<T, String> {
    std::thread::spawn(move || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .map_err(|e| e.to_string())?
            .block_on(f)
    })
    .join()
    .map_err(|_| "the play's thread panicked".to_owned())?
}

/// The test's kaniko: fetches the context from the URL `--context` is
/// expanded from, checks it is a gzipped tar with a Dockerfile, and
/// "pushes" it: the digest is the sha256 of the context.
fn kaniko(pod: &PodView) -> Result<Pushed, String> {
    let flag = |name: &str| {
        pod.flag(name)
            .map(str::to_owned)
            .ok_or_else(|| format!("no --{name}"))
    };
    let context = flag("context")?;
    if context != format!("$({CONTEXT_URL_ENV})") {
        return Err(format!("--context={context}: not from {CONTEXT_URL_ENV}"));
    }
    let digest_file = flag("digest-file")?;
    if digest_file != "/dev/termination-log" {
        return Err(format!("--digest-file={digest_file}"));
    }
    let destination = flag("destination")?;
    // The node starts no container before its Secrets are there, as a
    // kubelet: the driver creates the build's Secret after its Job.
    let url = pod
        .env(CONTEXT_URL_ENV)
        .ok_or_else(|| format!("no {CONTEXT_URL_ENV}"))?
        .to_owned();
    let bytes = off_thread(async move {
        let res = reqwest::get(&url).await.map_err(|e| e.to_string())?;
        let status = res.status();
        let body = res.bytes().await.map_err(|e| e.to_string())?;
        if !status.is_success() {
            return Err(format!("GET {url}: {status}"));
        }
        Ok(body.to_vec())
    })?;
    let mut tar = Vec::new();
    flate2::read::GzDecoder::new(bytes.as_slice())
        .read_to_end(&mut tar)
        .map_err(|e| format!("the context is not gzip: {e}"))?;
    let mut files = BTreeSet::new();
    for entry in tar::Archive::new(tar.as_slice())
        .entries()
        .map_err(|e| format!("the context is not a tar: {e}"))?
    {
        let entry = entry.map_err(|e| format!("the context is not a tar: {e}"))?;
        let path = entry.path().map_err(|e| e.to_string())?;
        files.insert(path.to_string_lossy().into_owned());
    }
    if !files.contains("Dockerfile") {
        return Err(format!("no Dockerfile in the context: {files:?}"));
    }
    Ok(Pushed {
        destination,
        digest: format!("sha256:{}", sless_domain::archive::sha256_hex(&bytes)),
        files,
    })
}

/// A job's pod: prints the input it finds in the event file
/// `SLESS_JOB_EVENT_FILE` names, mounted from the run's Secret.
fn job(pod: &PodView) -> Outcome {
    let event = pod
        .env("SLESS_JOB_EVENT_FILE")
        .and_then(|path| pod.file(path))
        .and_then(|bytes| serde_json::from_slice::<Value>(bytes).ok());
    match event {
        Some(event) => Outcome::succeeds(&format!("input {}\n", event["json"])),
        None => Outcome::fails("the test's job: no event in SLESS_JOB_EVENT_FILE\n"),
    }
}

/// The whole life of a function on the cluster: built by kaniko from the
/// context in S3, run by the digest kaniko reported, served, fired by a
/// CronJob, run as a Job; deleted, and nothing of it left.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_function_is_built_served_run_and_removed_by_a_worker_outside_the_cluster() {
    let started = Instant::now();
    let p = Platform::start("kube-platform", DEADLINE, |_, worker| {
        worker
            .env("SLESS_KUBE_REGISTRY", REGISTRY)
            .env("SLESS_KUBE_REGISTRY_PULL_SECRET", PULL_SECRET);
    })
    .await;
    let ns = p.ns.clone();
    let node = TestNode::shared();
    let pushed: Arc<Mutex<Vec<Result<Pushed, String>>>> = Arc::default();
    let seen = pushed.clone();
    node.play(
        &format!("sless.dev/component=build,sless.dev/namespace={ns}"),
        move |pod| {
            let result = kaniko(pod);
            seen.lock().unwrap().push(result.clone());
            match result {
                Ok(p) => Outcome::succeeds(&format!("pushed {}\n", p.destination))
                    .with_termination_message(&p.digest),
                Err(e) => Outcome::fails(&format!("the test's kaniko: {e}\n")),
            }
        },
    );
    node.play_all(
        &format!("sless.dev/component=function,sless.dev/namespace={ns}"),
        Outcome::serves(),
    );
    node.play(
        &format!("sless.dev/component=job,sless.dev/namespace={ns}"),
        job,
    );

    // Create and upload.
    let (status, body) = p
        .call(
            Method::POST,
            "/functions",
            Some(json!({"name": "hello", "runtime": "python3.11", "entrypoint": "handler.handle"})),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let handler = "def handle(event):\n    return 'hello from the cluster'\n";
    let res = p
        .client
        .upload("hello", zip_files(&[("handler.py", handler)]))
        .await;
    assert_eq!(res.status(), 202);
    let f = p
        .wait("hello to be Ready", || async {
            let f = p.client.function("hello").await;
            assert_ne!(f["phase"], "Failed", "{f}\n{}", p.logs());
            if f["phase"] == "Ready" {
                Ok(f)
            } else {
                Err(f.to_string())
            }
        })
        .await;
    assert_eq!(f["deployed_version"], 1, "{f}");

    // kaniko fetched the context from S3 and pushed the version's tag once.
    let builds = pushed.lock().unwrap().clone();
    assert_eq!(builds.len(), 1, "{builds:?}");
    let build = builds[0].clone().unwrap();
    let repository = format!("{REGISTRY}/{ns}-hello");
    assert!(
        build.destination.starts_with(&format!("{repository}:v1-")),
        "{build:?}"
    );
    assert!(build.files.contains("handler.py"), "{build:?}");

    // The Deployment runs the image by the digest kaniko reported, with
    // the namespace's pull Secret; its Service is there.
    let image = format!("{repository}@{}", build.digest);
    let deployment = p.api::<Deployment>(&ns).get("hello").await.unwrap();
    let pod_spec = deployment.spec.unwrap().template.spec.unwrap();
    assert_eq!(
        pod_spec.containers[0].image.as_deref(),
        Some(image.as_str())
    );
    let pull: Vec<String> = pod_spec
        .image_pull_secrets
        .unwrap_or_default()
        .into_iter()
        .map(|s| s.name)
        .collect();
    assert_eq!(pull, [TENANT_PULL_SECRET]);
    assert!(
        p.api::<Secret>(&ns)
            .get_opt(TENANT_PULL_SECRET)
            .await
            .unwrap()
            .is_some(),
        "the pull Secret copied into {ns}"
    );
    let service = p.api::<Service>(&ns).get("hello").await.unwrap();
    let ports: Vec<i32> = service
        .spec
        .unwrap()
        .ports
        .unwrap()
        .iter()
        .map(|p| p.port)
        .collect();
    assert_eq!(ports, [8080]);
    // The build's Job stays for its TTL; the Secret with the context's
    // address went as soon as it ended.
    let build_selector = format!("sless.dev/namespace={ns},sless.dev/function=hello");
    assert_eq!(
        p.names::<Job>(BUILDS, &build_selector).await.len(),
        1,
        "the build's Job"
    );
    assert_eq!(
        p.names::<Secret>(BUILDS, &build_selector).await,
        Vec::<String>::new(),
        "the build's context Secret"
    );

    // A cron trigger is a CronJob of the same image.
    let (status, body) = p
        .call(
            Method::POST,
            "/triggers",
            Some(
                json!({"name": "nightly", "function": "hello", "type": "cron",
                "schedule": "0 3 * * *", "timezone": "Europe/Paris"}),
            ),
        )
        .await;
    assert_eq!(status, 201, "{body}");
    let cronjobs = p.api::<CronJob>(&ns);
    let cronjob = p
        .wait("the CronJob of the trigger", || async {
            let cronjob = cronjobs.get_opt("cron-nightly").await.unwrap();
            cronjob.ok_or_else(|| "no CronJob cron-nightly".to_owned())
        })
        .await;
    let spec = cronjob.spec.unwrap();
    assert_eq!(spec.schedule, "0 3 * * *");
    assert_eq!(spec.time_zone.as_deref(), Some("Europe/Paris"));
    let job_pod = spec.job_template.spec.unwrap().template.spec.unwrap();
    assert_eq!(job_pod.containers[0].image.as_deref(), Some(image.as_str()));

    // A job runs as a Job of the same image, its input in a Secret.
    let (status, body) = p
        .call(
            Method::POST,
            "/jobs",
            Some(json!({"name": "once", "function": "hello", "input": {"n": 7}})),
        )
        .await;
    assert!(status == 201 || status == 202, "{status} {body}");
    let run = p
        .wait("the job to succeed", || async {
            let (_, run) = p.call(Method::GET, "/jobs/once", None).await;
            assert_ne!(run["status"], "Failed", "{run}\n{}", p.logs());
            if run["status"] == "Succeeded" {
                Ok(run)
            } else {
                Err(run.to_string())
            }
        })
        .await;
    assert_eq!(run["stdout"]["text"], "input {\"n\":7}\n", "{run}");
    let runs = p.names::<Job>(&ns, "sless.dev/job=once").await;
    assert_eq!(runs.len(), 1, "the job's Job: {runs:?}");

    // Everything is there to be removed.
    let before = p.left_of("hello").await;
    for kind in [
        "deployment",
        "service",
        "replicaset",
        "pod",
        "cronjob",
        "job",
        "secret",
        "build job",
        "build pod",
    ] {
        assert!(
            before.iter().any(|o| o.starts_with(&format!("{kind} "))),
            "no {kind} before the delete: {before:?}"
        );
    }

    let (status, body) = p.call(Method::DELETE, "/functions/hello", None).await;
    assert_eq!(status, 202, "{body}");
    p.wait("nothing of hello left on the cluster", || async {
        let left = p.left_of("hello").await;
        if left.is_empty() {
            Ok(())
        } else {
            Err(format!("{left:?}"))
        }
    })
    .await;
    let f = p.client.function("hello").await;
    assert!(f["phase"] == "Deleted" || f["status"] == 404, "{f}");
    eprintln!("the whole life on the cluster took {:?}", started.elapsed());
}
